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
//! completed, the messages waiting; see `RingHot`), which is all a message reads, in one or
//! two cache lines of the runner. Its memory is O(1) per rank, not O(steps); the unit tests
//! run listed and generated rings side by side over a network that lets ranks drift apart
//! (data, uneven blocks, messages cut into several writes, reduction rates), with identical
//! step times.
//!
//! Messages carry `(job, channel)` in the RDMA immediate, built by [`AppId::Collectives`] (which
//! owns the bits that keep applications sharing a host apart): the job in bits 20..31 and the
//! channel in bits 0..20; hence at most [`MAX_JOBS`] jobs and [`MAX_CHANNELS`] channels. The
//! runner's timer tokens are [`AppId::Collectives`] tokens too.

use std::sync::Arc;

use bytes::Bytes;
use fabemu_fabric::deque::HeadDeque;
use fabemu_fabric::link::Rate;
use fabemu_fabric::transport::{AppId, Application, ClassId, Completion, Transport};
use fabemu_fabric::units::{Bandwidth, Time};
use smallvec::SmallVec;

use crate::chunk::ChunkRange;
use crate::data::{self, DataType, ReduceOp};
use crate::program::{Program, RingAllReduce, StepGen, StepKind};

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
    /// The steps, generated on demand instead of listed in `program` (whose `steps` are then
    /// empty): see [`StepGen`]. `None`: `program` lists them.
    pub stream: Option<StepGen>,
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

/// Laid out in the order written (`repr(C)`): what a send reads (the key and the queues)
/// and the partial message's length come first, in one cache line.
#[derive(Debug, Default)]
#[repr(C)]
struct Chan {
    /// The peer host and channel number (its key in `chan_index`).
    host: u32,
    channel: u32,
    /// Send steps of the window not yet posted, in list order (the front is the next one).
    sends: StepList,
    /// Receive steps of the window not yet applied, in list order.
    recvs: StepList,
    /// Bytes and pieces of a message still arriving in several writes (see [`MAX_WRITE`]).
    partial_len: u64,
    partial: Vec<Bytes>,
    /// Messages that arrived before their receive step was ready.
    arrived: Arrivals,
}

/// No step (the end of a [`StepList`]).
const NO_STEP: u32 = u32::MAX;

/// A queue of window steps (a channel's pending sends or receives), linked through their
/// [`StepRt::next`]: with thousands of ranks' runners interleaved, a queue's own buffer was
/// one more cache miss per message, while the steps' records are read anyway. A queued step
/// has not completed, so it stays in the window as long as it is queued.
#[derive(Clone, Copy, Debug)]
struct StepList {
    head: u32,
    tail: u32,
    len: u32,
}

impl Default for StepList {
    fn default() -> StepList {
        StepList {
            head: NO_STEP,
            tail: NO_STEP,
            len: 0,
        }
    }
}

impl StepList {
    fn front(&self) -> Option<u32> {
        (self.len > 0).then_some(self.head)
    }
}

/// A message that arrived: its length and payload (data mode).
type Arrival = (u64, Option<Bytes>);

/// A channel's messages waiting for their receive step, the first held inline: a message
/// usually finds its step ready and is taken at once, so most channels never need the
/// queue's buffer (a cache miss per message with thousands of runners).
type Arrivals = HeadDeque<Arrival>;

/// What the executor reads and writes of a step while it runs, in one record: with a thousand
/// ranks' runners interleaved, every separate per-step array was a cache miss per message.
/// The step's kind itself is read only for data (chunk offsets) and errors.
#[derive(Clone, Copy, Debug, Default)]
struct StepRt {
    /// Bytes a send or receive moves (chunk length x element size); 0 for a copy.
    len: u64,
    /// Dependencies not yet completed.
    pending: u32,
    /// Index into `chans` of a send or receive; `u32::MAX` for a copy.
    chan: u32,
    /// The next step in its channel's queue ([`StepList`]), or [`NO_STEP`].
    next: u32,
    /// Its dependencies are done (a send or receive then waits for its turn on the channel).
    ready: bool,
    /// A receive that reduces.
    reduce: bool,
    /// It has completed.
    done: bool,
}

/// Window records held inline: twice a ring's window (8 steps), so that the records a message
/// reads sit beside the runner instead of behind one more pointer, and the completed front is
/// reclaimed every 8 steps.
const INLINE_WINDOW: usize = 16;

/// A job's window of step records, oldest first: a queue kept in one vector, inline up to
/// [`INLINE_WINDOW`], whose completed front is dropped by moving an index and reclaimed when
/// the vector is full (moving the few live records to the start).
#[derive(Default)]
#[repr(C)]
struct Window {
    /// Records before this one have left the window.
    head: usize,
    recs: SmallVec<[StepRt; INLINE_WINDOW]>,
}

impl Window {
    fn len(&self) -> usize {
        self.recs.len() - self.head
    }

    fn get(&self, at: usize) -> Option<&StepRt> {
        self.recs.get(self.head.checked_add(at)?)
    }

    fn front(&self) -> Option<&StepRt> {
        self.get(0)
    }

    #[inline]
    fn push_back(&mut self, r: StepRt) {
        if self.recs.len() == self.recs.capacity() && self.head > 0 {
            let live = self.recs.len() - self.head;
            self.recs.copy_within(self.head.., 0);
            self.recs.truncate(live);
            self.head = 0;
        }
        self.recs.push(r);
    }

    fn pop_front(&mut self) {
        if self.head < self.recs.len() {
            self.head += 1;
        }
        if self.head == self.recs.len() {
            self.recs.clear();
            self.head = 0;
        }
    }

    fn iter(&self) -> std::slice::Iter<'_, StepRt> {
        self.recs[self.head..].iter()
    }
}

/// Where a job's steps come from.
enum Steps {
    /// The job's program lists them; the dependents of step `i` are
    /// `dependents[dep_start[i]..dep_start[i + 1]]`.
    Listed {
        dep_start: Vec<u32>,
        dependents: Vec<u32>,
    },
    /// A generated ring All-Reduce, run from a few counters (see [`RingHot`]).
    Ring(RingCold),
}

