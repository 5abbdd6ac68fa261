//! All-To-All, direct and ring, one chunk at a time.
//!
//! Layout (see [`crate::algorithms::all_to_all_blocks`]): input `[0, count)`, output
//! `[count, 2 count)`; block `j` of rank `i` has `L(i, j) = count / n + 1` elements if
//! `(i + j) mod n < count mod n`, else `count / n`. Chunk `c` of `k` moves piece `c` of every
//! block ([`ChunkRange::nth_part`]), so chunks are independent.
//!
//! - **Direct**: round `k = 1..n`, rank `i` sends its piece for `i + k` straight to it and
//!   receives from `i - k`.
//! - **Ring**: blocks travel along the ring `i -> i + 1`, each rank keeping the block that is
//!   for it and forwarding the rest. In round `s = 1..n`, rank `i` forwards the `n - s` blocks
//!   that rank `i - s + 1` addressed to `i + 1 .. i + n - s`, as one message. Received messages
//!   land in one of two staging areas (alternating by round, so a round's receive only waits
//!   for the forward of two rounds back); the rank copies the first block (its own) to the
//!   output and forwards the remainder directly from the staging area. Before round 1 a rank
//!   copies its outgoing blocks, rotated to start at `i + 1`, into the staging area. Each rank
//!   sends about `(n - 1) / 2` buffers in total, against `(n - 1) / n` for direct, in exchange
//!   for only ever talking to its ring neighbours.
//!
//! Ring buffer: `2 count + 2 T` elements, `T = (n - 1)(count / n + 1)` per staging area; chunk
//! `c` uses its own slice of each area (its largest message, `n - 1` pieces).

use crate::algorithms::AlgorithmError;
use crate::chunk::ChunkRange;
use crate::emit::Emitter;

/// Sizes shared by every rank of an All-To-All.
#[derive(Clone, Copy, Debug)]
pub(crate) struct A2a {
    n: usize,
    count: usize,
    chunks: usize,
}

/// How many of `start, start + 1, .., start + m - 1` (mod `n`, `m <= n`) are `< extra`.
fn count_below(start: usize, m: usize, n: usize, extra: usize) -> usize {
    let start = start % n;
    if start + m <= n {
        (start + m).min(extra) - start.min(extra)
    } else {
        (extra - start.min(extra)) + (start + m - n).min(extra)
    }
}

impl A2a {
    pub(crate) fn new(n: usize, count: usize, chunks: usize) -> A2a {
        A2a { n, count, chunks }
    }

    /// `L(i, j)`.
    fn block_len(&self, i: usize, j: usize) -> usize {
        let (base, extra) = (self.count / self.n, self.count % self.n);
        base + usize::from((i + j) % self.n < extra)
    }

    /// Block `j` of rank `i`'s input, in O(1).
    fn block(&self, i: usize, j: usize) -> ChunkRange {
        let (base, extra) = (self.count / self.n, self.count % self.n);
        ChunkRange::new(
            j * base + count_below(i, j, self.n, extra),
            self.block_len(i, j),
        )
    }

    /// Piece `c` of rank `i`'s input block `j`.
    fn in_piece(&self, i: usize, j: usize, c: usize) -> ChunkRange {
        self.block(i, j).nth_part(self.chunks, c)
    }

    /// Piece `c` of rank `i`'s output block `j` (which receives rank `j`'s block `i`).
    fn out_piece(&self, i: usize, j: usize, c: usize) -> ChunkRange {
        let p = self.in_piece(i, j, c);
        ChunkRange::new(p.offset + self.count, p.len)
    }

    /// Total length of piece `c` of the blocks `L(o, d)` for `d = first .. first + m - 1`.
    fn pieces_len(&self, o: usize, first: usize, m: usize, c: usize) -> usize {
        let (base, extra) = (self.count / self.n, self.count % self.n);
        let big = count_below(o + first, m, self.n, extra);
        let piece = |len: usize| ChunkRange::even_split_nth(len, self.chunks, c).len;
        big * piece(base + 1) + (m - big) * piece(base)
    }

    /// Elements in one ring staging area.
    fn stage_len(&self) -> Option<usize> {
        (self.n - 1).checked_mul(self.count / self.n + 1)
    }

    /// Buffer of the ring variant.
    pub(crate) fn ring_buffer_len(&self) -> Option<usize> {
        self.count
            .checked_mul(2)?
            .checked_add(self.stage_len()?.checked_mul(2)?)
    }

    /// Offset of chunk `c`'s slice within a staging area.
    fn stage_offset(&self, c: usize) -> usize {
        let base = self.count / self.n;
        // Sum over earlier chunks of (n - 1) * (largest piece of that chunk).
        let before = ChunkRange::even_split_nth(base + 1, self.chunks, c).offset;
        (self.n - 1) * before
    }

