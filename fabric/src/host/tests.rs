//! Small engine runs of NICs against test doubles: a CE-marking wire in the middle (DCQCN's
//! notification and reaction points end to end), a link partner that sends PFC frames (the
//! NIC honours them), and a slow host side (the NIC generates PFC).

use std::sync::Arc;

use super::*;
use crate::engine::{run, EngineConfig, PortWiring, Wiring};
use crate::link::{Channel, EthernetOverhead, Rate};
use crate::route::RouteTable;
use crate::units::{ByteSize, PS_PER_US};

const LAT: Time = Time::from_us(1);
const G100: Bandwidth = Bandwidth::from_gbps(100);
/// Picoseconds per byte at 100 Gb/s.
const PS_PER_BYTE: u64 = 80;

/// A frame seen by a test double, with when its first bit left the sender.
#[derive(Clone, Debug)]
struct Seen {
    start: Time,
    port: usize,
    frame: Vec<u8>,
}

/// A two-port wire in the middle that forwards frames (one queue per direction) and, when
/// `mark` is set, marks CE on every ECN-capable RoCEv2 frame, as a congested switch would.
#[derive(Default)]
struct Marker {
    mark: bool,
    queues: [VecDeque<Packet>; 2],
    seen: Vec<Seen>,
    /// Whole frames (header, payload, trailer) that came in on port 0, as they arrived.
    frames: Vec<Vec<u8>>,
}

/// A link partner of one host: records every frame and sends the frames it is given at
/// their times (PFC frames, injected data).
#[derive(Default)]
struct Partner {
    script: Vec<(Time, Packet)>,
    seen: Vec<Seen>,
}

enum Node {
    Host(Box<Host<MessageApp>>),
    Marker(Marker),
    Partner(Partner),
}

/// When a frame that arrived at `now` over `ch` started: its wire bytes at the channel's rate
/// and the latency earlier.
fn start_of(now: Time, ch: Option<Channel>, frame_len: usize) -> Time {
    let wire = EthernetOverhead::default().wire_bytes(frame_len);
    let ser = ch.map_or(Time::ZERO, |c| c.rate.serialization_time(wire) + c.latency);
    now.saturating_sub(ser)
}

impl Actor for Node {
    fn start(&mut self, ctx: &mut Ctx<'_>) {
        match self {
            Node::Host(h) => h.start(ctx),
            Node::Marker(_) => {}
            Node::Partner(p) => {
                for (i, (at, _)) in p.script.iter().enumerate() {
                    ctx.set_timer(*at, i as u64);
                }
            }
        }
    }

    fn handle(&mut self, event: Event, ctx: &mut Ctx<'_>) {
        match self {
            Node::Host(h) => h.handle(event, ctx),
            Node::Marker(m) => {
                let out = match event {
                    Event::Packet { port, mut packet } => {
                        let start = start_of(ctx.now(), ctx.channel(port), packet.frame_len());
                        let ect = wire::ecn(packet.header()).is_some_and(Ecn::is_ect);
                        if m.mark && ect && wire::frame_kind(packet.header()) == FrameKind::RoceV2 {
                            let _ = wire::set_ecn(packet.header_mut(), Ecn::Ce);
                        }
                        m.seen.push(Seen {
                            start,
                            port,
                            frame: packet.header().to_vec(),
                        });
                        if port == 0 {
                            m.frames.push(packet.to_frame_bytes());
                        }
                        let out = 1 - port;
                        m.queues[out].push_back(packet);
                        out
                    }
                    Event::TxDone { port } => port,
                    Event::Frame { frame, .. } => {
                        ctx.drop_frame(frame);
                        return;
                    }
                    Event::Timer { .. } => return,
                };
                if ctx.port_idle(out) {
                    if let Some(p) = m.queues[out].pop_front() {
                        let _ = ctx.transmit(out, p);
                    }
                }
            }
            Node::Partner(p) => match event {
                Event::Packet { port, packet } => {
                    let start = start_of(ctx.now(), ctx.channel(port), packet.frame_len());
                    p.seen.push(Seen {
                        start,
                        port,
                        frame: packet.header().to_vec(),
                    });
                }
                Event::Timer { token } => {
                    if let Some((_, pkt)) = p.script.get(token as usize) {
                        // Scripts space their frames so the port is idle.
                        let _ = ctx.transmit(0, pkt.clone());
                    }
                }
                Event::TxDone { .. } => {}
                Event::Frame { frame, .. } => ctx.drop_frame(frame),
            },
        }
    }
}

