//! Egress scheduling: the order in which an egress port sends the frames queued for it.
//!
//! [`EgressScheduler`] is the seam for programmable scheduling: the switch decides *whether* a
//! frame may be queued (buffer admission) and *when* the port is free; the scheduler decides
//! *which* queued frame goes next. [`Fifo`] (per-priority FIFOs in strict priority) is the
//! default. The switch passes the PFC pause mask to `dequeue`; a scheduler must never return a
//! frame of a paused priority, nor let one block the others.
//!
//! The switch tells the scheduler at `enqueue` what it already knows about the frame: its
//! priority (from the switch's DSCP map) and the ingress port the MMU charged it to; the
//! scheduler hands both back with the frame at `dequeue` ([`Dequeued`]), so the switch releases
//! the buffer to the right ingress without parsing the frame again or keeping a per-flow map.

use std::collections::VecDeque;

use fabemu_fabric::packet::Packet;
use fabemu_fabric::units::Time;

use crate::priority::PRIORITIES;

/// A frame leaving its queue, with the time it entered (for queueing-delay statistics) and
/// what the switch charged it to when it was queued.
#[derive(Debug)]
pub struct Dequeued {
    /// The frame.
    pub packet: Packet,
    /// When it was queued.
    pub enqueued_at: Time,
    /// The priority given at `enqueue`.
    pub priority: u8,
    /// The ingress port given at `enqueue`.
    pub ingress: usize,
}

/// What the switch knows about a frame it queues: the scheduler keeps it with the frame and
/// returns it in [`Dequeued`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Arrival {
    /// When the frame reached the egress queue.
    pub now: Time,
    /// Its priority, 0..=7 (the switch's DSCP map; what PFC pauses and the MMU counts).
    pub priority: u8,
    /// The ingress port the MMU charged it to.
    pub ingress: usize,
}

/// Per-class counters of a scheduler with classes (a PIFO tree's leaves).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct ClassReport {
    /// The class (leaf) name.
    pub name: String,
    /// Frames sent from this class.
    pub packets: u64,
    /// Frame bytes sent from this class.
    pub bytes: u64,
    /// Sum of the queueing delay of the frames sent, in ps (divide by `packets`).
    pub queueing_delay_sum_ps: u64,
    /// Frames the class refused or evicted because it was full.
    pub dropped_packets: u64,
}

/// Orders the frames waiting for one egress port.
pub trait EgressScheduler: Send {
    /// Queues a frame the buffer admitted, with its priority and ingress port. Returns a frame
    /// the scheduler did not keep — the arriving one refused, or a queued one evicted to make
    /// room — with the priority and ingress it was queued with, so the switch can free its
    /// buffer and count the drop.
    fn enqueue(&mut self, packet: Packet, at: Arrival) -> Option<Dequeued>;
    /// The next frame to transmit. `paused` is a bitmask of PFC priorities that must not be
    /// sent now (schedulers without priorities may ignore it).
    fn dequeue(&mut self, now: Time, paused: u8) -> Option<Dequeued>;
    /// When the earliest frame held back by a shaper becomes eligible, if any (the switch arms
    /// a timer so a shaped port wakes up by itself).
    fn next_release(&self, _now: Time) -> Option<Time> {
        None
    }
    /// Frames waiting.
    fn len(&self) -> usize;
    /// True when no frame waits.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Per-class counters, for reports (empty for class-less schedulers).
    fn classes(&self) -> Vec<ClassReport> {
        Vec::new()
    }
    /// Frames sent while a smaller rank waited in the same PIFO (see the PIFO tree docs).
    fn priority_inversions(&self) -> u64 {
        0
    }
}

/// Per-priority FIFOs served in strict priority, highest priority (7) first, skipping paused
/// priorities: the default egress of a switch port, as on production switches where each of the
/// eight traffic classes has its own queue. With everything in one priority it is a plain FIFO.
///
/// [`Fifo::push`] and [`Fifo::pop`] are the [`EgressScheduler`] trait without the indirection;
/// as an [`EgressScheduler`], a `Fifo<Packet>` queues packets. A switch's own ports use the
/// same lanes directly and keep the bitmask of non-empty priorities with their other per-port
/// flags.
#[derive(Debug)]
pub struct Fifo<T = Packet> {
    lanes: Lanes<T>,
    /// Bit p set: priority p has frames.
    nonempty: u8,
    len: usize,
}