/// A generated ring All-Reduce's run-time state: a few counters instead of the window of step
/// records, the channels' step lists and the channel lookup. A ring's steps are regular
/// enough that what may run next is a comparison: sends go out in list order, each waiting for
/// the receive just before it; receives are applied in list order, a Reduce-Scatter one at
/// once, an All-Gather one once the Reduce-Scatter send that last read its block has gone (see
/// [`RingAllReduce`]). So the next send, the next receive to apply and how many
/// Reduce-Scatter receives have completed (their reductions finish in order, one engine per
/// rank) say everything the window said. Steps run as soon as they can, as in the general
/// case, so posts and completions happen at the same instants (the unit tests run both side
/// by side).
///
/// What a message reads is here, in 40 bytes at the start of the job (`repr(C)`), so that
/// with the host application's first word and the record's two counters (`bytes_sent`,
/// `steps_done`) it is one cache line; the rest ([`RingCold`]) is read only for data, uneven
/// or huge blocks, messages cut into several writes and errors. A job that is not a ring has
/// `len` 0.
#[derive(Clone, Copy, Debug, Default)]
#[repr(C)]
struct RingHot {
    /// The next send to post (even; `len` when all are posted).
    next_send: u32,
    /// The next receive to apply (odd; past `len` when all are applied).
    next_apply: u32,
    /// Reduce-Scatter receives completed (they complete in list order).
    rs_done: u32,
    /// Steps in the list, `4 (p - 1)` (the first All-Gather step is `len / 2`); 0: not a ring.
    len: u32,
    /// Whole messages that arrived and wait for their receive.
    waiting: u32,
    /// Hosts of the next rank (sends go there) and the previous one (receives come from there).
    next_host: u32,
    prev_host: u32,
    /// The channel of every message.
    channel: u32,
    /// Bytes of a block when they fit 32 bits and all blocks are alike; otherwise the
    /// [`UNEVEN`](RingHot::UNEVEN) flag sends every length to [`RingCold::bytes`].
    block_bytes: u32,
    /// The job's traffic class.
    class: ClassId,
    /// The `RingHot::*` flags (bits, not `bool`s: eight bytes fewer, so that the record's
    /// counters fit on the line).
    flags: u8,
}

impl RingHot {
    /// Mirrors of the job's state: started, steps' times kept, reductions take time, data mode.
    const STARTED: u8 = 1;
    const KEEP_TIMES: u8 = 1 << 1;
    const TIMED_REDUCE: u8 = 1 << 2;
    const DATA: u8 = 1 << 3;
    /// Blocks differ in length (`count` is not a multiple of the ranks), or a block has 4 GiB
    /// or more: lengths come from [`RingCold::bytes`].
    const UNEVEN: u8 = 1 << 4;
    /// A message is arriving in several writes (`RingCold::partial_len`).
    const ASSEMBLING: u8 = 1 << 5;
    /// `RingCold::odd` holds arrivals (payloads, lengths other than expected).
    const ODD: u8 = 1 << 6;

    /// Whether flag `f` is set.
    #[inline]
    fn has(&self, f: u8) -> bool {
        self.flags & f != 0
    }

    /// Sets flag `f` to `on`.
    #[inline]
    fn set(&mut self, f: u8, on: bool) {
        if on {
            self.flags |= f;
        } else {
            self.flags &= !f;
        }
    }

    /// The block length of a regular ring (see [`UNEVEN`](RingHot::UNEVEN)).
    #[inline]
    fn block(&self) -> u64 {
        u64::from(self.block_bytes)
    }
}

impl RingHot {
    /// The first All-Gather step.
    #[inline]
    fn half(&self) -> u32 {
        self.len / 2
    }

    /// Whether receive `k` (odd) has completed: a Reduce-Scatter one when its reduction has,
    /// an All-Gather one (which never reduces) when applied.
    #[inline]
    fn recv_done(&self, k: u32) -> bool {
        if k < self.half() {
            k / 2 < self.rs_done
        } else {
            k < self.next_apply
        }
    }

    /// Whether the next receive may be applied (a message for it has arrived): a
    /// Reduce-Scatter receive at once, an All-Gather one `B + 2s + 1` once send `2s` is posted.
    #[inline]
    fn can_apply(&self) -> bool {
        let (k, b) = (self.next_apply, self.half());
        k < self.len && self.waiting > 0 && (k < b || k - b - 1 < self.next_send)
    }

    /// Whether the next send may be posted: the receive before it has completed.
    #[inline]
    fn can_send(&self) -> bool {
        let i = self.next_send;
        i < self.len && (i == 0 || self.recv_done(i - 1))
    }

    /// Whether every step has completed.
    #[inline]
    fn done(&self) -> bool {
        self.next_send >= self.len && self.next_apply >= self.len && 2 * self.rs_done >= self.half()
    }
}

/// Records the error `e(rank)`. Out of line, so that the rank, at the far end of the runner,
/// is read only when there is an error: passed by reference into the ring's inlined loop, its
/// load was hoisted to the top of every message's path, a cache line (and a miss) of its own.
/// (`black_box`: otherwise the optimizer passes the rank by value, and the caller reads it.)
#[cold]
#[inline(never)]
fn push_error(errors: &mut Vec<ExecError>, rank: &u32, e: impl FnOnce(u32) -> ExecError) {
    errors.push(e(*std::hint::black_box(rank)));
}

/// Starts a reduction of `len` bytes on the rank's engine, busy until `busy`, and sets the
/// timer `token` for its end. Out of line for the same reason as [`push_error`]: `busy` is at
/// the far end of the runner, and inlined, its load was hoisted into every ring message's
/// path, reductions timed or not.
#[inline(never)]
fn start_reduction(busy: &mut Time, bw: Bandwidth, len: u64, token: u64, api: &mut dyn Transport) {
    let start = (*busy).max(api.now());
    let done = start.add(Rate::new(bw).serialization_time(len));
    *busy = done;
    api.set_timer(done, token);
}

/// What a ring job reads only now and then (see [`RingHot`]).
struct RingCold {
    /// The generator (kinds for data and errors, block indices of uneven blocks).
    gen: RingAllReduce,
    /// Bytes of a block (the first `extra` blocks have one element more).
    block_bytes: u64,
    /// Bytes of an element: a longer block has this many more.
    elem_bytes: u64,
    /// Blocks `0..extra` are the longer ones.
    extra: u64,
    /// Bytes and pieces of a message still arriving in several writes (see [`MAX_WRITE`]).
    partial_len: u64,
    partial: Vec<Bytes>,
    /// Arrivals that are not simply "the expected length, no payload", as `(receive step,
    /// length, payload)`, in arrival order.
    odd: std::collections::VecDeque<(u32, u64, Option<Bytes>)>,
}

