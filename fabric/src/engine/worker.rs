//! One partition: its actors, the state they share (event queue, ports, counters), the
//! transmit path and the event loop of a window. [`super::parallel`] runs partitions in
//! parallel windows.

use std::sync::atomic::Ordering;

use super::capture::{CaptureBuf, CaptureDirection};
use super::partition::Plan;
use super::queue::{arrival_tag, tag_dst, EventKey, EventQueue, Kind};
use super::sample::Sampler;
use super::{
    Actor, ActorId, Ctx, EngineConfig, EngineError, Event, Frame, PortStats, Progress,
    TransmitError, Wiring,
};
use crate::fault::{Fate, FaultCounts, PortFaults};
use crate::link::{Channel, EthernetOverhead};
use crate::packet::Packet;
use crate::units::Time;

/// A transmitting port and where its frames go.
///
/// Laid out from a cache line's start (`repr(C, align(64))`): line 0 holds what
/// [`PartitionState::port_idle`] and every transmit read (busy time, channel, peer), line 1 the fault
/// rules and the counters a transmit updates. Rust's own layout (104 bytes, unaligned in the
/// vector) spread a transmit over two or three lines.
#[repr(C, align(64))]
struct PortState {
    busy_until: u64,
    /// The tie word reserved for the current frame's [`Kind::TxDone`] while it is not queued
    /// ([`NO_TX_DONE`] once it is, or when there is none): a quiet transmit reserves the key,
    /// so queueing the completion later gives it exactly the place it would have had.
    done_tie: u64,
    channel: Channel,
    peer_part: u32,
    /// The tag word of the arrivals this port queues: the peer's local index and whether it
    /// holds frames ([`Kind::Frame`] or [`Kind::Packet`], see [`arrival_tag`]), made once so
    /// that queueing an arrival computes nothing and a pop reads no record of the peer.
    peer_tag: u32,
    peer_port: u16,
    /// Capture taps: [`TAP_OUT`] and/or [`TAP_IN`] (0 when not tapped).
    tap: u8,
    /// Fault rules on this direction (`None`, the common case: one branch per transmit).
    fault: Option<Box<PortFaults>>,
    stats: PortStats,
}

/// No transmit completion is reserved (none, or it is queued already).
const NO_TX_DONE: u64 = u64::MAX;

/// Record frames this port transmits.
const TAP_OUT: u8 = 1;
/// Record frames this port transmits as arrivals at the peer port (which is tapped).
const TAP_IN: u8 = 2;

/// What the engine reads of a local actor per event, in one place: its port range, the tie
/// word of its next event and whether it holds frames. (As separate vectors these were three
/// bounds checks and, on a large fabric, up to three cache lines per event.)
#[derive(Clone, Copy)]
struct LocalActor {
    /// The tie word of the actor's next event ([`EventKey::new`]`(_, gid, seq)`'s): the origin
    /// bits set once, so drawing a key is a load and an increment.
    tie: u64,
    /// `ports[first..first + count]` are the actor's ports (16 bytes in all: four actors a line).
    first: u32,
    count: u16,
    /// Whether it takes arrivals as held frames ([`Actor::holds_frames`]).
    holds: bool,
}

/// A frame bound for another partition.
pub(crate) struct Remote {
    pub(crate) key: EventKey,
    /// The receiver's index in its partition.
    pub(crate) dst: u32,
    pub(crate) port: u16,
    pub(crate) packet: Packet,
}