fn ch(bw: Bandwidth) -> Channel {
    Channel {
        rate: Rate::new(bw),
        latency: LAT,
    }
}

/// Connects actor `a` port `pa` with actor `b` port `pb` at `bw` both ways.
fn connect(w: &mut Wiring, a: u32, pa: usize, b: u32, pb: usize, bw: Bandwidth) {
    for (x, px, y, py) in [(a, pa, b, pb), (b, pb, a, pa)] {
        let ports = &mut w.ports[x as usize];
        if ports.len() <= px {
            ports.resize(
                px + 1,
                PortWiring {
                    peer: 0,
                    peer_port: 0,
                    channel: ch(bw),
                },
            );
        }
        ports[px] = PortWiring {
            peer: y,
            peer_port: py,
            channel: ch(bw),
        };
    }
}

fn host(i: u32, n: u32, cfg: &NicConfig, sends: Vec<MessageSpec>) -> Node {
    let dir = Arc::new(HostDirectory::new(
        (0..n).map(HostDirectory::default_addr).collect(),
    ));
    let mut routes = RouteTable::new();
    for j in 0..n {
        routes.insert(HostDirectory::default_addr(j).ip, &[0]);
    }
    let app = MessageApp::new(7, true, sends);
    match Host::new(i, dir, Arc::new(routes), 1, cfg.clone(), 7, app) {
        Some(h) => Node::Host(Box::new(h)),
        None => panic!("host {i} not in the directory"),
    }
}

fn msg(src: u32, dst: u32, len: u64) -> MessageSpec {
    MessageSpec {
        tag: 1,
        src,
        dst,
        len,
        start: Time::ZERO,
        class: 0,
    }
}

fn run_nodes(nodes: Vec<Node>, wiring: &Wiring) -> Vec<Node> {
    let cfg = EngineConfig {
        until: Time::from_us(1_000_000),
        ..EngineConfig::default()
    };
    match run(nodes, wiring, &cfg, None) {
        Ok(out) => out.actors,
        Err(e) => panic!("run failed: {e}"),
    }
}

fn as_host(n: &Node) -> &Host<MessageApp> {
    match n {
        Node::Host(h) => h,
        _ => panic!("not a host"),
    }
}

/// h0 -- marker -- h1 at 100 Gb/s, 1 us per link; h0 sends `len` bytes to h1.
fn through_marker(cfg: &NicConfig, mark: bool, len: u64) -> Vec<Node> {
    let nodes = vec![
        host(0, 2, cfg, vec![msg(0, 1, len)]),
        Node::Marker(Marker {
            mark,
            ..Marker::default()
        }),
        host(1, 2, cfg, vec![]),
    ];
    let mut w = Wiring {
        ports: vec![Vec::new(); 3],
    };
    connect(&mut w, 0, 0, 1, 0, G100);
    connect(&mut w, 1, 1, 2, 0, G100);
    run_nodes(nodes, &w)
}

fn dcqcn_cfg(d: DcqcnConfig) -> NicConfig {
    NicConfig {
        cc: CongestionControl::Dcqcn(d),
        ..NicConfig::default()
    }
}

