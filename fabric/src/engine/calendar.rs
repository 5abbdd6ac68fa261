//! A calendar queue: the partition's priority queue of events, O(1) per operation on average.
//!
//! Packet-level traffic puts thousands of events within a few microseconds of "now" and only a
//! few (retransmission and application timers) far ahead. So time is cut into buckets of
//! 2^`WIDTH_BITS` ps; a ring of `BUCKETS` buckets covers the near future, and anything beyond it
//! waits in a binary heap until the ring reaches it. A bitmap of non-empty buckets lets idle
//! stretches be skipped in a few word operations. Only the bucket being drained is sorted (a
//! counting pass by sub-bucket, then a comparison sort of each; see [`sort_bucket`]); a push is
//! an append.
//!
//! The bucket width trades sorting (wider buckets sort more entries) against cache misses
//! (narrower ones spread the near future over more buffers); 8 ns measured best on
//! benches/fabric64.yaml and benches/fat_tree1024.yaml.
//!
//! Buckets do not own their buffers for good: a drained bucket's buffer goes on a stack of
//! spares and the next bucket to get an event takes the top one. A bucket's own buffer, last
//! written a whole ring (16.8 µs) earlier, has left a 1 MiB cache by then, so every line of it
//! that a push touches is a write miss; a spare drained a moment ago is still cached. Only as
//! many buffers exist as buckets are filled at once, not one per bucket.
//!
//! Popping is in exact key order — (time, origin, sequence) — the same order a binary heap
//! would give, so the choice of queue never changes results.

use std::collections::BinaryHeap;

use super::queue::Entry;

/// Bucket width: 2^13 ps ≈ 8.2 ns, about 10 events per bucket on fabric64, 225 on the
/// 1024-host fat-tree.
const WIDTH_BITS: u32 = 13;
/// Buckets in the ring (a power of two, at least 64): 2048 × 8.2 ns ≈ 16.8 µs of near future,
/// beyond the latency of any datacenter link.
const BUCKETS: usize = 2048;
const WORDS: usize = BUCKETS / 64;
/// A drained bucket is split into `1 << SUB_BITS` sub-buckets by time (256 ps each) with one
/// counting pass, and only each sub-bucket is sorted by the full key (see [`sort_bucket`]).
const SUB_BITS: u32 = 5;
const SUBS: usize = 1 << SUB_BITS;
/// Buckets with fewer entries are sorted directly (the counting pass costs more than it saves).
const COUNT_SORT_MIN: usize = 32;
/// Buckets with more entries (and fewer than `COUNT_SORT_MIN`) are halved by time first.
const HALVE_MAX: usize = 20;

/// The calendar queue.
pub(crate) struct Calendar {
    /// The ring, a fixed-size array so that a masked slot needs no bounds check.
    buckets: Box<[Vec<Entry>; BUCKETS]>,
    occupied: [u64; WORDS],
    /// Absolute number of the bucket being drained (time >> WIDTH_BITS).
    cur: u64,
    /// Whether bucket `cur` has been moved to `drain` and sorted (ascending; the next event is
    /// at `head`); its events pushed since are inserted there.
    sorted: bool,
    /// The bucket being drained, taken out of the ring: a pop reads `drain[head]` without
    /// checking `sorted` or indexing the ring.
    drain: Vec<Entry>,
    /// Index of the next event in `drain` (the ones before it have popped; its buffer goes to
    /// the spares when the last one pops). Ascending order with a cursor
    /// rather than descending with pops from the end: an event pushed into the bucket being
    /// drained is mostly later than what remains there, so its sorted insert shifts the few
    /// entries after it instead of most of them.
    head: usize,
    /// Events beyond the ring's horizon (a min-heap through `Entry`'s reversed order).
    far: BinaryHeap<Entry>,
    /// Where [`sort_bucket`] scatters a bucket (then swapped in for it).
    scratch: Vec<Entry>,
    /// Buffers of drained buckets, most recently drained last: a bucket that gets its first
    /// event takes the top one, whose lines are still in cache (see [`Calendar::push`]).
    spare: Vec<Vec<Entry>>,
}

