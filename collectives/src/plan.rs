//! The one entry point: a [`Plan`] (collective, ranks, count, root, layout, chunking) compiled
//! into one [`Program`] per rank by [`compile`]. A scenario file maps onto a `Plan`.
//!
//! Layouts:
//!
//! - [`Layout::Flat`]: one algorithm over all ranks ([`algorithms_for`] lists which exist per
//!   collective): ring, direct and halving-doubling phases, the double
//!   binary tree All-Reduce, ring / direct All-To-All, pipeline (chain; `ring` is accepted as a
//!   synonym) and binary-tree Broadcast / Reduce.
//! - [`Layout::Dims`]: hierarchical All-Reduce / Reduce-Scatter / All-Gather over a grid of
//!   dimensions.
//!
//! ## The algorithms
//!
//! Phases over a group of `p` ranks (member `i`; a flat layout is one group of all ranks):
//!
//! - Reduce-Scatter — ring: round `s`, member `i` sends block `i - s - 1` to `i + 1` and adds
//!   block `i - s - 2` from `i - 1` (`p - 1` rounds of `count / p`); direct: round `k = 1..p`,
//!   member `i` sends block `i + k` to `i + k` and adds block `i` from `i - k`, shifted so no
//!   receiver is hit by all at once; halving-doubling (recursive halving, `p` a power of two):
//!   with `m = p/2, .., 1`, member `i` exchanges with `i ^ m`, keeping the half of its current
//!   `2m` blocks that holds block `i` (`log2 p` rounds, data halving).
//! - All-Gather — the mirror images (ring; direct; recursive doubling `m = 1, .., p/2`).
//! - All-Reduce — Reduce-Scatter then All-Gather on the chunk split evenly into `p` blocks.
//!   Halving-doubling with `p` not a power of two folds first: with `2^k <= p`, `rem = p - 2^k`,
//!   odd members `2j + 1 < 2 rem` send their buffer to `2j` (which adds it), the `2^k` others
//!   run halving-doubling, and the `2j` send the result back.
//! - Double binary tree All-Reduce (NCCL's shapes): tree 0 is NCCL's in-order binary tree
//!   (member `i`'s level is its lowest set bit, member 0 the root with one child); tree 1 is
//!   tree 0 shifted by one member for odd `p`, mirrored `i -> p - 1 - i` for even `p`, so a rank
//!   interior in one tree is a leaf in the other. Tree `t` reduces then broadcasts half `t` of
//!   the chunk, cut into [`TREE_PIECES`] pieces that pipeline up and down; it uses channel `t`.
//! - Broadcast / Reduce — pipeline (also `ring`): a chain `root, root + 1, ..`, the chunk cut
//!   into [`TREE_PIECES`] pieces that stream along it (towards the root for Reduce); tree: a
//!   binary heap over `q = rank - root`, parent `(q - 1) / 2`, the same pieces pipelined.
//! - All-To-All — direct: round `k`, rank `i` sends its block for `i + k` straight there; ring:
//!   blocks travel along the ring, each rank keeping its own and forwarding the rest (one
//!   message of `n - s` blocks in round `s`) through two alternating staging areas. The ring
//!   buffer is `2 count + 2 (n - 1)(count / n + 1)` elements; input `[0, count)`, output
//!   `[count, 2 count)`.
//!
//! Hierarchical (`rank = c0 + p0 c1 + p0 p1 c2 + ...`; a group in dimension `d` = the ranks
//! differing only in `c_d`, member `j` having `c_d = j`; per-dimension ring / direct /
//! halving-doubling):
//!
//! - `local_bw_aware`: Reduce-Scatter through the chunk's dimension order, each on the shard the
//!   previous left (level `t` moves `S / (p_{pi_0} .. p_{pi_{t-1}})`), then All-Gather back in
//!   reverse; Reduce-Scatter / All-Gather alone are the first / second half. Their per-rank
//!   output / input is piece `pos(r)` of the even split into `n`, `pos` the mixed-radix number
//!   with `c_0` most significant; with several chunks or a non-fixed order a level's block can
//!   be several segments (one message each).
//! - `baseline`: a full All-Reduce per dimension (any All-Reduce algorithm) on the whole chunk.
//! - Order `fixed`: ascending (All-Gather descending). `themis`: chunk by chunk, of every
//!   order of the Reduce-Scatter dimensions the one that minimises the largest dimension load
//!   plus the chunk's own path, with `load_d += elements moved in d x (p_d - 1) / p_d /
//!   bandwidth_d` (All-Reduce counts both halves; `bandwidth_d` what the dimension's algorithm
//!   gets per rank, [`DimSpec::bandwidth_bps`]); the plan is kept only where this model
//!   predicts it faster than `fixed`. All-Gather runs in the reverse of the chunk's order.
//!
//! Chunking (every layout): the buffer is split into `chunks` pieces
//! ([`ChunkRange::even_split`]; for Reduce-Scatter / All-Gather / All-To-All, piece `c` of every
//! rank's output / input / block, so the layout conventions of [`crate::program`] hold), each
//! run by the algorithm with its own channels: chunk `c` uses channels `c K .. (c + 1) K`, `K`
//! being 2 when a double binary tree is involved, else 1. With `chunks_in_flight = L > 0`,
//! chunk `c + L` starts at a rank only once chunk `c` has finished there (its first steps
//! depend on chunk `c`'s last steps at that rank); `0` means no limit. Chunks with nothing to
//! move emit nothing.
//!
//! Buffers are `count` elements (All-To-All: see below). Programs have
//! O(steps) size whatever `count`; plans needing more than [`MAX_TOTAL_STEPS`] steps are
//! rejected with [`AlgorithmError::TooManySteps`].

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::algorithms::AlgorithmError;
use crate::all_to_all::A2a;
use crate::chunk::ChunkRange;
use crate::emit::Emitter;
pub use crate::emit::MAX_TOTAL_STEPS;
use crate::executor::MAX_CHANNELS;
use crate::hierarchical::{self, Grid, Kind, Orders};
use crate::op::Collective;
use crate::phases;
pub use crate::phases::TREE_PIECES;
use crate::program::{Program, RingAllReduce, StepGen};
use crate::segs::{single, split};

