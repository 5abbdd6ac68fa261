//! Pacing: the engine follows the wall clock.
//!
//! Virtual time is wall time since the start times the scale (`--time-scale`): at scale 1 a
//! 1 ms link takes 1 ms of the programs' time. The loop keeps the engine conservatively
//! behind the wall clock: it handles every event due before *now*, never one after, because a
//! frame a program sends a moment later may change what happens next. A frame read from a
//! namespace enters its host's gateway at the virtual time it was read; a frame the fabric
//! delivers is written into its namespace as soon as the engine has handled its arrival.
//!
//! Nothing here can make the engine faster than it is. When it cannot keep up, deliveries are
//! written later than they were due and frames enter later than they were read: both are
//! measured ([`Lateness`]) and reported, never hidden.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use crossbeam::channel::{Receiver, RecvTimeoutError};
use fabemu_fabric::engine::{ActorId, EngineError, Stepper};
use fabemu_fabric::histogram::{LatencyHistogram, Percentiles};
use fabemu_fabric::units::Time;
use serde::Serialize;

use super::gateway::{EmuNode, WAKE};

/// The map between wall-clock and virtual time.
#[derive(Clone, Copy, Debug)]
pub struct Clock {
    start: Instant,
    /// Virtual picoseconds per wall nanosecond, divided by 1000 (the scale).
    scale: f64,
}

impl Clock {
    /// Virtual time zero now, advancing `scale` times as fast as the wall clock.
    pub fn start(scale: f64) -> Clock {
        Clock {
            start: Instant::now(),
            scale,
        }
    }

    /// The virtual time of wall-clock instant `at` (zero before the start).
    pub fn virtual_at(&self, at: Instant) -> Time {
        let wall_ps = at.saturating_duration_since(self.start).as_nanos() as f64 * 1000.0;
        Time((wall_ps * self.scale) as u64)
    }

    /// The wall-clock instant of virtual time `t`.
    pub fn wall_at(&self, t: Time) -> Instant {
        let wall_ns = t.ps() as f64 / self.scale / 1000.0;
        self.start + Duration::from_nanos(wall_ns as u64)
    }
}

/// A frame a program sent, as read from its namespace.
pub struct Inbound {
    /// The sending host (rank).
    pub host: usize,
    /// The Ethernet frame, without FCS.
    pub frame: Vec<u8>,
    /// When it was read.
    pub at: Instant,
}

/// How late the emulation was against the wall clock (wall-clock picoseconds).
#[derive(Clone, Debug, Default, Serialize)]
pub struct Lateness {
    /// Deliveries: wall time a frame was written into its namespace minus the wall time its
    /// virtual arrival was due.
    pub delivery: Option<Percentiles>,
    /// Injections: how much later than the wall time it was read a frame entered the fabric
    /// (the engine had already passed that time).
    pub injection: Option<Percentiles>,
    /// Deliveries later than [`LATE`].
    pub late_frames: u64,
    /// Wall time the loop ran, seconds.
    pub wall_s: f64,
    /// Virtual time reached, picoseconds.
    pub reached_ps: u64,
}

/// Where the loop writes a delivered frame: the host's namespace (a TAP) in an emulation, a
/// vector in tests.
pub trait Deliver {
    /// Writes `frame` into host `host`'s namespace.
    fn deliver(&mut self, host: usize, frame: &[u8]);
}

/// A delivery later than this (wall time) counts as late.
pub const LATE: Duration = Duration::from_micros(100);