/// Everything of a partition except its actors (so an actor and its partition can be borrowed
/// at once).
pub(crate) struct PartitionState {
    part: u32,
    pub(crate) queue: EventQueue,
    ports: Vec<PortState>,
    /// `port_base[i]..port_base[i+1]` are local actor i's ports (also in `local`, which the
    /// hot path reads).
    port_base: Vec<u32>,
    /// Per local actor, what the engine reads of it per event.
    local: Vec<LocalActor>,
    gids: Vec<ActorId>,
    pub(crate) outbox: Vec<Vec<Remote>>,
    overhead: EthernetOverhead,
    /// Frames the actors hold ([`super::Ctx::held_frames`]).
    pub(crate) held: usize,
    pub(crate) events: u64,
    pub(crate) packet_hops: u64,
    pub(crate) last_time: Time,
    /// Earliest time an actor asked the run to stop (`u64::MAX`: none), see [`Ctx::halt`].
    pub(crate) halt: u64,
    /// How long after the earliest halt request the run goes on (see `run`).
    pub(crate) halt_grace: u64,
    /// True when capturing or sampling: the one branch the transmit path pays for them.
    observing: bool,
    /// Per local port, the global id of the peer actor (filled only when capturing).
    peer_gid: Vec<ActorId>,
    pub(crate) capture: Option<CaptureBuf>,
    pub(crate) sampler: Option<Sampler>,
    /// Time of the next snapshot (`u64::MAX` when not sampling).
    pub(crate) next_sample: u64,
    /// The end (exclusive) of the window being run, lowered by a halt request.
    window_end: u64,
    /// Where the event loop stops to look around: the window's end or the next snapshot,
    /// whichever is first. One bound read per event, instead of a halt, a snapshot and an end
    /// check (see [`Partition::run_window`]).
    stop: u64,
}

/// The halt grace: the longest channel latency (at least 1 ps). It bounds every partitioning's
/// lookahead, so when the earliest halt request is at `t`, no partition has run past
/// `t + grace` by the time all of them know of it: stopping there is the same for any thread
/// count.
fn halt_grace(wiring: &Wiring) -> u64 {
    wiring
        .ports
        .iter()
        .flatten()
        .map(|w| w.channel.latency.ps())
        .max()
        .unwrap_or(0)
        .max(1)
}

/// The port's side of putting a frame of `frame` bytes (without FCS) on the wire at `now`:
/// refuses a busy port, applies the port's faults (a frame lost or corrupted; the corruption
/// is written into the packet), marks the port busy and counts the frame. Returns when
/// serialization ends, when the last bit arrives, and whether the frame arrives at all. The
/// packet (`packet`) is asked for only when a fault hits the frame, so that the frame's slab
/// slot is not read as it leaves (the receiver reads it when the frame arrives).
#[inline(always)]
fn launch<'p>(
    ps: &mut PortState,
    overhead: &EthernetOverhead,
    frame: u64,
    now: Time,
    packet: impl FnOnce() -> Option<&'p mut Packet>,
) -> Result<Departure, TransmitError> {
    if ps.busy_until > now.ps() {
        return Err(TransmitError::Busy);
    }
    let wire = overhead.wire_bytes(frame as usize);
    let mut ser = ps.channel.rate.serialization_time(wire);
    let mut fate = Fate::Deliver;
    if let Some(f) = ps.fault.as_deref_mut() {
        (ser, fate) = f.apply(now, wire, ser);
        if fate != Fate::Deliver {
            if let Some(packet) = packet() {
                f.note_hit(packet, now);
                if fate == Fate::Corrupted {
                    // Bit errors: the frame goes on with flipped bits; receivers discard it.
                    f.corrupt(packet);
                }
            }
            if fate == Fate::Corrupted {
                fate = Fate::Deliver;
            }
        }
    }
    let done = now.ps().saturating_add(ser.ps());
    let arrive = done.saturating_add(ps.channel.latency.ps());
    ps.busy_until = done;
    ps.stats.tx_packets += 1;
    ps.stats.tx_frame_bytes += frame;
    ps.stats.tx_wire_bytes += wire;
    ps.stats.busy = ps.stats.busy + ser;
    Ok(Departure {
        done,
        arrive,
        deliver: fate == Fate::Deliver,
        frame,
    })
}

/// A frame put on the wire by [`launch`].
#[derive(Clone, Copy)]
struct Departure {
    /// When its serialization ends (ps).
    done: u64,
    /// When its last bit arrives (ps).
    arrive: u64,
    /// False when the link lost it.
    deliver: bool,
    /// Its length without FCS (for the packet trace).
    #[cfg_attr(not(feature = "packet-trace"), allow(dead_code))]
    frame: u64,
}

