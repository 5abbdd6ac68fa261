//! Synthesized collectives: a TACOS-style greedy that builds an All-Gather schedule for any
//! fabric, and Reduce-Scatter / All-Reduce from it.
//!
//! ## The idea
//!
//! TACOS (Won et al., arXiv 2304.05301) synthesizes All-Reduce for arbitrary, heterogeneous
//! topologies by matching chunks to links over a *time-expanded network*: at every moment, each
//! free link carries a chunk its source holds and its destination still lacks. This module does
//! the same in continuous virtual time, which handles links of different speeds without a
//! common time step:
//!
//! - The fabric is a [`SynthFabric`]: directed rank-to-rank [`SynthLink`]s, each with the
//!   bandwidth and latency of its path and the *resources* it occupies while it serializes a
//!   chunk (a direct host-to-host link direction; for a path through switches, the sender's
//!   uplink and the receiver's downlink, so every path leaving one host shares that host's link).
//! - Every rank's All-Gather contribution is cut into `chunks_per_rank` chunks. Repeatedly, of
//!   all (link, chunk) pairs where the link's source holds the chunk (or will, by then) and its
//!   destination neither holds it nor is already being sent it, the greedy commits the one that
//!   can **start earliest** (its resources free and the chunk present), preferring the
//!   **rarest** chunk (fewest ranks holding or receiving it), then the one that **finishes
//!   earliest** (the faster link), then the lowest link and chunk index. The transfer occupies
//!   its resources for the chunk's serialization time; the chunk arrives one latency later.
//!   Nothing is random, so the schedule is a pure function of the fabric and the sizes
//!   (deterministic for any seed).
//! - Reduce-Scatter is the All-Gather schedule run backwards with reductions: each chunk's
//!   All-Gather spread is a tree rooted at its owner (every rank receives it once), so reversed,
//!   every rank adds its children's partial sums and passes the result to its parent, and the
//!   owner ends with the total. All-Reduce is that Reduce-Scatter followed by the All-Gather.
//!
//! [`compile`] turns a schedule into the program IR: a transfer is a `Send` at its source and a
//! `Recv` at its destination, pushed in schedule order so the per-channel FIFO matching holds,
//! with the data dependencies (forward only what has arrived, reduce before passing on)
//! derived by [`ProgramBuilder`]. Each chunk travels on its own channel (Reduce-Scatter and
//! All-Gather on separate ones), so no transfer waits behind an unrelated one to the same peer.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use thiserror::Error;

use crate::chunk::ChunkRange;
use crate::op::Collective;
use crate::program::{Program, ProgramBuilder, StepId, StepKind};

/// Picoseconds per second, for serialization times.
const PS_PER_S: u128 = 1_000_000_000_000;

/// Upper bound on the greedy's work (candidate pairs examined over the whole synthesis), so a
/// huge fabric is refused with a message instead of running for hours.
pub const MAX_SYNTH_WORK: u128 = 4_000_000_000;

/// Why a schedule cannot be synthesized or compiled.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum SynthError {
    /// The collective has no synthesized algorithm.
    #[error("{op} has no synthesized algorithm; synthesis builds all_gather, reduce_scatter and all_reduce")]
    Unsupported {
        /// The collective (its snake_case key).
        op: &'static str,
    },
    /// A collective needs at least one rank and one chunk per rank.
    #[error("synthesis needs at least one rank and one chunk per rank")]
    Empty,
    /// A link names a rank that does not exist, or joins a rank to itself.
    #[error("link {link} joins rank {src} to rank {dst}, but there are {ranks} ranks")]
    BadLink {
        /// The link's index.
        link: usize,
        /// Its source rank.
        src: usize,
        /// Its destination rank.
        dst: usize,
        /// Number of ranks.
        ranks: usize,
    },
    /// Some rank can never receive some chunk.
    #[error("rank {rank} cannot be reached from rank {from} over the fabric's links between the collective's hosts")]
    Unreachable {
        /// The rank that lacks data.
        rank: usize,
        /// A rank whose data it cannot get.
        from: usize,
    },
    /// The search would take too long.
    #[error("synthesizing for {ranks} ranks, {links} paths and {chunks} chunks is too much work; use fewer ranks or chunks")]
    TooLarge {
        /// Number of ranks.
        ranks: usize,
        /// Number of rank-to-rank paths.
        links: usize,
        /// Number of chunks.
        chunks: usize,
    },
}

