//! PFC, the MMU, ECN marking and the deadlock watchdog, on the real engine with hand-built
//! hosts (see `harness`). Every link is 100 Gb/s with 1 us of cable; Ethernet overhead is the
//! default (a frame occupies frame + 24 bytes on the wire, a pause frame 84).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: a failure is a panic

mod harness;

use fabemu_fabric::units::{ByteSize, Time};
use fabemu_fabric::wire::{pause_quanta_to_ps, Ecn, PfcPauseRepr, PFC_DST_MAC};
use fabemu_switch::buffer::BufferConfig;
use fabemu_switch::pfc::{headroom_formula, PfcConfig};
use fabemu_switch::priority::PrioritySet;
use fabemu_switch::red::RedConfig;
use fabemu_switch::{Switch, SwitchConfig};
use harness::*;

/// Picoseconds per wire byte at 100 Gb/s.
const PS_PER_BYTE: u64 = 80;
/// Wire bytes of a pause frame (60 + FCS 4 + preamble 8 + gap 12).
const PAUSE_WIRE: u64 = 84;
/// A RoCE SEND-only frame: 54 header bytes + payload + 4 ICRC.
fn frame_len(payload: u64) -> u64 {
    54 + payload + 4
}
/// Its serialization time at 100 Gb/s, in ps.
fn ser(payload: u64) -> u64 {
    (frame_len(payload) + 24) * PS_PER_BYTE
}

fn pfc_on(total: u64, quanta: u16) -> SwitchConfig {
    SwitchConfig {
        buffer: BufferConfig {
            total: ByteSize(total),
            pfc: PfcConfig {
                enabled: true,
                quanta,
                ..PfcConfig::default()
            },
            ..BufferConfig::default()
        },
    }
}

fn switch(ports: usize, routes: &[(u8, usize)], cfg: &SwitchConfig) -> Node {
    Node::Switch(Box::new(Switch::new(
        ports,
        harness::routes(routes),
        cfg,
        7,
    )))
}

/// When a pause frame sent at `t` by a host reaches the switch.
fn pause_arrival(t: u64) -> u64 {
    t + PAUSE_WIRE * PS_PER_BYTE + LATENCY.ps()
}

#[test]
fn xoff_pauses_the_ingress_neighbour_and_xon_follows_the_drain() {
    // A (actor 1) streams 200 frames of 4 KiB to R (actor 3); R pauses priority 3 on the
    // switch's port 2 from t = 0 and resumes it at 30 us, so A's frames pile up on ingress
    // (port 0, priority 3) until it crosses XOFF; the switch must pause A, refresh the pause
    // (quanta 1000 = 5.12 us, refreshed every 2.56 us) and send XON once drained.
    let cfg = pfc_on(1 << 20, 1000);
    let mut r = Host::sink();
    r.script = vec![
        (
            Time::ZERO,
            pfc_frame(PfcPauseRepr::xoff([2, 0, 0, 0, 0, 3], 3, 0xFFFF)),
        ),
        (
            Time::from_us(30),
            pfc_frame(PfcPauseRepr::xon([2, 0, 0, 0, 0, 3], 3)),
        ),
    ];
    let nodes = vec![
        switch(3, &[(1, 0), (2, 1), (3, 2)], &cfg),
        Node::Host(Host::streaming(ip(1), ip(3), 26, 4096, 200)),
        Node::Host(Host::sink()),
        Node::Host(r),
    ];
    let w = wiring(4, &[(0, 0, 1, 0), (0, 1, 2, 0), (0, 2, 3, 0)]);
    let out = run(nodes, &w, Time::from_us(1000));
    let (sw, a, rx) = (out[0].switch(), out[1].host(), out[3].host());

    let pauses = a.pauses();
    assert!(pauses.len() >= 3, "XOFF, refreshes, XON: {pauses:?}");
    let (t0, first) = pauses[0];
    assert_eq!(first.class_enable, 1 << 3, "priority 3 only");
    assert_eq!(first.quanta, [0, 0, 0, 1000, 0, 0, 0, 0]);
    assert!(
        t0 < Time::from_us(30),
        "paused while R held the queue: {t0}"
    );
    // The bytes are an 802.1Qbb frame: MAC-control multicast, ethertype 0x8808, opcode 0x0101.
    let bytes = &a.rx.iter().find(|r| r.at == t0).unwrap().bytes;
    assert_eq!(bytes.len(), 60);
    assert_eq!(bytes[..6], PFC_DST_MAC);
    assert_eq!(bytes[12..16], [0x88, 0x08, 0x01, 0x01]);
    assert_eq!(PfcPauseRepr::parse(bytes), Ok(first));
    // Every frame but the last refreshes the XOFF; the last is the XON, after R resumed.
    let (tn, last) = *pauses.last().unwrap();
    assert_eq!((last.class_enable, last.quanta), (1 << 3, [0; 8]));
    assert!(tn > Time(pause_arrival(Time::from_us(30).ps())), "{tn}");
    assert!(pauses[..pauses.len() - 1]
        .iter()
        .all(|(_, p)| p.quanta[3] == 1000));
    // Refreshes come every 2.56 us while XOFF lasts: never a gap the pause could lapse in.
    for w in pauses.windows(2) {
        assert!(w[1].0.ps() - w[0].0.ps() <= pause_quanta_to_ps(1000, RATE.bps()));
    }
    let p0 = &sw.port_counters()[0].priorities[3];
    assert_eq!(p0.xon_frames_sent, 1);
    assert_eq!(p0.pause_frames_sent as usize, pauses.len() - 1);
    // R's pause held port 2 exactly from its XOFF's arrival to its XON's: 30 us.
    assert_eq!(
        sw.port_counters()[2].priorities[3].paused_time_ps,
        Time::from_us(30).ps()
    );
    // Lossless: everything arrived, nothing dropped, nothing left.
    assert_eq!(rx.data().count(), 200);
    assert_eq!((sw.dropped_packets(), sw.lossless_drops()), (0, 0));
    assert_eq!(sw.queued_packets(), 0);
    assert_eq!(sw.mmu().used(), 0);
}

