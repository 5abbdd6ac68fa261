//! Programs generated on demand: [`StepGen`], a rank's steps computed from a closed form
//! instead of stored.
//!
//! A ring All-Reduce on `n` ranks has `4 (n - 1)` steps per rank, `4 n (n - 1)` in all: 268 M
//! on 8192 ranks, tens of gigabytes as a [`Program`] list. Its structure is regular, so step
//! `i` of rank `r` (its kind, its dependencies and its dependents) is a formula of `(n, r, i)`.
//! The executor pulls steps from a generator through a bounded window (see
//! [`crate::executor`]), so a streamed job costs O(window) memory, not O(steps).
//!
//! A generator is an *exact* stand-in for the program [`crate::plan::compile`] builds for the
//! same plan: the same steps, in the same order, with the same dependencies (the unit tests
//! compare the two for many rank counts and sizes, so the compiled program's hazard
//! validation covers the generated one too). Anything irregular (custom MSCCL / JSON
//! programs, synthesized schedules, chunked or hierarchical plans) stays materialised.

use super::*;

/// How many steps past the oldest incomplete one an executor that holds step records needs of
/// a ring (the crate's executor runs a ring from counters instead, see
/// [`crate::executor`]): a rank's
/// completed steps are always a prefix of its list up to the two or three steps in progress
/// (each send waits for the previous receive, receives complete in channel order), so
/// anything beyond a few steps is not runnable yet; 8 leaves a margin (a message from a peer
/// that ran ahead brings further steps in anyway). Not more: the window's records are what a
/// message touches, and with 8192 ranks' runners interleaved a window of 64 (1.5 KiB of
/// records per rank, 12 MiB in all) no longer stayed in the cache.
const RING_WINDOW: usize = 8;

/// One rank of a flat ring All-Reduce of a single chunk over `ranks` ranks (member `i` is
/// rank `i`), every block non-empty (`count >= ranks`), on one channel.
///
/// The list, with `p = ranks`, blocks `b(k)` = piece `k mod p` of `[0, count)` split evenly
/// into `p` and `B = 2 (p - 1)`:
///
/// | step | kind | depends on |
/// |---|---|---|
/// | `2s` (`s < p - 1`) | send `b(i - s - 1)` to `i + 1` | `2s - 1` (none for `s = 0`) |
/// | `2s + 1` | receive-reduce `b(i - s - 2)` from `i - 1` | none (first touch of the block) |
/// | `B + 2s` | send `b(i - s)` to `i + 1` | `B + 2s - 1` (the receive that completed it) |
/// | `B + 2s + 1` | receive `b(i - s - 1)` from `i - 1` | `2s` (the send that last read it) |
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RingAllReduce {
    /// Ranks in the ring (at least 2).
    pub ranks: usize,
    /// This rank.
    pub rank: usize,
    /// Elements of the collective (at least `ranks`).
    pub count: usize,
    /// The channel every message uses.
    pub channel: u32,
}

impl RingAllReduce {
    /// Step `i` (`i < 4 (ranks - 1)`): whether it receives, whether it reduces, and the index
    /// of its block. With `B = 2 (p - 1)` and `j` the index within its half, the block is
    /// `rank - back` for `back = j / 2` plus one for a receive and one in Reduce-Scatter, so
    /// `back <= p` and one comparison takes it modulo `p` (no division per step: this runs
    /// for every step of every rank).
    pub(crate) fn at(&self, i: usize) -> (bool, bool, usize) {
        let p = self.ranks;
        let gather = i >= self.half();
        let j = if gather { i - self.half() } else { i };
        let recv = j % 2 == 1;
        let back = j / 2 + usize::from(recv) + usize::from(!gather);
        let mut k = self.rank + p - back.min(p);
        if k >= p {
            k -= p;
        }
        (recv, recv && !gather, k)
    }

    /// The next rank (sends go there) and the previous one (receives come from there).
    pub(crate) const fn neighbours(&self) -> (usize, usize) {
        let p = self.ranks;
        let next = if self.rank + 1 >= p { 0 } else { self.rank + 1 };
        let prev = if self.rank == 0 { p - 1 } else { self.rank - 1 };
        (next, prev)
    }

    /// Index of the first All-Gather step.
    pub(crate) const fn half(&self) -> usize {
        2 * (self.ranks - 1)
    }
}

/// What a generated step moves, without where in the buffer: all an executor reads of a step
/// while it runs (the chunk's offset matters only for real data). [`StepGen::transfer`] gives
/// it without building the chunk, which costs divisions per step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Transfer {
    /// The peer rank: the receiver of a send, the sender of a receive.
    pub peer: usize,
    /// The channel.
    pub channel: u32,
    /// Elements moved (the chunk's length).
    pub elems: usize,
    /// A receive (else a send).
    pub recv: bool,
    /// A receive that reduces.
    pub reduce: bool,
}

