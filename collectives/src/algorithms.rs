//! Built-in collective algorithms, compiled to one [`Program`] per rank.
//!
//! These stand-alone generators predate [`crate::plan::compile`], the one entry point that
//! covers every algorithm, layout and chunking. They are a second, deliberately independent
//! and simpler implementation of the ring and direct algorithms, kept as the oracle that
//! `tests/plan.rs` compares `compile` against (same programs with `chunks = 1`, except that
//! these also send empty messages when `count < n`); scenarios go through `compile` only.
//!
//! Every generator takes the number of ranks `n` and the element `count` of the collective
//! (the whole buffer, as nccl-tests sizes it), which need not be divisible by `n`: the buffer is
//! split into `n` chunks whose sizes differ by at most one ([`ChunkRange::even_split`]). `n == 0`
//! is an error; `n == 1` gives a program with no steps.
//!
//! ## Rings
//!
//! Rank `r` sends to `r + 1` and receives from `r - 1` (mod `n`). With chunk `c` of the buffer:
//!
//! - **Reduce-Scatter** (`n - 1` sends and receives per rank): in round `s`, rank `r` sends chunk
//!   `r - s - 1` and adds the incoming chunk `r - s - 2` into its own. Afterwards rank `r` holds
//!   the full reduction of chunk `r`. Input: the whole buffer; output: chunk `r`.
//! - **All-Gather** (`n - 1` sends and receives per rank): in round `s`, rank `r` sends chunk
//!   `r - s` and stores the incoming chunk `r - s - 1`. Input: chunk `r`; output: the whole
//!   buffer.
//! - **All-Reduce** = Reduce-Scatter then All-Gather on the same buffer: `2(n - 1)` sends per
//!   rank, each about `count / n` elements, so a rank sends `2(n-1)/n` of the buffer — the
//!   nccl-tests All-Reduce bus factor.
//!
//! ## Direct All-To-All
//!
//! In round `k = 1..n`, rank `i` sends its block `i + k` to rank `i + k` and receives block
//! `i - k` from rank `i - k`; its own block is copied locally. Layout: see
//! [`all_to_all_blocks`].

use crate::chunk::ChunkRange;
use crate::plan::Algorithm;
use crate::program::{Program, ProgramBuilder};

/// Why an algorithm could not be generated.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AlgorithmError {
    /// A collective needs at least one rank.
    #[error("a collective needs at least one rank (got n = 0)")]
    NoRanks,
    /// The buffer the algorithm needs would not be addressable.
    #[error("{count} elements are too many for this algorithm's buffer")]
    CountTooLarge {
        /// The requested element count.
        count: usize,
    },
    /// Halving-doubling Reduce-Scatter / All-Gather need a power-of-two group.
    #[error("halving_doubling reduce_scatter / all_gather need a power-of-two number of ranks per group, got {n}; use ring or direct, or halving_doubling for all_reduce, which accepts any number")]
    NotPowerOfTwo {
        /// The group size.
        n: usize,
    },
    /// The collective has no such algorithm.
    #[error("{op} has no {algorithm} algorithm; choose one of: {}", list(.supported))]
    Unsupported {
        /// The collective (its snake_case key).
        op: &'static str,
        /// The requested algorithm.
        algorithm: Algorithm,
        /// What the collective supports.
        supported: &'static [Algorithm],
    },
    /// An algorithm that cannot run as one phase of a bigger plan (an internal misuse).
    #[error("{algorithm} cannot run as a reduce_scatter / all_gather phase")]
    NotAPhase {
        /// The algorithm.
        algorithm: Algorithm,
    },
    /// A hierarchical layout for a collective that has none.
    #[error("{op} has no multi-dimensional (dims) layout; use a flat layout")]
    NoDimsLayout {
        /// The collective (its snake_case key).
        op: &'static str,
    },
    /// A per-dimension algorithm the scheme cannot use.
    #[error("dimension {dim} uses {algorithm}, which the {scheme} scheme cannot use per dimension; choose one of: {}", list(.supported))]
    DimAlgorithm {
        /// The dimension.
        dim: usize,
        /// Its algorithm.
        algorithm: Algorithm,
        /// The scheme (its snake_case key).
        scheme: &'static str,
        /// What the scheme supports.
        supported: &'static [Algorithm],
    },
    /// The baseline scheme is an All-Reduce per dimension.
    #[error("the baseline scheme only exists for all_reduce, not {op}; use local_bw_aware")]
    BaselineNeedsAllReduce {
        /// The collective (its snake_case key).
        op: &'static str,
    },
    /// The dimensions do not multiply to the rank count.
    #[error("the dimension sizes {sizes:?} multiply to {product}, but the plan has {ranks} ranks; make their product equal the rank count")]
    DimProduct {
        /// The sizes.
        sizes: Vec<usize>,
        /// Their product (saturated at `usize::MAX`).
        product: usize,
        /// The rank count.
        ranks: usize,
    },
    /// A dims layout with no dimension, or a dimension of size 0.
    #[error("a dims layout needs at least one dimension and every size at least 1, got {sizes:?}")]
    BadDims {
        /// The sizes.
        sizes: Vec<usize>,
    },
    /// Themis needs every dimension's bandwidth.
    #[error("the themis dimension policy needs a bandwidth for every dimension; dimension {dim} has bandwidth_bps = 0")]
    MissingBandwidth {
        /// The dimension.
        dim: usize,
    },
    /// The root does not exist.
    #[error("root {root} does not exist: there are {ranks} ranks (0..{ranks})")]
    RootOutOfRange {
        /// The root.
        root: usize,
        /// The rank count.
        ranks: usize,
    },
    /// Zero chunks.
    #[error("chunks must be at least 1 (got 0)")]
    NoChunks,
    /// More chunks than channel numbers or elements allow.
    #[error("{chunks} chunks are too many: at most {max} for this plan")]
    TooManyChunks {
        /// The requested chunks.
        chunks: usize,
        /// The limit.
        max: usize,
    },
    /// The programs would be unreasonably large.
    #[error("the plan needs more than {limit} steps over all ranks; use fewer ranks, chunks or dimensions per group, or a ring / tree algorithm instead of direct")]
    TooManySteps {
        /// The limit ([`crate::plan::MAX_TOTAL_STEPS`]).
        limit: usize,
    },
}

