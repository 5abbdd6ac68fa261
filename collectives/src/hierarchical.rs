//! Multi-dimensional (hierarchical) collectives and their dimension-order policies.
//!
//! Ranks are laid out on dimensions of sizes `p_0 .. p_{D-1}`, rank
//! `= c_0 + p_0 c_1 + p_0 p_1 c_2 + ...`; a *group* in dimension `d` is the `p_d` ranks that
//! differ only in coordinate `d`, member `j` having `c_d = j`. Each dimension runs its own
//! algorithm (the `phases` module).
//!
//! - `local_bw_aware` (ASTRA-sim's localBWAware): Reduce-Scatter through the dimensions in the
//!   chunk's order `pi`, each on the shard the previous one left, then All-Gather back in the
//!   reverse order. Level `t` (dimension `pi_t`) moves `S / (p_{pi_0} .. p_{pi_{t-1}})`
//!   elements per group member, as the closed form assumes.
//!   * All-Reduce: a member's shard at level `t + 1` is block `c_{pi_t}` of the even split
//!     (`segs::split`) of its shard at level `t`, starting from the chunk.
//!   * Reduce-Scatter / All-Gather: the outputs (inputs) must stay one contiguous range per rank
//!     whatever the chunking and order, so the final *leaves* are fixed first: rank `r`'s output
//!     is piece `pos(r)` of [`crate::chunk::ChunkRange::even_split`]`(count, n)`, with `pos` the
//!     mixed-radix number with `c_0` most significant, and chunk `c` of a rank is piece `c` of
//!     its output. A level's block is the union of the leaves of the ranks that end up under it;
//!     with one chunk in the fixed order it is contiguous (one message), otherwise it may be
//!     several segments (one message each): with several chunks, a level-`t` block holds one
//!     piece per rank under it, up to `n / (p_{pi_0} .. p_{pi_t})` messages where one would do.
//!     No layout avoids this (a rank's output must be contiguous across chunks while a chunk's
//!     pieces of different ranks would have to be adjacent); All-Reduce has no such constraint
//!     and always sends one message per block.
//! - `baseline`: a full All-Reduce in every dimension in turn, each on the whole chunk.
//!
//! Dimension order: `fixed` is ascending for Reduce-Scatter (and baseline), descending for
//! All-Gather. `themis` is a greedy scheduler: chunk by chunk, the chunk's Reduce-Scatter
//! dimensions are ordered by least current load first (ties: lower dimension first), then the
//! load of every dimension `d` grows by the elements the chunk moves there times
//! `(p_d - 1) / p_d / bandwidth_d` (Reduce-Scatter and All-Gather both count for All-Reduce);
//! the All-Gather runs in the reverse order of that chunk's Reduce-Scatter.

use crate::algorithms::AlgorithmError;
use crate::chunk::ChunkRange;
use crate::emit::Emitter;
use crate::phases;
use crate::plan::{Algorithm, DimPolicy};
use crate::segs::{single, split, union, Segs};

/// The rank grid of a hierarchical plan, size-1 dimensions included.
#[derive(Clone, Debug)]
pub(crate) struct Grid {
    sizes: Vec<usize>,
    strides: Vec<usize>,
    n: usize,
}

impl Grid {
    /// The grid, or `None` if the product of the sizes overflows.
    pub(crate) fn new(sizes: &[usize]) -> Option<Grid> {
        let mut strides = Vec::with_capacity(sizes.len());
        let mut n = 1usize;
        for &p in sizes {
            strides.push(n);
            n = n.checked_mul(p)?;
        }
        Some(Grid {
            sizes: sizes.to_vec(),
            strides,
            n,
        })
    }

    /// Number of ranks.
    pub(crate) fn ranks(&self) -> usize {
        self.n
    }

    fn coord(&self, r: usize, d: usize) -> usize {
        (r / self.strides[d]) % self.sizes[d]
    }

    /// The group of `base` (whose coordinate `d` is 0) in dimension `d`.
    fn group(&self, base: usize, d: usize) -> Vec<usize> {
        (0..self.sizes[d])
            .map(|j| base + j * self.strides[d])
            .collect()
    }

