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
//! Messages carry `(job, channel)` in the RDMA immediate, built by [`AppId::Collectives`] (which
//! owns the bits that keep applications sharing a host apart): the job in bits 20..31 and the
//! channel in bits 0..20; hence at most [`MAX_JOBS`] jobs and [`MAX_CHANNELS`] channels. The
//! runner's timer tokens are [`AppId::Collectives`] tokens too.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use bytes::Bytes;
use fabemu_fabric::link::Rate;
use fabemu_fabric::transport::{AppId, Application, ClassId, Completion, Transport};
use fabemu_fabric::units::{Bandwidth, Time};

use crate::data::{self, DataType, ReduceOp};
use crate::program::{Program, StepKind};

/// Largest RDMA WRITE the executor posts: a step's message beyond it goes as several writes on
/// the same queue pair (RoCE's DMA length is 32 bits; real stacks cut far smaller), which the
/// receiver puts back together before the step applies it.
pub const MAX_WRITE: u64 = 1 << 30;

/// In a timer token's argument: a reduction finished (job in bits 24..35, step in bits 0..24);
/// without it the argument is a job to begin.
const REDUCE_DONE: u64 = 1 << 39;

/// Jobs one runner can hold (11 bits of the immediate).
pub const MAX_JOBS: usize = 1 << 11;
/// Channels per job (20 bits of the immediate).
pub const MAX_CHANNELS: u32 = 1 << 20;
/// The immediate (and tag) of job `job`'s messages on `channel`.
pub const fn imm_for(job: usize, channel: u32) -> u32 {
    AppId::Collectives.imm(((job as u32) << 20) | (channel & (MAX_CHANNELS - 1)))
}

/// The channel a step sends or receives on (0 for local copies).
fn channel_of(kind: &StepKind) -> u32 {
    kind.channel().map_or(0, |(_, c)| c)
}

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
}

impl Job {
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
}

/// What a rank did in one job.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct JobRecord {
    /// When the job started here.
    pub started_at: Option<Time>,
    /// When its last step completed here.
    pub finished_at: Option<Time>,
    /// Payload bytes this rank posted.
    pub bytes_sent: u64,
    /// Steps completed (equal to the program's length when finished).
    pub steps_done: usize,
    /// The final buffer (data mode).
    pub buffer: Option<Vec<u8>>,
    /// When each step completed, as `(step index, time)` in completion order (for timelines);
    /// at most [`MAX_STEP_TIMES`] per job.
    pub steps: Vec<(u32, Time)>,
}

/// Step completion times kept per job and rank (enough for any timeline one can look at).
pub const MAX_STEP_TIMES: usize = 1 << 16;

#[derive(Debug, Default)]
struct Chan {
    /// The peer host and channel number (its key in `chan_index`).
    host: u32,
    channel: u32,
    /// Send steps in list order, and how many have been posted.
    sends: Vec<u32>,
    sent: usize,
    /// Receive steps in list order, and how many have completed.
    recvs: Vec<u32>,
    received: usize,
    /// Messages that arrived before their receive step was ready.
    arrived: VecDeque<(u64, Option<Bytes>)>,
    /// Bytes and pieces of a message still arriving in several writes (see [`MAX_WRITE`]).
    partial_len: u64,
    partial: Vec<Bytes>,
}

/// What the executor reads and writes of a step while it runs, in one record: with a thousand
/// ranks' runners interleaved, every separate per-step array was a cache miss per message.
/// The program's [`Step`](crate::program::Step) itself is read only for data (chunk offsets)
/// and errors.
#[derive(Clone, Copy, Debug, Default)]
struct StepRt {
    /// Bytes a send or receive moves (chunk length x element size); 0 for a copy.
    len: u64,
    /// Dependencies not yet completed.
    pending: u32,
    /// Its dependents are `dependents[dep_start..]` up to the next step's `dep_start` (the
    /// end of `dependents` for the last step).
    dep_start: u32,
    /// Index into `chans` of a send or receive; `u32::MAX` for a copy.
    chan: u32,
    /// Its dependencies are done (a send or receive then waits for its turn on the channel).
    ready: bool,
    /// A receive that reduces.
    reduce: bool,
}

