//! The capture tap: frames seen on chosen ports, as bytes, for a pcap.
//!
//! Like tcpdump on an interface, a tapped port sees both directions: a frame *leaving* it is
//! recorded when its first bit goes on the wire (the transmit time), a frame *arriving* on it
//! when its last bit arrives (the time the receiving actor gets it). Both records are taken at
//! the transmit, by the transmitting partition — the bytes cannot change on the wire — so the
//! receiving side costs nothing. A frame modified by an actor (a switch marking ECN) is recorded
//! as it was when that actor sent it: the mark shows after the switch, not before.
//!
//! Payload: real bytes in data mode; in timing mode the payload is not captured — the record
//! holds the headers only, with the original length kept (pcap's caplen < len), so tools show
//! the frame as truncated instead of inventing zeros. Frames without payload (ACKs, CNPs, PFC
//! pauses) are whole in both modes.
//!
//! **Determinism and caps.** Records are kept per partition and merged at the end in the order
//! (time, actor, port, direction, origin key), which no thread count changes. The caps (frames,
//! captured bytes) keep the *first* records in that order: each partition keeps the smallest
//! records that fit the caps (a max-heap that evicts its largest), which always contains its
//! share of the global first records, and remembers the smallest record it lost: the records
//! up to it already exceed a cap in that partition alone, so the global first records all come
//! before it. The merge cuts the sorted union before the smallest record any partition lost
//! (a partition may keep a small record after losing a large one: it is not among the first)
//! and then at the caps.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

#[cfg(feature = "mpi")]
use super::codec::{Reader, Writer};
use super::ActorId;
#[cfg(feature = "mpi")]
use super::EngineError;
use crate::packet::{Packet, Payload};
use crate::units::Time;

/// Which ports to tap and how much to keep.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CaptureConfig {
    /// Tapped (actor, port) pairs; duplicates and ports that do not exist are ignored.
    pub ports: Vec<(ActorId, usize)>,
    /// Keep at most this many frames (the first ones in time order).
    pub max_packets: u64,
    /// Keep at most this many captured bytes (the sum of the records' `data` lengths).
    pub max_bytes: u64,
}

impl Default for CaptureConfig {
    fn default() -> Self {
        CaptureConfig {
            ports: Vec::new(),
            max_packets: 1_000_000,
            max_bytes: 256 << 20,
        }
    }
}

/// Which way a captured frame went through the tapped port.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum CaptureDirection {
    /// The tapped port transmitted it (recorded at transmit start).
    Out,
    /// The tapped port received it (recorded when its last bit arrived).
    In,
}

/// One captured frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CapturedFrame {
    /// When it was seen (see [`CaptureDirection`]).
    pub time: Time,
    /// The tapped actor.
    pub actor: ActorId,
    /// The tapped port of that actor.
    pub port: usize,
    /// Leaving or arriving.
    pub direction: CaptureDirection,
    /// The frame's engine event key tie word (origin actor and sequence): a tie-break that no
    /// partitioning changes.
    pub origin: u64,
    /// The frame's length on the wire without FCS.
    pub orig_len: u32,
    /// The captured bytes: the whole frame in data mode, the headers only in timing mode.
    pub data: Vec<u8>,
}

/// A record's place in the merged order: (time, actor, port, direction, origin).
type Key = (u64, ActorId, usize, CaptureDirection, u64);

impl CapturedFrame {
    fn key(&self) -> Key {
        (
            self.time.ps(),
            self.actor,
            self.port,
            self.direction,
            self.origin,
        )
    }
}

impl PartialOrd for CapturedFrame {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for CapturedFrame {
    fn cmp(&self, other: &Self) -> Ordering {
        self.key().cmp(&other.key())
    }
}

/// What a run captured.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Capture {
    /// The kept frames in (time, actor, port, direction, origin) order.
    pub frames: Vec<CapturedFrame>,
    /// Frames seen on tapped ports up to the end of the run, kept or not (frames still in
    /// flight when the run stopped are not counted, except, when a cap was reached, those a
    /// cap had already pushed out).
    pub seen: u64,
    /// Frames not kept because a cap was reached (`seen - frames.len()`); 0 when no cap was.
    pub dropped: u64,
}