impl Default for Calendar {
    fn default() -> Self {
        Calendar {
            buckets: Box::new(std::array::from_fn(|_| Vec::new())),
            occupied: [0; WORDS],
            cur: 0,
            sorted: false,
            drain: Vec::new(),
            head: 0,
            far: BinaryHeap::new(),
            scratch: Vec::new(),
            spare: Vec::new(),
        }
    }
}

#[inline]
fn bucket_of(e: &Entry) -> u64 {
    e.key.time >> WIDTH_BITS
}

/// Gives bucket buffer `v` the most recently drained spare if it has none. A bucket's own
/// buffer, written last a whole ring ago (16.8 µs), had left the cache: every new line of it
/// was a write miss (half of all on benches/fabric64.yaml); a spare is still there.
fn take_spare(v: &mut Vec<Entry>, spare: &mut Vec<Vec<Entry>>) {
    if v.capacity() == 0 {
        if let Some(buf) = spare.pop() {
            *v = buf;
        }
    }
}

/// Sorts bucket `v`, whose entries lie in bucket `b` (or before it: a push never goes behind
/// the bucket being drained), ascending by key.
///
/// A comparison sort of a whole bucket was a large share of a run. Larger buckets are first
/// split by a counting sort on the time's next `SUB_BITS` bits (one pass to count, one to
/// scatter into `scratch`), so the comparison sort only orders each sub-bucket's few entries.
/// The sub-bucket is a non-decreasing function of the time, so the result is the same order.
/// Buckets of `HALVE_MAX + 1` to `COUNT_SORT_MIN - 1` entries are halved by time in place
/// instead (see [`halve_sort`]): std's unstable sort takes them through its costlier quicksort
/// and small-sort network, each half through its insertion sort.
fn sort_bucket(v: &mut Vec<Entry>, scratch: &mut Vec<Entry>, b: u64) {
    let n = v.len();
    if n <= HALVE_MAX {
        v.sort_unstable_by_key(Entry::rank);
        return;
    }
    if n < COUNT_SORT_MIN {
        halve_sort(v, b << WIDTH_BITS, WIDTH_BITS);
        return;
    }
    let start = b << WIDTH_BITS;
    let sub = |e: &Entry| {
        // Entries from before the bucket (none in practice) go with its first sub-bucket.
        let off = e.key.time.saturating_sub(start) >> (WIDTH_BITS - SUB_BITS);
        (off as usize).min(SUBS - 1)
    };
    let mut count = [0u32; SUBS];
    for e in v.iter() {
        count[sub(e)] += 1;
    }
    // `at[k]` is where sub-bucket k starts.
    let mut at = [0u32; SUBS];
    let mut next = 0u32;
    for k in 0..SUBS {
        at[k] = next;
        next += count[k];
    }
    let ends = at;
    scratch.clear();
    scratch.resize(n, v[0]);
    for e in v.iter() {
        let k = sub(e);
        scratch[at[k] as usize] = *e;
        at[k] += 1;
    }
    // Swapped, not copied back: buffers pass between buckets anyway (the spares).
    std::mem::swap(v, scratch);
    for k in 0..SUBS {
        let (a, c) = (ends[k] as usize, count[k] as usize);
        if c > 1 {
            // Stable (driftsort): keys are unique, so the order is the same, and it is faster
            // on sub-buckets of many entries at equal times (hosts in lockstep).
            v[a..a + c].sort_by_key(Entry::rank);
        }
    }
}

/// Sorts `v`, whose times lie in `[start, start + 2^bits)` (or before it), by halving the
/// range in place until a part holds at most `HALVE_MAX` entries, then sorting each part.
fn halve_sort(v: &mut [Entry], start: u64, bits: u32) {
    if v.len() <= HALVE_MAX || bits == 0 {
        v.sort_unstable_by_key(Entry::rank);
        return;
    }
    let mid = start + (1 << (bits - 1));
    let mut k = 0;
    for i in 0..v.len() {
        if v[i].key.time < mid {
            v.swap(i, k);
            k += 1;
        }
    }
    let (lo, hi) = v.split_at_mut(k);
    halve_sort(lo, start, bits - 1);
    halve_sort(hi, mid, bits - 1);
}

impl Calendar {
    /// Events queued. Counted when asked (at the end of a run and in tests) rather than kept
    /// in a counter that every push and pop would write: two read-modify-writes per event.
    pub(crate) fn len(&self) -> usize {
        self.drain.len().saturating_sub(self.head)
            + self.buckets.iter().map(Vec::len).sum::<usize>()
            + self.far.len()
    }

