//! The engine: sans-IO actors driven by a conservative parallel discrete-event simulation.
//!
//! Actors (hosts, switches) are plain state machines implementing [`Actor`]. They react to an
//! [`Event`] — a packet arrived on a port, a port finished transmitting, a timer fired — and act
//! through a [`Ctx`]: transmit on an idle port, arm a timer. The engine owns everything else:
//! virtual time, the event queues, the ports' serialization and the links' latency.
//!
//! **Determinism.** Every event carries the key (time, origin actor, origin sequence number).
//! An actor's sequence counter advances only when the actor itself emits, and every actor sees
//! its events in key order, so the keys — and hence every actor's history — do not depend on
//! how actors are spread over threads.
//!
//! **Parallelism.** Actors are partitioned onto worker threads ([`partition`]). The lookahead L
//! is the smallest latency of a link between partitions: an event a partition creates at time t
//! for another partition arrives no earlier than t + L. So all partitions can run every event
//! before `global_min + L` on their own; packets for other partitions go to an outbox and are
//! exchanged (crossbeam channels) between windows, and the next window starts at the new global
//! minimum, which skips idle stretches. One partition runs without synchronization at all.
//!
//! **Threads are never a trap.** A window's partitions are tasks that any worker may claim (each
//! tries its own first): when a worker is descheduled — threads share a core, another process
//! holds the other one — the running workers take its partitions over instead of waiting for
//! it, and a worker with nothing to claim spins briefly, then yields, then sleeps
//! (`engine/barrier.rs`). The worker finishing a window's last task alone decides what comes
//! next (the next window, the end, or a stop because [`Progress::cancel`] was set), so every
//! partition stops at the same window boundary.
//!
//! **Observation.** Two optional hooks see inside a run without changing it: a capture tap
//! ([`capture`]: the frames on chosen ports, for a pcap) and sampling ([`sample`]: per-port busy
//! time per interval, and actors' [`Actor::sample`] values at interval boundaries). Both are off
//! by default and then cost one predictable branch per transmit and per event.

mod barrier;
mod calendar;
pub mod capture;
pub mod codec;
mod context;
mod exchange;
#[cfg(feature = "mpi")]
pub mod mpi;
mod parallel;
pub mod partition;
mod queue;
mod recorder;
pub mod sample;
mod stepper;
mod worker;

use std::sync::atomic::{AtomicBool, AtomicU64};

use crate::fault::{FaultCounts, FaultPlan};
use crate::link::{Channel, EthernetOverhead};
use crate::packet::Packet;
use crate::units::Time;

pub use self::capture::{Capture, CaptureConfig, CaptureDirection, CapturedFrame};
pub use self::context::Context;
pub use self::queue::EventKey;
pub use self::recorder::{Recorder, Sent};
pub use self::sample::{ActorSamples, SampleConfig, Samples};
pub use self::stepper::Stepper;
use self::worker::{Partition, PartitionState};

/// Index of an actor in the world, 0-based, dense.
pub type ActorId = u32;

/// What happens to an actor.
#[derive(Debug)]
pub enum Event {
    /// The last bit of `packet` arrived on `port`.
    Packet {
        /// The receiving port.
        port: usize,
        /// The frame.
        packet: Packet,
    },
    /// The last bit of a frame arrived on `port`, for an actor that keeps frames in the
    /// engine ([`Actor::holds_frames`]): the frame stays in the partition's packet slab, and
    /// the actor reads and rewrites it through [`Ctx::frame`] and [`Ctx::frame_mut`], then
    /// transmits it ([`Ctx::transmit_frame`]), takes it out ([`Ctx::take_frame`]) or discards
    /// it ([`Ctx::drop_frame`]).
    Frame {
        /// The receiving port.
        port: usize,
        /// The frame.
        frame: Frame,
    },
    /// `port` finished putting its frame on the wire and can transmit again.
    TxDone {
        /// The port that became idle.
        port: usize,
    },
    /// A timer armed with [`Ctx::set_timer`] fired.
    Timer {
        /// The token given when it was armed.
        token: u64,
    },
}

