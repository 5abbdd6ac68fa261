//! The program executor: runs a rank's collective programs on its host's NIC.
//!
//! A [`CollectiveRunner`] is a host [`Application`]. It holds one [`Job`] per collective of the
//! workload, each with this rank's [`Program`], and executes the DAG as the network allows:
//!
//! - a step becomes *ready* when its dependencies have completed;
//! - a ready `Copy` runs at once;
//! - a ready `Send` is posted to the NIC (an RDMA WRITE with immediate) when every earlier send
//!   on its `(peer, channel)` is posted, since channels are FIFO in program order. The payload is
//!   read from the buffer at post time, as NCCL copies into its staging FIFO, so the step
//!   completes when posted; the RC transport then guarantees delivery;
//! - a ready `Recv` completes when the next message of its `(peer, channel)` has arrived: the
//!   data is written over or reduced into its chunk. Messages that arrive before their step is
//!   ready (a faster peer, a job not started yet here) wait in the channel's queue.
//!
//! Reductions take no simulated time unless the job has a `reduce_rate`: then a reduced
//! message's step completes when the rank's reduction engine (one per rank, reductions one
//! after another) has gone through its bytes at that rate. Values are written at once either
//! way; only when dependent steps may start changes. A job starts at its
//! [`JobStart::At`] time, or, with [`JobStart::AfterPrevious`], when this rank has finished the
//! previous job (stream order, as NCCL runs consecutive collectives; there is no barrier). The
//! rank's finish time is when its last step completed.
//!
//! ## The window, and the ring's counters
//!
//! A job's steps either are listed in its [`Program`] or are generated on demand by a
//! [`StepGen`] ([`Job::stream`]; a flat ring All-Reduce, whose 8192-rank program would be
//! 268 M steps). A listed program runs through a *window* of run-time step records (held
//! whole): a step entering it counts its dependencies that are still open; a completing step
//! releases its dependents; when the oldest step completes the window slides. Channels keep
//! the window's pending sends and receives.
//!
//! A generated ring holds no step records at all: its structure makes what may run next a
//! comparison of a few counters (the next send, the next receive, the Reduce-Scatter receives
//! completed, the messages waiting; see `RingProgress`), which is all a message reads, in one or
//! two cache lines of the runner. Its memory is O(1) per rank, not O(steps); the unit tests
//! run listed and generated rings side by side over a network that lets ranks drift apart
//! (data, uneven blocks, messages cut into several writes, reduction rates), with identical
//! step times.
//!
//! Messages carry `(job, channel)` in the RDMA immediate under the collectives' prefix
//! ([`APP`]): the job in 20 bits and the channel in 11, hence at most [`MAX_JOBS`] jobs per
//! runner and [`MAX_CHANNELS`] channels per job (`ids.rs` encodes and decodes them, and the
//! runner's timer tokens, in one place).
//!
//! Files: `job.rs` holds a job's run-time state and the send and receive of a message, shared
//! by `window.rs` (listed programs) and `ring.rs` (generated rings); this file the runner.

mod ids;
mod job;
mod ring;
#[cfg(test)]
mod tests;
mod window;

pub use ids::{imm_for, APP, MAX_CHANNELS, MAX_JOBS};

use std::sync::Arc;

use bytes::Bytes;
use fabemu_fabric::transport::{Application, ClassId, Completion, Transport};
use fabemu_fabric::units::{Bandwidth, Time};

use crate::data::{self, DataType, ReduceOp};
use crate::program::{Program, StepGen, StepKind};
use ids::Timer;
use job::{Jobs, RankCtx};
use ring::RingProgress;

/// Largest RDMA WRITE the executor posts: a step's message beyond it goes as several writes on
/// the same queue pair (RoCE's DMA length is 32 bits; real stacks cut far smaller), which the
/// receiver puts back together before the step applies it.
pub const MAX_WRITE: u64 = 1 << 30;

