//! The gateway: where a real program's frames enter and leave the emulated fabric.
//!
//! An emulated host is the world's [`Node`] (its NIC still runs the scenario's built-in
//! workload, if any) with a [`Gateway`] beside it on the same port. Frames that a program
//! sends wait in the gateway's bounded queue, like a NIC's transmit queue: they go on the wire
//! at the host link's rate, taking turns with the NIC's own frames, and a frame of a priority
//! that the switch has paused (PFC) waits while others may pass. Frames that arrive for the
//! host and are not the NIC's (anything but RoCEv2 and PFC) are kept with their arrival time,
//! for the edge to write into the host's namespace.
//!
//! The gateway is an actor like any other: sans-IO, no clock, no socket. The edge (the pacing
//! loop) gives it frames with [`Gateway::offer`], each with the virtual time it was read, and
//! wakes it with a timer ([`WAKE`]) then; a frame never goes on the wire before that time, even
//! when the loop, running behind, handed it over early. The edge takes deliveries with
//! [`Gateway::take_delivered`].

use std::collections::VecDeque;
use std::net::Ipv4Addr;

use bytes::Bytes;
use fabemu_fabric::engine::{Actor, Ctx, Event};
use fabemu_fabric::packet::{Packet, Payload, INLINE_HEADER_LEN};
use fabemu_fabric::units::Time;
use fabemu_fabric::wire::{self, FrameKind, PfcPauseRepr};
use serde::Serialize;

use crate::world::Node;

/// The timer token the edge wakes a gateway with (never one of the host's own: its tokens
/// keep their kind in the low bits, and this one is all ones).
pub const WAKE: u64 = u64::MAX;

/// PFC classes (priorities 0-7).
const CLASSES: usize = 8;

/// What a gateway counted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct GatewayStats {
    /// Frames the host's program sent that entered the fabric.
    pub frames_in: u64,
    /// Their bytes (Ethernet frames without FCS).
    pub bytes_in: u64,
    /// Frames delivered to the host's program.
    pub frames_out: u64,
    /// Their bytes.
    pub bytes_out: u64,
    /// Frames the program sent that are not IPv4 (IPv6, ARP, LLDP, ...): dropped.
    pub dropped_unsupported: u64,
    /// Frames dropped because the host queue was full.
    pub dropped_queue_full: u64,
    /// Frames that arrived at this host neither for its NIC nor addressed to it: dropped.
    pub dropped_not_for_host: u64,
    /// Most bytes the host queue held.
    pub queue_peak_bytes: u64,
}

/// A host's way in and out of the fabric for real frames (see the module docs).
pub struct Gateway {
    ip: Ipv4Addr,
    /// Frames in the order they were read, each with its virtual read time.
    queue: VecDeque<(Time, Packet)>,
    queued_bytes: u64,
    capacity: u64,
    /// The longest frame the host sends (MTU + Ethernet header).
    max_frame: u64,
    /// Per priority, until when the switch paused it.
    paused_until: [Time; CLASSES],
    /// The gateway sends next when the port frees (the NIC sent last).
    turn: bool,
    delivered: Vec<(Time, Bytes)>,
    stats: GatewayStats,
}

impl Gateway {
    /// A gateway for the host at `ip` whose queue holds at most `capacity` bytes of frames
    /// up to `max_frame` bytes long.
    pub fn new(ip: Ipv4Addr, capacity: u64, max_frame: u64) -> Gateway {
        Gateway {
            ip,
            queue: VecDeque::new(),
            queued_bytes: 0,
            capacity,
            max_frame,
            paused_until: [Time::ZERO; CLASSES],
            turn: true,
            delivered: Vec::new(),
            stats: GatewayStats::default(),
        }
    }

    /// Takes a frame the program sent (Ethernet, without FCS) at virtual time `at`: queued if
    /// it is IPv4 and fits, else dropped and counted. True when queued: the edge then wakes
    /// the gateway at `at` (frames are offered in the order they were read, so `at` never
    /// decreases).
    pub fn offer(&mut self, frame: &[u8], at: Time) -> bool {
        if wire::ipv4_dst(frame).is_none() {
            self.stats.dropped_unsupported += 1;
            return false;
        }
        let len = frame.len() as u64;
        if self.queued_bytes + len > self.capacity {
            self.stats.dropped_queue_full += 1;
            return false;
        }
        // The headers a switch reads and rewrites inline, the rest as data.
        let cut = frame.len().min(INLINE_HEADER_LEN);
        let rest = Bytes::copy_from_slice(&frame[cut..]);
        let Ok(pkt) = Packet::new(&frame[..cut], Payload::data(rest), &[]) else {
            self.stats.dropped_unsupported += 1;
            return false;
        };
        self.queued_bytes += len;
        self.stats.queue_peak_bytes = self.stats.queue_peak_bytes.max(self.queued_bytes);
        self.queue.push_back((at, pkt));
        true
    }

