//! A four-ary min-heap whose entries are moved in place: each pending event has a *handle*,
//! and rescheduling it sifts its one entry up or down instead of pushing a new one and leaving
//! the old one behind, stale.
//!
//! The queue model ([`crate::QueueNetwork`]) reschedules an event at most of its rate changes,
//! and most of them move it by a few picoseconds at most: an entry moved in place barely sifts,
//! whereas a versioned push grows the heap with every change and makes every pop sift through
//! the stale entries. Keys are unique per handle's owner, so the order in which entries come
//! out is the order of their keys, whatever the order they were moved in.

/// What orders the entries: time, then event kind (below 4), then the link or stream (below
/// 2^62: stream numbers grow by two per message).
pub(crate) type Key = (u64, u8, u64);

/// A [`Key`] in one integer, compared in two instructions rather than three branches.
#[inline]
fn pack((t, kind, id): Key) -> u128 {
    (u128::from(t) << 64) | (u128::from(kind & 3) << 62) | u128::from(id & (u64::MAX >> 2))
}

#[inline]
fn unpack(k: u128) -> Key {
    let low = k as u64;
    ((k >> 64) as u64, (low >> 62) as u8, low & (u64::MAX >> 2))
}

/// Children per entry: half the levels of a binary heap (half the cache lines a pop walks),
/// for a few more comparisons per level.
const ARITY: usize = 4;
// `smallest_child`'s tournament takes four.
const _: () = assert!(ARITY == 4);

/// A handle's position when it has no entry.
const NONE: u32 = u32::MAX;

/// The heap (see the module documentation).
#[derive(Debug, Default)]
pub(crate) struct KeyedHeap {
    /// `(key, handle)`, a binary min-heap by key.
    heap: Vec<(u128, u32)>,
    /// Position in `heap` by handle ([`NONE`]: no entry).
    pos: Vec<u32>,
    /// Handles released, for reuse.
    free: Vec<u32>,
}

impl KeyedHeap {
    /// A new handle, with no entry.
    pub(crate) fn handle(&mut self) -> u32 {
        if let Some(h) = self.free.pop() {
            return h;
        }
        self.pos.push(NONE);
        (self.pos.len() - 1) as u32
    }

    /// Gives back handle `h`, removing its entry.
    pub(crate) fn release(&mut self, h: u32) {
        self.remove(h);
        self.free.push(h);
    }

    /// The smallest entry.
    #[inline]
    pub(crate) fn peek(&self) -> Option<Key> {
        self.heap.first().map(|e| unpack(e.0))
    }

    /// Removes and returns the smallest entry.
    pub(crate) fn pop(&mut self) -> Option<Key> {
        let &(key, h) = self.heap.first()?;
        self.pos[h as usize] = NONE;
        let last = self.heap.pop()?;
        if !self.heap.is_empty() {
            // The last entry, which belongs near the bottom: the hole goes down to a leaf by
            // the smallest child and the entry up from there (fewer comparisons than sifting
            // it down).
            let heap = &mut self.heap[..];
            let mut i = 0;
            while let Some(c) = smallest_child(heap, i) {
                let child = heap[c];
                heap[i] = child;
                self.pos[child.1 as usize] = i as u32;
                i = c;
            }
            heap[i] = last;
            self.sift_up(i);
        }
        Some(unpack(key))
    }

    /// Sets handle `h`'s entry to `key`, adding it if it has none. Inlined: the queue model
    /// reschedules an event at most rate changes, from a few places.
    #[inline(always)]
    pub(crate) fn set(&mut self, h: u32, key: Key) {
        let key = pack(key);
        let i = self.pos[h as usize];
        if i == NONE {
            self.heap.push((key, h));
            self.sift_up(self.heap.len() - 1);
            return;
        }
        let i = i as usize;
        let old = self.heap[i].0;
        self.heap[i].0 = key;
        if key < old {
            self.sift_up(i);
        } else {
            self.sift_down(i);
        }
    }