/// The arrivals at R of `dscp` frames.
fn arrivals(h: &Host, dscp: u8) -> Vec<u64> {
    h.data()
        .filter(|r| r.dscp == Some(dscp))
        .map(|r| r.at.ps())
        .collect()
}

#[test]
fn received_pause_stops_one_priority_for_its_quanta() {
    // A streams priority 3 (DSCP 26), B priority 1 (DSCP 8), both to R. R pauses priority 3
    // for 2000 quanta = 2000 x 512 bits / 100 Gb/s = 10.24 us.
    let cfg = pfc_on(32 << 20, 0xFFFF);
    let q = 2000u16;
    let mut r = Host::sink();
    r.script = vec![(
        Time::ZERO,
        pfc_frame(PfcPauseRepr::xoff([2, 0, 0, 0, 0, 3], 3, q)),
    )];
    let nodes = vec![
        switch(3, &[(1, 0), (2, 1), (3, 2)], &cfg),
        Node::Host(Host::streaming(ip(1), ip(3), 26, 1000, 400)),
        Node::Host(Host::streaming(ip(2), ip(3), 8, 1000, 400)),
        Node::Host(r),
    ];
    let w = wiring(4, &[(0, 0, 1, 0), (0, 1, 2, 0), (0, 2, 3, 0)]);
    let out = run(nodes, &w, Time::from_us(1000));
    let (sw, rx) = (out[0].switch(), out[3].host());

    let pause = pause_quanta_to_ps(q, RATE.bps());
    assert_eq!(pause, 10_240_000);
    assert_eq!(sw.port_counters()[2].priorities[3].paused_time_ps, pause);
    let ta = pause_arrival(0);
    // No priority-3 frame had reached the switch before the pause did (A's first frame needs
    // 1 us + 86.6 ns). The first one R sees leaves the switch when the pause ends, or one
    // priority-1 frame later if that one was being serialized.
    let p3 = arrivals(rx, 26);
    let s = ser(1000);
    let l = LATENCY.ps();
    assert!(
        p3[0] >= ta + pause + s + l,
        "{} < {}",
        p3[0],
        ta + pause + s + l
    );
    assert!(p3[0] <= ta + pause + 2 * s + l, "{}", p3[0]);
    // Priority 1 kept the port busy during the pause: a frame every 86.56 ns.
    let p1 = arrivals(rx, 8);
    let during = p1
        .iter()
        .filter(|&&t| t > ta + s + l && t <= ta + pause + l)
        .count() as u64;
    assert!(during + 2 >= (pause - s) / s, "{during} priority-1 frames");
    assert_eq!((p3.len(), p1.len()), (400, 400));
}

