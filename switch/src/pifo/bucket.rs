//! [`BucketPifo`]: a calendar queue of FIFO buckets with a find-first-set bitmap hierarchy.
//!
//! Ranks map to buckets (`bucket = rank >> granularity_log2`). A *window* of `W = 2^k`
//! consecutive buckets `[base, base + W)` lives in a ring of slots (`slot = bucket mod W`), each
//! slot a FIFO (an intrusive doubly linked list through a slab of nodes, so pushes and pops reuse
//! memory and allocate nothing once the queue has reached its working size). A hierarchy of
//! 64-bit occupancy words — one bit per slot, then one bit per non-empty word, up to a single
//! top word — finds the first (or last) non-empty slot from any position in
//! `ceil(k / 6)` find-first-set instructions.
//!
//! Ranks outside the window are still ordered exactly, in two min-max heaps keyed by
//! (bucket, arrival number):
//! - *far* holds buckets `>= base + W`;
//! - *under* holds buckets `< base` that arrived while the window could not slide down to them.
//!
//! The three ranges are disjoint, so the head is under's minimum, else the window's first
//! bucket, else far's minimum. `base` follows the head: each pop from the window sets `base` to
//! the popped bucket and moves the far elements that now fall inside the window into their
//! buckets, in (bucket, arrival) order — their buckets were outside the window and so empty,
//! which keeps arrival order among equal ranks. A push below `base` slides the window down
//! instead (free: slots are positions in a ring) when under is empty and the window's last
//! bucket stays within `W` of it. Workloads whose ranks live within `W` buckets of the head
//! (virtual times, deadlines, sizes binned by the granularity) therefore stay on the fast path.
//!
//! Granularity: ranks that share a bucket leave in arrival order (the order is exact on
//! `rank >> granularity_log2`; a pop still returns the element's own rank). With the default
//! granularity 0 the queue is an exact PIFO on `u64` ranks.

use super::heap::{Keyed, MinMaxHeap};
use super::{arriving_is_last, Overflow, OverflowPolicy, Pifo};

const NIL: u32 = u32::MAX;

/// Shape of a [`BucketPifo`]'s window.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct BucketConfig {
    /// log2 of the number of buckets in the window (6..=24; clamped). The window holds
    /// `2^window_log2` buckets and costs 8 bytes per bucket plus an eighth of a byte of bitmap.
    pub window_log2: u32,
    /// log2 of the ranks per bucket (0..=63; clamped). 0 = exact order on ranks.
    pub granularity_log2: u32,
}

impl Default for BucketConfig {
    /// 4096 exact buckets (32 KiB of slots).
    fn default() -> Self {
        BucketConfig {
            window_log2: 12,
            granularity_log2: 0,
        }
    }
}

/// A hierarchy of occupancy bitmaps over `n` positions, flattened into one vector: level 0 has
/// a bit per position, level `l + 1` a bit per non-zero word of level `l`, the last level is one
/// word.
#[derive(Clone, Debug)]
struct Bitmap {
    words: Vec<u64>,
    /// Start of each level in `words`, and one past the end of the last.
    start: [usize; MAX_LEVELS + 1],
    levels: usize,
}

/// 64^5 positions is beyond any window (at most 2^24).
const MAX_LEVELS: usize = 5;

impl Bitmap {
    fn new(n: usize) -> Bitmap {
        let mut start = [0usize; MAX_LEVELS + 1];
        let mut bits = n.clamp(1, 1 << 24);
        let mut levels = 0;
        loop {
            let words = bits.div_ceil(64);
            start[levels + 1] = start[levels] + words;
            levels += 1;
            if words == 1 {
                break;
            }
            bits = words;
        }
        Bitmap {
            words: vec![0u64; start[levels]],
            start,
            levels,
        }
    }

    #[inline]
    fn set(&mut self, mut i: usize) {
        for l in 0..self.levels {
            let w = &mut self.words[self.start[l] + (i >> 6)];
            let was = *w;
            *w |= 1 << (i & 63);
            if was != 0 {
                return;
            }
            i >>= 6;
        }
    }

    #[inline]
    fn clear(&mut self, mut i: usize) {
        for l in 0..self.levels {
            let w = &mut self.words[self.start[l] + (i >> 6)];
            *w &= !(1 << (i & 63));
            if *w != 0 {
                return;
            }
            i >>= 6;
        }
    }

    /// Word `w` of level `l`, if it exists.
    #[inline]
    fn word(&self, l: usize, w: usize) -> Option<u64> {
        let at = self.start[l] + w;
        if at < self.start[l + 1] {
            Some(self.words[at])
        } else {
            None
        }
    }

