//! The reference interpreter: runs a set of programs in memory, with no network.
//!
//! It exists to prove that an algorithm computes the right thing independently of the network:
//! if [`run_local`] gives the expected buffers, any executor that respects the IR's rules
//! (dependencies, FIFO channels per `(src, dst, channel)` in program order — see [`crate::program`]) gives the same
//! result, because [`validate`] has ruled out data races.
//!
//! Semantics: each rank's buffer starts zeroed with its input copied into
//! [`Program::input`]. Every `(src, dst, channel)` triple is an unbounded FIFO queue, so a `Send`
//! never blocks: it copies the chunk's current values onto its queue. A `Recv` waits for the
//! next message on its `(peer, rank, channel)` queue and overwrites or adds into its chunk (`i64` addition wraps). The interpreter
//! repeatedly sweeps the ranks, running every step whose dependencies have completed and whose
//! channel is ready, until all steps have run; a sweep that runs nothing is a deadlock, reported
//! as [`RunError::Deadlock`] with the steps stuck at the frontier.
//!
//! Buffer layouts are the generators' (see [`crate::algorithms`]); for All-To-All, rank `i`'s
//! input block `j` ends as rank `j`'s output block `i`
//! ([`crate::algorithms::all_to_all_blocks`]).

use std::collections::{HashMap, VecDeque};
use std::fmt;

use crate::program::{validate, Program, StepId, StepKind, ValidationError};

/// Why a step could not run when the interpreter deadlocked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlockReason {
    /// A `Recv` whose channel holds no message.
    NoMessage,
    /// A `Send` or `Recv` behind an earlier, not yet run, step on the same channel.
    ChannelOrder,
}

/// A step whose dependencies have completed but which cannot run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Blocked {
    /// The rank.
    pub rank: usize,
    /// The stuck step.
    pub step: StepId,
    /// The rank on the other end of its channel.
    pub peer: usize,
    /// The channel number.
    pub channel: u32,
    /// Why it cannot run.
    pub reason: BlockReason,
}

impl fmt::Display for Blocked {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let why = match self.reason {
            BlockReason::NoMessage => "waits for a message from",
            BlockReason::ChannelOrder => "waits for an earlier step on its channel with",
        };
        write!(
            f,
            "rank {} {} {} rank {} (channel {})",
            self.rank, self.step, why, self.peer, self.channel
        )
    }
}