/// A collective algorithm (see [`algorithms_for`] for which collective has which). ASTRA-sim's
/// spellings (`halvingDoubling`, `doubleBinaryTree`, `oneRing`, `oneDirect`) are accepted too,
/// so its system files' per-dimension lists can be pasted in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Algorithm {
    /// Neighbour-to-neighbour ring (Broadcast / Reduce: the same as `Pipeline`).
    #[serde(alias = "oneRing")]
    Ring,
    /// Every rank exchanges with every peer directly, in shifted order.
    #[serde(alias = "oneDirect")]
    Direct,
    /// Rabenseifner: recursive halving Reduce-Scatter, recursive doubling All-Gather.
    #[serde(alias = "halvingDoubling", alias = "oneHalvingDoubling")]
    HalvingDoubling,
    /// NCCL's double binary tree All-Reduce.
    #[serde(alias = "doubleBinaryTree")]
    DoubleBinaryTree,
    /// A binary tree rooted at the root (Broadcast / Reduce).
    Tree,
    /// Pieces streaming along a chain from (or to) the root (Broadcast / Reduce).
    Pipeline,
}

impl Algorithm {
    /// The serialized (snake_case) name, as written in scenarios.
    pub const fn key(self) -> &'static str {
        match self {
            Algorithm::Ring => "ring",
            Algorithm::Direct => "direct",
            Algorithm::HalvingDoubling => "halving_doubling",
            Algorithm::DoubleBinaryTree => "double_binary_tree",
            Algorithm::Tree => "tree",
            Algorithm::Pipeline => "pipeline",
        }
    }
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.key())
    }
}

/// How a hierarchical collective combines its dimensions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Scheme {
    /// Reduce-Scatter through the dimensions, then All-Gather back (ASTRA-sim localBWAware).
    #[serde(alias = "localBWAware")]
    LocalBwAware,
    /// A full All-Reduce in every dimension in turn, on the whole buffer.
    Baseline,
}

impl Scheme {
    /// The serialized (snake_case) name.
    pub const fn key(self) -> &'static str {
        match self {
            Scheme::LocalBwAware => "local_bw_aware",
            Scheme::Baseline => "baseline",
        }
    }
}

