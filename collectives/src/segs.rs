//! Blocks made of several ranges ("segments") of a rank's buffer.
//!
//! Most algorithms move contiguous chunks, but some blocks are not contiguous: a chunked
//! Reduce-Scatter keeps every rank's final output contiguous (the layout convention), so the
//! block a chunk assigns to a rank is a slice of that rank's output, and a hierarchical step
//! moves the union of the blocks of many ranks. A block is therefore a list of segments; a
//! message carrying a block is one `Send` per segment, matched by one `Recv` per segment on
//! the other side, because both sides derive the same list. Adjacent segments are merged so
//! that in the common, contiguous case a block is exactly one message.

use crate::chunk::ChunkRange;

/// A block: ranges in message order, none empty, adjacent ones merged.
pub(crate) type Segs = Vec<ChunkRange>;

/// Appends `r` to `segs`, merging it into the last segment when adjacent; drops empty ranges.
pub(crate) fn push_seg(segs: &mut Segs, r: ChunkRange) {
    if r.len == 0 {
        return;
    }
    if let Some(last) = segs.last_mut() {
        if last.end() == Some(r.offset) {
            last.len += r.len;
            return;
        }
    }
    segs.push(r);
}

/// One range as a block.
pub(crate) fn single(r: ChunkRange) -> Segs {
    let mut s = Segs::new();
    push_seg(&mut s, r);
    s
}

/// The blocks one after the other, as one block.
pub(crate) fn concat<'a>(blocks: impl IntoIterator<Item = &'a Segs>) -> Segs {
    let mut out = Segs::new();
    for b in blocks {
        for &r in b {
            push_seg(&mut out, r);
        }
    }
    out
}

/// The union of the given ranges, sorted by offset and merged.
pub(crate) fn union(mut ranges: Vec<ChunkRange>) -> Segs {
    ranges.sort_unstable_by_key(|r| r.offset);
    let mut out = Segs::new();
    for r in ranges {
        push_seg(&mut out, r);
    }
    out
}

/// Number of elements in a block.
pub(crate) fn total(segs: &[ChunkRange]) -> usize {
    segs.iter().map(|r| r.len).sum()
}

/// Splits a block, in element order, into `parts` consecutive blocks whose lengths follow
/// [`ChunkRange::even_split`]`(total, parts)`.
pub(crate) fn split(segs: &[ChunkRange], parts: usize) -> Vec<Segs> {
    let lens = ChunkRange::even_split(total(segs), parts);
    let mut out = Vec::with_capacity(parts);
    let mut it = segs.iter().copied();
    let mut cur: Option<ChunkRange> = it.next();
    for piece in lens {
        let mut need = piece.len;
        let mut block = Segs::new();
        while need > 0 {
            let Some(r) = cur else { break };
            let take = need.min(r.len);
            push_seg(&mut block, ChunkRange::new(r.offset, take));
            need -= take;
            cur = if take == r.len {
                it.next()
            } else {
                Some(ChunkRange::new(r.offset + take, r.len - take))
            };
        }
        out.push(block);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(o: usize, l: usize) -> ChunkRange {
        ChunkRange::new(o, l)
    }

    #[test]
    fn split_follows_even_split_across_segments() {
        let segs = vec![c(0, 3), c(10, 4)];
        let parts = split(&segs, 3);
        // 7 elements in 3 parts: 3, 2, 2.
        assert_eq!(parts, [vec![c(0, 3)], vec![c(10, 2)], vec![c(12, 2)]]);
        let parts = split(&segs, 2);
        assert_eq!(parts, [vec![c(0, 3), c(10, 1)], vec![c(11, 3)]]);
        assert_eq!(split(&[c(5, 1)], 3), [vec![c(5, 1)], vec![], vec![]]);
    }

    #[test]
    fn concat_and_union_merge_neighbours() {
        assert_eq!(concat(&[vec![c(0, 2)], vec![], vec![c(2, 3)]]), [c(0, 5)]);
        assert_eq!(union(vec![c(4, 2), c(0, 4), c(7, 1)]), [c(0, 6), c(7, 1)]);
        assert_eq!(single(c(3, 0)), Vec::<ChunkRange>::new());
    }
}
