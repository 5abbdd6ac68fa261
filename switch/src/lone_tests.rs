//! A switch driven alone through a [`Recorder`], without an engine: frames in, the frames it
//! transmits (port, start, end) out.

use std::collections::BTreeSet;
use std::net::Ipv4Addr;

use fabemu_fabric::engine::{Actor, Context, Recorder, Sent};
use fabemu_fabric::link::{Channel, EthernetOverhead, Rate};
use fabemu_fabric::packet::{Packet, Payload};
use fabemu_fabric::route::{flow_hash, RouteTable};
use fabemu_fabric::units::{Bandwidth, Time};
use fabemu_fabric::wire::{
    opcode, BthRepr, Ecn, PfcPauseRepr, RoceRepr, MAX_HEADER_LEN, PFC_FRAME_LEN,
};

use crate::buffer::BufferConfig;
use crate::pfc::PfcConfig;
use crate::{Switch, SwitchConfig};

const SRC: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
const DST: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 9);
/// Picoseconds per byte at 100 Gb/s.
const PS_PER_BYTE: u64 = 80;

fn channels(n: usize) -> Vec<Channel> {
    let ch = Channel {
        rate: Rate::new(Bandwidth::from_gbps(100)),
        latency: Time::from_us(1),
    };
    vec![ch; n]
}

/// A RoCE frame of `payload` bytes from `SRC` to `DST` with UDP source port `udp` (the flow's
/// ECMP entropy) and `dscp`.
fn roce(udp: u16, dscp: u8, payload: usize) -> Packet {
    let repr = RoceRepr {
        src_mac: [2, 0, 0, 0, 0, 1],
        dst_mac: [2, 0, 0, 0, 0, 9],
        src_ip: SRC,
        dst_ip: DST,
        dscp,
        ecn: Ecn::Ect0,
        ttl: 64,
        ip_id: 0,
        udp_src_port: udp,
        bth: BthRepr {
            opcode: opcode::SEND_ONLY,
            pkey: 0xFFFF,
            dest_qp: 1,
            ..BthRepr::default()
        },
        reth: None,
        aeth: None,
        immdt: None,
        payload_len: payload,
    };
    let mut buf = [0u8; MAX_HEADER_LEN];
    let n = repr.emit(&mut buf).unwrap();
    Packet::new(&buf[..n], Payload::Timing(payload as u32), &[0; 4]).unwrap()
}

/// Serialization time of `pkt` at 100 Gb/s.
fn wire_time(pkt: &Packet) -> Time {
    Time(EthernetOverhead::default().wire_bytes(pkt.frame_len()) * PS_PER_BYTE)
}

/// A switch of `ports` ports routing `DST` over `via`, started in a recorder.
fn lone_switch(ports: usize, via: &[usize], cfg: &SwitchConfig) -> (Switch, Recorder, RouteTable) {
    let mut routes = RouteTable::new();
    routes.insert(DST, via);
    let mut sw = Switch::new(ports, routes.clone(), cfg, 7);
    let mut rec = Recorder::new(0, &channels(ports));
    sw.on_start(&mut rec);
    (sw, rec, routes)
}

/// Gives `pkt` to the switch as arriving on `port` now.
fn arrive(sw: &mut Switch, rec: &mut Recorder, port: usize, pkt: Packet) {
    let ev = rec.arrival(port, pkt, sw.holds_frames());
    sw.on_event(ev, rec);
}

/// Runs the switch's own events (completions, timers) up to `until`.
fn run_until(sw: &mut Switch, rec: &mut Recorder, until: Time) {
    while let Some(ev) = rec.next_event(until) {
        sw.on_event(ev, rec);
    }
    rec.advance(until);
}

fn data(sent: &[Sent]) -> Vec<&Sent> {
    sent.iter()
        .filter(|s| s.packet.frame_len() != PFC_FRAME_LEN)
        .collect()
}