    /// Queues `e`. The common case, an append to a later bucket of the ring with room for it,
    /// is inlined at the callers; the rest is out of line in [`Calendar::push_slow`] (with it
    /// inlined, `push` saved and restored a dozen registers on every call: 17 of its ~40
    /// instructions per event on benches/fabric64.yaml).
    #[inline]
    pub(crate) fn push(&mut self, e: Entry) {
        let b = bucket_of(&e);
        let slot = (b as usize) & (BUCKETS - 1);
        let v = &mut self.buckets[slot];
        // Buckets 1 to BUCKETS - 1 ahead of `cur` in one comparison: the one being drained
        // wraps to the largest number, as does one behind it.
        let ahead = b.wrapping_sub(self.cur).wrapping_sub(1);
        if ahead < BUCKETS as u64 - 1 && v.len() < v.capacity() {
            // A bucket other than the one being drained has a buffer only while it holds
            // events (it takes one with its first, gives it back when drained), so its bit in
            // `occupied` is set already: no read-modify-write of it here.
            debug_assert!(!v.is_empty() && self.occupied[slot / 64] & (1 << (slot % 64)) != 0);
            v.push(e);
        } else {
            self.push_slow(e, b.max(self.cur));
        }
    }

    /// [`Calendar::push`] of `e` into bucket `b` (at or after `cur`) when it goes beyond the
    /// ring, into the bucket being drained, or into a bucket without room.
    #[inline(never)]
    fn push_slow(&mut self, e: Entry, b: u64) {
        if b >= self.cur + BUCKETS as u64 {
            self.far.push(e);
            return;
        }
        if b == self.cur && self.sorted {
            let v = &mut self.drain;
            take_spare(v, &mut self.spare);
            // Keep the rest of the bucket being drained sorted. Rather than grow a full bucket,
            // drop its popped prefix first, so a bucket needs no more room than it did when
            // pops took entries off its end (growing it added 2.5-4 MB of peak RSS on
            // fat_tree1024, whose drained buckets take many such inserts).
            if v.len() == v.capacity() && self.head > 0 {
                v.drain(..self.head);
                self.head = 0;
            }
            let r = e.rank();
            if v.last().is_none_or(|x| x.rank() < r) {
                // Later than all that remains (an ACK's completion a few ns ahead, mostly).
                v.push(e);
            } else {
                let pos = self.head + v[self.head..].partition_point(|x| x.rank() < r);
                v.insert(pos, e);
            }
            return;
        }
        let slot = (b as usize) & (BUCKETS - 1);
        let v = &mut self.buckets[slot];
        take_spare(v, &mut self.spare);
        v.push(e);
        self.occupied[slot / 64] |= 1 << (slot % 64);
    }

    /// Moves `cur` to the earliest non-empty bucket, takes it out of the ring into `drain` and
    /// sorts it. False when empty.
    fn settle(&mut self) -> bool {
        if self.head < self.drain.len() {
            return true;
        }
        let slot = (self.cur as usize) & (BUCKETS - 1);
        if self.buckets[slot].is_empty() {
            self.occupied[slot / 64] &= !(1 << (slot % 64));
        }
        self.sorted = false;
        // Nothing queued ends the loop below: no occupied bucket and no far event.
        loop {
            // Bring far events that the ring now covers into it.
            let horizon = self.cur + BUCKETS as u64;
            while self.far.peek().is_some_and(|e| bucket_of(e) < horizon) {
                if let Some(e) = self.far.pop() {
                    let slot = (bucket_of(&e) as usize) & (BUCKETS - 1);
                    let v = &mut self.buckets[slot];
                    take_spare(v, &mut self.spare);
                    v.push(e);
                    self.occupied[slot / 64] |= 1 << (slot % 64);
                }
            }
            if let Some(b) = self.next_occupied() {
                self.cur = b;
                let slot = (b as usize) & (BUCKETS - 1);
                // `drain` is empty here (its buffer went to the spares with its last pop).
                if self.drain.capacity() > 0 {
                    let mut buf = std::mem::take(&mut self.drain);
                    buf.clear();
                    self.spare.push(buf);
                }
                std::mem::swap(&mut self.drain, &mut self.buckets[slot]);
                sort_bucket(&mut self.drain, &mut self.scratch, b);
                self.head = 0;
                self.sorted = true;
                return true;
            }
            match self.far.peek() {
                Some(e) => self.cur = bucket_of(e),
                None => return false,
            }
        }
    }

