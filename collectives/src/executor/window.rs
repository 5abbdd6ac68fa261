//! A listed program's run-time state: a window of step records that count their open
//! dependencies, and channels that keep the window's pending sends and receives in list order
//! (see the module doc of [`super`]).

use bytes::Bytes;
use fabemu_fabric::deque::HeadDeque;
use fabemu_fabric::transport::Transport;
use smallvec::SmallVec;

use super::job::{join_pieces, Expect, JobState, RankCtx, Steps};
use super::Job;
use crate::program::{Program, StepKind};

/// Laid out in the order written (`repr(C)`): what a send reads (the key and the queues)
/// and the partial message's length come first, in one cache line.
#[derive(Debug, Default)]
#[repr(C)]
pub(super) struct Chan {
    /// The peer host and channel number (its key in `chan_index`).
    pub(super) host: u32,
    pub(super) channel: u32,
    /// Send steps of the window not yet posted, in list order (the front is the next one).
    pub(super) sends: StepList,
    /// Receive steps of the window not yet applied, in list order.
    pub(super) recvs: StepList,
    /// Bytes and pieces of a message still arriving in several writes (see [`MAX_WRITE`]).
    pub(super) partial_len: u64,
    pub(super) partial: Vec<Bytes>,
    /// Messages that arrived before their receive step was ready.
    pub(super) arrived: Arrivals,
}

/// No step (the end of a [`StepList`]).
pub(super) const NO_STEP: u32 = u32::MAX;

/// A queue of window steps (a channel's pending sends or receives), linked through their
/// [`StepRt::next`]: with thousands of ranks' runners interleaved, a queue's own buffer was
/// one more cache miss per message, while the steps' records are read anyway. A queued step
/// has not completed, so it stays in the window as long as it is queued.
#[derive(Clone, Copy, Debug)]
pub(super) struct StepList {
    pub(super) head: u32,
    pub(super) tail: u32,
    pub(super) len: u32,
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
    pub(super) fn front(&self) -> Option<u32> {
        (self.len > 0).then_some(self.head)
    }
}

/// A message that arrived: its length and payload (data mode).
pub(super) type Arrival = (u64, Option<Bytes>);

/// A channel's messages waiting for their receive step, the first held inline: a message
/// usually finds its step ready and is taken at once, so most channels never need the
/// queue's buffer (a cache miss per message with thousands of runners).
pub(super) type Arrivals = HeadDeque<Arrival>;

/// What the executor reads and writes of a step while it runs, in one record: with a thousand
/// ranks' runners interleaved, every separate per-step array was a cache miss per message.
/// The step's kind itself is read only for data (chunk offsets) and errors.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct StepRt {
    /// Bytes a send or receive moves (chunk length x element size); 0 for a copy.
    pub(super) len: u64,
    /// Dependencies not yet completed.
    pub(super) pending: u32,
    /// Index into `chans` of a send or receive; `u32::MAX` for a copy.
    pub(super) chan: u32,
    /// The next step in its channel's queue ([`StepList`]), or [`NO_STEP`].
    pub(super) next: u32,
    /// Its dependencies are done (a send or receive then waits for its turn on the channel).
    pub(super) ready: bool,
    /// A receive that reduces.
    pub(super) reduce: bool,
    /// It has completed.
    pub(super) done: bool,
}

/// Window records held inline: twice a ring's window (8 steps), so that the records a message
/// reads sit beside the runner instead of behind one more pointer, and the completed front is
/// reclaimed every 8 steps.
pub(super) const INLINE_WINDOW: usize = 16;

/// A job's window of step records, oldest first: a queue kept in one vector, inline up to
/// [`INLINE_WINDOW`], whose completed front is dropped by moving an index and reclaimed when
/// the vector is full (moving the few live records to the start).
#[derive(Default)]
#[repr(C)]
pub(super) struct Window {
    /// Records before this one have left the window.
    pub(super) head: usize,
    pub(super) recs: SmallVec<[StepRt; INLINE_WINDOW]>,
}

impl Window {
    pub(super) fn len(&self) -> usize {
        self.recs.len() - self.head
    }

    pub(super) fn get(&self, at: usize) -> Option<&StepRt> {
        self.recs.get(self.head.checked_add(at)?)
    }

    pub(super) fn front(&self) -> Option<&StepRt> {
        self.get(0)
    }

    #[inline]
    pub(super) fn push_back(&mut self, r: StepRt) {
        if self.recs.len() == self.recs.capacity() && self.head > 0 {
            let live = self.recs.len() - self.head;
            self.recs.copy_within(self.head.., 0);
            self.recs.truncate(live);
            self.head = 0;
        }
        self.recs.push(r);
    }

    pub(super) fn pop_front(&mut self) {
        if self.head < self.recs.len() {
            self.head += 1;
        }
        if self.head == self.recs.len() {
            self.recs.clear();
            self.head = 0;
        }
    }

    pub(super) fn iter(&self) -> std::slice::Iter<'_, StepRt> {
        self.recs[self.head..].iter()
    }
}

/// Up to this many channels a job finds a message's channel by scanning `chans`, not by
/// searching `chan_index`.
pub(super) const SCAN_CHANS: usize = 4;

/// A listed program's dependents (step `i`'s are `dependents[dep_start[i]..dep_start[i + 1]]`)
/// and the `(peer rank, channel)` pairs its sends and receives use, sorted.
pub(super) fn listed_steps(program: &Program) -> (Steps, Vec<(usize, u32)>) {
    let steps = &program.steps;
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
    let mut channels: Vec<(usize, u32)> = steps.iter().filter_map(|s| s.kind.channel()).collect();
    channels.sort_unstable();
    channels.dedup();
    let listed = Steps::Listed {
        dep_start: counts,
        dependents,
    };
    (listed, channels)
}

