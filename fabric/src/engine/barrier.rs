//! Where workers wait between windows: spin briefly, then yield, then sleep.
//!
//! The parallel run advances in generations (see `worker::run_parallel`): a generation ends
//! when every partition has run its task in it, and the worker finishing the last task opens the
//! next one. A worker with nothing left to claim waits for that in a [`Gate`].
//!
//! Windows are short (often a few microseconds of work), so when every worker has a core of its
//! own the cheapest hand-off is to spin: the release then costs about one cache-line transfer,
//! where a futex wake-up costs tens of microseconds. But spinning is a trap when the worker
//! being waited for is not running — threads share a core (`taskset`), or another process holds
//! the other core — since the spinner burns the time the laggard needs. So every wait goes
//! through three stages:
//!
//! 1. spin for at most the waiter's current budget of `spin_loop` rounds;
//! 2. yield the core a few times (a worker on the same core runs then);
//! 3. sleep on a condition variable until the generation changes.
//!
//! The spin budget adapts per worker, as an adaptive mutex does: a wait that ended while
//! spinning doubles it (up to [`SPIN_MAX`]), a wait that had to yield or sleep halves it (down to
//! [`SPIN_MIN`]). On a free machine the budget stays high and waits are spins; when workers are
//! descheduled it falls within a few windows to a spin far shorter than a window.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, PoisonError};

use crossbeam::utils::CachePadded;

use super::EngineError;

/// Largest spin budget (`spin_loop` rounds, tens of microseconds on current cores): long enough
/// to cover the usual imbalance between partitions within a window.
pub(crate) const SPIN_MAX: u32 = 1 << 14;
/// Smallest spin budget: a fraction of a microsecond, negligible next to a window's work.
pub(crate) const SPIN_MIN: u32 = 1 << 6;
/// Yields before sleeping: enough for a worker on the same core to finish its task.
const YIELDS: u32 = 4;

/// A generation counter that workers wait on (see the module documentation).
pub(crate) struct Gate {
    /// Initial spin budget for each worker.
    spin_start: u32,
    generation: CachePadded<AtomicU64>,
    /// Set when a worker failed: waiters leave with [`EngineError::Aborted`].
    aborted: AtomicBool,
    /// Workers asleep (or about to sleep) in stage 3.
    sleepers: CachePadded<AtomicU32>,
    lock: Mutex<()>,
    wake: Condvar,
}

/// One worker's side of the gate: its adaptive spin budget.
pub(crate) struct Waiter {
    spin: u32,
}

impl Gate {
    /// A gate for `workers` threads, of which `cores` can run at once.
    pub(crate) fn new(workers: usize, cores: usize) -> Gate {
        Gate {
            // With more workers than cores, someone is always descheduled: start low.
            spin_start: if workers <= cores { SPIN_MAX } else { SPIN_MIN },
            generation: CachePadded::new(AtomicU64::new(0)),
            aborted: AtomicBool::new(false),
            sleepers: CachePadded::new(AtomicU32::new(0)),
            lock: Mutex::new(()),
            wake: Condvar::new(),
        }
    }

    /// A worker's handle on the gate.
    pub(crate) fn waiter(&self) -> Waiter {
        Waiter {
            spin: self.spin_start,
        }
    }

    /// The current generation. Everything written before it was opened is visible.
    #[inline]
    pub(crate) fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// True once [`Gate::abort`] was called.
    pub(crate) fn is_aborted(&self) -> bool {
        self.aborted.load(Ordering::Relaxed)
    }

    /// Opens the next generation (publishing everything written before) and wakes sleepers.
    pub(crate) fn open_next(&self) {
        // SeqCst pairs with the sleepers' registration: either a sleeper sees the new
        // generation, or this sees the sleeper and wakes it.
        self.generation.fetch_add(1, Ordering::SeqCst);
        if self.sleepers.load(Ordering::SeqCst) > 0 {
            self.wake_all();
        }
    }

    /// Waits until the generation is no longer `gen`. Returns [`EngineError::Aborted`] when
    /// [`Gate::abort`] was called (a worker failed and the generation may never change).
    pub(crate) fn wait_past(&self, w: &mut Waiter, gen: u64) -> Result<(), EngineError> {
        let released = || self.generation.load(Ordering::Acquire) != gen;
        // Stage 1: spin.
        for i in 0..w.spin {
            if released() {
                w.spin = (w.spin * 2).min(SPIN_MAX);
                return Ok(());
            }
            if i & 1023 == 1023 && self.is_aborted() {
                return Err(EngineError::Aborted);
            }
            std::hint::spin_loop();
        }
        // The spin did not suffice: the worker waited for is slow or not running. Spin less
        // next time.
        w.spin = (w.spin / 2).max(SPIN_MIN);
        // Stage 2: yield.
        for _ in 0..YIELDS {
            if released() {
                return Ok(());
            }
            if self.is_aborted() {
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
            Ok(())
        } else {
            Err(EngineError::Aborted)
        }
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

    /// Workers take turns opening generations, with more workers than cores are assumed so
    /// waits go through every stage; every worker sees every generation in order.
    #[test]
    fn waiters_follow_every_generation() {
        let n = 4u64;
        let rounds = 2000u64;
        let g = Gate::new(n as usize, 1);
        let ok: Vec<bool> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..n)
                .map(|me| {
                    let g = &g;
                    s.spawn(move || {
                        let mut w = g.waiter();
                        loop {
                            let gen = g.generation();
                            if gen >= rounds {
                                return gen == rounds;
                            }
                            if gen % n == me {
                                g.open_next();
                            } else if g.wait_past(&mut w, gen).is_err() {
                                return false;
                            }
                        }
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap_or(false)).collect()
        });
        assert_eq!(ok, vec![true; n as usize]);
    }

    /// A worker that fails never opens the next generation: its peers, asleep or spinning,
    /// leave with `Aborted`.
    #[test]
    fn abort_releases_sleepers() {
        let g = Gate::new(3, 1);
        let results: Vec<Result<(), EngineError>> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..2)
                .map(|_| {
                    let g = &g;
                    s.spawn(move || g.wait_past(&mut g.waiter(), 0))
                })
                .collect();
            // Give them time to fall asleep (not required for correctness).
            std::thread::sleep(std::time::Duration::from_millis(20));
            g.abort();
            hs.into_iter().map(|h| h.join().unwrap_or(Ok(()))).collect()
        });
        assert_eq!(results, vec![Err(EngineError::Aborted); 2]);
    }
}