/// A frame kept in the engine's packet slab for an actor (a switch's queued frames): a slot
/// index, 4 bytes, instead of the 128-byte [`Packet`].
///
/// A frame arrives at a receiver from the sender's slot, waits in that slot however long the
/// actor keeps it, and leaves by [`Ctx::transmit_frame`] without its bytes being copied: the
/// next hop's arrival event points at the same slot. The engine hands out each slot once, so
/// a `Frame` is neither `Clone` nor `Copy`; an actor must give every frame back (transmit,
/// take or drop it), or its slot stays taken until the run ends. A `Frame` is valid only with
/// the [`Ctx`] of the actor it was given to.
#[must_use = "a frame neither transmitted, taken nor dropped keeps its slab slot until the run ends"]
#[derive(Debug, PartialEq, Eq)]
pub struct Frame {
    slot: u32,
}

/// A sans-IO state machine: a host, a switch, or a test double.
pub trait Actor: Send {
    /// Called once at time zero, in actor-id order, before any event.
    fn start(&mut self, ctx: &mut Ctx<'_>);
    /// Reacts to one event.
    fn handle(&mut self, event: Event, ctx: &mut Ctx<'_>);
    /// Appends values to record in the time series when sampling is on ([`EngineConfig::sample`]),
    /// called at every interval boundary with the state after every earlier event. The same
    /// number of values every call; a switch gives the bytes queued per egress port, in port
    /// order. By default nothing.
    fn sample(&self, out: &mut Vec<u64>) {
        let _ = out;
    }
    /// True when this actor takes arriving frames as [`Event::Frame`] (kept in the engine's
    /// slab) instead of [`Event::Packet`] (moved out to the actor): for actors that forward
    /// most frames unchanged, such as switches. Asked once, before the run. By default false.
    fn holds_frames(&self) -> bool {
        false
    }
}

/// The far end of one port: which actor and port a transmitted frame reaches, over which channel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PortWiring {
    /// The actor at the other end of the link.
    pub peer: ActorId,
    /// The peer's port for this link.
    pub peer_port: usize,
    /// This direction of the link (the transmitting side's rate and the latency).
    pub channel: Channel,
}

/// How actors' ports connect: `ports[actor][port]`.
#[derive(Clone, Debug, Default)]
pub struct Wiring {
    /// Per actor, per port, the far end.
    pub ports: Vec<Vec<PortWiring>>,
}

impl Wiring {
    /// Checks that every port's peer exists and points back at it.
    pub fn validate(&self) -> Result<(), EngineError> {
        for (a, ports) in self.ports.iter().enumerate() {
            // Ports are numbered in 16 bits (events and the engine's per-actor record).
            if ports.len() > usize::from(u16::MAX) {
                return Err(EngineError::BadWiring(format!(
                    "actor {a} has {} ports, more than the engine's limit of {}",
                    ports.len(),
                    u16::MAX
                )));
            }
            for (p, w) in ports.iter().enumerate() {
                let back = self
                    .ports
                    .get(w.peer as usize)
                    .and_then(|pp| pp.get(w.peer_port));
                match back {
                    Some(b) if b.peer as usize == a && b.peer_port == p => {}
                    _ => {
                        return Err(EngineError::BadWiring(format!(
                        "actor {a} port {p} points at actor {} port {}, which does not point back",
                        w.peer, w.peer_port
                    )))
                    }
                }
            }
        }
        Ok(())
    }
}

/// Engine settings.
#[derive(Clone, Debug)]
pub struct EngineConfig {
    /// Worker threads asked for (at least 1). Fewer are used when the wiring cannot be split
    /// into that many partitions with a non-zero lookahead. More than the CPUs the process may
    /// use only take turns (correct, never faster): callers limit it (the `fabemu` binary does,
    /// with a warning).
    pub threads: usize,
    /// Stop before any event later than this (simulated time).
    pub until: Time,
    /// Ethernet's per-frame overhead on the wire.
    pub overhead: EthernetOverhead,
    /// Frames to capture (off when `None`).
    pub capture: Option<CaptureConfig>,
    /// Time series to gather (off when `None`).
    pub sample: Option<SampleConfig>,
    /// Faults on link directions (none by default; see [`crate::fault`]).
    pub faults: FaultPlan,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            threads: 1,
            until: Time::NEVER,
            overhead: EthernetOverhead::default(),
            capture: None,
            sample: None,
            faults: FaultPlan::default(),
        }
    }
}

