//! A small byte encoding for what crosses process boundaries: frames in flight between
//! partitions of different processes, and the counters and actor states gathered at the end of
//! a run (see the `mpi` feature).
//!
//! Fixed-width little-endian integers and length-prefixed byte strings, written in a fixed
//! order by one side and read back in the same order by the other: both sides are the same
//! binary, so no schema or versioning is needed, and nothing is lost (a frame read back is the
//! frame written: header, payload, trailer, corruption flag and bookkeeping).

use bytes::Bytes;

use super::queue::EventKey;
use super::worker::Remote;
use super::EngineError;
use crate::packet::{Packet, Payload};
use crate::units::Time;

/// Appends values to a byte buffer.
#[derive(Debug, Default)]
pub struct Writer {
    /// What was written so far.
    pub buf: Vec<u8>,
}

impl Writer {
    /// Appends `v`.
    pub fn u8(&mut self, v: u8) {
        self.buf.push(v);
    }
    /// Appends `v`.
    pub fn u16(&mut self, v: u16) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }
    /// Appends `v`.
    pub fn u32(&mut self, v: u32) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }
    /// Appends `v`.
    pub fn u64(&mut self, v: u64) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }
    /// Appends `v` (as 8 bytes, so a length or index means the same on every platform).
    pub fn usize(&mut self, v: usize) {
        self.u64(v as u64);
    }
    /// Appends `v` as one byte.
    pub fn bool(&mut self, v: bool) {
        self.u8(u8::from(v));
    }
    /// Appends a time (ps).
    pub fn time(&mut self, v: Time) {
        self.u64(v.ps());
    }
    /// Appends an optional `u64` (a presence flag, then the value).
    pub fn opt_u64(&mut self, v: Option<u64>) {
        self.bool(v.is_some());
        self.u64(v.unwrap_or(0));
    }
    /// Appends an optional time.
    pub fn opt_time(&mut self, v: Option<Time>) {
        self.opt_u64(v.map(Time::ps));
    }
    /// Appends a string (its UTF-8 bytes, length-prefixed).
    pub fn str(&mut self, v: &str) {
        self.bytes(v.as_bytes());
    }
    /// Appends the length of `v`, then `v`.
    pub fn bytes(&mut self, v: &[u8]) {
        self.usize(v.len());
        self.buf.extend_from_slice(v);
    }
    /// Appends a frame.
    pub fn packet(&mut self, p: &Packet) {
        self.bytes(p.header());
        match p.payload() {
            Payload::Data(b) => {
                self.u8(1);
                self.bytes(b);
            }
            Payload::Timing(n) => {
                self.u8(0);
                self.u32(*n);
            }
        }
        self.bytes(p.trailer());
        self.bool(p.is_corrupted());
        self.u64(p.meta.created_at.ps());
        self.u32(p.meta.message_len);
        self.u32(p.meta.message_remaining);
    }
    /// Appends a frame for another partition.
    // Frames cross processes only over MPI.
    #[cfg_attr(not(feature = "mpi"), allow(dead_code))]
    pub(crate) fn remote(&mut self, r: &Remote) {
        self.u64(r.key.time);
        self.u64(r.key.tie);
        self.u32(r.dst);
        self.u16(r.port);
        self.packet(&r.packet);
    }
}

/// Reads back what a [`Writer`] wrote, in the same order.
#[derive(Debug)]
pub struct Reader<'a> {
    rest: &'a [u8],
}

/// A buffer that ends before what its reader expects: the two sides disagree.
fn short() -> EngineError {
    EngineError::Failure("a message between processes ended early".into())
}

