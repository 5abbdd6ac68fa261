//! The event queue of one partition: small entries ordered by [`EventKey`] in a calendar
//! queue.
//!
//! Entries are 24 bytes (the key and two 32-bit words) so sorting and moving them is cheap and a
//! packet in flight costs little beside itself; packets wait in a slab beside the calendar and
//! entries carry the slab index. The slab's free list makes steady-state operation
//! allocation-free.
//!
//! The slab also holds the frames that actors keep (a switch's queued frames, see
//! [`super::Frame`]): such a frame stays in one slot from its arrival to its departure, and
//! its next arrival event reuses the slot, so a switch hop moves no packet bytes.

use std::cmp::Ordering;

use super::calendar::Calendar;
use crate::packet::Packet;

/// Bits of the tie-break word that hold the origin actor (the rest hold its sequence number).
pub(crate) const ACTOR_BITS: u32 = 24;
const SEQ_BITS: u32 = 64 - ACTOR_BITS;
const SEQ_MASK: u64 = (1 << SEQ_BITS) - 1;

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
            tie: ((origin as u64) << SEQ_BITS) | (seq & SEQ_MASK),
        }
    }

    /// The tie word of the origin's next event after `tie`: the sequence number plus one,
    /// wrapping as [`EventKey::new`] masks it, the origin unchanged.
    #[inline]
    pub(crate) fn next_tie(tie: u64) -> u64 {
        (tie & !SEQ_MASK) | (tie.wrapping_add(1) & SEQ_MASK)
    }
}

/// What an entry stands for (the top three bits of [`Entry`]'s tag word).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A packet arrival; the data word is the slab slot (the arrival port waits beside it).
    Packet,
    /// A packet arrival at an actor that holds frames ([`super::Actor::holds_frames`]): the
    /// frame stays in its slot. Told apart when queued (the transmitting port knows its peer),
    /// so that a pop does not read the destination's record to learn it.
    Frame,
    /// A transmit completion; the data word is the port.
    TxDone,
    /// A timer whose token fits 32 bits; the data word is the token.
    Timer,
    /// A timer with a wider token; the data word is its slot in the token slab.
    LongTimer,
}

/// Bits of the tag word that hold the destination actor; the three above hold the [`Kind`].
/// Local actor indices are below 2^[`ACTOR_BITS`] (the engine refuses larger worlds).
const DST_BITS: u32 = 29;
const DST_MASK: u32 = (1 << DST_BITS) - 1;

/// One queued event: 24 bytes (the key, then two words), so that an event in flight costs 24
/// bytes beside its packet and sorting a bucket moves little.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Entry {
    pub(crate) key: EventKey,
    /// `kind << 29 | destination actor` (local index).
    tag: u32,
    /// What the [`Kind`] says.
    data: u32,
}

impl Entry {
    /// An entry of `kind` for local actor `dst` (below 2^[`ACTOR_BITS`]).
    #[inline]
    pub(crate) fn new(key: EventKey, dst: u32, kind: Kind, data: u32) -> Entry {
        debug_assert!(dst <= DST_MASK);
        Entry {
            key,
            tag: (kind as u32) << DST_BITS | (dst & DST_MASK),
            data,
        }
    }

    /// An arrival entry whose tag word (see [`arrival_tag`]) was made beforehand.
    #[inline]
    fn with_tag(key: EventKey, tag: u32, data: u32) -> Entry {
        Entry { key, tag, data }
    }

    /// The destination actor (local index).
    #[inline]
    pub(crate) fn dst(&self) -> u32 {
        self.tag & DST_MASK
    }

    /// What the entry stands for.
    #[inline]
    pub(crate) fn kind(&self) -> Kind {
        match self.tag >> DST_BITS {
            0 => Kind::Packet,
            1 => Kind::Frame,
            2 => Kind::TxDone,
            3 => Kind::Timer,
            _ => Kind::LongTimer,
        }
    }

    /// The data word (see [`Kind`]).
    #[inline]
    pub(crate) fn data(&self) -> u32 {
        self.data
    }

    /// The key as one integer, so that ordering is a single 128-bit comparison.
    #[inline]
    pub(crate) fn rank(&self) -> u128 {
        (self.key.time as u128) << 64 | self.key.tie as u128
    }
}