    /// Removes handle `h`'s entry, if any.
    pub(crate) fn remove(&mut self, h: u32) {
        let i = self.pos[h as usize];
        if i == NONE {
            return;
        }
        self.pos[h as usize] = NONE;
        let i = i as usize;
        let Some(last) = self.heap.pop() else {
            return;
        };
        if i < self.heap.len() {
            let old = self.heap[i].0;
            self.heap[i] = last;
            self.pos[last.1 as usize] = i as u32;
            if last.0 < old {
                self.sift_up(i);
            } else {
                self.sift_down(i);
            }
        }
    }

    /// Moves entry `i` up to its place. Inlined (as is [`KeyedHeap::sift_down`]): each of
    /// `set`, `pop` and `remove` ends in one, and most move an entry a level or two, less than
    /// a call's prologue and spills cost.
    #[inline(always)]
    fn sift_up(&mut self, mut i: usize) {
        let heap = &mut self.heap[..];
        let e = heap[i];
        while i > 0 {
            let parent = (i - 1) / ARITY;
            let p = heap[parent];
            if p.0 <= e.0 {
                break;
            }
            heap[i] = p;
            self.pos[p.1 as usize] = i as u32;
            i = parent;
        }
        heap[i] = e;
        self.pos[e.1 as usize] = i as u32;
    }

    /// Moves entry `i` down to its place.
    #[inline(always)]
    fn sift_down(&mut self, mut i: usize) {
        let heap = &mut self.heap[..];
        let e = heap[i];
        while let Some(c) = smallest_child(heap, i) {
            let child = heap[c];
            if e.0 <= child.0 {
                break;
            }
            heap[i] = child;
            self.pos[child.1 as usize] = i as u32;
            i = c;
        }
        heap[i] = e;
        self.pos[e.1 as usize] = i as u32;
    }
}

/// The child of entry `i` with the smallest key, if it has children.
#[inline]
fn smallest_child(heap: &[(u128, u32)], i: usize) -> Option<usize> {
    let first = ARITY * i + 1;
    let kids = heap.get(first..)?;
    if let [a, b, c, d, ..] = kids {
        // All four (the usual case): a tournament, without the loop.
        let (i1, k1) = if b.0 < a.0 { (1, b.0) } else { (0, a.0) };
        let (i2, k2) = if d.0 < c.0 { (3, d.0) } else { (2, c.0) };
        return Some(first + if k2 < k1 { i2 } else { i1 });
    }
    let mut best = 0;
    let mut key = kids.first()?.0;
    for (k, e) in kids.iter().enumerate().take(ARITY).skip(1) {
        if e.0 < key {
            key = e.0;
            best = k;
        }
    }
    Some(first + best)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_come_out_in_key_order_however_they_were_moved() {
        let mut h = KeyedHeap::default();
        let hs: Vec<u32> = (0..50).map(|_| h.handle()).collect();
        // Pseudo-random keys, moved around, some removed.
        for (i, &x) in hs.iter().enumerate() {
            h.set(x, ((i as u64 * 7919) % 101, 0, i as u64));
        }
        for (i, &x) in hs.iter().enumerate().step_by(3) {
            h.set(x, ((i as u64 * 104_729) % 97, 1, i as u64));
        }
        for &x in hs.iter().skip(1).step_by(5) {
            h.remove(x);
        }
        h.release(hs[2]);
        let mut want: Vec<Key> = Vec::new();
        for (i, _) in hs.iter().enumerate() {
            if i % 5 == 1 || i == 2 {
                continue;
            }
            let i64_ = i as u64;
            want.push(if i % 3 == 0 {
                ((i64_ * 104_729) % 97, 1, i64_)
            } else {
                ((i64_ * 7919) % 101, 0, i64_)
            });
        }
        want.sort();
        let mut got = Vec::new();
        while let Some(k) = h.pop() {
            got.push(k);
        }
        assert_eq!(got, want);
        // The released handle is reused.
        assert_eq!(h.handle(), hs[2]);
    }
}