/// A directed path from one rank to another that the synthesizer may send a chunk over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SynthLink {
    /// The sending rank.
    pub src: usize,
    /// The receiving rank.
    pub dst: usize,
    /// The path's bandwidth (its slowest hop), bits per second; never zero.
    pub bandwidth_bps: u64,
    /// The path's one-way latency (all hops), picoseconds.
    pub latency_ps: u64,
    /// What the path occupies while a chunk serializes: indices of shared resources (link
    /// directions); two paths sharing a resource never serialize at the same time.
    pub resources: Vec<usize>,
}

/// The fabric as the synthesizer sees it: ranks and the directed paths between them.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SynthFabric {
    /// Number of ranks.
    pub ranks: usize,
    /// The paths.
    pub links: Vec<SynthLink>,
}

/// One chunk moved over one path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transfer {
    /// The path's index in [`SynthFabric::links`].
    pub link: usize,
    /// The sending rank.
    pub src: usize,
    /// The receiving rank.
    pub dst: usize,
    /// The chunk: `owner * chunks_per_rank + piece`.
    pub chunk: usize,
    /// When it starts serializing, picoseconds from the start.
    pub start_ps: u64,
    /// When it has fully arrived.
    pub end_ps: u64,
    /// The first shared resource the transfer occupies at its source (its link direction or
    /// uplink), by which [`compile`] orders a rank's sends.
    pub hop: usize,
    /// The same for the opposite path (`dst` to `src`), which Reduce-Scatter uses; a resource
    /// of its own when the fabric has no such path.
    pub back_hop: usize,
}

/// A synthesized All-Gather schedule (Reduce-Scatter runs it backwards).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schedule {
    /// Number of ranks.
    pub ranks: usize,
    /// Chunks each rank's contribution is cut into.
    pub chunks_per_rank: usize,
    /// Bytes of one chunk the schedule was timed with.
    pub chunk_bytes: u64,
    /// The transfers, in the order they were committed (non-decreasing start time).
    pub transfers: Vec<Transfer>,
    /// When the last chunk arrives: the predicted All-Gather time, picoseconds.
    pub time_ps: u64,
}

impl Schedule {
    /// The predicted time of `op` (Reduce-Scatter and All-Gather one schedule, All-Reduce
    /// both), picoseconds.
    pub fn predicted_ps(&self, op: Collective) -> u64 {
        if op == Collective::AllReduce {
            self.time_ps.saturating_mul(2)
        } else {
            self.time_ps
        }
    }

    /// A human-readable listing of the schedule's transfers for `op`, one line each, in the
    /// order they run (for `fabemu algo show`).
    pub fn describe(&self, op: Collective) -> String {
        let k = self.chunks_per_rank.max(1);
        // (start, end, phase, transfer index, src, dst, chunk), sorted by start time.
        let mut rows = Vec::new();
        if matches!(op, Collective::ReduceScatter | Collective::AllReduce) {
            // Reversed: a transfer [s, e) of the All-Gather becomes [T - e, T - s) backwards.
            for (i, t) in self.transfers.iter().enumerate() {
                let (s, e) = (self.time_ps - t.end_ps, self.time_ps - t.start_ps);
                rows.push((s, e, 0u8, i, t.dst, t.src, t.chunk));
            }
        }
        let off = if op == Collective::AllReduce {
            self.time_ps
        } else {
            0
        };
        if matches!(op, Collective::AllGather | Collective::AllReduce) {
            for (i, t) in self.transfers.iter().enumerate() {
                rows.push((
                    off + t.start_ps,
                    off + t.end_ps,
                    1,
                    i,
                    t.src,
                    t.dst,
                    t.chunk,
                ));
            }
        }
        rows.sort_unstable();
        let mut out = String::new();
        for (s, e, phase, _, src, dst, c) in rows {
            let _ = writeln!(
                out,
                "  {} {:>12.3} us .. {:>12.3} us  rank {src:>3} -> rank {dst:>3}  chunk {c} (of rank {}, piece {})",
                if phase == 0 { "reduce" } else { "gather" },
                s as f64 / 1e6,
                e as f64 / 1e6,
                c / k,
                c % k
            );
        }
        out
    }
}

