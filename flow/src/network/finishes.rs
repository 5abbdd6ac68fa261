//! The projected finishes, grouped by instant: the next finish is the earliest instant with a
//! valid entry, and all of an instant's flows are taken at once, in [`crate::FlowId`] order.
//!
//! Why not one heap of `(time, slot, version)`: a collective's flows run in lockstep, so
//! thousands finish at each of a few instants, and a heap pays a sift through all of them per
//! pop. Here a push appends to its instant's list and an instant's flows come out with one sort
//! of that list (mostly in order already: flows start in the order the last ones finished).
//! Entries are invalidated lazily, as in a heap: a flow's version moves at every rate change
//! and at its finish, and only the entry with the current version counts.

use std::collections::BTreeMap;

use smallvec::SmallVec;

/// The entries of one instant: `slot << 32 | version`, which orders by slot, then version.
type Bucket = SmallVec<[u64; 1]>;

/// Projected finishes by instant (picoseconds).
#[derive(Debug, Default)]
pub(super) struct FinishQueue {
    at: BTreeMap<u64, Bucket>,
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
    pub(super) fn push(&mut self, time: u64, slot: u32, version: u32) {
        let entry = u64::from(slot) << 32 | u64::from(version);
        let spare = &mut self.spare;
        self.at
            .entry(time)
            .or_insert_with(|| spare.pop().unwrap_or_default())
            .push(entry);
        self.len += 1;
    }

    /// The earliest instant with a valid entry (`version[slot]` is the entry's version),
    /// dropping the instants before it, whose entries are all stale.
    pub(super) fn peek(&mut self, version: &[u32]) -> Option<u64> {
        loop {
            let (&t, bucket) = self.at.first_key_value()?;
            if bucket.iter().any(|&e| valid(e, version)) {
                return Some(t);
            }
            self.pop_first();
        }
    }

    /// Takes the entries of the earliest instant, sorted by slot then version (stale ones
    /// included: the caller checks versions); give the list back with
    /// [`FinishQueue::recycle`].
    pub(super) fn take_first(&mut self) -> Option<Bucket> {
        let mut bucket = self.at.pop_first()?.1;
        self.len -= bucket.len();
        bucket.sort_unstable();
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
        self.at.retain(|_, bucket| {
            bucket.retain(|e| valid(*e, version));
            len += bucket.len();
            !bucket.is_empty()
        });
        self.len = len;
    }

    fn pop_first(&mut self) {
        if let Some((_, bucket)) = self.at.pop_first() {
            self.len -= bucket.len();
            self.recycle(bucket);
        }
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
