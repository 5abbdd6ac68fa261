//! A first-in, first-out list as a plain vector read from a head index.
//!
//! The queue model reads the front and the back of its queues (a link's segments, the window
//! of stream numbers in [`crate::id_slab`]) at every rate change. A ring buffer computes a
//! wrapped index at each of those reads; here a read is one bounds check. Entries popped from
//! the front stay in the vector until they are at least `COMPACT_AT` and at least as many as
//! the live ones, and are then dropped in one move: each live entry moves at most once per its
//! own number of pops, so a pop stays constant time (amortized) however long the list grows.

/// The list (see the module documentation); `COMPACT_AT` is the fewest popped entries that
/// are dropped in bulk.
#[derive(Clone, Debug)]
pub(crate) struct HeadVec<T, const COMPACT_AT: usize> {
    v: Vec<T>,
    head: usize,
}

impl<T, const COMPACT_AT: usize> Default for HeadVec<T, COMPACT_AT> {
    fn default() -> Self {
        HeadVec {
            v: Vec::new(),
            head: 0,
        }
    }
}

impl<T, const COMPACT_AT: usize> HeadVec<T, COMPACT_AT> {
    /// Live entries.
    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.v.len() - self.head
    }

    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.v.len() == self.head
    }

    #[inline]
    pub(crate) fn front(&self) -> Option<&T> {
        self.v.get(self.head)
    }

    #[inline]
    pub(crate) fn front_mut(&mut self) -> Option<&mut T> {
        self.v.get_mut(self.head)
    }

    #[inline]
    pub(crate) fn back(&self) -> Option<&T> {
        self.v.get(self.head..)?.last()
    }

    #[inline]
    pub(crate) fn back_mut(&mut self) -> Option<&mut T> {
        self.v.get_mut(self.head..)?.last_mut()
    }

    /// The `i`-th live entry from the front.
    #[inline]
    pub(crate) fn get(&self, i: usize) -> Option<&T> {
        self.v.get(self.head.checked_add(i)?)
    }

    /// The `i`-th live entry from the front, to change.
    #[inline]
    pub(crate) fn get_mut(&mut self, i: usize) -> Option<&mut T> {
        self.v.get_mut(self.head.checked_add(i)?)
    }

    /// The live entries, front first.
    pub(crate) fn iter(&self) -> std::slice::Iter<'_, T> {
        self.v.get(self.head..).unwrap_or(&[]).iter()
    }

    #[inline]
    pub(crate) fn push_back(&mut self, x: T) {
        self.v.push(x);
    }

    /// Drops the front entry (nothing when empty).
    #[inline]
    pub(crate) fn pop_front(&mut self) {
        if self.is_empty() {
            return;
        }
        self.head += 1;
        if self.head == self.v.len() {
            self.clear();
        } else if self.head >= COMPACT_AT && 2 * self.head >= self.v.len() {
            self.v.drain(..self.head);
            self.head = 0;
        }
    }

    /// Drops the back entry (nothing when empty).
    pub(crate) fn pop_back(&mut self) {
        if !self.is_empty() {
            self.v.pop();
        }
    }

    pub(crate) fn clear(&mut self) {
        self.v.clear();
        self.head = 0;
    }

    /// Entries held, the popped ones not yet dropped included (what the list's memory holds).
    #[cfg(test)]
    pub(crate) fn held(&self) -> usize {
        self.v.len()
    }
}

impl<T: Clone, const COMPACT_AT: usize> HeadVec<T, COMPACT_AT> {
    /// Makes `len` live entries, filling new ones with `value` (or dropping from the back).
    pub(crate) fn resize(&mut self, len: usize, value: T) {
        self.v.resize(self.head + len, value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pops_in_order_however_many_were_queued() {
        let mut q: HeadVec<u32, 16> = HeadVec::default();
        let mut next = 0;
        for k in 0..200u32 {
            // Two in, one out: the list grows, and the popped ones are compacted away.
            q.push_back(2 * k);
            q.push_back(2 * k + 1);
            assert_eq!(q.front(), Some(&next));
            q.pop_front();
            next += 1;
            assert_eq!(q.len(), k as usize + 1);
            assert_eq!(q.back(), Some(&(2 * k + 1)));
        }
        assert!(q.v.len() <= 2 * q.len() + 16);
        assert_eq!(q.get(1), Some(&(next + 1)));
        assert_eq!(q.iter().count(), q.len());
        q.pop_back();
        assert_eq!(q.len(), 199);
        q.resize(201, 7);
        assert_eq!((q.len(), q.back()), (201, Some(&7)));
        if let Some(x) = q.get_mut(200) {
            *x = 8;
        }
        assert_eq!(q.back(), Some(&8));
        while !q.is_empty() {
            q.pop_front();
        }
        assert_eq!((q.v.len(), q.head), (0, 0));
        assert!(q.front().is_none() && q.back().is_none());
    }
}