impl<'a> Reader<'a> {
    /// A reader of `buf`.
    pub fn new(buf: &'a [u8]) -> Reader<'a> {
        Reader { rest: buf }
    }
    /// Bytes left to read.
    pub fn remaining(&self) -> usize {
        self.rest.len()
    }
    /// True when everything was read.
    pub fn is_empty(&self) -> bool {
        self.rest.is_empty()
    }
    fn take(&mut self, n: usize) -> Result<&'a [u8], EngineError> {
        if self.rest.len() < n {
            return Err(short());
        }
        let (a, b) = self.rest.split_at(n);
        self.rest = b;
        Ok(a)
    }
    fn array<const N: usize>(&mut self) -> Result<[u8; N], EngineError> {
        let mut a = [0; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }
    /// Reads a `u8`.
    pub fn u8(&mut self) -> Result<u8, EngineError> {
        Ok(self.array::<1>()?[0])
    }
    /// Reads a `u16`.
    pub fn u16(&mut self) -> Result<u16, EngineError> {
        Ok(u16::from_le_bytes(self.array()?))
    }
    /// Reads a `u32`.
    pub fn u32(&mut self) -> Result<u32, EngineError> {
        Ok(u32::from_le_bytes(self.array()?))
    }
    /// Reads a `u64`.
    pub fn u64(&mut self) -> Result<u64, EngineError> {
        Ok(u64::from_le_bytes(self.array()?))
    }
    /// Reads a `usize` written by [`Writer::usize`].
    pub fn usize(&mut self) -> Result<usize, EngineError> {
        usize::try_from(self.u64()?).map_err(|_| short())
    }
    /// Reads a `bool`.
    pub fn bool(&mut self) -> Result<bool, EngineError> {
        Ok(self.u8()? != 0)
    }
    /// Reads a time written by [`Writer::time`].
    pub fn time(&mut self) -> Result<Time, EngineError> {
        Ok(Time(self.u64()?))
    }
    /// Reads an optional `u64` written by [`Writer::opt_u64`].
    pub fn opt_u64(&mut self) -> Result<Option<u64>, EngineError> {
        let some = self.bool()?;
        let v = self.u64()?;
        Ok(some.then_some(v))
    }
    /// Reads an optional time written by [`Writer::opt_time`].
    pub fn opt_time(&mut self) -> Result<Option<Time>, EngineError> {
        Ok(self.opt_u64()?.map(Time))
    }
    /// Reads a string written by [`Writer::str`].
    pub fn string(&mut self) -> Result<String, EngineError> {
        String::from_utf8(self.bytes()?.to_vec()).map_err(|_| short())
    }
    /// Reads a length-prefixed byte string.
    pub fn bytes(&mut self) -> Result<&'a [u8], EngineError> {
        let n = self.usize()?;
        self.take(n)
    }
    /// Reads a frame.
    pub fn packet(&mut self) -> Result<Packet, EngineError> {
        let header = self.bytes()?;
        let payload = match self.u8()? {
            0 => Payload::Timing(self.u32()?),
            _ => Payload::data(Bytes::copy_from_slice(self.bytes()?)),
        };
        let trailer = self.bytes()?;
        let mut p = Packet::new(header, payload, trailer)
            .map_err(|e| EngineError::Failure(format!("a frame between processes: {e}")))?;
        p.set_corrupted(self.bool()?);
        p.meta.created_at = Time(self.u64()?);
        p.meta.message_len = self.u32()?;
        p.meta.message_remaining = self.u32()?;
        Ok(p)
    }
    /// Reads a frame for another partition.
    #[cfg_attr(not(feature = "mpi"), allow(dead_code))]
    pub(crate) fn remote(&mut self) -> Result<Remote, EngineError> {
        Ok(Remote {
            key: EventKey {
                time: self.u64()?,
                tie: self.u64()?,
            },
            dst: self.u32()?,
            port: self.u16()?,
            packet: self.packet()?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_read_back_as_written() {
        let mut p = Packet::new(
            &[1, 2, 3, 4],
            Payload::data(Bytes::from_static(b"xyz")),
            &[9],
        )
        .unwrap();
        p.set_corrupted(true);
        p.meta.created_at = Time(77);
        p.meta.message_len = 4096;
        p.meta.message_remaining = 3;
        let timing = Packet::new(&[5; 60], Payload::Timing(4000), &[]).unwrap();
        let r = Remote {
            key: EventKey { time: 10, tie: 11 },
            dst: 12,
            port: 13,
            packet: p,
        };
        let mut w = Writer::default();
        w.remote(&r);
        w.packet(&timing);
        w.usize(99);
        let mut rd = Reader::new(&w.buf);
        let back = rd.remote().unwrap();
        assert_eq!((back.key, back.dst, back.port), (r.key, 12, 13));
        assert_eq!(back.packet.to_frame_bytes(), r.packet.to_frame_bytes());
        assert!(back.packet.is_corrupted());
        assert_eq!(back.packet.meta, r.packet.meta);
        let t = rd.packet().unwrap();
        assert_eq!(t.header(), timing.header());
        assert_eq!(t.payload().len(), 4000);
        assert!(t.payload().bytes().is_none());
        assert_eq!(rd.usize().unwrap(), 99);
        assert!(rd.is_empty());
        assert!(rd.u8().is_err());
    }
}
