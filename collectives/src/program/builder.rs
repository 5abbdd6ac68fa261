//! [`ProgramBuilder`]: building a [`Program`] step by step with the dependencies derived from
//! data hazards, so generators rarely write deps by hand.

use super::*;
use crate::hazards::Hazards;

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
