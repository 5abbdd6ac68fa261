//! A small world for switch tests: switches and scripted hosts on the real engine.
//!
//! A [`Host`] has one port. It can stream `count` RoCE frames back-to-back to one destination
//! (honouring PFC pause frames for its priority, as a NIC does, when asked to), send scripted
//! frames at fixed times, and it records every frame it receives with the arrival time.

#![allow(dead_code)]

use std::net::Ipv4Addr;

use fabemu_fabric::engine::{self, Actor, Ctx, EngineConfig, Event, PortWiring, Wiring};
use fabemu_fabric::link::{Channel, Rate};
use fabemu_fabric::packet::{Packet, Payload};
use fabemu_fabric::route::RouteTable;
use fabemu_fabric::units::{Bandwidth, Time};
use fabemu_fabric::wire::{
    self, opcode, pause_quanta_to_ps, BthRepr, Ecn, FrameKind, PfcPauseRepr, RoceRepr,
    MAX_HEADER_LEN, PFC_FRAME_LEN,
};
use fabemu_switch::Switch;

/// 100 Gb/s, the speed of every test link.
pub const RATE: Bandwidth = Bandwidth::from_gbps(100);
/// 1 us of cable.
pub const LATENCY: Time = Time::from_us(1);

/// The address of host `n`.
pub fn ip(n: u8) -> Ipv4Addr {
    Ipv4Addr::new(10, 0, 0, n)
}

/// A RoCE data frame from `src` to `dst` with `dscp` and `payload` bytes (ECT(0)).
pub fn roce(src: Ipv4Addr, dst: Ipv4Addr, dscp: u8, payload: u32, psn: u32) -> Packet {
    let repr = RoceRepr {
        src_mac: [2, 0, 0, 0, 0, src.octets()[3]],
        dst_mac: [2, 0, 0, 0, 0, dst.octets()[3]],
        src_ip: src,
        dst_ip: dst,
        dscp,
        ecn: Ecn::Ect0,
        ttl: 64,
        ip_id: 0,
        udp_src_port: 0xC000 | u16::from(src.octets()[3]),
        bth: BthRepr {
            opcode: opcode::SEND_ONLY,
            pkey: 0xFFFF,
            dest_qp: 1,
            psn,
            ..BthRepr::default()
        },
        reth: None,
        aeth: None,
        immdt: None,
        payload_len: payload as usize,
    };
    let mut buf = [0u8; MAX_HEADER_LEN];
    let n = repr.emit(&mut buf).unwrap();
    Packet::new(&buf[..n], Payload::Timing(payload), &[0; 4]).unwrap()
}

/// A PFC frame as a packet.
pub fn pfc_frame(repr: PfcPauseRepr) -> Packet {
    let mut buf = [0u8; PFC_FRAME_LEN];
    repr.emit(&mut buf).unwrap();
    Packet::new(&buf, Payload::Timing(0), &[]).unwrap()
}

/// A frame a host received.
#[derive(Clone, Debug)]
pub struct Rx {
    /// Arrival time (last bit).
    pub at: Time,
    /// The frame's bytes.
    pub bytes: Vec<u8>,
    /// Its DSCP (RoCE frames).
    pub dscp: Option<u8>,
    /// Its ECN codepoint (RoCE frames).
    pub ecn: Option<Ecn>,
}

/// A test host.
#[derive(Default)]
pub struct Host {
    /// Own address.
    pub ip: Option<Ipv4Addr>,
    /// Where the stream goes.
    pub dst: Option<Ipv4Addr>,
    /// DSCP of the stream.
    pub dscp: u8,
    /// Payload of each stream frame.
    pub payload: u32,
    /// Stream frames still to send.
    pub count: u64,
    /// Stop sending the stream's priority while paused.
    pub honour_pause: bool,
    /// Frames to send at given times (port assumed idle then).
    pub script: Vec<(Time, Packet)>,
    /// When the stream's pause ends (`Time::ZERO` = not paused).
    paused_until: Time,
    psn: u32,
    /// Everything received.
    pub rx: Vec<Rx>,
    /// Stream frames sent.
    pub sent: u64,
    /// Frames the switches held ([`Ctx::held_frames`]) after this host's last event: 0 at
    /// the sink's last arrival when every frame was given back.
    pub held_at_last: usize,
}

impl Host {
    /// A host at `ip` streaming `count` frames of `payload` bytes to `dst` with `dscp`.
    pub fn streaming(ip: Ipv4Addr, dst: Ipv4Addr, dscp: u8, payload: u32, count: u64) -> Host {
        Host {
            ip: Some(ip),
            dst: Some(dst),
            dscp,
            payload,
            count,
            honour_pause: true,
            ..Host::default()
        }
    }

    /// A host that only receives (and runs its script).
    pub fn sink() -> Host {
        Host::default()
    }

    /// Received RoCE frames.
    pub fn data(&self) -> impl Iterator<Item = &Rx> {
        self.rx.iter().filter(|r| r.dscp.is_some())
    }

    /// Received PFC frames, parsed.
    pub fn pauses(&self) -> Vec<(Time, PfcPauseRepr)> {
        self.rx
            .iter()
            .filter_map(|r| PfcPauseRepr::parse(&r.bytes).ok().map(|p| (r.at, p)))
            .collect()
    }