/// Each flow leaves by the port its hash picks among the route's (the switch's seed salts
/// it), the moment it arrives on an idle port, for its serialization time; the flows spread
/// over all three ports.
#[test]
fn each_flow_leaves_by_its_ecmp_port_at_once() {
    let (mut sw, mut rec, routes) = lone_switch(4, &[1, 2, 3], &SwitchConfig::default());
    let mut used = BTreeSet::new();
    for k in 0..16u16 {
        let at = Time::from_us(u64::from(k));
        run_until(&mut sw, &mut rec, at);
        let udp = 0xC000 + k;
        let pkt = roce(udp, 0, 1000);
        let ser = wire_time(&pkt);
        arrive(&mut sw, &mut rec, 0, pkt);
        let sent = rec.take_sent();
        assert_eq!(sent.len(), 1, "flow {k}");
        let want = routes.select(DST, flow_hash(SRC, DST, udp, 7)).unwrap();
        assert_eq!(sent[0].port, want, "flow {k}");
        assert_eq!((sent[0].start, sent[0].done), (at, at + ser), "flow {k}");
        used.insert(want);
    }
    assert_eq!(used, BTreeSet::from([1, 2, 3]));
    assert_eq!(rec.held_frames(), 0);
    assert_eq!(sw.stats().received, 16);
}

/// Frames of one flow that arrive together leave back to back: each the moment its
/// predecessor's last bit is out (the completion the switch asked for), and the buffer is
/// empty once they are gone.
#[test]
fn queued_frames_leave_back_to_back() {
    let (mut sw, mut rec, _) = lone_switch(2, &[1], &SwitchConfig::default());
    let pkt = roce(0xC001, 0, 4000);
    let ser = wire_time(&pkt);
    for _ in 0..3 {
        arrive(&mut sw, &mut rec, 0, pkt.clone());
    }
    assert_eq!(sw.queued_packets(), 2);
    run_until(&mut sw, &mut rec, Time::NEVER);
    let starts: Vec<(usize, Time)> = rec.sent().iter().map(|s| (s.port, s.start)).collect();
    assert_eq!(
        starts,
        vec![(1, Time::ZERO), (1, ser), (1, ser + ser)],
        "{starts:?}"
    );
    assert_eq!((sw.queued_packets(), sw.mmu().used()), (0, 0));
    assert_eq!(rec.held_frames(), 0);
}

fn lossless() -> SwitchConfig {
    SwitchConfig {
        buffer: BufferConfig {
            pfc: PfcConfig {
                enabled: true,
                ..PfcConfig::default()
            },
            ..BufferConfig::default()
        },
    }
}

fn pause_frame(class: u8, quanta: u16) -> Packet {
    let mut buf = [0u8; PFC_FRAME_LEN];
    PfcPauseRepr::xoff([2, 0, 0, 0, 0, 9], class, quanta)
        .emit(&mut buf)
        .unwrap();
    Packet::new(&buf, Payload::Timing(0), &[]).unwrap()
}

/// A pause of priority 3 on the egress port holds a DSCP-26 frame (priority 3) until it runs
/// out (quanta × 512 bit times at the port's 100 Gb/s), while a frame of priority 0 passes;
/// an XON before the end releases the held frame at once.
#[test]
fn a_pause_holds_its_priority_until_it_runs_out_or_an_xon_comes() {
    let quanta = 100;
    let pause = Time(u64::from(quanta) * 512 * 10);
    for xon_at in [None, Some(Time::from_ns(300))] {
        let (mut sw, mut rec, _) = lone_switch(2, &[1], &lossless());
        arrive(&mut sw, &mut rec, 1, pause_frame(3, quanta));
        assert_eq!(sw.paused(1), 1 << 3);
        rec.advance(Time::from_ns(100));
        arrive(&mut sw, &mut rec, 0, roce(0xC001, 26, 1000));
        assert!(rec.sent().is_empty(), "priority 3 is paused");
        arrive(&mut sw, &mut rec, 0, roce(0xC002, 0, 1000));
        assert_eq!(rec.sent().len(), 1, "priority 0 is not");
        let end = match xon_at {
            Some(at) => {
                run_until(&mut sw, &mut rec, at);
                arrive(&mut sw, &mut rec, 1, pause_frame(3, 0));
                at
            }
            None => pause,
        };
        run_until(&mut sw, &mut rec, Time::NEVER);
        let sent = data(rec.sent());
        assert_eq!(sent.len(), 2);
        assert_eq!((sent[1].port, sent[1].start), (1, end), "{xon_at:?}");
        assert_eq!(sw.paused(1), 0);
        assert_eq!(
            sw.port_counters()[1].priorities[3].paused_time_ps,
            end.ps(),
            "{xon_at:?}"
        );
    }
}
