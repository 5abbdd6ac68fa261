//! The workers of a parallel run: partitions run window after window as tasks that any worker
//! may claim (see the engine's module doc, "Threads are never a trap").

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Mutex, PoisonError};

use crossbeam::channel::{unbounded, Receiver, Sender};
use crossbeam::utils::CachePadded;

use super::barrier::Gate;
use super::exchange::{Bound, Exchange, NextWindow};
use super::worker::{Partition, Remote};
use super::{Actor, EngineError, Progress};
use crate::units::Time;

/// How a parallel run ended: the windows run, and whether it was cancelled.
pub(crate) struct ParallelEnd {
    /// Synchronization windows executed.
    pub(crate) windows: u64,
    /// True when [`Progress::cancel`] stopped the run (every partition at the same window).
    pub(crate) cancelled: bool,
}

/// How far a parallel run got (shared by the workers; written by the one closing a generation).
const RUNNING: u8 = 0;
/// No event left before the limit.
const FINISHED: u8 = 1;
/// [`Progress::cancel`] was seen when a generation closed.
const CANCELLED: u8 = 2;

/// What the workers of a parallel run share.
struct Shared<'a, A> {
    /// The partitions; a worker locks one while it runs that partition's task.
    slots: Vec<Mutex<&'a mut Partition<A>>>,
    /// Per partition, the generation it can next be claimed in: claiming `i` in generation `g`
    /// is the one compare-exchange `g -> g + 1` that succeeds.
    claimed: Vec<CachePadded<AtomicU64>>,
    /// Tasks finished in the current generation.
    done: CachePadded<AtomicUsize>,
    /// Per partition, after its last task: the earliest event it holds or has just sent.
    nexts: Vec<CachePadded<AtomicU64>>,
    /// Per partition, after its last task: its earliest halt request.
    halts: Vec<CachePadded<AtomicU64>>,
    /// Decided when a generation closes, read by every task of the next one: where the window
    /// ends (exclusive), the earliest halt request, and whether to go on.
    window_end: AtomicU64,
    ghalt: AtomicU64,
    outcome: AtomicU8,
    windows: AtomicU64,
    /// Frames for each partition, sent by the others.
    txs: Vec<Sender<Vec<Remote>>>,
    rxs: Vec<Receiver<Vec<Remote>>>,
    /// The first failure of a task.
    failure: Mutex<Option<EngineError>>,
    gate: Gate,
}

/// Runs `parts` in windows on one worker thread per partition, `cores` of which can run at
/// once. Results do not depend on which worker runs which partition. `parts` are the partitions
/// of this process, in global order; `exchange` reaches the others' (see [`Exchange`]).
///
/// The run advances in generations. Generation 0 starts every partition; each later one runs
/// one window of every partition. A generation's tasks (one per partition) are claimed by the
/// workers, each trying its own partition first, then any other still unclaimed: a worker that
/// is not running (its core is taken by another thread or process) holds nobody up, because
/// the running ones take its partitions over, and no worker ever waits for a peer that has no
/// task in hand. The worker that finishes a generation's last task closes it alone: it takes
/// the global minimum of the partitions' next events (the next window is `[min, min +
/// lookahead)`), the earliest halt request, and reads the cancel flag once, so every worker
/// acts on the same decision and all partitions stop at the same window boundary.
pub(crate) fn run_parallel<A: Actor, X: Exchange>(
    parts: &mut [Partition<A>],
    lookahead: Time,
    until: Time,
    cores: usize,
    progress: &Progress,
    exchange: &X,
) -> Result<ParallelEnd, EngineError> {
    let n = parts.len();
    let grace = parts.first().map_or(1, |p| p.state.halt_grace);
    let padded = |v: u64| {
        (0..n)
            .map(|_| CachePadded::new(AtomicU64::new(v)))
            .collect()
    };
    let (txs, rxs) = (0..n).map(|_| unbounded()).unzip();
    let shared = Shared {
        slots: parts.iter_mut().map(Mutex::new).collect(),
        claimed: padded(0),
        done: CachePadded::new(AtomicUsize::new(0)),
        nexts: padded(u64::MAX),
        halts: padded(u64::MAX),
        window_end: AtomicU64::new(0),
        ghalt: AtomicU64::new(u64::MAX),
        outcome: AtomicU8::new(RUNNING),
        windows: AtomicU64::new(0),
        txs,
        rxs,
        failure: Mutex::new(None),
        gate: Gate::new(n, cores),
    };
    let close = |sh: &Shared<'_, A>| -> Result<(), EngineError> {
        sh.done.store(0, Ordering::Relaxed);
        let min_of = |v: &[CachePadded<AtomicU64>]| {
            v.iter()
                .map(|x| x.load(Ordering::Relaxed))
                .min()
                .unwrap_or(u64::MAX)
        };
        let mine = Bound {
            next: min_of(&sh.nexts),
            halt: min_of(&sh.halts),
            cancel: progress.cancel.load(Ordering::Relaxed),
        };
        let all = exchange.close(mine, &mut |i, frames| {
            // The receiver lives as long as `sh`: a send cannot fail.
            let _ = sh.txs[i].send(frames);
        })?;
        sh.ghalt.store(all.halt, Ordering::Relaxed);
        match all.next_window(until, grace, lookahead) {
            NextWindow::Cancelled => sh.outcome.store(CANCELLED, Ordering::Relaxed),
            NextWindow::Finished => sh.outcome.store(FINISHED, Ordering::Relaxed),
            NextWindow::Until(end) => {
                sh.window_end.store(end, Ordering::Relaxed);
                sh.windows.fetch_add(1, Ordering::Relaxed);
            }
        }
        // Publishes all of the above (and every task's state) to the next generation.
        sh.gate.open_next();
        Ok(())
    };
    let fail = |sh: &Shared<'_, A>, e: EngineError| {
        let mut f = sh.failure.lock().unwrap_or_else(PoisonError::into_inner);
        if f.is_none() {
            *f = Some(e);
        }
        drop(f);
        sh.gate.abort();
    };

    std::thread::scope(|s| {
        for me in 0..n {
            let (shared, close, fail) = (&shared, &close, &fail);
            s.spawn(move || {
                let body = AssertUnwindSafe(|| worker(shared, me, progress, exchange, close));
                let err = match catch_unwind(body) {
                    Ok(Ok(())) | Ok(Err(EngineError::Aborted)) => return,
                    Ok(Err(e)) => e,
                    Err(panic) => {
                        let msg = panic
                            .downcast_ref::<String>()
                            .cloned()
                            .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                            .unwrap_or_else(|| "unknown panic".into());
                        EngineError::Failure(format!("worker {me} panicked: {msg}"))
                    }
                };
                // This worker's task will never finish: release the others.
                fail(shared, err);
            });
        }
    });
    if let Some(e) = shared
        .failure
        .into_inner()
        .unwrap_or_else(PoisonError::into_inner)
    {
        return Err(e);
    }
    if shared.gate.is_aborted() {
        return Err(EngineError::Aborted);
    }
    Ok(ParallelEnd {
        windows: shared.windows.load(Ordering::Relaxed),
        cancelled: shared.outcome.load(Ordering::Relaxed) == CANCELLED,
    })
}

