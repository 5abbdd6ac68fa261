//! The program IR: what one rank does during a collective.
//!
//! This is **the seam for custom algorithms**. An algorithm — built in ([`crate::algorithms`])
//! or written by hand, in Rust or as JSON/YAML — is a `Vec<Program>`, one per rank. Everything
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

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::chunk::ChunkRange;
use crate::hazards::Hazards;

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

/// Builds a [`Program`] step by step, deriving dependencies from data hazards.
///
/// Each pushed step depends on the earlier steps it [conflicts](StepKind::conflicts_with) with
/// that are not already implied: the last writer of what it reads (read-after-write), and for
/// what it writes the readers since the last write, or that writer if nobody read it since
/// (write-after-read, write-after-write); plus any explicit extra deps. Pushing costs
/// O(log s) per touched segment, so programs of many thousand steps build quickly. The result
/// is race-free by construction; only channel matching across ranks remains for [`validate`].
#[derive(Debug, Clone)]
pub struct ProgramBuilder {
    program: Program,
    hazards: Hazards,
}

impl ProgramBuilder {
    /// An empty program for `rank` with a buffer of `buffer_len` elements.
    pub fn new(
        rank: usize,
        buffer_len: usize,
        input: ChunkRange,
        output: ChunkRange,
    ) -> ProgramBuilder {
        ProgramBuilder {
            program: Program {
                rank,
                buffer_len,
                input,
                output,
                steps: Vec::new(),
            },
            hazards: Hazards::default(),
        }
    }

    /// Appends a `Send` of `chunk` to `peer` on channel 0.
    pub fn send(&mut self, peer: usize, chunk: ChunkRange) -> StepId {
        self.send_on(peer, chunk, 0)
    }

    /// Appends a `Recv` from `peer` on channel 0 into `chunk` (adding if `reduce`, else
    /// overwriting).
    pub fn recv(&mut self, peer: usize, chunk: ChunkRange, reduce: bool) -> StepId {
        self.recv_on(peer, chunk, reduce, 0)
    }

    /// Appends a `Send` of `chunk` to `peer` on `channel`.
    pub fn send_on(&mut self, peer: usize, chunk: ChunkRange, channel: u32) -> StepId {
        self.push(
            StepKind::Send {
                peer,
                chunk,
                channel,
            },
            &[],
        )
    }

    /// Appends a `Recv` from `peer` on `channel` into `chunk` (adding if `reduce`, else
    /// overwriting).
    pub fn recv_on(
        &mut self,
        peer: usize,
        chunk: ChunkRange,
        reduce: bool,
        channel: u32,
    ) -> StepId {
        self.push(
            StepKind::Recv {
                peer,
                chunk,
                reduce,
                channel,
            },
            &[],
        )
    }

    /// The steps pushed so far.
    pub fn steps(&self) -> &[Step] {
        &self.program.steps
    }

    /// Number of steps pushed so far.
    pub fn len(&self) -> usize {
        self.program.steps.len()
    }

    /// Whether no step has been pushed yet.
    pub fn is_empty(&self) -> bool {
        self.program.steps.is_empty()
    }

    /// Appends a local `Copy` of `src` to `dst`.
    pub fn copy(&mut self, src: ChunkRange, dst: ChunkRange) -> StepId {
        self.push(
            StepKind::Copy {
                src,
                dst,
                reduce: false,
            },
            &[],
        )
    }

    /// Appends a step that depends on its hazards and on `after`. Entries of `after` that are
    /// not earlier steps are kept as given, for [`validate`] to reject.
    pub fn push(&mut self, kind: StepKind, after: &[StepId]) -> StepId {
        self.push_gated(kind, after, None)
    }

