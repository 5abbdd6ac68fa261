//! Element ranges of a rank's buffer, and the even split of a buffer into chunks.
//!
//! Programs address their buffer in *elements* (not bytes): a [`ChunkRange`] is a contiguous
//! half-open range `[offset, offset + len)`. Collectives split `count` elements into `n` chunks
//! whose sizes differ by at most one: the first `count % n` chunks get one extra element
//! ([`ChunkRange::even_split`]). Empty chunks are allowed (when `count < n`).

use std::fmt;

use serde::{Deserialize, Serialize};

/// A contiguous range of elements `[offset, offset + len)` of a rank's buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub struct ChunkRange {
    /// Index of the first element.
    pub offset: usize,
    /// Number of elements.
    pub len: usize,
}

impl ChunkRange {
    /// The range `[offset, offset + len)`.
    pub const fn new(offset: usize, len: usize) -> ChunkRange {
        ChunkRange { offset, len }
    }

    /// One past the last element, or `None` if `offset + len` overflows.
    pub const fn end(self) -> Option<usize> {
        self.offset.checked_add(self.len)
    }

    /// Whether the range lies inside a buffer of `buffer_len` elements.
    pub const fn fits(self, buffer_len: usize) -> bool {
        match self.end() {
            Some(end) => end <= buffer_len,
            None => false,
        }
    }

    /// Whether the two ranges share an element (empty ranges overlap nothing).
    pub fn overlaps(self, other: ChunkRange) -> bool {
        let (Some(a_end), Some(b_end)) = (self.end(), other.end()) else {
            // An overflowing range is invalid anyway; treat it as touching everything after it.
            return self.len > 0 && other.len > 0;
        };
        self.len > 0 && other.len > 0 && self.offset < b_end && other.offset < a_end
    }

    /// The same range moved `delta` elements later, or `None` on overflow.
    pub const fn shifted(self, delta: usize) -> Option<ChunkRange> {
        match self.offset.checked_add(delta) {
            Some(offset) => Some(ChunkRange {
                offset,
                len: self.len,
            }),
            None => None,
        }
    }

    /// Splits `[0, total)` into `parts` consecutive chunks whose lengths differ by at most one:
    /// chunk `i` has `total / parts + 1` elements if `i < total % parts`, else `total / parts`.
    /// Returns no chunks when `parts == 0`.
    pub fn even_split(total: usize, parts: usize) -> Vec<ChunkRange> {
        if parts == 0 {
            return Vec::new();
        }
        let base = total / parts;
        let extra = total % parts;
        let mut offset = 0;
        (0..parts)
            .map(|i| {
                let len = base + usize::from(i < extra);
                let chunk = ChunkRange::new(offset, len);
                offset += len;
                chunk
            })
            .collect()
    }

    /// Chunk `i` of [`even_split`](Self::even_split)`(total, parts)`, computed in O(1); an
    /// empty range at `total` when `i >= parts`.
    pub const fn even_split_nth(total: usize, parts: usize, i: usize) -> ChunkRange {
        if i >= parts {
            return ChunkRange::new(total, 0);
        }
        let (base, extra) = (total / parts, total % parts);
        let before = if i < extra { i } else { extra };
        ChunkRange::new(i * base + before, base + (i < extra) as usize)
    }

    /// Piece `i` of this range cut into `parts` by [`even_split`](Self::even_split).
    pub const fn nth_part(self, parts: usize, i: usize) -> ChunkRange {
        let r = ChunkRange::even_split_nth(self.len, parts, i);
        ChunkRange::new(self.offset + r.offset, r.len)
    }

    /// Splits `[0, total)` into consecutive chunks of the given lengths, which must sum to
    /// `total` (returns `None` otherwise).
    pub fn consecutive(
        total: usize,
        lens: impl IntoIterator<Item = usize>,
    ) -> Option<Vec<ChunkRange>> {
        let mut offset = 0usize;
        let mut out = Vec::new();
        for len in lens {
            out.push(ChunkRange::new(offset, len));
            offset = offset.checked_add(len)?;
        }
        (offset == total).then_some(out)
    }
}

impl fmt::Display for ChunkRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.end() {
            Some(end) => write!(f, "[{}..{})", self.offset, end),
            None => write!(f, "[{}..{}+{})", self.offset, self.offset, self.len),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn even_split_sizes_differ_by_at_most_one() {
        let parts = ChunkRange::even_split(10, 4);
        assert_eq!(
            parts,
            [
                ChunkRange::new(0, 3),
                ChunkRange::new(3, 3),
                ChunkRange::new(6, 2),
                ChunkRange::new(8, 2)
            ]
        );
        let small = ChunkRange::even_split(2, 5);
        assert_eq!(
            small.iter().map(|c| c.len).collect::<Vec<_>>(),
            [1, 1, 0, 0, 0]
        );
        assert_eq!(small[4], ChunkRange::new(2, 0));
        assert!(ChunkRange::even_split(7, 0).is_empty());
    }

    #[test]
    fn even_split_nth_matches_even_split() {
        for total in [0, 1, 5, 10, 17] {
            for parts in 1..=7 {
                let all = ChunkRange::even_split(total, parts);
                for (i, c) in all.iter().enumerate() {
                    assert_eq!(ChunkRange::even_split_nth(total, parts, i), *c);
                    assert_eq!(
                        ChunkRange::new(3, total).nth_part(parts, i),
                        ChunkRange::new(c.offset + 3, c.len)
                    );
                }
            }
        }
    }

    #[test]
    fn overlap_and_fit() {
        let a = ChunkRange::new(0, 4);
        assert!(a.overlaps(ChunkRange::new(3, 1)));
        assert!(!a.overlaps(ChunkRange::new(4, 2)));
        assert!(!a.overlaps(ChunkRange::new(2, 0)));
        assert!(a.fits(4));
        assert!(!a.fits(3));
        assert!(!ChunkRange::new(usize::MAX, 1).fits(usize::MAX));
        assert_eq!(a.to_string(), "[0..4)");
    }

    #[test]
    fn consecutive_checks_total() {
        assert_eq!(
            ChunkRange::consecutive(5, [2, 0, 3]),
            Some(vec![
                ChunkRange::new(0, 2),
                ChunkRange::new(2, 0),
                ChunkRange::new(2, 3)
            ])
        );
        assert_eq!(ChunkRange::consecutive(6, [2, 3]), None);
    }
}