/// Per-port transmit counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PortStats {
    /// Frames transmitted.
    pub tx_packets: u64,
    /// Frame bytes transmitted (without FCS, preamble, gap).
    pub tx_frame_bytes: u64,
    /// Wire bytes transmitted (with Ethernet overhead).
    pub tx_wire_bytes: u64,
    /// Time the port spent serializing.
    pub busy: Time,
}

/// What a run counted.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EngineStats {
    /// Events handled by actors.
    pub events: u64,
    /// Frames that crossed a link (one frame over one link = one hop).
    pub packet_hops: u64,
    /// Time of the last event handled.
    pub end_time: Time,
    /// True when the run stopped at `until` with events still pending.
    pub stopped_at_limit: bool,
    /// When an actor asked the run to stop ([`Ctx::halt`]), the earliest such time.
    pub halted_at: Option<Time>,
}

/// How the engine spread the work (varies with the thread count; not part of results).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EngineLayout {
    /// Partitions (= worker threads) actually used.
    pub partitions: usize,
    /// Lookahead between partitions (`Time::NEVER` with one partition).
    pub lookahead: Time,
    /// Synchronization windows executed.
    pub windows: u64,
}

/// The result of a run: the actors in id order (to read their state), and what was counted.
pub struct RunOutput<A> {
    /// The actors, in id order, as they ended.
    pub actors: Vec<A>,
    /// Per actor, per port, transmit counters.
    pub port_stats: Vec<Vec<PortStats>>,
    /// Deterministic counters.
    pub stats: EngineStats,
    /// How the work was spread (thread-dependent).
    pub layout: EngineLayout,
    /// The captured frames, when [`EngineConfig::capture`] asked for them.
    pub capture: Option<Capture>,
    /// The time series, when [`EngineConfig::sample`] asked for them.
    pub samples: Option<Samples>,
    /// True when [`Progress::cancel`] stopped the run before it finished: everything above
    /// describes the run up to [`EngineStats::end_time`], and depends on when the cancel came.
    pub cancelled: bool,
    /// What the faults of [`EngineConfig::faults`] did.
    pub faults: FaultOutput,
}

/// What injected faults did, per scenario entry and per faulty link direction.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FaultOutput {
    /// Per fault entry (as numbered in [`FaultPlan`]), its counts.
    pub entries: Vec<FaultCounts>,
    /// Per transmitting (actor, port) that had a fault rule, its counts.
    pub ports: Vec<((ActorId, usize), FaultCounts)>,
    /// The QP pairs that lost frames to each entry and when they last did (one per entry and
    /// QP pair, sorted; for measuring recovery).
    pub hits: Vec<crate::fault::FaultHit>,
}

impl EngineStats {
    /// Adds the counts of another part of the same run (a partition's, a process's).
    pub(crate) fn absorb(&mut self, o: &EngineStats) {
        self.events += o.events;
        self.packet_hops += o.packet_hops;
        self.end_time = self.end_time.max(o.end_time);
        self.stopped_at_limit |= o.stopped_at_limit;
        if let Some(h) = o.halted_at {
            self.halted_at = Some(self.halted_at.map_or(h, |x| x.min(h)));
        }
    }
}

impl FaultOutput {
    /// No counts yet, for `entries` fault entries.
    pub(crate) fn empty(entries: usize) -> FaultOutput {
        FaultOutput {
            entries: vec![FaultCounts::default(); entries],
            ports: Vec::new(),
            hits: Vec::new(),
        }
    }

    /// Sorts what the partitions added, in an order independent of the partitioning.
    pub(crate) fn settle(&mut self) {
        self.ports.sort_by_key(|&(k, _)| k);
        // One pair can lose frames on several ports (both directions, several hops): keep the
        // last.
        self.hits.sort_unstable();
        self.hits.dedup_by(|later, first| {
            let same = (later.entry, later.owner, later.peer, later.class)
                == (first.entry, first.owner, first.peer, first.class);
            if same {
                first.at = first.at.max(later.at);
            }
            same
        });
    }
}

/// Why a run could not be done.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EngineError {
    /// Wiring and actors disagree.
    #[error("bad wiring: {0}")]
    BadWiring(String),
    /// An actor misbehaved (e.g. transmitted on a busy port) or a worker thread panicked.
    #[error("engine failure: {0}")]
    Failure(String),
    /// A worker stopped because a peer worker failed (the peer's error is the one reported).
    #[error("run aborted: a worker thread failed")]
    Aborted,
}