    /// Like [`push`](Self::push), and if the step has no hazard on any step from index
    /// `gate.0` on (it is a *root* of the section that starts there), it also depends on
    /// `gate.1`. This is how the chunking wrapper holds a chunk back until an earlier chunk has
    /// finished at this rank, without chaining every one of its steps.
    pub(crate) fn push_gated(
        &mut self,
        kind: StepKind,
        after: &[StepId],
        gate: Option<(usize, &[StepId])>,
    ) -> StepId {
        let index = self.program.steps.len();
        let mut candidates = Vec::new();
        self.hazards
            .conflicts(kind.reads(), kind.writes(), &mut candidates);
        if let Some((start, gate_deps)) = gate {
            if !candidates.iter().any(|&c| c >= start) {
                candidates.extend(gate_deps.iter().map(|d| d.0).filter(|&d| d < index));
            }
        }
        let mut invalid = Vec::new();
        for d in after {
            if d.0 < index {
                candidates.push(d.0);
            } else {
                invalid.push(*d);
            }
        }
        candidates.sort_unstable();
        candidates.dedup();
        let mut deps: Vec<StepId> = candidates.into_iter().map(StepId).collect();
        deps.extend(invalid);
        self.hazards.record(index, kind.reads(), kind.writes());
        self.program.steps.push(Step {
            id: StepId(index),
            deps,
            kind,
        });
        StepId(index)
    }

    /// The finished program.
    pub fn finish(self) -> Program {
        self.program
    }
}

/// Why a set of programs is not a well-formed collective.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ValidationError {
    /// `programs[index].rank` is not `index`.
    #[error("program at index {index} says it is rank {rank}")]
    RankMismatch {
        /// Position in the program list.
        index: usize,
        /// The program's `rank` field.
        rank: usize,
    },
    /// The input or output range does not fit the buffer.
    #[error("rank {rank}: {which} range {range} does not fit the buffer of {buffer_len} elements")]
    IoOutOfBuffer {
        /// The rank.
        rank: usize,
        /// `"input"` or `"output"`.
        which: &'static str,
        /// The offending range.
        range: ChunkRange,
        /// The buffer's length.
        buffer_len: usize,
    },
    /// `steps[index].id` is not `StepId(index)`.
    #[error("rank {rank}: the step at index {index} has id {}", id.0)]
    StepIdMismatch {
        /// The rank.
        rank: usize,
        /// Position in the step list.
        index: usize,
        /// The step's `id` field.
        id: StepId,
    },
    /// A dependency names no step of the program.
    #[error("rank {rank}: {step} depends on {dep}, which does not exist")]
    DanglingDep {
        /// The rank.
        rank: usize,
        /// The dependent step.
        step: StepId,
        /// The missing step.
        dep: StepId,
    },
    /// A dependency names the step itself or a later one (which could form a cycle).
    #[error("rank {rank}: {step} depends on {dep}, which is not an earlier step")]
    ForwardDep {
        /// The rank.
        rank: usize,
        /// The dependent step.
        step: StepId,
        /// The non-earlier step.
        dep: StepId,
    },
    /// A `Send` or `Recv` names a rank that does not exist.
    #[error("rank {rank}: {step} names peer {peer}, but there are {nranks} ranks")]
    PeerOutOfRange {
        /// The rank.
        rank: usize,
        /// The step.
        step: StepId,
        /// The named peer.
        peer: usize,
        /// Number of programs.
        nranks: usize,
    },
    /// A `Send` or `Recv` names its own rank (use a `Copy`).
    #[error("rank {rank}: {step} sends to or receives from itself (use a copy)")]
    SelfPeer {
        /// The rank.
        rank: usize,
        /// The step.
        step: StepId,
    },
    /// A step's range does not fit the buffer.
    #[error("rank {rank}: {step} touches {range}, outside the buffer of {buffer_len} elements")]
    ChunkOutOfBuffer {
        /// The rank.
        rank: usize,
        /// The step.
        step: StepId,
        /// The offending range.
        range: ChunkRange,
        /// The buffer's length.
        buffer_len: usize,
    },
    /// A `Copy` whose source and destination differ in length.
    #[error("rank {rank}: {step} copies {src_len} elements into {dst_len}")]
    CopyLengthMismatch {
        /// The rank.
        rank: usize,
        /// The step.
        step: StepId,
        /// Source length.
        src_len: usize,
        /// Destination length.
        dst_len: usize,
    },
    /// A `Copy` whose source and destination overlap.
    #[error("rank {rank}: {step} copies between overlapping ranges")]
    CopyOverlap {
        /// The rank.
        rank: usize,
        /// The step.
        step: StepId,
    },
    /// A `Send` with no matching `Recv` on the peer.
    #[error("rank {src} {step} sends message #{index} on channel {channel} to rank {dst}, which receives only {index} from it on that channel")]
    UnmatchedSend {
        /// The sending rank.
        src: usize,
        /// The receiving rank.
        dst: usize,
        /// The channel.
        channel: u32,
        /// The send step.
        step: StepId,
        /// The message's position on the channel (0-based).
        index: usize,
    },
    /// A `Recv` with no matching `Send` on the peer.
    #[error("rank {dst} {step} receives message #{index} on channel {channel} from rank {src}, which sends only {index} to it on that channel")]
    UnmatchedRecv {
        /// The sending rank.
        src: usize,
        /// The receiving rank.
        dst: usize,
        /// The channel.
        channel: u32,
        /// The receive step.
        step: StepId,
        /// The message's position on the channel (0-based).
        index: usize,
    },
    /// The `k`-th send and `k`-th receive on a channel differ in length.
    #[error("message #{index} on channel {channel} from rank {src} to rank {dst}: {send_step} sends {send_len} elements, {recv_step} receives {recv_len}")]
    LengthMismatch {
        /// The sending rank.
        src: usize,
        /// The receiving rank.
        dst: usize,
        /// The channel.
        channel: u32,
        /// The message's position on the channel (0-based).
        index: usize,
        /// The send step (on `src`).
        send_step: StepId,
        /// The receive step (on `dst`).
        recv_step: StepId,
        /// Elements sent.
        send_len: usize,
        /// Elements expected.
        recv_len: usize,
    },
    /// Two conflicting steps that the DAG does not order.
    #[error("rank {rank}: {first} and {second} touch the same elements (at least one writes) but neither depends on the other")]
    Race {
        /// The rank.
        rank: usize,
        /// The earlier step.
        first: StepId,
        /// The later step.
        second: StepId,
    },
}