    /// The first occupied bucket at or after `cur` within the ring, as an absolute number.
    fn next_occupied(&self) -> Option<u64> {
        let start = (self.cur as usize) & (BUCKETS - 1);
        let (w0, b0) = (start / 64, start % 64);
        // The rest of the first word, then whole words around the ring, then its beginning.
        let first = self.occupied[w0] & (!0u64 << b0);
        if first != 0 {
            let slot = w0 * 64 + first.trailing_zeros() as usize;
            return Some(self.cur + (slot - start) as u64);
        }
        for i in 1..=WORDS {
            let w = (w0 + i) % WORDS;
            let mut bits = self.occupied[w];
            if i == WORDS {
                bits &= !(!0u64 << b0);
            }
            if bits != 0 {
                let slot = w * 64 + bits.trailing_zeros() as usize;
                let dist = (slot + BUCKETS - start) % BUCKETS;
                return Some(self.cur + dist as u64);
            }
        }
        None
    }

    /// Time of the earliest event, or `u64::MAX`.
    pub(crate) fn next_time(&mut self) -> u64 {
        if !self.settle() {
            return u64::MAX;
        }
        self.drain.get(self.head).map_or(u64::MAX, |e| e.key.time)
    }

    /// Pops the earliest event if its time is before `end`.
    #[inline(always)]
    pub(crate) fn pop_before(&mut self, end: u64) -> Option<Entry> {
        if let Some(&e) = self.drain.get(self.head) {
            if e.key.time >= end {
                return None;
            }
            self.advance();
            return Some(e);
        }
        if !self.settle() {
            return None;
        }
        let e = *self.drain.get(self.head)?;
        if e.key.time >= end {
            return None;
        }
        self.advance();
        Some(e)
    }