/// In which order a chunk visits the dimensions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DimPolicy {
    /// Ascending for Reduce-Scatter, descending for All-Gather.
    Fixed,
    /// Greedy load balancing across dimensions, chunk by chunk, never planned slower than
    /// `Fixed` (needs per-dimension bandwidths).
    Themis,
}

/// One dimension of a hierarchical layout.
#[derive(Clone, Debug, PartialEq)]
pub struct DimSpec {
    /// Ranks along the dimension.
    pub size: usize,
    /// The algorithm its groups run.
    pub algorithm: Algorithm,
    /// The bandwidth, bits per second, the dimension's algorithm gets per rank: all the
    /// links it drives at once (used by Themis to weigh the dimension's load).
    pub bandwidth_bps: u64,
}

/// Which ranks talk to which.
#[derive(Clone, Debug, PartialEq)]
pub enum Layout {
    /// One algorithm over all ranks.
    Flat(Algorithm),
    /// Ranks on a grid of dimensions, `rank = c0 + p0 c1 + p0 p1 c2 + ...`.
    Dims {
        /// The dimensions, innermost (fastest-varying) first.
        dims: Vec<DimSpec>,
        /// How the dimensions are combined.
        scheme: Scheme,
        /// The dimension order policy.
        policy: DimPolicy,
    },
}

/// Everything [`compile`] needs.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    /// The collective.
    pub op: Collective,
    /// Number of ranks.
    pub ranks: usize,
    /// Elements of the collective (the whole buffer, as nccl-tests sizes it).
    pub count: usize,
    /// The root of a Broadcast / Reduce (must be a rank for every collective).
    pub root: usize,
    /// Algorithm(s) and rank layout.
    pub layout: Layout,
    /// Pieces the buffer is split into, each run separately (at least 1).
    pub chunks: usize,
    /// At most this many chunks in progress per rank; 0 = unlimited.
    pub chunks_in_flight: usize,
}

const ALL_REDUCE: &[Algorithm] = &[
    Algorithm::Ring,
    Algorithm::Direct,
    Algorithm::HalvingDoubling,
    Algorithm::DoubleBinaryTree,
];
const SCATTER_GATHER: &[Algorithm] = &[
    Algorithm::Ring,
    Algorithm::Direct,
    Algorithm::HalvingDoubling,
];
const ALL_TO_ALL: &[Algorithm] = &[Algorithm::Ring, Algorithm::Direct];
const ROOTED: &[Algorithm] = &[Algorithm::Ring, Algorithm::Pipeline, Algorithm::Tree];
/// Per-dimension algorithms of the local_bw_aware scheme.
const LOCAL_DIM: &[Algorithm] = SCATTER_GATHER;
/// Per-dimension algorithms of the baseline scheme (each runs an All-Reduce).
const BASELINE_DIM: &[Algorithm] = ALL_REDUCE;

/// Which flat algorithms exist for `op`, e.g. All-Reduce: ring, direct, halving_doubling,
/// double_binary_tree.
pub fn algorithms_for(op: Collective) -> &'static [Algorithm] {
    match op {
        Collective::AllReduce => ALL_REDUCE,
        Collective::ReduceScatter | Collective::AllGather => SCATTER_GATHER,
        Collective::AllToAll => ALL_TO_ALL,
        Collective::Broadcast | Collective::Reduce => ROOTED,
    }
}

/// Compiles `plan` into one program per rank, following the layout conventions of
/// [`crate::program`]. Fails with a sentence a user can act on when the combination does not
/// exist or would be unreasonably large.
pub fn compile(plan: &Plan) -> Result<Vec<Program>, AlgorithmError> {
    let n = plan.ranks;
    if n == 0 {
        return Err(AlgorithmError::NoRanks);
    }
    if plan.root >= n {
        return Err(AlgorithmError::RootOutOfRange {
            root: plan.root,
            ranks: n,
        });
    }
    if plan.chunks == 0 {
        return Err(AlgorithmError::NoChunks);
    }
    // Fail at once, rather than after spending the whole budget, when even a lower bound on the
    // steps is over it.
    if min_steps(plan) > MAX_TOTAL_STEPS {
        return Err(AlgorithmError::TooManySteps {
            limit: MAX_TOTAL_STEPS,
        });
    }
    match &plan.layout {
        Layout::Flat(algorithm) => flat(plan, *algorithm),
        Layout::Dims {
            dims,
            scheme,
            policy,
        } => hierarchical(plan, dims, *scheme, *policy),
    }
}

