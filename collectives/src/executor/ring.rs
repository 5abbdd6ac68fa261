//! A generated ring All-Reduce run from a few counters instead of a window of step records
//! (see the module doc of [`super`]): what may run next is a comparison of the next send, the
//! next receive, the Reduce-Scatter receives completed and the messages waiting.

use std::collections::VecDeque;

use bytes::Bytes;
use fabemu_fabric::transport::{ClassId, Transport};

use super::job::{join_pieces, Expect, JobState, RankCtx, Steps};
use super::{Job, STREAMED_TIMED_RANKS};
use crate::program::RingAllReduce;

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
/// This is the job's progress, all a usual message reads: 40 bytes at the start of the job
/// (`repr(C)`), to share a cache line with the host application's first word and the job's
/// two counters. Block lengths of uneven or huge blocks, messages arriving in pieces and
/// unusual arrivals are in [`RingBlocks`]. A job that is not a ring has `len` 0.
#[derive(Clone, Copy, Debug, Default)]
#[repr(C)]
pub(super) struct RingProgress {
    /// The next send to post (even; `len` when all are posted).
    pub(super) next_send: u32,
    /// The next receive to apply (odd; past `len` when all are applied).
    pub(super) next_apply: u32,
    /// Reduce-Scatter receives completed (they complete in list order).
    pub(super) rs_done: u32,
    /// Steps in the list, `4 (p - 1)` (the first All-Gather step is `len / 2`); 0: not a ring.
    pub(super) len: u32,
    /// Whole messages that arrived and wait for their receive.
    pub(super) waiting: u32,
    /// Hosts of the next rank (sends go there) and the previous one (receives come from there).
    pub(super) next_host: u32,
    pub(super) prev_host: u32,
    /// The channel of every message.
    pub(super) channel: u32,
    /// Bytes of a block when they fit 32 bits and all blocks are alike; otherwise the
    /// [`UNEVEN`](RingProgress::UNEVEN) flag sends every length to [`RingBlocks::bytes`].
    pub(super) block_bytes: u32,
    /// The job's traffic class.
    pub(super) class: ClassId,
    /// The `RingProgress::*` flags (bits, not `bool`s: eight bytes fewer, so that the record's
    /// counters fit on the line).
    pub(super) flags: u8,
}

impl RingProgress {
    /// Mirrors of the job's state: started, steps' times kept, reductions take time, data mode.
    pub(super) const STARTED: u8 = 1;
    pub(super) const KEEP_TIMES: u8 = 1 << 1;
    pub(super) const TIMED_REDUCE: u8 = 1 << 2;
    pub(super) const DATA: u8 = 1 << 3;
    /// Blocks differ in length (`count` is not a multiple of the ranks), or a block has 4 GiB
    /// or more: lengths come from [`RingBlocks::bytes`].
    pub(super) const UNEVEN: u8 = 1 << 4;
    /// A message is arriving in several writes (`RingBlocks::partial_len`).
    pub(super) const ASSEMBLING: u8 = 1 << 5;
    /// `RingBlocks::odd` holds arrivals (payloads, lengths other than expected).
    pub(super) const ODD: u8 = 1 << 6;

    /// Whether flag `f` is set.
    #[inline]
    pub(super) fn has(&self, f: u8) -> bool {
        self.flags & f != 0
    }

    /// Sets flag `f` to `on`.
    #[inline]
    pub(super) fn set(&mut self, f: u8, on: bool) {
        if on {
            self.flags |= f;
        } else {
            self.flags &= !f;
        }
    }

    /// The block length of a regular ring (see [`UNEVEN`](RingProgress::UNEVEN)).
    #[inline]
    pub(super) fn block(&self) -> u64 {
        u64::from(self.block_bytes)
    }
}

impl RingProgress {
    /// A ring job's progress and blocks before it starts (`len` steps).
    pub(super) fn start(job: &Job, r: RingAllReduce, len: usize) -> (RingProgress, RingBlocks) {
        let (rank, n) = (r.rank, r.ranks);
        let keep = rank < STREAMED_TIMED_RANKS || rank + STREAMED_TIMED_RANKS >= n;
        let (next, prev) = r.neighbours();
        let ranks = r.ranks.max(1);
        let (base, extra) = ((r.count / ranks) as u64, (r.count % ranks) as u64);
        let block_bytes = base * job.elem_bytes;
        let mut progress = RingProgress {
            next_send: 0,
            next_apply: 1,
            len: len as u32,
            next_host: job.host_of(next),
            prev_host: job.host_of(prev),
            channel: r.channel,
            block_bytes: u32::try_from(block_bytes).unwrap_or(0),
            class: job.class,
            ..RingProgress::default()
        };
        progress.set(RingProgress::KEEP_TIMES, keep);
        progress.set(RingProgress::TIMED_REDUCE, job.reduce_rate.is_some());
        progress.set(
            RingProgress::UNEVEN,
            extra > 0 || u32::try_from(block_bytes).is_err(),
        );
        let blocks = RingBlocks {
            gen: r,
            block_bytes,
            elem_bytes: job.elem_bytes,
            extra,
            partial_len: 0,
            partial: Vec::new(),
            odd: VecDeque::new(),
        };
        (progress, blocks)
    }

    /// The first All-Gather step.
    #[inline]
    pub(super) fn half(&self) -> u32 {
        self.len / 2
    }