impl<T> Default for Fifo<T> {
    fn default() -> Self {
        Fifo {
            lanes: Lanes::default(),
            nonempty: 0,
            len: 0,
        }
    }
}

/// The eight per-priority queues of a [`Fifo`], without its bookkeeping (which priorities have
/// frames, how many in all): a switch port's egress queue. The switch keeps the non-empty
/// bitmask in the per-port flags every frame reads anyway, so queueing or taking a frame
/// touches only its priority's queue (32 bytes, in one cache line: the lanes start on a line),
/// not also a line of counters. What it queues is `T`: the switch's ports queue a
/// [`Frame`](fabemu_fabric::engine::Frame) (4 bytes: the frame stays in the engine's packet
/// slab, so a queued frame costs a 16-byte entry here instead of a 144-byte one).
#[derive(Debug)]
#[repr(C, align(64))]
pub(crate) struct Lanes<T = Packet> {
    q: [VecDeque<Queued<T>>; PRIORITIES],
}

impl<T> Default for Lanes<T> {
    fn default() -> Self {
        Lanes {
            q: Default::default(),
        }
    }
}

/// A frame waiting in a [`Fifo`]. With a 4-byte [`Frame`] it is 16 bytes, its length
/// included: ports are `u16` in the engine, and a frame of 64 KiB or more (which no MTU
/// allows) keeps [`LEN_UNKNOWN`] and has its length read from its packet as it leaves.
#[derive(Debug)]
struct Queued<T> {
    item: T,
    at: Time,
    ingress: u16,
    len: u16,
}

/// [`Queued::len`] of a frame whose length was not kept.
const LEN_UNKNOWN: u16 = u16::MAX;

/// [`Popped::len`] of a frame whose length was not kept: read it from the packet. (A plain
/// sentinel, not an `Option`: the length passes through the departure in one register.) It
/// is the lanes' own sentinel (`u16::MAX`) widened, so that a pop hands the kept
/// `u16` on as it is, without a test for the sentinel; a frame of exactly 65,535 bytes,
/// which the lanes cannot keep either, reads the same value from its packet.
pub const LEN_NOT_KEPT: u32 = LEN_UNKNOWN as u32;

/// A frame leaving a [`Fifo`]: what [`Dequeued`] says, for any queued item.
#[derive(Debug)]
pub struct Popped<T> {
    /// The frame.
    pub item: T,
    /// When it was queued.
    pub enqueued_at: Time,
    /// Its priority.
    pub priority: u8,
    /// The ingress port given at `push`.
    pub ingress: usize,
    /// Its frame length without FCS as given at `push`, or [`LEN_NOT_KEPT`] (not given, or
    /// too long to keep): the switch sends it without reading the frame's packet.
    pub len: u32,
}

/// The highest priority whose bit is set in `ready` (`ready` non-zero).
#[inline]
pub(crate) fn highest(ready: u8) -> u8 {
    7u8.saturating_sub(ready.leading_zeros() as u8)
}

impl<T> Lanes<T> {
    /// Queues `item` at the tail of `priority` (0..=7; higher bits ignored), with its frame
    /// length `len` when known (given back by [`Lanes::pop_highest`]). `ingress` is a port number
    /// (below 65,536: the engine numbers ports with `u16`). Always inlined: every queued
    /// frame calls it.
    #[inline(always)]
    pub(crate) fn push(&mut self, item: T, now: Time, priority: u8, ingress: usize, len: u32) {
        let p = priority & 7;
        self.q[usize::from(p)].push_back(Queued {
            item,
            at: now,
            ingress: ingress as u16,
            // 65,535 bytes and more: LEN_UNKNOWN.
            len: u16::try_from(len.min(u32::from(LEN_UNKNOWN))).unwrap_or(LEN_UNKNOWN),
        });
    }

    /// The head of the highest priority set in `nonempty` (the caller's bitmask of the
    /// priorities that hold frames) and clear in `paused`, with its bit cleared from
    /// `nonempty` when that priority empties: strict priority, the one pop of every FIFO (a
    /// [`Fifo`]'s and a switch port's). Always inlined: out of line, the result went through
    /// memory on every departure.
    #[inline(always)]
    pub(crate) fn pop_highest(&mut self, nonempty: &mut u8, paused: u8) -> Option<Popped<T>> {
        let ready = *nonempty & !paused;
        if ready == 0 {
            return None;
        }
        let p = highest(ready);
        let q = &mut self.q[usize::from(p)];
        let e = q.pop_front()?;
        if q.is_empty() {
            *nonempty &= !(1 << p);
        }
        Some(Popped {
            item: e.item,
            enqueued_at: e.at,
            priority: p,
            ingress: usize::from(e.ingress),
            // LEN_UNKNOWN is LEN_NOT_KEPT.
            len: u32::from(e.len),
        })
    }