    /// Direct All-To-All of chunk `c` on channel `ch`.
    pub(crate) fn direct(&self, e: &mut Emitter, c: usize, ch: u32) -> Result<(), AlgorithmError> {
        let n = self.n;
        for i in 0..n {
            e.copy(i, self.in_piece(i, i, c), self.out_piece(i, i, c))?;
            for k in 1..n {
                let (to, from) = ((i + k) % n, (i + n - k) % n);
                send_nonempty(e, i, to, self.in_piece(i, to, c), ch)?;
                recv_nonempty(e, i, from, self.out_piece(i, from, c), ch)?;
            }
        }
        Ok(())
    }

    /// Ring All-To-All of chunk `c` on channel `ch`.
    pub(crate) fn ring(&self, e: &mut Emitter, c: usize, ch: u32) -> Result<(), AlgorithmError> {
        let n = self.n;
        let stage = self
            .stage_len()
            .ok_or(AlgorithmError::CountTooLarge { count: self.count })?;
        let off = self.stage_offset(c);
        // Staging area of round s: A for even s, B for odd; both within the checked buffer.
        let area = |s: usize| 2 * self.count + (s % 2) * stage + off;
        for r in 0..n {
            let (next, prev) = ((r + 1) % n, (r + n - 1) % n);
            e.copy(r, self.in_piece(r, r, c), self.out_piece(r, r, c))?;
            // Outgoing pieces, rotated to start at r + 1, packed at the start of area 0; runs
            // that are contiguous on both sides become one copy.
            let mut at = area(0);
            let mut run: Option<(ChunkRange, usize)> = None;
            for k in 1..n {
                let src = self.in_piece(r, (r + k) % n, c);
                run = match run {
                    Some((s, d)) if s.end() == Some(src.offset) => {
                        Some((ChunkRange::new(s.offset, s.len + src.len), d))
                    }
                    Some((s, d)) => {
                        e.copy(r, s, ChunkRange::new(d, s.len))?;
                        Some((src, at))
                    }
                    None => Some((src, at)),
                };
                at += src.len;
            }
            if let Some((s, d)) = run {
                e.copy(r, s, ChunkRange::new(d, s.len))?;
            }
            for s in 1..n {
                // Send: origin r - s + 1's pieces for r + 1 .. r + n - s.
                let o = (r + n - (s - 1)) % n;
                let skip = if s == 1 {
                    0
                } else {
                    self.in_piece(o, r, c).len
                };
                let len = self.pieces_len(o, r + 1, n - s, c);
                send_nonempty(e, r, next, ChunkRange::new(area(s - 1) + skip, len), ch)?;
                // Receive: origin r - s's pieces for r .. r + n - 1 - s; the first is ours.
                let o = (r + n - s) % n;
                let len = self.pieces_len(o, r, n - s, c);
                recv_nonempty(e, r, prev, ChunkRange::new(area(s), len), ch)?;
                let mine = self.in_piece(o, r, c).len;
                e.copy(r, ChunkRange::new(area(s), mine), self.out_piece(r, o, c))?;
            }
        }
        Ok(())
    }
}

fn send_nonempty(
    e: &mut Emitter,
    r: usize,
    peer: usize,
    chunk: ChunkRange,
    ch: u32,
) -> Result<(), AlgorithmError> {
    // An empty message is no step, but still counts against the budget.
    let segs: &[ChunkRange] = if chunk.len == 0 { &[] } else { &[chunk] };
    e.send(r, peer, segs, ch)
}

fn recv_nonempty(
    e: &mut Emitter,
    r: usize,
    peer: usize,
    chunk: ChunkRange,
    ch: u32,
) -> Result<(), AlgorithmError> {
    let segs: &[ChunkRange] = if chunk.len == 0 { &[] } else { &[chunk] };
    e.recv(r, peer, segs, false, ch)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithms::all_to_all_blocks;

    #[test]
    fn closed_form_blocks_match_the_public_layout() {
        for n in 1..=7 {
            for count in [0, 1, n + 1, 3 * n + 2] {
                let a = A2a::new(n, count, 1);
                for i in 0..n {
                    let blocks = all_to_all_blocks(n, count, i);
                    for (j, b) in blocks.iter().enumerate() {
                        assert_eq!(a.block(i, j), *b, "n={n} count={count} i={i} j={j}");
                    }
                }
            }
        }
    }

    #[test]
    fn count_below_wraps() {
        // n = 5, extra = 2: positions 3, 4, 0, 1 -> two are below 2.
        assert_eq!(count_below(3, 4, 5, 2), 2);
        assert_eq!(count_below(0, 5, 5, 2), 2);
        assert_eq!(count_below(1, 1, 5, 2), 1);
        assert_eq!(count_below(2, 3, 5, 2), 0);
    }
}