impl RingCold {
    /// Bytes step `i` moves.
    #[inline]
    fn bytes(&self, hot: &RingHot, i: u32) -> u64 {
        if !hot.has(RingHot::UNEVEN) {
            return hot.block();
        }
        let (_, _, k) = self.gen.at(i as usize);
        self.block_bytes
            + if (k as u64) < self.extra {
                self.elem_bytes
            } else {
                0
            }
    }
}

/// Fields are laid out in the order written (`repr(C)`), those every message reads first:
/// with thousands of runners interleaved each cache line of a runner that a message touches
/// is a miss, and Rust's own order had spread them over 14 lines of 18.
///
/// A ring job's message reads `ring` and the first words of `record` (two lines with the host
/// application's first words), nothing else.
#[repr(C)]
struct JobState {
    ring: RingHot,
    record: JobRecord,
    steps: Steps,
    lo: usize,
    /// Steps in the job's list.
    total: usize,
    /// How many steps the window holds (it grows past this only to find the receive step of
    /// an arriving message); `usize::MAX` for listed programs, which are held whole.
    window: usize,
    /// `job.elem_bytes`, `job.reduce_rate`, `job.data` and `job.class`, read by every message,
    /// kept here beside the rest of what a message reads (`job` itself is read-only).
    elem_bytes: u64,
    reduce_rate: Option<Bandwidth>,
    data: Option<DataSpec>,
    class: ClassId,
    started: bool,
    /// Whether step completion times go to the record (see [`STREAMED_TIMED_RANKS`]).
    keep_times: bool,
    buffer: Option<Vec<u8>>,
    /// The last two `(peer rank, channel)` -> index into `chans` looked up when steps entered
    /// the window (see [`JobState::chan_of`]); `usize::MAX` for none.
    chan_memo: [(usize, u32, u32); 2],
    /// Held inline up to two (a ring's): one pointer less to chase per message.
    chans: SmallVec<[Chan; 2]>,
    /// The window: the run-time state of steps `lo .. lo + rt.len()`. Every step before `lo`
    /// has completed; steps after the window have not been looked at yet.
    rt: Window,
    /// `(peer host, channel)` -> index into `chans`, sorted by key: looked up at every arriving
    /// message, so one contiguous array searched by halves (a B-tree's nodes were a cache miss
    /// each with a thousand ranks' runners interleaved).
    chan_index: Vec<((u32, u32), u32)>,
    job: Job,
}

/// A runner's jobs: the first held inline and first of all (`repr(C)`), so that a message of
/// the first job (a ring's, typically the only one) reads the job at the start of the runner
/// and no length or inline-or-heap word at its end (a `SmallVec`'s capacity sat 1.3 KB
/// further, one more cache line per message). Without jobs `first` is an empty placeholder
/// (`len` 0), which is never a ring, so the ring's check needs no length.
#[repr(C)]
struct Jobs {
    first: JobState,
    rest: Vec<JobState>,
    len: usize,
}

impl Jobs {
    fn new(jobs: Vec<Job>) -> Jobs {
        let len = jobs.len();
        let mut it = jobs.into_iter().map(JobState::new);
        let first = it.next().unwrap_or_else(|| {
            let empty = ChunkRange::new(0, 0);
            JobState::new(Job {
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
            })
        });
        Jobs {
            first,
            rest: it.collect(),
            len,
        }
    }

    fn len(&self) -> usize {
        self.len
    }

    fn get(&self, j: usize) -> Option<&JobState> {
        match j {
            _ if j >= self.len => None,
            0 => Some(&self.first),
            _ => self.rest.get(j - 1),
        }
    }

    fn get_mut(&mut self, j: usize) -> Option<&mut JobState> {
        match j {
            _ if j >= self.len => None,
            0 => Some(&mut self.first),
            _ => self.rest.get_mut(j - 1),
        }
    }

    /// Job `j` if it is a ring (see [`RingHot`]): the first job is checked without reading
    /// anything but itself.
    #[inline]
    fn ring_mut(&mut self, j: usize) -> Option<&mut JobState> {
        let js = if j == 0 {
            &mut self.first
        } else {
            self.get_mut(j)?
        };
        (js.ring.len > 0).then_some(js)
    }

    fn iter(&self) -> impl Iterator<Item = &JobState> {
        std::iter::once(&self.first)
            .chain(self.rest.iter())
            .take(self.len)
    }

    fn into_vec(self) -> Vec<JobState> {
        let len = self.len;
        std::iter::once(self.first)
            .chain(self.rest)
            .take(len)
            .collect()
    }
}

impl std::ops::Index<usize> for Jobs {
    type Output = JobState;
    fn index(&self, j: usize) -> &JobState {
        match j {
            0 => &self.first,
            _ => &self.rest[j - 1],
        }
    }
}

impl std::ops::IndexMut<usize> for Jobs {
    fn index_mut(&mut self, j: usize) -> &mut JobState {
        match j {
            0 => &mut self.first,
            _ => &mut self.rest[j - 1],
        }
    }
}

/// A streamed job keeps step completion times only on its first and last this many ranks:
/// a timeline shows the first ranks, and what their (ring) predecessors posted; keeping every
/// rank's would cost 16 bytes per step again.
pub const STREAMED_TIMED_RANKS: usize = 32;

/// Up to this many channels a job finds a message's channel by scanning `chans`, not by
/// searching `chan_index`.
const SCAN_CHANS: usize = 4;

