//! The switch actor: forwarding, buffer admission and per-port egress.

use fabemu_fabric::engine::{Actor, Ctx, Event};
use fabemu_fabric::packet::Packet;
use fabemu_fabric::route::{flow_hash, RouteTable};
use fabemu_fabric::units::Time;
use fabemu_fabric::wire::{self, FrameKind};
use serde::{Deserialize, Serialize};

use crate::buffer::{BufferConfig, Refusal, SharedBuffer};
use crate::egress::{ClassReport, Egress, EgressScheduler};

/// A switch's settings (the scenario's per-switch fields).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SwitchConfig {
    /// Packet memory.
    #[serde(default)]
    pub buffer: BufferConfig,
}

/// Per egress port counters.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct SwitchPortStats {
    /// Frames admitted to this port's queue.
    pub enqueued: u64,
    /// Frames dropped at admission (buffer full).
    pub dropped_packets: u64,
    /// Bytes of frames dropped at admission.
    pub dropped_bytes: u64,
    /// Deepest the queue got, in bytes.
    pub max_queue_bytes: u64,
    /// Total time frames waited in this queue, in ps; divide by `dequeued` for the mean.
    pub queueing_delay_sum_ps: u64,
    /// Frames that left the queue.
    pub dequeued: u64,
}

/// Whole-switch counters.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct SwitchStats {
    /// Frames received.
    pub received: u64,
    /// Frames dropped because no route matched the destination.
    pub no_route: u64,
    /// Frames dropped because their TTL ran out (a routing loop).
    pub ttl_expired: u64,
    /// Frames dropped because they could not be parsed.
    pub malformed: u64,
    /// PFC pause frames received (counted and dropped; PFC is not implemented yet).
    pub pause_frames_received: u64,
    /// Peak shared-buffer occupancy in bytes.
    pub peak_buffer_bytes: u64,
    /// Frames the engine refused to transmit (an internal error; always 0 in a sound run).
    pub tx_refused: u64,
}

/// A switch: forwarding table, shared buffer, one egress scheduler per port.
pub struct Switch {
    routes: RouteTable,
    seed: u64,
    buffer: SharedBuffer,
    queues: Vec<Egress>,
    /// Per port, a pending shaping wake-up timer.
    wake_at: Vec<Option<Time>>,
    /// Per egress port counters.
    pub port_stats: Vec<SwitchPortStats>,
    /// Whole-switch counters.
    pub stats: SwitchStats,
}

impl Switch {
    /// A switch with `ports` ports, FIFO egress, forwarding by `routes`, ECMP hashed with `seed`
    /// (give each switch its own seed, as real switches salt their hash, or two tiers of ECMP
    /// would make the same choice and polarize).
    pub fn new(ports: usize, routes: RouteTable, cfg: &SwitchConfig, seed: u64) -> Switch {
        Switch {
            routes,
            seed,
            buffer: SharedBuffer::new(&cfg.buffer, ports),
            queues: (0..ports).map(|_| Egress::default()).collect(),
            wake_at: vec![None; ports],
            port_stats: vec![SwitchPortStats::default(); ports],
            stats: SwitchStats::default(),
        }
    }

    /// Replaces port `port`'s egress scheduler (it must be empty: call before the run).
    pub fn set_scheduler(&mut self, port: usize, sched: Box<dyn EgressScheduler>) {
        if let Some(q) = self.queues.get_mut(port) {
            *q = Egress::Custom(sched);
        }
    }

    /// Total frames dropped at admission.
    pub fn dropped_packets(&self) -> u64 {
        self.port_stats.iter().map(|p| p.dropped_packets).sum()
    }

    /// Frames still queued (non-zero after a run means frames were stranded).
    pub fn queued_packets(&self) -> usize {
        self.queues.iter().map(|q| q.len()).sum()
    }

    fn on_packet(&mut self, mut pkt: Packet, ctx: &mut Ctx<'_>) {
        self.stats.received += 1;
        let flow = match wire::peek_roce_flow(pkt.header()) {
            (FrameKind::RoceV2, Some(flow)) => flow,
            (FrameKind::PfcPause, _) => {
                self.stats.pause_frames_received += 1;
                return;
            }
            _ => {
                self.stats.malformed += 1;
                return;
            }
        };
        let hash = flow_hash(flow.src, flow.dst, flow.udp_src_port, self.seed);
        let Some(out) = self.routes.select(flow.dst, hash) else {
            self.stats.no_route += 1;
            return;
        };
        match wire::decrement_ttl(pkt.header_mut()) {
            Ok(0) => {
                self.stats.ttl_expired += 1;
                return;
            }
            Ok(_) => {}
            Err(_) => {
                self.stats.malformed += 1;
                return;
            }
        }
        let len = pkt.frame_len() as u64;
        let ps = &mut self.port_stats[out];
        match self.buffer.admit(out, len) {
            Ok(()) => {
                ps.enqueued += 1;
                ps.max_queue_bytes = ps.max_queue_bytes.max(self.buffer.queue_bytes(out));
                self.stats.peak_buffer_bytes = self.buffer.peak();
                if let Some(dropped) = self.queues[out].enqueue(pkt, ctx.now()) {
                    // The scheduler refused it or evicted another to make room.
                    let dl = dropped.frame_len() as u64;
                    self.buffer.release(out, dl);
                    let ps = &mut self.port_stats[out];
                    ps.enqueued -= 1;
                    ps.dropped_packets += 1;
                    ps.dropped_bytes += dl;
                }
                self.start_tx(out, ctx);
            }
            Err(Refusal::PoolFull) | Err(Refusal::QueueFull) => {
                ps.dropped_packets += 1;
                ps.dropped_bytes += len;
            }
        }
    }

    fn start_tx(&mut self, port: usize, ctx: &mut Ctx<'_>) {
        if !ctx.port_idle(port) {
            return;
        }
        let now = ctx.now();
        match self.queues[port].dequeue(now, 0) {
            Some(d) => {
                self.buffer.release(port, d.packet.frame_len() as u64);
                let ps = &mut self.port_stats[port];
                ps.dequeued += 1;
                ps.queueing_delay_sum_ps += now.saturating_sub(d.enqueued_at).ps();
                if ctx.transmit(port, d.packet).is_err() {
                    self.stats.tx_refused += 1;
                }
            }
            None => {
                // Frames held by a shaper: wake up when the first becomes eligible.
                if let Some(t) = self.queues[port].next_release(now) {
                    let armed = &mut self.wake_at[port];
                    if armed.is_none_or(|a| a > t) {
                        *armed = Some(t);
                        ctx.set_timer(t, port as u64);
                    }
                }
            }
        }
    }

    /// Per egress port, the scheduler's per-class counters (empty for FIFO ports).
    pub fn port_classes(&self) -> Vec<Vec<ClassReport>> {
        self.queues.iter().map(|q| q.classes()).collect()
    }

    /// Priority inversions counted by the ports' schedulers, summed.
    pub fn priority_inversions(&self) -> u64 {
        self.queues.iter().map(|q| q.priority_inversions()).sum()
    }
}

impl Actor for Switch {
    fn start(&mut self, _ctx: &mut Ctx<'_>) {}

    fn handle(&mut self, event: Event, ctx: &mut Ctx<'_>) {
        match event {
            Event::Packet { packet, .. } => self.on_packet(packet, ctx),
            Event::TxDone { port } => self.start_tx(port, ctx),
            Event::Timer { token } => {
                let port = token as usize;
                if let Some(w) = self.wake_at.get_mut(port) {
                    *w = None;
                    self.start_tx(port, ctx);
                }
            }
        }
    }
}