    /// Moves past the event at `head` of `drain`; gives its buffer to the spares (cleared,
    /// keeping its capacity) once all have popped.
    #[inline]
    fn advance(&mut self) {
        self.head += 1;
        if self.head >= self.drain.len() {
            let mut buf = std::mem::take(&mut self.drain);
            buf.clear();
            self.spare.push(buf);
            self.head = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::queue::{EventKey, Kind};
    use proptest::prelude::*;

    fn entry(time: u64, origin: u32, seq: u64) -> Entry {
        Entry::new(EventKey::new(time, origin, seq), 0, Kind::Timer, 0)
    }

    /// Pops everything left in `cal` and checks that it comes in `heap`'s order, then nothing.
    fn drains_like(cal: &mut Calendar, mut heap: BinaryHeap<Entry>) -> Result<(), TestCaseError> {
        while let Some(b) = heap.pop() {
            prop_assert_eq!(cal.pop_before(u64::MAX).map(|e| e.key), Some(b.key));
        }
        prop_assert!(cal.pop_before(u64::MAX).is_none());
        Ok(())
    }

    proptest! {
        /// Interleaved pushes (never before the last popped time, as in a simulation) and pops
        /// come out in exactly the order of a binary heap.
        #[test]
        fn pops_in_key_order(ops in proptest::collection::vec((0u64..3, 0u64..200_000_000, 0u32..4), 1..400)) {
            let mut cal = Calendar::default();
            let mut heap = BinaryHeap::new();
            let mut now = 0u64;
            let mut seq = 0u64;
            for (op, dt, origin) in ops {
                if op == 0 {
                    let a = cal.pop_before(u64::MAX);
                    let b = heap.pop();
                    prop_assert_eq!(a.map(|e| e.key), b.map(|e: Entry| e.key));
                    if let Some(e) = a { now = e.key.time; }
                } else {
                    // Mostly near-future events, sometimes far ones (timers).
                    let t = now + if op == 1 { dt % 50_000 } else { dt };
                    seq += 1;
                    cal.push(entry(t, origin, seq));
                    heap.push(entry(t, origin, seq));
                }
                prop_assert_eq!(cal.len(), heap.len());
            }
            drains_like(&mut cal, heap)?;
        }
    }

    proptest! {
        /// Crowded buckets (the counting-sort path): hundreds of events within a few buckets,
        /// many at equal times, come out in key order.
        #[test]
        fn crowded_buckets_pop_in_key_order(times in proptest::collection::vec((0u64..40_000, 0u32..3), 1..1500)) {
            let mut cal = Calendar::default();
            let mut heap = BinaryHeap::new();
            for (seq, (t, origin)) in times.into_iter().enumerate() {
                // Some times repeat exactly (ties broken by origin and sequence).
                let t = if seq % 3 == 0 { t - t % 1000 } else { t };
                cal.push(entry(t, origin, seq as u64));
                heap.push(entry(t, origin, seq as u64));
            }
            drains_like(&mut cal, heap)?;
        }
    }

    proptest! {
        /// Buckets of a few dozen events (the halving path, 21-31 entries, and its
        /// neighbours), many at equal times, some pushed while the bucket is being drained
        /// (sorted inserts), come out in key order.
        #[test]
        fn mid_sized_buckets_pop_in_key_order(
            times in proptest::collection::vec((0u64..20_000, 0u32..3), 1..70),
            pops in 0usize..40,
        ) {
            let mut cal = Calendar::default();
            let mut heap = BinaryHeap::new();
            let mut seq = 0u64;
            let mut push = |cal: &mut Calendar, heap: &mut BinaryHeap<Entry>, t: u64, o: u32| {
                seq += 1;
                cal.push(entry(t, o, seq));
                heap.push(entry(t, o, seq));
            };
            for &(t, o) in &times {
                // Many equal times (ports in lockstep).
                push(&mut cal, &mut heap, t - t % 512, o);
            }
            let mut now = 0;
            for _ in 0..pops {
                let b = heap.pop();
                let a = cal.pop_before(u64::MAX);
                prop_assert_eq!(a.map(|e| e.key), b.map(|e: Entry| e.key));
                if let Some(e) = a {
                    now = e.key.time;
                }
            }
            for &(t, o) in times.iter().take(10) {
                push(&mut cal, &mut heap, now + t % 3000, o);
            }
            drains_like(&mut cal, heap)?;
        }
    }

    proptest! {
        /// Pushes into the bucket being drained (sorted inserts near its front, appends, and
        /// inserts into a full bucket that drop its popped prefix first), interleaved with
        /// pops, come out in key order.
        #[test]
        fn inserts_into_the_drained_bucket_keep_key_order(
            times in proptest::collection::vec(0u64..8192, 1..80),
            ops in proptest::collection::vec((0u64..3, 0u64..400, 0u32..3), 1..120),
        ) {
            let mut cal = Calendar::default();
            let mut heap = BinaryHeap::new();
            let mut seq = 0u64;
            for &t in &times {
                seq += 1;
                cal.push(entry(t, 1, seq));
                heap.push(entry(t, 1, seq));
            }
            let mut now = 0u64;
            for (op, dt, origin) in ops {
                if op == 0 {
                    let a = cal.pop_before(u64::MAX);
                    let b = heap.pop();
                    prop_assert_eq!(a.map(|e| e.key), b.map(|e: Entry| e.key));
                    if let Some(e) = a {
                        now = e.key.time;
                    }
                } else {
                    // Mostly just after now (near the front), sometimes at now (ties by origin).
                    let t = now + if op == 1 { dt } else { 0 };
                    seq += 1;
                    cal.push(entry(t, origin, seq));
                    heap.push(entry(t, origin, seq));
                }
            }
            prop_assert_eq!(cal.len(), heap.len());
            drains_like(&mut cal, heap)?;
        }
    }

    #[test]
    fn respects_the_window_end_and_skips_idle_time() {
        let mut cal = Calendar::default();
        cal.push(entry(10, 0, 0));
        cal.push(entry(5_000_000_000, 0, 1));
        assert_eq!(cal.next_time(), 10);
        assert!(cal.pop_before(10).is_none());
        assert_eq!(cal.pop_before(11).map(|e| e.key.time), Some(10));
        assert_eq!(cal.next_time(), 5_000_000_000);
        assert_eq!(
            cal.pop_before(u64::MAX).map(|e| e.key.time),
            Some(5_000_000_000)
        );
        assert_eq!(cal.next_time(), u64::MAX);
    }
}
