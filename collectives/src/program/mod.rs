//! The program IR: what one rank does during a collective.
//!
//! This is **the seam for custom algorithms**. An algorithm — built in ([`crate::algorithms`])
//! or written by hand, in Rust or as JSON/YAML — is a `Vec<Program>`, one per rank (or, for
//! regular built-in ones at scale, a generator of the same steps: see below). Everything
//! downstream (the reference interpreter, and later the hosts that run programs on their queue
//! pairs) consumes only this IR.
//!
//! ## Model
//!
//! Each rank owns one buffer of [`Program::buffer_len`] elements. The collective's input is
//! placed in [`Program::input`] (the rest starts zeroed) and its result is read from
//! [`Program::output`]; both are ranges of the same buffer, so in-place algorithms use the same
//! range twice.
//!
//! A program is a list of [`Step`]s forming a DAG: step `i` has id `StepId(i)` and may only
//! depend on earlier steps, so the list order is a topological order. A step may run once all
//! its `deps` have completed. Step kinds:
//!
//! - [`StepKind::Send`]: send the elements of `chunk` to `peer` (their values when the step
//!   runs);
//! - [`StepKind::Recv`]: take the next message from `peer` and write it over `chunk`
//!   (`reduce == false`) or add it elementwise into `chunk` (`reduce == true`);
//! - [`StepKind::Copy`]: copy `src` to `dst` within the rank's own buffer (e.g. an All-To-All's
//!   own block), no network involved.
//!
//! ## Channels
//!
//! Every `Send` and `Recv` names a `channel` number (default 0). Between every ordered pair of
//! ranks `(src, dst)` there is one FIFO queue **per channel**. Messages are matched in
//! **program order per `(src, dst, channel)`**: the `k`-th `Send` to `dst` on channel `c` in
//! `src`'s step list is received by the `k`-th `Recv` from `src` on channel `c` in `dst`'s list,
//! and the lengths must be equal. An executor must therefore issue a rank's sends to one peer on
//! one channel in list order, and apply its receives from one peer on one channel in list order,
//! whatever their dependencies allow; different channels are independent of each other.
//!
//! Why channels: pipelined chunks and Themis-style scheduling send different chunks through the
//! same peer in different orders; giving each chunk its own channel lets an executor move them
//! concurrently instead of serialising all traffic to a peer behind one queue.
//!
//! ## Layout conventions
//!
//! Buffer positions are **global element indices** of the collective's `count` elements, so an
//! executor can check results from these conventions alone, independently of the algorithm.
//! Every generator in this crate obeys them:
//!
//! - **All-Reduce**: every rank's input and output are `[0, count)`.
//! - **Reduce-Scatter**: every input is `[0, count)`; the outputs of all ranks are disjoint and
//!   together cover `[0, count)`, so rank `r`'s output holds, at each position, the sum over
//!   ranks of that global index.
//! - **All-Gather**: the inputs of all ranks are disjoint and cover `[0, count)`, each rank's
//!   input holding that rank's contribution at its global positions; every output is
//!   `[0, count)`.
//! - **All-To-All**: input `[0, count)` and output `[count, 2 count)` (or in place when `n == 1`),
//!   blocks laid out by [`crate::algorithms::all_to_all_blocks`].
//! - **Broadcast** (root): the root's input is `[0, count)`, the others' input is empty; every
//!   output is `[0, count)`.
//! - **Reduce** (root): every input is `[0, count)`; the root's output is `[0, count)`, the
//!   others' output is empty.
//!
//! ## Data races
//!
//! Two steps of a rank *conflict* when one writes (a `Recv` or a `Copy`'s `dst`) a range the other
//! reads or writes. [`validate`] requires every conflicting pair to be ordered by the DAG, so the
//! result never depends on how an executor schedules independent steps. [`ProgramBuilder`]
//! derives exactly those dependencies from the list order, so generators rarely write deps by
//! hand.
//!
//! ## Programs generated on demand
//!
//! A listed program costs memory per step (about 100 bytes with its dependencies, and the
//! executor's tables besides), and a ring All-Reduce has `4 (n - 1)` steps on each of `n`
//! ranks: 4.2 M steps on 1024 ranks, 268 M on 8192. Algorithms with a regular structure are
//! therefore also offered as a [`StepGen`]: step `i` of a rank (kind, dependency, dependent) as
//! a closed form, which the executor pulls through a bounded window (see
//! [`crate::executor`]), so a rank costs O(window) however long its list. A generator is the
//! same IR, not a second one: [`StepGen::materialise`] gives the exact [`Program`] that
//! [`crate::plan::compile`] builds for the same plan, and the unit tests check that they are
//! equal for many rank counts and sizes, so [`validate`]'s checks (hazards, channel matching)
//! carry over from the small instances to any `n`. [`crate::plan::stream`] says which plans
//! are generated (today the flat ring All-Reduce of one chunk); everything else, and every
//! custom (MSCCL, synthesized) program, stays listed.
//!
//! ## Files
//!
//! This file holds the IR itself; `builder.rs` the [`ProgramBuilder`], `validation.rs`
//! [`validate`] and its [`ValidationError`]s, `stream.rs` the [`StepGen`]s, `tests.rs` their
//! unit tests.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::chunk::ChunkRange;

mod builder;
mod stream;
#[cfg(test)]
mod tests;
mod validation;

pub use self::builder::ProgramBuilder;
pub use self::stream::{RingAllReduce, StepGen, Transfer};
pub use self::validation::{validate, ValidationError};

