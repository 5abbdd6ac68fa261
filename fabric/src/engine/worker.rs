//! One partition's state and the worker loop that runs partitions in parallel windows.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};

use crossbeam::channel::{unbounded, Receiver, Sender};
use crossbeam::utils::CachePadded;

use super::barrier::Barrier;
use super::capture::{CaptureBuf, CaptureDirection};
use super::partition::Plan;
use super::queue::{Entry, EventKey, EventQueue, Kind};
use super::sample::Sampler;
use super::{
    Actor, ActorId, Ctx, EngineConfig, EngineError, Event, PortStats, Progress, TransmitError,
    Wiring,
};
use crate::link::{Channel, EthernetOverhead};
use crate::packet::Packet;
use crate::units::Time;

/// A transmitting port and where its frames go.
struct PortState {
    channel: Channel,
    peer_part: u32,
    peer_local: u32,
    peer_port: u16,
    busy_until: u64,
    stats: PortStats,
    /// Capture taps: [`TAP_OUT`] and/or [`TAP_IN`] (0 when not tapped).
    tap: u8,
}

/// Record frames this port transmits.
const TAP_OUT: u8 = 1;
/// Record frames this port transmits as arrivals at the peer port (which is tapped).
const TAP_IN: u8 = 2;

/// A frame bound for another partition.
pub(crate) struct Remote {
    key: EventKey,
    dst: u32,
    port: u16,
    packet: Packet,
}

/// Everything of a partition except its actors (so an actor and the scheduler can be borrowed
/// at once).
pub(crate) struct Sched {
    part: u32,
    queue: EventQueue,
    ports: Vec<PortState>,
    /// `port_base[i]..port_base[i+1]` are local actor i's ports.
    port_base: Vec<u32>,
    seq: Vec<u64>,
    gids: Vec<ActorId>,
    outbox: Vec<Vec<Remote>>,
    overhead: EthernetOverhead,
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

impl Sched {
    /// First time not to run because of a halt request (`u64::MAX` without one).
    pub(crate) fn halt_end(&self) -> u64 {
        match self.halt {
            u64::MAX => u64::MAX,
            t => t.saturating_add(self.halt_grace).saturating_add(1),
        }
    }

    pub(crate) fn request_halt(&mut self, at: Time) {
        self.halt = self.halt.min(at.ps());
    }

    pub(crate) fn global_id(&self, me: u32) -> ActorId {
        self.gids[me as usize]
    }

    fn port_range(&self, me: u32) -> (usize, usize) {
        (
            self.port_base[me as usize] as usize,
            self.port_base[me as usize + 1] as usize,
        )
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
        let seq = &mut self.seq[me as usize];
        let k = EventKey::new(time, self.gids[me as usize], *seq);
        *seq += 1;
        k
    }