/// The engine's side of frame `l` put on the wire of `port` (`ps`) of local actor `me`
/// (`loc`): draws the keys of the completion and of the arrival (in this order, one sequence
/// number each: one read and one write of the tie word), and queues the completion (`notify`)
/// or reserves its key. Returns the arrival's key.
#[inline(always)]
fn draw_keys(
    loc: &mut LocalActor,
    ps: &mut PortState,
    queue: &mut EventQueue,
    me: u32,
    port: usize,
    l: &Departure,
    notify: bool,
) -> EventKey {
    let tie = loc.tie;
    let next = EventKey::next_tie(tie);
    loc.tie = EventKey::next_tie(next);
    if notify {
        ps.done_tie = NO_TX_DONE;
        queue.push_tx_done(EventKey { time: l.done, tie }, me, port as u16);
    } else {
        ps.done_tie = tie;
    }
    EventKey {
        time: l.arrive,
        tie: next,
    }
}

/// Logs a transmit. Per-packet logs exist only when built with the `packet-trace` feature, so
/// that a normal build pays nothing for them, not even the disabled-callsite check.
#[inline(always)]
#[cfg_attr(not(feature = "packet-trace"), allow(unused_variables))]
fn trace_transmit(gids: &[ActorId], me: u32, port: usize, now: Time, l: &Departure) {
    #[cfg(feature = "packet-trace")]
    tracing::trace!(
        target: "fabemu::packet",
        actor = gids.get(me as usize).copied().unwrap_or(0),
        port,
        start_ps = now.ps(),
        arrive_ps = l.arrive,
        frame_len = l.frame,
        "transmit"
    );
}

impl PartitionState {
    /// First time not to run because of a halt request (`u64::MAX` without one).
    pub(crate) fn halt_end(&self) -> u64 {
        match self.halt {
            u64::MAX => u64::MAX,
            t => t.saturating_add(self.halt_grace).saturating_add(1),
        }
    }

    pub(crate) fn request_halt(&mut self, at: Time) {
        self.halt = self.halt.min(at.ps());
        self.window_end = self.window_end.min(self.halt_end());
        self.stop = self.stop.min(self.window_end);
    }

    pub(crate) fn global_id(&self, me: u32) -> ActorId {
        self.gids[me as usize]
    }

    #[inline]
    fn port_range(&self, me: u32) -> (usize, usize) {
        self.local.get(me as usize).map_or((0, 0), |l| {
            (l.first as usize, l.first as usize + usize::from(l.count))
        })
    }

    /// Adds this partition's fault counters to `out`.
    pub(crate) fn fault_counts(&self, out: &mut super::FaultOutput) {
        for (me, w) in self.port_base.windows(2).enumerate() {
            for (port, ps) in self.ports[w[0] as usize..w[1] as usize].iter().enumerate() {
                let Some(f) = &ps.fault else {
                    continue;
                };
                let mut sum = FaultCounts::default();
                for (entry, c) in f.entry_counts() {
                    if let Some(e) = out.entries.get_mut(entry as usize) {
                        e.lost += c.lost;
                        e.corrupted += c.corrupted;
                    }
                    sum.lost += c.lost;
                    sum.corrupted += c.corrupted;
                }
                out.ports.push(((self.gids[me], port), sum));
                for (&(entry, owner, peer, class), &at) in &f.hits {
                    out.hits.push(crate::fault::FaultHit {
                        entry,
                        owner,
                        peer,
                        class,
                        at,
                    });
                }
            }
        }
    }

    pub(crate) fn overhead(&self) -> &EthernetOverhead {
        &self.overhead
    }

    pub(crate) fn port_count(&self, me: u32) -> usize {
        let (a, b) = self.port_range(me);
        b - a
    }

    #[inline]
    pub(crate) fn port_idle(&self, me: u32, port: usize, now: Time) -> bool {
        let (a, b) = self.port_range(me);
        a + port < b && self.ports[a + port].busy_until <= now.ps()
    }

    pub(crate) fn channel(&self, me: u32, port: usize) -> Option<Channel> {
        let (a, b) = self.port_range(me);
        (a + port < b).then(|| self.ports[a + port].channel)
    }

    pub(crate) fn pending(&self) -> usize {
        self.queue.len() + self.outbox.iter().map(Vec::len).sum::<usize>()
    }

    #[inline]
    fn next_key(&mut self, me: u32, time: u64) -> EventKey {
        let tie = &mut self.local[me as usize].tie;
        let k = EventKey { time, tie: *tie };
        *tie = EventKey::next_tie(*tie);
        k
    }