#[test]
fn the_receiver_sends_at_most_one_cnp_per_qp_per_interval() {
    // A high rate floor keeps the sender streaming (so CE marks keep arriving) although every
    // packet is marked.
    let d = DcqcnConfig {
        min_rate: Bandwidth::from_gbps(40),
        ..DcqcnConfig::default()
    };
    let interval = d.cnp_interval;
    let out = through_marker(&dcqcn_cfg(d), true, 8 << 20);
    let (h0, h1) = (as_host(&out[0]), as_host(&out[2]));
    let Node::Marker(m) = &out[1] else {
        panic!("marker")
    };
    assert!(h1.app.received.iter().all(|r| r.data_ok == Some(true)));
    assert_eq!(h1.app.received.len(), 1);
    // The marked data frames h1 received, by arrival time (start + wire time + latency).
    let ce: Vec<Time> = m
        .seen
        .iter()
        .filter(|s| s.port == 0 && wire::bth_opcode(&s.frame).is_some_and(opcode::is_write))
        .map(|s| s.start)
        .collect();
    let span = ce.last().copied().unwrap_or(Time::ZERO).ps() - ce[0].ps();
    let cnps = h1.nic.stats.cnps_sent;
    assert_eq!(h1.nic.stats.ce_received, ce.len() as u64);
    // At most one per interval: floor(span / interval) + 1 (the first comes at once).
    assert!(
        cnps <= span / interval.ps() + 1,
        "{cnps} CNPs over {span} ps"
    );
    // Marks arrive at least every few microseconds (the rate never drops below 40 Gb/s, one
    // 4 KiB packet per 0.84 us), so a CNP goes within 1 us of each interval's end.
    assert!(
        cnps > span / (interval.ps() + PS_PER_US),
        "{cnps} CNPs over {span} ps"
    );
    // The CNPs on the wire: opcode 0x81 to h0's QP toward h1, control DSCP, not ECN-capable.
    let cnp_frames: Vec<RoceRepr> = m
        .seen
        .iter()
        .filter(|s| s.port == 1 && wire::bth_opcode(&s.frame) == Some(opcode::CNP))
        .filter_map(|s| RoceRepr::parse(&s.frame).ok())
        .collect();
    assert_eq!(cnp_frames.len() as u64, cnps);
    for c in &cnp_frames {
        assert_eq!(c.bth.dest_qp, QPN_BASE + 1);
        assert_eq!(c.dscp, NicConfig::default().control_dscp);
        assert_eq!(c.ecn, Ecn::NotEct);
        assert!(c.bth.becn);
    }
    // The sender acted on each: one cut per CNP, recorded in its rate history; the first
    // halved the line rate exactly.
    assert_eq!(h0.nic.stats.cnps_received, cnps);
    assert_eq!(h0.nic.stats.rate_decreases, cnps);
    let rates: Vec<QpRateReport<'_>> = h0.nic.qp_rates().collect();
    assert_eq!(rates.len(), 1);
    assert_eq!(rates[0].peer, 1);
    assert_eq!(
        rates[0].history.samples.first().map(|s| s.1),
        Some(Bandwidth::from_gbps(50))
    );
}

#[test]
fn marks_slow_the_sender_and_no_marks_change_nothing() {
    let len = 4 << 20;
    let done = |out: &[Node]| as_host(&out[0]).app.sends[0].acked_at;
    let plain = through_marker(&NicConfig::default(), false, len);
    let cc_unmarked = through_marker(&dcqcn_cfg(DcqcnConfig::default()), false, len);
    let cc_marked = through_marker(&dcqcn_cfg(DcqcnConfig::default()), true, len);
    // DCQCN without marks: no CNP, no rate change, exactly the same timing as cc none.
    assert_eq!(done(&plain), done(&cc_unmarked));
    assert_eq!(as_host(&cc_unmarked[2]).nic.stats.cnps_sent, 0);
    assert!(as_host(&cc_unmarked[0])
        .nic
        .qp_rates()
        .all(|r| r.rate.is_none() && r.history.samples.is_empty()));
    // Marked: the sender is cut (to the 100 Mb/s floor quickly, alpha staying near 1), so the
    // transfer takes far longer than at line rate.
    let (a, b) = (done(&plain), done(&cc_marked));
    assert!(a.is_some() && b.is_some());
    assert!(b > a.map(|t| Time(t.ps() * 4)), "{a:?} vs {b:?}");
}

/// h0 (data DSCP 26 = class 3) facing a partner that sends the given frames.
fn paused_host(script: Vec<(Time, Packet)>, len: u64) -> (Host<MessageApp>, Partner) {
    let nodes = vec![
        host(0, 2, &NicConfig::default(), vec![msg(0, 1, len)]),
        Node::Partner(Partner {
            script,
            seen: Vec::new(),
        }),
    ];
    let mut w = Wiring {
        ports: vec![Vec::new(); 2],
    };
    connect(&mut w, 0, 0, 1, 0, G100);
    let mut out = run_nodes(nodes, &w).into_iter();
    match (out.next(), out.next()) {
        (Some(Node::Host(h)), Some(Node::Partner(p))) => (*h, p),
        _ => panic!("actors"),
    }
}