    /// The first set position `>= from`.
    #[inline]
    fn next_set(&self, from: usize) -> Option<usize> {
        let mut i = from;
        for l in 0..self.levels {
            let w = i >> 6;
            let word = self.word(l, w)? & (!0u64 << (i & 63));
            if word != 0 {
                let mut pos = (w << 6) | word.trailing_zeros() as usize;
                for below in (0..l).rev() {
                    pos =
                        (pos << 6) | self.words[self.start[below] + pos].trailing_zeros() as usize;
                }
                return Some(pos);
            }
            i = w + 1;
        }
        None
    }

    /// The last set position `<= upto`.
    #[inline]
    fn prev_set(&self, upto: usize) -> Option<usize> {
        let mut i = upto;
        for l in 0..self.levels {
            let w = i >> 6;
            let word = self.word(l, w)? & (!0u64 >> (63 - (i & 63)));
            if word != 0 {
                let mut pos = (w << 6) | (63 - word.leading_zeros() as usize);
                for below in (0..l).rev() {
                    let lz = self.words[self.start[below] + pos].leading_zeros() as usize;
                    pos = (pos << 6) | (63 - lz);
                }
                return Some(pos);
            }
            i = w.checked_sub(1)?;
        }
        None
    }
}

#[derive(Clone, Debug)]
struct Node<T> {
    rank: u64,
    next: u32,
    /// The node before, valid for every node but a bucket's head (pops from the front do not
    /// touch the next node, saving a cache miss; only pops from the back read `prev`, never of
    /// a head).
    prev: u32,
    item: Option<T>,
}

#[derive(Clone, Copy, Debug)]
struct Slot {
    head: u32,
    tail: u32,
}

/// A bounded PIFO for integer ranks: a calendar of FIFO buckets with a find-first-set bitmap
/// hierarchy, exact out of window through two overflow heaps (see the docs of the private
/// `pifo::bucket` module, in the source).
///
/// Push and pop are O(1) within the window (a few bit operations and list links) and
/// O(log n) for ranks outside it. At most `u32::MAX - 1` elements (capacity is clamped).
#[derive(Clone, Debug)]
pub struct BucketPifo<T> {
    base: u64,
    /// At or above every occupied window bucket (exact after appends, loose after pops): lets a
    /// push below `base` usually decide without searching for the last bucket.
    high: u64,
    mask: u64,
    shift: u32,
    slots: Vec<Slot>,
    bits: Bitmap,
    nodes: Vec<Node<T>>,
    free: u32,
    window_len: usize,
    under: MinMaxHeap<(u64, T)>,
    far: MinMaxHeap<(u64, T)>,
    seq: u64,
    capacity: usize,
    policy: OverflowPolicy,
}

/// Most nodes allocated up front; a larger capacity grows on demand.
const PREALLOCATE_MAX: usize = 1 << 10;

impl<T> BucketPifo<T> {
    /// An empty PIFO holding at most `capacity` elements, with the default window.
    pub fn new(capacity: usize, policy: OverflowPolicy) -> Self {
        Self::with_config(capacity, policy, BucketConfig::default())
    }

    /// An empty PIFO with an explicit window shape.
    pub fn with_config(capacity: usize, policy: OverflowPolicy, cfg: BucketConfig) -> Self {
        let w = 1usize << cfg.window_log2.clamp(6, 24);
        let capacity = capacity.min(NIL as usize - 1);
        BucketPifo {
            base: 0,
            high: 0,
            mask: w as u64 - 1,
            shift: cfg.granularity_log2.min(63),
            slots: vec![
                Slot {
                    head: NIL,
                    tail: NIL
                };
                w
            ],
            bits: Bitmap::new(w),
            nodes: Vec::with_capacity(capacity.min(PREALLOCATE_MAX)),
            free: NIL,
            window_len: 0,
            under: MinMaxHeap::with_capacity(0),
            far: MinMaxHeap::with_capacity(0),
            seq: 0,
            capacity,
            policy,
        }
    }

    /// Buckets in the window.
    pub fn window(&self) -> u64 {
        self.mask + 1
    }

    /// Elements currently held outside the window (in the overflow heaps): a measure of how
    /// well the window fits the workload.
    pub fn out_of_window(&self) -> usize {
        self.under.len() + self.far.len()
    }

    #[inline]
    fn in_window(&self, b: u64) -> bool {
        b.wrapping_sub(self.base) <= self.mask && b >= self.base
    }

    /// The bucket a window slot holds.
    #[inline]
    fn bucket_of_slot(&self, slot: usize) -> u64 {
        self.base + ((slot as u64).wrapping_sub(self.base) & self.mask)
    }

    /// The window's first non-empty slot.
    #[inline]
    fn first_slot(&self) -> Option<usize> {
        let start = (self.base & self.mask) as usize;
        self.bits.next_set(start).or_else(|| self.bits.next_set(0))
    }