/// When a job starts on a rank.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JobStart {
    /// At this simulated time.
    At(Time),
    /// When the rank has finished the previous job (at time zero for the first).
    AfterPrevious,
    /// When the owner asks ([`CollectiveRunner::start_job`]): a workload scheduler starts the
    /// job once the nodes it depends on have finished on this rank.
    OnDemand,
}

/// Real data for a job: element type and reduction operator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DataSpec {
    /// Element type.
    pub dtype: DataType,
    /// Reduction operator of `Recv { reduce: true }` steps.
    pub op: ReduceOp,
}

/// One collective as this rank runs it.
#[derive(Clone, Debug)]
pub struct Job {
    /// This rank's program.
    pub program: Program,
    /// When it starts.
    pub start: JobStart,
    /// Bytes per element (the message length of a step is `chunk.len x elem_bytes`).
    pub elem_bytes: u64,
    /// Real data (data mode); `None` moves lengths only.
    pub data: Option<DataSpec>,
    /// How fast the rank reduces incoming data into its buffer (bytes of the message per
    /// second, as the NPU's vector units or memory allow); `None`: at once. Reductions of a rank
    /// run one after another on one engine, shared by all its collectives.
    pub reduce_rate: Option<Bandwidth>,
    /// The host of each program rank, when the collective runs on a subset of the hosts (or
    /// in another order); `None`: rank r is host r.
    pub hosts: Option<Arc<[u32]>>,
    /// The traffic class every message of the job is sent in: its number in the run's
    /// `ClassTable` (0: the NIC's default).
    pub class: ClassId,
    /// The steps, generated on demand instead of listed in `program` (whose `steps` are then
    /// empty): see [`StepGen`]. `None`: `program` lists them.
    pub stream: Option<StepGen>,
}

impl Job {
    /// The highest channel the job's steps use (`None` without sends or receives).
    pub fn max_channel(&self) -> Option<u32> {
        match self.stream {
            Some(StepGen::RingAllReduce(r)) => Some(r.channel),
            None => self
                .program
                .steps
                .iter()
                .filter_map(|s| s.kind.channel())
                .map(|(_, c)| c)
                .max(),
        }
    }

    /// The host that program rank `rank` runs on.
    pub fn host_of(&self, rank: usize) -> u32 {
        self.hosts
            .as_ref()
            .map_or(rank as u32, |h| h.get(rank).copied().unwrap_or(u32::MAX))
    }
}

/// Something that went wrong while executing (the run reports it and exits 3).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ExecError {
    /// The NIC has no route to a peer.
    #[error("rank {rank} job {job}: no route to rank {peer}")]
    NoRoute {
        /// This rank.
        rank: u32,
        /// The job.
        job: usize,
        /// The unreachable peer.
        peer: usize,
    },
    /// A message's length differs from its receive step's chunk.
    #[error(
        "rank {rank} job {job}: message from rank {peer} on channel {channel} has {got} bytes, \
         its receive expects {expected}"
    )]
    LengthMismatch {
        /// This rank.
        rank: u32,
        /// The job.
        job: usize,
        /// The sender.
        peer: usize,
        /// The channel.
        channel: u32,
        /// Bytes received.
        got: u64,
        /// Bytes the step expects.
        expected: u64,
    },
    /// A message for a job or channel this rank does not have.
    #[error("rank {rank}: message from rank {peer} for unknown job {job} channel {channel}")]
    Unexpected {
        /// This rank.
        rank: u32,
        /// The sender.
        peer: u32,
        /// The job named by the immediate.
        job: usize,
        /// The channel named by the immediate.
        channel: u32,
    },
    /// A job uses a channel its messages cannot name (see [`MAX_CHANNELS`]).
    #[error("rank {rank} job {job}: channel {channel} is beyond the {MAX_CHANNELS} a job may use")]
    TooManyChannels {
        /// This rank.
        rank: u32,
        /// The job.
        job: usize,
        /// The channel.
        channel: u32,
    },
}

