//! The barrier the workers meet at between windows: spin briefly, then yield, then sleep.
//!
//! Windows are short (often a few microseconds of work), so when every worker has a core of its
//! own, the cheapest hand-off is to spin: the release then costs about one cache-line transfer,
//! where a futex wake-up costs tens of microseconds. But spinning is a trap when a peer is not
//! running — the threads share a core (`taskset`), or another process holds the other core —
//! since the spinner burns the time the laggard needs. So every wait goes through three stages:
//!
//! 1. spin for at most the waiter's current budget of `spin_loop` rounds;
//! 2. yield the core a few times (a peer on the same core runs then);
//! 3. sleep on a condition variable until the last worker arrives and wakes the sleepers.
//!
//! The spin budget adapts per worker, as an adaptive mutex does: a wait that ended while
//! spinning doubles it (up to [`SPIN_MAX`]), a wait that had to yield or sleep halves it (down to
//! [`SPIN_MIN`]). On a free machine the budget stays high and waits are spins; when peers are
//! descheduled it falls within a few windows to a spin far shorter than a window, so a run never
//! spends more than a small fraction of its time waiting for a thread that cannot run.
//!
//! The barrier also carries the one decision all workers must share: the last worker to arrive
//! calls the `decide` closure (e.g. "was the run cancelled?") and every worker leaves with its
//! answer, so they all stop at the same window boundary or none does.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, PoisonError};

use crossbeam::utils::CachePadded;

use super::EngineError;

/// Largest spin budget (`spin_loop` rounds, tens of microseconds on current cores): long enough
/// to cover the usual imbalance between partitions within a window.
pub(crate) const SPIN_MAX: u32 = 1 << 14;
/// Smallest spin budget: a fraction of a microsecond, negligible next to a window's work.
pub(crate) const SPIN_MIN: u32 = 1 << 6;
/// Yields before sleeping: enough for a peer on the same core to run its window.
const YIELDS: u32 = 4;

/// A reusable barrier for `n` workers (see the module documentation).
pub(crate) struct Barrier {
    n: usize,
    /// Initial spin budget for each worker.
    spin_start: u32,
    count: CachePadded<AtomicUsize>,
    generation: CachePadded<AtomicUsize>,
    /// The decision of the last completed generation (written before it is published).
    decision: AtomicBool,
    /// Set when a worker failed: waiters leave with [`EngineError::Aborted`].
    aborted: AtomicBool,
    /// Workers asleep (or about to sleep) in stage 3.
    sleepers: CachePadded<AtomicU32>,
    lock: Mutex<()>,
    wake: Condvar,
}

/// One worker's side of the barrier: its adaptive spin budget.
pub(crate) struct Waiter {
    spin: u32,
}

impl Barrier {
    /// A barrier for `n` workers, of which `cores` can run at once.
    pub(crate) fn new(n: usize, cores: usize) -> Barrier {
        Barrier {
            n,
            // With more workers than cores, someone is always descheduled: start low.
            spin_start: if n <= cores { SPIN_MAX } else { SPIN_MIN },
            count: CachePadded::new(AtomicUsize::new(0)),
            generation: CachePadded::new(AtomicUsize::new(0)),
            decision: AtomicBool::new(false),
            aborted: AtomicBool::new(false),
            sleepers: CachePadded::new(AtomicU32::new(0)),
            lock: Mutex::new(()),
            wake: Condvar::new(),
        }
    }

    /// A worker's handle on the barrier.
    pub(crate) fn waiter(&self) -> Waiter {
        Waiter {
            spin: self.spin_start,
        }
    }

