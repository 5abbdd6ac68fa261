//! A job's run-time state, shared by listed programs ([`super::window`]) and generated rings
//! ([`super::ring`]): the record, the buffer, the step kinds, and the send and receive of a
//! message, written once for both.

use std::sync::Arc;

use bytes::Bytes;
use fabemu_fabric::link::Rate;
use fabemu_fabric::transport::{ClassId, Transport};
use fabemu_fabric::units::{Bandwidth, Time};

use super::ids::{imm_for, Timer};
use super::ring::{RingBlocks, RingProgress};
use super::window::{channels_of, listed_steps, ChanIndex, Chans, Window};
use super::{DataSpec, ExecError, Job, JobRecord, JobStart, MAX_STEP_TIMES, MAX_WRITE};
use crate::chunk::ChunkRange;
use crate::data;
use crate::program::{Program, StepGen, StepKind};

/// Where a job's steps come from.
pub(super) enum Steps {
    /// The job's program lists them; the dependents of step `i` are
    /// `dependents[dep_start[i]..dep_start[i + 1]]`.
    Listed {
        dep_start: Vec<u32>,
        dependents: Vec<u32>,
    },
    /// A generated ring All-Reduce, run from a few counters (see [`RingProgress`]).
    Ring(RingBlocks),
}

/// Fields are laid out in the order written (`repr(C)`), those every message reads first:
/// with thousands of runners interleaved each cache line of a runner that a message touches
/// is a miss, and Rust's own order had spread them over 14 lines of 18.
///
/// A ring job's message reads `ring` and the first words of `record` (two lines with the host
/// application's first words), nothing else.
#[repr(C)]
pub(super) struct JobState {
    pub(super) ring: RingProgress,
    pub(super) record: JobRecord,
    pub(super) steps: Steps,
    pub(super) lo: usize,
    /// Steps in the job's list.
    pub(super) total: usize,
    /// How many steps the window holds (it grows past this only to find the receive step of
    /// an arriving message); `usize::MAX` for listed programs, which are held whole.
    pub(super) window: usize,
    /// `job.elem_bytes`, `job.reduce_rate`, `job.data` and `job.class`, read by every message,
    /// kept here beside the rest of what a message reads (`job` itself is read-only).
    pub(super) elem_bytes: u64,
    pub(super) reduce_rate: Option<Bandwidth>,
    pub(super) data: Option<DataSpec>,
    pub(super) class: ClassId,
    pub(super) started: bool,
    /// Whether step completion times go to the record: for the runner's first jobs (those a
    /// timeline can show) and of a streamed job only on some ranks (see
    /// [`STREAMED_TIMED_RANKS`]).
    pub(super) keep_times: bool,
    pub(super) buffer: Option<Vec<u8>>,
    /// The last two `(peer rank, channel)` -> index into `chans` looked up when steps entered
    /// the window (see [`JobState::chan_of`]); `usize::MAX` for none.
    pub(super) chan_memo: [(usize, u32, u32); 2],
    /// Held inline up to two (a ring's): one pointer less to chase per message.
    pub(super) chans: Chans,
    /// The window: the run-time state of steps `lo .. lo + rt.len()`. Every step before `lo`
    /// has completed; steps after the window have not been looked at yet.
    pub(super) rt: Window,
    /// `(peer host, channel)` -> index into `chans`, sorted by key: looked up at every arriving
    /// message, so one contiguous array searched by halves (a B-tree's nodes were a cache miss
    /// each with a thousand ranks' runners interleaved).
    pub(super) chan_index: ChanIndex,
    /// Shared by the jobs of one shape (a training rank's thousands of equal All-Reduces).
    pub(super) job: Arc<Job>,
}

