//! [`HeapPifo`]: an exact PIFO for any `u64` rank, on a min-max heap.
//!
//! Arrival order among equal ranks comes from a per-queue sequence number: elements are keyed by
//! (rank, sequence), which is unique, so the heap's order is total and deterministic. A *min-max*
//! heap (Atkinson et al., CACM 1986: even levels hold minima of their subtrees, odd levels
//! maxima) serves both ends in O(log n), so [`OverflowPolicy::EvictLargest`] and
//! [`Pifo::pop_largest`] cost no more than a pop.

use super::{arriving_is_last, Overflow, OverflowPolicy, Pifo};

/// An element with its ordering key (key, seq).
#[derive(Clone, Debug)]
pub(crate) struct Keyed<V> {
    pub(crate) key: u64,
    pub(crate) seq: u64,
    pub(crate) val: V,
}

impl<V> Keyed<V> {
    #[inline]
    fn lt(&self, other: &Self) -> bool {
        (self.key, self.seq) < (other.key, other.seq)
    }
}

/// A min-max heap of [`Keyed`] elements; keys are unique (the seq makes them so).
#[derive(Clone, Debug)]
pub(crate) struct MinMaxHeap<V> {
    a: Vec<Keyed<V>>,
}

/// True when index `i` is on a min level (level = floor(log2(i + 1)); even levels are min).
#[inline]
fn is_min_level(i: usize) -> bool {
    (usize::BITS - 1 - (i + 1).leading_zeros()) % 2 == 0
}

impl<V> MinMaxHeap<V> {
    pub(crate) fn with_capacity(n: usize) -> Self {
        MinMaxHeap {
            a: Vec::with_capacity(n),
        }
    }

    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.a.len()
    }

    #[inline]
    pub(crate) fn min(&self) -> Option<&Keyed<V>> {
        self.a.first()
    }

    /// Index of the largest element.
    #[inline]
    fn max_index(&self) -> Option<usize> {
        match self.a.len() {
            0 => None,
            1 => Some(0),
            2 => Some(1),
            _ => Some(if self.a[2].lt(&self.a[1]) { 1 } else { 2 }),
        }
    }

    #[inline]
    pub(crate) fn max(&self) -> Option<&Keyed<V>> {
        self.max_index().map(|i| &self.a[i])
    }

    pub(crate) fn push(&mut self, e: Keyed<V>) {
        self.a.push(e);
        let i = self.a.len() - 1;
        if i == 0 {
            return;
        }
        let p = (i - 1) / 2;
        if is_min_level(i) {
            if self.a[p].lt(&self.a[i]) {
                self.a.swap(i, p);
                self.bubble_up::<true>(p);
            } else {
                self.bubble_up::<false>(i);
            }
        } else if self.a[i].lt(&self.a[p]) {
            self.a.swap(i, p);
            self.bubble_up::<false>(p);
        } else {
            self.bubble_up::<true>(i);
        }
    }

    /// Moves `i` up through its grandparents; `MAX` selects the max levels' order.
    #[inline]
    fn bubble_up<const MAX: bool>(&mut self, mut i: usize) {
        while i > 2 {
            let g = ((i - 1) / 2 - 1) / 2;
            let before = if MAX {
                self.a[g].lt(&self.a[i])
            } else {
                self.a[i].lt(&self.a[g])
            };
            if !before {
                break;
            }
            self.a.swap(i, g);
            i = g;
        }
    }

    pub(crate) fn pop_min(&mut self) -> Option<Keyed<V>> {
        self.remove_at(0)
    }

    pub(crate) fn pop_max(&mut self) -> Option<Keyed<V>> {
        let i = self.max_index()?;
        self.remove_at(i)
    }

    /// Removes the root of a level (index 0 or a child of the root), refilling from the end.
    fn remove_at(&mut self, i: usize) -> Option<Keyed<V>> {
        if i >= self.a.len() {
            return None;
        }
        let e = self.a.swap_remove(i);
        if i < self.a.len() {
            if is_min_level(i) {
                self.trickle_down::<false>(i);
            } else {
                self.trickle_down::<true>(i);
            }
        }
        Some(e)
    }

    /// Restores the heap below `i` (`MAX`: `i` is on a max level).
    fn trickle_down<const MAX: bool>(&mut self, mut i: usize) {
        let n = self.a.len();
        let better = |a: &Keyed<V>, b: &Keyed<V>| if MAX { b.lt(a) } else { a.lt(b) };
        loop {
            let c1 = 2 * i + 1;
            if c1 >= n {
                return;
            }
            // The best among children and grandchildren.
            let mut m = c1;
            let candidates = [c1 + 1, 2 * c1 + 1, 2 * c1 + 2, 2 * c1 + 3, 2 * c1 + 4];
            for &c in &candidates {
                if c < n && better(&self.a[c], &self.a[m]) {
                    m = c;
                }
            }
            if m <= c1 + 1 {
                // A child: it has no descendants that could be better than it.
                if better(&self.a[m], &self.a[i]) {
                    self.a.swap(m, i);
                }
                return;
            }
            if !better(&self.a[m], &self.a[i]) {
                return;
            }
            self.a.swap(m, i);
            let p = (m - 1) / 2;
            if better(&self.a[p], &self.a[m]) {
                self.a.swap(m, p);
            }
            i = m;
        }
    }
}