/// Serialization time of `bytes` at `bps`, picoseconds (rounded up).
fn serialize_ps(bytes: u64, bps: u64) -> u64 {
    let bits = u128::from(bytes) * 8 * PS_PER_S;
    let ps = bits.div_ceil(u128::from(bps.max(1)));
    u64::try_from(ps).unwrap_or(u64::MAX)
}

/// Synthesizes an All-Gather of `chunks_per_rank` chunks of `chunk_bytes` per rank over
/// `fabric` with the greedy of the [module docs](self).
///
/// # Errors
/// [`SynthError::Empty`], [`SynthError::BadLink`], [`SynthError::Unreachable`] or
/// [`SynthError::TooLarge`].
pub fn synthesize(
    fabric: &SynthFabric,
    chunks_per_rank: usize,
    chunk_bytes: u64,
) -> Result<Schedule, SynthError> {
    let n = fabric.ranks;
    if n == 0 || chunks_per_rank == 0 {
        return Err(SynthError::Empty);
    }
    for (i, l) in fabric.links.iter().enumerate() {
        if l.src >= n || l.dst >= n || l.src == l.dst {
            return Err(SynthError::BadLink {
                link: i,
                src: l.src,
                dst: l.dst,
                ranks: n,
            });
        }
    }
    check_reachable(fabric)?;
    let chunks = n.saturating_mul(chunks_per_rank);
    let commits = (chunks as u128) * (n as u128 - 1);
    if commits * (fabric.links.len() as u128) * (chunks as u128) > MAX_SYNTH_WORK {
        return Err(SynthError::TooLarge {
            ranks: n,
            links: fabric.links.len(),
            chunks,
        });
    }
    let resources = fabric
        .links
        .iter()
        .flat_map(|l| l.resources.iter().copied())
        .max()
        .map_or(0, |m| m + 1);
    let mut free = vec![0u64; resources];
    // First hop of each path and of its opposite (the first path back, else a fresh id).
    let hop = |l: &SynthLink, e: usize| l.resources.first().copied().unwrap_or(resources + e);
    let back: Vec<usize> = fabric
        .links
        .iter()
        .enumerate()
        .map(|(e, l)| {
            fabric
                .links
                .iter()
                .enumerate()
                .find(|(_, b)| b.src == l.dst && b.dst == l.src)
                .map_or(resources + fabric.links.len() + e, |(i, b)| hop(b, i))
        })
        .collect();
    // `has[r][c]`: when rank r holds chunk c (arrived or scheduled to arrive).
    let mut has: Vec<Vec<Option<u64>>> = vec![vec![None; chunks]; n];
    let mut holders = vec![1usize; chunks];
    for (r, row) in has.iter_mut().enumerate() {
        for slot in &mut row[r * chunks_per_rank..(r + 1) * chunks_per_rank] {
            *slot = Some(0);
        }
    }
    let mut transfers = Vec::with_capacity(usize::try_from(commits).unwrap_or(0));
    let mut missing = commits;
    while missing > 0 {
        // (start, rarity, end, link, chunk): the lexicographically least is committed.
        let mut best: Option<(u64, usize, u64, usize, usize)> = None;
        for (e, l) in fabric.links.iter().enumerate() {
            let link_free = l.resources.iter().map(|&r| free[r]).max().unwrap_or(0);
            let dur = serialize_ps(chunk_bytes, l.bandwidth_bps);
            let (src, dst) = (&has[l.src], &has[l.dst]);
            for c in 0..chunks {
                let (Some(at), None) = (src[c], dst[c]) else {
                    continue;
                };
                let start = at.max(link_free);
                if best.is_some_and(|b| start > b.0) {
                    continue;
                }
                let end = start.saturating_add(dur).saturating_add(l.latency_ps);
                let key = (start, holders[c], end, e, c);
                if best.is_none_or(|b| key < b) {
                    best = Some(key);
                }
            }
        }
        let Some((start, _, end, e, c)) = best else {
            // Unreachable was ruled out above, so some pair always qualifies.
            return Err(SynthError::Empty);
        };
        let l = &fabric.links[e];
        let busy_until = start.saturating_add(serialize_ps(chunk_bytes, l.bandwidth_bps));
        for &r in &l.resources {
            free[r] = busy_until;
        }
        has[l.dst][c] = Some(end);
        holders[c] += 1;
        transfers.push(Transfer {
            link: e,
            src: l.src,
            dst: l.dst,
            chunk: c,
            start_ps: start,
            end_ps: end,
            hop: hop(l, e),
            back_hop: back[e],
        });
        missing -= 1;
    }
    let time_ps = transfers.iter().map(|t| t.end_ps).max().unwrap_or(0);
    Ok(Schedule {
        ranks: n,
        chunks_per_rank,
        chunk_bytes,
        transfers,
        time_ps,
    })
}