/// A runner's jobs: the first held inline and first of all (`repr(C)`), so that a message of
/// the first job (a ring's, typically the only one) reads the job at the start of the runner
/// and no length or inline-or-heap word at its end (a `SmallVec`'s capacity sat 1.3 KB
/// further, one more cache line per message). Without jobs `first` is an empty placeholder
/// (`len` 0), which is never a ring, so the ring's check needs no length.
///
/// The other jobs are [`Slot`]s: a rank of a large training run takes part in thousands of
/// collectives but runs a few at a time, so only those hold a run-time state.
#[repr(C)]
pub(super) struct Jobs {
    pub(super) first: JobState,
    pub(super) rest: Vec<Slot>,
    pub(super) len: usize,
    /// Jobs `0..timed` keep their step completion times (see [`JobState::keep_times`]).
    pub(super) timed: usize,
}

/// A job after the first: its description until it starts or a message for it arrives, its
/// run-time state while it runs, its description and record once it has finished.
pub(super) enum Slot {
    Waiting(Arc<Job>),
    Running(Box<JobState>),
    Finished(Box<(Arc<Job>, JobRecord)>),
}

/// The record of a job that has not started.
static NOT_STARTED: JobRecord = JobRecord {
    bytes_sent: 0,
    steps_done: 0,
    steps: Vec::new(),
    started_at: None,
    finished_at: None,
    buffer: None,
};

impl Jobs {
    /// The jobs, of which `0..timed` keep step completion times.
    pub(super) fn new(jobs: Vec<Arc<Job>>, timed: usize) -> Jobs {
        let len = jobs.len();
        let mut it = jobs.into_iter();
        let first = match it.next() {
            Some(job) => JobState::new(job, timed > 0),
            None => {
                let empty = ChunkRange::new(0, 0);
                let job = Job {
                    program: Program {
                        rank: 0,
                        buffer_len: 0,
                        input: empty,
                        output: empty,
                        steps: Vec::new(),
                    },
                    start: JobStart::OnDemand,
                    elem_bytes: 1,
                    data: None,
                    reduce_rate: None,
                    hosts: None,
                    class: 0,
                    stream: None,
                };
                JobState::new(Arc::new(job), false)
            }
        };
        Jobs {
            first,
            rest: it.map(Slot::Waiting).collect(),
            len,
            timed,
        }
    }

    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// Job `j`'s description, in any state.
    pub(super) fn job(&self, j: usize) -> Option<&Job> {
        match j {
            _ if j >= self.len => None,
            0 => Some(&self.first.job),
            _ => self.rest.get(j - 1).map(|s| match s {
                Slot::Waiting(job) => &**job,
                Slot::Running(js) => &*js.job,
                Slot::Finished(f) => &*f.0,
            }),
        }
    }

    /// Job `j`'s run-time state, built if the job has not started; `None` once it has
    /// finished (nothing more runs or arrives in it).
    pub(super) fn get_mut(&mut self, j: usize) -> Option<&mut JobState> {
        if j >= self.len {
            return None;
        }
        if j == 0 {
            return Some(&mut self.first);
        }
        let keep = j < self.timed;
        let slot = self.rest.get_mut(j - 1)?;
        if let Slot::Waiting(job) = slot {
            *slot = Slot::Running(Box::new(JobState::new(job.clone(), keep)));
        }
        match slot {
            Slot::Running(js) => Some(js),
            Slot::Waiting(_) | Slot::Finished(_) => None,
        }
    }

    /// Drops finished job `j`'s run-time state, keeping its description and record.
    pub(super) fn retire(&mut self, j: usize) {
        let Some(slot) = j.checked_sub(1).and_then(|k| self.rest.get_mut(k)) else {
            return;
        };
        if let Slot::Running(js) = slot {
            let record = std::mem::take(&mut js.record);
            *slot = Slot::Finished(Box::new((js.job.clone(), record)));
        }
    }

    /// Job `j` if it is a ring (see [`RingProgress`]): the first job is checked without reading
    /// anything but itself.
    #[inline]
    pub(super) fn ring_mut(&mut self, j: usize) -> Option<&mut JobState> {
        let js = if j == 0 {
            &mut self.first
        } else {
            self.get_mut(j)?
        };
        (js.ring.len > 0).then_some(js)
    }