    /// Frames waiting (a sum over the priorities: for reports).
    pub(crate) fn len(&self) -> usize {
        self.q.iter().map(VecDeque::len).sum()
    }
}

impl<T> Fifo<T> {
    /// Queues `item` at the tail of `priority` (0..=7; higher bits ignored).
    #[inline]
    pub fn push(&mut self, item: T, now: Time, priority: u8, ingress: usize) {
        self.lanes.push(item, now, priority, ingress, LEN_NOT_KEPT);
        self.nonempty |= 1 << (priority & 7);
        self.len += 1;
    }

    /// The head of the highest non-empty priority whose bit is clear in `paused`.
    #[inline]
    pub fn pop(&mut self, paused: u8) -> Option<Popped<T>> {
        let e = self.lanes.pop_highest(&mut self.nonempty, paused)?;
        self.len -= 1;
        Some(e)
    }

    /// Frames waiting.
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when no frame waits.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl EgressScheduler for Fifo<Packet> {
    #[inline]
    fn enqueue(&mut self, packet: Packet, at: Arrival) -> Option<Dequeued> {
        self.push(packet, at.now, at.priority, at.ingress);
        None
    }
    #[inline]
    fn dequeue(&mut self, _now: Time, paused: u8) -> Option<Dequeued> {
        self.pop(paused).map(|p| Dequeued {
            packet: p.item,
            enqueued_at: p.enqueued_at,
            priority: p.priority,
            ingress: p.ingress,
        })
    }
    fn len(&self) -> usize {
        self.len
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fabemu_fabric::engine::Frame;
    use fabemu_fabric::packet::Payload;

    #[test]
    fn fifo_keeps_arrival_order() {
        let mut f = Fifo::<Packet>::default();
        for n in 1..=3u32 {
            f.enqueue(
                Packet::new(&[0; 14], Payload::Timing(n), &[]).unwrap(),
                Arrival::default(),
            );
        }
        let order: Vec<usize> = std::iter::from_fn(|| f.dequeue(Time::ZERO, 0))
            .map(|d| d.packet.payload().len())
            .collect();
        assert_eq!(order, vec![1, 2, 3]);
        assert!(f.is_empty());
    }

    #[test]
    fn lanes_start_on_a_line_and_pick_the_highest_priority() {
        assert_eq!(std::mem::align_of::<Lanes<Frame>>(), 64);
        assert_eq!(std::mem::size_of::<Lanes<Frame>>(), 256);
        // A queued frame's entry keeps its length at no cost in size.
        assert_eq!(std::mem::size_of::<Queued<Frame>>(), 16);
        assert_eq!(highest(1), 0);
        assert_eq!(highest(0b1001_0110), 7);
        assert_eq!(highest(0b0000_1100), 3);
    }

    #[test]
    fn strict_priority_skips_paused() {
        let mut f = Fifo::<Packet>::default();
        for (n, prio) in [(1u32, 0u8), (2, 3), (3, 0), (4, 5), (5, 3)] {
            let pkt = Packet::new(&[0; 14], Payload::Timing(n), &[]).unwrap();
            f.push(pkt, Time::ZERO, prio, usize::from(prio) + 10);
        }
        let mut pop = |paused| {
            f.pop(paused)
                .map(|p| (p.item.payload().len(), p.priority, p.ingress))
        };
        assert_eq!(pop(1 << 5), Some((2, 3, 13)), "5 paused: 3 goes first");
        assert_eq!(pop(0), Some((4, 5, 15)));
        assert_eq!(pop(1 << 3), Some((1, 0, 10)), "3 paused does not block 0");
        assert_eq!(pop(0xFF), None);
        assert_eq!(pop(0), Some((5, 3, 13)));
        assert_eq!(pop(0), Some((3, 0, 10)));
        assert_eq!(pop(0), None);
        assert_eq!(f.len(), 0);
    }
}