/// `a, b, c` for error messages.
fn list(algorithms: &[Algorithm]) -> String {
    algorithms
        .iter()
        .map(|a| a.key())
        .collect::<Vec<_>>()
        .join(", ")
}

fn check_ranks(n: usize) -> Result<(), AlgorithmError> {
    if n == 0 {
        Err(AlgorithmError::NoRanks)
    } else {
        Ok(())
    }
}

/// `(r - back) mod n`, for `r < n`.
fn ring_back(r: usize, back: usize, n: usize) -> usize {
    (r + n - back % n) % n
}

fn ring_reduce_scatter_steps(b: &mut ProgramBuilder, r: usize, n: usize, chunks: &[ChunkRange]) {
    let (next, prev) = ((r + 1) % n, ring_back(r, 1, n));
    for s in 0..n - 1 {
        b.send(next, chunks[ring_back(r, s + 1, n)]);
        b.recv(prev, chunks[ring_back(r, s + 2, n)], true);
    }
}

fn ring_all_gather_steps(b: &mut ProgramBuilder, r: usize, n: usize, chunks: &[ChunkRange]) {
    let (next, prev) = ((r + 1) % n, ring_back(r, 1, n));
    for s in 0..n - 1 {
        b.send(next, chunks[ring_back(r, s, n)]);
        b.recv(prev, chunks[ring_back(r, s + 1, n)], false);
    }
}

/// Ring Reduce-Scatter of `count` elements over `n` ranks: rank `r`'s output is the sum over
/// all ranks of chunk `r` of [`ChunkRange::even_split`]`(count, n)`.
pub fn ring_reduce_scatter(n: usize, count: usize) -> Result<Vec<Program>, AlgorithmError> {
    check_ranks(n)?;
    let chunks = ChunkRange::even_split(count, n);
    let all = ChunkRange::new(0, count);
    Ok((0..n)
        .map(|r| {
            let mut b = ProgramBuilder::new(r, count, all, chunks[r]);
            ring_reduce_scatter_steps(&mut b, r, n, &chunks);
            b.finish()
        })
        .collect())
}

/// Ring All-Gather of `count` elements over `n` ranks: rank `r` contributes chunk `r` of
/// [`ChunkRange::even_split`]`(count, n)` and every rank ends with all `count` elements.
pub fn ring_all_gather(n: usize, count: usize) -> Result<Vec<Program>, AlgorithmError> {
    check_ranks(n)?;
    let chunks = ChunkRange::even_split(count, n);
    let all = ChunkRange::new(0, count);
    Ok((0..n)
        .map(|r| {
            let mut b = ProgramBuilder::new(r, count, chunks[r], all);
            ring_all_gather_steps(&mut b, r, n, &chunks);
            b.finish()
        })
        .collect())
}

/// Ring All-Reduce of `count` elements over `n` ranks, in place: a ring Reduce-Scatter followed
/// by a ring All-Gather, `2(n - 1)` sends and receives per rank.
pub fn ring_all_reduce(n: usize, count: usize) -> Result<Vec<Program>, AlgorithmError> {
    check_ranks(n)?;
    let chunks = ChunkRange::even_split(count, n);
    let all = ChunkRange::new(0, count);
    Ok((0..n)
        .map(|r| {
            let mut b = ProgramBuilder::new(r, count, all, all);
            ring_reduce_scatter_steps(&mut b, r, n, &chunks);
            ring_all_gather_steps(&mut b, r, n, &chunks);
            b.finish()
        })
        .collect())
}