/// What a rank did in one job.
///
/// Laid out in the order written (`repr(C)`): the counters every message moves first, on the
/// line of the job's run-time state that a message reads anyway.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct JobRecord {
    /// Payload bytes this rank posted.
    pub bytes_sent: u64,
    /// Steps completed (equal to the program's length when finished).
    pub steps_done: usize,
    /// When each step completed, as `(step index, time)` in completion order (for timelines);
    /// at most [`MAX_STEP_TIMES`] per job.
    pub steps: Vec<(u32, Time)>,
    /// When the job started here.
    pub started_at: Option<Time>,
    /// When its last step completed here.
    pub finished_at: Option<Time>,
    /// The final buffer (data mode).
    pub buffer: Option<Vec<u8>>,
}

/// Step completion times kept per job and rank (enough for any timeline one can look at).
pub const MAX_STEP_TIMES: usize = 1 << 16;

/// A streamed job keeps step completion times only on its first and last this many ranks:
/// a timeline shows the first ranks, and what their (ring) predecessors posted; keeping every
/// rank's would cost 16 bytes per step again.
pub const STREAMED_TIMED_RANKS: usize = 32;

/// Runs a rank's collective jobs on its host (see the module doc).
///
/// Laid out in the order written (`repr(C)`): the first job's hot fields first, then what every
/// message uses of the runner itself.
#[repr(C)]
pub struct CollectiveRunner {
    /// The first job inline (see [`Jobs`]): with thousands of runners interleaved, each
    /// pointer chased per message is a cache miss.
    jobs: Jobs,
    /// Steps ready to run, of the job being advanced.
    work: Vec<u32>,
    rank: u32,
    /// Problems met; non-empty means the run is invalid.
    pub errors: Vec<ExecError>,
    /// When the rank's reduction engine is free again.
    reduce_busy_until: Time,
    /// Jobs that finished here and nobody has taken yet ([`CollectiveRunner::take_finished`]).
    finished: Vec<usize>,
}

impl CollectiveRunner {
    /// A runner for `rank` with `jobs` (at most [`MAX_JOBS`]; extra jobs are refused by the
    /// caller's validation, and ignored here). A job with a channel of [`MAX_CHANNELS`] or
    /// more, which its messages could not name, is an error of the run from the start
    /// ([`ExecError::TooManyChannels`]; the caller's validation refuses such plans too).
    pub fn new(rank: u32, jobs: Vec<Job>) -> CollectiveRunner {
        CollectiveRunner::shared(rank, jobs.into_iter().map(Arc::new).collect(), MAX_JOBS)
    }

    /// [`new`](Self::new) for jobs that share their descriptions (a training rank's many
    /// collectives of one shape are one `Arc`); jobs `0..timed` keep their step completion
    /// times in their records (for timelines; a record's times cost 16 bytes per step).
    pub fn shared(rank: u32, mut jobs: Vec<Arc<Job>>, timed: usize) -> CollectiveRunner {
        jobs.truncate(MAX_JOBS);
        let errors = jobs
            .iter()
            .enumerate()
            .filter_map(|(job, j)| {
                let channel = j.max_channel()?;
                (channel >= MAX_CHANNELS).then_some(ExecError::TooManyChannels {
                    rank,
                    job,
                    channel,
                })
            })
            .collect();
        CollectiveRunner {
            rank,
            jobs: Jobs::new(jobs, timed),
            work: Vec::new(),
            errors,
            reduce_busy_until: Time::ZERO,
            finished: Vec::new(),
        }
    }

    /// Starts job `job` now (a [`JobStart::OnDemand`] job, typically); nothing happens if it
    /// has started already or does not exist. Messages of the job that arrived before wait in
    /// their channels and are applied as the steps become ready.
    pub fn start_job(&mut self, job: usize, api: &mut dyn Transport) {
        if job < self.jobs.len() {
            self.begin(job, api);
        }
    }