/// The plans whose programs can be generated on demand instead of compiled: one
/// [`StepGen`] per rank, each an exact stand-in for what [`compile`] would build for that rank
/// (see [`crate::program::StepGen`]). Today that is the flat ring All-Reduce of one chunk with
/// at least one element per rank; `None` for every other plan (and for any plan [`compile`]
/// would refuse), which is then compiled.
pub fn stream(plan: &Plan) -> Option<Vec<StepGen>> {
    let n = plan.ranks;
    let ring = plan.layout == Layout::Flat(Algorithm::Ring);
    if !ring
        || plan.op != Collective::AllReduce
        || plan.chunks != 1
        || n < 2
        || plan.root >= n
        || plan.count < n
    {
        return None;
    }
    Some(
        (0..n)
            .map(|rank| {
                StepGen::RingAllReduce(RingAllReduce {
                    ranks: n,
                    rank,
                    count: plan.count,
                    channel: 0,
                })
            })
            .collect(),
    )
}

/// Steps per rank of one phase over a group of `p` (Reduce-Scatter or All-Gather; half a
/// double binary tree All-Reduce), for ranks that take part in it fully.
fn phase_steps(algorithm: Algorithm, p: usize) -> usize {
    match algorithm {
        Algorithm::HalvingDoubling => 2 * p.max(1).ilog2() as usize,
        // Each non-root rank sends (or receives) every piece of each half at least once.
        Algorithm::DoubleBinaryTree => TREE_PIECES,
        _ => 2 * p.saturating_sub(1),
    }
}

/// A lower bound on the steps of `plan` over all ranks, assuming every block is non-empty
/// (0 when `count` is too small for that to be sure). It is halved because not every rank
/// takes full part (a root, the ranks halving-doubling folds away), so it never overshoots;
/// it only has to catch plans that are orders of magnitude over the budget.
fn min_steps(plan: &Plan) -> usize {
    let (n, chunks) = (plan.ranks, plan.chunks);
    if plan.count < n.saturating_mul(chunks).saturating_mul(2 * TREE_PIECES) {
        return 0;
    }
    let per_rank = match (&plan.layout, plan.op) {
        (Layout::Flat(a), Collective::AllReduce) => 2 * phase_steps(*a, n),
        (Layout::Flat(a), Collective::ReduceScatter | Collective::AllGather) => phase_steps(*a, n),
        (Layout::Flat(_), Collective::AllToAll) => 2 * n.saturating_sub(1),
        (Layout::Flat(_), Collective::Broadcast | Collective::Reduce) => TREE_PIECES,
        (Layout::Dims { dims, .. }, op) => {
            let halves = if op == Collective::AllReduce { 2 } else { 1 };
            dims.iter()
                .map(|d| phase_steps(d.algorithm, d.size))
                .fold(0usize, usize::saturating_add)
                .saturating_mul(halves)
        }
    };
    per_rank.saturating_mul(n / 2).saturating_mul(chunks)
}

/// Channels per chunk, and the check that every chunk's channels are numbers a message can
/// name ([`MAX_CHANNELS`]).
fn channel_stride(plan: &Plan, per_chunk: u32) -> Result<u32, AlgorithmError> {
    let max = (MAX_CHANNELS / per_chunk) as usize;
    if plan.chunks > max {
        return Err(AlgorithmError::TooManyChunks {
            chunks: plan.chunks,
            max,
        });
    }
    Ok(per_chunk)
}