/// Checks that `programs` (one per rank, `programs[r].rank == r`) form a well-formed
/// collective: ranges fit the buffers, every dependency names an earlier step (so the DAG is
/// acyclic), peers exist and differ from the rank, copies are sound, every `Send` has a
/// matching `Recv` of the same length in the same per-`(src, dst, channel)` order, and conflicting steps are
/// ordered. Returns the first problem found.
///
/// Deadlocks across ranks (a receive whose message is only sent after it) are not detected
/// here; [`crate::interpret::run_local`] reports them.
pub fn validate(programs: &[Program]) -> Result<(), ValidationError> {
    let nranks = programs.len();
    for (index, p) in programs.iter().enumerate() {
        check_program(index, p, nranks)?;
    }
    check_channels(programs)?;
    for p in programs {
        check_races(p)?;
    }
    Ok(())
}

fn check_program(index: usize, p: &Program, nranks: usize) -> Result<(), ValidationError> {
    use ValidationError as E;
    let rank = p.rank;
    if rank != index {
        return Err(E::RankMismatch { index, rank });
    }
    let buffer_len = p.buffer_len;
    for (which, range) in [("input", p.input), ("output", p.output)] {
        if !range.fits(buffer_len) {
            return Err(E::IoOutOfBuffer {
                rank,
                which,
                range,
                buffer_len,
            });
        }
    }
    for (i, s) in p.steps.iter().enumerate() {
        if s.id != StepId(i) {
            return Err(E::StepIdMismatch {
                rank,
                index: i,
                id: s.id,
            });
        }
        let step = s.id;
        for &dep in &s.deps {
            if dep.0 >= p.steps.len() {
                return Err(E::DanglingDep { rank, step, dep });
            }
            if dep.0 >= i {
                return Err(E::ForwardDep { rank, step, dep });
            }
        }
        if let Some(peer) = s.kind.peer() {
            if peer >= nranks {
                return Err(E::PeerOutOfRange {
                    rank,
                    step,
                    peer,
                    nranks,
                });
            }
            if peer == rank {
                return Err(E::SelfPeer { rank, step });
            }
        }
        for range in [s.kind.reads(), s.kind.writes()].into_iter().flatten() {
            if !range.fits(buffer_len) {
                return Err(E::ChunkOutOfBuffer {
                    rank,
                    step,
                    range,
                    buffer_len,
                });
            }
        }
        if let StepKind::Copy { src, dst, .. } = s.kind {
            if src.len != dst.len {
                return Err(E::CopyLengthMismatch {
                    rank,
                    step,
                    src_len: src.len,
                    dst_len: dst.len,
                });
            }
            if src.overlaps(dst) {
                return Err(E::CopyOverlap { rank, step });
            }
        }
    }
    Ok(())
}