/// Progress shared with an observer while a run goes on.
#[derive(Debug, Default)]
pub struct Progress {
    /// Simulated time reached (picoseconds).
    pub sim_time_ps: AtomicU64,
    /// Events handled so far.
    pub events: AtomicU64,
    /// Set to ask the run to stop early (e.g. on Ctrl-C). The run then returns what it did so
    /// far with [`RunOutput::cancelled`] set. A worker reads it every 65536 events (ending its
    /// window early), and the one worker closing a window reads it for all of them, so every
    /// partition stops at the same window boundary.
    pub cancel: AtomicBool,
}

/// The actor's window on the engine while it handles an event.
pub struct Ctx<'a> {
    now: Time,
    me: u32,
    state: &'a mut PartitionState,
}

/// Why a transmit was refused (an actor bug: actors check [`Ctx::port_idle`] first). The frame
/// is dropped; the actor should count it so the run reports the loss.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransmitError {
    /// The port is still serializing a previous frame.
    Busy,
    /// The actor has no such port.
    NoSuchPort,
    /// The [`Frame`] given to [`Ctx::transmit_frame`] is not in this run's slab (a frame of
    /// another run; never a frame the engine gave this actor).
    NoSuchFrame,
}

impl Ctx<'_> {
    /// Current virtual time.
    #[inline]
    pub fn now(&self) -> Time {
        self.now
    }
    /// This actor's id.
    pub fn id(&self) -> ActorId {
        self.state.global_id(self.me)
    }
    /// Number of ports this actor has.
    pub fn port_count(&self) -> usize {
        self.state.port_count(self.me)
    }
    /// True when `port` can transmit now.
    #[inline]
    pub fn port_idle(&self, port: usize) -> bool {
        self.state.port_idle(self.me, port, self.now)
    }
    /// The channel `port` transmits on.
    pub fn channel(&self, port: usize) -> Option<Channel> {
        self.state.channel(self.me, port)
    }
    /// Bytes a frame of `frame_len` bytes occupies on the wire (with Ethernet's overhead).
    pub fn wire_bytes(&self, frame_len: usize) -> u64 {
        self.state.overhead().wire_bytes(frame_len)
    }
    /// Puts `packet` on the wire of `port`. The port is busy for the frame's serialization time,
    /// then a [`Event::TxDone`] follows; the peer gets [`Event::Packet`] when the last bit
    /// arrives (serialization + latency later).
    #[inline]
    pub fn transmit(&mut self, port: usize, packet: Packet) -> Result<(), TransmitError> {
        self.state.transmit(self.me, port, packet, self.now, true)
    }
    /// Like [`Ctx::transmit`], but the [`Event::TxDone`] follows only with `tx_done`, or if
    /// [`Ctx::want_tx_done`] asks for it before the frame is on the wire. For an actor whose
    /// completion handler does nothing when it has nothing queued (half of all events on a
    /// busy fabric): it passes whether it has more queued, and asks when it queues more.
    /// Event order is unchanged: the completion's place in it is reserved at transmit time.
    #[inline]
    pub fn transmit_then(
        &mut self,
        port: usize,
        packet: Packet,
        tx_done: bool,
    ) -> Result<(), TransmitError> {
        self.state
            .transmit(self.me, port, packet, self.now, tx_done)
    }
    /// The packet of `frame` (`None` only for a frame of another actor or run).
    #[inline]
    pub fn frame(&self, frame: &Frame) -> Option<&Packet> {
        self.state.packet(frame.slot)
    }
    /// The packet of `frame`, writable (a switch rewrites TTL and ECN in place).
    #[inline]
    pub fn frame_mut(&mut self, frame: &Frame) -> Option<&mut Packet> {
        self.state.packet_mut(frame.slot)
    }
    /// Puts `packet` in the engine's slab and returns it as a held [`Frame`] (an actor that
    /// holds frames and got a [`Packet`] some other way: from [`Event::Packet`], a scheduler,
    /// or built itself).
    #[inline]
    pub fn hold(&mut self, packet: Packet) -> Frame {
        Frame {
            slot: self.state.hold(packet),
        }
    }
    /// Like [`Ctx::hold`], and gives the packet where it now lies in the slab, to finish
    /// writing it there: an actor that builds a frame writes its header into the slot the
    /// frame leaves from (by [`Ctx::transmit_frame_len`]), so the frame is never copied on its
    /// way. `None` only if the slab could not grow (the packet is then dropped).
    #[inline(always)]
    pub fn hold_mut(&mut self, packet: Packet) -> Option<(Frame, &mut Packet)> {
        let (slot, p) = self.state.hold_mut(packet)?;
        Some((Frame { slot }, p))
    }
    /// Takes the packet of `frame` out of the slab (`None` only for a frame of another actor
    /// or run).
    #[inline]
    pub fn take_frame(&mut self, frame: Frame) -> Option<Packet> {
        self.state.take_held(frame.slot)
    }
    /// Discards `frame` (dropped by a switch, or read in place by a NIC): its slot is free
    /// again.
    #[inline(always)]
    pub fn drop_frame(&mut self, frame: Frame) {
        self.state.drop_held(frame.slot);
    }
    /// Frames the actors of this partition hold right now (given by [`Event::Frame`] or
    /// [`Ctx::hold`] and not yet given back): for tests that check an actor gives every frame
    /// back.
    pub fn held_frames(&self) -> usize {
        self.state.held
    }
    /// Like [`Ctx::transmit_then`] for a held frame: the frame goes on the wire of `port` from
    /// the slot it waits in, without being copied. On an error the frame is dropped, as
    /// [`Ctx::transmit`] drops its packet.
    #[inline]
    pub fn transmit_frame(
        &mut self,
        port: usize,
        frame: Frame,
        tx_done: bool,
    ) -> Result<(), TransmitError> {
        self.state
            .transmit_frame(self.me, port, frame.slot, self.now, tx_done)
    }
    /// [`Ctx::transmit_frame`] for a frame whose length without FCS (`frame_len`, what
    /// [`Packet::frame_len`] says) the caller kept: the engine then reads the frame's slot only
    /// when something needs its bytes (a fault on the link, a peer in another partition,
    /// capture or sampling), not for its length. A switch keeps the length in its queue entry,
    /// so a queued frame leaves without its slot being read (a cache miss per departure on
    /// large fabrics). A wrong `frame_len` times the frame wrongly; it is the caller's to keep.
    #[inline]
    pub fn transmit_frame_len(
        &mut self,
        port: usize,
        frame: Frame,
        frame_len: u32,
        tx_done: bool,
    ) -> Result<(), TransmitError> {
        self.state.transmit_held(
            self.me,
            port,
            frame.slot,
            u64::from(frame_len),
            self.now,
            tx_done,
        )
    }
    /// Asks for the [`Event::TxDone`] of the frame `port` is sending after a
    /// [`Ctx::transmit_then`] without it. Does nothing when the port is idle or the event is already
    /// coming; calling it more than once is harmless.
    #[inline]
    pub fn want_tx_done(&mut self, port: usize) {
        self.state.want_tx_done(self.me, port, self.now);
    }
    /// Asks the run to stop: an actor found the run cannot go on meaningfully (e.g. a PFC
    /// deadlock). Events up to the earliest request plus the longest link latency still run,
    /// so the stop is the same for any thread count; [`EngineStats::halted_at`] reports it.
    pub fn halt(&mut self) {
        self.state.request_halt(self.now);
    }
    /// Arms a timer that fires at `at` (clamped to now) with `token`. Timers cannot be
    /// cancelled: actors ignore stale tokens.
    #[inline]
    pub fn set_timer(&mut self, at: Time, token: u64) {
        let at = at.max(self.now);
        self.state.timer(self.me, at, token);
    }
}