/// Runs `emit(e, c, channel)` for every chunk, with the in-flight gate around it.
fn chunked(
    e: &mut Emitter,
    plan: &Plan,
    per_chunk: u32,
    mut emit: impl FnMut(&mut Emitter, usize, u32) -> Result<(), AlgorithmError>,
) -> Result<(), AlgorithmError> {
    let stride = channel_stride(plan, per_chunk)?;
    for c in 0..plan.chunks {
        e.begin_chunk(plan.chunks_in_flight)?;
        // c < chunks <= MAX_CHANNELS / stride, checked above.
        emit(e, c, c as u32 * stride)?;
        e.end_chunk(plan.chunks_in_flight);
    }
    Ok(())
}

fn unsupported(op: Collective, algorithm: Algorithm) -> AlgorithmError {
    AlgorithmError::Unsupported {
        op: op.key(),
        algorithm,
        supported: algorithms_for(op),
    }
}

fn flat(plan: &Plan, algorithm: Algorithm) -> Result<Vec<Program>, AlgorithmError> {
    let (op, n, count) = (plan.op, plan.ranks, plan.count);
    if !algorithms_for(op).contains(&algorithm) {
        return Err(unsupported(op, algorithm));
    }
    let all = ChunkRange::new(0, count);
    let none = ChunkRange::new(0, 0);
    let everyone: Vec<usize> = (0..n).collect();
    let chunk = |c: usize| ChunkRange::even_split_nth(count, plan.chunks, c);
    match op {
        Collective::AllReduce => {
            let mut e = Emitter::new(n, count, |_| (all, all));
            chunked(&mut e, plan, phases::channels(algorithm), |e, c, ch| {
                phases::all_reduce(e, algorithm, &everyone, &single(chunk(c)), ch)
            })?;
            Ok(e.finish())
        }
        Collective::ReduceScatter | Collective::AllGather => {
            if algorithm == Algorithm::HalvingDoubling && !n.is_power_of_two() {
                return Err(AlgorithmError::NotPowerOfTwo { n });
            }
            // A flat layout is a one-dimensional grid.
            let dims = [DimSpec {
                size: n,
                algorithm,
                bandwidth_bps: 1,
            }];
            hierarchical(plan, &dims, Scheme::LocalBwAware, DimPolicy::Fixed)
        }
        Collective::AllToAll => {
            let a = A2a::new(n, count, plan.chunks);
            if n == 1 {
                return Ok(Emitter::new(1, count, |_| (all, all)).finish());
            }
            let buffer_len = match algorithm {
                Algorithm::Ring => a.ring_buffer_len(),
                _ => count.checked_mul(2),
            }
            .ok_or(AlgorithmError::CountTooLarge { count })?;
            let mut e = Emitter::new(n, buffer_len, |_| (all, ChunkRange::new(count, count)));
            chunked(&mut e, plan, 1, |e, c, ch| match algorithm {
                Algorithm::Ring => a.ring(e, c, ch),
                _ => a.direct(e, c, ch),
            })?;
            Ok(e.finish())
        }
        Collective::Broadcast | Collective::Reduce => {
            let root = plan.root;
            let parents = match algorithm {
                Algorithm::Tree => phases::heap_parents(n, root),
                _ => phases::chain_parents(n, root),
            };
            let broadcast = op == Collective::Broadcast;
            let mut e = Emitter::new(n, count, |r| match (broadcast, r == root) {
                (true, true) => (all, all),
                (true, false) => (none, all),
                (false, true) => (all, all),
                (false, false) => (all, none),
            });
            chunked(&mut e, plan, 1, |e, c, ch| {
                let pieces = split(&single(chunk(c)), TREE_PIECES);
                if broadcast {
                    phases::tree_broadcast(e, &everyone, &parents, &pieces, ch)
                } else {
                    phases::tree_reduce(e, &everyone, &parents, &pieces, ch)
                }
            })?;
            Ok(e.finish())
        }
    }
}

