//! The gateway: where a real program's frames enter and leave the emulated fabric.
//!
//! An emulated host is the world's [`Node`] (its NIC still runs the scenario's built-in
//! workload, if any) with a [`Gateway`] beside it on the same ports. Frames that a program
//! sends wait in the gateway's bounded queue, like a NIC's transmit queue, each bound for the
//! port the NIC's routing picks for it ([`Nic::route_frame`]: one link, or on a direct
//! topology the link toward the destination, ECMP on the real 5-tuple): they go on the wire at
//! that link's rate, taking turns with the NIC's own frames, and a frame of a priority that
//! the next hop has paused (PFC) waits while others may pass. Frames that arrive for the host
//! and are not the NIC's (anything but RoCEv2 and PFC) are kept with their arrival time, for
//! the edge to write into the host's namespace; those addressed to another host, at a host
//! with several links (rings, tori), are relayed by its NIC as its own relayed frames are
//! ([`Nic::relay`]: the next link's serialization, its transit queue, PFC), never written
//! into this host's namespace.
//!
//! The gateway is an actor like any other: sans-IO, no clock, no socket. The edge (the pacing
//! loop) gives it frames with [`EmuNode::offer`], each with the virtual time it was read, and
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

use fabemu_fabric::host::Nic;

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
    /// Frames the program sent toward an address no route leads to (a host with several
    /// links; a host on one link sends every frame out of it): dropped.
    pub dropped_no_route: u64,
    /// Frames that arrived at this host neither for its NIC nor addressed to it, at a host
    /// on one link (which relays nothing): dropped.
    pub dropped_not_for_host: u64,
    /// Frames of other hosts' programs that arrived at this host (one with several links) on
    /// their way elsewhere and that its NIC relayed onto the next link.
    pub frames_relayed: u64,
    /// Their bytes.
    pub bytes_relayed: u64,
    /// Such frames its NIC could not relay (its relay buffer full, no route on): dropped
    /// (the NIC's `relay_dropped`, `blackholed` or `dropped_invalid` count them too).
    pub relay_dropped: u64,
    /// Most bytes the host queue held.
    pub queue_peak_bytes: u64,
}

/// A host's way in and out of the fabric for real frames (see the module docs).
pub struct Gateway {
    ip: Ipv4Addr,
    /// Frames in the order they were read, each with its virtual read time and its port.
    queue: VecDeque<Queued>,
    queued_bytes: u64,
    capacity: u64,
    /// The longest frame the host sends (MTU + Ethernet header).
    max_frame: u64,
    /// Per port, per priority, until when the next hop paused it.
    paused_until: Vec<[Time; CLASSES]>,
    /// Per port: the gateway sends next when the port frees (the NIC sent last).
    turn: Vec<bool>,
    delivered: Vec<(Time, Bytes)>,
    stats: GatewayStats,
}

/// A frame in the host queue.
struct Queued {
    /// When it was read (virtual time).
    at: Time,
    /// The port it leaves by.
    port: usize,
    frame: Packet,
}

impl Gateway {
    /// A gateway for the host at `ip` with `ports` links, whose queue holds at most
    /// `capacity` bytes of frames up to `max_frame` bytes long.
    pub fn new(ip: Ipv4Addr, ports: usize, capacity: u64, max_frame: u64) -> Gateway {
        let ports = ports.max(1);
        Gateway {
            ip,
            queue: VecDeque::new(),
            queued_bytes: 0,
            capacity,
            max_frame,
            paused_until: vec![[Time::ZERO; CLASSES]; ports],
            turn: vec![true; ports],
            delivered: Vec::new(),
            stats: GatewayStats::default(),
        }
    }

    /// Takes a frame the program sent (Ethernet, without FCS) at virtual time `at`, to leave
    /// by the port `route` gives for its headers (asked only when the host has several
    /// links): queued if it is IPv4, has a route and fits, else dropped and counted. True
    /// when queued: the edge then wakes the gateway at `at` (frames are offered in the order
    /// they were read, so `at` never decreases).
    pub fn offer(
        &mut self,
        frame: &[u8],
        at: Time,
        route: impl FnOnce(&[u8]) -> Option<usize>,
    ) -> bool {
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
        let port = if self.ports() == 1 {
            Some(0)
        } else {
            route(pkt.header()).filter(|&p| p < self.ports())
        };
        let Some(port) = port else {
            self.stats.dropped_no_route += 1;
            return false;
        };
        self.queued_bytes += len;
        self.stats.queue_peak_bytes = self.stats.queue_peak_bytes.max(self.queued_bytes);
        self.queue.push_back(Queued {
            at,
            port,
            frame: pkt,
        });
        true
    }