    /// Every job's record, in job order.
    pub(super) fn records(&self) -> impl Iterator<Item = &JobRecord> {
        let rest = self.rest.iter().map(|s| match s {
            Slot::Waiting(_) => &NOT_STARTED,
            Slot::Running(js) => &js.record,
            Slot::Finished(f) => &f.1,
        });
        std::iter::once(&self.first.record)
            .chain(rest)
            .take(self.len)
    }

    pub(super) fn into_records(self) -> Vec<JobRecord> {
        let len = self.len;
        let rest = self.rest.into_iter().map(|s| match s {
            Slot::Waiting(_) => JobRecord::default(),
            Slot::Running(js) => js.record,
            Slot::Finished(f) => f.1,
        });
        std::iter::once(self.first.record)
            .chain(rest)
            .take(len)
            .collect()
    }
}

/// Steps in job's list (listed or generated).
pub(super) fn step_total(job: &Job) -> usize {
    match job.stream {
        Some(g) => g.len(),
        None => job.program.steps.len(),
    }
}

/// What step `i` of `job` does (listed or generated).
pub(super) fn step_kind(job: &Job, i: usize) -> Option<StepKind> {
    match job.stream {
        Some(g) => (i < g.len()).then(|| g.kind(i)),
        None => job.program.steps.get(i).map(|s| s.kind),
    }
}

impl JobState {
    /// A job's state before it starts: a ring's counters, or a listed program's dependency
    /// lists, channels and first window.
    pub(super) fn new(job: Arc<Job>, timed: bool) -> JobState {
        let (ring, steps, total, window, channels, keep_times) = match job.stream {
            Some(g) => {
                let StepGen::RingAllReduce(r) = g;
                let (mut progress, blocks) = RingProgress::start(&job, r, g.len());
                let keep = timed && progress.has(RingProgress::KEEP_TIMES);
                progress.set(RingProgress::KEEP_TIMES, keep);
                // No window and no channels: the counters are the whole state.
                (progress, Steps::Ring(blocks), g.len(), 0, Vec::new(), keep)
            }
            None => {
                let (listed, channels) = listed_steps(&job.program);
                let n = job.program.steps.len();
                let progress = RingProgress::default();
                (progress, listed, n, usize::MAX, channels, timed)
            }
        };
        let (chans, chan_index) = channels_of(&job, &channels);
        let mut js = JobState {
            ring,
            elem_bytes: job.elem_bytes,
            reduce_rate: job.reduce_rate,
            data: job.data,
            class: job.class,
            steps,
            total,
            rt: Window::default(),
            lo: 0,
            window,
            chans,
            chan_index,
            chan_memo: [(usize::MAX, 0, 0); 2],
            started: false,
            keep_times,
            buffer: None,
            record: JobRecord::default(),
            job,
        };
        js.fill(&mut Vec::new());
        js
    }

    pub(super) fn finished(&self) -> bool {
        self.started && self.record.steps_done == self.total
    }

    /// What step `i` does.
    pub(super) fn kind(&self, i: usize) -> Option<StepKind> {
        step_kind(&self.job, i)
    }

    /// Marks step `s` done, queues in `work` the dependents it releases, and slides the
    /// window past the steps completed at its front.
    pub(super) fn complete(&mut self, s: u32, now: Time, work: &mut Vec<u32>) {
        let r = &mut self.ring;
        if r.len > 0 {
            // Only a reduction's timer completes a ring step here: Reduce-Scatter receives
            // complete in list order (one engine), so counting them is enough.
            if s < r.half() && s % 2 == 1 && s / 2 == r.rs_done && s < r.next_apply {
                r.rs_done += 1;
                self.note_done(s, now);
            }
            return;
        }
        if !self.open(s as usize) {
            return;
        }
        self.note_done(s, now);
        self.rt(s).done = true;
        let hi = self.lo + self.rt.len();
        let (a, b) = match &self.steps {
            Steps::Listed { dep_start, .. } => (
                dep_start[s as usize] as usize,
                dep_start[s as usize + 1] as usize,
            ),
            Steps::Ring(_) => (0, 0),
        };
        for k in a..b {
            let d = match &self.steps {
                Steps::Listed { dependents, .. } => dependents[k],
                Steps::Ring(_) => break,
            };
            self.release(d as usize, hi, work);
        }
        if s as usize == self.lo {
            while self.rt.front().is_some_and(|r| r.done) {
                self.rt.pop_front();
                self.lo += 1;
            }
            self.fill(work);
        }
    }

