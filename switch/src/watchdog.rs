//! The deadlock watchdog: egress queues that hold frames while paused for too long.
//!
//! A PFC deadlock (a cycle of buffers each waiting for the next, e.g. routes around a ring) shows
//! at every switch of the cycle as an egress (port, priority) that has frames and stays paused:
//! the pauses are refreshed forever and nothing moves. Per egress (port, priority) the switch
//! notes when it became *blocked* (paused while holding frames — while paused it cannot drain,
//! so it stays blocked until the pause ends) and arms a timer `deadlock_timeout` later; if the
//! same blocked stretch is still going when it fires, the queue is *stalled*.
//!
//! The switch only records: [`crate::Switch::stalled`] lists stalled queues and
//! [`crate::Switch::deadlock_detected_at`] says when the first was seen. Stopping the run and
//! naming the cycle (following paused ports through the wiring) belong to the engine and the
//! scenario runner; the switch's timer handler marks the one place to call them from.

use fabemu_fabric::units::Time;
use serde::Serialize;

use crate::priority::PRIORITIES;

/// An egress queue found stalled.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct StalledQueue {
    /// The egress port.
    pub port: usize,
    /// The priority.
    pub priority: u8,
    /// Bytes it holds.
    pub queued_bytes: u64,
    /// Since when it has been paused while holding frames.
    pub paused_since: Time,
}

/// Per port, the blocked stretches and stall marks of its priorities.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct PortWatch {
    /// Per priority, when the current blocked stretch began.
    pub(crate) blocked_since: [Option<Time>; PRIORITIES],
    /// Priorities whose current blocked stretch outlasted the timeout.
    pub(crate) stalled: u8,
}

impl PortWatch {
    /// Priority `p` became blocked at `now`: returns when to check it, if it was not already.
    pub(crate) fn block(&mut self, p: u8, now: Time, timeout: Time) -> Option<Time> {
        let b = &mut self.blocked_since[usize::from(p & 7)];
        if b.is_some() {
            return None;
        }
        *b = Some(now);
        Some(now.add(timeout))
    }

    /// Priority `p` is no longer blocked (its pause ended).
    pub(crate) fn unblock(&mut self, p: u8) {
        self.blocked_since[usize::from(p & 7)] = None;
        self.stalled &= !(1 << (p & 7));
    }

    /// The check armed for `p` fired at `now`: true when `p` is newly found stalled.
    pub(crate) fn check(&mut self, p: u8, now: Time, timeout: Time) -> bool {
        let bit = 1 << (p & 7);
        match self.blocked_since[usize::from(p & 7)] {
            Some(since) if since.add(timeout) <= now && self.stalled & bit == 0 => {
                self.stalled |= bit;
                true
            }
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stalls_only_when_blocked_throughout() {
        let t = Time::from_us(100);
        let mut w = PortWatch::default();
        assert_eq!(w.block(3, Time::from_us(1), t), Some(Time::from_us(101)));
        assert_eq!(w.block(3, Time::from_us(5), t), None, "already blocked");
        // Unblocked and blocked again: the old check must not fire.
        w.unblock(3);
        assert_eq!(w.block(3, Time::from_us(50), t), Some(Time::from_us(150)));
        assert!(!w.check(3, Time::from_us(101), t));
        assert!(w.check(3, Time::from_us(150), t));
        assert!(!w.check(3, Time::from_us(150), t), "reported once");
        assert_eq!(w.stalled, 1 << 3);
        w.unblock(3);
        assert_eq!(w.stalled, 0);
    }
}