/// Runs the engine behind the wall clock until `stop` is set or virtual time reaches `until`:
/// frames from `inbound` enter their hosts' gateways (`hosts[rank]` is the host's actor id),
/// deliveries go to `out`.
///
/// `backlog`, when given, is per host the bytes read from its interface and not yet on the
/// wire: the loop takes off what it injected and its gateway sent, so that the readers can
/// stop reading while a host's queue is full, as a NIC's full ring stops its driver (the
/// kernel's own queue then pushes back on the sender, as on a real host).
#[allow(clippy::too_many_arguments)] // the loop's whole world, each a different edge
pub fn run(
    stepper: &mut Stepper<EmuNode>,
    hosts: &[ActorId],
    clock: Clock,
    until: Time,
    inbound: &Receiver<Inbound>,
    out: &mut dyn Deliver,
    stop: &AtomicBool,
    backlog: Option<&[AtomicU64]>,
) -> Result<Lateness, EngineError> {
    raise_priority();
    let mut delivery = LatencyHistogram::new();
    let mut injection = LatencyHistogram::new();
    let mut late_frames = 0u64;
    let t0 = Instant::now();
    let mut scratch: Vec<(usize, Time, Bytes)> = Vec::new();
    let mut sent = vec![0u64; hosts.len()];
    loop {
        // Frames the programs sent, at the time they were read.
        while let Ok(f) = inbound.try_recv() {
            inject(stepper, hosts, clock, f, &mut injection, backlog);
        }
        let now = Instant::now();
        let target = clock.virtual_at(now).min(until);
        stepper.run_until(target)?;
        // What arrived: into the namespaces, lateness measured against the wall clock.
        for (rank, &id) in hosts.iter().enumerate() {
            if let Some(gw) = stepper.actor_mut(id).and_then(EmuNode::gateway_mut) {
                scratch.extend(gw.take_delivered().map(|(t, b)| (rank, t, b)));
                let now_sent = gw.stats().bytes_in;
                if let (Some(b), Some(last)) =
                    (backlog.and_then(|b| b.get(rank)), sent.get_mut(rank))
                {
                    b.fetch_sub(now_sent - *last, Ordering::Relaxed);
                    *last = now_sent;
                }
            }
        }
        for (rank, t, bytes) in scratch.drain(..) {
            out.deliver(rank, &bytes);
            let late = Instant::now().saturating_duration_since(clock.wall_at(t));
            if late > LATE {
                late_frames += 1;
            }
            delivery.record(late.as_nanos() as u64 * 1000);
        }
        if stop.load(Ordering::Relaxed) || target >= until {
            break;
        }
        // Wait for the next event or the next frame from a program, whichever comes first.
        // Sleeps are coarse (tens of microseconds of timer slack), so the last stretch
        // before an event is spun: yielding instead would hand a busy machine's core away
        // for a whole time slice (milliseconds).
        let wait = match stepper.next_event() {
            Some(t) => clock.wall_at(t).saturating_duration_since(Instant::now()),
            None => Duration::from_millis(5),
        }
        .min(Duration::from_millis(5));
        if wait > Duration::from_micros(200) {
            match inbound.recv_timeout(wait - Duration::from_micros(150)) {
                Ok(f) => inject(stepper, hosts, clock, f, &mut injection, backlog),
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => std::thread::sleep(wait),
            }
        } else if !wait.is_zero() {
            std::hint::spin_loop();
        }
    }
    Ok(Lateness {
        delivery: delivery.percentiles(),
        injection: injection.percentiles(),
        late_frames,
        wall_s: t0.elapsed().as_secs_f64(),
        reached_ps: stepper.reached().ps(),
    })
}

/// Puts a frame a program sent into its host's gateway at the virtual time it was read (or
/// at the time the engine reached, if that is later: the lateness recorded).
fn inject(
    stepper: &mut Stepper<EmuNode>,
    hosts: &[ActorId],
    clock: Clock,
    f: Inbound,
    injection: &mut LatencyHistogram,
    backlog: Option<&[AtomicU64]>,
) {
    let at = clock.virtual_at(f.at);
    let Some(&id) = hosts.get(f.host) else {
        return;
    };
    let queued = stepper
        .actor_mut(id)
        .and_then(EmuNode::gateway_mut)
        .is_some_and(|gw| gw.offer(&f.frame));
    if queued {
        if let Some(set) = stepper.wake(id, at, WAKE) {
            injection.record(wall_ps(clock, set, at));
        }
    } else if let Some(b) = backlog.and_then(|b| b.get(f.host)) {
        b.fetch_sub(f.frame.len() as u64, Ordering::Relaxed);
    }
}

/// Wall-clock picoseconds between two virtual times (`set` not before `asked`).
fn wall_ps(clock: Clock, set: Time, asked: Time) -> u64 {
    let v = set.ps().saturating_sub(asked.ps()) as f64;
    (v / clock.scale) as u64
}

/// Asks for the highest priority of the normal scheduling policy for this thread (niceness
/// -20): a sleeping pacing loop is then woken ahead of the programs it serves when the machine
/// is busy. Not a real-time policy: a loop that spins must not starve the programs. Where the
/// process may not (no CAP_SYS_NICE), it runs at its normal priority.
pub fn raise_priority() {
    use thread_priority::{set_current_thread_priority, ThreadPriority};
    if let Err(e) = set_current_thread_priority(ThreadPriority::Max) {
        tracing::debug!("pacing loop keeps its normal priority: {e:?}");
    }
}
