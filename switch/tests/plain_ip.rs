//! Frames that real programs send (TCP, UDP, ICMP over IPv4, carried by an emulation) cross a
//! switch by the same rules as RoCEv2 frames: routed by destination, TTL decremented with the
//! checksum patched, timed by the same store-and-forward arithmetic; anything but IPv4 is
//! dropped and counted.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: a failure is a panic

mod harness;

use fabemu_fabric::packet::{Packet, Payload};
use fabemu_fabric::units::Time;
use fabemu_switch::{Switch, SwitchConfig};
use harness::*;

/// A TCP/IPv4 frame from host `src` to host `dst` of `len` bytes in all (no FCS), with a
/// correct IPv4 header checksum, split as an emulation splits it: the first 74 bytes inline,
/// the rest as data.
fn tcp(src: u8, dst: u8, len: usize, sport: u16) -> Packet {
    let mut f = vec![0u8; len];
    f[0..6].copy_from_slice(&[2, 0, 0, 0, 0, dst]);
    f[6..12].copy_from_slice(&[2, 0, 0, 0, 0, src]);
    f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
    let ip = &mut f[14..34];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&((len - 14) as u16).to_be_bytes());
    ip[6] = 0x40; // don't fragment
    ip[8] = 64;
    ip[9] = 6;
    ip[12..16].copy_from_slice(&ip_of(src));
    ip[16..20].copy_from_slice(&ip_of(dst));
    let sum = checksum(&f[14..34]);
    f[24..26].copy_from_slice(&sum.to_be_bytes());
    f[34..36].copy_from_slice(&sport.to_be_bytes());
    f[36..38].copy_from_slice(&5201u16.to_be_bytes());
    let cut = len.min(74);
    let rest = bytes::Bytes::copy_from_slice(&f[cut..]);
    Packet::new(&f[..cut], Payload::data(rest), &[]).unwrap()
}

fn ip_of(n: u8) -> [u8; 4] {
    ip(n).octets()
}

fn checksum(h: &[u8]) -> u16 {
    let mut s: u32 = h
        .chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], c[1]])))
        .sum();
    while s > 0xFFFF {
        s = (s & 0xFFFF) + (s >> 16);
    }
    !(s as u16)
}

#[test]
fn a_tcp_frame_is_routed_timed_and_its_ttl_decremented() {
    let len = 1514;
    let sent = tcp(1, 2, len, 40000);
    let before = sent.to_frame_bytes();
    let mut h1 = Host::sink();
    h1.script = vec![(Time::ZERO, sent)];
    let sw = Node::Switch(Box::new(Switch::new(
        2,
        routes(&[(1, 0), (2, 1)]),
        &SwitchConfig::default(),
        7,
    )));
    let nodes = vec![Node::Host(h1), sw, Node::Host(Host::sink())];
    let w = wiring(3, &[(0, 0, 1, 0), (1, 1, 2, 0)]);
    let out = run(nodes, &w, Time::NEVER);
    let rx = &out[2].host().rx;
    assert_eq!(rx.len(), 1);
    // Two store-and-forward hops of (frame + 24 wire bytes) at 100 Gb/s, and two cables.
    let ser = (len as u64 + 24) * 80;
    assert_eq!(rx[0].at, Time(2 * ser + 2 * LATENCY.ps()));
    let after = &rx[0].bytes;
    assert_eq!(after.len(), before.len());
    assert_eq!(after[14 + 8], 63, "TTL decremented");
    assert_eq!(checksum(&after[14..34]), 0, "IPv4 checksum still valid");
    // Everything but TTL and checksum is untouched, payload included.
    let differ: Vec<usize> = (0..len).filter(|&i| after[i] != before[i]).collect();
    assert!(
        differ.iter().all(|&i| i == 22 || i == 24 || i == 25),
        "{differ:?}"
    );
    assert_eq!(out[1].switch().stats().malformed, 0);
}

#[test]
fn ipv6_and_arp_are_dropped_and_counted() {
    let mut v6 = vec![0u8; 80];
    v6[12..14].copy_from_slice(&0x86DDu16.to_be_bytes());
    let mut arp = vec![0u8; 60];
    arp[12..14].copy_from_slice(&0x0806u16.to_be_bytes());
    let f = |b: &[u8]| {
        Packet::new(
            &b[..b.len().min(74)],
            Payload::data(bytes::Bytes::copy_from_slice(&b[b.len().min(74)..])),
            &[],
        )
        .unwrap()
    };
    let mut h1 = Host::sink();
    h1.script = vec![(Time::ZERO, f(&v6)), (Time::from_us(1), f(&arp))];
    let sw = Node::Switch(Box::new(Switch::new(
        2,
        routes(&[(1, 0), (2, 1)]),
        &SwitchConfig::default(),
        7,
    )));
    let out = run(
        vec![Node::Host(h1), sw, Node::Host(Host::sink())],
        &wiring(3, &[(0, 0, 1, 0), (1, 1, 2, 0)]),
        Time::NEVER,
    );
    assert!(out[2].host().rx.is_empty());
    assert_eq!(out[1].switch().stats().malformed, 2);
}