    /// Counts step `s` as completed at `now` (and keeps the time, see [`MAX_STEP_TIMES`]).
    #[inline]
    pub(super) fn note_done(&mut self, s: u32, now: Time) {
        self.record.steps_done += 1;
        // The ring's copy of `keep_times`: it is on the line a ring's message reads.
        let keep = if self.ring.len > 0 {
            self.ring.has(RingProgress::KEEP_TIMES)
        } else {
            self.keep_times
        };
        if keep && self.record.steps.len() < MAX_STEP_TIMES {
            self.record.steps.push((s, now));
        }
    }
}

/// What a job's steps use of their runner besides the job.
pub(super) struct RankCtx<'a> {
    /// Where errors go.
    pub(super) errors: &'a mut Vec<ExecError>,
    /// When the rank's reduction engine is free again.
    pub(super) reduce_busy_until: &'a mut Time,
    /// The runner's rank, for errors (by reference: see [`push_error`]).
    pub(super) rank: &'a u32,
}

/// What a receive step expects of its message.
#[derive(Clone, Copy, Debug)]
pub(super) struct Expect {
    /// Bytes.
    pub(super) len: u64,
    /// Whether the step reduces the message into its chunk (else writes it over).
    pub(super) reduce: bool,
    /// Whether the job's reductions take time (it has a `reduce_rate`).
    pub(super) timed: bool,
}

/// The channel a step sends or receives on (0 for local copies).
fn channel_of(kind: &StepKind) -> u32 {
    kind.channel().map_or(0, |(_, c)| c)
}

impl JobState {
    /// The bytes send step `s` posts, read from the buffer now (data mode; `None` otherwise).
    pub(super) fn send_payload(&self, s: u32) -> Option<Bytes> {
        let b = self.buffer.as_ref()?;
        let Some(StepKind::Send { chunk, .. }) = self.kind(s as usize) else {
            return None;
        };
        let es = self.elem_bytes as usize;
        Some(Bytes::copy_from_slice(
            &b[chunk.offset * es..(chunk.offset + chunk.len) * es],
        ))
    }

    /// Posts send step `s`'s message `(len, payload)` to `(host, channel, class)`: one RDMA
    /// WRITE per [`MAX_WRITE`] bytes, which the receiver reassembles.
    #[inline(always)]
    pub(super) fn post(
        &mut self,
        j: usize,
        s: u32,
        (host, channel, class): (u32, u32, ClassId),
        (len, payload): (u64, Option<Bytes>),
        api: &mut dyn Transport,
        cx: &mut RankCtx<'_>,
    ) {
        let imm = imm_for(j, channel);
        self.record.bytes_sent += len;
        let mut off = 0u64;
        loop {
            let piece = (len - off).min(MAX_WRITE);
            let data = payload
                .as_ref()
                .map(|b: &Bytes| b.slice(off as usize..(off + piece) as usize));
            if !api.post_send_in(host, imm as u64, piece, data, class) {
                let peer = self.kind(s as usize).and_then(|k| k.peer()).unwrap_or(0);
                push_error(cx.errors, cx.rank, |rank| ExecError::NoRoute {
                    rank,
                    job: j,
                    peer,
                });
                break;
            }
            off += piece;
            if off >= len {
                break;
            }
        }
    }