#[test]
fn xon_resumes_at_once() {
    let cfg = pfc_on(32 << 20, 0xFFFF);
    let mut r = Host::sink();
    r.script = vec![
        (
            Time::ZERO,
            pfc_frame(PfcPauseRepr::xoff([2, 0, 0, 0, 0, 3], 3, 0xFFFF)),
        ),
        (
            Time::from_us(5),
            pfc_frame(PfcPauseRepr::xon([2, 0, 0, 0, 0, 3], 3)),
        ),
    ];
    let nodes = vec![
        switch(3, &[(1, 0), (2, 1), (3, 2)], &cfg),
        Node::Host(Host::streaming(ip(1), ip(3), 26, 1000, 100)),
        Node::Host(Host::streaming(ip(2), ip(3), 8, 1000, 100)),
        Node::Host(r),
    ];
    let w = wiring(4, &[(0, 0, 1, 0), (0, 1, 2, 0), (0, 2, 3, 0)]);
    let out = run(nodes, &w, Time::from_us(1000));
    let (sw, rx) = (out[0].switch(), out[3].host());
    // Paused from the XOFF's arrival to the XON's: exactly 5 us (same frames, same link).
    assert_eq!(
        sw.port_counters()[2].priorities[3].paused_time_ps,
        Time::from_us(5).ps()
    );
    let x = pause_arrival(Time::from_us(5).ps());
    let (s, l) = (ser(1000), LATENCY.ps());
    let p3 = arrivals(rx, 26);
    assert!(p3[0] >= x + s + l && p3[0] <= x + 2 * s + l, "{}", p3[0]);
}

/// A switch with 16 senders (ports 0..16) and one receiver (port 16).
fn incast(cfg: &SwitchConfig, count: u64, honour: bool) -> Vec<Node> {
    let mut routes: Vec<(u8, usize)> = (1..=16).map(|h| (h, h as usize - 1)).collect();
    routes.push((17, 16));
    let mut nodes = vec![switch(17, &routes, cfg)];
    for h in 1..=16u8 {
        let mut s = Host::streaming(ip(h), ip(17), 26, 4096, count);
        s.honour_pause = honour;
        nodes.push(Node::Host(s));
    }
    nodes.push(Node::Host(Host::sink()));
    let links: Vec<_> = (0..17).map(|p| (0, p, p as u32 + 1, 0)).collect();
    let w = wiring(18, &links);
    run(nodes, &w, Time::from_us(100_000))
}

/// The default headroom at 100 Gb/s and 1 us with 4174-byte frames (4198 on the wire):
/// 2 x 12,500 + 3 x 4198 + 84.
const DEFAULT_HEADROOM: u64 = 37_678;

#[test]
fn incast_with_pfc_loses_nothing() {
    let total = 2u64 << 20;
    let cfg = pfc_on(total, 0xFFFF);
    let out = incast(&cfg, 100, true);
    let sw = out[0].switch();
    assert_eq!(out[17].host().data().count(), 1600);
    assert_eq!((sw.dropped_packets(), sw.lossless_drops()), (0, 0));
    assert!(sw.stats().pause_frames_sent > 0);
    for (h, n) in out[1..17].iter().enumerate() {
        assert!(
            !n.host().pauses().is_empty(),
            "sender {} never paused",
            h + 1
        );
    }
    // Headroom per port from the formula; the shared pool is what the 17 headrooms leave, and
    // no ingress ever held more than its threshold (at most alpha x pool) plus headroom.
    assert_eq!(sw.headroom(0), DEFAULT_HEADROOM);
    let pool = total - 17 * DEFAULT_HEADROOM;
    assert_eq!(sw.mmu().shared_pool(), pool);
    for p in 0..16 {
        let peak = sw.port_stats()[p].priorities[3].peak_ingress_bytes;
        assert!(
            peak > 0 && peak <= pool / 8 + DEFAULT_HEADROOM,
            "port {p}: {peak}"
        );
    }
    assert_eq!(sw.mmu().used(), 0);
}