    /// The jobs that finished on this rank since the last call, in the order they finished
    /// (so a scheduler can release what depends on them).
    pub fn take_finished(&mut self) -> Vec<usize> {
        std::mem::take(&mut self.finished)
    }

    /// What happened in each job, in job order.
    pub fn records(&self) -> impl Iterator<Item = &JobRecord> {
        self.jobs.records()
    }

    /// Takes the records out (with the final buffers).
    pub fn into_records(self) -> Vec<JobRecord> {
        self.jobs.into_records()
    }

    /// Job `job`'s program on this rank; without its steps when they are generated on demand
    /// (see [`step_count`](Self::step_count) and [`step_kind`](Self::step_kind)).
    pub fn program(&self, job: usize) -> Option<&Program> {
        self.jobs.job(job).map(|j| &j.program)
    }

    /// Steps in job `job`'s list on this rank (listed or generated).
    pub fn step_count(&self, job: usize) -> usize {
        self.jobs.job(job).map_or(0, job::step_total)
    }

    /// What step `i` of job `job` does on this rank (listed or generated).
    pub fn step_kind(&self, job: usize, i: usize) -> Option<StepKind> {
        self.jobs.job(job).and_then(|j| job::step_kind(j, i))
    }

    fn begin(&mut self, j: usize, api: &mut dyn Transport) {
        let Some(js) = self.jobs.get_mut(j) else {
            return;
        };
        let rank = js.job.program.rank;
        if js.started {
            return;
        }
        js.started = true;
        js.record.started_at = Some(api.now());
        if let Some(d) = js.job.data {
            js.buffer = Some(data::initial_buffer(d.dtype, rank, &js.job.program));
        }
        js.ring.set(RingProgress::STARTED, true);
        js.ring.set(RingProgress::DATA, js.buffer.is_some());
        self.work.clear();
        let lo = js.lo;
        self.work.extend(
            js.rt
                .iter()
                .enumerate()
                .filter(|(_, r)| r.pending == 0 && !r.done)
                .map(|(i, _)| (lo + i) as u32)
                .rev(),
        );
        self.advance(j, api);
    }

    /// Runs ready steps of job `j` until nothing more can run now.
    fn advance(&mut self, j: usize, api: &mut dyn Transport) {
        let CollectiveRunner {
            jobs,
            errors,
            reduce_busy_until,
            rank,
            ..
        } = self;
        if let Some(js) = jobs.ring_mut(j) {
            // A ring has no work list: its counters say what runs (see `RingProgress`).
            let mut cx = RankCtx {
                errors,
                reduce_busy_until,
                rank,
            };
            js.run_ring(j, api, &mut cx);
            if !js.ring.done() {
                return;
            }
        }
        while let Some(s) = self.work.pop() {
            let Some(js) = self.jobs.get_mut(j) else {
                return;
            };
            let c = js.rt(s).chan;
            if c != u32::MAX {
                // A send or receive: its turn on the channel comes in list order.
                js.rt(s).ready = true;
                self.pump(j, c as usize, api);
                continue;
            }
            if let Some(StepKind::Copy { src, dst, reduce }) = js.kind(s as usize) {
                if let Some(buf) = js.buffer.as_mut() {
                    let es = js.job.elem_bytes as usize;
                    let from = src.offset * es..(src.offset + src.len) * es;
                    match js.job.data {
                        // A local reduction (MSCCL's `re`): like a received message's.
                        Some(d) if reduce => {
                            let incoming = buf[from.clone()].to_vec();
                            let to = dst.offset * es..dst.offset * es + incoming.len();
                            data::apply(d.dtype, d.op, true, &mut buf[to], &incoming);
                        }
                        _ => buf.copy_within(from, dst.offset * es),
                    }
                }
            }
            // Sends and receives have a channel (above); a step without one is a copy.
            self.complete(j, s, api.now());
        }
        let Some(js) = self.jobs.get_mut(j) else {
            return;
        };
        if js.finished() && js.record.finished_at.is_none() {
            js.record.finished_at = Some(api.now());
            js.record.buffer = js.buffer.take();
            self.jobs.retire(j);
            self.finished.push(j);
            let next = j + 1;
            if self
                .jobs
                .job(next)
                .is_some_and(|n| n.start == JobStart::AfterPrevious)
            {
                self.begin(next, api);
            }
        }
    }