    /// Whether receive `k` (odd) has completed: a Reduce-Scatter one when its reduction has,
    /// an All-Gather one (which never reduces) when applied.
    #[inline]
    pub(super) fn recv_done(&self, k: u32) -> bool {
        if k < self.half() {
            k / 2 < self.rs_done
        } else {
            k < self.next_apply
        }
    }

    /// Whether the next receive may be applied (a message for it has arrived): a
    /// Reduce-Scatter receive at once, an All-Gather one `B + 2s + 1` once send `2s` is posted.
    #[inline]
    pub(super) fn can_apply(&self) -> bool {
        let (k, b) = (self.next_apply, self.half());
        k < self.len && self.waiting > 0 && (k < b || k - b - 1 < self.next_send)
    }

    /// Whether the next send may be posted: the receive before it has completed.
    #[inline]
    pub(super) fn can_send(&self) -> bool {
        let i = self.next_send;
        i < self.len && (i == 0 || self.recv_done(i - 1))
    }

    /// Whether every step has completed.
    #[inline]
    pub(super) fn done(&self) -> bool {
        self.next_send >= self.len && self.next_apply >= self.len && 2 * self.rs_done >= self.half()
    }
}

/// A ring job's blocks: their generator and lengths, a message arriving in several writes,
/// and arrivals other than the expected length without payload (see [`RingProgress`]).
pub(super) struct RingBlocks {
    /// The generator (kinds for data and errors, block indices of uneven blocks).
    pub(super) gen: RingAllReduce,
    /// Bytes of a block (the first `extra` blocks have one element more).
    pub(super) block_bytes: u64,
    /// Bytes of an element: a longer block has this many more.
    pub(super) elem_bytes: u64,
    /// Blocks `0..extra` are the longer ones.
    pub(super) extra: u64,
    /// Bytes and pieces of a message still arriving in several writes (see [`MAX_WRITE`]).
    pub(super) partial_len: u64,
    pub(super) partial: Vec<Bytes>,
    /// Arrivals that are not simply "the expected length, no payload", as `(receive step,
    /// length, payload)`, in arrival order.
    pub(super) odd: VecDeque<(u32, u64, Option<Bytes>)>,
}

impl RingBlocks {
    /// Bytes step `i` moves.
    #[inline]
    pub(super) fn bytes(&self, progress: &RingProgress, i: u32) -> u64 {
        if !progress.has(RingProgress::UNEVEN) {
            return progress.block();
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

impl JobState {
    /// A write of `len` bytes for a ring job came from `src` on `channel`: assembles it into
    /// the message its next receive expects. Returns `None` when the ring does not take
    /// messages from there (an unexpected message), else whether a whole message arrived.
    #[inline]
    pub(super) fn ring_arrival(
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
        let usual = !h.has(RingProgress::UNEVEN | RingProgress::ASSEMBLING)
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
    pub(super) fn ring_arrival_slow(
        &mut self,
        k: u64,
        len: u64,
        payload: Option<Bytes>,
    ) -> Option<bool> {
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
            h.set(RingProgress::ASSEMBLING, true);
            return Some(false);
        }
        h.set(RingProgress::ASSEMBLING, false);
        let total = std::mem::take(&mut c.partial_len);
        let data = join_pieces(&mut c.partial, total);
        if data.is_some() || expected != Some(total) {
            c.odd
                .push_back((k.min(u64::from(u32::MAX)) as u32, total, data));
            h.set(RingProgress::ODD, true);
        }
        h.waiting += 1;
        Some(true)
    }

    /// Runs a ring job's steps until none can run now: applies the receives whose messages
    /// are there, posts the sends whose receive has completed, and again while either moved.
    pub(super) fn run_ring(&mut self, j: usize, api: &mut dyn Transport, cx: &mut RankCtx<'_>) {
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
                let (mut message, mut expected) = ((h.block(), None), h.block());
                if h.has(RingProgress::ODD | RingProgress::UNEVEN) {
                    let Steps::Ring(c) = &mut self.steps else {
                        return;
                    };
                    expected = c.bytes(h, s);
                    message.0 = expected;
                    if c.odd.front().is_some_and(|o| o.0 == s) {
                        if let Some((_, l, p)) = c.odd.pop_front() {
                            message = (l, p);
                        }
                        h.set(RingProgress::ODD, !c.odd.is_empty());
                    }
                }
                // `TIMED_REDUCE`: `reduce_rate` is on a line a message does not read.
                let expect = Expect {
                    len: expected,
                    reduce,
                    timed: h.has(RingProgress::TIMED_REDUCE),
                };
                if self.receive(j, s, message, expect, api, cx) {
                    // Reduce-Scatter receives complete in list order: counting them is enough.
                    if reduce {
                        self.ring.rs_done += 1;
                    }
                    self.note_done(s, now);
                }
            }
            while self.ring.can_send() {
                let h = &mut self.ring;
                let s = h.next_send;
                h.next_send += 2;
                moved = true;
                let to = (h.next_host, h.channel, h.class);
                let mut message = (h.block(), None);
                if h.has(RingProgress::UNEVEN | RingProgress::DATA) {
                    let Steps::Ring(c) = &self.steps else {
                        return;
                    };
                    message.0 = c.bytes(h, s);
                    message.1 = self.send_payload(s);
                }
                self.post(j, s, to, message, api, cx);
                self.note_done(s, now);
            }
            if !moved {
                return;
            }
        }
    }
}