/// Messages on each `(src, dst, channel)` queue, in program order, as `(step, len)`.
type Channels = BTreeMap<(usize, usize, u32), Vec<(StepId, usize)>>;

fn check_channels(programs: &[Program]) -> Result<(), ValidationError> {
    let mut sends: Channels = BTreeMap::new();
    let mut recvs: Channels = BTreeMap::new();
    for p in programs {
        for s in &p.steps {
            match s.kind {
                StepKind::Send {
                    peer,
                    chunk,
                    channel,
                } => sends
                    .entry((p.rank, peer, channel))
                    .or_default()
                    .push((s.id, chunk.len)),
                StepKind::Recv {
                    peer,
                    chunk,
                    channel,
                    ..
                } => recvs
                    .entry((peer, p.rank, channel))
                    .or_default()
                    .push((s.id, chunk.len)),
                StepKind::Copy { .. } => {}
            }
        }
    }
    let empty = Vec::new();
    for (&(src, dst, channel), sent) in &sends {
        let received = recvs.get(&(src, dst, channel)).unwrap_or(&empty);
        for (index, &(send_step, send_len)) in sent.iter().enumerate() {
            let Some(&(recv_step, recv_len)) = received.get(index) else {
                return Err(ValidationError::UnmatchedSend {
                    src,
                    dst,
                    channel,
                    step: send_step,
                    index,
                });
            };
            if send_len != recv_len {
                return Err(ValidationError::LengthMismatch {
                    src,
                    dst,
                    channel,
                    index,
                    send_step,
                    recv_step,
                    send_len,
                    recv_len,
                });
            }
        }
    }
    for (&(src, dst, channel), received) in &recvs {
        let sent = sends.get(&(src, dst, channel)).map_or(0, Vec::len);
        if let Some(&(step, _)) = received.get(sent) {
            return Err(ValidationError::UnmatchedRecv {
                src,
                dst,
                channel,
                step,
                index: sent,
            });
        }
    }
    Ok(())
}

/// Checks that every step comes after its hazards (see [`crate::hazards`]), which orders every
/// conflicting pair. Dependencies are usually direct, so the check is cheap; otherwise a
/// depth-first search bounded below by the candidate's index decides.
fn check_races(p: &Program) -> Result<(), ValidationError> {
    let mut hazards = Hazards::default();
    let mut candidates = Vec::new();
    let mut seen = vec![0u32; p.steps.len()];
    let mut generation = 0u32;
    let mut stack = Vec::new();
    for (i, s) in p.steps.iter().enumerate() {
        candidates.clear();
        hazards.conflicts(s.kind.reads(), s.kind.writes(), &mut candidates);
        candidates.sort_unstable();
        candidates.dedup();
        for &j in &candidates {
            if s.deps.iter().any(|d| d.0 == j) {
                continue;
            }
            generation = generation.wrapping_add(1);
            if generation == 0 {
                seen.fill(0);
                generation = 1;
            }
            if !reaches(p, i, j, &mut seen, generation, &mut stack) {
                return Err(ValidationError::Race {
                    rank: p.rank,
                    first: StepId(j),
                    second: StepId(i),
                });
            }
        }
        hazards.record(i, s.kind.reads(), s.kind.writes());
    }
    Ok(())
}

