//! A packet in flight: its real header bytes, its payload, and a few cached facts.
//!
//! The header bytes (Ethernet up to the last transport header) live inline in a fixed array so
//! that building, forwarding and dropping a packet allocates nothing. Only a header longer than
//! every RoCE stack (a frame carrying HPCC's in-band telemetry) moves to a boxed array of
//! [`MAX_HEADER_LEN`]: the packet stays small for every run, and only telemetry pays. The payload is either real
//! data, a zero-copy [`Bytes`] slice of the sender's buffer ("data mode"), or just a length
//! ("timing mode"). The trailer holds the RoCEv2 ICRC. The bytes are the truth; [`PacketMeta`]
//! only caches what the emulator itself needs for statistics and never changes forwarding.

use bytes::Bytes;

use crate::units::Time;
use crate::wire::MAX_HEADER_LEN;

/// Header bytes kept inline: the largest RoCE stack (Eth+IP+UDP+BTH+RETH+ImmDt = 74) and PFC
/// frames (60); longer headers (in-band telemetry) live in [`Packet`]'s boxed array.
pub const INLINE_HEADER_LEN: usize = 74;

/// The payload of a packet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Payload {
    /// Real bytes, a slice of the sender's message buffer (data mode).
    Data(Bytes),
    /// Only the length is simulated (timing mode); the bytes would be zeros.
    Timing(u32),
}

impl Payload {
    /// Number of payload bytes on the wire.
    pub fn len(&self) -> usize {
        match self {
            Payload::Data(b) => b.len(),
            Payload::Timing(n) => *n as usize,
        }
    }
    /// True when the payload has no bytes.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Facts the emulator caches beside the bytes for its own bookkeeping.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PacketMeta {
    /// When the sending NIC created the packet (for one-way latency statistics).
    pub created_at: Time,
    /// Size of the message this packet belongs to, in bytes (written by the sending NIC; what
    /// pFabric-style schedulers such as SJF read). Messages are below 4 GiB (RETH's DMA length).
    pub message_len: u32,
    /// Bytes of the message still to send, this packet included (SRPT's rank).
    pub message_remaining: u32,
}

/// The top bit of `trailer_len`: the frame's bits were damaged on the wire, so the FCS the
/// receiving MAC computes differs from the one sent (see [`Packet::fcs_bad`]).
const FCS_BAD: u8 = 0x80;

/// One Ethernet frame in flight.
#[derive(Clone, Debug)]
pub struct Packet {
    header: [u8; INLINE_HEADER_LEN],
    header_len: u8,
    trailer: [u8; 4],
    /// The trailer's length in the low bits; [`FCS_BAD`] in the top bit (a flag rather than a
    /// field, so that `Packet` does not grow).
    trailer_len: u8,
    payload: Payload,
    /// Cached bookkeeping (not part of the frame).
    pub meta: PacketMeta,
    /// The whole header when it is longer than [`INLINE_HEADER_LEN`] (then `header` is unused).
    long_header: Option<Box<[u8; MAX_HEADER_LEN]>>,
}

/// Why a packet could not be assembled.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PacketError {
    /// The header stack does not fit the inline header array.
    #[error("header of {len} bytes exceeds the {max}-byte inline header")]
    HeaderTooLong {
        /// The header length asked for.
        len: usize,
        /// The inline capacity.
        max: usize,
    },
    /// The trailer is longer than 4 bytes.
    #[error("trailer of {0} bytes exceeds 4 bytes")]
    TrailerTooLong(usize),
}

impl Packet {
    /// Assembles a packet from header bytes, a payload and a trailer (the ICRC, or empty).
    pub fn new(header: &[u8], payload: Payload, trailer: &[u8]) -> Result<Packet, PacketError> {
        let mut p = Packet::with_header_len(header.len(), payload)?;
        p.header_mut().copy_from_slice(header);
        p.set_trailer(trailer)?;
        Ok(p)
    }

    /// A packet whose `len` header bytes are zero, to be written in place with
    /// [`Packet::header_mut`] (how the NIC emits headers without a copy).
    pub fn with_header_len(len: usize, payload: Payload) -> Result<Packet, PacketError> {
        if len > MAX_HEADER_LEN {
            return Err(PacketError::HeaderTooLong {
                len,
                max: MAX_HEADER_LEN,
            });
        }
        Ok(Packet {
            header: [0; INLINE_HEADER_LEN],
            header_len: len as u8,
            trailer: [0; 4],
            trailer_len: 0,
            payload,
            meta: PacketMeta::default(),
            long_header: (len > INLINE_HEADER_LEN).then(|| Box::new([0; MAX_HEADER_LEN])),
        })
    }

    /// Sets the trailer bytes (ICRC).
    pub fn set_trailer(&mut self, trailer: &[u8]) -> Result<(), PacketError> {
        if trailer.len() > 4 {
            return Err(PacketError::TrailerTooLong(trailer.len()));
        }
        self.trailer[..trailer.len()].copy_from_slice(trailer);
        self.trailer_len = trailer.len() as u8 | (self.trailer_len & FCS_BAD);
        Ok(())
    }

