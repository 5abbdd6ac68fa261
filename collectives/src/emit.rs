//! The programs of all ranks under construction, with a step budget and chunk gating.
//!
//! Generators write through an [`Emitter`] instead of individual builders so that
//!
//! - a block ([`Segs`]) becomes one step per segment on both sides of a message;
//! - the total number of steps (counting messages and copies that turned out empty, so that
//!   loops over huge rank counts are bounded even for tiny buffers) is bounded: plans that
//!   would need more than [`MAX_TOTAL_STEPS`] fail with [`AlgorithmError::TooManySteps`] as soon as the budget
//!   is exceeded, so a huge rank count costs at most the budget, never memory proportional to
//!   the buffer or to `ranks^2`;
//! - the chunking wrapper can hold chunk `c + L` back until chunk `c` has finished at a rank
//!   ([`Emitter::begin_chunk`]): the *roots* of chunk `c + L` (its steps with no hazard on an
//!   earlier step of the same chunk) depend on the *sinks* of chunk `c` (its steps no other
//!   step of chunk `c` depends on).

use std::collections::VecDeque;

use crate::algorithms::AlgorithmError;
use crate::chunk::ChunkRange;
use crate::program::{Program, ProgramBuilder, StepId, StepKind};

/// The most steps (over all ranks) a compiled plan may have. A step costs about 100 bytes and
/// building one program costs time quadratic in its length, so this keeps a compile within
/// about a gigabyte and minutes even for pathological plans.
pub const MAX_TOTAL_STEPS: usize = 1 << 23;

/// Per-rank chunk gating state.
#[derive(Default)]
struct Gate {
    /// Index of the first step of the chunk being emitted.
    start: usize,
    /// What the roots of the current chunk wait for.
    deps: Vec<StepId>,
    /// Sinks of the most recent finished chunks, oldest first.
    finished: VecDeque<Vec<StepId>>,
}

/// Builders for every rank plus the bookkeeping described in the module docs.
pub(crate) struct Emitter {
    builders: Vec<ProgramBuilder>,
    gates: Vec<Gate>,
    steps: usize,
    limit: usize,
}

impl Emitter {
    /// One builder per rank, each with a buffer of `buffer_len` elements and the given
    /// input/output ranges.
    pub(crate) fn new(
        n: usize,
        buffer_len: usize,
        io: impl Fn(usize) -> (ChunkRange, ChunkRange),
    ) -> Emitter {
        Emitter {
            builders: (0..n)
                .map(|r| {
                    let (input, output) = io(r);
                    ProgramBuilder::new(r, buffer_len, input, output)
                })
                .collect(),
            gates: (0..n).map(|_| Gate::default()).collect(),
            steps: 0,
            limit: MAX_TOTAL_STEPS,
        }
    }

    /// Counts one unit of work against the budget: a step, or a message or copy that turned
    /// out empty (so loops over huge rank counts with tiny buffers are bounded too).
    fn charge(&mut self) -> Result<(), AlgorithmError> {
        self.steps += 1;
        if self.steps > self.limit {
            return Err(AlgorithmError::TooManySteps { limit: self.limit });
        }
        Ok(())
    }

    fn push(&mut self, rank: usize, kind: StepKind) -> Result<(), AlgorithmError> {
        self.charge()?;
        let gate = &self.gates[rank];
        let g = (!gate.deps.is_empty()).then_some((gate.start, gate.deps.as_slice()));
        self.builders[rank].push_gated(kind, &[], g);
        Ok(())
    }

    /// `rank` sends block `segs` to `peer` on `channel` (one step per segment).
    pub(crate) fn send(
        &mut self,
        rank: usize,
        peer: usize,
        segs: &[ChunkRange],
        channel: u32,
    ) -> Result<(), AlgorithmError> {
        if segs.is_empty() {
            self.charge()?;
        }
        for &chunk in segs {
            self.push(
                rank,
                StepKind::Send {
                    peer,
                    chunk,
                    channel,
                },
            )?;
        }
        Ok(())
    }

    /// `rank` receives block `segs` from `peer` on `channel`, adding if `reduce`.
    pub(crate) fn recv(
        &mut self,
        rank: usize,
        peer: usize,
        segs: &[ChunkRange],
        reduce: bool,
        channel: u32,
    ) -> Result<(), AlgorithmError> {
        if segs.is_empty() {
            self.charge()?;
        }
        for &chunk in segs {
            self.push(
                rank,
                StepKind::Recv {
                    peer,
                    chunk,
                    reduce,
                    channel,
                },
            )?;
        }
        Ok(())
    }

    /// `rank` copies `src` to `dst` locally (skipped when empty).
    pub(crate) fn copy(
        &mut self,
        rank: usize,
        src: ChunkRange,
        dst: ChunkRange,
    ) -> Result<(), AlgorithmError> {
        if src.len == 0 {
            return self.charge();
        }
        self.push(
            rank,
            StepKind::Copy {
                src,
                dst,
                reduce: false,
            },
        )
    }

    /// Starts a chunk that may only begin at each rank once the chunk `in_flight` chunks
    /// earlier has finished there (`in_flight == 0`: no limit).
    ///
    /// Starting a chunk visits every rank, so it costs `n` units of the budget: many more
    /// chunks than elements over many ranks fail instead of looping for hours.
    pub(crate) fn begin_chunk(&mut self, in_flight: usize) -> Result<(), AlgorithmError> {
        self.steps = self.steps.saturating_add(self.builders.len());
        if self.steps > self.limit {
            return Err(AlgorithmError::TooManySteps { limit: self.limit });
        }
        for (b, g) in self.builders.iter().zip(&mut self.gates) {
            g.start = b.len();
            g.deps = if in_flight > 0 && g.finished.len() >= in_flight {
                g.finished[g.finished.len() - in_flight].clone()
            } else {
                Vec::new()
            };
        }
        Ok(())
    }

    /// Ends the current chunk, remembering its sinks at every rank (a rank where the chunk
    /// had no steps passes on the gate it was given, so the chain of chunks is not broken).
    pub(crate) fn end_chunk(&mut self, in_flight: usize) {
        for (b, g) in self.builders.iter().zip(&mut self.gates) {
            let steps = &b.steps()[g.start..];
            let sinks = if steps.is_empty() {
                std::mem::take(&mut g.deps)
            } else {
                let mut depended = vec![false; steps.len()];
                for s in steps {
                    for d in &s.deps {
                        if d.0 >= g.start {
                            depended[d.0 - g.start] = true;
                        }
                    }
                }
                steps
                    .iter()
                    .zip(depended)
                    .filter(|(_, d)| !d)
                    .map(|(s, _)| s.id)
                    .collect()
            };
            g.finished.push_back(sinks);
            while g.finished.len() > in_flight {
                g.finished.pop_front();
            }
            g.deps.clear();
        }
    }

    /// The finished programs.
    pub(crate) fn finish(self) -> Vec<Program> {
        self.builders
            .into_iter()
            .map(ProgramBuilder::finish)
            .collect()
    }
}