/// One partition's capture state.
pub(crate) struct CaptureBuf {
    max_packets: u64,
    max_bytes: u64,
    heap: BinaryHeap<CapturedFrame>,
    bytes: u64,
    seen: u64,
    /// The smallest record not kept (pushed out or refused by a cap): no record after it is
    /// among the first. When its time is after the run's end, every frame lost to a cap was
    /// one the run never delivered, and no cap was really reached.
    min_lost: Option<Key>,
}

impl CaptureBuf {
    pub(crate) fn new(cfg: &CaptureConfig) -> CaptureBuf {
        CaptureBuf {
            max_packets: cfg.max_packets,
            max_bytes: cfg.max_bytes,
            heap: BinaryHeap::new(),
            bytes: 0,
            seen: 0,
            min_lost: None,
        }
    }

    fn lose(&mut self, key: Key) {
        self.min_lost = Some(self.min_lost.map_or(key, |m| m.min(key)));
    }

    /// Records `packet` as seen by (`actor`, `port`) at `time`.
    pub(crate) fn record(
        &mut self,
        time: u64,
        actor: ActorId,
        port: usize,
        direction: CaptureDirection,
        origin: u64,
        packet: &Packet,
    ) {
        self.seen += 1;
        let key = (time, actor, port, direction, origin);
        if self.max_packets == 0 {
            self.lose(key);
            return;
        }
        let full = self.heap.len() as u64 >= self.max_packets || self.bytes >= self.max_bytes;
        if full && self.heap.peek().is_some_and(|top| top.key() <= key) {
            // Later than everything kept while the caps are reached: never among the first.
            self.lose(key);
            return;
        }
        // A frame without payload (ACK, CNP, PFC) is whole in either mode.
        let data = match packet.payload() {
            Payload::Timing(n) if *n > 0 => packet.header().to_vec(),
            _ => packet.to_frame_bytes(),
        };
        self.bytes += data.len() as u64;
        self.heap.push(CapturedFrame {
            time: Time(time),
            actor,
            port,
            direction,
            origin,
            orig_len: packet.frame_len() as u32,
            data,
        });
        while self.heap.len() as u64 > self.max_packets || self.bytes > self.max_bytes {
            match self.heap.pop() {
                Some(f) => {
                    self.bytes -= f.data.len() as u64;
                    self.lose(f.key());
                }
                None => break,
            }
        }
    }
}

#[cfg(feature = "mpi")]
impl CaptureBuf {
    /// Writes what [`merge`] reads of this buffer (to carry it to another process).
    pub(crate) fn write_to(&self, w: &mut Writer) {
        w.u64(self.seen);
        w.bool(self.min_lost.is_some());
        write_key(
            w,
            self.min_lost.unwrap_or((0, 0, 0, CaptureDirection::Out, 0)),
        );
        w.usize(self.heap.len());
        for f in self.heap.iter() {
            write_key(w, f.key());
            w.u32(f.orig_len);
            w.bytes(&f.data);
        }
    }

    /// Reads a buffer written by [`CaptureBuf::write_to`], under the caps of `cfg`.
    pub(crate) fn read_from(r: &mut Reader<'_>, cfg: &CaptureConfig) -> Result<Self, EngineError> {
        let mut b = CaptureBuf::new(cfg);
        b.seen = r.u64()?;
        let lost = r.bool()?;
        b.min_lost = Some(read_key(r)?).filter(|_| lost);
        let n = r.usize()?;
        let mut frames = Vec::with_capacity(n.min(r.remaining()));
        for _ in 0..n {
            let (time, actor, port, direction, origin) = read_key(r)?;
            frames.push(CapturedFrame {
                time: Time(time),
                actor,
                port,
                direction,
                origin,
                orig_len: r.u32()?,
                data: r.bytes()?.to_vec(),
            });
        }
        b.bytes = frames.iter().map(|f| f.data.len() as u64).sum();
        b.heap = BinaryHeap::from(frames);
        Ok(b)
    }
}

