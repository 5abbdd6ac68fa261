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
//! All-Gather. `themis` plans each chunk's Reduce-Scatter order greedily so the dimensions'
//! loads stay balanced (see [`Orders`]: load = elements moved x `(p_d - 1) / p_d` / the
//! bandwidth the dimension's algorithm really gets per host), and keeps that plan only where
//! its model predicts it faster than the fixed order; the All-Gather runs in the reverse order
//! of that chunk's Reduce-Scatter.

use crate::algorithms::AlgorithmError;
use crate::chunk::ChunkRange;
use crate::emit::Emitter;
use crate::phases;
use crate::plan::Algorithm;
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

/// The Themis / fixed dimension orders of a plan's chunks, decided up front.
///
/// The model: dimension `d` is a server that moves `e` elements of a phase in
/// `e (p_d - 1) / p_d / bandwidth_d` (the bandwidth being what the dimension's algorithm really
/// gets per host, see the caller); its *load* is the sum of that over the phases scheduled on
/// it. With chunks pipelining, a schedule takes about its largest load plus the path of its
/// last chunk (the sum of that chunk's own phase times, which nothing overlaps at the end).
///
/// Themis is greedy, chunk by chunk: of every order of the dimensions (the fixed order first,
/// ties keep the earlier), it takes the one that minimises the largest load after the chunk
/// plus the chunk's own path, then the total load. Weighing whole orders rather than sorting
/// by current load keeps it from putting a slow dimension first with the whole chunk because
/// its load was low only from small shards. Finally the greedy schedule is kept only if the
/// model predicts it strictly faster than the fixed order, so Themis never plans slower than
/// fixed.
#[derive(Clone, Debug)]
pub(crate) struct Orders {
    /// Dimensions taking part (size > 1), ascending: the fixed order.
    dims: Vec<usize>,
    sizes: Vec<usize>,
    bandwidth: Vec<f64>,
    kind: Kind,
}

impl Orders {
    pub(crate) fn new(sizes: &[usize], bandwidth_bps: &[u64], kind: Kind) -> Orders {
        Orders {
            dims: (0..sizes.len()).filter(|&d| sizes[d] > 1).collect(),
            sizes: sizes.to_vec(),
            bandwidth: bandwidth_bps.iter().map(|&b| b.max(1) as f64).collect(),
            kind,
        }
    }

    /// The Reduce-Scatter (or baseline All-Reduce) order of each chunk, chunk `c` having
    /// `lens[c]` elements.
    pub(crate) fn schedule(&self, lens: &[usize]) -> Vec<Vec<usize>> {
        let fixed = vec![self.dims.clone(); lens.len()];
        let mut load = vec![0.0f64; self.sizes.len()];
        let mut greedy = Vec::with_capacity(lens.len());
        let all = permutations(&self.dims, MAX_ORDERS_WEIGHED / lens.len().max(1));
        let candidates = if all.len() > 1 { all } else { Vec::new() };
        for &len in lens {
            let mut cands = candidates.clone();
            if cands.is_empty() {
                // Too many dimensions to weigh every order: the fixed one and least-loaded
                // first (a stable sort: ties keep ascending order).
                let mut themis = self.dims.clone();
                themis.sort_by(|&a, &b| load[a].total_cmp(&load[b]));
                cands = vec![self.dims.clone(), themis];
            }
            let mut best: Option<(Vec<usize>, Vec<f64>, f64)> = None;
            for order in cands {
                let (after, path) = self.after(&load, &order, len);
                let cost = (max_of(&after) + path, after.iter().sum::<f64>());
                let better = best.as_ref().is_none_or(|(_, b, bpath)| {
                    less(cost, (max_of(b) + bpath, b.iter().sum::<f64>()))
                });
                if better {
                    best = Some((order, after, path));
                }
            }
            if let Some((order, after, _)) = best {
                load = after;
                greedy.push(order);
            }
        }
        if less(
            (self.predict(&greedy, lens), 0.0),
            (self.predict(&fixed, lens), 0.0),
        ) {
            greedy
        } else {
            fixed
        }
    }

    /// The model's time for `orders`: the largest load plus the last chunk's path.
    fn predict(&self, orders: &[Vec<usize>], lens: &[usize]) -> f64 {
        let mut load = vec![0.0; self.sizes.len()];
        let mut last = 0.0;
        for (order, &len) in orders.iter().zip(lens) {
            let (after, path) = self.after(&load, order, len);
            load = after;
            last = path;
        }
        max_of(&load) + last
    }

    /// The loads after a chunk of `len` elements runs its Reduce-Scatter in `order` (and its
    /// All-Gather back, for All-Reduce) on top of `load`, and the chunk's own path.
    fn after(&self, load: &[f64], order: &[usize], len: usize) -> (Vec<f64>, f64) {
        let mut load = load.to_vec();
        let mut path = 0.0;
        let mut held = len as f64;
        let phases = if self.kind == Kind::AllReduce {
            2.0
        } else {
            1.0
        };
        for &d in order {
            let p = self.sizes[d] as f64;
            let t = phases * held * (p - 1.0) / p / self.bandwidth[d];
            load[d] += t;
            path += t;
            if self.kind != Kind::Baseline {
                held /= p;
            }
        }
        (load, path)
    }
}