/// One worker: claims and runs tasks generation after generation until the run ends.
fn worker<A: Actor, X: Exchange>(
    sh: &Shared<'_, A>,
    me: usize,
    progress: &Progress,
    exchange: &X,
    close: &impl Fn(&Shared<'_, A>) -> Result<(), EngineError>,
) -> Result<(), EngineError> {
    let n = sh.slots.len();
    let mut waiter = sh.gate.waiter();
    loop {
        let gen = sh.gate.generation();
        if sh.outcome.load(Ordering::Relaxed) != RUNNING {
            return Ok(());
        }
        if sh.gate.is_aborted() {
            return Err(EngineError::Aborted);
        }
        // Own partition first (its state is in this core's cache), then any left unclaimed.
        for k in 0..n {
            let i = (me + k) % n;
            let c = &sh.claimed[i];
            if c.load(Ordering::Relaxed) != gen
                || c.compare_exchange(gen, gen + 1, Ordering::AcqRel, Ordering::Relaxed)
                    .is_err()
            {
                continue;
            }
            task(sh, i, gen, progress, exchange)?;
            // Release: this task's state and what it published, for whoever closes.
            if sh.done.fetch_add(1, Ordering::AcqRel) + 1 == n {
                close(sh)?;
                break;
            }
        }
        if sh.gate.generation() == gen {
            sh.gate.wait_past(&mut waiter, gen)?;
        }
    }
}

/// Partition `i`'s task in generation `gen`: start its actors (generation 0) or run one window;
/// then send its frames for other partitions and publish its next event and halt request.
fn task<A: Actor, X: Exchange>(
    sh: &Shared<'_, A>,
    i: usize,
    gen: u64,
    progress: &Progress,
    exchange: &X,
) -> Result<(), EngineError> {
    let mut slot = sh.slots[i].lock().unwrap_or_else(PoisonError::into_inner);
    let part: &mut Partition<A> = &mut slot;
    if gen == 0 {
        part.start_all();
    } else {
        // Every frame sent to it in the previous generation (maybe some of this one's: they
        // lie at or after this window's end, so taking them early changes nothing).
        while let Ok(batch) = sh.rxs[i].try_recv() {
            part.ingest(batch);
        }
        part.state.halt = part.state.halt.min(sh.ghalt.load(Ordering::Relaxed));
        // A window cut short by a cancel is the last: the closing worker sees the flag too.
        part.run_window(sh.window_end.load(Ordering::Relaxed), progress)?;
    }
    let mut next = part.state.queue.next_time();
    for (dst, out) in part.state.outbox.iter_mut().enumerate() {
        if let Some(t) = out.iter().map(|r| r.key.time).min() {
            next = next.min(t);
            match exchange.local(dst) {
                // The receiver lives as long as `sh`: a send cannot fail.
                Some(l) => {
                    let _ = sh.txs[l].send(std::mem::take(out));
                }
                None => exchange.post(dst, std::mem::take(out)),
            }
        }
    }
    sh.nexts[i].store(next, Ordering::Relaxed);
    sh.halts[i].store(part.state.halt, Ordering::Relaxed);
    Ok(())
}