/// A job's channels, held inline up to two (a ring's).
pub(super) type Chans = SmallVec<[Chan; 2]>;

/// `(peer host, channel)` -> index into a job's [`Chans`], sorted by key.
pub(super) type ChanIndex = Vec<((u32, u32), u32)>;

/// The job's channels for its `(peer rank, channel)` pairs, keyed by host (that is what an
/// arriving message names) and in key order, with the index that finds them by key.
pub(super) fn channels_of(job: &Job, channels: &[(usize, u32)]) -> (Chans, ChanIndex) {
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
    (chans, chan_index)
}

impl JobState {
    /// The run-time state of step `i`, which must be in the window.
    pub(super) fn rt(&mut self, i: u32) -> &mut StepRt {
        let at = (i as usize).wrapping_sub(self.lo);
        &mut self.rt.recs[self.rt.head.saturating_add(at)]
    }

    /// Whether step `i` is in the window and has not completed.
    pub(super) fn open(&self, i: usize) -> bool {
        i.checked_sub(self.lo)
            .and_then(|at| self.rt.get(at))
            .is_some_and(|r| !r.done)
    }

    /// Channel `c`'s queue of receives (`recv`) or sends.
    pub(super) fn list(&mut self, c: usize, recv: bool) -> &mut StepList {
        let ch = &mut self.chans[c];
        if recv {
            &mut ch.recvs
        } else {
            &mut ch.sends
        }
    }

    /// Appends window step `i` to channel `c`'s receives or sends.
    pub(super) fn push_step(&mut self, c: usize, recv: bool, i: u32) {
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
    pub(super) fn pop_step(&mut self, c: usize, recv: bool) -> Option<u32> {
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
    pub(super) fn nth_recv(&mut self, c: usize, n: usize) -> Option<u32> {
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
    pub(super) fn index_of(&self, key: (u32, u32)) -> Option<u32> {
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
    pub(super) fn enter(&mut self, work: &mut Vec<u32>) {
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
    pub(super) fn chan_of(&mut self, peer: usize, channel: u32) -> Option<u32> {
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
    pub(super) fn release(&mut self, d: usize, hi: usize, work: &mut Vec<u32>) {
        if d < hi && d >= self.lo {
            let p = &mut self.rt(d as u32).pending;
            *p = p.saturating_sub(1);
            if *p == 0 {
                work.push(d as u32);
            }
        }
    }

    /// Posts channel `c`'s ready sends and applies its ready receives, in list order (job
    /// `j` is this one). Works on the job alone, reached once: with the runner's fields taken
    /// apart, a message no longer indexes the runner's jobs and channels again at every step
    /// (each index a bounds and an inline-or-heap check of a `SmallVec`).
    pub(super) fn pump(
        &mut self,
        j: usize,
        c: usize,
        api: &mut dyn Transport,
        work: &mut Vec<u32>,
        cx: &mut RankCtx<'_>,
    ) {
        // Time does not move while an application handles an event.
        let now = api.now();
        while let Some(s) = self.chans[c].sends.front() {
            let step = *self.rt(s);
            if !step.ready {
                break;
            }
            self.pop_step(c, false);
            let to = (self.chans[c].host, self.chans[c].channel, self.class);
            let payload = self.send_payload(s);
            self.post(j, s, to, (step.len, payload), api, cx);
            self.complete(s, now, work);
        }
        while let Some(s) = self.chans[c].recvs.front() {
            let step = *self.rt(s);
            if !step.ready || self.chans[c].arrived.is_empty() {
                break;
            }
            let Some(message) = self.chans[c].arrived.pop_front() else {
                break;
            };
            self.pop_step(c, true);
            let expect = Expect {
                len: step.len,
                reduce: step.reduce,
                timed: self.reduce_rate.is_some(),
            };
            if self.receive(j, s, message, expect, api, cx) {
                self.complete(s, now, work);
            }
        }
    }

    /// A write of `len` bytes arrived on channel `c`: assembles it into the message the
    /// channel's next receive expects, and returns whether a whole message arrived. The
    /// logical message this write belongs to is the next one not yet assembled; its length is
    /// that receive step's chunk. A faster peer may be ahead of the window: steps are brought
    /// in (ready ones queued in `work`) until that receive is there (or the list ends).
    pub(super) fn arrival(
        &mut self,
        c: usize,
        len: u64,
        payload: Option<Bytes>,
        work: &mut Vec<u32>,
    ) -> bool {
        let next = self.chans[c].arrived.len();
        while self.chans[c].recvs.len as usize <= next && self.lo + self.rt.len() < self.total {
            self.enter(work);
        }
        let expected = self.nth_recv(c, next).map(|r| self.rt(r).len);
        let ch = &mut self.chans[c];
        ch.partial_len += len;
        if let Some(p) = payload {
            ch.partial.push(p);
        }
        // Complete (or too long, or unmatched: let the receive step report the mismatch).
        if expected.is_none_or(|e| ch.partial_len >= e) {
            let total = std::mem::take(&mut ch.partial_len);
            let data = join_pieces(&mut ch.partial, total);
            ch.arrived.push_back((total, data));
            return true;
        }
        false
    }

    /// Fills the window up to its size.
    pub(super) fn fill(&mut self, work: &mut Vec<u32>) {
        while self.rt.len() < self.window && self.lo + self.rt.len() < self.total {
            self.enter(work);
        }
    }
}