fn list_blocked(blocked: &[Blocked]) -> String {
    blocked
        .iter()
        .map(Blocked::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

/// Why [`run_local`] failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RunError {
    /// The programs are malformed.
    #[error("invalid programs: {0}")]
    Invalid(#[from] ValidationError),
    /// There is not exactly one input per program.
    #[error("{got} inputs for {expected} programs")]
    InputCount {
        /// Number of programs.
        expected: usize,
        /// Number of inputs.
        got: usize,
    },
    /// An input's length differs from its program's input range.
    #[error("rank {rank}: input has {got} elements, the program expects {expected}")]
    InputLength {
        /// The rank.
        rank: usize,
        /// The program's input length.
        expected: usize,
        /// The given input's length.
        got: usize,
    },
    /// A rank's buffer could not be allocated.
    #[error("rank {rank}: cannot allocate a buffer of {buffer_len} elements")]
    BufferTooLarge {
        /// The rank.
        rank: usize,
        /// The requested length.
        buffer_len: usize,
    },
    /// No step can run, yet some have not run.
    #[error("deadlock after {executed} of {total} steps: {}", list_blocked(.blocked))]
    Deadlock {
        /// Steps that ran.
        executed: usize,
        /// Steps in all programs.
        total: usize,
        /// The frontier: steps whose dependencies completed but which cannot run.
        blocked: Vec<Blocked>,
    },
}

/// Per-rank execution state.
struct RankState {
    buffer: Vec<i64>,
    done: Vec<bool>,
    /// Steps not yet run, in list order.
    pending: Vec<usize>,
    /// For each step, its position on its channel (k-th send to / receive from its peer on
    /// its channel).
    channel_pos: Vec<usize>,
    /// Per `(peer, channel)`: sends issued and receives applied so far.
    sent: HashMap<(usize, u32), usize>,
    received: HashMap<(usize, u32), usize>,
}

/// Messages in flight, per `(src, dst, channel)`.
type Queues = HashMap<(usize, usize, u32), VecDeque<Vec<i64>>>;

/// Runs `programs` with `inputs[r]` as rank `r`'s input and returns every rank's output range.
///
/// The programs are [validated](validate) first. `inputs[r]` must have exactly
/// `programs[r].input.len` elements.
pub fn run_local(programs: &[Program], inputs: Vec<Vec<i64>>) -> Result<Vec<Vec<i64>>, RunError> {
    validate(programs)?;
    if inputs.len() != programs.len() {
        return Err(RunError::InputCount {
            expected: programs.len(),
            got: inputs.len(),
        });
    }
    let mut states = Vec::with_capacity(programs.len());
    for (p, input) in programs.iter().zip(inputs) {
        states.push(init_rank(p, input)?);
    }

    let mut channels: Queues = HashMap::new();
    let total: usize = programs.iter().map(|p| p.steps.len()).sum();
    let mut executed = 0;
    while executed < total {
        let mut progress = false;
        for (p, st) in programs.iter().zip(states.iter_mut()) {
            let pending = std::mem::take(&mut st.pending);
            let mut still = Vec::with_capacity(pending.len());
            for i in pending {
                if try_run(p, st, i, &mut channels) {
                    st.done[i] = true;
                    executed += 1;
                    progress = true;
                } else {
                    still.push(i);
                }
            }
            st.pending = still;
        }
        if !progress {
            return Err(RunError::Deadlock {
                executed,
                total,
                blocked: frontier(programs, &states, &channels),
            });
        }
    }

    Ok(programs
        .iter()
        .zip(states)
        .map(|(p, st)| {
            // Validated: the output range fits the buffer.
            st.buffer
                .get(p.output.offset..p.output.offset + p.output.len)
                .map(<[i64]>::to_vec)
                .unwrap_or_default()
        })
        .collect())
}

fn init_rank(p: &Program, input: Vec<i64>) -> Result<RankState, RunError> {
    if input.len() != p.input.len {
        return Err(RunError::InputLength {
            rank: p.rank,
            expected: p.input.len,
            got: input.len(),
        });
    }
    let mut buffer = Vec::new();
    buffer
        .try_reserve_exact(p.buffer_len)
        .map_err(|_| RunError::BufferTooLarge {
            rank: p.rank,
            buffer_len: p.buffer_len,
        })?;
    buffer.resize(p.buffer_len, 0);
    buffer[p.input.offset..p.input.offset + p.input.len].copy_from_slice(&input);

    let mut sends: HashMap<(usize, u32), usize> = HashMap::new();
    let mut recvs: HashMap<(usize, u32), usize> = HashMap::new();
    let channel_pos = p
        .steps
        .iter()
        .map(|s| {
            let counter = match s.kind {
                StepKind::Send { peer, channel, .. } => sends.entry((peer, channel)).or_default(),
                StepKind::Recv { peer, channel, .. } => recvs.entry((peer, channel)).or_default(),
                StepKind::Copy { .. } => return 0,
            };
            *counter += 1;
            *counter - 1
        })
        .collect();
    Ok(RankState {
        buffer,
        done: vec![false; p.steps.len()],
        pending: (0..p.steps.len()).collect(),
        channel_pos,
        sent: HashMap::new(),
        received: HashMap::new(),
    })
}

/// Runs step `i` of `p` if it can run now; returns whether it ran.
fn try_run(p: &Program, st: &mut RankState, i: usize, channels: &mut Queues) -> bool {
    let step = &p.steps[i];
    if !step.deps.iter().all(|d| st.done[d.0]) {
        return false;
    }
    let pos = st.channel_pos[i];
    match step.kind {
        StepKind::Send {
            peer,
            chunk,
            channel,
        } => {
            let sent = st.sent.entry((peer, channel)).or_default();
            if *sent != pos {
                return false;
            }
            *sent += 1;
            let data = st.buffer[chunk.offset..chunk.offset + chunk.len].to_vec();
            channels
                .entry((p.rank, peer, channel))
                .or_default()
                .push_back(data);
        }
        StepKind::Recv {
            peer,
            chunk,
            reduce,
            channel,
        } => {
            let received = st.received.entry((peer, channel)).or_default();
            if *received != pos {
                return false;
            }
            let Some(data) = channels
                .get_mut(&(peer, p.rank, channel))
                .and_then(VecDeque::pop_front)
            else {
                return false;
            };
            *received += 1;
            // Validated: lengths match the sender's and the chunk fits the buffer.
            let dst = &mut st.buffer[chunk.offset..chunk.offset + chunk.len];
            if reduce {
                for (d, x) in dst.iter_mut().zip(&data) {
                    *d = d.wrapping_add(*x);
                }
            } else {
                dst.copy_from_slice(&data);
            }
        }
        StepKind::Copy {
            src,
            dst,
            reduce: false,
        } => {
            st.buffer
                .copy_within(src.offset..src.offset + src.len, dst.offset);
        }
        StepKind::Copy {
            src,
            dst,
            reduce: true,
        } => {
            for i in 0..src.len.min(dst.len) {
                let x = st.buffer[src.offset + i];
                let d = &mut st.buffer[dst.offset + i];
                *d = d.wrapping_add(x);
            }
        }
    }
    true
}

fn frontier(programs: &[Program], states: &[RankState], channels: &Queues) -> Vec<Blocked> {
    let mut blocked = Vec::new();
    for (p, st) in programs.iter().zip(states) {
        for &i in &st.pending {
            let step = &p.steps[i];
            if !step.deps.iter().all(|d| st.done[d.0]) {
                continue;
            }
            let pos = st.channel_pos[i];
            let (peer, channel, reason) = match step.kind {
                StepKind::Send { peer, channel, .. } => (peer, channel, BlockReason::ChannelOrder),
                StepKind::Recv { peer, channel, .. } => {
                    let in_order = st.received.get(&(peer, channel)).copied().unwrap_or(0) == pos;
                    let empty = channels
                        .get(&(peer, p.rank, channel))
                        .is_none_or(VecDeque::is_empty);
                    let reason = if in_order && empty {
                        BlockReason::NoMessage
                    } else {
                        BlockReason::ChannelOrder
                    };
                    (peer, channel, reason)
                }
                // A ready copy always runs.
                StepKind::Copy { .. } => continue,
            };
            blocked.push(Blocked {
                rank: p.rank,
                step: step.id,
                peer,
                channel,
                reason,
            });
        }
    }
    blocked
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chunk::ChunkRange;
    use crate::program::Step;

    fn c(offset: usize, len: usize) -> ChunkRange {
        ChunkRange::new(offset, len)
    }

    fn prog(rank: usize, steps: Vec<(Vec<usize>, StepKind)>) -> Program {
        Program {
            rank,
            buffer_len: 2,
            input: c(0, 2),
            output: c(0, 2),
            steps: steps
                .into_iter()
                .enumerate()
                .map(|(i, (deps, kind))| Step {
                    id: StepId(i),
                    deps: deps.into_iter().map(StepId).collect(),
                    kind,
                })
                .collect(),
        }
    }

    #[test]
    fn exchange_copies_and_reduces() {
        // Rank 0 sends [0..1) and adds rank 1's [1..2) into its [1..2); rank 1 overwrites.
        let p = vec![
            prog(
                0,
                vec![
                    (
                        vec![],
                        StepKind::Send {
                            peer: 1,
                            chunk: c(0, 1),
                            channel: 0,
                        },
                    ),
                    (
                        vec![],
                        StepKind::Recv {
                            peer: 1,
                            chunk: c(1, 1),
                            reduce: true,
                            channel: 0,
                        },
                    ),
                ],
            ),
            prog(
                1,
                vec![
                    (
                        vec![],
                        StepKind::Send {
                            peer: 0,
                            chunk: c(1, 1),
                            channel: 0,
                        },
                    ),
                    (
                        vec![],
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
        let out = run_local(&p, vec![vec![1, 2], vec![10, 20]]).unwrap();
        assert_eq!(out, [vec![1, 22], vec![1, 20]]);
    }

    #[test]
    fn reports_deadlock_instead_of_hanging() {
        // Each rank waits for the other's message before sending its own.
        let ring = |rank: usize| {
            prog(
                rank,
                vec![
                    (
                        vec![],
                        StepKind::Recv {
                            peer: 1 - rank,
                            chunk: c(0, 1),
                            reduce: true,
                            channel: 0,
                        },
                    ),
                    (
                        vec![0],
                        StepKind::Send {
                            peer: 1 - rank,
                            chunk: c(1, 1),
                            channel: 0,
                        },
                    ),
                ],
            )
        };
        let p = vec![ring(0), ring(1)];
        assert_eq!(validate(&p), Ok(()));
        let err = run_local(&p, vec![vec![0, 0], vec![0, 0]]).unwrap_err();
        let RunError::Deadlock {
            executed,
            total,
            ref blocked,
        } = err
        else {
            panic!("expected a deadlock, got {err}");
        };
        assert_eq!((executed, total), (0, 4));
        assert_eq!(blocked.len(), 2);
        assert!(blocked.iter().all(|b| b.reason == BlockReason::NoMessage));
        assert!(err
            .to_string()
            .contains("rank 0 step 0 waits for a message from rank 1 (channel 0)"));
    }

    #[test]
    fn rejects_bad_inputs_and_programs() {
        let p = vec![prog(0, vec![])];
        assert_eq!(
            run_local(&p, vec![]),
            Err(RunError::InputCount {
                expected: 1,
                got: 0
            })
        );
        assert_eq!(
            run_local(&p, vec![vec![1]]),
            Err(RunError::InputLength {
                rank: 0,
                expected: 2,
                got: 1
            })
        );
        let bad = vec![prog(
            0,
            vec![(
                vec![3],
                StepKind::Copy {
                    src: c(0, 1),
                    dst: c(1, 1),
                    reduce: false,
                },
            )],
        )];
        assert!(matches!(
            run_local(&bad, vec![vec![1, 2]]),
            Err(RunError::Invalid(ValidationError::DanglingDep { .. }))
        ));
        let mut huge = prog(0, vec![]);
        huge.buffer_len = usize::MAX;
        assert!(matches!(
            run_local(&[huge], vec![vec![1, 2]]),
            Err(RunError::BufferTooLarge { rank: 0, .. })
        ));
    }
}
