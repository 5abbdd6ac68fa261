//! Pacing: the engine follows the wall clock.
//!
//! Virtual time is wall time since the start times the scale (`--time-scale`): at scale 1 a
//! 1 ms link takes 1 ms of the programs' time. The loop keeps the engine conservatively
//! behind the wall clock: it handles every event due before *now*, never one after, because a
//! frame a program sends a moment later may change what happens next. A frame read from a
//! namespace enters its host's gateway at the virtual time it was read; a frame the fabric
//! delivers is written into its namespace as soon as the engine has handled its arrival.
//!
//! The loop reads the hosts' interfaces itself ([`Frames`]), with no thread or channel
//! between a program's frame and the engine. Through the last [`SPIN_BEFORE`] before an event
//! is due it spins, reading the interfaces at every turn; otherwise it sleeps in the kernel
//! until a frame comes or the next event nears (a sleeping thread takes tens of microseconds
//! to wake on a virtual machine). It does not keep spinning after a frame in wait for the
//! next: on a busy 2-core machine that starved the very programs whose answer it waited for.
//!
//! Nothing here can make the engine faster than it is. When it cannot keep up, deliveries are
//! written later than they were due and frames enter later than they were read: both are
//! measured ([`Lateness`]) and reported, never hidden.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use crossbeam::channel::{Receiver, Select};
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
    /// Deliveries: wall time the loop began writing a frame into its namespace minus the
    /// wall time its virtual arrival was due.
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

/// A record of every frame's way through the loop, for finding where a round trip's time goes:
/// each instant as CLOCK_MONOTONIC nanoseconds, the clock a program reads with
/// `clock_gettime(CLOCK_MONOTONIC)` (Python: `time.monotonic_ns()`), so that the program's own
/// send and receive stamps line up with fabemu's.
pub struct Trace {
    base: Instant,
    base_ns: u64,
    /// The frames, in the order the loop handled them.
    pub events: Vec<TraceEvent>,
}

/// One frame in a [`Trace`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TraceEvent {
    /// A frame a program sent.
    In {
        /// Its host (rank).
        host: usize,
        /// Its length (bytes, without FCS).
        len: usize,
        /// When a reader returned it from the host's interface.
        read_ns: u64,
        /// When the loop took it from the readers' channel.
        taken_ns: u64,
        /// The wall time of the virtual time it entered the host's queue (after `read_ns`
        /// when the engine had already passed that time).
        entered_ns: u64,
    },
    /// A frame written into a host's namespace.
    Out {
        /// The host (rank).
        host: usize,
        /// The frame's length.
        len: usize,
        /// The wall time of its virtual arrival.
        due_ns: u64,
        /// When the loop began writing it (its lateness is measured here).
        write_ns: u64,
        /// When the write returned: the kernel takes the frame up to the destination's
        /// socket within the write.
        written_ns: u64,
    },
}

impl Trace {
    /// An empty trace, its clock read now.
    pub fn new() -> Trace {
        let base = Instant::now();
        let base_ns = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC)
            .map(|t| Duration::from(t).as_nanos() as u64)
            .unwrap_or(0);
        Trace {
            base,
            base_ns,
            events: Vec::new(),
        }
    }

    /// CLOCK_MONOTONIC nanoseconds of `at`.
    pub fn ns(&self, at: Instant) -> u64 {
        let d = if at >= self.base {
            at.duration_since(self.base).as_nanos() as i128
        } else {
            -(self.base.duration_since(at).as_nanos() as i128)
        };
        u64::try_from(i128::from(self.base_ns) + d).unwrap_or(0)
    }

    /// The trace as CSV: `kind,host,len,t1_ns,t2_ns,t3_ns` with, for `in`, the read, taken and
    /// entered instants, and for `out`, the due, write and written ones.
    pub fn to_csv(&self) -> String {
        let mut s = String::from("kind,host,len,t1_ns,t2_ns,t3_ns\n");
        for e in &self.events {
            let line = match *e {
                TraceEvent::In {
                    host,
                    len,
                    read_ns,
                    taken_ns,
                    entered_ns,
                } => format!("in,{host},{len},{read_ns},{taken_ns},{entered_ns}\n"),
                TraceEvent::Out {
                    host,
                    len,
                    due_ns,
                    write_ns,
                    written_ns,
                } => format!("out,{host},{len},{due_ns},{write_ns},{written_ns}\n"),
            };
            s.push_str(&line);
        }
        s
    }
}

impl Default for Trace {
    fn default() -> Trace {
        Trace::new()
    }
}

/// Where the loop writes a delivered frame: the host's namespace (a TAP) in an emulation, a
/// vector in tests.
pub trait Deliver {
    /// Writes `frame` into host `host`'s namespace.
    fn deliver(&mut self, host: usize, frame: &[u8]);
}

/// Where the loop reads the frames programs send: the hosts' TAP devices in an emulation, a
/// channel in tests.
pub trait Frames {
    /// Appends the frames waiting now, without blocking, from every host whose `room[host]` is
    /// true. A host without room (its queue toward the fabric is full) is not read: its frames
    /// stay in the kernel's queue, which then pushes back on the sender, as a NIC's full ring
    /// stops its driver.
    fn read(&mut self, room: &[bool], into: &mut Vec<Inbound>);
    /// Waits at most `timeout` for a frame from a host with room (it may return earlier).
    fn wait(&mut self, room: &[bool], timeout: Duration);
}