    /// Puts `packet` on the wire of `port`. With `notify` the completion is queued now;
    /// without, its key is only reserved and [`PartitionState::want_tx_done`] queues it later if needed.
    /// The packet goes into the slab and leaves from there as a held frame does: one
    /// departure for both.
    #[inline]
    pub(crate) fn transmit(
        &mut self,
        me: u32,
        port: usize,
        packet: Packet,
        now: Time,
        notify: bool,
    ) -> Result<(), TransmitError> {
        let frame = packet.frame_len() as u64;
        let slot = self.hold(packet);
        self.transmit_held(me, port, slot, frame, now, notify)
    }

    /// [`PartitionState::transmit`] for the frame an actor holds in slab slot `slot`: its next arrival
    /// event points at the same slot (a frame for another partition moves to the outbox).
    /// On an error the slot is freed, as `transmit` drops its packet.
    #[inline]
    pub(crate) fn transmit_frame(
        &mut self,
        me: u32,
        port: usize,
        slot: u32,
        now: Time,
        notify: bool,
    ) -> Result<(), TransmitError> {
        let Some(frame) = self.queue.packet(slot).map(|p| p.frame_len() as u64) else {
            let (a, b) = self.port_range(me);
            if a + port >= b {
                self.held = self.held.saturating_sub(1);
                return Err(TransmitError::NoSuchPort);
            }
            return Err(TransmitError::NoSuchFrame);
        };
        self.transmit_held(me, port, slot, frame, now, notify)
    }

    /// [`PartitionState::transmit_frame`] for a frame whose length (`frame` bytes, without FCS) the
    /// caller knows: the slot is read only when something needs the frame's bytes (a fault
    /// that hits it, a peer in another partition, an observer). A slot outside the slab is
    /// [`TransmitError::NoSuchFrame`]; a `Frame` is the engine's own handle, so a slot inside
    /// it is a held frame (see [`super::Frame`]).
    // Always inlined: each transmit is one call site of it, and out of line the departure's
    // result and arguments went through memory.
    #[inline(always)]
    pub(crate) fn transmit_held(
        &mut self,
        me: u32,
        port: usize,
        slot: u32,
        frame: u64,
        now: Time,
        notify: bool,
    ) -> Result<(), TransmitError> {
        // As in `transmit`: the actor's record and the port looked up once.
        let Some(loc) = self.local.get_mut(me as usize) else {
            return self.refuse_held(false, slot);
        };
        let (a, b) = (
            loc.first as usize,
            loc.first as usize + usize::from(loc.count),
        );
        let Some(ps) = self.ports.get_mut(a + port).filter(|_| a + port < b) else {
            return self.refuse_held(false, slot);
        };
        if !self.queue.has_slot(slot) {
            return self.refuse_held(true, slot);
        }
        let queue = &mut self.queue;
        let launch_result = launch(ps, &self.overhead, frame, now, || queue.packet_mut(slot));
        self.held = self.held.saturating_sub(1);
        let l = match launch_result {
            Ok(l) => l,
            Err(e) => {
                self.queue.free_slot(slot);
                return Err(e);
            }
        };
        self.packet_hops += 1;
        trace_transmit(&self.gids, me, port, now, &l);
        let k_arrive = draw_keys(loc, ps, &mut self.queue, me, port, &l, notify);
        let (done, arrive) = (l.done, l.arrive);
        let (peer_part, peer_tag, peer_port) = (ps.peer_part, ps.peer_tag, ps.peer_port);
        if !l.deliver {
            self.queue.free_slot(slot);
            if let Some(s) = &mut self.sampler {
                s.add_busy(a + port, now.ps(), done, done);
            }
            return Ok(());
        }
        if peer_part == self.part {
            self.queue.push_held(k_arrive, peer_tag, peer_port, slot);
        } else if let Some((_, packet)) = self.queue.take_packet(slot) {
            self.outbox[peer_part as usize].push(Remote {
                key: k_arrive,
                dst: tag_dst(peer_tag),
                port: peer_port,
                packet,
            });
        }
        if self.observing {
            let slot = if peer_part == self.part {
                slot
            } else {
                u32::MAX
            };
            self.observe_tx(
                me,
                port,
                a + port,
                [now.ps(), done, arrive],
                k_arrive,
                slot,
                peer_part,
            );
        }
        Ok(())
    }

