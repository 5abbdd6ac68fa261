//! Timing against closed forms: serialization = wire bytes x 8 / bandwidth, store-and-forward
//! per hop, propagation latency. With integer picoseconds and rates whose bit time divides
//! evenly (100 Gb/s: 80 ps per byte) the emulator must match to the picosecond.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: a failure is a panic

use crate::common;

use common::*;

fn two_hosts(size: &str, latency: &str) -> String {
    format!(
        "seed: 1\nmode: timing\nhosts: [h0, h1]\nlinks:\n  - {{a: h0, b: h1, bandwidth: 100Gbps, latency: {latency}}}\nworkload:\n  messages:\n    - {{src: h0, dst: h1, size: {size}}}\n"
    )
}

#[test]
fn one_message_over_one_link_matches_the_closed_form_exactly() {
    for (size, mtu) in [
        (1u64 << 20, 4096u64),
        (1000, 4096),
        (10_000, 4096),
        (0, 4096),
    ] {
        let r = run_yaml(&two_hosts(&format!("{size}B"), "1us"), 1);
        let wire: u64 = message_wire_bytes(size, mtu).iter().sum();
        // Back-to-back packets: the last bit leaves after all wire bytes, then flies 1 us.
        let expected = wire * PS_PER_BYTE_100G + 1_000_000;
        let m = &r.messages[0];
        assert_eq!(m.completion_time_ps, Some(expected), "size {size}");
        assert!(r.invariants.ok, "{:?}", r.invariants);
    }
}

#[test]
fn ack_arrives_one_control_frame_and_one_latency_after_delivery() {
    let r = run_yaml(&two_hosts("64KiB", "2us"), 1);
    let m = &r.messages[0];
    // ACK frame: 54 B headers + AETH 4 + ICRC 4 = 62 B; + FCS, preamble, gap = 86 B.
    let ack_wire = 62 + ETH_OVERHEAD;
    assert_eq!(
        m.acked_ps.unwrap() - m.delivered_ps.unwrap(),
        ack_wire * PS_PER_BYTE_100G + 2_000_000
    );
}

/// Store-and-forward through switches, computed independently with the max-plus recurrence:
/// a node starts forwarding packet i when it has fully arrived and packet i-1 has left.
fn pipelined_delivery(wire: &[u64], hops: usize, ps_per_byte: u64, latency: u64) -> u64 {
    let mut arrive: Vec<u64> = {
        let mut t = 0;
        wire.iter()
            .map(|w| {
                t += w * ps_per_byte;
                t + latency
            })
            .collect()
    };
    for _ in 1..hops {
        let mut free = 0u64;
        arrive = arrive
            .iter()
            .zip(wire)
            .map(|(&a, w)| {
                let start = a.max(free);
                free = start + w * ps_per_byte;
                free + latency
            })
            .collect();
    }
    *arrive.last().unwrap()
}

#[test]
fn multi_hop_path_through_two_switches() {
    let yaml = |size: &str| {
        format!(
            "mode: timing\nhosts: [h0, h1]\nswitches: [{{name: s0}}, {{name: s1}}]\nlinks:\n  - {{a: h0, b: s0, bandwidth: 100Gbps, latency: 500ns}}\n  - {{a: s0, b: s1, bandwidth: 100Gbps, latency: 500ns}}\n  - {{a: s1, b: h1, bandwidth: 100Gbps, latency: 500ns}}\nworkload:\n  messages:\n    - {{src: h0, dst: h1, size: {size}}}\n"
        )
    };
    // One packet: hops x (serialization + propagation).
    let r = run_yaml(&yaml("1000B"), 1);
    let ser = (74 + 1000 + 4 + 24) * PS_PER_BYTE_100G;
    assert_eq!(r.messages[0].completion_time_ps, Some(3 * (ser + 500_000)));

    // Many packets: the first pays every hop, the rest stream behind it.
    let r = run_yaml(&yaml("1MiB"), 1);
    let wire = message_wire_bytes(1 << 20, 4096);
    let exact = pipelined_delivery(&wire, 3, PS_PER_BYTE_100G, 500_000);
    assert_eq!(r.messages[0].completion_time_ps, Some(exact));
    // The closed form of docs/ARCHITECTURE.md ("Closed forms"), m_wire/B + (h-1) pkt_wire/B + h a,
    // ignores that the first packet is 16 bytes longer (RETH) than the rest; the difference is
    // below (h-1) x 16 B.
    let total: u64 = wire.iter().sum();
    let closed = total * 80 + 2 * wire.last().unwrap() * 80 + 3 * 500_000;
    let diff = exact.abs_diff(closed);
    assert!(diff <= 2 * 16 * 80, "closed form {closed} vs {exact}");
}

#[test]
fn two_messages_share_a_bottleneck_fairly() {
    let yaml = "mode: timing\nhosts: [h0, h1, h2]\nswitches: [{name: s0}]\nlinks:\n  - {a: h0, b: s0, bandwidth: 100Gbps, latency: 1us}\n  - {a: h1, b: s0, bandwidth: 100Gbps, latency: 1us}\n  - {a: s0, b: h2, bandwidth: 100Gbps, latency: 1us}\nworkload:\n  messages:\n    - {src: h0, dst: h2, size: 4MiB}\n    - {src: h1, dst: h2, size: 4MiB}\n";
    let r = run_yaml(yaml, 1);
    let wire = message_wire_bytes(4 << 20, 4096);
    let w_total: u64 = wire.iter().sum();
    // The switch's port to h2 starts when the first packet has arrived and then never idles
    // (two senders at line rate feed one line-rate port): it carries both messages' wire bytes.
    let t_first = wire[0] * 80 + 1_000_000;
    let end = t_first + 2 * w_total * 80 + 1_000_000;
    let last = r
        .messages
        .iter()
        .map(|m| m.completion_time_ps.unwrap())
        .max()
        .unwrap();
    assert_eq!(last, end);
    // Each gets half: FIFO interleaves the two senders packet by packet, so both finish within
    // one packet time of the end, and each one's goodput is half the line's share of payload.
    for m in &r.messages {
        let ct = m.completion_time_ps.unwrap();
        assert!(end - ct <= 2 * 4200 * 80, "{ct} vs {end}");
        let gp = m.goodput_gbps.unwrap();
        let payload_share = (4u64 << 20) as f64 / w_total as f64;
        let expected = 50.0 * payload_share;
        assert!(
            (gp - expected).abs() / expected < 0.01,
            "{gp} vs {expected}"
        );
    }
}