    /// The host's links.
    pub fn ports(&self) -> usize {
        self.turn.len()
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

    /// Puts the oldest frame for `port` of an unpaused priority on the wire if the port is
    /// idle; asks to hear when a busy port frees, and wakes itself when a pause ends.
    fn pump(&mut self, port: usize, ctx: &mut Ctx<'_>) -> bool {
        let Some(paused) = self.paused_until.get(port) else {
            return false;
        };
        if !self.queue.iter().any(|q| q.port == port) {
            return false;
        }
        if !ctx.port_idle(port) {
            ctx.want_tx_done(port);
            return false;
        }
        let now = ctx.now();
        // Only frames already read by now: a later one waits for its own wake-up.
        let Some(i) = self
            .queue
            .iter()
            .take_while(|q| q.at <= now)
            .position(|q| q.port == port && paused[Self::class(&q.frame)] <= now)
        else {
            // Everything for this port read by now is paused: try again when its first pause
            // ends (a frame read later has its own wake-up at its read time).
            let resume = paused.iter().filter(|&&t| t > now).min();
            if let Some(&t) = resume {
                ctx.set_timer(t, WAKE);
            }
            return false;
        };
        let Some(q) = self.queue.remove(i) else {
            return false;
        };
        let len = q.frame.frame_len() as u64;
        self.queued_bytes -= len.min(self.queued_bytes);
        self.stats.frames_in += 1;
        self.stats.bytes_in += len;
        // A refused transmit cannot happen (the port is idle); the frame is lost if it does.
        let _ = ctx.transmit(port, q.frame);
        true
    }

    /// [`Gateway::pump`] of every port (a wake-up: a frame read, a pause ended).
    fn pump_all(&mut self, ctx: &mut Ctx<'_>) {
        for port in 0..self.ports() {
            self.pump(port, ctx);
        }
    }

    /// A PFC frame from the next hop on `port`: the pause it sets, per priority, for the
    /// gateway's frames to that port.
    fn on_pause(&mut self, port: usize, repr: &PfcPauseRepr, ctx: &Ctx<'_>) {
        let bps = ctx.channel(port).map_or(0, |c| c.rate.bandwidth().bps());
        let Some(paused) = self.paused_until.get_mut(port) else {
            return;
        };
        for (c, until) in paused.iter_mut().enumerate() {
            if repr.class_enable & (1 << c) != 0 {
                let q = repr.quanta[c];
                *until = ctx.now() + Time(wire::pause_quanta_to_ps(q, bps));
            }
        }
    }

    /// A frame of a program that arrived on `port` and is not the NIC's: written into this
    /// host's namespace if addressed to it, relayed by `nic` if the host has several links,
    /// dropped otherwise; counted either way.
    fn on_frame(&mut self, port: usize, pkt: Packet, nic: Option<&mut Nic>, ctx: &mut Ctx<'_>) {
        if wire::ipv4_dst(pkt.header()) == Some(self.ip) {
            let bytes = Bytes::from(pkt.to_frame_bytes());
            self.stats.frames_out += 1;
            self.stats.bytes_out += bytes.len() as u64;
            self.delivered.push((ctx.now(), bytes));
            return;
        }
        match nic {
            Some(nic) if self.ports() > 1 => {
                let len = pkt.frame_len() as u64;
                if nic.relay(port, pkt, ctx) {
                    self.stats.frames_relayed += 1;
                    self.stats.bytes_relayed += len;
                } else {
                    self.stats.relay_dropped += 1;
                }
            }
            _ => self.stats.dropped_not_for_host += 1,
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

    /// [`Gateway::offer`] of a frame the host's program sent, routed as the host's NIC routes
    /// its own frames; false for an actor that is not a host.
    pub fn offer(&mut self, frame: &[u8], at: Time) -> bool {
        match self {
            EmuNode::Host(Node::Host(h), gw) => gw.offer(frame, at, |hdr| h.nic.route_frame(hdr)),
            _ => false,
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
            Event::Timer { token: WAKE } => gw.pump_all(ctx),
            Event::TxDone { port } => {
                // The port's turns alternate between the gateway and the NIC: whoever did
                // not send last goes first.
                let turn = gw.turn.get(port).copied().unwrap_or(false);
                let mut sent = turn && gw.pump(port, ctx);
                node.handle(event, ctx);
                if !sent && ctx.port_idle(port) {
                    sent = gw.pump(port, ctx);
                }
                if let Some(t) = gw.turn.get_mut(port) {
                    *t = !sent;
                }
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
                            gw.on_pause(port, &repr, ctx);
                        }
                        node.handle(Event::Frame { port, frame }, ctx);
                        gw.pump(port, ctx);
                    }
                    _ => {
                        let Some(pkt) = ctx.take_frame(frame) else {
                            return;
                        };
                        let nic = match node {
                            Node::Host(h) => Some(&mut h.nic),
                            Node::Switch(_) => None,
                        };
                        gw.on_frame(port, pkt, nic, ctx);
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