#[cfg(feature = "mpi")]
fn write_key(w: &mut Writer, (time, actor, port, direction, origin): Key) {
    w.u64(time);
    w.u32(actor);
    w.usize(port);
    w.bool(direction == CaptureDirection::In);
    w.u64(origin);
}

#[cfg(feature = "mpi")]
fn read_key(r: &mut Reader<'_>) -> Result<Key, EngineError> {
    Ok((
        r.u64()?,
        r.u32()?,
        r.usize()?,
        if r.bool()? {
            CaptureDirection::In
        } else {
            CaptureDirection::Out
        },
        r.u64()?,
    ))
}

/// Merges the partitions' buffers into the run's capture; drops records later than `until`
/// (arrivals the run stopped before delivering).
pub(crate) fn merge(bufs: Vec<CaptureBuf>, cfg: &CaptureConfig, until: Time) -> Capture {
    let seen: u64 = bufs.iter().map(|b| b.seen).sum();
    let lost: u64 = bufs.iter().map(|b| b.seen - b.heap.len() as u64).sum();
    let cut = bufs.iter().filter_map(|b| b.min_lost).min();
    let min_lost = cut.map_or(u64::MAX, |k| k.0);
    let mut all: Vec<CapturedFrame> = bufs.into_iter().flat_map(|b| b.heap.into_vec()).collect();
    all.sort_unstable();
    let mut kept = 0usize;
    let mut bytes = 0u64;
    for f in &all {
        if f.time > until
            || cut.is_some_and(|c| f.key() >= c)
            || kept as u64 >= cfg.max_packets
            || bytes + f.data.len() as u64 > cfg.max_bytes
        {
            break;
        }
        bytes += f.data.len() as u64;
        kept += 1;
    }
    // Frames arriving after `until` (in flight when the run stopped) were never seen by the
    // run: not a cap's doing.
    let beyond = all.iter().filter(|f| f.time > until).count() as u64;
    let beyond_lost = if min_lost > until.ps() { lost } else { 0 };
    let seen = seen - beyond - beyond_lost;
    all.truncate(kept);
    Capture {
        dropped: seen - all.len() as u64,
        frames: all,
        seen,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pkt(len: u32) -> Packet {
        match Packet::new(&[0xab; 20], Payload::Timing(len), &[]) {
            Ok(p) => p,
            Err(e) => panic!("{e}"),
        }
    }

    #[test]
    fn caps_keep_the_first_frames_in_time_order_whatever_the_arrival_order() {
        let cfg = CaptureConfig {
            ports: vec![(0, 0)],
            max_packets: 3,
            max_bytes: u64::MAX,
        };
        // Two partitions see frames out of order; the first 3 by time are 1, 2, 3.
        let mut a = CaptureBuf::new(&cfg);
        let mut b = CaptureBuf::new(&cfg);
        for t in [9, 3, 7, 1] {
            a.record(t, 0, 0, CaptureDirection::Out, t, &pkt(100));
        }
        for t in [8, 2, 6] {
            b.record(t, 1, 0, CaptureDirection::In, t, &pkt(100));
        }
        let c = merge(vec![a, b], &cfg, Time::NEVER);
        let times: Vec<u64> = c.frames.iter().map(|f| f.time.ps()).collect();
        assert_eq!(times, vec![1, 2, 3]);
        assert_eq!(c.seen, 7);
        assert_eq!(c.dropped, 4);
        // Timing mode: headers only, original length kept.
        assert_eq!(c.frames[0].data.len(), 20);
        assert_eq!(c.frames[0].orig_len, 120);
    }

    #[test]
    fn byte_cap_counts_captured_bytes() {
        let cfg = CaptureConfig {
            ports: vec![(0, 0)],
            max_packets: u64::MAX,
            max_bytes: 50,
        };
        let mut a = CaptureBuf::new(&cfg);
        for t in 0..5 {
            a.record(t, 0, 0, CaptureDirection::Out, t, &pkt(0));
        }
        // 20 bytes each: two fit in 50.
        let c = merge(vec![a], &cfg, Time::NEVER);
        assert_eq!(c.frames.len(), 2);
        assert_eq!(c.dropped, 3);
    }

    fn sized(header: usize) -> Packet {
        match Packet::new(&vec![0xab; header], Payload::Timing(0), &[]) {
            Ok(p) => p,
            Err(e) => panic!("{e}"),
        }
    }

    #[test]
    fn a_small_frame_after_a_lost_large_one_is_not_among_the_first() {
        // Byte cap 150; frames by time: 1 (100 B), 2 (60 B), 3 (40 B), 5 (100 B). The first
        // ones within 150 B are frame 1 alone (1 and 2 make 160). A partition that saw 5, 1,
        // 2, 3 in that order pushed out 2 and then had room for 3: it must not be kept, and
        // the result must not depend on which partition saw which frame.
        let cfg = CaptureConfig {
            ports: vec![(0, 0)],
            max_packets: u64::MAX,
            max_bytes: 150,
        };
        let record = |b: &mut CaptureBuf, t: u64, size: usize| {
            b.record(t, 0, 0, CaptureDirection::Out, t, &sized(size));
        };
        let mut one = CaptureBuf::new(&cfg);
        for (t, size) in [(5, 100), (1, 100), (2, 60), (3, 40)] {
            record(&mut one, t, size);
        }
        let (mut a, mut b) = (CaptureBuf::new(&cfg), CaptureBuf::new(&cfg));
        for (t, size) in [(5, 100), (1, 100), (2, 60)] {
            record(&mut a, t, size);
        }
        record(&mut b, 3, 40);
        for c in [
            merge(vec![one], &cfg, Time::NEVER),
            merge(vec![a, b], &cfg, Time::NEVER),
        ] {
            let times: Vec<u64> = c.frames.iter().map(|f| f.time.ps()).collect();
            assert_eq!(times, vec![1]);
            assert_eq!((c.seen, c.dropped), (4, 3));
        }
    }

    #[cfg(feature = "mpi")]
    #[test]
    fn buffers_read_back_as_written() {
        let cfg = CaptureConfig {
            ports: vec![(0, 0)],
            max_packets: 2,
            max_bytes: u64::MAX,
        };
        let mut a = CaptureBuf::new(&cfg);
        for t in [4, 1, 3] {
            a.record(
                t,
                2,
                1,
                CaptureDirection::In,
                t + 7,
                &sized(30 + t as usize),
            );
        }
        let mut w = Writer::default();
        a.write_to(&mut w);
        let mut r = Reader::new(&w.buf);
        let back = match CaptureBuf::read_from(&mut r, &cfg) {
            Ok(b) => b,
            Err(e) => panic!("{e}"),
        };
        assert!(r.is_empty());
        assert_eq!(
            (back.seen, back.bytes, back.min_lost),
            (a.seen, a.bytes, a.min_lost)
        );
        assert_eq!(
            merge(vec![back], &cfg, Time::NEVER),
            merge(vec![a], &cfg, Time::NEVER)
        );
    }

    #[test]
    fn frames_in_flight_at_the_end_are_not_dropped_by_a_cap() {
        // A run stopped at `until` with a frame in flight warned "capture cap
        // reached". Two frames by `until` = 10, three arriving later; one of those was pushed
        // out of a full buffer (cap 4), which is no cap reached either.
        let cfg = CaptureConfig {
            ports: vec![(0, 0)],
            max_packets: 4,
            max_bytes: u64::MAX,
        };
        let mut a = CaptureBuf::new(&cfg);
        for t in [1, 12, 2, 11, 13] {
            a.record(t, 0, 0, CaptureDirection::Out, t, &pkt(0));
        }
        let c = merge(vec![a], &cfg, Time(10));
        assert_eq!(c.frames.len(), 2);
        assert_eq!((c.seen, c.dropped), (2, 0));
        // With a cap of 1, one frame by `until` is lost: a cap was reached.
        let cfg = CaptureConfig {
            max_packets: 1,
            ..cfg
        };
        let mut a = CaptureBuf::new(&cfg);
        for t in [1, 12, 2] {
            a.record(t, 0, 0, CaptureDirection::Out, t, &pkt(0));
        }
        let c = merge(vec![a], &cfg, Time(10));
        assert_eq!(c.frames.len(), 1);
        assert!(c.dropped >= 1);
    }
}