/// Frames sent into a channel, each stamped by its sender; offered whether or not the host's
/// queue has room (those that do not fit are dropped and counted).
impl Frames for Receiver<Inbound> {
    fn read(&mut self, _room: &[bool], into: &mut Vec<Inbound>) {
        into.extend(self.try_iter());
    }

    fn wait(&mut self, _room: &[bool], timeout: Duration) {
        let mut sel = Select::new();
        sel.recv(self);
        // Ready with nothing in it: every sender is gone, nothing will come.
        if sel.ready_timeout(timeout).is_ok() && self.is_empty() {
            std::thread::sleep(timeout);
        }
    }
}

/// How long before an event is due the loop stops sleeping and polls: more than a sleeping
/// thread's wake-up on a virtual machine (50-90 us measured).
pub const SPIN_BEFORE: Duration = Duration::from_micros(200);

/// The longest the loop sleeps at a time, so that a stop is seen promptly.
const MAX_SLEEP: Duration = Duration::from_millis(5);

/// A delivery later than this (wall time) counts as late.
pub const LATE: Duration = Duration::from_micros(100);

/// Runs the engine behind the wall clock until `stop` is set or virtual time reaches `until`:
/// frames read from `frames` enter their hosts' gateways (`hosts[rank]` is the host's actor
/// id), deliveries go to `out`.
///
/// `trace`, when given, records every frame's instants ([`Trace`]).
#[allow(clippy::too_many_arguments)] // the loop's whole world, each a different edge
pub fn run(
    stepper: &mut Stepper<EmuNode>,
    hosts: &[ActorId],
    clock: Clock,
    until: Time,
    frames: &mut dyn Frames,
    out: &mut dyn Deliver,
    stop: &AtomicBool,
    mut trace: Option<&mut Trace>,
) -> Result<Lateness, EngineError> {
    raise_priority();
    // Sleeps end when asked, not up to 50 us later (the default slack).
    if let Err(e) = nix::sys::prctl::set_timerslack(1) {
        tracing::debug!("pacing loop keeps the default timer slack: {e}");
    }
    let mut delivery = LatencyHistogram::new();
    let mut injection = LatencyHistogram::new();
    let mut late_frames = 0u64;
    let t0 = Instant::now();
    let mut scratch: Vec<(usize, Time, Bytes)> = Vec::new();
    let mut read: Vec<Inbound> = Vec::new();
    let mut room = vec![true; hosts.len()];
    loop {
        // Frames the programs sent, at the time they were read.
        for (r, &id) in room.iter_mut().zip(hosts) {
            *r = stepper
                .actor_mut(id)
                .and_then(EmuNode::gateway_mut)
                .is_some_and(|gw| gw.has_room());
        }
        frames.read(&room, &mut read);
        for f in read.drain(..) {
            inject(
                stepper,
                hosts,
                clock,
                f,
                &mut injection,
                trace.as_deref_mut(),
            );
        }
        let now = Instant::now();
        let target = clock.virtual_at(now).min(until);
        stepper.run_until(target)?;
        // What arrived: into the namespaces, lateness measured against the wall clock.
        for (rank, &id) in hosts.iter().enumerate() {
            if let Some(gw) = stepper.actor_mut(id).and_then(EmuNode::gateway_mut) {
                scratch.extend(gw.take_delivered().map(|(t, b)| (rank, t, b)));
            }
        }
        for (rank, t, bytes) in scratch.drain(..) {
            // Lateness is the loop's: measured when it hands the frame over, not after the
            // kernel has carried it up to the destination's socket within the write.
            let write = Instant::now();
            out.deliver(rank, &bytes);
            let due = clock.wall_at(t);
            if let Some(tr) = trace.as_deref_mut() {
                let e = TraceEvent::Out {
                    host: rank,
                    len: bytes.len(),
                    due_ns: tr.ns(due),
                    write_ns: tr.ns(write),
                    written_ns: tr.ns(Instant::now()),
                };
                tr.events.push(e);
            }
            let late = write.saturating_duration_since(due);
            if late > LATE {
                late_frames += 1;
            }
            delivery.record(late.as_nanos() as u64 * 1000);
        }
        if stop.load(Ordering::Relaxed) || target >= until {
            break;
        }
        let now = Instant::now();
        let wait = match stepper.next_event() {
            Some(t) => clock.wall_at(t).saturating_duration_since(now),
            None => MAX_SLEEP,
        }
        .min(MAX_SLEEP);
        if wait > SPIN_BEFORE {
            frames.wait(&room, wait - SPIN_BEFORE);
        } else if !wait.is_zero() {
            // Spun, not yielded: on a busy machine a yield hands the core away for a whole
            // time slice (milliseconds).
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
    trace: Option<&mut Trace>,
) {
    let taken = Instant::now();
    let read = clock.virtual_at(f.at);
    // Not before the time the engine reached: what it has handled is past.
    let at = read.max(stepper.reached());
    let Some(&id) = hosts.get(f.host) else {
        return;
    };
    let queued = stepper.actor_mut(id).is_some_and(|n| n.offer(&f.frame, at));
    if queued {
        if let Some(set) = stepper.wake(id, at, WAKE) {
            injection.record(wall_ps(clock, set, read));
            if let Some(tr) = trace {
                let e = TraceEvent::In {
                    host: f.host,
                    len: f.frame.len(),
                    read_ns: tr.ns(f.at),
                    taken_ns: tr.ns(taken),
                    entered_ns: tr.ns(clock.wall_at(set)),
                };
                tr.events.push(e);
            }
        }
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