impl JobState {
    fn new(job: Job) -> JobState {
        let mut ring = RingHot::default();
        let (steps, total, window, channels) = match job.stream {
            Some(g) => {
                let StepGen::RingAllReduce(r) = g;
                let (rank, n) = (r.rank, r.ranks);
                let keep = rank < STREAMED_TIMED_RANKS || rank + STREAMED_TIMED_RANKS >= n;
                let (next, prev) = r.neighbours();
                let ranks = r.ranks.max(1);
                let (base, extra) = ((r.count / ranks) as u64, (r.count % ranks) as u64);
                let block_bytes = base * job.elem_bytes;
                ring = RingHot {
                    next_send: 0,
                    next_apply: 1,
                    len: g.len() as u32,
                    next_host: job.host_of(next),
                    prev_host: job.host_of(prev),
                    channel: r.channel,
                    block_bytes: u32::try_from(block_bytes).unwrap_or(0),
                    class: job.class,
                    ..RingHot::default()
                };
                ring.set(RingHot::KEEP_TIMES, keep);
                ring.set(RingHot::TIMED_REDUCE, job.reduce_rate.is_some());
                ring.set(
                    RingHot::UNEVEN,
                    extra > 0 || u32::try_from(block_bytes).is_err(),
                );
                let cold = RingCold {
                    gen: r,
                    block_bytes,
                    elem_bytes: job.elem_bytes,
                    extra,
                    partial_len: 0,
                    partial: Vec::new(),
                    odd: Default::default(),
                };
                // No window and no channels: the counters are the whole state.
                (Steps::Ring(cold), g.len(), 0, (Vec::new(), keep))
            }
            None => {
                let steps = &job.program.steps;
                let n = steps.len();
                let mut counts = vec![0u32; n + 1];
                for s in steps {
                    for d in &s.deps {
                        if let Some(c) = counts.get_mut(d.0 + 1) {
                            *c += 1;
                        }
                    }
                }
                for i in 0..n {
                    counts[i + 1] += counts[i];
                }
                let mut dependents = vec![0u32; counts[n] as usize];
                let mut fill = counts.clone();
                for s in steps {
                    for d in &s.deps {
                        if let Some(f) = fill.get_mut(d.0) {
                            dependents[*f as usize] = s.id.0 as u32;
                            *f += 1;
                        }
                    }
                }
                let mut channels: Vec<(usize, u32)> =
                    steps.iter().filter_map(|s| s.kind.channel()).collect();
                channels.sort_unstable();
                channels.dedup();
                let listed = Steps::Listed {
                    dep_start: counts,
                    dependents,
                };
                (listed, n, usize::MAX, (channels, true))
            }
        };
        let (channels, keep_times) = channels;
        // Keyed by host: that is what an arriving message names.
        let mut keys: Vec<(u32, u32)> = channels
            .iter()
            .map(|&(peer, channel)| (job.host_of(peer), channel))
            .collect();
        keys.sort_unstable();
        keys.dedup();
        let chans = keys
            .iter()
            .map(|&(host, channel)| Chan {
                host,
                channel,
                ..Chan::default()
            })
            .collect();
        let chan_index = keys
            .into_iter()
            .enumerate()
            .map(|(i, k)| (k, i as u32))
            .collect();
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

    fn finished(&self) -> bool {
        self.started && self.record.steps_done == self.total
    }

    /// What step `i` does.
    fn kind(&self, i: usize) -> Option<StepKind> {
        match &self.steps {
            Steps::Listed { .. } => self.job.program.steps.get(i).map(|s| s.kind),
            Steps::Ring(c) => (i < self.total).then(|| StepGen::RingAllReduce(c.gen).kind(i)),
        }
    }

    /// The run-time state of step `i`, which must be in the window.
    fn rt(&mut self, i: u32) -> &mut StepRt {
        let at = (i as usize).wrapping_sub(self.lo);
        &mut self.rt.recs[self.rt.head.saturating_add(at)]
    }

    /// Whether step `i` is in the window and has not completed.
    fn open(&self, i: usize) -> bool {
        i.checked_sub(self.lo)
            .and_then(|at| self.rt.get(at))
            .is_some_and(|r| !r.done)
    }

    /// Channel `c`'s queue of receives (`recv`) or sends.
    fn list(&mut self, c: usize, recv: bool) -> &mut StepList {
        let ch = &mut self.chans[c];
        if recv {
            &mut ch.recvs
        } else {
            &mut ch.sends
        }
    }

    /// Appends window step `i` to channel `c`'s receives or sends.
    fn push_step(&mut self, c: usize, recv: bool, i: u32) {
        let l = *self.list(c, recv);
        if l.len > 0 {
            self.rt(l.tail).next = i;
        }
        self.rt(i).next = NO_STEP;
        let l = self.list(c, recv);
        if l.len == 0 {
            l.head = i;
        }
        l.tail = i;
        l.len += 1;
    }

    /// Takes the first step of channel `c`'s receives or sends.
    #[inline]
    fn pop_step(&mut self, c: usize, recv: bool) -> Option<u32> {
        let l = *self.list(c, recv);
        let s = l.front()?;
        let next = self.rt(s).next;
        let l = self.list(c, recv);
        l.head = next;
        l.len -= 1;
        if l.len == 0 {
            l.tail = NO_STEP;
        }
        Some(s)
    }

    /// The `n`th step (from 0) of channel `c`'s receives.
    fn nth_recv(&mut self, c: usize, n: usize) -> Option<u32> {
        let l = self.chans[c].recvs;
        if n >= l.len as usize {
            return None;
        }
        let mut s = l.head;
        for _ in 0..n {
            s = self.rt(s).next;
        }
        Some(s)
    }

    #[inline]
    fn index_of(&self, key: (u32, u32)) -> Option<u32> {
        // A few channels (a ring's two): scanning them is one cache line fewer per message
        // than the index, and `chans` is in key order too, so the answer is the same.
        if self.chans.len() <= SCAN_CHANS {
            let i = self.chans.iter().position(|c| (c.host, c.channel) == key)?;
            return Some(i as u32);
        }
        let i = self
            .chan_index
            .binary_search_by_key(&key, |&(k, _)| k)
            .ok()?;
        Some(self.chan_index[i].1)
    }

    /// Brings the next step into the window; if it is ready and the job has started, queues
    /// it in `work`.
    fn enter(&mut self, work: &mut Vec<u32>) {
        let i = self.lo + self.rt.len();
        // What the window needs of the step: its open dependencies and what it moves on
        // which channel. A generator says that without building the step's chunk.
        let (pending, io) = match &self.steps {
            Steps::Listed { .. } => {
                let Some(s) = self.job.program.steps.get(i) else {
                    return;
                };
                let pending = s.deps.iter().filter(|d| self.open(d.0)).count() as u32;
                let io = match s.kind {
                    StepKind::Send {
                        peer,
                        chunk,
                        channel,
                    } => Some((peer, channel, chunk.len, false, false)),
                    StepKind::Recv {
                        peer,
                        chunk,
                        reduce,
                        channel,
                    } => Some((peer, channel, chunk.len, true, reduce)),
                    StepKind::Copy { .. } => None,
                };
                (pending, io)
            }
            // A ring has no window (see `Ring`).
            Steps::Ring(_) => return,
        };
        let mut rt = StepRt {
            pending,
            chan: u32::MAX,
            next: NO_STEP,
            ..StepRt::default()
        };
        // The channel queue this step joins, once its record is in the window.
        let mut queue = None;
        if let Some((peer, channel, elems, recv, reduce)) = io {
            if let Some(c) = self.chan_of(peer, channel) {
                rt.chan = c;
                rt.len = elems as u64 * self.elem_bytes;
                rt.reduce = reduce;
                queue = Some((c as usize, recv));
            }
        }
        self.rt.push_back(rt);
        if let Some((c, recv)) = queue {
            self.push_step(c, recv, i as u32);
        }
        if pending == 0 && self.started {
            work.push(i as u32);
        }
    }

    /// The index into `chans` of program rank `peer`'s `channel`: the last answer is kept,
    /// since consecutive steps mostly use the channel the one before the last used (a ring's
    /// sends and receives alternate between two).
    fn chan_of(&mut self, peer: usize, channel: u32) -> Option<u32> {
        for &(p, ch, c) in &self.chan_memo {
            if (p, ch) == (peer, channel) {
                return Some(c);
            }
        }
        let c = self.index_of((self.job.host_of(peer), channel))?;
        self.chan_memo.swap(0, 1);
        self.chan_memo[0] = (peer, channel, c);
        Some(c)
    }

    /// One dependency of step `d` has completed: if `d` is in the window (below `hi`) and
    /// that was its last, it is ready. A step beyond the window counts its open dependencies
    /// when it enters.
    fn release(&mut self, d: usize, hi: usize, work: &mut Vec<u32>) {
        if d < hi && d >= self.lo {
            let p = &mut self.rt(d as u32).pending;
            *p = p.saturating_sub(1);
            if *p == 0 {
                work.push(d as u32);
            }
        }
    }

    /// Posts channel `c`'s ready sends and applies its ready receives, in list order (job
    /// `j` is this one; `rank` the runner's, for errors). Works on the job alone, reached
    /// once: with the runner's fields taken apart, a message no longer indexes the runner's
    /// jobs and channels again at every step (each index a bounds and an inline-or-heap
    /// check of a `SmallVec`).
    #[allow(clippy::too_many_arguments)]
    fn pump(
        &mut self,
        j: usize,
        c: usize,
        api: &mut dyn Transport,
        work: &mut Vec<u32>,
        errors: &mut Vec<ExecError>,
        reduce_busy_until: &mut Time,
        rank: u32,
    ) {
        // Time does not move while an application handles an event.
        let now = api.now();
        while let Some(s) = self.chans[c].sends.front() {
            let step = *self.rt(s);
            if !step.ready {
                break;
            }
            self.pop_step(c, false);
            let ch = &self.chans[c];
            let (host, imm) = (ch.host, imm_for(j, ch.channel));
            let len = step.len;
            // The step's kind (a generator computes it) only for data and errors.
            let payload = self.buffer.as_ref().and_then(|b| {
                let Some(StepKind::Send { chunk, .. }) = self.kind(s as usize) else {
                    return None;
                };
                let es = self.job.elem_bytes as usize;
                Some(Bytes::copy_from_slice(
                    &b[chunk.offset * es..(chunk.offset + chunk.len) * es],
                ))
            });
            self.record.bytes_sent += len;
            let class = self.class;
            // One RDMA WRITE per MAX_WRITE bytes (the receiver reassembles them).
            let mut off = 0u64;
            loop {
                let piece = (len - off).min(MAX_WRITE);
                let data = payload
                    .as_ref()
                    .map(|b| b.slice(off as usize..(off + piece) as usize));
                if !api.post_send_in(host, imm as u64, piece, data, class) {
                    let kind = self.kind(s as usize);
                    let peer = kind.and_then(|k| k.peer()).unwrap_or(0);
                    errors.push(ExecError::NoRoute { rank, job: j, peer });
                    break;
                }
                off += piece;
                if off >= len {
                    break;
                }
            }
            self.complete(s, now, work);
        }
        while let Some(s) = self.chans[c].recvs.front() {
            let step = *self.rt(s);
            if !step.ready || self.chans[c].arrived.is_empty() {
                break;
            }
            let Some((len, payload)) = self.chans[c].arrived.pop_front() else {
                break;
            };
            self.pop_step(c, true);
            let expected = step.len;
            if len != expected {
                let kind = self.kind(s as usize);
                errors.push(ExecError::LengthMismatch {
                    rank,
                    job: j,
                    peer: kind.and_then(|k| k.peer()).unwrap_or(0),
                    channel: kind.as_ref().map_or(0, channel_of),
                    got: len,
                    expected,
                });
            } else if let Some(bytes) = payload {
                let kind = self.kind(s as usize);
                if let (Some(d), Some(StepKind::Recv { chunk, .. }), Some(buf)) =
                    (self.data, kind, self.buffer.as_mut())
                {
                    let es = self.job.elem_bytes as usize;
                    let dst = &mut buf[chunk.offset * es..(chunk.offset + chunk.len) * es];
                    if bytes.len() == dst.len() {
                        data::apply(d.dtype, d.op, step.reduce, dst, &bytes);
                    }
                }
            }
            // The values are final now; what costs time is when dependents may start.
            if let Some(bw) = self.reduce_rate.filter(|_| step.reduce && len > 0) {
                let start = (*reduce_busy_until).max(now);
                let done = start.add(Rate::new(bw).serialization_time(len));
                *reduce_busy_until = done;
                let token = AppId::Collectives.token(REDUCE_DONE | (j as u64) << 24 | u64::from(s));
                api.set_timer(done, token);
                continue;
            }
            self.complete(s, now, work);
        }
    }

    /// Marks step `s` done, queues in `work` the dependents it releases, and slides the
    /// window past the steps completed at its front.
    fn complete(&mut self, s: u32, now: Time, work: &mut Vec<u32>) {
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
    fn note_done(&mut self, s: u32, now: Time) {
        self.record.steps_done += 1;
        // The ring's copy of `keep_times`: it is on the line a ring's message reads.
        let keep = if self.ring.len > 0 {
            self.ring.has(RingHot::KEEP_TIMES)
        } else {
            self.keep_times
        };
        if keep && self.record.steps.len() < MAX_STEP_TIMES {
            self.record.steps.push((s, now));
        }
    }

    /// A write of `len` bytes for a ring job came from `src` on `channel`: assembles it into
    /// the message its next receive expects. Returns `None` when the ring does not take
    /// messages from there (an unexpected message), else whether a whole message arrived.
    #[inline]
    fn ring_arrival(
        &mut self,
        src: u32,
        channel: u32,
        len: u64,
        payload: Option<Bytes>,
    ) -> Option<bool> {
        let h = &mut self.ring;
        if channel != h.channel {
            return None;
        }
        if src != h.prev_host {
            // The ring's other channel (to the next rank) takes no messages: one that comes
            // waits for a receive that never is, as in the general case.
            return (src == h.next_host).then_some(false);
        }
        // The receive this write belongs to: the next one, past those already waiting.
        let k = u64::from(h.next_apply) + 2 * u64::from(h.waiting);
        let usual = !h.has(RingHot::UNEVEN | RingHot::ASSEMBLING)
            && payload.is_none()
            && k < u64::from(h.len);
        if usual && len == h.block() {
            // The usual message: whole, as long as expected, no payload.
            h.waiting += 1;
            return Some(true);
        }
        self.ring_arrival_slow(k, len, payload)
    }

    /// [`ring_arrival`](Self::ring_arrival) for everything but the usual message.
    fn ring_arrival_slow(&mut self, k: u64, len: u64, payload: Option<Bytes>) -> Option<bool> {
        let h = &mut self.ring;
        let Steps::Ring(c) = &mut self.steps else {
            return None;
        };
        let expected = (k < u64::from(h.len)).then(|| c.bytes(h, k as u32));
        c.partial_len += len;
        if let Some(p) = payload {
            c.partial.push(p);
        }
        if expected.is_some_and(|e| c.partial_len < e) {
            h.set(RingHot::ASSEMBLING, true);
            return Some(false);
        }
        h.set(RingHot::ASSEMBLING, false);
        let total = std::mem::take(&mut c.partial_len);
        let data = join_pieces(&mut c.partial, total);
        if data.is_some() || expected != Some(total) {
            c.odd
                .push_back((k.min(u64::from(u32::MAX)) as u32, total, data));
            h.set(RingHot::ODD, true);
        }
        h.waiting += 1;
        Some(true)
    }

    /// Runs a ring job's steps until none can run now: applies the receives whose messages
    /// are there, posts the sends whose receive has completed, and again while either moved.
    fn run_ring(
        &mut self,
        j: usize,
        api: &mut dyn Transport,
        errors: &mut Vec<ExecError>,
        reduce_busy_until: &mut Time,
        rank: &u32,
    ) {
        let now = api.now();
        loop {
            let mut moved = false;
            while self.ring.can_apply() {
                let h = &mut self.ring;
                let s = h.next_apply;
                h.next_apply += 2;
                h.waiting -= 1;
                moved = true;
                // A Reduce-Scatter receive reduces, an All-Gather one overwrites.
                let reduce = s < h.half();
                let (mut len, mut payload, mut expected) = (h.block(), None, h.block());
                if h.has(RingHot::ODD | RingHot::UNEVEN) {
                    let Steps::Ring(c) = &mut self.steps else {
                        return;
                    };
                    expected = c.bytes(h, s);
                    len = expected;
                    if c.odd.front().is_some_and(|o| o.0 == s) {
                        if let Some((_, l, p)) = c.odd.pop_front() {
                            (len, payload) = (l, p);
                        }
                        h.set(RingHot::ODD, !c.odd.is_empty());
                    }
                }
                if h.has(RingHot::TIMED_REDUCE) && reduce && len > 0 {
                    // Completes when its reduction's timer fires.
                } else if reduce {
                    h.rs_done += 1;
                }
                if len != expected {
                    let peer = self.ring_cold().map_or(0, |c| c.gen.neighbours().1);
                    let channel = self.ring.channel;
                    push_error(errors, rank, |rank| ExecError::LengthMismatch {
                        rank,
                        job: j,
                        peer,
                        channel,
                        got: len,
                        expected,
                    });
                } else if let Some(bytes) = payload {
                    let kind = self.kind(s as usize);
                    if let (Some(d), Some(StepKind::Recv { chunk, .. }), Some(buf)) =
                        (self.data, kind, self.buffer.as_mut())
                    {
                        let es = self.elem_bytes as usize;
                        let dst = &mut buf[chunk.offset * es..(chunk.offset + chunk.len) * es];
                        if bytes.len() == dst.len() {
                            data::apply(d.dtype, d.op, reduce, dst, &bytes);
                        }
                    }
                }
                // The values are final now; what costs time is when dependents may start.
                // `timed_reduce` first: `reduce_rate` is on a line a message does not read.
                if self.ring.has(RingHot::TIMED_REDUCE) && reduce && len > 0 {
                    if let Some(bw) = self.reduce_rate {
                        let token =
                            AppId::Collectives.token(REDUCE_DONE | (j as u64) << 24 | u64::from(s));
                        start_reduction(reduce_busy_until, bw, len, token, api);
                        continue;
                    }
                }
                self.note_done(s, now);
            }
            while self.ring.can_send() {
                let h = &mut self.ring;
                let s = h.next_send;
                h.next_send += 2;
                moved = true;
                let (host, imm, class) = (h.next_host, imm_for(j, h.channel), h.class);
                let mut len = h.block();
                let mut payload = None;
                if h.has(RingHot::UNEVEN | RingHot::DATA) {
                    let Steps::Ring(c) = &self.steps else {
                        return;
                    };
                    len = c.bytes(h, s);
                    payload = self.buffer.as_ref().and_then(|b| {
                        let Some(StepKind::Send { chunk, .. }) = self.kind(s as usize) else {
                            return None;
                        };
                        let es = self.elem_bytes as usize;
                        Some(Bytes::copy_from_slice(
                            &b[chunk.offset * es..(chunk.offset + chunk.len) * es],
                        ))
                    });
                }
                self.record.bytes_sent += len;
                // One RDMA WRITE per MAX_WRITE bytes (the receiver reassembles them).
                let mut off = 0u64;
                loop {
                    let piece = (len - off).min(MAX_WRITE);
                    let data = payload
                        .as_ref()
                        .map(|b: &Bytes| b.slice(off as usize..(off + piece) as usize));
                    if !api.post_send_in(host, imm as u64, piece, data, class) {
                        let peer = self.ring_cold().map_or(0, |c| c.gen.neighbours().0);
                        push_error(errors, rank, |rank| ExecError::NoRoute {
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
                self.note_done(s, now);
            }
            if !moved {
                return;
            }
        }
    }

    /// A ring job's cold state.
    fn ring_cold(&self) -> Option<&RingCold> {
        match &self.steps {
            Steps::Ring(c) => Some(c),
            Steps::Listed { .. } => None,
        }
    }

    /// Fills the window up to its size.
    fn fill(&mut self, work: &mut Vec<u32>) {
        while self.rt.len() < self.window && self.lo + self.rt.len() < self.total {
            self.enter(work);
        }
    }
}

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
    /// caller's validation, and ignored here).
    pub fn new(rank: u32, mut jobs: Vec<Job>) -> CollectiveRunner {
        jobs.truncate(MAX_JOBS);
        CollectiveRunner {
            rank,
            jobs: Jobs::new(jobs),
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
        self.jobs.into_vec().into_iter().map(|j| j.record).collect()
    }

    /// Job `job`'s program on this rank; without its steps when they are generated on demand
    /// (see [`step_count`](Self::step_count) and [`step_kind`](Self::step_kind)).
    pub fn program(&self, job: usize) -> Option<&Program> {
        self.jobs.get(job).map(|j| &j.job.program)
    }

    /// Steps in job `job`'s list on this rank (listed or generated).
    pub fn step_count(&self, job: usize) -> usize {
        self.jobs.get(job).map_or(0, |j| j.total)
    }

    /// What step `i` of job `job` does on this rank (listed or generated).
    pub fn step_kind(&self, job: usize, i: usize) -> Option<StepKind> {
        self.jobs.get(job).and_then(|j| j.kind(i))
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
        js.ring.set(RingHot::STARTED, true);
        js.ring.set(RingHot::DATA, js.buffer.is_some());
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
            // A ring has no work list: its counters say what runs (see `RingHot`).
            js.run_ring(j, api, errors, reduce_busy_until, rank);
            if !js.ring.done() {
                return;
            }
        }
        while let Some(s) = self.work.pop() {
            let js = &mut self.jobs[j];
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
        js.pump(j, c, api, work, errors, reduce_busy_until, *rank);
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
        let j = ((imm >> 20) & (MAX_JOBS as u32 - 1)) as usize;
        let channel = imm & (MAX_CHANNELS - 1);
        if let Some(js) = self.jobs.ring_mut(j) {
            match js.ring_arrival(src, channel, len, payload) {
                Some(true) if js.ring.has(RingHot::STARTED) => self.advance(j, api),
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
        let Some(c) = self.jobs.get(j).and_then(|js| js.index_of((src, channel))) else {
            self.errors.push(ExecError::Unexpected {
                rank: self.rank,
                peer: src,
                job: j,
                channel,
            });
            return;
        };
        self.work.clear();
        let js = &mut self.jobs[j];
        // The logical message this write belongs to is the next one not yet assembled; its
        // length is that receive step's chunk. A faster peer may be ahead of the window: bring
        // steps in until that receive is there (or the list ends).
        let c = c as usize;
        let next = js.chans[c].arrived.len();
        while js.chans[c].recvs.len as usize <= next && js.lo + js.rt.len() < js.total {
            js.enter(&mut self.work);
        }
        let expected = js.nth_recv(c, next).map(|r| js.rt(r).len);
        let ch = &mut js.chans[c];
        ch.partial_len += len;
        if let Some(p) = payload {
            ch.partial.push(p);
        }
        // Complete (or too long, or unmatched: let the receive step report the mismatch).
        if expected.is_none_or(|e| ch.partial_len >= e) {
            let total = std::mem::take(&mut ch.partial_len);
            let data = join_pieces(&mut ch.partial, total);
            ch.arrived.push_back((total, data));
        } else if self.work.is_empty() {
            return;
        }
        if self.jobs[j].started {
            self.pump(j, c, api);
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

/// The payload of a message that arrived in several writes (see [`MAX_WRITE`]): its pieces
/// (data mode) joined into one buffer of `total` bytes, `None` in timing mode. Empties `pieces`.
fn join_pieces(pieces: &mut Vec<Bytes>, total: u64) -> Option<Bytes> {
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

#[cfg(test)]
mod tests {
    use std::cmp::Reverse;
    use std::collections::{BTreeMap, BinaryHeap};

    use super::*;
    use crate::plan::{self, Algorithm, Layout, Plan};
    use crate::Collective;

    /// A toy network: each host's NIC sends one message after another at 1 byte/ps, and a
    /// message takes a latency that varies per message (a hash of host and sequence number),
    /// so ranks drift out of step and faster peers run ahead of a rank's window.
    #[derive(Default)]
    struct Net {
        now: u64,
        seq: u64,
        busy: Vec<u64>,
        /// Last delivery per (src, dst): queue pairs deliver in order.
        last: BTreeMap<(u32, u32), u64>,
        /// (time, seq, host, event): event `Ok((src, imm, len, data))` a delivery, `Err(token)`
        /// a timer.
        events: BinaryHeap<Reverse<(u64, u64, u32, Ev)>>,
    }

    #[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
    enum Ev {
        Msg(u32, u32, u64, Option<Vec<u8>>),
        Timer(u64),
    }

    struct Api<'a> {
        net: &'a mut Net,
        host: u32,
    }

    impl Transport for Api<'_> {
        fn now(&self) -> Time {
            Time(self.net.now)
        }
        fn host(&self) -> u32 {
            self.host
        }
        fn post_send(&mut self, dst: u32, tag: u64, len: u64, data: Option<Bytes>) -> bool {
            let net = &mut *self.net;
            net.seq += 1;
            let start = net.busy[self.host as usize].max(net.now);
            net.busy[self.host as usize] = start + len;
            let jitter = (u64::from(self.host) * 7919 + net.seq * 104_729) % 5_000;
            let last = net.last.entry((self.host, dst)).or_default();
            let at = (start + len + 1_000 + jitter).max(*last);
            *last = at;
            let ev = Ev::Msg(self.host, tag as u32, len, data.map(|b| b.to_vec()));
            net.events.push(Reverse((at, net.seq, dst, ev)));
            true
        }
        fn set_timer(&mut self, at: Time, token: u64) {
            self.net.seq += 1;
            let ev = Ev::Timer(token);
            self.net
                .events
                .push(Reverse((at.0, self.net.seq, self.host, ev)));
        }
    }

    fn run(jobs: Vec<Vec<Job>>) -> Vec<Vec<JobRecord>> {
        let n = jobs.len();
        let mut net = Net {
            busy: vec![0; n],
            ..Net::default()
        };
        let mut runners: Vec<CollectiveRunner> = jobs
            .into_iter()
            .enumerate()
            .map(|(r, j)| CollectiveRunner::new(r as u32, j))
            .collect();
        for (h, r) in runners.iter_mut().enumerate() {
            r.start(&mut Api {
                net: &mut net,
                host: h as u32,
            });
        }
        while let Some(Reverse((at, _, host, ev))) = net.events.pop() {
            net.now = at;
            let r = &mut runners[host as usize];
            let mut api = Api {
                net: &mut net,
                host,
            };
            match ev {
                Ev::Msg(src, imm, len, data) => r.on_completion(
                    Completion::Received {
                        src,
                        imm,
                        len,
                        data: data.map(Bytes::from),
                    },
                    &mut api,
                ),
                Ev::Timer(t) => r.on_timer(t, &mut api),
            }
        }
        runners
            .into_iter()
            .map(|r| {
                assert!(r.errors.is_empty(), "{:?}", r.errors);
                r.into_records()
            })
            .collect()
    }

    /// The same ring All-Reduce, its programs listed (compiled) or generated on demand,
    /// executed over the toy network: every step completes at the same picosecond and the
    /// buffers are equal, in two consecutive jobs, with and without a reduction rate (measured:
    /// identical too with the ring window cut to a single step, the window then growing only
    /// for arriving messages).
    #[test]
    fn a_streamed_ring_runs_exactly_like_the_listed_one() {
        // 40 and 100 ranks: 156 and 396 steps per rank, well past the ring's window of 8.
        for n in [2usize, 3, 7, 16, 40, 100] {
            for reduce_rate in [None, Some(Bandwidth::from_gbps(1))] {
                let data = Some(DataSpec {
                    dtype: DataType::F32,
                    op: ReduceOp::Sum,
                });
                let (listed, streamed) = ring_jobs(n, 1000 + n, data, reduce_rate, 2);
                let (a, b) = (run(listed), run(streamed));
                for (r, (x, y)) in a.iter().zip(&b).enumerate() {
                    // Middle ranks of a streamed job keep no step times (by design).
                    let timed = r < STREAMED_TIMED_RANKS || r + STREAMED_TIMED_RANKS >= n;
                    for (x, y) in x.iter().zip(y) {
                        assert!(x.finished_at.is_some());
                        assert_eq!(x.finished_at, y.finished_at, "n {n} rank {r}");
                        assert_eq!(x.steps_done, y.steps_done, "n {n} rank {r}");
                        assert_eq!(x.bytes_sent, y.bytes_sent, "n {n} rank {r}");
                        assert!(x.buffer == y.buffer, "n {n} rank {r}: buffers differ");
                        if timed {
                            assert_eq!(x.steps, y.steps, "n {n} rank {r}");
                        } else {
                            assert!(y.steps.is_empty());
                        }
                    }
                }
            }
        }
    }

    /// A ring All-Reduce of `count` 4-byte elements on `n` ranks, `copies` jobs per rank one
    /// after another: the listed programs and the streamed ones (per rank).
    fn ring_jobs(
        n: usize,
        count: usize,
        data: Option<DataSpec>,
        reduce_rate: Option<Bandwidth>,
        copies: usize,
    ) -> (Vec<Vec<Job>>, Vec<Vec<Job>>) {
        let plan = Plan {
            op: Collective::AllReduce,
            ranks: n,
            count,
            root: 0,
            layout: Layout::Flat(Algorithm::Ring),
            chunks: 1,
            chunks_in_flight: 0,
        };
        let listed = plan::compile(&plan).unwrap();
        let gens = plan::stream(&plan).unwrap();
        let job = |program: Program, stream: Option<StepGen>| Job {
            program,
            start: JobStart::AfterPrevious,
            elem_bytes: 4,
            data,
            reduce_rate,
            hosts: None,
            class: 0,
            stream,
        };
        (
            (0..n)
                .map(|r| vec![job(listed[r].clone(), None); copies])
                .collect(),
            (0..n)
                .map(|r| vec![job(gens[r].header(), Some(gens[r])); copies])
                .collect(),
        )
    }

    /// Blocks longer than [`MAX_WRITE`] go as several writes and are put back together before
    /// the receive applies them: a streamed ring (timing mode, uneven blocks, and even blocks
    /// of 4 GiB, too long for [`RingHot`]'s 32 bits; with and without a reduction rate) still
    /// runs exactly like the listed one.
    #[test]
    fn a_streamed_ring_of_several_writes_per_message_runs_like_the_listed_one() {
        for n in [2usize, 3] {
            for reduce_rate in [None, Some(Bandwidth::from_gbps(100))] {
                for count in [n * (1 << 28) + 1, n << 30] {
                    // 4-byte elements: every block is about 1 GiB + 1 element (two writes), or
                    // exactly 4 GiB (four writes).
                    let (listed, streamed) = ring_jobs(n, count, None, reduce_rate, 1);
                    let (a, b) = (run(listed), run(streamed));
                    assert_eq!(a, b, "n {n}");
                    assert!(a.iter().all(|r| r[0].finished_at.is_some()));
                }
            }
        }
    }
}