    /// The frames delivered since the last call, with their arrival (last bit) times.
    pub fn take_delivered(&mut self) -> std::vec::Drain<'_, (Time, Bytes)> {
        self.delivered.drain(..)
    }

    /// What it counted.
    pub fn stats(&self) -> GatewayStats {
        self.stats
    }

    /// True when the host queue has room for one more frame of the largest size the host
    /// sends (the edge reads no more from the host's interface until it has).
    pub fn has_room(&self) -> bool {
        self.queued_bytes + self.max_frame <= self.capacity
    }

    /// Frames waiting in the host queue.
    pub fn queued(&self) -> usize {
        self.queue.len()
    }

    /// The priority a switch gives the frame (class selector: DSCP's top three bits).
    fn class(pkt: &Packet) -> usize {
        usize::from(wire::dscp(pkt.header()).unwrap_or(0) >> 3) & (CLASSES - 1)
    }

    /// Puts the oldest frame of an unpaused priority on the wire if the port is idle; asks to
    /// hear when a busy port frees, and wakes itself when a pause ends.
    fn pump(&mut self, ctx: &mut Ctx<'_>) -> bool {
        if self.queue.is_empty() {
            return false;
        }
        if !ctx.port_idle(0) {
            ctx.want_tx_done(0);
            return false;
        }
        let now = ctx.now();
        // Only frames already read by now: a later one waits for its own wake-up.
        let Some(i) = self
            .queue
            .iter()
            .take_while(|(at, _)| *at <= now)
            .position(|(_, p)| self.paused_until[Self::class(p)] <= now)
        else {
            // Everything read by now is paused: try again when the first pause ends (a frame
            // read later has its own wake-up at its read time).
            let resume = self.paused_until.iter().filter(|&&t| t > now).min();
            if let Some(&t) = resume {
                ctx.set_timer(t, WAKE);
            }
            return false;
        };
        let Some((_, pkt)) = self.queue.remove(i) else {
            return false;
        };
        let len = pkt.frame_len() as u64;
        self.queued_bytes -= len.min(self.queued_bytes);
        self.stats.frames_in += 1;
        self.stats.bytes_in += len;
        // A refused transmit cannot happen (the port is idle); the frame is lost if it does.
        let _ = ctx.transmit(0, pkt);
        true
    }

    /// A PFC frame from the switch: the pause it sets, per priority, for the gateway's queue.
    fn on_pause(&mut self, repr: &PfcPauseRepr, ctx: &Ctx<'_>) {
        let bps = ctx.channel(0).map_or(0, |c| c.rate.bandwidth().bps());
        for (c, until) in self.paused_until.iter_mut().enumerate() {
            if repr.class_enable & (1 << c) != 0 {
                let q = repr.quanta[c];
                *until = ctx.now() + Time(wire::pause_quanta_to_ps(q, bps));
            }
        }
    }
}

/// An actor of an emulated world: a host with its gateway, or a switch (see the module docs).
pub enum EmuNode {
    /// A host: the world's host actor and its gateway, sharing port 0.
    Host(Node, Box<Gateway>),
    /// Any other actor of the world, as it is.
    Other(Node),
}

impl EmuNode {
    /// The world's actor inside.
    pub fn into_node(self) -> Node {
        match self {
            EmuNode::Host(n, _) | EmuNode::Other(n) => n,
        }
    }

    /// The gateway of a host.
    pub fn gateway_mut(&mut self) -> Option<&mut Gateway> {
        match self {
            EmuNode::Host(_, g) => Some(g),
            EmuNode::Other(_) => None,
        }
    }

    /// The gateway of a host.
    pub fn gateway(&self) -> Option<&Gateway> {
        match self {
            EmuNode::Host(_, g) => Some(g),
            EmuNode::Other(_) => None,
        }
    }
}

impl Actor for EmuNode {
    fn start(&mut self, ctx: &mut Ctx<'_>) {
        match self {
            EmuNode::Host(n, _) | EmuNode::Other(n) => n.start(ctx),
        }
    }

    fn handle(&mut self, event: Event, ctx: &mut Ctx<'_>) {
        let (node, gw) = match self {
            EmuNode::Other(n) => return n.handle(event, ctx),
            EmuNode::Host(n, g) => (n, g),
        };
        match event {
            Event::Timer { token: WAKE } => {
                gw.pump(ctx);
            }
            Event::TxDone { port: 0 } => {
                // The port's turns alternate between the gateway and the NIC: whoever did
                // not send last goes first.
                let mut sent = gw.turn && gw.pump(ctx);
                node.handle(event, ctx);
                if !sent && ctx.port_idle(0) {
                    sent = gw.pump(ctx);
                }
                gw.turn = !sent;
            }
            Event::Frame { port, frame } => {
                let kind = ctx.frame(&frame).map(|p| wire::frame_kind(p.header()));
                match kind {
                    Some(FrameKind::RoceV2) => node.handle(Event::Frame { port, frame }, ctx),
                    Some(FrameKind::PfcPause) => {
                        if let Some(repr) = ctx
                            .frame(&frame)
                            .and_then(|p| PfcPauseRepr::parse(p.header()).ok())
                        {
                            gw.on_pause(&repr, ctx);
                        }
                        node.handle(Event::Frame { port, frame }, ctx);
                        gw.pump(ctx);
                    }
                    _ => {
                        let Some(pkt) = ctx.take_frame(frame) else {
                            return;
                        };
                        if wire::ipv4_dst(pkt.header()) == Some(gw.ip) {
                            let bytes = Bytes::from(pkt.to_frame_bytes());
                            gw.stats.frames_out += 1;
                            gw.stats.bytes_out += bytes.len() as u64;
                            gw.delivered.push((ctx.now(), bytes));
                        } else {
                            gw.stats.dropped_not_for_host += 1;
                        }
                    }
                }
            }
            other => node.handle(other, ctx),
        }
    }

    fn sample(&self, out: &mut Vec<u64>) {
        match self {
            EmuNode::Host(n, _) | EmuNode::Other(n) => n.sample(out),
        }
    }

    fn holds_frames(&self) -> bool {
        match self {
            EmuNode::Host(n, _) | EmuNode::Other(n) => n.holds_frames(),
        }
    }
}