    /// A [`PartitionState::transmit_held`] refused before its port was looked at: with no such port
    /// (`port_ok` false) the frame is dropped, as `transmit` drops its packet; with a slot
    /// outside the slab there is no frame to drop.
    #[cold]
    #[inline(never)]
    fn refuse_held(&mut self, port_ok: bool, slot: u32) -> Result<(), TransmitError> {
        if port_ok {
            return Err(TransmitError::NoSuchFrame);
        }
        self.held = self.held.saturating_sub(1);
        self.queue.free_slot(slot);
        Err(TransmitError::NoSuchPort)
    }

    /// The packet in slab slot `slot`.
    #[inline]
    pub(crate) fn packet(&self, slot: u32) -> Option<&Packet> {
        self.queue.packet(slot)
    }

    /// The packet in slab slot `slot`, writable.
    #[inline]
    pub(crate) fn packet_mut(&mut self, slot: u32) -> Option<&mut Packet> {
        self.queue.packet_mut(slot)
    }

    /// Puts `packet` in the slab for an actor to hold; returns its slot.
    #[inline]
    pub(crate) fn hold(&mut self, packet: Packet) -> u32 {
        self.held += 1;
        self.queue.hold(packet)
    }

    /// [`PartitionState::hold`] that also gives the packet in its slot, writable.
    #[inline(always)]
    pub(crate) fn hold_mut(&mut self, packet: Packet) -> Option<(u32, &mut Packet)> {
        let held = self.queue.hold_mut(packet)?;
        self.held += 1;
        Some(held)
    }

    /// Takes a held frame's packet out of the slab.
    #[inline]
    pub(crate) fn take_held(&mut self, slot: u32) -> Option<Packet> {
        let p = self.queue.take_packet(slot).map(|(_, p)| p);
        self.held = self.held.saturating_sub(usize::from(p.is_some()));
        p
    }

    /// Discards a held frame.
    #[inline(always)]
    pub(crate) fn drop_held(&mut self, slot: u32) {
        if self.queue.free_slot(slot) {
            self.held = self.held.saturating_sub(1);
        }
    }

    /// Queues the reserved completion of the frame `port` is sending (see
    /// [`PartitionState::transmit`]); nothing when the port is idle or the completion is queued already.
    #[inline]
    pub(crate) fn want_tx_done(&mut self, me: u32, port: usize, now: Time) {
        let (a, b) = self.port_range(me);
        if a + port >= b {
            return;
        }
        let ps = &mut self.ports[a + port];
        if ps.done_tie == NO_TX_DONE || ps.busy_until <= now.ps() {
            return;
        }
        let key = EventKey {
            time: ps.busy_until,
            tie: ps.done_tie,
        };
        ps.done_tie = NO_TX_DONE;
        self.queue.push_tx_done(key, me, port as u16);
    }

    /// Feeds a transmit to the sampler and the capture taps. `times` = [start, done, arrive];
    /// the packet waits in queue slot `slot`, or last in the outbox of `peer_part`.
    #[cold]
    #[inline(never)]
    #[allow(clippy::too_many_arguments)]
    fn observe_tx(
        &mut self,
        me: u32,
        port: usize,
        local_port: usize,
        times: [u64; 3],
        key: EventKey,
        slot: u32,
        peer_part: u32,
    ) {
        let [start, done, arrive] = times;
        if let Some(s) = &mut self.sampler {
            s.add_busy(local_port, start, done, arrive);
        }
        let ps = &self.ports[local_port];
        let (tap, peer_port) = (ps.tap, ps.peer_port as usize);
        let Some(c) = &mut self.capture else {
            return;
        };
        if tap == 0 {
            return;
        }
        let packet = if peer_part == self.part {
            self.queue.packet(slot)
        } else {
            self.outbox[peer_part as usize].last().map(|r| &r.packet)
        };
        let Some(packet) = packet else {
            return;
        };
        let me_gid = self.gids[me as usize];
        let peer = self.peer_gid.get(local_port).copied().unwrap_or(0);
        if tap & TAP_OUT != 0 {
            c.record(start, me_gid, port, CaptureDirection::Out, key.tie, packet);
        }
        if tap & TAP_IN != 0 {
            c.record(
                arrive,
                peer,
                peer_port,
                CaptureDirection::In,
                key.tie,
                packet,
            );
        }
    }