fn pfc_frame(quanta: u16, class: u8) -> Packet {
    let mut pkt = match Packet::with_header_len(wire::PFC_FRAME_LEN, Payload::Timing(0)) {
        Ok(p) => p,
        Err(e) => panic!("{e}"),
    };
    let repr = PfcPauseRepr::xoff([0x02, 0, 0, 0, 0, 0xFE], class, quanta);
    assert!(repr.emit(pkt.header_mut()).is_ok());
    pkt
}

/// Start times of h0's data frames as the partner saw them.
fn data_starts(p: &Partner) -> Vec<Time> {
    p.seen
        .iter()
        .filter(|s| wire::bth_opcode(&s.frame).is_some_and(opcode::is_write))
        .map(|s| s.start)
        .collect()
}

/// When a 60-byte PFC frame sent at `t` has fully arrived (84 wire bytes at 100 Gb/s + 1 us).
fn pfc_arrival(t: Time) -> Time {
    t + Time(84 * PS_PER_BYTE) + LAT
}

#[test]
fn a_pause_stops_the_data_priority_for_exactly_its_quanta() {
    let class = NicConfig::default().dscp >> 3;
    let quanta = 1000u16;
    let sent = Time::from_us(10);
    let (h, p) = paused_host(vec![(sent, pfc_frame(quanta, class))], 1 << 20);
    let arrived = pfc_arrival(sent);
    // 1000 quanta x 512 bit times at 100 Gb/s = 5.12 us, exactly.
    let resume = arrived + Time(u64::from(quanta) * 512 * 10);
    let starts = data_starts(&p);
    assert!(starts.iter().all(|&s| s <= arrived || s >= resume));
    assert!(starts.contains(&resume), "no frame started at {resume}");
    assert_eq!(h.nic.stats.pause_frames_received, 1);
    assert_eq!(h.nic.stats.paused_time_ps, resume.ps() - arrived.ps());
    // Nothing was lost: the message went out whole (the partner does not ACK, so count).
    assert_eq!(
        starts.len(),
        256 + h.nic.stats.retransmitted_packets as usize
    );
}

#[test]
fn xon_resumes_at_once_and_other_priorities_keep_going() {
    let cfg = NicConfig::default();
    let class = cfg.dscp >> 3;
    let (off, on) = (Time::from_us(10), Time::from_us(20));
    // During the pause the partner sends h0 a one-packet WRITE from h1: h0's ACK (control
    // DSCP 48, class 6) must go out although data (class 3) is paused.
    let h1 = HostDirectory::default_addr(1);
    let h0 = HostDirectory::default_addr(0);
    let repr = RoceRepr {
        src_mac: h1.mac,
        dst_mac: h0.mac,
        src_ip: h1.ip,
        dst_ip: h0.ip,
        dscp: cfg.dscp,
        ecn: Ecn::Ect0,
        ttl: 64,
        ip_id: 0,
        udp_src_port: 0xC000,
        bth: BthRepr {
            opcode: opcode::WRITE_ONLY_IMM,
            pkey: 0xFFFF,
            dest_qp: QPN_BASE + 1,
            ack_req: true,
            psn: 0,
            ..BthRepr::default()
        },
        reth: Some(RethRepr {
            va: 0,
            rkey: 0,
            dma_len: 64,
        }),
        aeth: None,
        immdt: Some(9),
        payload_len: 64,
    };
    let data = build(&repr, Payload::Timing(64), &[]);
    let Some(data) = data else { panic!("build") };
    let script = vec![
        (off, pfc_frame(0xFFFF, class)),
        (Time::from_us(12), data),
        (on, pfc_frame(0, class)),
    ];
    let (h, p) = paused_host(script, 1 << 20);
    let (paused_at, resumed_at) = (pfc_arrival(off), pfc_arrival(on));
    let starts = data_starts(&p);
    assert!(starts.iter().all(|&s| s <= paused_at || s >= resumed_at));
    assert!(starts.contains(&resumed_at));
    assert_eq!(h.nic.stats.paused_time_ps, resumed_at.ps() - paused_at.ps());
    assert_eq!(h.nic.stats.pause_frames_received, 2);
    let acks: Vec<Time> = p
        .seen
        .iter()
        .filter(|s| wire::bth_opcode(&s.frame) == Some(opcode::ACK))
        .map(|s| s.start)
        .collect();
    assert_eq!(acks.len(), 1);
    assert!(acks[0] > paused_at && acks[0] < resumed_at, "{acks:?}");
    assert_eq!(h.app.received.len(), 1);
}