    #[inline]
    pub(crate) fn transmit(
        &mut self,
        me: u32,
        port: usize,
        packet: Packet,
        now: Time,
    ) -> Result<(), TransmitError> {
        let (a, b) = self.port_range(me);
        if a + port >= b {
            return Err(TransmitError::NoSuchPort);
        }
        let ps = &mut self.ports[a + port];
        if ps.busy_until > now.ps() {
            return Err(TransmitError::Busy);
        }
        let frame = packet.frame_len() as u64;
        let wire = self.overhead.wire_bytes(frame as usize);
        let ser = ps.channel.rate.serialization_time(wire);
        let done = now.ps().saturating_add(ser.ps());
        let arrive = done.saturating_add(ps.channel.latency.ps());
        ps.busy_until = done;
        ps.stats.tx_packets += 1;
        ps.stats.tx_frame_bytes += frame;
        ps.stats.tx_wire_bytes += wire;
        ps.stats.busy = ps.stats.busy + ser;
        let (peer_part, peer_local, peer_port) = (ps.peer_part, ps.peer_local, ps.peer_port);
        self.packet_hops += 1;
        let k_done = self.next_key(me, done);
        let k_arrive = self.next_key(me, arrive);
        // Per-packet logs exist only when built with the `packet-trace` feature, so that a
        // normal build pays nothing for them, not even the disabled-callsite check.
        #[cfg(feature = "packet-trace")]
        tracing::trace!(
            target: "fabemu::packet",
            actor = self.gids[me as usize],
            port,
            start_ps = now.ps(),
            arrive_ps = arrive,
            frame_len = frame,
            "transmit"
        );
        self.queue.push(Entry {
            key: k_done,
            dst: me,
            port: port as u16,
            kind: Kind::TxDone,
            data: 0,
        });
        // The packet is moved straight into the queue or outbox; the capture reads it back from
        // there, so the hot path never needs it at a fixed address.
        let slot = if peer_part == self.part {
            self.queue
                .push_packet(k_arrive, peer_local, peer_port, packet)
        } else {
            self.outbox[peer_part as usize].push(Remote {
                key: k_arrive,
                dst: peer_local,
                port: peer_port,
                packet,
            });
            u32::MAX
        };
        if self.observing {
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
            s.add_busy(local_port, start, done);
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

    #[inline]
    pub(crate) fn timer(&mut self, me: u32, at: Time, token: u64) {
        let key = self.next_key(me, at.ps());
        self.queue.push(Entry {
            key,
            dst: me,
            port: 0,
            kind: Kind::Timer,
            data: token,
        });
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

/// How a parallel run ended: the windows run, and whether it was cancelled.
pub(crate) struct ParallelEnd {
    /// Synchronization windows executed.
    pub(crate) windows: u64,
    /// True when [`Progress::cancel`] stopped the run (all workers at the same barrier).
    pub(crate) cancelled: bool,
}

/// A partition: some actors and their scheduler.
pub(crate) struct Partition<A> {
    actors: Vec<A>,
    pub(crate) sched: Sched,
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
                sched: Sched {
                    part: p as u32,
                    queue: EventQueue::default(),
                    ports: Vec::new(),
                    port_base: vec![0],
                    seq: Vec::with_capacity(counts[p] as usize),
                    gids: Vec::with_capacity(counts[p] as usize),
                    outbox: (0..n_parts).map(|_| Vec::new()).collect(),
                    overhead: cfg.overhead,
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
                },
            })
            .collect();
        let tapped = |a: usize, p: usize| {
            cfg.capture
                .as_ref()
                .is_some_and(|c| c.ports.contains(&(a as ActorId, p)))
        };
        for (gid, actor) in actors.into_iter().enumerate() {
            let p = &mut parts[plan.assignment[gid] as usize];
            p.actors.push(actor);
            p.sched.gids.push(gid as ActorId);
            p.sched.seq.push(0);
            for (port, w) in wiring.ports[gid].iter().enumerate() {
                let peer = w.peer as usize;
                let tap = if cfg.capture.is_some() {
                    p.sched.peer_gid.push(w.peer);
                    (if tapped(gid, port) { TAP_OUT } else { 0 })
                        | (if tapped(peer, w.peer_port) { TAP_IN } else { 0 })
                } else {
                    0
                };
                p.sched.ports.push(PortState {
                    channel: w.channel,
                    peer_part: plan.assignment[peer],
                    peer_local: local[peer],
                    peer_port: w.peer_port as u16,
                    busy_until: 0,
                    stats: PortStats::default(),
                    tap,
                });
            }
            let n = p.sched.ports.len() as u32;
            p.sched.port_base.push(n);
        }
        if let Some(sc) = &cfg.sample {
            for p in &mut parts {
                let s = Sampler::new(sc, p.sched.ports.len(), p.actors.len());
                p.sched.next_sample = s.next_at();
                p.sched.sampler = Some(s);
            }
        }
        parts
    }

    /// Takes every snapshot due at or before `t` (before any event at `t` is handled).
    #[cold]
    #[inline(never)]
    fn take_samples(&mut self, t: u64) {
        let Some(s) = &mut self.sched.sampler else {
            return;
        };
        while s.next_at() <= t {
            for (i, actor) in self.actors.iter().enumerate() {
                s.scratch.clear();
                actor.sample(&mut s.scratch);
                s.store(i);
            }
            s.advance();
        }
        self.sched.next_sample = s.next_at();
    }

    /// Brings the sampler to `interval` and takes the snapshots still missing to cover
    /// `buckets` boundaries (the actors' final state: nothing happens after their last event).
    pub(crate) fn finish_samples(&mut self, interval: u64, buckets: usize) {
        let Some(s) = &mut self.sched.sampler else {
            return;
        };
        s.coarsen_to(interval);
        for _ in 0..s.missing(buckets) {
            for (i, actor) in self.actors.iter().enumerate() {
                s.scratch.clear();
                actor.sample(&mut s.scratch);
                s.store(i);
            }
            s.advance_fixed();
        }
    }

    /// Local actor ids and port ranges (to map local series to global actors).
    pub(crate) fn layout(&self) -> (&[ActorId], &[u32]) {
        (&self.sched.gids, &self.sched.port_base)
    }

    /// Calls every actor's `start` at time zero.
    pub(crate) fn start_all(&mut self) {
        for (i, actor) in self.actors.iter_mut().enumerate() {
            let mut ctx = Ctx {
                now: Time::ZERO,
                me: i as u32,
                sched: &mut self.sched,
            };
            actor.start(&mut ctx);
        }
    }

    /// Handles every local event with time < `end`, or fewer when the run is cancelled
    /// ([`Progress::cancel`], read every 65536 events; a cancelled window is the last one).
    pub(crate) fn run_window(
        &mut self,
        end: u64,
        progress: &Progress,
    ) -> Result<Window, EngineError> {
        let mut since_report = 0u32;
        let mut end = end.min(self.sched.halt_end());
        while let Some(e) = self.sched.queue.pop_before(end) {
            if e.key.time >= self.sched.next_sample {
                self.take_samples(e.key.time);
            }
            let now = Time(e.key.time);
            self.sched.last_time = now;
            self.sched.events += 1;
            let event = match e.kind {
                Kind::Packet => match self.sched.queue.take_packet(e.data) {
                    Some(packet) => Event::Packet {
                        port: e.port as usize,
                        packet,
                    },
                    None => {
                        return Err(EngineError::Failure(format!(
                            "packet slot {} empty",
                            e.data
                        )))
                    }
                },
                Kind::TxDone => Event::TxDone {
                    port: e.port as usize,
                },
                Kind::Timer => Event::Timer { token: e.data },
            };
            let actor = &mut self.actors[e.dst as usize];
            let mut ctx = Ctx {
                now,
                me: e.dst,
                sched: &mut self.sched,
            };
            actor.handle(event, &mut ctx);
            end = end.min(self.sched.halt_end());
            since_report += 1;
            if since_report == 1 << 16 {
                since_report = 0;
                progress.events.fetch_add(1 << 16, Ordering::Relaxed);
                progress.sim_time_ps.fetch_max(now.ps(), Ordering::Relaxed);
                if progress.cancel.load(Ordering::Relaxed) {
                    return Ok(Window::Cancelled);
                }
            }
        }
        progress
            .events
            .fetch_add(since_report as u64, Ordering::Relaxed);
        progress
            .sim_time_ps
            .fetch_max(self.sched.last_time.ps(), Ordering::Relaxed);
        Ok(Window::Done)
    }

    fn ingest(&mut self, batch: Vec<Remote>) {
        for r in batch {
            self.sched.queue.push_packet(r.key, r.dst, r.port, r.packet);
        }
    }

    /// The actors with their global ids and port counters.
    pub(crate) fn into_actors(self) -> impl Iterator<Item = (ActorId, A, Vec<PortStats>)> {
        let Sched {
            ports,
            port_base,
            gids,
            ..
        } = self.sched;
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

/// Runs the partitions on one thread each, window by window, `cores` of which can run at once.
///
/// Each window has two barriers. At the first, every worker has published the time of its
/// next event and its earliest halt request, and the last to arrive decides for all whether the
/// run was cancelled: the workers stop together, at the same window boundary. Between the
/// first and the second they run the window; at the second, every frame for another partition
/// has been sent, so the next window starts with complete queues.
pub(crate) fn run_parallel<A: Actor>(
    parts: &mut [Partition<A>],
    lookahead: Time,
    until: Time,
    cores: usize,
    progress: &Progress,
) -> Result<ParallelEnd, EngineError> {
    let n = parts.len();
    let barrier = Barrier::new(n, cores);
    let mins: Vec<CachePadded<AtomicU64>> = (0..n)
        .map(|_| CachePadded::new(AtomicU64::new(u64::MAX)))
        .collect();
    let halts: Vec<CachePadded<AtomicU64>> = (0..n)
        .map(|_| CachePadded::new(AtomicU64::new(u64::MAX)))
        .collect();
    type Batch = Vec<Remote>;
    let (txs, rxs): (Vec<Sender<Batch>>, Vec<Receiver<Batch>>) =
        (0..n).map(|_| unbounded()).unzip();
    let limit = until.ps();
    let cancelled = || progress.cancel.load(Ordering::Relaxed);

    let results: Vec<Result<(u64, bool), EngineError>> = std::thread::scope(|s| {
        let handles: Vec<_> = parts
            .iter_mut()
            .zip(rxs)
            .enumerate()
            .map(|(me, (part, rx))| {
                let (barrier, mins, halts, txs, cancelled) =
                    (&barrier, &mins, &halts, &txs, &cancelled);
                s.spawn(move || {
                    let body = AssertUnwindSafe(|| -> Result<(u64, bool), EngineError> {
                        let mut waiter = barrier.waiter();
                        part.start_all();
                        let mut windows = 0u64;
                        loop {
                            while let Ok(batch) = rx.try_recv() {
                                part.ingest(batch);
                            }
                            mins[me].store(part.sched.queue.next_time(), Ordering::Release);
                            // The one place the cancel flag is read in a parallel run: the
                            // last worker to arrive reads it, and all of them act on its answer.
                            if barrier.wait(&mut waiter, cancelled)? {
                                return Ok((windows, true));
                            }
                            let gmin = mins
                                .iter()
                                .map(|m| m.load(Ordering::Acquire))
                                .min()
                                .unwrap_or(u64::MAX);
                            // Everyone learns the earliest halt request at the same barrier.
                            let ghalt = halts
                                .iter()
                                .map(|h| h.load(Ordering::Acquire))
                                .min()
                                .unwrap_or(u64::MAX);
                            part.sched.halt = part.sched.halt.min(ghalt);
                            let limit = limit.min(part.sched.halt_end().saturating_sub(1));
                            if gmin == u64::MAX || gmin > limit {
                                return Ok((windows, false));
                            }
                            windows += 1;
                            let end = gmin
                                .saturating_add(lookahead.ps())
                                .min(limit.saturating_add(1));
                            // A window cut short by a cancel is finished at the next barrier,
                            // where every worker sees the flag through the decision.
                            part.run_window(end, progress)?;
                            halts[me].store(part.sched.halt, Ordering::Release);
                            for (dst, out) in part.sched.outbox.iter_mut().enumerate() {
                                if !out.is_empty() {
                                    let _ = txs[dst].send(std::mem::take(out));
                                }
                            }
                            barrier.wait(&mut waiter, || false)?;
                        }
                    });
                    let result = match catch_unwind(body) {
                        Ok(r) => r,
                        Err(panic) => {
                            let msg = panic
                                .downcast_ref::<String>()
                                .cloned()
                                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                                .unwrap_or_else(|| "unknown panic".into());
                            Err(EngineError::Failure(format!("worker {me} panicked: {msg}")))
                        }
                    };
                    // A worker that failed will never reach the barrier again: release the
                    // others, which return `Aborted`.
                    if result.is_err() {
                        barrier.abort();
                    }
                    result
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(EngineError::Failure("worker thread lost".into())))
            })
            .collect()
    });
    // Report the root cause rather than the other workers' `Aborted`.
    let mut end = ParallelEnd {
        windows: 0,
        cancelled: false,
    };
    let mut aborted = None;
    let mut failure = None;
    for r in results {
        match r {
            Ok((w, c)) => {
                end.windows = end.windows.max(w);
                end.cancelled |= c;
            }
            Err(EngineError::Aborted) => aborted = Some(EngineError::Aborted),
            Err(e) => failure = failure.or(Some(e)),
        }
    }
    match failure.or(aborted) {
        Some(e) => Err(e),
        None => Ok(end),
    }
}