    /// The window's last non-empty slot.
    #[inline]
    fn last_slot(&self) -> Option<usize> {
        let end = (self.base.wrapping_add(self.mask) & self.mask) as usize;
        self.bits
            .prev_set(end)
            .or_else(|| self.bits.prev_set(self.mask as usize))
    }

    #[inline]
    fn append(&mut self, bucket: u64, rank: u64, item: T) {
        let s = (bucket & self.mask) as usize;
        let tail = self.slots[s].tail;
        let node = Node {
            rank,
            next: NIL,
            prev: tail,
            item: Some(item),
        };
        let idx = if self.free != NIL {
            let idx = self.free;
            self.free = self.nodes[idx as usize].next;
            self.nodes[idx as usize] = node;
            idx
        } else {
            self.nodes.push(node);
            (self.nodes.len() - 1) as u32
        };
        if tail == NIL {
            self.slots[s].head = idx;
            self.bits.set(s);
        } else {
            self.nodes[tail as usize].next = idx;
        }
        self.slots[s].tail = idx;
        self.high = if self.window_len == 0 {
            bucket
        } else {
            self.high.max(bucket)
        };
        self.window_len += 1;
    }

    #[inline]
    fn release(&mut self, idx: u32) -> Option<(u64, T)> {
        let n = &mut self.nodes[idx as usize];
        let out = n.item.take().map(|it| (n.rank, it));
        n.next = self.free;
        self.free = idx;
        self.window_len -= 1;
        out
    }

    #[inline]
    fn pop_front_slot(&mut self, s: usize) -> Option<(u64, T)> {
        let idx = self.slots[s].head;
        if idx == NIL {
            return None;
        }
        // The new head's `prev` goes stale; a head's `prev` is never read.
        let next = self.nodes[idx as usize].next;
        self.slots[s].head = next;
        if next == NIL {
            self.slots[s].tail = NIL;
            self.bits.clear(s);
        }
        self.release(idx)
    }

    fn pop_back_slot(&mut self, s: usize) -> Option<(u64, T)> {
        let Slot { head, tail: idx } = self.slots[s];
        if idx == NIL {
            return None;
        }
        if idx == head {
            self.slots[s] = Slot {
                head: NIL,
                tail: NIL,
            };
            self.bits.clear(s);
        } else {
            // Not the head, so its `prev` is live (see `Node::prev`).
            let prev = self.nodes[idx as usize].prev;
            self.slots[s].tail = prev;
            self.nodes[prev as usize].next = NIL;
        }
        self.release(idx)
    }

    /// Moves far elements that the window now covers into their buckets.
    fn migrate(&mut self) {
        while let Some(e) = self.far.min() {
            if !self.in_window(e.key) {
                break;
            }
            if let Some(e) = self.far.pop_min() {
                let (rank, item) = e.val;
                self.append(e.key, rank, item);
            }
        }
    }

    /// Re-anchors an empty window (under must be empty too) at `base`.
    fn rebase(&mut self, base: u64) {
        self.base = base;
        self.migrate();
    }

    fn insert(&mut self, rank: u64, item: T) {
        let b = rank >> self.shift;
        let seq = self.seq;
        self.seq += 1;
        if self.window_len == 0 && self.under.len() == 0 {
            // Nothing below: anchor the window at the smallest bucket there is.
            let far_min = self.far.min().map_or(u64::MAX, |e| e.key);
            self.rebase(b.min(far_min));
        }
        if self.in_window(b) {
            self.append(b, rank, item);
        } else if b > self.base {
            self.far.push(Keyed {
                key: b,
                seq,
                val: (rank, item),
            });
        } else {
            // Below the window: slide it down if everything in it stays covered.
            let fits = self.under.len() == 0
                && (self.window_len == 0
                    || self.high - b <= self.mask
                    || self
                        .last_slot()
                        .is_none_or(|s| self.bucket_of_slot(s) - b <= self.mask));
            if fits {
                self.base = b;
                self.append(b, rank, item);
            } else {
                self.under.push(Keyed {
                    key: b,
                    seq,
                    val: (rank, item),
                });
            }
        }
    }

    /// The bucket of the element that would leave last.
    fn largest_bucket(&self) -> Option<u64> {
        if let Some(e) = self.far.max() {
            return Some(e.key);
        }
        if let Some(s) = self.last_slot() {
            return Some(self.bucket_of_slot(s));
        }
        self.under.max().map(|e| e.key)
    }
}

impl<T> Pifo<T> for BucketPifo<T> {
    fn push(&mut self, rank: u64, item: T) -> Result<(), Overflow<T>> {
        if self.len() >= self.capacity {
            if arriving_is_last(self.policy, rank >> self.shift, self.largest_bucket()) {
                return Err(Overflow::Refused { rank, item });
            }
            let out = self.pop_largest();
            self.insert(rank, item);
            return match out {
                Some((rank, item)) => Err(Overflow::Evicted { rank, item }),
                None => Ok(()),
            };
        }
        self.insert(rank, item);
        Ok(())
    }