    /// The time of the earliest pending event (`u64::MAX` when none is).
    pub(crate) fn next_time(&mut self) -> u64 {
        self.queue.next_time()
    }

    #[inline]
    pub(crate) fn timer(&mut self, me: u32, at: Time, token: u64) {
        let key = self.next_key(me, at.ps());
        self.queue.push_timer(key, me, token);
    }
}

/// How a window ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Window {
    /// Every event before the window's end was handled.
    Done,
    /// The run was cancelled part-way through.
    Cancelled,
}

/// A partition: some actors and the state they share (queue, ports, counters).
pub(crate) struct Partition<A> {
    actors: Vec<A>,
    pub(crate) state: PartitionState,
}

impl<A: Actor> Partition<A> {
    /// Splits `actors` into the partitions of `plan`; local order follows actor id.
    pub(crate) fn build(
        actors: Vec<A>,
        wiring: &Wiring,
        plan: &Plan,
        cfg: &EngineConfig,
    ) -> Vec<Partition<A>> {
        let n_parts = plan.parts;
        // Local index of every actor within its partition.
        let mut local = vec![0u32; actors.len()];
        let mut counts = vec![0u32; n_parts];
        for (i, &p) in plan.assignment.iter().enumerate() {
            local[i] = counts[p as usize];
            counts[p as usize] += 1;
        }
        let mut parts: Vec<Partition<A>> = (0..n_parts)
            .map(|p| Partition {
                actors: Vec::with_capacity(counts[p] as usize),
                state: PartitionState {
                    part: p as u32,
                    queue: EventQueue::default(),
                    ports: Vec::new(),
                    port_base: vec![0],
                    local: Vec::with_capacity(counts[p] as usize),
                    gids: Vec::with_capacity(counts[p] as usize),
                    outbox: (0..n_parts).map(|_| Vec::new()).collect(),
                    overhead: cfg.overhead,
                    held: 0,
                    events: 0,
                    packet_hops: 0,
                    last_time: Time::ZERO,
                    halt: u64::MAX,
                    halt_grace: halt_grace(wiring),
                    observing: cfg.capture.is_some() || cfg.sample.is_some(),
                    peer_gid: Vec::new(),
                    capture: cfg.capture.as_ref().map(CaptureBuf::new),
                    sampler: None,
                    next_sample: u64::MAX,
                    window_end: 0,
                    stop: 0,
                },
            })
            .collect();
        let tapped = |a: usize, p: usize| {
            cfg.capture
                .as_ref()
                .is_some_and(|c| c.ports.contains(&(a as ActorId, p)))
        };
        let holds_frames: Vec<bool> = actors.iter().map(Actor::holds_frames).collect();
        let mut fault_rules: rustc_hash::FxHashMap<(u32, usize), Vec<_>> = Default::default();
        for &(a, port, r) in &cfg.faults.rules {
            fault_rules.entry((a, port)).or_default().push(r);
        }
        for (gid, actor) in actors.into_iter().enumerate() {
            let p = &mut parts[plan.assignment[gid] as usize];
            let holds = actor.holds_frames();
            p.actors.push(actor);
            p.state.gids.push(gid as ActorId);
            let first = p.state.ports.len() as u32;
            for (port, w) in wiring.ports[gid].iter().enumerate() {
                let peer = w.peer as usize;
                let tap = if cfg.capture.is_some() {
                    p.state.peer_gid.push(w.peer);
                    (if tapped(gid, port) { TAP_OUT } else { 0 })
                        | (if tapped(peer, w.peer_port) { TAP_IN } else { 0 })
                } else {
                    0
                };
                let fault = fault_rules.remove(&(gid as u32, port)).map(|rules| {
                    Box::new(PortFaults::new(rules, cfg.faults.seed, gid as u32, port))
                });
                p.state.ports.push(PortState {
                    channel: w.channel,
                    peer_part: plan.assignment[peer],
                    peer_tag: arrival_tag(
                        local[peer],
                        holds_frames.get(peer).copied().unwrap_or(false),
                    ),
                    peer_port: w.peer_port as u16,
                    busy_until: 0,
                    done_tie: NO_TX_DONE,
                    stats: PortStats::default(),
                    tap,
                    fault,
                });
            }
            let n = p.state.ports.len() as u32;
            p.state.port_base.push(n);
            p.state.local.push(LocalActor {
                tie: EventKey::new(0, gid as ActorId, 0).tie,
                first,
                count: (n - first) as u16,
                holds,
            });
        }
        if let Some(sc) = &cfg.sample {
            for p in &mut parts {
                let s = Sampler::new(sc, p.state.ports.len(), p.actors.len());
                p.state.next_sample = s.next_at();
                p.state.sampler = Some(s);
            }
        }
        parts
    }

