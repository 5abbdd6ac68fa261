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

/// How many steps past the oldest incomplete one the executor keeps of a ring: a rank's
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
    /// Block `k` (taken modulo the ring size).
    fn block(&self, k: usize) -> ChunkRange {
        ChunkRange::even_split_nth(self.count, self.ranks, k % self.ranks)
    }

    /// Block `rank - back` (modulo the ring size).
    fn back(&self, back: usize) -> ChunkRange {
        let p = self.ranks;
        self.block(self.rank + p - back % p)
    }

    /// Index of the first All-Gather step.
    const fn half(&self) -> usize {
        2 * (self.ranks - 1)
    }
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
                let p = g.ranks;
                let mut v = vec![
                    ((g.rank + 1) % p, g.channel),
                    ((g.rank + p - 1) % p, g.channel),
                ];
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
                let p = g.ranks;
                let (next, prev) = ((g.rank + 1) % p, (g.rank + p - 1) % p);
                let channel = g.channel;
                let (gather, j) = if i < g.half() {
                    (false, i)
                } else {
                    (true, i - g.half())
                };
                let (s, recv) = (j / 2, j % 2 == 1);
                match (gather, recv) {
                    (false, false) => StepKind::Send {
                        peer: next,
                        chunk: g.back(s + 1),
                        channel,
                    },
                    (false, true) => StepKind::Recv {
                        peer: prev,
                        chunk: g.back(s + 2),
                        reduce: true,
                        channel,
                    },
                    (true, false) => StepKind::Send {
                        peer: next,
                        chunk: g.back(s),
                        channel,
                    },
                    (true, true) => StepKind::Recv {
                        peer: prev,
                        chunk: g.back(s + 1),
                        reduce: false,
                        channel,
                    },
                }
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
