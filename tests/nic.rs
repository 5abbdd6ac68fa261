//! NIC transport features against closed forms: the per-QP rate limiter, ACK coalescing, and
//! zero-latency links (which must never be cut between threads).

mod common;

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