    /// Takes every snapshot due at or before `t` (before any event at `t` is handled).
    #[cold]
    #[inline(never)]
    fn take_samples(&mut self, t: u64) {
        let Some(s) = &mut self.state.sampler else {
            return;
        };
        // Held, not taken: whether these boundaries are inside the traffic is known only
        // when (if) a frame is sent after them.
        let values = self
            .actors
            .iter()
            .map(|actor| {
                let mut v = Vec::new();
                actor.sample(&mut v);
                v
            })
            .collect();
        s.hold(t, values);
        self.state.next_sample = s.next_after(t);
    }

    /// Brings the sampler to `interval` and takes the snapshots still missing to cover
    /// `buckets` boundaries (the actors' final state: nothing happens after their last event).
    pub(crate) fn finish_samples(&mut self, interval: u64, buckets: usize) {
        let Some(s) = &mut self.state.sampler else {
            return;
        };
        s.coarsen_to(interval);
        s.flush(Some(buckets));
        for _ in 0..s.missing(buckets) {
            for (i, actor) in self.actors.iter().enumerate() {
                s.scratch.clear();
                actor.sample(&mut s.scratch);
                s.store(i);
            }
            s.advance_fixed();
        }
    }

    /// The actor with global id `gid`, if this partition has it.
    pub(crate) fn actor_mut(&mut self, gid: ActorId) -> Option<&mut A> {
        let i = self.state.gids.binary_search(&gid).ok()?;
        self.actors.get_mut(i)
    }

    /// The actor with global id `gid`, if this partition has it.
    pub(crate) fn actor(&self, gid: ActorId) -> Option<&A> {
        let i = self.state.gids.binary_search(&gid).ok()?;
        self.actors.get(i)
    }

    /// LocalActor actor ids and port ranges (to map local series to global actors).
    pub(crate) fn layout(&self) -> (&[ActorId], &[u32]) {
        (&self.state.gids, &self.state.port_base)
    }

    /// Calls every actor's `start` at time zero.
    pub(crate) fn start_all(&mut self) {
        for (i, actor) in self.actors.iter_mut().enumerate() {
            let mut ctx = Ctx {
                now: Time::ZERO,
                me: i as u32,
                state: &mut self.state,
            };
            actor.start(&mut ctx);
        }
    }