#[test]
fn incast_without_pfc_drops_and_counts() {
    let cfg = SwitchConfig {
        buffer: BufferConfig {
            total: ByteSize(256 << 10),
            ..BufferConfig::default()
        },
    };
    let out = incast(&cfg, 100, true);
    let sw = out[0].switch();
    let drops: u64 = sw.port_counters()[16].priorities[3].dropped_lossy;
    assert!(drops > 0);
    assert_eq!(sw.dropped_packets(), drops);
    assert_eq!(sw.lossless_drops(), 0);
    assert_eq!(sw.stats().pause_frames_sent, 0);
    assert_eq!(out[17].host().data().count() as u64, 1600 - drops);
    assert!(out[1].host().pauses().is_empty());
    // Every frame the switch queued or dropped gave its slab slot back.
    assert_eq!(sw.queued_packets(), 0);
    assert_eq!(out[17].host().held_at_last, 0);
}

#[test]
fn lossless_drops_are_counted_apart_when_headroom_is_too_small() {
    // Senders that ignore pauses, and 10 KB of headroom: the lossless promise breaks, and the
    // switch says so in `lossless_drops`.
    let mut cfg = pfc_on(1 << 20, 0xFFFF);
    cfg.buffer.pfc.headroom = Some(ByteSize(10_000));
    let out = incast(&cfg, 100, false);
    let sw = out[0].switch();
    assert_eq!(sw.headroom(3), 10_000);
    assert!(sw.lossless_drops() > 0);
    assert_eq!(sw.lossless_drops(), sw.dropped_packets());
    assert_eq!(
        sw.port_counters()[16].priorities[3].dropped_lossless,
        sw.lossless_drops()
    );
}

#[test]
fn default_headroom_is_the_formula() {
    // 2 x (1 us x 100 Gb/s = 12,500 B) + 3 x 4198 + 84 (module doc of `pfc`).
    assert_eq!(
        headroom_formula(RATE, LATENCY, 4174 + 24, PAUSE_WIRE, Time::ZERO),
        DEFAULT_HEADROOM
    );
    let mut cfg = pfc_on(1 << 20, 0xFFFF);
    cfg.buffer.pfc.max_frame = ByteSize(1024 + 58);
    cfg.buffer.pfc.response_time = Time::from_ns(100);
    let nodes = vec![switch(1, &[], &cfg), Node::Host(Host::sink())];
    let out = run(nodes, &wiring(2, &[(0, 0, 1, 0)]), Time::from_us(10));
    // 25,000 + 3 x (1082 + 24) + 84 + 100 ns x 12.5 B/ns.
    assert_eq!(out[0].switch().headroom(0), 25_000 + 3 * 1106 + 84 + 1250);
}

#[test]
fn red_marks_ce_at_dequeue_with_a_valid_checksum() {
    // Two senders into one port: the egress queue grows by one frame per two sent. With
    // Kmin = Kmax = 20 KB every frame that leaves a queue deeper than 20 KB is marked, so marks
    // happen, and only then.
    let mut cfg = SwitchConfig::default();
    cfg.buffer.ecn = Some(RedConfig {
        kmin: ByteSize(20_000),
        kmax: ByteSize(20_000),
        pmax: 1.0,
    });
    let nodes = vec![
        switch(3, &[(1, 0), (2, 1), (3, 2)], &cfg),
        Node::Host(Host::streaming(ip(1), ip(3), 26, 1000, 200)),
        Node::Host(Host::streaming(ip(2), ip(3), 26, 1000, 200)),
        Node::Host(Host::sink()),
    ];
    let w = wiring(4, &[(0, 0, 1, 0), (0, 1, 2, 0), (0, 2, 3, 0)]);
    let out = run(nodes, &w, Time::from_us(1000));
    let (sw, rx) = (out[0].switch(), out[3].host());
    let ce: Vec<_> = rx.data().filter(|r| r.ecn == Some(Ecn::Ce)).collect();
    assert_eq!(ce.len() as u64, sw.stats().ecn_marked);
    assert_eq!(
        sw.port_counters()[2].priorities[3].ecn_marked,
        sw.stats().ecn_marked
    );
    // Two frames arrive per frame time and one leaves, so departure k leaves about k frames
    // (k x 1058 B) behind it while the senders run (200 departures), and the queue drains
    // symmetrically after: the first and last ~19 departures see at most 20 KB (18.9 frames)
    // and stay unmarked, the ~362 in between are marked.
    assert!(ce.len() >= 355 && ce.len() <= 366, "{}", ce.len());
    assert!(rx.data().take(17).all(|r| r.ecn == Some(Ecn::Ect0)));
    assert!(rx.data().skip(383).all(|r| r.ecn == Some(Ecn::Ect0)));
    for r in ce {
        let ip = &r.bytes[14..34];
        let sum: u32 = ip
            .chunks(2)
            .map(|w| u32::from(w[0]) << 8 | u32::from(w[1]))
            .sum();
        let folded = (sum & 0xFFFF) + (sum >> 16);
        assert_eq!((folded & 0xFFFF) + (folded >> 16), 0xFFFF, "IPv4 checksum");
    }
}