#[test]
fn a_slow_host_side_pauses_the_sender_without_loss() {
    // h0 -> h1 over 100 Gb/s; h1's host side takes 25 Gb/s. The buffer must not overflow:
    // XOFF at 256 KiB leaves 256 KiB for what is in flight (about 2 x 12.5 KB at 1 us).
    let rx = NicPfcConfig {
        rx_rate: Bandwidth::from_gbps(25),
        rx_buffer: ByteSize(512 << 10),
        xoff: ByteSize(256 << 10),
        xon: ByteSize(128 << 10),
        pause_quanta: 0xFFFF,
    };
    let cfg = NicConfig {
        pfc: Some(rx),
        ..NicConfig::default()
    };
    let len: u64 = 8 << 20;
    let nodes = vec![
        host(0, 2, &cfg, vec![msg(0, 1, len)]),
        host(1, 2, &cfg, vec![]),
    ];
    let mut w = Wiring {
        ports: vec![Vec::new(); 2],
    };
    connect(&mut w, 0, 0, 1, 0, G100);
    let out = run_nodes(nodes, &w);
    let (h0, h1) = (as_host(&out[0]), as_host(&out[1]));
    assert_eq!(h1.nic.stats.rx_buffer_dropped, 0);
    assert_eq!(h0.nic.stats.retransmitted_packets, 0);
    assert!(h1.nic.stats.pause_frames_sent >= 2);
    assert_eq!(
        h0.nic.stats.pause_frames_received,
        h1.nic.stats.pause_frames_sent
    );
    assert!(h0.nic.stats.paused_time_ps > 0);
    assert_eq!(h1.app.received.len(), 1);
    assert_eq!(h1.app.received[0].data_ok, Some(true));
    // The host side is the bottleneck: delivery takes every frame's bytes at 25 Gb/s
    // (320 ps/byte) after the first frame's arrival, and the wire would take a quarter of that.
    // Frames: 4096 B payload + ICRC 4 + headers (FIRST 70, MIDDLE 54, LAST-with-immediate 58).
    let frames: u64 = 2048;
    let frame_bytes = frames * 4100 + 70 + 54 * (frames - 2) + 58;
    let drain = Time(frame_bytes * 320);
    let delivered = h1.app.received[0].delivered_at;
    assert!(delivered >= drain, "{delivered} < {drain}");
    // Upper bound: plus the first frame's way over the wire (under 2 us) and the drain's
    // idle gaps while XON travels back and data refills (a few us per pause cycle).
    let cycles = h1.nic.stats.pause_frames_sent;
    assert!(
        delivered <= drain + Time::from_us(2 + 3 * cycles),
        "{delivered} vs {drain}, {cycles} PFC frames"
    );
}

#[test]
fn qp_numbers_name_peer_and_class() {
    // The default class keeps the numbers of a fabric without classes.
    assert_eq!(qp_number(5, 0), QPN_BASE + 5);
    assert_eq!(qpn_class(qp_number(5, 0)), 0);
    for class in [1u8, 17, 63] {
        for peer in [0u32, 1, CLASS_QPN_HOSTS - 1] {
            let n = qp_number(peer, class);
            assert!(n < 1 << 24, "QP numbers are 24 bits");
            assert_eq!(qpn_class(n), class);
            assert_eq!(n & ((1 << CLASS_QPN_SHIFT) - 1), QPN_BASE + peer);
        }
    }
}

