//! Egress scheduling: the order in which an egress port sends the frames queued for it.
//!
//! [`EgressScheduler`] is the seam for programmable scheduling: the switch decides *whether* a
//! frame may be queued (buffer admission) and *when* the port is free; the scheduler decides
//! *which* queued frame goes next. [`Fifo`] is the default.

use std::collections::VecDeque;

use fabemu_fabric::packet::Packet;
use fabemu_fabric::units::Time;

/// A frame leaving its queue, with the time it entered (for queueing-delay statistics).
#[derive(Debug)]
pub struct Dequeued {
    /// The frame.
    pub packet: Packet,
    /// When it was queued.
    pub enqueued_at: Time,
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
    /// Queues a frame the buffer admitted. Returns a frame the scheduler did not keep — the
    /// arriving one refused, or a queued one evicted to make room — so the switch can free
    /// its buffer and count the drop.
    fn enqueue(&mut self, packet: Packet, now: Time) -> Option<Packet>;
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

/// First in, first out (PFC pauses are not applied here; lossless operation is not modelled
/// yet).
#[derive(Debug, Default)]
pub struct Fifo {
    q: VecDeque<(Packet, Time)>,
}

impl EgressScheduler for Fifo {
    #[inline]
    fn enqueue(&mut self, packet: Packet, now: Time) -> Option<Packet> {
        self.q.push_back((packet, now));
        None
    }
    #[inline]
    fn dequeue(&mut self, _now: Time, _paused: u8) -> Option<Dequeued> {
        self.q.pop_front().map(|(packet, enqueued_at)| Dequeued {
            packet,
            enqueued_at,
        })
    }
    fn len(&self) -> usize {
        self.q.len()
    }
}

/// A port's scheduler: the FIFO inline (no indirection on the common path), or any other
/// discipline behind a trait object.
pub enum Egress {
    /// First in, first out.
    Fifo(Fifo),
    /// Any other scheduler.
    Custom(Box<dyn EgressScheduler>),
}

impl Default for Egress {
    fn default() -> Self {
        Egress::Fifo(Fifo::default())
    }
}

impl EgressScheduler for Egress {
    #[inline]
    fn enqueue(&mut self, packet: Packet, now: Time) -> Option<Packet> {
        match self {
            Egress::Fifo(f) => f.enqueue(packet, now),
            Egress::Custom(c) => c.enqueue(packet, now),
        }
    }
    #[inline]
    fn dequeue(&mut self, now: Time, paused: u8) -> Option<Dequeued> {
        match self {
            Egress::Fifo(f) => f.dequeue(now, paused),
            Egress::Custom(c) => c.dequeue(now, paused),
        }
    }
    fn next_release(&self, now: Time) -> Option<Time> {
        match self {
            Egress::Fifo(_) => None,
            Egress::Custom(c) => c.next_release(now),
        }
    }
    fn len(&self) -> usize {
        match self {
            Egress::Fifo(f) => f.len(),
            Egress::Custom(c) => c.len(),
        }
    }
    fn classes(&self) -> Vec<ClassReport> {
        match self {
            Egress::Fifo(_) => Vec::new(),
            Egress::Custom(c) => c.classes(),
        }
    }
    fn priority_inversions(&self) -> u64 {
        match self {
            Egress::Fifo(_) => 0,
            Egress::Custom(c) => c.priority_inversions(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fabemu_fabric::packet::Payload;

    #[test]
    fn fifo_keeps_arrival_order() {
        let mut f = Fifo::default();
        for n in 1..=3u32 {
            f.enqueue(
                Packet::new(&[0; 14], Payload::Timing(n), &[]).unwrap(),
                Time::ZERO,
            );
        }
        let order: Vec<usize> = std::iter::from_fn(|| f.dequeue(Time::ZERO, 0))
            .map(|d| d.packet.payload().len())
            .collect();
        assert_eq!(order, vec![1, 2, 3]);
        assert!(f.is_empty());
    }
}