/// The tag word of an arrival at local actor `dst`: [`Kind::Frame`] when it holds frames, else
/// [`Kind::Packet`]. A port keeps its peer's, so queueing an arrival computes nothing.
pub(crate) fn arrival_tag(dst: u32, holds: bool) -> u32 {
    let kind = if holds { Kind::Frame } else { Kind::Packet };
    (kind as u32) << DST_BITS | (dst & DST_MASK)
}

/// The destination actor of tag word `tag`.
#[inline]
pub(crate) fn tag_dst(tag: u32) -> u32 {
    tag & DST_MASK
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

/// One slot of the packet slab, aligned to a cache line: a 128-byte packet then spans exactly
/// two lines, and what a switch reads per hop (see [`Packet`]'s layout) is one of them. (A
/// vector of bare packets starts wherever the allocator put it, 16 bytes past a line for a
/// large one, so every packet straddled three.)
#[derive(Default)]
#[repr(align(64))]
struct Slot(Option<Packet>);

/// Slots per chunk of the slab (64 KiB).
const CHUNK_BITS: u32 = 9;
const CHUNK: usize = 1 << CHUNK_BITS;
const CHUNK_MASK: u32 = (1 << CHUNK_BITS) - 1;

/// The packet slab: slots in fixed chunks, so growing it never copies (a vector of aligned
/// slots would be reallocated by copying, with old and new alive at once: +22% peak memory per
/// in-flight frame on `benches/inflight.yaml`; a vector of unaligned ones grew in place).
#[derive(Default)]
struct Slab {
    /// Fixed-size chunks, so that indexing within one needs no bounds check.
    chunks: Vec<Box<[Slot; CHUNK]>>,
    /// Slots handed out so far (the next new one is `len`).
    len: u32,
}

impl Slab {
    #[inline]
    fn get(&self, idx: u32) -> Option<&Slot> {
        let chunk = self.chunks.get((idx >> CHUNK_BITS) as usize)?;
        Some(&chunk[(idx & CHUNK_MASK) as usize])
    }

    #[inline]
    fn get_mut(&mut self, idx: u32) -> Option<&mut Slot> {
        let chunk = self.chunks.get_mut((idx >> CHUNK_BITS) as usize)?;
        Some(&mut chunk[(idx & CHUNK_MASK) as usize])
    }

    /// Stores `packet` in a new slot; returns its index.
    #[inline]
    fn push(&mut self, packet: Packet) -> u32 {
        let idx = self.len;
        if (idx >> CHUNK_BITS) as usize == self.chunks.len() {
            // Built on the heap (a 64 KiB array would pass through the stack); the conversion
            // cannot fail for a slice of exactly `CHUNK` slots.
            let slots: Box<[Slot]> = (0..CHUNK).map(|_| Slot::default()).collect();
            if let Ok(chunk) = slots.try_into() {
                self.chunks.push(chunk);
            }
        }
        if let Some(s) = self.get_mut(idx) {
            *s = Slot(Some(packet));
        }
        self.len += 1;
        idx
    }

    /// A slot for a new packet: the next one, created empty (with its chunk when it is the
    /// chunk's first); returns its index.
    #[inline]
    fn push_empty(&mut self) -> u32 {
        let idx = self.len;
        if (idx >> CHUNK_BITS) as usize == self.chunks.len() {
            let slots: Box<[Slot]> = (0..CHUNK).map(|_| Slot::default()).collect();
            if let Ok(chunk) = slots.try_into() {
                self.chunks.push(chunk);
            }
        }
        self.len += 1;
        idx
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.len as usize
    }
}

/// The event order (a calendar queue) plus the packet slab and the wide-token slab.
///
/// A packet in flight costs its slab slot (a `Packet`, 128 bytes, two whole cache lines), its
/// arrival port (2 bytes in a vector beside the slab, so a slot has no padding) and its 24-byte
/// entry.
#[derive(Default)]
pub(crate) struct EventQueue {
    heap: Calendar,
    slab: Slab,
    /// The arrival port of the packet in the same slab slot.
    slab_port: Vec<u16>,
    free: Vec<u32>,
    /// Tokens wider than 32 bits of queued timers (switch timers; NIC timers fit the entry).
    tokens: Vec<u64>,
    free_tokens: Vec<u32>,
}

impl EventQueue {
    /// Queues the completion of a transmit on `port` of local actor `dst`.
    #[inline]
    pub(crate) fn push_tx_done(&mut self, key: EventKey, dst: u32, port: u16) {
        self.heap
            .push(Entry::new(key, dst, Kind::TxDone, u32::from(port)));
    }

    /// Queues a timer with `token` for local actor `dst`.
    #[inline]
    pub(crate) fn push_timer(&mut self, key: EventKey, dst: u32, token: u64) {
        let e = match u32::try_from(token) {
            Ok(t) => Entry::new(key, dst, Kind::Timer, t),
            Err(_) => {
                let idx = match self.free_tokens.pop() {
                    Some(i) => {
                        self.tokens[i as usize] = token;
                        i
                    }
                    None => {
                        self.tokens.push(token);
                        (self.tokens.len() - 1) as u32
                    }
                };
                Entry::new(key, dst, Kind::LongTimer, idx)
            }
        };
        self.heap.push(e);
    }

    /// Queues a packet arrival with tag word `tag` (its destination and kind, see
    /// [`arrival_tag`]); returns its slab index.
    #[inline]
    pub(crate) fn push_packet(
        &mut self,
        key: EventKey,
        tag: u32,
        port: u16,
        packet: Packet,
    ) -> u32 {
        let idx = match self.free.pop() {
            Some(i) => {
                if let Some(s) = self.slab.get_mut(i) {
                    *s = Slot(Some(packet));
                }
                self.slab_port[i as usize] = port;
                i
            }
            None => {
                self.slab_port.push(port);
                self.slab.push(packet)
            }
        };
        self.heap.push(Entry::with_tag(key, tag, idx));
        idx
    }

    /// Puts `packet` in a free slab slot without queueing an event (a frame an actor holds);
    /// returns the slot.
    #[inline]
    pub(crate) fn hold(&mut self, packet: Packet) -> u32 {
        match self.free.pop() {
            Some(i) => {
                if let Some(s) = self.slab.get_mut(i) {
                    *s = Slot(Some(packet));
                }
                i
            }
            None => {
                self.slab_port.push(0);
                self.slab.push(packet)
            }
        }
    }

    /// [`EventQueue::hold`] that also gives the packet where it now lies, to be finished in
    /// place (`None` only if the slab could not grow).
    /// Always inlined (with the slab's growth out of line), so that the packet its caller
    /// makes is written straight into the slot: out of line, it was built on the caller's
    /// stack and copied in.
    #[inline(always)]
    pub(crate) fn hold_mut(&mut self, packet: Packet) -> Option<(u32, &mut Packet)> {
        let idx = match self.free.pop() {
            Some(i) => i,
            None => self.new_slot(),
        };
        let s = self.slab.get_mut(idx)?;
        s.0 = Some(packet);
        Some((idx, s.0.as_mut()?))
    }

    /// A slot past the slab's end, for [`EventQueue::hold_mut`] when none is free.
    #[cold]
    #[inline(never)]
    fn new_slot(&mut self) -> u32 {
        self.slab_port.push(0);
        self.slab.push_empty()
    }

    /// Queues the arrival of the frame already in slab slot `idx` (an actor transmits a frame
    /// it held): the bytes stay where they are. `tag` as for [`EventQueue::push_packet`].
    #[inline]
    pub(crate) fn push_held(&mut self, key: EventKey, tag: u32, port: u16, idx: u32) {
        if let Some(p) = self.slab_port.get_mut(idx as usize) {
            *p = port;
        }
        self.heap.push(Entry::with_tag(key, tag, idx));
    }

    /// True when slab slot `idx` exists (whether or not it holds a frame): read from the
    /// slab's length, not from the slot itself.
    #[inline]
    pub(crate) fn has_slot(&self, idx: u32) -> bool {
        idx < self.slab.len
    }

    /// The packet waiting in slab slot `idx`.
    #[inline]
    pub(crate) fn packet(&self, idx: u32) -> Option<&Packet> {
        self.slab.get(idx)?.0.as_ref()
    }

    /// The packet waiting in slab slot `idx`, writable.
    #[inline]
    pub(crate) fn packet_mut(&mut self, idx: u32) -> Option<&mut Packet> {
        self.slab.get_mut(idx)?.0.as_mut()
    }

    /// The arrival port of the frame in slab slot `idx` (`None` when the slot is empty): for a
    /// [`Kind::Frame`] entry.
    #[inline]
    pub(crate) fn arrival_port(&self, idx: u32) -> Option<u16> {
        match self.slab.get(idx) {
            Some(Slot(Some(_))) => self.slab_port.get(idx as usize).copied(),
            _ => None,
        }
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

    /// Takes the packet of a [`Kind::Packet`] entry out of the slab, with its arrival port.
    #[inline]
    pub(crate) fn take_packet(&mut self, idx: u32) -> Option<(u16, Packet)> {
        let p = self.slab.get_mut(idx)?.0.take()?;
        self.free.push(idx);
        Some((self.slab_port[idx as usize], p))
    }

    /// Empties slab slot `idx` (a held frame discarded); true when it held a frame.
    ///
    /// A packet with nothing on the heap (a timing-mode payload and an inline header: nearly
    /// every frame) is only marked gone, without the out-of-line drop of a `Packet`.
    #[inline(always)]
    pub(crate) fn free_slot(&mut self, idx: u32) -> bool {
        let Some(s) = self.slab.get_mut(idx) else {
            return false;
        };
        match &s.0 {
            None => return false,
            Some(p) if p.owns_no_heap() => std::mem::forget(s.0.take()),
            Some(_) => s.0 = None,
        }
        self.free.push(idx);
        true
    }

    /// Takes the token of a [`Kind::LongTimer`] entry out of the token slab.
    #[inline]
    pub(crate) fn take_token(&mut self, idx: u32) -> Option<u64> {
        let t = *self.tokens.get(idx as usize)?;
        self.free_tokens.push(idx);
        Some(t)
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
            q.push_timer(*k, 0, i as u64);
        }
        let order: Vec<u32> = std::iter::from_fn(|| q.pop_before(u64::MAX))
            .map(|e| e.data())
            .collect();
        assert_eq!(order, vec![4, 1, 2, 0, 3]);
    }

    #[test]
    fn entries_are_24_bytes_and_keep_kind_dst_and_tokens() {
        assert_eq!(std::mem::size_of::<Entry>(), 24);
        let mut q = EventQueue::default();
        let dst = (1 << ACTOR_BITS) - 1;
        q.push_timer(EventKey::new(1, 0, 0), dst, u64::MAX - 5);
        q.push_timer(EventKey::new(2, 0, 1), dst, 7);
        q.push_tx_done(EventKey::new(3, 0, 2), dst, u16::MAX);
        let e = q.pop_before(10).unwrap();
        assert_eq!((e.kind(), e.dst()), (Kind::LongTimer, dst));
        assert_eq!(q.take_token(e.data()), Some(u64::MAX - 5));
        let e = q.pop_before(10).unwrap();
        assert_eq!((e.kind(), e.dst(), e.data()), (Kind::Timer, dst, 7));
        let e = q.pop_before(10).unwrap();
        assert_eq!((e.kind(), e.dst(), e.data()), (Kind::TxDone, dst, 65535));
    }

    #[test]
    fn slab_slots_are_two_whole_cache_lines() {
        assert_eq!(std::mem::size_of::<Slot>(), 128);
        assert_eq!(std::mem::align_of::<Slot>(), 64);
    }

    /// A drawn tie word is the next sequence number of the same origin, wrapping as
    /// `EventKey::new` masks it.
    #[test]
    fn next_tie_counts_the_sequence_and_keeps_the_origin() {
        for (origin, seq) in [(0u32, 0u64), (7, 41), ((1 << ACTOR_BITS) - 1, SEQ_MASK - 1)] {
            let t = EventKey::new(0, origin, seq).tie;
            assert_eq!(EventKey::next_tie(t), EventKey::new(0, origin, seq + 1).tie);
        }
        let last = EventKey::new(0, 5, SEQ_MASK).tie;
        assert_eq!(
            EventKey::next_tie(last),
            EventKey::new(0, 5, SEQ_MASK + 1).tie
        );
        assert_eq!(EventKey::next_tie(last), EventKey::new(0, 5, 0).tie);
    }

    #[test]
    fn slab_reuses_slots() {
        let mut q = EventQueue::default();
        let p = Packet::new(&[0; 14], Payload::Timing(10), &[]).unwrap();
        q.push_packet(EventKey::new(1, 0, 0), arrival_tag(0, false), 0, p.clone());
        let e = q.pop_before(10).unwrap();
        assert_eq!(e.kind(), Kind::Packet);
        assert_eq!(q.take_packet(e.data()).map(|(port, _)| port), Some(0));
        q.push_packet(EventKey::new(2, 0, 1), arrival_tag(0, false), 0, p);
        assert_eq!(q.slab.len(), 1);
        assert!(q.pop_before(2).is_none());
        assert_eq!(q.len(), 1);
    }
}
