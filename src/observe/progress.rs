//! Progress on stderr for runs longer than about a second: simulated time reached, events per
//! second, and an ETA when the end is known (the scenario sets `until`).
//!
//! A watcher thread polls the engine's [`Progress`] atomics (the engine only bumps counters);
//! the bar appears after [`DELAY`], only on a terminal, never with `--quiet`.

use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use fabemu_fabric::engine::Progress;
use fabemu_fabric::units::Time;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// How long a run goes before its progress shows.
pub const DELAY: Duration = Duration::from_secs(1);
const TICK: Duration = Duration::from_millis(100);

/// A running progress display; stops (and clears its line) when dropped.
pub struct Watcher {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
}

impl Watcher {
    /// Starts watching `progress` if stderr is a terminal and `quiet` is off; `end` is the
    /// simulated time the run stops at, when known.
    pub fn start(progress: Arc<Progress>, end: Option<Time>, quiet: bool) -> Option<Watcher> {
        if quiet || !std::io::stderr().is_terminal() {
            return None;
        }
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let handle = std::thread::Builder::new()
            .name("fabemu-progress".into())
            .spawn(move || watch(&progress, end, &flag))
            .ok()?;
        Some(Watcher {
            stop,
            handle: Some(handle),
        })
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

fn watch(progress: &Progress, end: Option<Time>, stop: &AtomicBool) {
    let t0 = Instant::now();
    let mut bar: Option<ProgressBar> = None;
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(TICK);
        let elapsed = t0.elapsed();
        if elapsed < DELAY {
            continue;
        }
        let sim = Time(progress.sim_time_ps.load(Ordering::Relaxed));
        let events = progress.events.load(Ordering::Relaxed);
        let b = bar.get_or_insert_with(|| new_bar(end));
        let rate = events as f64 / elapsed.as_secs_f64().max(1e-9);
        let mut msg = format!("simulated {sim}, {:.2} M events/s", rate / 1e6);
        if let Some(end) = end.filter(|e| e.ps() > 0 && *e != Time::NEVER) {
            let done = (sim.ps() as f64 / end.ps() as f64).clamp(0.0, 1.0);
            b.set_position((done * 1000.0) as u64);
            if done > 0.0 {
                let left = elapsed.as_secs_f64() * (1.0 - done) / done;
                msg.push_str(&format!(", ETA {left:.0} s"));
            }
        }
        b.set_message(msg);
    }
    if let Some(b) = bar {
        b.finish_and_clear();
    }
}

fn new_bar(end: Option<Time>) -> ProgressBar {
    let b = match end {
        Some(e) if e != Time::NEVER => {
            let b = ProgressBar::with_draw_target(Some(1000), ProgressDrawTarget::stderr());
            if let Ok(s) = ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {msg}") {
                b.set_style(s.progress_chars("=> "));
            }
            b
        }
        _ => {
            let b = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
            if let Ok(s) = ProgressStyle::with_template("{spinner} {elapsed_precise} {msg}") {
                b.set_style(s);
            }
            b
        }
    };
    b.enable_steady_tick(TICK);
    b
}