    fn send_next(&mut self, ctx: &mut Ctx<'_>) {
        let (Some(src), Some(dst)) = (self.ip, self.dst) else {
            return;
        };
        if self.count == 0 || !ctx.port_idle(0) || ctx.now() < self.paused_until {
            return;
        }
        self.count -= 1;
        self.sent += 1;
        self.psn += 1;
        let pkt = roce(src, dst, self.dscp, self.payload, self.psn);
        ctx.transmit(0, pkt).unwrap();
    }
}

const TIMER_SCRIPT: u64 = 1 << 32;
const TIMER_RESUME: u64 = 2 << 32;

impl Actor for Host {
    fn start(&mut self, ctx: &mut Ctx<'_>) {
        for (i, (t, _)) in self.script.iter().enumerate() {
            ctx.set_timer(*t, TIMER_SCRIPT | i as u64);
        }
        self.send_next(ctx);
    }

    fn handle(&mut self, event: Event, ctx: &mut Ctx<'_>) {
        self.on_event(event, ctx);
        self.held_at_last = ctx.held_frames();
    }
}

impl Host {
    fn on_event(&mut self, event: Event, ctx: &mut Ctx<'_>) {
        match event {
            Event::Packet { packet, .. } => {
                let bytes = packet.to_frame_bytes();
                let h = packet.header();
                let roce = wire::frame_kind(h) == FrameKind::RoceV2;
                if let (true, Ok(p)) = (self.honour_pause, PfcPauseRepr::parse(h)) {
                    let prio = self.dscp >> 3;
                    if p.class_enable & (1 << prio) != 0 {
                        let q = p.quanta[usize::from(prio)];
                        if q == 0 {
                            self.paused_until = Time::ZERO;
                            self.send_next(ctx);
                        } else {
                            let t = ctx.now().add(Time(pause_quanta_to_ps(q, RATE.bps())));
                            self.paused_until = t;
                            ctx.set_timer(t, TIMER_RESUME);
                        }
                    }
                }
                self.rx.push(Rx {
                    at: ctx.now(),
                    dscp: roce.then(|| wire::dscp(h)).flatten(),
                    ecn: roce.then(|| wire::ecn(h)).flatten(),
                    bytes,
                });
            }
            Event::TxDone { .. } => self.send_next(ctx),
            // Hosts take packets (`holds_frames` is false): no frame comes here.
            Event::Frame { frame, .. } => ctx.drop_frame(frame),
            Event::Timer { token } if token & TIMER_SCRIPT != 0 => {
                let i = (token & 0xFFFF_FFFF) as usize;
                let pkt = self.script[i].1.clone();
                ctx.transmit(0, pkt).unwrap();
            }
            Event::Timer { .. } => self.send_next(ctx),
        }
    }
}

/// A switch or a host.
pub enum Node {
    /// A switch.
    Switch(Box<Switch>),
    /// A host.
    Host(Host),
}

impl Node {
    /// The switch inside.
    pub fn switch(&self) -> &Switch {
        match self {
            Node::Switch(s) => s,
            Node::Host(_) => panic!("not a switch"),
        }
    }
    /// The host inside.
    pub fn host(&self) -> &Host {
        match self {
            Node::Host(h) => h,
            Node::Switch(_) => panic!("not a host"),
        }
    }
}

impl Actor for Node {
    fn start(&mut self, ctx: &mut Ctx<'_>) {
        match self {
            Node::Switch(s) => s.start(ctx),
            Node::Host(h) => h.start(ctx),
        }
    }
    fn handle(&mut self, event: Event, ctx: &mut Ctx<'_>) {
        match self {
            Node::Switch(s) => s.handle(event, ctx),
            Node::Host(h) => h.handle(event, ctx),
        }
    }
    fn holds_frames(&self) -> bool {
        match self {
            Node::Switch(s) => s.holds_frames(),
            Node::Host(h) => h.holds_frames(),
        }
    }
}

/// Links `(a, port a, b, port b)` at [`RATE`] and [`LATENCY`] for `n` actors.
pub fn wiring(n: usize, links: &[(u32, usize, u32, usize)]) -> Wiring {
    let ch = Channel {
        rate: Rate::new(RATE),
        latency: LATENCY,
    };
    let mut ports: Vec<Vec<Option<PortWiring>>> = vec![Vec::new(); n];
    let mut put = |a: u32, pa: usize, b: u32, pb: usize| {
        let v = &mut ports[a as usize];
        if v.len() <= pa {
            v.resize(pa + 1, None);
        }
        v[pa] = Some(PortWiring {
            peer: b,
            peer_port: pb,
            channel: ch,
        });
    };
    for &(a, pa, b, pb) in links {
        put(a, pa, b, pb);
        put(b, pb, a, pa);
    }
    Wiring {
        ports: ports
            .into_iter()
            .map(|v| v.into_iter().map(|p| p.unwrap()).collect())
            .collect(),
    }
}

/// Runs until no event is left or `until`.
pub fn run(nodes: Vec<Node>, wiring: &Wiring, until: Time) -> Vec<Node> {
    let cfg = EngineConfig {
        until,
        ..EngineConfig::default()
    };
    engine::run(nodes, wiring, &cfg, None).unwrap().actors
}

/// A route table sending each `(host number, port)`.
pub fn routes(entries: &[(u8, usize)]) -> RouteTable {
    let mut t = RouteTable::new();
    for &(h, p) in entries {
        t.insert(ip(h), &[p]);
    }
    t
}