/// Every rank must reach every other over the links (a strongly connected fabric).
fn check_reachable(fabric: &SynthFabric) -> Result<(), SynthError> {
    let n = fabric.ranks;
    let mut out: Vec<Vec<usize>> = vec![Vec::new(); n];
    for l in &fabric.links {
        out[l.src].push(l.dst);
    }
    for from in 0..n {
        let mut seen = vec![false; n];
        seen[from] = true;
        let mut stack = vec![from];
        while let Some(u) = stack.pop() {
            for &v in &out[u] {
                if !seen[v] {
                    seen[v] = true;
                    stack.push(v);
                }
            }
        }
        if let Some(rank) = seen.iter().position(|s| !s) {
            return Err(SynthError::Unreachable { rank, from });
        }
    }
    Ok(())
}

/// The element range of chunk `c` (`owner * k + piece`) in a buffer of `count` elements: piece
/// `piece` of the even split of the owner's piece of the even split into `ranks`.
fn chunk_range(count: usize, ranks: usize, k: usize, c: usize) -> ChunkRange {
    let owner = ChunkRange::even_split(count, ranks)
        .get(c / k)
        .copied()
        .unwrap_or(ChunkRange::new(0, 0));
    let piece = ChunkRange::even_split(owner.len, k)
        .get(c % k)
        .copied()
        .unwrap_or(ChunkRange::new(0, 0));
    ChunkRange::new(owner.offset + piece.offset, piece.len)
}