/// Runs `actors` wired by `wiring` until no event is left (or `cfg.until`).
///
/// `actors[i]` is actor `i`; `wiring.ports[i]` its ports.
pub fn run<A: Actor>(
    actors: Vec<A>,
    wiring: &Wiring,
    cfg: &EngineConfig,
    progress: Option<&Progress>,
) -> Result<RunOutput<A>, EngineError> {
    check_world(actors.len(), wiring)?;
    let plan = partition::plan(wiring, cfg.threads.max(1));
    let n_actors = actors.len();
    let mut parts = Partition::build(actors, wiring, &plan, cfg);
    let until = cfg.until;
    let default_progress = Progress::default();
    let progress = progress.unwrap_or(&default_progress);

    let (windows, cancelled) = if parts.len() == 1 {
        let p = &mut parts[0];
        p.start_all();
        let w = p.run_window(until.ps().saturating_add(1), progress)?;
        (1, w == worker::Window::Cancelled)
    } else {
        // Cores this process may use (affinity mask and cgroup quota on Linux): the barrier
        // spins less from the start when workers outnumber them.
        let cores = std::thread::available_parallelism().map_or(1, |c| c.get());
        let end = parallel::run_parallel(
            &mut parts,
            plan.lookahead,
            until,
            cores,
            progress,
            &exchange::Local,
        )?;
        (end.windows, end.cancelled)
    };

    assemble(
        parts,
        cfg,
        EngineLayout {
            partitions: plan.parts,
            lookahead: plan.lookahead,
            windows,
        },
        cancelled,
        n_actors,
    )
}