    /// The first member of every group in dimension `d`.
    fn bases(&self, d: usize) -> impl Iterator<Item = usize> + '_ {
        (0..self.n).filter(move |&r| self.coord(r, d) == 0)
    }

    /// Mixed-radix position of `r` with `c_0` most significant.
    fn pos(&self, r: usize) -> usize {
        (0..self.sizes.len()).fold(0, |acc, d| acc * self.sizes[d] + self.coord(r, d))
    }

    /// Every rank whose coordinates on `fixed` dimensions equal those of `like`, except
    /// coordinate `d` which is `j`; the free dimensions run in ascending order.
    fn matching(&self, like: usize, fixed: &[usize], d: usize, j: usize) -> Vec<usize> {
        let base = like - self.coord(like, d) * self.strides[d] + j * self.strides[d];
        let free: Vec<usize> = (0..self.sizes.len())
            .filter(|x| *x != d && !fixed.contains(x))
            .collect();
        // Clear the free coordinates of `base`, then enumerate them like an odometer.
        let start = free
            .iter()
            .fold(base, |acc, &f| acc - self.coord(base, f) * self.strides[f]);
        let mut out = vec![start];
        for &f in &free {
            let prev = std::mem::take(&mut out);
            for v in 0..self.sizes[f] {
                out.extend(prev.iter().map(|&r| r + v * self.strides[f]));
            }
        }
        out
    }

    /// Rank `r`'s output range for Reduce-Scatter (input range for All-Gather).
    pub(crate) fn leaf(&self, count: usize, r: usize) -> ChunkRange {
        ChunkRange::even_split_nth(count, self.n, self.pos(r))
    }
}

/// A group's members and the blocks its Reduce-Scatter assigned them.
type GroupBlocks = (Vec<usize>, Vec<Segs>);

/// What a hierarchical plan computes per chunk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// Reduce-Scatter then All-Gather, on a contiguous chunk.
    AllReduce,
    /// Reduce-Scatter only, on leaves.
    ReduceScatter,
    /// All-Gather only, on leaves.
    AllGather,
    /// A full All-Reduce per dimension.
    Baseline,
}

/// The Themis / fixed dimension-order policy state across chunks.
#[derive(Clone, Debug)]
pub(crate) struct Orders {
    policy: DimPolicy,
    /// Dimensions taking part (size > 1), ascending.
    dims: Vec<usize>,
    sizes: Vec<usize>,
    bandwidth: Vec<f64>,
    load: Vec<f64>,
    kind: Kind,
}

impl Orders {
    pub(crate) fn new(
        policy: DimPolicy,
        sizes: &[usize],
        bandwidth_bps: &[u64],
        kind: Kind,
    ) -> Orders {
        Orders {
            policy,
            dims: (0..sizes.len()).filter(|&d| sizes[d] > 1).collect(),
            sizes: sizes.to_vec(),
            bandwidth: bandwidth_bps.iter().map(|&b| b as f64).collect(),
            load: vec![0.0; sizes.len()],
            kind,
        }
    }

    /// The Reduce-Scatter (or baseline All-Reduce) order of the next chunk of `len` elements.
    pub(crate) fn next(&mut self, len: usize) -> Vec<usize> {
        let mut order = self.dims.clone();
        if self.policy == DimPolicy::Fixed {
            return order;
        }
        // Stable sort: ties keep ascending dimension order.
        order.sort_by(|&a, &b| self.load[a].total_cmp(&self.load[b]));
        let mut held = len as f64;
        let phases = if self.kind == Kind::AllReduce {
            2.0
        } else {
            1.0
        };
        for &d in &order {
            let p = self.sizes[d] as f64;
            self.load[d] += phases * held * (p - 1.0) / p / self.bandwidth[d];
            if self.kind != Kind::Baseline {
                held /= p;
            }
        }
        order
    }
}