    /// Waits until all `n` workers arrived. The last one calls `decide`; every worker returns
    /// its answer. Returns [`EngineError::Aborted`] when [`Barrier::abort`] was called (a peer
    /// failed and will never arrive).
    pub(crate) fn wait(
        &self,
        w: &mut Waiter,
        decide: impl FnOnce() -> bool,
    ) -> Result<bool, EngineError> {
        let gen = self.generation.load(Ordering::Acquire);
        if self.count.fetch_add(1, Ordering::AcqRel) + 1 == self.n {
            self.count.store(0, Ordering::Relaxed);
            self.decision.store(decide(), Ordering::Relaxed);
            // SeqCst pairs with the sleepers' registration: either a sleeper sees the new
            // generation, or this sees the sleeper and wakes it.
            self.generation.fetch_add(1, Ordering::SeqCst);
            if self.sleepers.load(Ordering::SeqCst) > 0 {
                self.wake_all();
            }
            return Ok(self.decision.load(Ordering::Relaxed));
        }
        let released = || self.generation.load(Ordering::Acquire) != gen;
        // Stage 1: spin.
        for i in 0..w.spin {
            if released() {
                w.spin = (w.spin * 2).min(SPIN_MAX);
                return self.leave();
            }
            if i & 1023 == 1023 && self.aborted.load(Ordering::Relaxed) {
                return Err(EngineError::Aborted);
            }
            std::hint::spin_loop();
        }
        // The spin did not suffice: the peer is slow or not running. Spin less next time.
        w.spin = (w.spin / 2).max(SPIN_MIN);
        // Stage 2: yield.
        for _ in 0..YIELDS {
            if released() {
                return self.leave();
            }
            if self.aborted.load(Ordering::Relaxed) {
                return Err(EngineError::Aborted);
            }
            std::thread::yield_now();
        }
        // Stage 3: sleep.
        let mut guard = self.lock.lock().unwrap_or_else(PoisonError::into_inner);
        self.sleepers.fetch_add(1, Ordering::SeqCst);
        while self.generation.load(Ordering::SeqCst) == gen && !self.aborted.load(Ordering::SeqCst)
        {
            guard = self
                .wake
                .wait(guard)
                .unwrap_or_else(PoisonError::into_inner);
        }
        self.sleepers.fetch_sub(1, Ordering::SeqCst);
        drop(guard);
        if released() {
            self.leave()
        } else {
            Err(EngineError::Aborted)
        }
    }

    /// After the release: the decision of the generation just completed. It stays until the
    /// next generation completes, which needs this worker to arrive again.
    fn leave(&self) -> Result<bool, EngineError> {
        Ok(self.decision.load(Ordering::Relaxed))
    }

    /// Releases every waiter, now and later, with [`EngineError::Aborted`]: a worker failed.
    pub(crate) fn abort(&self) {
        self.aborted.store(true, Ordering::SeqCst);
        self.wake_all();
    }

    fn wake_all(&self) {
        // Taking the lock orders the notification after a sleeper's check of the generation.
        let _guard = self.lock.lock().unwrap_or_else(PoisonError::into_inner);
        self.wake.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Many generations with more workers than this machine has cores, so waiters go through
    /// every stage; each worker counts the decisions it saw, which must agree.
    #[test]
    fn all_workers_see_every_decision() {
        let n = 4;
        let rounds = 2000u32;
        let b = Barrier::new(n, 1);
        let seen: Vec<u32> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..n)
                .map(|_| {
                    let b = &b;
                    s.spawn(move || {
                        let mut w = b.waiter();
                        let mut trues = 0;
                        for r in 0..rounds {
                            if b.wait(&mut w, || r % 3 == 0).unwrap_or(false) {
                                trues += 1;
                            }
                        }
                        trues
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap_or(0)).collect()
        });
        let expect = (0..rounds).filter(|r| r % 3 == 0).count() as u32;
        assert_eq!(seen, vec![expect; n]);
    }

    /// A worker that fails never arrives: its peers, asleep or spinning, leave with `Aborted`.
    #[test]
    fn abort_releases_sleepers() {
        let b = Barrier::new(3, 1);
        let results: Vec<Result<bool, EngineError>> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..2)
                .map(|_| {
                    let b = &b;
                    s.spawn(move || b.wait(&mut b.waiter(), || false))
                })
                .collect();
            // Give them time to fall asleep (not required for correctness).
            std::thread::sleep(std::time::Duration::from_millis(20));
            b.abort();
            hs.into_iter()
                .map(|h| h.join().unwrap_or(Ok(true)))
                .collect()
        });
        assert_eq!(results, vec![Err(EngineError::Aborted); 2]);
    }
}