/// Checks that `n_actors` actors fit the engine and `wiring` describes them.
fn check_world(n_actors: usize, wiring: &Wiring) -> Result<(), EngineError> {
    if wiring.ports.len() != n_actors {
        return Err(EngineError::BadWiring(format!(
            "{n_actors} actors but wiring for {}",
            wiring.ports.len()
        )));
    }
    if n_actors >= (1 << queue::ACTOR_BITS) {
        return Err(EngineError::BadWiring(format!(
            "{n_actors} actors exceed the engine's limit of {}",
            1u64 << queue::ACTOR_BITS
        )));
    }
    wiring.validate()
}

/// Gathers what every partition of a finished (or stopped) run holds into one [`RunOutput`],
/// the actors in id order: the end of [`run`] and of [`Stepper::finish`].
fn assemble<A: Actor>(
    mut parts: Vec<Partition<A>>,
    cfg: &EngineConfig,
    layout: EngineLayout,
    cancelled: bool,
    n_actors: usize,
) -> Result<RunOutput<A>, EngineError> {
    let until = cfg.until;
    // Reassemble in id order.
    let mut stats = EngineStats::default();
    for p in &parts {
        stats.absorb(&p.stats());
    }
    let samples = cfg
        .sample
        .as_ref()
        .map(|sc| sample::merge(&mut parts, sc, stats.end_time, n_actors));
    let capture = cfg.capture.as_ref().map(|cc| {
        let bufs = parts
            .iter_mut()
            .filter_map(|p| p.state.capture.take())
            .collect();
        capture::merge(bufs, cc, until)
    });
    let mut faults = FaultOutput::empty(cfg.faults.entries);
    for p in &parts {
        p.state.fault_counts(&mut faults);
    }
    faults.settle();
    let mut slots: Slots<A> = (0..n_actors).map(|_| None).collect();
    for p in parts {
        for (gid, actor, ports) in p.into_actors() {
            slots[gid as usize] = Some((actor, ports));
        }
    }
    let (actors_out, port_stats) = in_id_order(slots)?;
    Ok(RunOutput {
        actors: actors_out,
        port_stats,
        stats,
        layout,
        capture,
        samples,
        cancelled,
        faults,
    })
}

/// The actors and their port counters out of their slots (by id), every slot filled.
type Slots<A> = Vec<Option<(A, Vec<PortStats>)>>;

/// Splits filled [`Slots`] into the actors and their port counters, in id order.
#[allow(clippy::type_complexity)]
fn in_id_order<A>(slots: Slots<A>) -> Result<(Vec<A>, Vec<Vec<PortStats>>), EngineError> {
    let mut actors = Vec::with_capacity(slots.len());
    let mut port_stats = Vec::with_capacity(slots.len());
    for (i, s) in slots.into_iter().enumerate() {
        let (a, ps) =
            s.ok_or_else(|| EngineError::Failure(format!("actor {i} lost by the engine")))?;
        actors.push(a);
        port_stats.push(ps);
    }
    Ok((actors, port_stats))
}

#[cfg(test)]
mod frame_tests;

#[cfg(test)]
mod observe_tests;

#[cfg(test)]
mod parallel_tests;

#[cfg(test)]
mod tx_done_tests;

#[cfg(test)]
mod stepper_tests;
