//! The event queue of one partition: small entries ordered by [`EventKey`] in a calendar
//! queue.
//!
//! Entries stay 32 bytes so sorting and moving them is cheap; packets wait in a slab beside the
//! heap and entries carry the slab index. The slab's free list makes steady-state operation
//! allocation-free.

use std::cmp::Ordering;

use super::calendar::Calendar;
use crate::packet::Packet;

/// Bits of the tie-break word that hold the origin actor (the rest hold its sequence number).
pub(crate) const ACTOR_BITS: u32 = 24;
const SEQ_BITS: u32 = 64 - ACTOR_BITS;

/// The total order of events: time, then origin actor, then the origin's sequence number.
///
/// The tie word packs (origin actor, origin sequence) so comparing keys is two integer
/// comparisons. It does not depend on partitioning, so neither does the order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct EventKey {
    /// Virtual time in picoseconds.
    pub time: u64,
    /// `origin actor << 40 | origin sequence`.
    pub tie: u64,
}

impl EventKey {
    /// Builds the key of the `seq`-th event emitted by `origin` at `time`.
    #[inline]
    pub fn new(time: u64, origin: u32, seq: u64) -> EventKey {
        EventKey {
            time,
            tie: ((origin as u64) << SEQ_BITS) | (seq & ((1 << SEQ_BITS) - 1)),
        }
    }
}

/// What an entry stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A packet arrival; `data` is the slab index.
    Packet,
    /// A transmit completion.
    TxDone,
    /// A timer; `data` is the token.
    Timer,
}

/// One queued event.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Entry {
    pub(crate) key: EventKey,
    pub(crate) dst: u32,
    pub(crate) port: u16,
    pub(crate) kind: Kind,
    pub(crate) data: u64,
}

impl Entry {
    /// The key as one integer, so that ordering is a single 128-bit comparison.
    #[inline]
    pub(crate) fn rank(&self) -> u128 {
        (self.key.time as u128) << 64 | self.key.tie as u128
    }
}

impl PartialEq for Entry {
    fn eq(&self, other: &Self) -> bool {
        self.key == other.key
    }
}
impl Eq for Entry {}
impl PartialOrd for Entry {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Entry {
    /// Reversed, so that `BinaryHeap` (a max-heap) pops the smallest key first.
    #[inline]
    fn cmp(&self, other: &Self) -> Ordering {
        other.rank().cmp(&self.rank())
    }
}

/// The event order (a calendar queue) plus the packet slab.
#[derive(Default)]
pub(crate) struct EventQueue {
    heap: Calendar,
    slab: Vec<Option<Packet>>,
    free: Vec<u32>,
}

impl EventQueue {
    #[inline]
    pub(crate) fn push(&mut self, e: Entry) {
        self.heap.push(e);
    }

    /// Queues a packet arrival; returns its slab index.
    #[inline]
    pub(crate) fn push_packet(
        &mut self,
        key: EventKey,
        dst: u32,
        port: u16,
        packet: Packet,
    ) -> u32 {
        let idx = match self.free.pop() {
            Some(i) => {
                self.slab[i as usize] = Some(packet);
                i
            }
            None => {
                self.slab.push(Some(packet));
                (self.slab.len() - 1) as u32
            }
        };
        self.heap.push(Entry {
            key,
            dst,
            port,
            kind: Kind::Packet,
            data: idx as u64,
        });
        idx
    }

    /// The packet waiting in slab slot `idx`.
    pub(crate) fn packet(&self, idx: u32) -> Option<&Packet> {
        self.slab.get(idx as usize)?.as_ref()
    }

    /// Time of the earliest entry, or `u64::MAX`.
    #[inline]
    pub(crate) fn next_time(&mut self) -> u64 {
        self.heap.next_time()
    }

    #[inline]
    pub(crate) fn pop_before(&mut self, end: u64) -> Option<Entry> {
        self.heap.pop_before(end)
    }

    /// Takes the packet of a `Kind::Packet` entry out of the slab.
    #[inline]
    pub(crate) fn take_packet(&mut self, idx: u64) -> Option<Packet> {
        let p = self.slab.get_mut(idx as usize)?.take();
        if p.is_some() {
            self.free.push(idx as u32);
        }
        p
    }

    pub(crate) fn len(&self) -> usize {
        self.heap.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packet::Payload;

    #[test]
    fn pops_in_key_order() {
        let mut q = EventQueue::default();
        let keys = [
            EventKey::new(5, 1, 0),
            EventKey::new(3, 2, 7),
            EventKey::new(5, 0, 9),
            EventKey::new(5, 1, 1),
            EventKey::new(1, 9, 0),
        ];
        for (i, k) in keys.iter().enumerate() {
            q.push(Entry {
                key: *k,
                dst: 0,
                port: 0,
                kind: Kind::Timer,
                data: i as u64,
            });
        }
        let order: Vec<u64> = std::iter::from_fn(|| q.pop_before(u64::MAX))
            .map(|e| e.data)
            .collect();
        assert_eq!(order, vec![4, 1, 2, 0, 3]);
    }

    #[test]
    fn slab_reuses_slots() {
        let mut q = EventQueue::default();
        let p = Packet::new(&[0; 14], Payload::Timing(10), &[]).unwrap();
        q.push_packet(EventKey::new(1, 0, 0), 0, 0, p.clone());
        let e = q.pop_before(10).unwrap();
        assert!(q.take_packet(e.data).is_some());
        q.push_packet(EventKey::new(2, 0, 1), 0, 0, p);
        assert_eq!(q.slab.len(), 1);
        assert!(q.pop_before(2).is_none());
        assert_eq!(q.len(), 1);
    }
}