/// Compiles `schedule` into one program per rank for `op` over `count` elements, following
/// the layout conventions of [`crate::program`] (rank `r` owns piece `r` of the even split into
/// `ranks`).
///
/// # Errors
/// [`SynthError::Unsupported`] for collectives other than All-Gather, Reduce-Scatter and
/// All-Reduce.
pub fn compile(
    op: Collective,
    schedule: &Schedule,
    count: usize,
) -> Result<Vec<Program>, SynthError> {
    let n = schedule.ranks;
    let k = schedule.chunks_per_rank.max(1);
    let pieces = ChunkRange::even_split(count, n);
    let whole = ChunkRange::new(0, count);
    let piece = |r: usize| pieces.get(r).copied().unwrap_or(ChunkRange::new(0, 0));
    let (reduce, gather) = match op {
        Collective::AllGather => (false, true),
        Collective::ReduceScatter => (true, false),
        Collective::AllReduce => (true, true),
        other => return Err(SynthError::Unsupported { op: other.key() }),
    };
    let mut builders: Vec<ProgramBuilder> = (0..n)
        .map(|r| {
            let (input, output) = match op {
                Collective::AllGather => (piece(r), whole),
                Collective::ReduceScatter => (whole, piece(r)),
                _ => (whole, whole),
            };
            ProgramBuilder::new(r, count, input, output)
        })
        .collect();
    let chunks = n * k;
    // A rank's sends over one first hop go in schedule order, each after the previous one:
    // started together they would share the link and all arrive late, which delays what is
    // forwarded next (on a slow or busy link the schedule's order is what makes it fast).
    let mut last_send: BTreeMap<(usize, usize), StepId> = BTreeMap::new();
    let mut emit = |src: usize, dst: usize, hop: usize, c: usize, reduce: bool, channel: u32| {
        let range = chunk_range(count, n, k, c);
        if range.len == 0 {
            return;
        }
        let after: Vec<StepId> = last_send.get(&(src, hop)).copied().into_iter().collect();
        let id = builders[src].push(
            StepKind::Send {
                peer: dst,
                chunk: range,
                channel,
            },
            &after,
        );
        last_send.insert((src, hop), id);
        builders[dst].recv_on(src, range, reduce, channel);
    };
    if reduce {
        for t in schedule.transfers.iter().rev() {
            emit(t.dst, t.src, t.back_hop, t.chunk, true, t.chunk as u32);
        }
    }
    if gather {
        let base = if reduce { chunks as u32 } else { 0 };
        for t in &schedule.transfers {
            emit(t.src, t.dst, t.hop, t.chunk, false, base + t.chunk as u32);
        }
    }
    Ok(builders.into_iter().map(ProgramBuilder::finish).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A bidirectional ring of `n` ranks, each direction its own resource.
    fn ring(n: usize, bps: u64) -> SynthFabric {
        let mut links = Vec::new();
        for i in 0..n {
            let j = (i + 1) % n;
            links.push(SynthLink {
                src: i,
                dst: j,
                bandwidth_bps: bps,
                latency_ps: 1000,
                resources: vec![2 * i],
            });
            links.push(SynthLink {
                src: j,
                dst: i,
                bandwidth_bps: bps,
                latency_ps: 1000,
                resources: vec![2 * i + 1],
            });
        }
        SynthFabric { ranks: n, links }
    }

    #[test]
    fn every_rank_gets_every_chunk_once() {
        let f = ring(6, 100_000_000_000);
        let s = synthesize(&f, 2, 1 << 20).unwrap();
        assert_eq!(s.transfers.len(), 6 * 2 * 5);
        let mut got = vec![vec![0; 12]; 6];
        for t in &s.transfers {
            got[t.dst][t.chunk] += 1;
        }
        for (r, row) in got.iter().enumerate() {
            for (c, &g) in row.iter().enumerate() {
                assert_eq!(g, usize::from(c / 2 != r), "rank {r} chunk {c}");
            }
        }
    }

    #[test]
    fn a_bidirectional_ring_sends_both_ways() {
        // n = 8 chunks of T each: half go each way, so the last arrives after n/2 = 4 hops
        // of T (+ latency), against n - 1 = 7 for a one-way ring.
        let f = ring(8, 100_000_000_000);
        let s = synthesize(&f, 1, 1_000_000).unwrap();
        let t = serialize_ps(1_000_000, 100_000_000_000) + 1000;
        assert_eq!(s.time_ps, 4 * t);
    }

    #[test]
    fn programs_compute_the_right_thing() {
        let f = ring(5, 100_000_000_000);
        let s = synthesize(&f, 2, 1000).unwrap();
        for op in [
            Collective::AllGather,
            Collective::ReduceScatter,
            Collective::AllReduce,
        ] {
            for count in [1usize, 7, 100] {
                let p = compile(op, &s, count).unwrap();
                // Rank r's value at global index i is 1000 r + i, so sums and owners show.
                let value = |r: usize, i: usize| (1000 * r + i) as i64;
                let inputs = p
                    .iter()
                    .map(|q| {
                        (0..q.input.len)
                            .map(|j| value(q.rank, q.input.offset + j))
                            .collect()
                    })
                    .collect();
                let out = crate::interpret::run_local(&p, inputs).unwrap();
                for (q, got) in p.iter().zip(&out) {
                    for (j, &g) in got.iter().enumerate() {
                        let i = q.output.offset + j;
                        let want = if op == Collective::AllGather {
                            let owner = p
                                .iter()
                                .position(|x| {
                                    x.input.offset <= i && i < x.input.offset + x.input.len
                                })
                                .unwrap();
                            value(owner, i)
                        } else {
                            (0..5).map(|r| value(r, i)).sum()
                        };
                        assert_eq!(g, want, "{op:?} count {count} rank {} index {i}", q.rank);
                    }
                }
            }
        }
    }

    #[test]
    fn disconnected_fabrics_are_refused() {
        let mut f = ring(4, 1);
        f.links.retain(|l| l.src != 0);
        assert!(matches!(
            synthesize(&f, 1, 1),
            Err(SynthError::Unreachable { .. })
        ));
    }
}