/// The All-To-All block layout of rank `rank`'s `count`-element input (and output).
///
/// Rank `i`'s input block `j` goes to rank `j`, where it becomes output block `i`. Block `j` of
/// rank `i` has `count / n + 1` elements if `(i + j) mod n < count mod n`, else `count / n`;
/// since that size is symmetric in `i` and `j`, a rank's input and output use the same layout
/// and the exchanged blocks always have equal lengths. Blocks are consecutive from offset 0.
/// When `n` divides `count` every block has `count / n` elements (the nccl-tests layout).
/// Returns no blocks when `n == 0`.
pub fn all_to_all_blocks(n: usize, count: usize, rank: usize) -> Vec<ChunkRange> {
    if n == 0 {
        return Vec::new();
    }
    let (base, extra) = (count / n, count % n);
    let i = rank % n;
    let lens = (0..n).map(|j| base + usize::from((i + j) % n < extra));
    let mut offset = 0;
    lens.map(|len| {
        let block = ChunkRange::new(offset, len);
        offset += len;
        block
    })
    .collect()
}

/// Direct (pairwise) All-To-All of `count` elements per rank over `n` ranks, in shifted order:
/// in round `k = 1..n` rank `i` sends block `i + k` to rank `i + k` and receives from rank
/// `i - k`; all rounds are independent.
///
/// Buffer: for `n > 1`, `2 * count` elements, input `[0, count)` and output `[count, 2 count)`,
/// both laid out by [`all_to_all_blocks`]; the rank's own block is a local copy. For `n == 1`
/// the program is empty and in place (`buffer_len == count`).
pub fn direct_all_to_all(n: usize, count: usize) -> Result<Vec<Program>, AlgorithmError> {
    check_ranks(n)?;
    let input = ChunkRange::new(0, count);
    if n == 1 {
        return Ok(vec![ProgramBuilder::new(0, count, input, input).finish()]);
    }
    let buffer_len = count
        .checked_mul(2)
        .ok_or(AlgorithmError::CountTooLarge { count })?;
    let output = ChunkRange::new(count, count);
    Ok((0..n)
        .map(|i| {
            let blocks = all_to_all_blocks(n, count, i);
            // Output blocks sit `count` elements later; `2 * count` fits, so this cannot fail.
            let out = |j: usize| blocks[j].shifted(count).unwrap_or(blocks[j]);
            let mut b = ProgramBuilder::new(i, buffer_len, input, output);
            b.copy(blocks[i], out(i));
            for k in 1..n {
                let to = (i + k) % n;
                let from = ring_back(i, k, n);
                b.send(to, blocks[to]);
                b.recv(from, out(from), false);
            }
            b.finish()
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::program::StepKind;

    #[test]
    fn zero_ranks_is_an_error() {
        assert_eq!(ring_reduce_scatter(0, 4), Err(AlgorithmError::NoRanks));
        assert_eq!(ring_all_gather(0, 4), Err(AlgorithmError::NoRanks));
        assert_eq!(ring_all_reduce(0, 4), Err(AlgorithmError::NoRanks));
        assert_eq!(direct_all_to_all(0, 4), Err(AlgorithmError::NoRanks));
    }

    #[test]
    fn huge_all_to_all_is_an_error() {
        assert_eq!(
            direct_all_to_all(2, usize::MAX),
            Err(AlgorithmError::CountTooLarge { count: usize::MAX })
        );
    }

    #[test]
    fn ring_rounds_for_four_ranks() {
        let p = ring_all_reduce(4, 8).unwrap();
        // Rank 1, chunks of 2: RS sends chunks 0, 3, 2; AG sends chunks 1, 0, 3.
        let sent: Vec<_> = p[1].sends().map(|(peer, c)| (peer, c.offset / 2)).collect();
        assert_eq!(sent, [(2, 0), (2, 3), (2, 2), (2, 1), (2, 0), (2, 3)]);
        let last = p[1].steps.last().unwrap();
        assert_eq!(
            last.kind,
            StepKind::Recv {
                peer: 0,
                chunk: ChunkRange::new(4, 2),
                reduce: false,
                channel: 0,
            }
        );
    }

    #[test]
    fn all_to_all_blocks_are_symmetric_and_cover_the_buffer() {
        for n in 1..=7 {
            for count in [0, 1, n - 1, n, n + 1, 3 * n + 2] {
                let layouts: Vec<_> = (0..n).map(|r| all_to_all_blocks(n, count, r)).collect();
                for (i, blocks) in layouts.iter().enumerate() {
                    assert_eq!(blocks.iter().map(|b| b.len).sum::<usize>(), count);
                    for (j, b) in blocks.iter().enumerate() {
                        assert_eq!(b.len, layouts[j][i].len, "n={n} count={count} i={i} j={j}");
                    }
                }
            }
        }
        assert!(all_to_all_blocks(0, 5, 0).is_empty());
    }
}