/// Whether step `target` is an ancestor of step `from` (deps are already known to point to
/// earlier steps).
fn reaches(
    p: &Program,
    from: usize,
    target: usize,
    seen: &mut [u32],
    generation: u32,
    stack: &mut Vec<usize>,
) -> bool {
    stack.clear();
    stack.push(from);
    while let Some(x) = stack.pop() {
        for d in &p.steps[x].deps {
            let d = d.0;
            if d == target {
                return true;
            }
            if d > target && seen[d] != generation {
                seen[d] = generation;
                stack.push(d);
            }
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(offset: usize, len: usize) -> ChunkRange {
        ChunkRange::new(offset, len)
    }

    fn step(id: usize, deps: &[usize], kind: StepKind) -> Step {
        Step {
            id: StepId(id),
            deps: deps.iter().map(|&d| StepId(d)).collect(),
            kind,
        }
    }

    fn prog(rank: usize, len: usize, steps: Vec<Step>) -> Program {
        Program {
            rank,
            buffer_len: len,
            input: c(0, len),
            output: c(0, len),
            steps,
        }
    }

    fn send(peer: usize, chunk: ChunkRange) -> StepKind {
        StepKind::Send {
            peer,
            chunk,
            channel: 0,
        }
    }

    fn recv(peer: usize, chunk: ChunkRange) -> StepKind {
        StepKind::Recv {
            peer,
            chunk,
            reduce: true,
            channel: 0,
        }
    }

    /// Rank 0 sends [0..2) to rank 1, which adds it in.
    fn pair() -> Vec<Program> {
        vec![
            prog(0, 4, vec![step(0, &[], send(1, c(0, 2)))]),
            prog(1, 4, vec![step(0, &[], recv(0, c(0, 2)))]),
        ]
    }

    #[test]
    fn accepts_a_simple_pair() {
        assert_eq!(validate(&pair()), Ok(()));
    }

    #[test]
    fn rejects_dangling_dep() {
        let mut p = pair();
        p[1].steps[0].deps.push(StepId(7));
        assert_eq!(
            validate(&p),
            Err(ValidationError::DanglingDep {
                rank: 1,
                step: StepId(0),
                dep: StepId(7)
            })
        );
    }

    #[test]
    fn rejects_forward_and_self_dep() {
        let mut p = pair();
        p[0].steps.push(step(1, &[], send(1, c(2, 2))));
        p[1].steps.push(step(1, &[], recv(0, c(2, 2))));
        assert_eq!(validate(&p), Ok(()));
        p[0].steps[0].deps.push(StepId(1));
        assert!(matches!(
            validate(&p),
            Err(ValidationError::ForwardDep { rank: 0, .. })
        ));
        p[0].steps[0].deps = vec![StepId(0)];
        assert!(matches!(
            validate(&p),
            Err(ValidationError::ForwardDep { rank: 0, .. })
        ));
    }

    #[test]
    fn rejects_unmatched_send_and_recv() {
        let mut p = pair();
        p[1].steps.clear();
        assert_eq!(
            validate(&p),
            Err(ValidationError::UnmatchedSend {
                src: 0,
                dst: 1,
                channel: 0,
                step: StepId(0),
                index: 0
            })
        );
        let mut p = pair();
        p[0].steps.clear();
        assert_eq!(
            validate(&p),
            Err(ValidationError::UnmatchedRecv {
                src: 0,
                dst: 1,
                channel: 0,
                step: StepId(0),
                index: 0
            })
        );
    }

    #[test]
    fn rejects_length_mismatch() {
        let mut p = pair();
        p[1].steps[0].kind = recv(0, c(0, 3));
        assert!(matches!(
            validate(&p),
            Err(ValidationError::LengthMismatch {
                send_len: 2,
                recv_len: 3,
                ..
            })
        ));
    }

    #[test]
    fn channels_are_fifo_in_program_order() {
        // Rank 0 sends 1 then 3 elements; rank 1 receives 3 then 1: lengths line up only out of
        // order, which FIFO channels forbid.
        let p = vec![
            prog(
                0,
                4,
                vec![
                    step(0, &[], send(1, c(0, 1))),
                    step(1, &[], send(1, c(1, 3))),
                ],
            ),
            prog(
                1,
                4,
                vec![
                    step(0, &[], recv(0, c(0, 3))),
                    step(1, &[], recv(0, c(3, 1))),
                ],
            ),
        ];
        assert!(matches!(
            validate(&p),
            Err(ValidationError::LengthMismatch { index: 0, .. })
        ));
    }

    #[test]
    fn channels_are_independent_queues() {
        // Rank 0 sends 1 element on channel 0, then 3 on channel 1; rank 1 takes channel 1's
        // message first. Matching is per (src, dst, channel), so this is well formed, and the
        // interpreter delivers each message to the receive on its channel.
        let p = vec![
            prog(
                0,
                4,
                vec![
                    step(
                        0,
                        &[],
                        StepKind::Send {
                            peer: 1,
                            chunk: c(0, 1),
                            channel: 0,
                        },
                    ),
                    step(
                        1,
                        &[],
                        StepKind::Send {
                            peer: 1,
                            chunk: c(1, 3),
                            channel: 1,
                        },
                    ),
                ],
            ),
            prog(
                1,
                4,
                vec![
                    step(
                        0,
                        &[],
                        StepKind::Recv {
                            peer: 0,
                            chunk: c(1, 3),
                            reduce: false,
                            channel: 1,
                        },
                    ),
                    step(
                        1,
                        &[],
                        StepKind::Recv {
                            peer: 0,
                            chunk: c(0, 1),
                            reduce: false,
                            channel: 0,
                        },
                    ),
                ],
            ),
        ];
        assert_eq!(validate(&p), Ok(()));
        let out = crate::interpret::run_local(&p, vec![vec![1, 2, 3, 4], vec![0; 4]]).unwrap();
        assert_eq!(out[1], [1, 2, 3, 4]);
        // The same message on the wrong channel is unmatched.
        let mut wrong = p.clone();
        wrong[1].steps[0].kind = StepKind::Recv {
            peer: 0,
            chunk: c(1, 3),
            reduce: false,
            channel: 2,
        };
        assert!(matches!(
            validate(&wrong),
            Err(ValidationError::UnmatchedSend {
                channel: 1,
                index: 0,
                ..
            })
        ));
    }

    #[test]
    fn channel_defaults_to_zero_in_json() {
        let s: Step = serde_json::from_str(
            r#"{"id": 0, "op": "recv", "peer": 1, "chunk": {"offset": 0, "len": 1}, "reduce": false}"#,
        )
        .unwrap();
        assert_eq!(s.kind.channel(), Some((1, 0)));
        let on3 = step(
            0,
            &[],
            StepKind::Send {
                peer: 2,
                chunk: c(0, 1),
                channel: 3,
            },
        );
        let json = serde_json::to_value(&on3).unwrap();
        assert_eq!(json["channel"], 3);
        assert_eq!(serde_json::from_value::<Step>(json).unwrap(), on3);
    }

    #[test]
    fn rejects_bad_peers_ranks_and_ranges() {
        let mut p = pair();
        p[0].steps[0].kind = send(5, c(0, 2));
        assert!(matches!(
            validate(&p),
            Err(ValidationError::PeerOutOfRange {
                peer: 5,
                nranks: 2,
                ..
            })
        ));
        let mut p = pair();
        p[0].steps[0].kind = send(0, c(0, 2));
        assert!(matches!(
            validate(&p),
            Err(ValidationError::SelfPeer { rank: 0, .. })
        ));
        let mut p = pair();
        p[1].rank = 0;
        assert!(matches!(
            validate(&p),
            Err(ValidationError::RankMismatch { index: 1, rank: 0 })
        ));
        let mut p = pair();
        p[0].steps[0].kind = send(1, c(3, 2));
        assert!(matches!(
            validate(&p),
            Err(ValidationError::ChunkOutOfBuffer { rank: 0, .. })
        ));
        let mut p = pair();
        p[0].output = c(usize::MAX, 2);
        assert!(matches!(
            validate(&p),
            Err(ValidationError::IoOutOfBuffer {
                which: "output",
                ..
            })
        ));
        let mut p = pair();
        p[0].steps[0].id = StepId(3);
        assert!(matches!(
            validate(&p),
            Err(ValidationError::StepIdMismatch { index: 0, .. })
        ));
    }

    #[test]
    fn rejects_bad_copies() {
        let p = vec![prog(
            0,
            4,
            vec![step(
                0,
                &[],
                StepKind::Copy {
                    src: c(0, 2),
                    dst: c(2, 1),
                    reduce: false,
                },
            )],
        )];
        assert!(matches!(
            validate(&p),
            Err(ValidationError::CopyLengthMismatch { .. })
        ));
        let p = vec![prog(
            0,
            4,
            vec![step(
                0,
                &[],
                StepKind::Copy {
                    src: c(0, 2),
                    dst: c(1, 2),
                    reduce: false,
                },
            )],
        )];
        assert!(matches!(
            validate(&p),
            Err(ValidationError::CopyOverlap { .. })
        ));
    }

    #[test]
    fn rejects_unordered_conflicts() {
        // Rank 1 receives into [0..2) and sends [1..3) with no dependency: a race.
        let mut p = pair();
        p[1].steps.push(step(1, &[], send(0, c(1, 2))));
        p[0].steps.push(step(1, &[], recv(1, c(2, 2))));
        assert_eq!(
            validate(&p),
            Err(ValidationError::Race {
                rank: 1,
                first: StepId(0),
                second: StepId(1)
            })
        );
        p[1].steps[1].deps.push(StepId(0));
        assert_eq!(validate(&p), Ok(()));
    }

    #[test]
    fn builder_derives_minimal_hazard_deps() {
        let mut b = ProgramBuilder::new(0, 6, c(0, 6), c(0, 6));
        let s0 = b.send(1, c(0, 2)); // reads [0..2)
        let s1 = b.send(2, c(0, 2)); // read/read: independent
        let r2 = b.recv(1, c(0, 2), true); // WAR on s0 and s1
        let s3 = b.send(1, c(0, 1)); // RAW on r2 (s0, s1 implied)
        let r4 = b.recv(2, c(4, 2), false); // touches nothing earlier
        let c5 = b.copy(c(4, 2), c(2, 2)); // RAW on r4
        let x6 = b.push(send(2, c(3, 1)), &[s3]); // RAW on c5, plus explicit s3
        let p = b.finish();
        let deps = |id: StepId| p.steps[id.0].deps.clone();
        assert!(deps(s0).is_empty() && deps(s1).is_empty());
        assert_eq!(deps(r2), [s0, s1]);
        assert_eq!(deps(s3), [r2]);
        assert!(deps(r4).is_empty());
        assert_eq!(deps(c5), [r4]);
        assert_eq!(deps(x6), [s3, c5]);
        assert!(check_races(&p).is_ok());
    }

    #[test]
    fn step_serializes_flat_with_op_tag() {
        let s = step(2, &[0, 1], recv(3, c(4, 5)));
        let json = serde_json::to_value(&s).unwrap();
        assert_eq!(
            json,
            serde_json::json!({
                "id": 2, "deps": [0, 1], "op": "recv", "peer": 3,
                "chunk": {"offset": 4, "len": 5}, "reduce": true
            })
        );
        let back: Step = serde_json::from_value(json).unwrap();
        assert_eq!(back, s);
        let no_deps: Step = serde_json::from_str(
            r#"{"id": 0, "op": "send", "peer": 1, "chunk": {"offset": 0, "len": 1}}"#,
        )
        .unwrap();
        assert!(no_deps.deps.is_empty());
    }
}