/// Themis weighs every order of the dimensions while that makes at most this many orders
/// over all chunks (e.g. 4 dimensions, 24 orders, up to 40 000 chunks); past it only the fixed
/// order and least-loaded-first.
const MAX_ORDERS_WEIGHED: usize = 1 << 20;

fn max_of(v: &[f64]) -> f64 {
    v.iter().copied().fold(0.0, f64::max)
}

/// Whether cost `a` beats `b`: lexicographic on `(time, total load)`, each by more than a
/// relative 1e-9 so that rounding never decides.
fn less(a: (f64, f64), b: (f64, f64)) -> bool {
    let lt = |x: f64, y: f64| x < y - 1e-9 * y.abs();
    if lt(a.0, b.0) {
        return true;
    }
    if lt(b.0, a.0) {
        return false;
    }
    lt(a.1, b.1)
}

/// Every order of `items` in lexicographic order of positions (so `items` itself first), or
/// just `[items]` if there are more than `limit` of them.
fn permutations(items: &[usize], limit: usize) -> Vec<Vec<usize>> {
    let total = (1..=items.len()).try_fold(1usize, |acc, k| acc.checked_mul(k));
    if total.is_none_or(|t| t > limit) {
        return vec![items.to_vec()];
    }
    let mut out = Vec::new();
    let mut idx: Vec<usize> = (0..items.len()).collect();
    loop {
        out.push(idx.iter().map(|&i| items[i]).collect());
        // Next lexicographic permutation of `idx`: the longest non-increasing suffix is
        // `idx[i..]`; swap its predecessor with the last element greater than it, reverse.
        let Some(i) = (1..idx.len()).rev().find(|&i| idx[i - 1] < idx[i]) else {
            return out;
        };
        let pivot = i - 1;
        let Some(j) = (i..idx.len()).rev().find(|&j| idx[j] > idx[pivot]) else {
            return out;
        };
        idx.swap(pivot, j);
        idx[i..].reverse();
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
        // Two dims of 4 and 2 ranks, equal bandwidth, 4 chunks of 100 elements. Per chunk the
        // order [0, 1] puts 2 x 100 x 3/4 = 150 on dim 0 and 2 x 25 x 1/2 = 25 on dim 1 (path
        // 175); [1, 0] puts 100 on dim 1 and 2 x 50 x 3/4 = 75 on dim 0 (path 175). Fixed ends
        // with loads (600, 100): 600 + 175. Greedy on the largest load after the chunk (loads
        // as (dim 0, dim 1)): chunk 0 [1, 0] -> (75, 100); chunk 1 [1, 0] -> (150, 200), as
        // [0, 1] would reach 225; chunk 2: both orders reach 300 with equal totals, the tie
        // keeps the fixed [0, 1] -> (300, 225); chunk 3 [1, 0] -> (375, 325). 375 + 175 < 775,
        // so the greedy plan is kept.
        let o = Orders::new(&[4, 2], &[1, 1], Kind::AllReduce);
        assert_eq!(
            o.schedule(&[100; 4]),
            [vec![1, 0], vec![1, 0], vec![0, 1], vec![1, 0]]
        );
        // Size-1 dimensions take no part.
        let o = Orders::new(&[4, 1, 2], &[1, 1, 1], Kind::AllReduce);
        assert_eq!(o.schedule(&[100])[0].len(), 2);
    }

    #[test]
    fn themis_keeps_the_fixed_order_when_it_is_balanced() {
        // 2 x 4 x 2 at 400 / 300 / 100 (the fully connected middle dimension's direct algorithm
        // gets 3 links of 100): fixed puts L/400 on dims 0 and 1 and L/800 on dim 2 per chunk,
        // already balanced; starting a chunk on the slow dim 2 would lower the largest load
        // a little but lengthen that chunk's path, so the plan stays fixed.
        let o = Orders::new(&[2, 4, 2], &[400, 300, 100], Kind::AllReduce);
        assert!(o.schedule(&[1 << 20; 8]).iter().all(|x| x == &[0, 1, 2]));
    }

    #[test]
    fn permutations_are_lexicographic_and_bounded() {
        assert_eq!(
            permutations(&[0, 2, 5], 100),
            [
                vec![0, 2, 5],
                vec![0, 5, 2],
                vec![2, 0, 5],
                vec![2, 5, 0],
                vec![5, 0, 2],
                vec![5, 2, 0]
            ]
        );
        assert_eq!(permutations(&[0, 1, 2], 5), [vec![0, 1, 2]]);
        assert_eq!(permutations(&[], 5), [Vec::<usize>::new()]);
    }
}