    fn pop(&mut self) -> Option<(u64, T)> {
        if self.under.len() > 0 {
            return self.under.pop_min().map(|e| e.val);
        }
        if self.window_len == 0 {
            let b = self.far.min()?.key;
            self.rebase(b);
        }
        let s = self.first_slot()?;
        let b = self.bucket_of_slot(s);
        let out = self.pop_front_slot(s);
        if b != self.base {
            self.base = b;
            self.migrate();
        }
        out
    }

    fn peek(&self) -> Option<(u64, &T)> {
        if let Some(e) = self.under.min() {
            return Some((e.val.0, &e.val.1));
        }
        if let Some(s) = self.first_slot() {
            let n = &self.nodes[self.slots[s].head as usize];
            return n.item.as_ref().map(|it| (n.rank, it));
        }
        self.far.min().map(|e| (e.val.0, &e.val.1))
    }

    fn peek_largest(&self) -> Option<(u64, &T)> {
        if let Some(e) = self.far.max() {
            return Some((e.val.0, &e.val.1));
        }
        if let Some(s) = self.last_slot() {
            let n = &self.nodes[self.slots[s].tail as usize];
            return n.item.as_ref().map(|it| (n.rank, it));
        }
        self.under.max().map(|e| (e.val.0, &e.val.1))
    }

    fn pop_largest(&mut self) -> Option<(u64, T)> {
        if let Some(e) = self.far.pop_max() {
            return Some(e.val);
        }
        if let Some(s) = self.last_slot() {
            return self.pop_back_slot(s);
        }
        self.under.pop_max().map(|e| e.val)
    }

    fn len(&self) -> usize {
        self.window_len + self.under.len() + self.far.len()
    }

    fn capacity(&self) -> usize {
        self.capacity
    }

    fn policy(&self) -> OverflowPolicy {
        self.policy
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bitmap_finds_next_and_prev_across_levels() {
        let mut b = Bitmap::new(1 << 14);
        assert_eq!(b.levels, 3);
        assert_eq!(b.next_set(0), None);
        for i in [3usize, 64, 4095, 4096, 9000, 16383] {
            b.set(i);
        }
        assert_eq!(b.next_set(0), Some(3));
        assert_eq!(b.next_set(4), Some(64));
        assert_eq!(b.next_set(65), Some(4095));
        assert_eq!(b.next_set(4097), Some(9000));
        assert_eq!(b.next_set(9001), Some(16383));
        assert_eq!(b.prev_set(16382), Some(9000));
        assert_eq!(b.prev_set(8999), Some(4096));
        assert_eq!(b.prev_set(63), Some(3));
        assert_eq!(b.prev_set(2), None);
        b.clear(16383);
        assert_eq!(b.next_set(9001), None);
        b.clear(4096);
        b.clear(4095);
        assert_eq!(b.next_set(65), Some(9000));
        assert_eq!(b.prev_set(8999), Some(64));
    }

    fn small() -> BucketPifo<u32> {
        BucketPifo::with_config(
            usize::MAX,
            OverflowPolicy::DropArriving,
            BucketConfig {
                window_log2: 6,
                granularity_log2: 0,
            },
        )
    }

    #[test]
    fn ranks_beyond_the_window_stay_exact() {
        let mut p = small();
        // Far above, inside, and far below a 64-bucket window, with equal ranks on both sides
        // of a migration.
        let ranks = [1000u64, 5, 1000, 70, 3, 1_000_000, 0, 70, 1000, 2];
        for (i, &r) in ranks.iter().enumerate() {
            assert!(p.push(r, i as u32).is_ok());
        }
        assert!(p.out_of_window() > 0);
        let mut want: Vec<(u64, u32)> = ranks
            .iter()
            .enumerate()
            .map(|(i, &r)| (r, i as u32))
            .collect();
        want.sort();
        let got: Vec<(u64, u32)> = std::iter::from_fn(|| p.pop()).collect();
        assert_eq!(got, want);
    }

    #[test]
    fn granularity_orders_buckets_fifo_inside() {
        let mut p: BucketPifo<u32> = BucketPifo::with_config(
            16,
            OverflowPolicy::DropArriving,
            BucketConfig {
                window_log2: 6,
                granularity_log2: 4,
            },
        );
        for (i, r) in [17u64, 16, 40, 31, 5].into_iter().enumerate() {
            assert!(p.push(r, i as u32).is_ok());
        }
        let got: Vec<(u64, u32)> = std::iter::from_fn(|| p.pop()).collect();
        assert_eq!(got, vec![(5, 4), (17, 0), (16, 1), (31, 3), (40, 2)]);
    }
}