fn hierarchical(
    plan: &Plan,
    dims: &[DimSpec],
    scheme: Scheme,
    policy: DimPolicy,
) -> Result<Vec<Program>, AlgorithmError> {
    let (op, n, count) = (plan.op, plan.ranks, plan.count);
    let sizes: Vec<usize> = dims.iter().map(|d| d.size).collect();
    if sizes.is_empty() || sizes.contains(&0) {
        return Err(AlgorithmError::BadDims { sizes });
    }
    let kind = match (op, scheme) {
        (Collective::AllReduce, Scheme::LocalBwAware) => Kind::AllReduce,
        (Collective::AllReduce, Scheme::Baseline) => Kind::Baseline,
        (Collective::ReduceScatter | Collective::AllGather, Scheme::Baseline) => {
            return Err(AlgorithmError::BaselineNeedsAllReduce { op: op.key() })
        }
        (Collective::ReduceScatter, _) => Kind::ReduceScatter,
        (Collective::AllGather, _) => Kind::AllGather,
        _ => return Err(AlgorithmError::NoDimsLayout { op: op.key() }),
    };
    let grid = match Grid::new(&sizes) {
        Some(g) if g.ranks() == n => g,
        other => {
            return Err(AlgorithmError::DimProduct {
                product: other.map_or(usize::MAX, |g| g.ranks()),
                sizes,
                ranks: n,
            })
        }
    };
    let supported = if kind == Kind::Baseline {
        BASELINE_DIM
    } else {
        LOCAL_DIM
    };
    for (dim, d) in dims.iter().enumerate() {
        if !supported.contains(&d.algorithm) {
            return Err(AlgorithmError::DimAlgorithm {
                dim,
                algorithm: d.algorithm,
                scheme: scheme.key(),
                supported,
            });
        }
        if kind != Kind::Baseline
            && d.algorithm == Algorithm::HalvingDoubling
            && !d.size.is_power_of_two()
        {
            return Err(AlgorithmError::NotPowerOfTwo { n: d.size });
        }
        if policy == DimPolicy::Themis && d.bandwidth_bps == 0 {
            return Err(AlgorithmError::MissingBandwidth { dim });
        }
    }
    let algorithms: Vec<Algorithm> = dims.iter().map(|d| d.algorithm).collect();
    let per_chunk = algorithms
        .iter()
        .map(|&a| phases::channels(a))
        .max()
        .unwrap_or(1);
    let bandwidth: Vec<u64> = dims.iter().map(|d| d.bandwidth_bps).collect();
    let fixed: Vec<usize> = (0..sizes.len()).filter(|&d| sizes[d] > 1).collect();
    // Themis plans every chunk's order up front (see `hierarchical::Orders`).
    let themis = (policy == DimPolicy::Themis).then(|| {
        let lens: Vec<usize> = (0..plan.chunks)
            .map(|c| ChunkRange::even_split_nth(count, plan.chunks, c).len)
            .collect();
        Orders::new(&sizes, &bandwidth, kind).schedule(&lens)
    });
    let all = ChunkRange::new(0, count);
    let mut e = Emitter::new(n, count, |r| match kind {
        Kind::ReduceScatter => (all, grid.leaf(count, r)),
        Kind::AllGather => (grid.leaf(count, r), all),
        Kind::AllReduce | Kind::Baseline => (all, all),
    });
    let chunks = plan.chunks;
    chunked(&mut e, plan, per_chunk, |e, c, ch| {
        let region = ChunkRange::even_split_nth(count, chunks, c);
        let order = themis.as_ref().and_then(|o| o.get(c)).unwrap_or(&fixed);
        hierarchical::emit_chunk(
            e,
            &grid,
            &algorithms,
            kind,
            order,
            count,
            region,
            (c, chunks),
            ch,
        )
    })?;
    Ok(e.finish())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dims(sizes: &[usize], algorithm: Algorithm) -> Vec<DimSpec> {
        sizes
            .iter()
            .map(|&size| DimSpec {
                size,
                algorithm,
                bandwidth_bps: 1,
            })
            .collect()
    }

    #[test]
    fn streamed_ring_is_the_compiled_ring() {
        for n in 1..=9usize {
            for count in [n.saturating_sub(1), n, n + 1, 2 * n + 3, 7 * n - 1, 100] {
                for chunks in [1, 2] {
                    let plan = Plan {
                        op: Collective::AllReduce,
                        ranks: n,
                        count,
                        root: 0,
                        layout: Layout::Flat(Algorithm::Ring),
                        chunks,
                        chunks_in_flight: 0,
                    };
                    let Some(gens) = stream(&plan) else {
                        assert!(n < 2 || count < n || chunks > 1, "{plan:?} not streamed");
                        continue;
                    };
                    let built = compile(&plan).unwrap();
                    assert_eq!(gens.len(), built.len());
                    for (g, p) in gens.iter().zip(&built) {
                        assert_eq!(&g.materialise(), p, "n {n} count {count}");
                        assert_eq!(g.len(), p.steps.len());
                        // The executor's view of a step, without its chunk's offset.
                        for s in &p.steps {
                            let t = g.transfer(s.id.0).unwrap();
                            let (peer, channel) = s.kind.channel().unwrap();
                            let (recv, reduce, elems) = match s.kind {
                                crate::program::StepKind::Recv { chunk, reduce, .. } => {
                                    (true, reduce, chunk.len)
                                }
                                crate::program::StepKind::Send { chunk, .. } => {
                                    (false, false, chunk.len)
                                }
                                crate::program::StepKind::Copy { .. } => {
                                    unreachable!("a ring has no copy")
                                }
                            };
                            let want = crate::program::Transfer {
                                peer,
                                channel,
                                elems,
                                recv,
                                reduce,
                            };
                            assert_eq!(t, want, "n {n} count {count} {}", s.id);
                        }
                        let mut chans: Vec<(usize, u32)> =
                            p.steps.iter().filter_map(|s| s.kind.channel()).collect();
                        chans.sort_unstable();
                        chans.dedup();
                        assert_eq!(g.channels(), chans);
                        for s in &p.steps {
                            for d in &s.deps {
                                assert_eq!(g.dependent(d.0), Some(s.id.0));
                            }
                        }
                        let with_dependents: usize =
                            (0..g.len()).filter(|&i| g.dependent(i).is_some()).count();
                        let deps: usize = p.steps.iter().map(|s| s.deps.len()).sum();
                        assert_eq!(with_dependents, deps);
                    }
                    crate::program::validate(&built).unwrap();
                }
            }
        }
        let other = Plan {
            op: Collective::AllReduce,
            ranks: 4,
            count: 8,
            root: 0,
            layout: Layout::Flat(Algorithm::Direct),
            chunks: 1,
            chunks_in_flight: 0,
        };
        assert!(stream(&other).is_none());
    }

    #[test]
    fn step_lower_bound_never_overshoots() {
        let mut layouts: Vec<(Collective, Layout)> = Vec::new();
        for op in Collective::ALL {
            for &a in algorithms_for(op) {
                layouts.push((op, Layout::Flat(a)));
            }
        }
        for a in [
            Algorithm::Ring,
            Algorithm::Direct,
            Algorithm::HalvingDoubling,
        ] {
            for op in [Collective::AllReduce, Collective::ReduceScatter] {
                layouts.push((
                    op,
                    Layout::Dims {
                        dims: dims(&[2, 4], a),
                        scheme: Scheme::LocalBwAware,
                        policy: DimPolicy::Fixed,
                    },
                ));
            }
        }
        for a in ALL_REDUCE {
            layouts.push((
                Collective::AllReduce,
                Layout::Dims {
                    dims: dims(&[3, 1, 5], *a),
                    scheme: Scheme::Baseline,
                    policy: DimPolicy::Fixed,
                },
            ));
        }
        for (op, layout) in layouts {
            for n in [2usize, 3, 7, 8] {
                let n = match &layout {
                    Layout::Dims { dims, .. } => dims.iter().map(|d| d.size).product(),
                    Layout::Flat(_) => n,
                };
                if layout == Layout::Flat(Algorithm::HalvingDoubling)
                    && op != Collective::AllReduce
                    && !n.is_power_of_two()
                {
                    continue;
                }
                for chunks in [1, 3] {
                    let plan = Plan {
                        op,
                        ranks: n,
                        count: n * chunks * 2 * TREE_PIECES + 5,
                        root: 0,
                        layout: layout.clone(),
                        chunks,
                        chunks_in_flight: 0,
                    };
                    let total: usize = compile(&plan).unwrap().iter().map(|p| p.steps.len()).sum();
                    let bound = min_steps(&plan);
                    assert!(bound > 0 && bound <= total, "{plan:?}: {bound} > {total}");
                }
            }
        }
    }
}