/// An exact, bounded PIFO on a min-max heap keyed by (rank, arrival sequence number).
///
/// Any `u64` rank; O(log n) push, pop and eviction. Storage is one `Vec` that keeps its
/// allocation, so a queue that has reached its working size allocates nothing more.
#[derive(Clone, Debug)]
pub struct HeapPifo<T> {
    heap: MinMaxHeap<T>,
    seq: u64,
    capacity: usize,
    policy: OverflowPolicy,
}

/// Most slots allocated up front; a larger capacity grows on demand.
const PREALLOCATE_MAX: usize = 1 << 10;

impl<T> HeapPifo<T> {
    /// An empty PIFO holding at most `capacity` elements.
    pub fn new(capacity: usize, policy: OverflowPolicy) -> Self {
        HeapPifo {
            heap: MinMaxHeap::with_capacity(capacity.min(PREALLOCATE_MAX)),
            seq: 0,
            capacity,
            policy,
        }
    }

    /// An empty PIFO without a practical bound ([`OverflowPolicy::DropArriving`] at
    /// `usize::MAX`).
    pub fn unbounded() -> Self {
        HeapPifo {
            heap: MinMaxHeap::with_capacity(0),
            seq: 0,
            capacity: usize::MAX,
            policy: OverflowPolicy::DropArriving,
        }
    }
}

impl<T> Pifo<T> for HeapPifo<T> {
    fn push(&mut self, rank: u64, item: T) -> Result<(), Overflow<T>> {
        if self.heap.len() >= self.capacity {
            if arriving_is_last(self.policy, rank, self.heap.max().map(|e| e.key)) {
                return Err(Overflow::Refused { rank, item });
            }
            let seq = self.seq;
            self.seq += 1;
            let out = self.heap.pop_max();
            self.heap.push(Keyed {
                key: rank,
                seq,
                val: item,
            });
            return match out {
                Some(e) => Err(Overflow::Evicted {
                    rank: e.key,
                    item: e.val,
                }),
                None => Ok(()),
            };
        }
        let seq = self.seq;
        self.seq += 1;
        self.heap.push(Keyed {
            key: rank,
            seq,
            val: item,
        });
        Ok(())
    }

    fn pop(&mut self) -> Option<(u64, T)> {
        self.heap.pop_min().map(|e| (e.key, e.val))
    }

    fn peek(&self) -> Option<(u64, &T)> {
        self.heap.min().map(|e| (e.key, &e.val))
    }

    fn peek_largest(&self) -> Option<(u64, &T)> {
        self.heap.max().map(|e| (e.key, &e.val))
    }

    fn pop_largest(&mut self) -> Option<(u64, T)> {
        self.heap.pop_max().map(|e| (e.key, e.val))
    }

    fn len(&self) -> usize {
        self.heap.len()
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
    fn min_max_heap_serves_both_ends() {
        let mut h = MinMaxHeap::with_capacity(0);
        let keys = [5u64, 1, 9, 3, 7, 2, 8, 6, 4, 0, 11, 10];
        for (s, &k) in keys.iter().enumerate() {
            h.push(Keyed {
                key: k,
                seq: s as u64,
                val: (),
            });
        }
        let mut lo = 0;
        let mut hi = 11;
        while h.len() > 0 {
            let a = h.pop_min().map(|e| e.key);
            assert_eq!(a, Some(lo));
            lo += 1;
            if h.len() > 0 {
                assert_eq!(h.pop_max().map(|e| e.key), Some(hi));
                hi -= 1;
            }
        }
    }
}