#[test]
fn bit_errors_arrive_as_flipped_bytes_and_the_icrc_check_rejects_them() {
    use crate::fault::{FaultKind, FaultPlan, FaultWindow, PortFault};
    // h0 -- marker -- h1, h0 sending 1 MiB in data mode; bit errors on h0's transmit port at
    // 3e-6 per bit: a 4 KiB frame (~33 600 wire bits) is hit with probability ~10%.
    let cfg = NicConfig {
        data_mode: true,
        verify_icrc: true,
        ..NicConfig::default()
    };
    let nodes = vec![
        host(0, 2, &cfg, vec![msg(0, 1, 1 << 20)]),
        Node::Marker(Marker::default()),
        host(1, 2, &cfg, vec![]),
    ];
    let mut w = Wiring {
        ports: vec![Vec::new(); 3],
    };
    connect(&mut w, 0, 0, 1, 0, G100);
    connect(&mut w, 1, 1, 2, 0, G100);
    let rule = PortFault {
        entry: 0,
        window: FaultWindow::ALWAYS,
        kind: FaultKind::Ber(3e-6),
    };
    let ecfg = EngineConfig {
        until: Time::from_us(1_000_000),
        faults: FaultPlan {
            rules: vec![(0, 0, rule)],
            entries: 1,
            seed: 11,
        },
        ..EngineConfig::default()
    };
    let out = match run(nodes, &w, &ecfg, None) {
        Ok(o) => o,
        Err(e) => panic!("run failed: {e}"),
    };
    let corrupted = out.faults.entries[0].corrupted;
    let (m, h1) = match (&out.actors[1], &out.actors[2]) {
        (Node::Marker(m), h) => (m, as_host(h)),
        _ => panic!("actors"),
    };
    // The bytes that went on toward h1 really differ from what h0 sent: the ICRC the frame
    // carries (h0 computed it over the original bytes) no longer matches them.
    let data: Vec<&Vec<u8>> = m
        .frames
        .iter()
        .filter(|f| wire::bth_opcode(f).is_some_and(opcode::is_write))
        .collect();
    let bad = data.iter().filter(|f| wire::check_icrc(f).is_err()).count() as u64;
    assert!(
        bad > 0 && bad < data.len() as u64,
        "{bad} of {}",
        data.len()
    );
    // Every one of them is a frame the fault damaged (one flipped payload bit each) ...
    assert_eq!(bad, corrupted);
    // ... and h1's ICRC check is what discarded each: none reached the transport, the
    // message arrived intact after retransmission.
    assert_eq!(h1.nic.stats.icrc_errors, bad);
    assert_eq!(h1.nic.stats.corrupted_discarded, bad);
    assert_eq!(h1.app.received.len(), 1);
    assert!(h1.app.received.iter().all(|r| r.data_ok == Some(true)));
    assert!(as_host(&out.actors[0]).nic.stats.retransmitted_packets > 0);
}

#[test]
fn data_only_flags_fit_in_the_nic_padding() {
    // `data_only` sits in the padding before `stats`: the counters start at offset 112, the two a
    // data frame sent bumps on line 1 with the settings it reads (see `Nic`'s layout notes).
    assert_eq!(std::mem::offset_of!(Nic, stats), 112);
    // `HostStats` in its declared order: the two counters a data frame sent bumps end line 1,
    // those of frames received are on line 2.
    assert_eq!(std::mem::offset_of!(HostStats, data_bytes_sent), 8);
    assert_eq!(std::mem::offset_of!(HostStats, data_packets_received), 72);
    assert_eq!(std::mem::size_of::<Reception>(), 64);
}

#[test]
fn port_lines_hold_what_a_send_reads() {
    use std::mem::offset_of;
    // Line 0: the control queue, the round-robin head and the pacing timer; line 1 starts with
    // the rest of the list and ends with the pause state's summary word.
    assert!(offset_of!(NicPort, transit_turn) < 64);
    assert!(offset_of!(NicPort, data_only) < 64);
    assert_eq!(offset_of!(NicPort, active_rest), 64);
    assert_eq!(offset_of!(NicPort, pause), 120);
}

proptest::proptest! {
    /// The round-robin list with its head inline keeps a deque's order through any mix of
    /// appends, removals from the front and retains.
    #[test]
    fn round_robin_list_is_a_deque(ops in proptest::collection::vec((0u8..4, 0u32..8), 0..64)) {
        let mut port = NicPort::default();
        let mut model = VecDeque::new();
        for (op, i) in ops {
            match op {
                0 | 1 => {
                    port.push_active(i);
                    model.push_back(i);
                }
                2 => proptest::prop_assert_eq!(port.pop_active(), model.pop_front()),
                _ => {
                    port.retain_active(|x| x != i);
                    model.retain(|&x| x != i);
                }
            }
            proptest::prop_assert_eq!(port.active_len(), model.len());
        }
        let rest: Vec<u32> = std::iter::from_fn(|| port.pop_active()).collect();
        proptest::prop_assert_eq!(rest, Vec::from(model));
    }
}
