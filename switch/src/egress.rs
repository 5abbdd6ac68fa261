//! Egress scheduling: the order in which an egress port sends the frames queued for it.
//!
//! [`EgressScheduler`] is the seam for programmable scheduling: the switch decides *whether* a
//! frame may be queued (buffer admission) and *when* the port is free; the scheduler decides
//! *which* queued frame goes next. [`Fifo`] is the default.

use std::collections::VecDeque;

use fabemu_fabric::packet::Packet;
use fabemu_fabric::units::Time;

/// Orders the frames waiting for one egress port.
pub trait EgressScheduler: Send {
    /// Queues an admitted frame.
    fn enqueue(&mut self, packet: Packet, now: Time);
    /// The next frame to transmit, if any.
    fn dequeue(&mut self, now: Time) -> Option<Packet>;
    /// Frames waiting.
    fn len(&self) -> usize;
    /// True when no frame waits.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// First in, first out.
#[derive(Debug, Default)]
pub struct Fifo {
    q: VecDeque<Packet>,
}

impl EgressScheduler for Fifo {
    #[inline]
    fn enqueue(&mut self, packet: Packet, _now: Time) {
        self.q.push_back(packet);
    }
    #[inline]
    fn dequeue(&mut self, _now: Time) -> Option<Packet> {
        self.q.pop_front()
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
    fn enqueue(&mut self, packet: Packet, now: Time) {
        match self {
            Egress::Fifo(f) => f.enqueue(packet, now),
            Egress::Custom(c) => c.enqueue(packet, now),
        }
    }
    #[inline]
    fn dequeue(&mut self, now: Time) -> Option<Packet> {
        match self {
            Egress::Fifo(f) => f.dequeue(now),
            Egress::Custom(c) => c.dequeue(now),
        }
    }
    fn len(&self) -> usize {
        match self {
            Egress::Fifo(f) => f.len(),
            Egress::Custom(c) => c.len(),
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
        let order: Vec<usize> = std::iter::from_fn(|| f.dequeue(Time::ZERO))
            .map(|p| p.payload().len())
            .collect();
        assert_eq!(order, vec![1, 2, 3]);
        assert!(f.is_empty());
    }
}