    /// Posts the channel's ready sends and applies its ready receives, in list order.
    fn pump(&mut self, j: usize, c: usize, api: &mut dyn Transport) {
        let CollectiveRunner {
            rank,
            jobs,
            work,
            errors,
            reduce_busy_until,
            ..
        } = self;
        let Some(js) = jobs.get_mut(j) else {
            return;
        };
        let mut cx = RankCtx {
            errors,
            reduce_busy_until,
            rank,
        };
        js.pump(j, c, api, work, &mut cx);
    }

    /// Marks step `s` of job `j` done, queues the dependents it releases, and slides the
    /// window past the steps completed at its front.
    fn complete(&mut self, j: usize, s: u32, now: Time) {
        if let Some(js) = self.jobs.get_mut(j) {
            js.complete(s, now, &mut self.work);
        }
    }

    fn on_message(
        &mut self,
        src: u32,
        imm: u32,
        len: u64,
        payload: Option<Bytes>,
        api: &mut dyn Transport,
    ) {
        let (j, channel) = ids::job_and_channel(imm);
        if let Some(js) = self.jobs.ring_mut(j) {
            match js.ring_arrival(src, channel, len, payload) {
                Some(true) if js.ring.has(RingProgress::STARTED) => self.advance(j, api),
                Some(_) => {}
                None => self.errors.push(ExecError::Unexpected {
                    rank: self.rank,
                    peer: src,
                    job: j,
                    channel,
                }),
            }
            return;
        }
        let Some(c) = self
            .jobs
            .get_mut(j)
            .and_then(|js| js.index_of((src, channel)))
        else {
            self.errors.push(ExecError::Unexpected {
                rank: self.rank,
                peer: src,
                job: j,
                channel,
            });
            return;
        };
        self.work.clear();
        let c = c as usize;
        let Some(js) = self.jobs.get_mut(j) else {
            return;
        };
        if !js.arrival(c, len, payload, &mut self.work) && self.work.is_empty() {
            return;
        }
        if js.started {
            self.pump(j, c, api);
            self.advance(j, api);
        }
    }
}

impl Application for CollectiveRunner {
    fn start(&mut self, api: &mut dyn Transport) {
        for j in 0..self.jobs.len() {
            let Some(start) = self.jobs.job(j).map(|x| x.start) else {
                continue;
            };
            match start {
                JobStart::At(t) => api.set_timer(t, Timer::Begin(j).token()),
                JobStart::AfterPrevious if j == 0 => {
                    api.set_timer(Time::ZERO, Timer::Begin(0).token())
                }
                JobStart::AfterPrevious | JobStart::OnDemand => {}
            }
        }
    }

    fn on_timer(&mut self, token: u64, api: &mut dyn Transport) {
        match Timer::of_token(token) {
            Some(Timer::ReduceDone { job, step }) if job < self.jobs.len() => {
                self.work.clear();
                self.complete(job, step, api.now());
                self.advance(job, api);
            }
            Some(Timer::Begin(job)) if job < self.jobs.len() => self.begin(job, api),
            _ => {}
        }
    }

    /// Sends complete when posted (see the module doc): acknowledgements are not needed.
    fn wants_send_done(&self, _tag: u64) -> bool {
        false
    }

    fn on_completion(&mut self, completion: Completion, api: &mut dyn Transport) {
        if let Completion::Received {
            src,
            imm,
            len,
            data,
        } = completion
        {
            self.on_message(src, imm, len, data, api);
        }
    }
}