/// A step's identifier: its index in its program's step list.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct StepId(pub usize);

impl fmt::Display for StepId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "step {}", self.0)
    }
}

/// What a step does. Serialized with an `op` tag: `{"op": "send", "peer": 1, "chunk": {...}}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum StepKind {
    /// Send the elements of `chunk` to rank `peer` on `channel`.
    Send {
        /// The receiving rank.
        peer: usize,
        /// The elements sent.
        chunk: ChunkRange,
        /// The FIFO channel (per ordered rank pair) the message travels on; 0 by default.
        #[serde(default, skip_serializing_if = "is_zero")]
        channel: u32,
    },
    /// Receive the next message from rank `peer` into `chunk`.
    Recv {
        /// The sending rank.
        peer: usize,
        /// Where the message lands; its length must equal the matching send's.
        chunk: ChunkRange,
        /// `true`: add the message elementwise into `chunk`; `false`: overwrite `chunk`.
        reduce: bool,
        /// The FIFO channel the message is taken from; 0 by default.
        #[serde(default, skip_serializing_if = "is_zero")]
        channel: u32,
    },
    /// Copy `src` to `dst` within the rank's own buffer, or with `reduce` add `src`
    /// elementwise into `dst` (a local reduction, MSCCL's `re`); the ranges must not overlap
    /// and must have equal lengths.
    Copy {
        /// The elements read.
        src: ChunkRange,
        /// The elements written.
        dst: ChunkRange,
        /// `true`: reduce `src` into `dst` with the collective's operator; `false` (default):
        /// overwrite `dst`.
        #[serde(default, skip_serializing_if = "is_false")]
        reduce: bool,
    },
}

/// Plain copies are the default, so `reduce: false` is left out of serialized steps.
fn is_false(b: &bool) -> bool {
    !*b
}

/// Channel 0 is the default, so it is left out of serialized steps.
fn is_zero(channel: &u32) -> bool {
    *channel == 0
}

impl StepKind {
    /// The `(peer, channel)` a `Send` or `Recv` uses; `None` for a local `Copy`.
    pub const fn channel(&self) -> Option<(usize, u32)> {
        match *self {
            StepKind::Send { peer, channel, .. } | StepKind::Recv { peer, channel, .. } => {
                Some((peer, channel))
            }
            StepKind::Copy { .. } => None,
        }
    }

    /// The remote rank of a `Send` or `Recv`; `None` for a local `Copy`.
    pub const fn peer(&self) -> Option<usize> {
        match *self {
            StepKind::Send { peer, .. } | StepKind::Recv { peer, .. } => Some(peer),
            StepKind::Copy { .. } => None,
        }
    }

    /// The range the step only reads, if any (a `Send`'s chunk, a `Copy`'s source).
    pub const fn reads(&self) -> Option<ChunkRange> {
        match *self {
            StepKind::Send { chunk, .. } => Some(chunk),
            StepKind::Copy { src, .. } => Some(src),
            StepKind::Recv { .. } => None,
        }
    }

    /// The range the step writes, if any (a `Recv`'s chunk, a `Copy`'s destination).
    pub const fn writes(&self) -> Option<ChunkRange> {
        match *self {
            StepKind::Recv { chunk, .. } => Some(chunk),
            StepKind::Copy { dst, .. } => Some(dst),
            StepKind::Send { .. } => None,
        }
    }

    /// Whether the two steps touch a common element and at least one of them writes it.
    pub fn conflicts_with(&self, other: &StepKind) -> bool {
        let touches = |w: Option<ChunkRange>, k: &StepKind| {
            w.is_some_and(|w| {
                k.reads().is_some_and(|r| w.overlaps(r))
                    || k.writes().is_some_and(|x| w.overlaps(x))
            })
        };
        touches(self.writes(), other) || touches(other.writes(), self)
    }
}

/// One node of a program's DAG.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Step {
    /// The step's index in its program.
    pub id: StepId,
    /// Earlier steps that must complete before this one starts.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deps: Vec<StepId>,
    /// What the step does.
    #[serde(flatten)]
    pub kind: StepKind,
}

/// What one rank executes during a collective (see the [module docs](self)).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Program {
    /// The rank this program runs on; must equal its index in the program list.
    pub rank: usize,
    /// Elements in the rank's buffer.
    pub buffer_len: usize,
    /// Where the collective's input is placed before the first step.
    pub input: ChunkRange,
    /// Where the collective's result is read after the last step.
    pub output: ChunkRange,
    /// The steps, in a topological order (`steps[i].id == StepId(i)`).
    pub steps: Vec<Step>,
}

impl Program {
    /// The `Send` steps as `(peer, chunk)`, in list order.
    pub fn sends(&self) -> impl Iterator<Item = (usize, ChunkRange)> + '_ {
        self.steps.iter().filter_map(|s| match s.kind {
            StepKind::Send { peer, chunk, .. } => Some((peer, chunk)),
            _ => None,
        })
    }

    /// The `Send` steps as `(peer, chunk, channel)`, in list order.
    pub fn sends_on_channels(&self) -> impl Iterator<Item = (usize, ChunkRange, u32)> + '_ {
        self.steps.iter().filter_map(|s| match s.kind {
            StepKind::Send {
                peer,
                chunk,
                channel,
            } => Some((peer, chunk, channel)),
            _ => None,
        })
    }

    /// Elements this rank sends over the network in total.
    pub fn sent_elements(&self) -> usize {
        self.sends().map(|(_, c)| c.len).sum()
    }
}