/// A rank's steps computed on demand (see [`crate::program`], "Programs generated on demand").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StepGen {
    /// A flat ring All-Reduce.
    RingAllReduce(RingAllReduce),
}

impl StepGen {
    /// The program without its steps: rank, buffer and where input and output are.
    pub fn header(&self) -> Program {
        match self {
            StepGen::RingAllReduce(g) => Program {
                rank: g.rank,
                buffer_len: g.count,
                input: ChunkRange::new(0, g.count),
                output: ChunkRange::new(0, g.count),
                steps: Vec::new(),
            },
        }
    }

    /// Steps in the rank's list.
    pub fn len(&self) -> usize {
        match self {
            StepGen::RingAllReduce(g) => 2 * g.half(),
        }
    }

    /// Whether the list is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// How many steps past the oldest incomplete one an executor should hold: no step beyond
    /// that can be runnable.
    pub fn window(&self) -> usize {
        match self {
            StepGen::RingAllReduce(_) => RING_WINDOW,
        }
    }

    /// The `(peer, channel)` pairs the rank sends or receives on, ascending.
    pub fn channels(&self) -> Vec<(usize, u32)> {
        match self {
            StepGen::RingAllReduce(g) => {
                let (next, prev) = g.neighbours();
                let mut v = vec![(next, g.channel), (prev, g.channel)];
                v.sort_unstable();
                v.dedup();
                v
            }
        }
    }

    /// What step `i` (`i < len`) does.
    pub fn kind(&self, i: usize) -> StepKind {
        match self {
            StepGen::RingAllReduce(g) => {
                let (next, prev) = g.neighbours();
                let (recv, reduce, k) = g.at(i);
                let chunk = ChunkRange::even_split_nth(g.count, g.ranks, k);
                let channel = g.channel;
                if recv {
                    StepKind::Recv {
                        peer: prev,
                        chunk,
                        reduce,
                        channel,
                    }
                } else {
                    StepKind::Send {
                        peer: next,
                        chunk,
                        channel,
                    }
                }
            }
        }
    }

    /// What step `i` (`i < len`) moves: [`kind`](Self::kind) without the chunk's offset;
    /// `None` for a local copy (a ring has none).
    pub fn transfer(&self, i: usize) -> Option<Transfer> {
        match self {
            StepGen::RingAllReduce(g) => {
                let (next, prev) = g.neighbours();
                let (recv, reduce, k) = g.at(i);
                let (base, extra) = (g.count / g.ranks, g.count % g.ranks);
                Some(Transfer {
                    peer: if recv { prev } else { next },
                    channel: g.channel,
                    elems: base + usize::from(k < extra),
                    recv,
                    reduce,
                })
            }
        }
    }

    /// The step that step `i` depends on, if any (a ring step has at most one).
    pub fn dep(&self, i: usize) -> Option<usize> {
        match self {
            StepGen::RingAllReduce(g) => {
                let b = g.half();
                match (i < b, i % 2 == 1) {
                    // A Reduce-Scatter send waits for the receive that completed its block.
                    (true, false) => i.checked_sub(1),
                    // A Reduce-Scatter receive is its block's first writer.
                    (true, true) => None,
                    // An All-Gather send waits for the receive before it.
                    (false, false) => Some(i - 1),
                    // An All-Gather receive overwrites what Reduce-Scatter send `s` read.
                    (false, true) => Some(i - b - 1),
                }
            }
        }
    }

    /// The step that depends on step `i`, if any (the inverse of [`dep`](Self::dep)).
    pub fn dependent(&self, i: usize) -> Option<usize> {
        match self {
            StepGen::RingAllReduce(g) => {
                let b = g.half();
                match (i < b, i % 2 == 1) {
                    (true, false) => Some(b + i + 1),
                    (true, true) => Some(i + 1),
                    (false, false) => None,
                    (false, true) => Some(i + 1).filter(|&d| d < 2 * b),
                }
            }
        }
    }

    /// The whole program, as [`crate::plan::compile`] would build it (for tests and small
    /// instances).
    pub fn materialise(&self) -> Program {
        let mut p = self.header();
        p.steps = (0..self.len())
            .map(|i| Step {
                id: StepId(i),
                deps: self.dep(i).map(StepId).into_iter().collect(),
                kind: self.kind(i),
            })
            .collect();
        p
    }
}