struct JobState {
    job: Job,
    /// Per step.
    rt: Vec<StepRt>,
    /// Dependents of every step (see [`StepRt::dep_start`]).
    dependents: Vec<u32>,
    chans: Vec<Chan>,
    /// `(peer host, channel)` -> index into `chans`, sorted by key: looked up at every arriving
    /// message, so one contiguous array searched by halves (a B-tree's nodes were a cache miss
    /// each with a thousand ranks' runners interleaved).
    chan_index: Vec<((u32, u32), u32)>,
    started: bool,
    buffer: Option<Vec<u8>>,
    record: JobRecord,
}

impl JobState {
    fn new(job: Job) -> JobState {
        let steps = &job.program.steps;
        let n = steps.len();
        let mut rt = vec![StepRt::default(); n];
        let mut counts = vec![0u32; n + 1];
        for s in steps {
            rt[s.id.0].pending = s.deps.len() as u32;
            for d in &s.deps {
                counts[d.0 + 1] += 1;
            }
        }
        for i in 0..n {
            counts[i + 1] += counts[i];
        }
        for (i, r) in rt.iter_mut().enumerate() {
            r.dep_start = counts[i];
        }
        let mut dependents = vec![0u32; counts[n] as usize];
        let mut fill = counts;
        for s in steps {
            for d in &s.deps {
                dependents[fill[d.0] as usize] = s.id.0 as u32;
                fill[d.0] += 1;
            }
        }
        let mut chans: Vec<Chan> = Vec::new();
        let mut chan_index = BTreeMap::new();
        for (i, s) in steps.iter().enumerate() {
            rt[i].chan = u32::MAX;
            let Some(peer) = s.kind.peer() else { continue };
            // Keyed by host: that is what an arriving message names.
            let key = (job.host_of(peer), channel_of(&s.kind));
            let c = *chan_index.entry(key).or_insert_with(|| {
                chans.push(Chan {
                    host: key.0,
                    channel: key.1,
                    ..Chan::default()
                });
                (chans.len() - 1) as u32
            });
            rt[i].chan = c;
            match s.kind {
                StepKind::Send { chunk, .. } => {
                    rt[i].len = chunk.len as u64 * job.elem_bytes;
                    chans[c as usize].sends.push(i as u32);
                }
                StepKind::Recv { chunk, reduce, .. } => {
                    rt[i].len = chunk.len as u64 * job.elem_bytes;
                    rt[i].reduce = reduce;
                    chans[c as usize].recvs.push(i as u32);
                }
                StepKind::Copy { .. } => {}
            }
        }
        JobState {
            rt,
            dependents,
            chans,
            chan_index: chan_index.into_iter().collect(),
            started: false,
            buffer: None,
            record: JobRecord::default(),
            job,
        }
    }

    fn finished(&self) -> bool {
        self.started && self.record.steps_done == self.job.program.steps.len()
    }
}

/// Runs a rank's collective jobs on its host (see the module doc).
pub struct CollectiveRunner {
    rank: u32,
    jobs: Vec<JobState>,
    /// Steps ready to run, of the job being advanced.
    work: Vec<u32>,
    /// Problems met; non-empty means the run is invalid.
    pub errors: Vec<ExecError>,
    /// When the rank's reduction engine is free again.
    reduce_busy_until: Time,
    /// Jobs that finished here and nobody has taken yet ([`CollectiveRunner::take_finished`]).
    finished: Vec<usize>,
}