#[test]
fn ring_with_cyclic_dependency_deadlocks_and_the_watchdog_says_where() {
    // Four switches in a ring (actors 0..4), host i (actor 4 + i, address i + 1) on switch i's
    // port 0; port 1 goes clockwise to the next switch's port 2. Every host streams to the host
    // two switches ahead, clockwise: each ring link carries two flows at line rate, and each
    // switch's clockwise egress waits on the next switch's ingress — a cycle of buffer
    // dependencies. Small buffers make every switch pause its predecessor: deadlock.
    let mut cfg = pfc_on(256 << 10, 0xFFFF);
    cfg.buffer.pfc.deadlock_timeout = Time::from_us(200);
    cfg.buffer.pfc.priorities = PrioritySet(1 << 3);
    let mut nodes = Vec::new();
    for i in 0..4u8 {
        let h = |k: u8| (i + k) % 4 + 1;
        nodes.push(switch(
            4 - 1,
            &[(h(0), 0), (h(1), 1), (h(2), 1), (h(3), 2)],
            &cfg,
        ));
    }
    for i in 0..4u8 {
        nodes.push(Node::Host(Host::streaming(
            ip(i + 1),
            ip((i + 2) % 4 + 1),
            26,
            4096,
            u64::MAX,
        )));
    }
    let mut links = Vec::new();
    for i in 0..4u32 {
        links.push((i, 0, 4 + i, 0));
        links.push((i, 1, (i + 1) % 4, 2));
    }
    let out = run(nodes, &wiring(8, &links), Time::from_us(2_000));
    // A real deadlock, not slow progress: no host got a data frame in the last millisecond.
    let last = out[4..]
        .iter()
        .filter_map(|n| n.host().data().last().map(|r| r.at))
        .max()
        .unwrap();
    assert!(last < Time::from_us(1_000), "still delivering at {last}");
    for (i, n) in out[..4].iter().enumerate() {
        let sw = n.switch();
        let t = sw.deadlock_detected_at();
        assert!(t.is_some(), "switch {i}: no deadlock seen");
        let stalled = sw.stalled();
        let q = stalled
            .iter()
            .find(|q| q.port == 1 && q.priority == 3)
            .unwrap_or_else(|| panic!("switch {i}: {stalled:?}"));
        assert!(q.queued_bytes > 0);
        assert!(t.unwrap().ps() >= q.paused_since.ps() + Time::from_us(200).ps());
        assert_eq!(sw.lossless_drops(), 0);
    }
}