    /// Receive step `s` takes its message `(len, payload)`: a length other than expected is an
    /// error, real data is written over or reduced into the step's chunk, and a reduction that
    /// takes time starts on the rank's engine. Returns whether the step completes now (else
    /// its reduction's timer completes it).
    #[inline(always)]
    pub(super) fn receive(
        &mut self,
        j: usize,
        s: u32,
        (len, payload): (u64, Option<Bytes>),
        expect: Expect,
        api: &mut dyn Transport,
        cx: &mut RankCtx<'_>,
    ) -> bool {
        if len != expect.len {
            let kind = self.kind(s as usize);
            let peer = kind.and_then(|k| k.peer()).unwrap_or(0);
            let channel = kind.as_ref().map_or(0, channel_of);
            push_error(cx.errors, cx.rank, |rank| ExecError::LengthMismatch {
                rank,
                job: j,
                peer,
                channel,
                got: len,
                expected: expect.len,
            });
        } else if let Some(bytes) = payload {
            self.apply(s, expect.reduce, &bytes);
        }
        // The values are final now; what costs time is when dependents may start.
        if expect.timed && expect.reduce && len > 0 {
            if let Some(bw) = self.reduce_rate {
                let token = Timer::ReduceDone { job: j, step: s }.token();
                start_reduction(cx.reduce_busy_until, bw, len, token, api);
                return false;
            }
        }
        true
    }

    /// Writes `bytes` over receive step `s`'s chunk, or reduces them into it.
    fn apply(&mut self, s: u32, reduce: bool, bytes: &[u8]) {
        let (Some(d), Some(StepKind::Recv { chunk, .. })) = (self.data, self.kind(s as usize))
        else {
            return;
        };
        let es = self.elem_bytes as usize;
        if let Some(buf) = self.buffer.as_mut() {
            let dst = &mut buf[chunk.offset * es..(chunk.offset + chunk.len) * es];
            if bytes.len() == dst.len() {
                data::apply(d.dtype, d.op, reduce, dst, bytes);
            }
        }
    }
}

/// Records the error `e(rank)`. Out of line, so that the rank, at the far end of the runner,
/// is read only when there is an error: passed by reference into the ring's inlined loop, its
/// load was hoisted to the top of every message's path, a cache line (and a miss) of its own.
/// (`black_box`: otherwise the optimizer passes the rank by value, and the caller reads it.)
#[cold]
#[inline(never)]
pub(super) fn push_error(
    errors: &mut Vec<ExecError>,
    rank: &u32,
    e: impl FnOnce(u32) -> ExecError,
) {
    errors.push(e(*std::hint::black_box(rank)));
}

/// Starts a reduction of `len` bytes on the rank's engine, busy until `busy`, and sets the
/// timer `token` for its end. Out of line for the same reason as [`push_error`]: `busy` is at
/// the far end of the runner, and inlined, its load was hoisted into every ring message's
/// path, reductions timed or not.
#[inline(never)]
pub(super) fn start_reduction(
    busy: &mut Time,
    bw: Bandwidth,
    len: u64,
    token: u64,
    api: &mut dyn Transport,
) {
    let start = (*busy).max(api.now());
    let done = start.add(Rate::new(bw).serialization_time(len));
    *busy = done;
    api.set_timer(done, token);
}

/// The payload of a message that arrived in several writes (see [`MAX_WRITE`]): its pieces
/// (data mode) joined into one buffer of `total` bytes, `None` in timing mode. Empties `pieces`.
pub(super) fn join_pieces(pieces: &mut Vec<Bytes>, total: u64) -> Option<Bytes> {
    let data = match pieces.len() {
        0 => None,
        1 => pieces.pop(),
        _ => {
            let mut v = Vec::with_capacity(total as usize);
            for b in pieces.drain(..) {
                v.extend_from_slice(&b);
            }
            Some(Bytes::from(v))
        }
    };
    pieces.clear();
    data
}
