//! The projected finishes, grouped by instant: the next finish is the earliest instant with a
//! valid entry, and all of an instant's flows are taken at once, in [`crate::FlowId`] order.
//!
//! Why not one heap of `(time, slot, version)`: a collective's flows run in lockstep, so
//! thousands finish at each of a few instants, and a heap pays a sift through all of them per
//! pop. Here a push appends to its instant's list and an instant's flows come out with one sort
//! of that list: a stable one, which merges the runs it finds, and the list is a few runs in
//! order (each refresh projects its flows in the order they started, which is the order the
//! last ones finished, and an instant's flows come from a few refreshes).
//! Entries are invalidated lazily, as in a heap: a flow's version moves at every rate change
//! and at its finish, and only the entry with the current version counts.

use std::collections::BTreeMap;

use smallvec::SmallVec;

/// The entries of one instant: `slot << 32 | version`, which orders by slot, then version.
type Bucket = SmallVec<[u64; 1]>;

/// Projected finishes by instant (picoseconds).
///
/// The lists live in `lists`, the map gives each instant's index there, and the instant last
/// pushed to is remembered with its index: a refresh projects an instant's thousands of flows
/// one after another, mostly to one instant, and a push there then searches no map.
#[derive(Debug, Default)]
pub(super) struct FinishQueue {
    at: BTreeMap<u64, u32>,
    lists: Vec<Bucket>,
    /// Indices of `lists` no instant uses.
    unused: Vec<u32>,
    /// The instant last pushed to and its index in `lists`, while it is in the map.
    last: Option<(u64, u32)>,
    /// Entries held, stale ones included (for compaction).
    len: usize,
    /// Emptied lists kept with their buffers, so that an instant of thousands of finishes does
    /// not allocate.
    spare: Vec<Bucket>,
}

impl FinishQueue {
    /// Entries held, stale ones included.
    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// Projects flow `slot` at `version` to finish at `time`.
    #[inline]
    pub(super) fn push(&mut self, time: u64, slot: u32, version: u32) {
        let entry = u64::from(slot) << 32 | u64::from(version);
        let i = match self.last {
            Some((t, i)) if t == time => i,
            _ => self.list_of(time),
        };
        self.lists[i as usize].push(entry);
        self.len += 1;
    }

    /// The index of instant `time`'s list (made if there is none), remembered as the last
    /// pushed to.
    #[inline(never)]
    fn list_of(&mut self, time: u64) -> u32 {
        let (lists, unused, spare) = (&mut self.lists, &mut self.unused, &mut self.spare);
        let i = *self.at.entry(time).or_insert_with(|| {
            let i = unused.pop().unwrap_or_else(|| {
                lists.push(Bucket::new());
                (lists.len() - 1) as u32
            });
            let list = &mut lists[i as usize];
            if !list.spilled() {
                if let Some(b) = spare.pop() {
                    *list = b;
                }
            }
            i
        });
        self.last = Some((time, i));
        i
    }

    /// The earliest instant with a valid entry (`version[slot]` is the entry's version),
    /// dropping the instants before it, whose entries are all stale.
    pub(super) fn peek(&mut self, version: &[u32]) -> Option<u64> {
        loop {
            let (&t, &i) = self.at.first_key_value()?;
            if self.lists[i as usize].iter().any(|&e| valid(e, version)) {
                return Some(t);
            }
            self.pop_first();
        }
    }

    /// Takes the entries of the earliest instant, sorted by slot then version (stale ones
    /// included: the caller checks versions); give the list back with
    /// [`FinishQueue::recycle`].
    pub(super) fn take_first(&mut self) -> Option<Bucket> {
        let i = self.at.pop_first()?.1;
        let mut bucket = self.take_list(i);
        self.len -= bucket.len();
        bucket.sort();
        Some(bucket)
    }

    /// Keeps an emptied list's buffer for a later instant.
    pub(super) fn recycle(&mut self, mut bucket: Bucket) {
        bucket.clear();
        if bucket.spilled() {
            self.spare.push(bucket);
        }
    }

    /// Drops every stale entry (and the instants left empty).
    pub(super) fn retain_valid(&mut self, version: &[u32]) {
        let mut len = 0;
        let (lists, unused) = (&mut self.lists, &mut self.unused);
        self.at.retain(|_, &mut i| {
            let bucket = &mut lists[i as usize];
            bucket.retain(|e| valid(*e, version));
            len += bucket.len();
            if bucket.is_empty() {
                unused.push(i);
            }
            !bucket.is_empty()
        });
        self.len = len;
        // The instant last pushed to may have gone: found through the map again.
        self.last = None;
    }

    fn pop_first(&mut self) {
        if let Some((_, i)) = self.at.pop_first() {
            let bucket = self.take_list(i);
            self.len -= bucket.len();
            self.recycle(bucket);
        }
    }

    /// Takes the list at index `i` of an instant that left the map; the index is free again.
    fn take_list(&mut self, i: u32) -> Bucket {
        if self.last.is_some_and(|(_, l)| l == i) {
            self.last = None;
        }
        self.unused.push(i);
        std::mem::take(&mut self.lists[i as usize])
    }
}

/// The slot of an entry.
pub(super) fn slot(entry: u64) -> u32 {
    (entry >> 32) as u32
}

/// Whether an entry's version is its flow's current one.
pub(super) fn valid(entry: u64, version: &[u32]) -> bool {
    version.get(slot(entry) as usize) == Some(&(entry as u32))
}
