//! NIC transport features against closed forms: the per-QP rate limiter, ACK coalescing, and
//! zero-latency links (which must never be cut between threads).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: a failure is a panic

use crate::common;

use common::*;

fn pair(extra_nic: &str, latency: &str, size: &str) -> String {
    format!(
        "mode: timing\nnic: {{{extra_nic}}}\nhosts: [h0, h1]\nlinks:\n  - {{a: h0, b: h1, bandwidth: 100Gbps, latency: {latency}}}\nworkload:\n  messages:\n    - {{src: h0, dst: h1, size: {size}}}\n"
    )
}

#[test]
fn rate_limiter_paces_a_qp_at_its_rate() {
    // At 25 Gb/s each packet may start only after its wire bytes would have taken at 25 Gb/s
    // (320 ps per byte); the last one then takes its own 80 ps/byte on the 100 Gb/s wire.
    let r = run_yaml(&pair("qp_rate: 25Gbps", "1us", "1MiB"), 1);
    let wire = message_wire_bytes(1 << 20, 4096);
    let paced: u64 = wire[..wire.len() - 1].iter().map(|w| w * 320).sum();
    let expected = paced + wire.last().unwrap() * 80 + 1_000_000;
    assert_eq!(r.messages[0].completion_time_ps, Some(expected));
    let gp = r.messages[0].goodput_gbps.unwrap();
    assert!(gp < 25.0 && gp > 24.0, "{gp}");
}

#[test]
fn ack_coalescing_sends_fewer_acks_and_keeps_timing() {
    let every = run_yaml(&pair("ack_every: 1", "1us", "1MiB"), 1);
    let coalesced = run_yaml(&pair("ack_every: 16", "1us", "1MiB"), 1);
    // 256 packets: one ACK each, or one per 16 (the last packet's ACK is among them).
    assert_eq!(every.nics[1].stats.acks_sent, 256);
    assert_eq!(coalesced.nics[1].stats.acks_sent, 16);
    // ACKs travel the other direction of a full-duplex link: data timing is unchanged.
    assert_eq!(
        every.messages[0].completion_time_ps,
        coalesced.messages[0].completion_time_ps
    );
}

#[test]
fn zero_latency_links_run_on_any_thread_count() {
    let yaml = "mode: timing\ntopology:\n  star: {hosts: 8, bandwidth: 100Gbps, latency: 0ns}\nworkload:\n  all_to_all: {size: 8KiB}\n";
    let one = run_yaml(yaml, 1);
    let four = run_yaml(yaml, 4);
    // Nothing can be cut without a zero lookahead, so four threads fall back to one partition.
    assert_eq!(four.host.partitions, 1);
    assert!(four.invariants.ok);
    let strip = |r: &fabemu::Report| {
        let mut v = serde_json::to_value(r).unwrap_or_default();
        v.as_object_mut().map(|o| o.remove("host"));
        v
    };
    assert_eq!(strip(&one), strip(&four));
    // One packet at zero latency: serialization only, twice (host -> switch -> host).
    let wire = message_wire_bytes(8 << 10, 4096);
    assert!(one
        .messages
        .iter()
        .all(|m| m.completion_time_ps.unwrap() >= (wire[0] + wire[1]) * 80));
}

#[test]
fn relayed_and_local_traffic_share_a_hosts_port() {
    // A ring of 4: h0 -> h2 relays through h1 (dimension order, the positive way on a tie),
    // whose port toward h2 also carries h1's own message. The two alternate, so both finish
    // together, after both messages' wire bytes have crossed h1 -> h2 at 100 Gb/s.
    let yaml = "mode: data\nnic: {relay_buffer: 16MiB}\ntopology:\n  torus: {dims: [4], bandwidth: 100Gbps, latency: 1us}\nworkload:\n  messages:\n    - {src: h0, dst: h2, size: 8MiB}\n    - {src: h1, dst: h2, size: 8MiB}\n";
    let r = run_yaml(yaml, 1);
    assert!(r.invariants.ok, "{:?}", r.invariants.violations);
    assert_eq!(r.totals.drops, 0);
    let wire: u64 = message_wire_bytes(8 << 20, 4096).iter().sum();
    let both = 2 * wire * PS_PER_BYTE_100G;
    // Each ends within the path's latency and a few packets' time of the port's busy period
    // (3 us; one packet is 0.33 us): neither waited for the other to finish.
    for m in &r.messages {
        let t = m.completion_time_ps.unwrap();
        assert!(t.abs_diff(both) <= 3_000_000, "{} at {t} vs {both}", m.src);
    }
}

#[test]
fn a_full_relay_buffer_drops_and_counts() {
    let yaml = "mode: data\nnic: {relay_buffer: 64KiB, rto: 50us}\ntopology:\n  torus: {dims: [4], bandwidth: 100Gbps, latency: 1us}\nworkload:\n  messages:\n    - {src: h0, dst: h2, size: 2MiB}\n    - {src: h1, dst: h2, size: 2MiB}\n";
    let r = run_yaml(yaml, 1);
    let relay: u64 = r.nics.iter().map(|n| n.stats.relay_dropped).sum();
    assert!(relay > 0);
    assert_eq!(r.totals.drops, relay);
    // Go-back-N recovers every byte.
    assert!(r.invariants.ok, "{:?}", r.invariants.violations);
    assert!(r.messages.iter().all(|m| m.data_ok == Some(true)));
}