#[test]
fn pifo_tree_egress_gets_the_pause_mask_and_charges_the_right_ingress() {
    // The incast of `incast_with_pfc_loses_nothing`, 4 senders, but the receiver's port runs a
    // PIFO tree (fair queueing among flows, priorities strict above it). The tree must hand
    // each frame back with the ingress port the switch gave it, or XON would go to the wrong
    // neighbour and the buffer would not empty.
    use fabemu_switch::pifo::config::TreeConfig;
    use fabemu_switch::tree_egress::TreeEgress;
    let tree: TreeConfig = serde_yaml::from_str(
        "{name: root, scheduling: strict_priority, by: priority,
          children: [{name: fq, scheduling: wfq, by: flow, capacity: 100000}]}",
    )
    .unwrap();
    let cfg = pfc_on(1 << 20, 0xFFFF);
    let mut sw = Switch::new(
        5,
        harness::routes(&[(1, 0), (2, 1), (3, 2), (4, 3), (5, 4)]),
        &cfg,
        7,
    );
    let built = tree
        .build::<fabemu_switch::tree_egress::TreeItem>()
        .unwrap();
    sw.set_scheduler(4, Box::new(TreeEgress::new(built)));
    let mut nodes = vec![Node::Switch(Box::new(sw))];
    for h in 1..=4u8 {
        nodes.push(Node::Host(Host::streaming(ip(h), ip(5), 26, 4096, 300)));
    }
    nodes.push(Node::Host(Host::sink()));
    let links: Vec<_> = (0..5).map(|p| (0, p, p as u32 + 1, 0)).collect();
    let out = run(nodes, &wiring(6, &links), Time::from_us(100_000));
    let sw = out[0].switch();
    assert_eq!(out[5].host().data().count(), 1200);
    assert_eq!((sw.dropped_packets(), sw.lossless_drops()), (0, 0));
    assert!(sw.stats().pause_frames_sent > 0);
    for p in 0..4 {
        let s = &sw.port_counters()[p].priorities[3];
        // Pauses come and go as the four share the port; every XON follows an XOFF, and the
        // last word each sender heard is an XON.
        assert!(s.xon_frames_sent > 0 && s.xon_frames_sent <= s.pause_frames_sent);
        let last = out[p + 1].host().pauses().last().map(|(_, f)| f.quanta);
        assert_eq!(last, Some([0; 8]), "port {p}");
        assert_eq!(sw.mmu().ingress_use(p, 3).total(), 0, "port {p}");
    }
    assert_eq!(sw.xoff(0) | sw.xoff(1) | sw.xoff(2) | sw.xoff(3), 0);
    // Frames went from the slab to the tree and back: every slot was given back.
    assert_eq!(out[5].host().held_at_last, 0);
}

/// A FIFO that holds at most `cap` frames and refuses the arriving frame beyond.
struct Bounded {
    fifo: fabemu_switch::egress::Fifo,
    cap: usize,
}

impl fabemu_switch::egress::EgressScheduler for Bounded {
    fn enqueue(
        &mut self,
        packet: fabemu_fabric::packet::Packet,
        at: fabemu_switch::egress::Arrival,
    ) -> Option<fabemu_switch::egress::Dequeued> {
        if self.fifo.len() >= self.cap {
            return Some(fabemu_switch::egress::Dequeued {
                packet,
                enqueued_at: at.now,
                priority: at.priority,
                ingress: at.ingress,
            });
        }
        self.fifo.push(packet, at.now, at.priority, at.ingress);
        None
    }
    fn dequeue(&mut self, _now: Time, paused: u8) -> Option<fabemu_switch::egress::Dequeued> {
        self.fifo
            .pop(paused)
            .map(|p| fabemu_switch::egress::Dequeued {
                packet: p.item,
                enqueued_at: p.enqueued_at,
                priority: p.priority,
                ingress: p.ingress,
            })
    }
    fn len(&self) -> usize {
        self.fifo.len()
    }
}

#[test]
fn frames_a_scheduler_refuses_are_dropped_not_enqueued() {
    // Two hosts stream 100 frames each at line rate into one 100 Gb/s port whose scheduler
    // holds at most 2 frames: about half are refused. The port's `enqueued` (derived when
    // read) counts those that stayed: every one left, so it equals `dequeued`, and with the
    // drops it makes all 200.
    let cfg = SwitchConfig::default();
    let mut sw = Switch::new(3, harness::routes(&[(1, 0), (2, 1), (3, 2)]), &cfg, 7);
    sw.set_scheduler(
        2,
        Box::new(Bounded {
            fifo: Default::default(),
            cap: 2,
        }),
    );
    let nodes = vec![
        Node::Switch(Box::new(sw)),
        Node::Host(Host::streaming(ip(1), ip(3), 0, 4096, 100)),
        Node::Host(Host::streaming(ip(2), ip(3), 0, 4096, 100)),
        Node::Host(Host::sink()),
    ];
    let w = wiring(4, &[(0, 0, 1, 0), (0, 1, 2, 0), (0, 2, 3, 0)]);
    let out = run(nodes, &w, Time::from_us(1000));
    let (sw, rx) = (out[0].switch(), out[3].host());
    let p = &sw.port_stats()[2];
    assert!(p.dropped_packets > 50, "{}", p.dropped_packets);
    assert_eq!(p.enqueued, p.dequeued);
    assert_eq!(p.dequeued + p.dropped_packets, 200);
    assert_eq!(rx.data().count() as u64, p.dequeued);
    assert_eq!((sw.queued_packets(), sw.mmu().used()), (0, 0));
}
