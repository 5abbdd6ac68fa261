//! Values by a number that grows as they are added: a slab with a window of slots by number.
//!
//! The queue model ([`crate::QueueNetwork`]) looks a stream up by its number at every hop a
//! rate change passes. Its numbers grow by one or two per message and most streams end soon
//! after they start, so the slots of the numbers from the oldest live one on fit in a window
//! indexed by number: a lookup is a subtraction and two loads, with no hashing. A stream that
//! lives on while many others come and go would hold the window open; once the window is more
//! than twice as long as the live values (and a few thousand), its oldest live entries move to
//! a hash map and the window moves on, so memory stays in proportion to the live values.

use rustc_hash::FxHashMap;

use crate::head_vec::HeadVec;

/// A window entry whose value is gone.
const GONE: u32 = u32::MAX;

/// The window length beyond which it is not trimmed, whatever the live values.
const MIN_WINDOW: usize = 4096;

/// The slab (see the module documentation).
#[derive(Debug)]
pub(crate) struct IdSlab<T> {
    /// The values, by slot.
    slots: Vec<Option<T>>,
    /// Slots without a value.
    free: Vec<u32>,
    /// Slot by number, for the numbers from `base` on ([`GONE`]: removed).
    window: HeadVec<u32, MIN_WINDOW>,
    base: u64,
    /// Slot by number, for live values below `base`.
    old: FxHashMap<u64, u32>,
    live: usize,
}

impl<T> Default for IdSlab<T> {
    fn default() -> Self {
        IdSlab {
            slots: Vec::new(),
            free: Vec::new(),
            window: HeadVec::default(),
            base: 0,
            old: FxHashMap::default(),
            live: 0,
        }
    }
}

impl<T> IdSlab<T> {
    #[inline]
    fn slot(&self, id: u64) -> Option<u32> {
        if id >= self.base {
            let i = usize::try_from(id - self.base).ok()?;
            self.window.get(i).copied().filter(|&s| s != GONE)
        } else {
            self.old.get(&id).copied()
        }
    }

    /// The value numbered `id`.
    #[inline]
    pub(crate) fn get(&self, id: u64) -> Option<&T> {
        let s = self.slot(id)?;
        self.slots.get(s as usize)?.as_ref()
    }

    /// The value numbered `id`, to change.
    #[inline]
    pub(crate) fn get_mut(&mut self, id: u64) -> Option<&mut T> {
        let s = self.slot(id)?;
        self.slots.get_mut(s as usize)?.as_mut()
    }

    /// Adds `value` as number `id`, replacing any value of that number. Numbers should grow
    /// (one below the window's start goes to the hash map).
    pub(crate) fn insert(&mut self, id: u64, value: T) {
        if let Some(s) = self.slot(id) {
            self.slots[s as usize] = Some(value);
            return;
        }
        let s = match self.free.pop() {
            Some(s) => {
                self.slots[s as usize] = Some(value);
                s
            }
            None => {
                self.slots.push(Some(value));
                (self.slots.len() - 1) as u32
            }
        };
        self.live += 1;
        if self.window.is_empty() && self.old.is_empty() {
            self.base = id;
        }
        if id < self.base {
            self.old.insert(id, s);
            return;
        }
        let i = (id - self.base) as usize;
        if i == self.window.len() {
            // The next number (the usual case).
            self.window.push_back(s);
        } else {
            if i > self.window.len() {
                self.window.resize(i + 1, GONE);
            }
            if let Some(e) = self.window.get_mut(i) {
                *e = s;
            }
        }
        self.trim();
    }

    /// Removes and returns the value numbered `id`.
    pub(crate) fn remove(&mut self, id: u64) -> Option<T> {
        let s = if id >= self.base {
            let i = usize::try_from(id - self.base).ok()?;
            let e = self.window.get_mut(i)?;
            if *e == GONE {
                return None;
            }
            std::mem::replace(e, GONE)
        } else {
            self.old.remove(&id)?
        };
        self.live -= 1;
        self.free.push(s);
        let value = self.slots.get_mut(s as usize)?.take();
        self.trim();
        value
    }

    /// Moves the window's start past removed numbers, and past live ones (to the hash map)
    /// while it is much longer than the live values.
    fn trim(&mut self) {
        let keep = (2 * self.live).max(MIN_WINDOW);
        while let Some(&s) = self.window.front() {
            if s != GONE {
                if self.window.len() <= keep {
                    break;
                }
                self.old.insert(self.base, s);
            }
            self.window.pop_front();
            self.base += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_found_by_number_however_long_some_live() {
        let mut slab = IdSlab::default();
        // Number 0 lives throughout; the others come and go, three at a time.
        slab.insert(0, 0u64);
        for id in 1..20_000u64 {
            slab.insert(id, id);
            if id > 3 {
                assert_eq!(slab.remove(id - 3), Some(id - 3));
            }
            assert_eq!(slab.get(0), Some(&0));
            assert_eq!(slab.get(id), Some(&id));
        }
        // The window moved on: the long-lived value went to the map.
        assert!(slab.window.len() <= MIN_WINDOW + 1);
        assert!(slab.window.held() <= 3 * MIN_WINDOW);
        assert_eq!(slab.remove(0), Some(0));
        assert_eq!(slab.remove(0), None);
        assert_eq!(slab.get(19_998), Some(&19_998));
        assert_eq!(slab.get(5), None);
        if let Some(v) = slab.get_mut(19_999) {
            *v = 7;
        }
        assert_eq!(slab.get(19_999), Some(&7));
        assert_eq!(slab.live, 3);
        assert!(slab.slots.len() <= 5);
    }
}
