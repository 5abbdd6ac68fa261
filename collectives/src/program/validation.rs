//! [`validate`]: whether a set of programs is a well-formed collective (ranges, dependencies,
//! peers, copies, channel matching across ranks, and ordered conflicting steps).

use std::collections::BTreeMap;

use super::*;
use crate::hazards::Hazards;

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
pub(super) fn check_races(p: &Program) -> Result<(), ValidationError> {
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