impl CollectiveRunner {
    /// A runner for `rank` with `jobs` (at most [`MAX_JOBS`]; extra jobs are refused by the
    /// caller's validation, and ignored here).
    pub fn new(rank: u32, mut jobs: Vec<Job>) -> CollectiveRunner {
        jobs.truncate(MAX_JOBS);
        CollectiveRunner {
            rank,
            jobs: jobs.into_iter().map(JobState::new).collect(),
            work: Vec::new(),
            errors: Vec::new(),
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

    /// Whether job `job` has finished on this rank.
    pub fn job_finished(&self, job: usize) -> bool {
        self.jobs.get(job).is_some_and(JobState::finished)
    }

    /// What happened in each job, in job order.
    pub fn records(&self) -> impl Iterator<Item = &JobRecord> {
        self.jobs.iter().map(|j| &j.record)
    }

    /// Takes the records out (with the final buffers).
    pub fn into_records(self) -> Vec<JobRecord> {
        self.jobs.into_iter().map(|j| j.record).collect()
    }

    /// Job `job`'s program on this rank.
    pub fn program(&self, job: usize) -> Option<&Program> {
        self.jobs.get(job).map(|j| &j.job.program)
    }

    /// Whether every job has finished on this rank.
    pub fn all_finished(&self) -> bool {
        self.jobs.iter().all(JobState::finished)
    }

    fn begin(&mut self, j: usize, api: &mut dyn Transport) {
        let js = &mut self.jobs[j];
        let rank = js.job.program.rank;
        if js.started {
            return;
        }
        js.started = true;
        js.record.started_at = Some(api.now());
        if let Some(d) = js.job.data {
            js.buffer = Some(data::initial_buffer(d.dtype, rank, &js.job.program));
        }
        self.work.clear();
        self.work.extend(
            js.rt
                .iter()
                .enumerate()
                .filter(|(_, r)| r.pending == 0)
                .map(|(i, _)| i as u32)
                .rev(),
        );
        self.advance(j, api);
    }

    /// Runs ready steps of job `j` until nothing more can run now.
    fn advance(&mut self, j: usize, api: &mut dyn Transport) {
        while let Some(s) = self.work.pop() {
            let js = &mut self.jobs[j];
            let c = js.rt[s as usize].chan;
            if c != u32::MAX {
                // A send or receive: its turn on the channel comes in list order.
                js.rt[s as usize].ready = true;
                self.pump(j, c as usize, api);
                continue;
            }
            match js.job.program.steps[s as usize].kind {
                StepKind::Copy { src, dst, reduce } => {
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
                    self.complete(j, s, api.now());
                }
                // Sends and receives have a channel (above).
                StepKind::Send { .. } | StepKind::Recv { .. } => {}
            }
        }
        let js = &mut self.jobs[j];
        if js.finished() && js.record.finished_at.is_none() {
            js.record.finished_at = Some(api.now());
            js.record.buffer = js.buffer.take();
            self.finished.push(j);
            let next = j + 1;
            if next < self.jobs.len() && self.jobs[next].job.start == JobStart::AfterPrevious {
                self.begin(next, api);
            }
        }
    }

    /// Posts the channel's ready sends and applies its ready receives, in list order.
    fn pump(&mut self, j: usize, c: usize, api: &mut dyn Transport) {
        loop {
            let js = &mut self.jobs[j];
            let ch = &js.chans[c];
            let Some(&s) = ch.sends.get(ch.sent) else {
                break;
            };
            let step = js.rt[s as usize];
            if !step.ready {
                break;
            }
            let (host, imm) = (ch.host, imm_for(j, ch.channel));
            js.chans[c].sent += 1;
            let len = step.len;
            let payload = js.buffer.as_ref().and_then(|b| {
                let StepKind::Send { chunk, .. } = js.job.program.steps[s as usize].kind else {
                    return None;
                };
                let es = js.job.elem_bytes as usize;
                Some(Bytes::copy_from_slice(
                    &b[chunk.offset * es..(chunk.offset + chunk.len) * es],
                ))
            });
            js.record.bytes_sent += len;
            // One RDMA WRITE per MAX_WRITE bytes (the receiver reassembles them).
            let mut off = 0u64;
            loop {
                let piece = (len - off).min(MAX_WRITE);
                let data = payload
                    .as_ref()
                    .map(|b| b.slice(off as usize..(off + piece) as usize));
                if !api.post_send_in(host, imm as u64, piece, data, js.job.class) {
                    let peer = js.job.program.steps[s as usize].kind.peer().unwrap_or(0);
                    self.errors.push(ExecError::NoRoute {
                        rank: self.rank,
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
            self.complete(j, s, api.now());
        }
        loop {
            let js = &mut self.jobs[j];
            let ch = &js.chans[c];
            let Some(&s) = ch.recvs.get(ch.received) else {
                break;
            };
            let step = js.rt[s as usize];
            if !step.ready || ch.arrived.is_empty() {
                break;
            }
            let Some((len, payload)) = js.chans[c].arrived.pop_front() else {
                break;
            };
            js.chans[c].received += 1;
            let expected = step.len;
            if len != expected {
                let kind = js.job.program.steps[s as usize].kind;
                self.errors.push(ExecError::LengthMismatch {
                    rank: self.rank,
                    job: j,
                    peer: kind.peer().unwrap_or(0),
                    channel: channel_of(&kind),
                    got: len,
                    expected,
                });
            } else if let (Some(buf), Some(d), Some(bytes)) =
                (js.buffer.as_mut(), js.job.data, payload)
            {
                if let StepKind::Recv { chunk, .. } = js.job.program.steps[s as usize].kind {
                    let es = js.job.elem_bytes as usize;
                    let dst = &mut buf[chunk.offset * es..(chunk.offset + chunk.len) * es];
                    if bytes.len() == dst.len() {
                        data::apply(d.dtype, d.op, step.reduce, dst, &bytes);
                    }
                }
            }
            // The values are final now; what costs time is when dependents may start.
            if let Some(bw) = js.job.reduce_rate.filter(|_| step.reduce && len > 0) {
                let now = api.now();
                let start = self.reduce_busy_until.max(now);
                let done = start.add(Rate::new(bw).serialization_time(len));
                self.reduce_busy_until = done;
                let token = AppId::Collectives.token(REDUCE_DONE | (j as u64) << 24 | u64::from(s));
                api.set_timer(done, token);
                continue;
            }
            self.complete(j, s, api.now());
        }
    }

    /// Marks step `s` of job `j` done and queues the dependents it releases.
    fn complete(&mut self, j: usize, s: u32, now: Time) {
        let js = &mut self.jobs[j];
        js.record.steps_done += 1;
        if js.record.steps.len() < MAX_STEP_TIMES {
            js.record.steps.push((s, now));
        }
        let a = js.rt[s as usize].dep_start as usize;
        let b = js
            .rt
            .get(s as usize + 1)
            .map_or(js.dependents.len(), |r| r.dep_start as usize);
        for &d in &js.dependents[a..b] {
            let p = &mut js.rt[d as usize].pending;
            *p -= 1;
            if *p == 0 {
                self.work.push(d);
            }
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
        let j = ((imm >> 20) & (MAX_JOBS as u32 - 1)) as usize;
        let channel = imm & (MAX_CHANNELS - 1);
        let Some(c) = self.jobs.get(j).and_then(|js| {
            let i = js
                .chan_index
                .binary_search_by_key(&(src, channel), |&(k, _)| k)
                .ok()?;
            Some(js.chan_index[i].1)
        }) else {
            self.errors.push(ExecError::Unexpected {
                rank: self.rank,
                peer: src,
                job: j,
                channel,
            });
            return;
        };
        let js = &mut self.jobs[j];
        let ch = &mut js.chans[c as usize];
        // The logical message this write belongs to is the next one not yet assembled; its
        // length is that receive step's chunk.
        let next = ch.received + ch.arrived.len();
        let expected = ch.recvs.get(next).map(|&r| js.rt[r as usize].len);
        ch.partial_len += len;
        if let Some(p) = payload {
            ch.partial.push(p);
        }
        // Complete (or too long, or unmatched: let the receive step report the mismatch).
        if expected.is_none_or(|e| ch.partial_len >= e) {
            let total = std::mem::take(&mut ch.partial_len);
            let data = match ch.partial.len() {
                0 => None,
                1 => ch.partial.pop(),
                _ => {
                    let mut v = Vec::with_capacity(total as usize);
                    for b in ch.partial.drain(..) {
                        v.extend_from_slice(&b);
                    }
                    Some(Bytes::from(v))
                }
            };
            ch.partial.clear();
            ch.arrived.push_back((total, data));
        } else {
            return;
        }
        if self.jobs[j].started {
            self.work.clear();
            self.pump(j, c as usize, api);
            self.advance(j, api);
        }
    }
}

impl Application for CollectiveRunner {
    fn start(&mut self, api: &mut dyn Transport) {
        for j in 0..self.jobs.len() {
            match self.jobs[j].job.start {
                JobStart::At(t) => api.set_timer(t, AppId::Collectives.token(j as u64)),
                JobStart::AfterPrevious if j == 0 => {
                    api.set_timer(Time::ZERO, AppId::Collectives.token(0))
                }
                JobStart::AfterPrevious | JobStart::OnDemand => {}
            }
        }
    }

    fn on_timer(&mut self, token: u64, api: &mut dyn Transport) {
        let (AppId::Collectives, arg) = AppId::of_token(token) else {
            return;
        };
        if arg & REDUCE_DONE != 0 {
            let j = ((arg >> 24) & (MAX_JOBS as u64 - 1)) as usize;
            let s = (arg & ((1 << 24) - 1)) as u32;
            if j < self.jobs.len() {
                self.work.clear();
                self.complete(j, s, api.now());
                self.advance(j, api);
            }
            return;
        }
        let j = arg as usize;
        if j < self.jobs.len() {
            self.begin(j, api);
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