    /// True when bit errors damaged the frame on the wire: the FCS the receiving MAC computes
    /// over its bytes would differ from the one sent, and any MAC discards it. The simulator
    /// does not model the FCS bytes; the fault that flips bits sets this (see
    /// [`crate::fault`]), so checking it costs nothing without bit errors.
    pub fn fcs_bad(&self) -> bool {
        self.trailer_len & FCS_BAD != 0
    }

    /// Marks the frame as damaged on the wire (see [`Packet::fcs_bad`]).
    pub fn set_fcs_bad(&mut self) {
        self.trailer_len |= FCS_BAD;
    }

    /// Replaces the payload by one of the same kind and length: how bit errors reach the
    /// payload's bytes (the old payload may be shared with the sender's buffer, so it is
    /// never written in place). Returns false, changing nothing, if the length differs.
    pub fn replace_payload(&mut self, payload: Payload) -> bool {
        if payload.len() != self.payload.len() {
            return false;
        }
        self.payload = payload;
        true
    }

    /// The header bytes, starting at the Ethernet destination address.
    pub fn header(&self) -> &[u8] {
        let len = self.header_len as usize;
        match &self.long_header {
            Some(h) => &h[..len],
            None => &self.header[..len],
        }
    }
    /// The header bytes, writable (switches rewrite ECN this way).
    pub fn header_mut(&mut self) -> &mut [u8] {
        let len = self.header_len as usize;
        match &mut self.long_header {
            Some(h) => &mut h[..len],
            None => &mut self.header[..len],
        }
    }
    /// Grows the header by `n` zero bytes at its end (a switch appending in-band telemetry) and
    /// returns the whole header, writable; `None` beyond [`MAX_HEADER_LEN`]. The first growth
    /// past [`INLINE_HEADER_LEN`] moves the header into its boxed array.
    pub fn grow_header(&mut self, n: usize) -> Option<&mut [u8]> {
        let old = self.header_len as usize;
        let len = old + n;
        if len > MAX_HEADER_LEN {
            return None;
        }
        if len > INLINE_HEADER_LEN && self.long_header.is_none() {
            let mut h = Box::new([0; MAX_HEADER_LEN]);
            h[..old].copy_from_slice(&self.header[..old]);
            self.long_header = Some(h);
        }
        self.header_len = len as u8;
        Some(self.header_mut())
    }
    /// The payload.
    pub fn payload(&self) -> &Payload {
        &self.payload
    }
    /// The trailer bytes (the ICRC for RoCEv2; empty otherwise).
    pub fn trailer(&self) -> &[u8] {
        &self.trailer[..(self.trailer_len & !FCS_BAD) as usize]
    }
    /// Length of the frame without FCS: header + payload + trailer.
    pub fn frame_len(&self) -> usize {
        self.header_len as usize + self.payload.len() + (self.trailer_len & !FCS_BAD) as usize
    }

    /// The whole frame as bytes (payload zeros in timing mode); for captures and tests, not the
    /// hot path.
    pub fn to_frame_bytes(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(self.frame_len());
        v.extend_from_slice(self.header());
        match &self.payload {
            Payload::Data(b) => v.extend_from_slice(b),
            Payload::Timing(n) => v.resize(v.len() + *n as usize, 0),
        }
        v.extend_from_slice(self.trailer());
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frame_len_counts_all_parts() {
        let p = Packet::new(&[1; 58], Payload::Timing(1000), &[9; 4]).unwrap();
        assert_eq!(p.frame_len(), 1062);
        assert_eq!(p.to_frame_bytes().len(), 1062);
        let d = Packet::new(&[1; 10], Payload::Data(Bytes::from_static(b"abc")), &[]).unwrap();
        assert_eq!(&d.to_frame_bytes()[10..], b"abc");
    }

    #[test]
    fn packet_stays_small_whatever_its_header() {
        // 128 bytes of inline state plus the pointer to a long header: telemetry does not grow
        // every packet (inline, it made them 184 bytes and every run ~13% slower).
        assert!(
            std::mem::size_of::<Packet>() <= 136,
            "{}",
            std::mem::size_of::<Packet>()
        );
    }

    #[test]
    fn a_long_header_moves_out_of_line_and_keeps_its_bytes() {
        let mut p = Packet::new(&[7; 70], Payload::Timing(100), &[1, 2, 3, 4]).unwrap();
        let h = p.grow_header(22).unwrap();
        assert_eq!(h.len(), 92);
        assert!(h[..70].iter().all(|&b| b == 7) && h[70..].iter().all(|&b| b == 0));
        p.header_mut()[91] = 9;
        assert_eq!(p.header()[91], 9);
        assert_eq!(p.frame_len(), 92 + 100 + 4);
        let q = p.clone();
        assert_eq!(q.header(), p.header());
        assert!(p.grow_header(MAX_HEADER_LEN).is_none());
        let long = Packet::new(&[5; MAX_HEADER_LEN], Payload::Timing(0), &[]).unwrap();
        assert_eq!(long.header(), &[5; MAX_HEADER_LEN][..]);
    }

    #[test]
    fn rejects_oversized_header() {
        assert!(Packet::new(&[0; MAX_HEADER_LEN + 1], Payload::Timing(0), &[]).is_err());
        assert!(Packet::new(&[0; 8], Payload::Timing(0), &[0; 5]).is_err());
    }
}
