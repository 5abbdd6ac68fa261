//! How partitions that are not in the same process exchange frames and agree on the next window.
//!
//! The window loop ([`super::parallel::run_parallel`]) runs the partitions of one process on its
//! threads. Between two windows every partition has sent its frames for the others and
//! published its earliest pending event and halt request; one thread then closes the window.
//! What closing needs from the world outside the process is behind [`Exchange`]: which
//! partitions are here, where frames for the others go, and how this process's bound combines
//! with the others' into the next window's. Threads in one process ([`Local`]) need nothing
//! from outside; MPI ranks (the `mpi` feature, [`super::mpi`]) swap the frames that cross ranks
//! and reduce the bounds, once per window.

use super::worker::Remote;
use super::EngineError;
use crate::units::Time;

/// What one process knows at a window boundary, and what all of them agree on after it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Bound {
    /// The earliest event pending (or just sent) in the process's partitions (ps; `u64::MAX`:
    /// none).
    pub(crate) next: u64,
    /// The earliest halt request ([`super::Ctx::halt`]; `u64::MAX`: none).
    pub(crate) halt: u64,
    /// True when the run was asked to stop ([`super::Progress::cancel`]).
    pub(crate) cancel: bool,
}

// Bounds of several processes are met only over MPI.
#[cfg_attr(not(feature = "mpi"), allow(dead_code))]
impl Bound {
    /// The bound of a process that has neither events nor requests.
    pub(crate) const IDLE: Bound = Bound {
        next: u64::MAX,
        halt: u64::MAX,
        cancel: false,
    };

    /// Both bounds together: the earlier events and requests, either cancel.
    pub(crate) fn meet(self, other: Bound) -> Bound {
        Bound {
            next: self.next.min(other.next),
            halt: self.halt.min(other.halt),
            cancel: self.cancel || other.cancel,
        }
    }
}

/// What comes after a window, decided from the bound of all processes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum NextWindow {
    /// Another window, ending (exclusive) at this time (ps).
    Until(u64),
    /// No event is left before the limit (`until`, or a halt request's grace).
    Finished,
    /// The run was asked to stop.
    Cancelled,
}

impl Bound {
    /// The window after this bound (of all processes) in a run stopping at `until`, whose halt
    /// grace is `grace` (ps) and whose lookahead is `lookahead`: it starts at the earliest
    /// pending event and lasts one lookahead, but ends at `until` and at the earliest halt
    /// request plus its grace (as [`super::worker::PartitionState::halt_end`]).
    pub(crate) fn next_window(self, until: Time, grace: u64, lookahead: Time) -> NextWindow {
        let halt_end = match self.halt {
            u64::MAX => u64::MAX,
            t => t.saturating_add(grace).saturating_add(1),
        };
        let limit = until.ps().min(halt_end.saturating_sub(1));
        if self.cancel {
            NextWindow::Cancelled
        } else if self.next == u64::MAX || self.next > limit {
            NextWindow::Finished
        } else {
            NextWindow::Until(
                self.next
                    .saturating_add(lookahead.ps())
                    .min(limit.saturating_add(1)),
            )
        }
    }
}

/// The partition exchange of a process with the others of the same run.
///
/// Partitions are numbered globally (as in [`super::partition::Plan`]); a process runs some
/// of them, numbered locally `0..n` in increasing global order.
pub(crate) trait Exchange: Sync {
    /// The local index of global partition `part` when it runs in this process.
    fn local(&self, part: usize) -> Option<usize>;
    /// Keeps `frames` for global partition `part`, which runs in another process, until the
    /// window closes. Called by the partitions' tasks, from any thread.
    fn post(&self, part: usize, frames: Vec<Remote>);
    /// Closes a window: sends what [`Exchange::post`] kept, hands every frame received for a
    /// local partition to `deliver` (with that partition's local index), and returns the bound
    /// of all processes. Called by one thread at a time, the others waiting.
    fn close(
        &self,
        mine: Bound,
        deliver: &mut dyn FnMut(usize, Vec<Remote>),
    ) -> Result<Bound, EngineError>;
}

/// All partitions in this process: nothing to exchange with anyone else.
pub(crate) struct Local;

impl Exchange for Local {
    #[inline]
    fn local(&self, part: usize) -> Option<usize> {
        Some(part)
    }

    fn post(&self, _part: usize, _frames: Vec<Remote>) {
        // Every partition is local: `local` never says otherwise, so nothing is posted.
    }

    fn close(
        &self,
        mine: Bound,
        _deliver: &mut dyn FnMut(usize, Vec<Remote>),
    ) -> Result<Bound, EngineError> {
        Ok(mine)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meeting_bounds_keeps_the_earliest_and_any_cancel() {
        let a = Bound {
            next: 5,
            halt: u64::MAX,
            cancel: false,
        };
        let b = Bound {
            next: 9,
            halt: 7,
            cancel: true,
        };
        assert_eq!(
            a.meet(b),
            Bound {
                next: 5,
                halt: 7,
                cancel: true
            }
        );
        assert_eq!(Bound::IDLE.meet(a), a);
    }
}