    /// Handles every local event with time < `end`, or fewer when the run is cancelled
    /// ([`Progress::cancel`], read every 65536 events; a cancelled window is the last one).
    ///
    /// The inner loop runs up to one bound, [`PartitionState::stop`]: the window's end (lowered by a halt
    /// request, see [`PartitionState::request_halt`]) or the next snapshot's time, whichever is first.
    /// Snapshots are taken when it stops short of the window's end: one bound read per event
    /// instead of three checks.
    pub(crate) fn run_window(
        &mut self,
        end: u64,
        progress: &Progress,
    ) -> Result<Window, EngineError> {
        // Events until the next progress report (and cancel check).
        const REPORT: u32 = 1 << 16;
        let mut budget = REPORT;
        self.state.window_end = end.min(self.state.halt_end());
        self.state.stop = self.state.window_end.min(self.state.next_sample);
        let mut now = self.state.last_time;
        loop {
            while let Some(e) = self.state.queue.pop_before(self.state.stop) {
                now = Time(e.key.time);
                let dst = e.dst();
                let event = match e.kind() {
                    // An actor that holds frames gets the slot; the frame stays where it is.
                    Kind::Frame => match self.state.queue.arrival_port(e.data()) {
                        Some(port) => {
                            self.state.held += 1;
                            Event::Frame {
                                port: port as usize,
                                frame: Frame { slot: e.data() },
                            }
                        }
                        None => {
                            return Err(EngineError::Failure(format!(
                                "packet slot {} empty",
                                e.data()
                            )))
                        }
                    },
                    Kind::Packet => match self.state.queue.take_packet(e.data()) {
                        Some((port, packet)) => Event::Packet {
                            port: port as usize,
                            packet,
                        },
                        None => {
                            return Err(EngineError::Failure(format!(
                                "packet slot {} empty",
                                e.data()
                            )))
                        }
                    },
                    Kind::TxDone => Event::TxDone {
                        port: e.data() as usize,
                    },
                    Kind::Timer => Event::Timer {
                        token: u64::from(e.data()),
                    },
                    Kind::LongTimer => match self.state.queue.take_token(e.data()) {
                        Some(token) => Event::Timer { token },
                        None => {
                            return Err(EngineError::Failure(format!(
                                "timer slot {} empty",
                                e.data()
                            )))
                        }
                    },
                };
                let actor = &mut self.actors[dst as usize];
                let mut ctx = Ctx {
                    now,
                    me: dst,
                    state: &mut self.state,
                };
                actor.handle(event, &mut ctx);
                budget -= 1;
                if budget == 0 {
                    // Events are counted here and when the loop ends, from the budget, not one
                    // write per event.
                    budget = REPORT;
                    self.state.events += u64::from(REPORT);
                    progress
                        .events
                        .fetch_add(u64::from(REPORT), Ordering::Relaxed);
                    progress.sim_time_ps.fetch_max(now.ps(), Ordering::Relaxed);
                    if progress.cancel.load(Ordering::Relaxed) {
                        self.state.last_time = now;
                        return Ok(Window::Cancelled);
                    }
                }
            }
            // Stopped at a snapshot's time (take it before the events at that time) or at the
            // window's end.
            let t = self.state.queue.next_time();
            if t < self.state.window_end && t >= self.state.next_sample {
                self.take_samples(t);
                self.state.stop = self.state.window_end.min(self.state.next_sample);
                continue;
            }
            break;
        }
        self.state.last_time = now;
        self.state.events += u64::from(REPORT - budget);
        progress
            .events
            .fetch_add(u64::from(REPORT - budget), Ordering::Relaxed);
        progress.sim_time_ps.fetch_max(now.ps(), Ordering::Relaxed);
        Ok(Window::Done)
    }

    /// Queues frames other partitions sent to this one.
    pub(crate) fn ingest(&mut self, batch: Vec<Remote>) {
        for r in batch {
            let holds = self
                .state
                .local
                .get(r.dst as usize)
                .is_some_and(|l| l.holds);
            self.state
                .queue
                .push_packet(r.key, arrival_tag(r.dst, holds), r.port, r.packet);
        }
    }

    /// What this partition counted.
    pub(crate) fn stats(&self) -> super::EngineStats {
        let s = &self.state;
        super::EngineStats {
            events: s.events,
            packet_hops: s.packet_hops,
            end_time: s.last_time,
            stopped_at_limit: s.pending() > 0,
            halted_at: (s.halt != u64::MAX).then_some(Time(s.halt)),
        }
    }

    /// The actors with their global ids and port counters.
    pub(crate) fn into_actors(self) -> impl Iterator<Item = (ActorId, A, Vec<PortStats>)> {
        let PartitionState {
            ports,
            port_base,
            gids,
            ..
        } = self.state;
        let stats: Vec<Vec<PortStats>> = port_base
            .windows(2)
            .map(|w| {
                ports[w[0] as usize..w[1] as usize]
                    .iter()
                    .map(|p| p.stats)
                    .collect()
            })
            .collect();
        gids.into_iter()
            .zip(self.actors)
            .zip(stats)
            .map(|((g, a), s)| (g, a, s))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn port_state_reads_of_an_idle_check_fill_one_line() {
        assert_eq!(std::mem::align_of::<PortState>(), 64);
        assert_eq!(std::mem::size_of::<Channel>(), 32);
        assert_eq!(std::mem::offset_of!(PortState, fault), 64);
    }
}
