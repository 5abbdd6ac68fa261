//! Measuring faults from the NIC's side (only when the run has faults; a NIC without a watch
//! pays one branch per posted message and per ACK).
//!
//! Two things the faults report needs and only the NIC sees:
//! - **Messages in flight during a fault, and delayed by it.** Every message posted to the NIC
//!   counts — the workload's `messages:` and every message of a collective alike. A message is
//!   in flight during a window `[from, until)` when it was posted before `until` and was not
//!   acknowledged by `from`; it is delayed when it was acknowledged at or after `until`, or
//!   never. An RC queue pair completes its messages in order, so each QP keeps the post times of
//!   its unacknowledged messages in a FIFO.
//! - **Loss recoveries.** A QP's recovery starts when it detects a loss (a NAK, or a
//!   retransmission timeout) and ends when everything it had sent by then — and by any further
//!   detection during it — is acknowledged. The faults report matches them with the QPs that
//!   lost frames to each fault (see `FaultHit` in [`crate::fault`]).

use std::collections::VecDeque;

use super::*;

/// One finished loss recovery of a QP.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Recovery {
    /// The peer host (its index).
    pub peer: u32,
    /// The QP's traffic class.
    pub class: ClassId,
    /// When the loss was detected.
    pub start: Time,
    /// When everything sent by then was acknowledged; `None` if it never was (the run ended
    /// first, or the QP gave up).
    pub end: Option<Time>,
}

/// A NIC's fault measurements (see the module doc).
#[derive(Clone, Debug, Default)]
pub struct FaultWatch {
    /// Per fault entry, its first window `[from, until)`.
    windows: Vec<(Time, Time)>,
    /// Per window, messages in flight during it that were acknowledged.
    done_in_flight: Vec<u64>,
    /// Per window, of those, acknowledged at or after `until`.
    done_delayed: Vec<u64>,
    /// Per QP (by index), post times of its unacknowledged messages, oldest first.
    posted: Vec<VecDeque<Time>>,
    /// Per QP, the recovery under way: its start, the PSN everything below which must be
    /// acknowledged to end it, the peer and the class.
    open: Vec<Option<(Time, u64, u32, ClassId)>>,
    /// Finished recoveries, in the order they ended.
    done: Vec<Recovery>,
}

impl FaultWatch {
    /// A watch over these windows (one per fault entry).
    pub fn new(windows: Vec<(Time, Time)>) -> FaultWatch {
        let n = windows.len();
        FaultWatch {
            windows,
            done_in_flight: vec![0; n],
            done_delayed: vec![0; n],
            ..FaultWatch::default()
        }
    }

    fn grow(&mut self, qp: usize) {
        if self.posted.len() <= qp {
            self.posted.resize_with(qp + 1, VecDeque::new);
            self.open.resize(qp + 1, None);
        }
    }

    pub(super) fn posted(&mut self, qp: usize, now: Time) {
        self.grow(qp);
        self.posted[qp].push_back(now);
    }

    pub(super) fn acknowledged(&mut self, qp: usize, now: Time) {
        let Some(start) = self.posted.get_mut(qp).and_then(VecDeque::pop_front) else {
            return;
        };
        for (k, &(from, until)) in self.windows.iter().enumerate() {
            if start < until && now > from {
                self.done_in_flight[k] += 1;
                if now >= until {
                    self.done_delayed[k] += 1;
                }
            }
        }
    }

    /// A loss detected on QP `qp` (toward `peer`, class `class`) at `now`, with `sent` the PSN
    /// after the highest sent.
    pub(super) fn loss(&mut self, qp: usize, peer: u32, class: ClassId, now: Time, sent: u64) {
        self.grow(qp);
        let o = &mut self.open[qp];
        *o = Some(match *o {
            Some((start, upto, ..)) => (start, upto.max(sent), peer, class),
            None => (now, sent, peer, class),
        });
    }

    /// QP `qp` has everything below `una` acknowledged at `now`.
    pub(super) fn progress(&mut self, qp: usize, una: u64, now: Time) {
        if let Some(Some((start, upto, peer, class))) = self.open.get(qp).copied() {
            if una >= upto {
                self.open[qp] = None;
                self.done.push(Recovery {
                    peer,
                    class,
                    start,
                    end: Some(now),
                });
            }
        }
    }

    /// Every loss recovery: the finished ones in the order they ended, then the ones never
    /// finished (QP order).
    pub fn recoveries(&self) -> Vec<Recovery> {
        let mut v = self.done.clone();
        v.extend(
            self.open
                .iter()
                .flatten()
                .map(|&(start, _, peer, class)| Recovery {
                    peer,
                    class,
                    start,
                    end: None,
                }),
        );
        v
    }

    /// Per window: messages in flight during it and, of those, delayed by it — including the
    /// messages never acknowledged (in flight and delayed for every window that began before
    /// the run ended and that they were posted before the end of).
    pub fn message_counts(&self) -> Vec<(u64, u64)> {
        self.windows
            .iter()
            .enumerate()
            .map(|(k, &(_, until))| {
                let never = self
                    .posted
                    .iter()
                    .flatten()
                    .filter(|&&start| start < until)
                    .count() as u64;
                (self.done_in_flight[k] + never, self.done_delayed[k] + never)
            })
            .collect()
    }
}

impl Nic {
    /// Measures faults from this NIC (see the module doc): `windows` is each fault entry's
    /// first window. Call before the run, only when the run has faults.
    pub fn watch_faults(&mut self, windows: Vec<(Time, Time)>) {
        self.watch = Some(Box::new(FaultWatch::new(windows)));
        self.watched = true;
    }

    /// The fault measurements, when watched.
    pub fn fault_watch(&self) -> Option<&FaultWatch> {
        self.watch.as_deref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_and_recoveries_are_counted_by_the_rules() {
        let us = Time::from_us;
        // One window 10..20 us.
        let mut w = FaultWatch::new(vec![(us(10), us(20))]);
        // QP 0: posted at 0, acked at 5 (before the window: not in flight); posted at 6, acked
        // at 15 (in flight, not delayed); posted at 12, acked at 25 (delayed).
        for (post, ack) in [(0, 5), (6, 15), (12, 25)] {
            w.posted(0, us(post));
            w.acknowledged(0, us(ack));
        }
        // QP 1: posted at 19, never acked (in flight and delayed); posted at 30 (after the
        // window: neither).
        w.posted(1, us(19));
        w.posted(1, us(30));
        assert_eq!(w.message_counts(), vec![(3, 2)]);
        // A loss detected at 11 with PSNs below 8 sent, another at 13 with 12 sent: the
        // recovery ends when 12 is acknowledged, not 8.
        w.loss(0, 3, 0, us(11), 8);
        w.loss(0, 3, 0, us(13), 12);
        w.progress(0, 8, us(14));
        w.progress(0, 12, us(16));
        // QP 1 never recovers.
        w.loss(1, 4, 0, us(17), 2);
        let r = w.recoveries();
        assert_eq!(
            r,
            vec![
                Recovery {
                    peer: 3,
                    class: 0,
                    start: us(11),
                    end: Some(us(16)),
                },
                Recovery {
                    peer: 4,
                    class: 0,
                    start: us(17),
                    end: None,
                },
            ]
        );
    }
}