/// Emits one chunk of a hierarchical collective.
///
/// `region` is the chunk (All-Reduce, baseline); for Reduce-Scatter / All-Gather the chunk is
/// `c` of `chunks` of every leaf. `order` is the chunk's Reduce-Scatter order.
#[allow(clippy::too_many_arguments)]
pub(crate) fn emit_chunk(
    e: &mut Emitter,
    grid: &Grid,
    algorithms: &[Algorithm],
    kind: Kind,
    order: &[usize],
    count: usize,
    region: ChunkRange,
    (c, chunks): (usize, usize),
    ch: u32,
) -> Result<(), AlgorithmError> {
    match kind {
        Kind::Baseline => {
            for &d in order {
                for base in grid.bases(d) {
                    let group = grid.group(base, d);
                    phases::all_reduce(e, algorithms[d], &group, &single(region), ch)?;
                }
            }
            Ok(())
        }
        Kind::AllReduce => {
            // Shard held by each rank before level t: computed level by level.
            let mut held: Vec<Segs> = vec![single(region); grid.ranks()];
            let mut levels: Vec<(usize, Vec<GroupBlocks>)> = Vec::new();
            for &d in order {
                let mut groups = Vec::new();
                for base in grid.bases(d) {
                    let group = grid.group(base, d);
                    let blocks = split(&held[base], group.len());
                    phases::reduce_scatter(e, algorithms[d], &group, &blocks, ch)?;
                    for (j, &r) in group.iter().enumerate() {
                        held[r] = blocks[j].clone();
                    }
                    groups.push((group, blocks));
                }
                levels.push((d, groups));
            }
            for (d, groups) in levels.iter().rev() {
                for (group, blocks) in groups {
                    phases::all_gather(e, algorithms[*d], group, blocks, ch)?;
                }
            }
            Ok(())
        }
        Kind::ReduceScatter | Kind::AllGather => {
            let leaf = |r: usize| grid.leaf(count, r).nth_part(chunks, c);
            let blocks_at = |t: usize, base: usize| -> Vec<Segs> {
                let d = order[t];
                (0..grid.sizes[d])
                    .map(|j| {
                        union(
                            grid.matching(base, &order[..t], d, j)
                                .into_iter()
                                .map(leaf)
                                .collect(),
                        )
                    })
                    .collect()
            };
            let levels: Vec<usize> = if kind == Kind::ReduceScatter {
                (0..order.len()).collect()
            } else {
                (0..order.len()).rev().collect()
            };
            for t in levels {
                let d = order[t];
                for base in grid.bases(d) {
                    let group = grid.group(base, d);
                    let blocks = blocks_at(t, base);
                    if kind == Kind::ReduceScatter {
                        phases::reduce_scatter(e, algorithms[d], &group, &blocks, ch)?;
                    } else {
                        phases::all_gather(e, algorithms[d], &group, &blocks, ch)?;
                    }
                }
            }
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_and_matching_follow_the_rank_formula() {
        let g = Grid::new(&[2, 3, 2]).unwrap();
        assert_eq!(g.ranks(), 12);
        // Rank 7 = 1 + 2*0 + 6*1: coordinates (1, 0, 1).
        assert_eq!((g.coord(7, 0), g.coord(7, 1), g.coord(7, 2)), (1, 0, 1));
        assert_eq!(g.group(6, 1), [6, 8, 10]);
        assert_eq!(g.bases(2).collect::<Vec<_>>(), [0, 1, 2, 3, 4, 5]);
        // Ranks with c0 = c0(7) = 1 and c1 = 2, c2 free: 5 and 11.
        assert_eq!(g.matching(7, &[0], 1, 2), [5, 11]);
        // Position: c0 most significant: (1, 0, 1) -> 1*6 + 0*2 + 1 = 7.
        assert_eq!(g.pos(7), 7);
        assert_eq!(g.pos(1), 6);
        assert!(Grid::new(&[usize::MAX, 2]).is_none());
    }

    #[test]
    fn themis_balances_dimension_load() {
        // Two dims of 4 and 2 ranks, equal bandwidth. Chunk 0 starts with dim 0 (tie), which
        // then carries 3/4 * 2 * 100 = 150 against dim 1's 1/2 * 2 * 25 = 25; chunk 1 therefore
        // starts with dim 1: load 25 + 1/2 * 2 * 100 = 125, and dim 0 gets 150 + 3/4 * 2 * 50.
        let mut o = Orders::new(DimPolicy::Themis, &[4, 2], &[1, 1], Kind::AllReduce);
        assert_eq!(o.next(100), [0, 1]);
        assert_eq!(o.next(100), [1, 0]);
        assert_eq!(o.load, [225.0, 125.0]);
        assert_eq!(o.next(100), [1, 0]);
        let mut f = Orders::new(DimPolicy::Fixed, &[4, 1, 2], &[1, 1, 1], Kind::AllReduce);
        assert_eq!(f.next(100), [0, 2]);
        assert_eq!(f.next(100), [0, 2]);
    }
}
