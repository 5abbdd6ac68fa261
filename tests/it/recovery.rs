//! Loss recovery: with a switch buffer too small for an incast, frames are dropped, go-back-N
//! retransmits, every message completes and — in data mode — arrives byte for byte.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: a failure is a panic

use crate::common;

use common::*;

#[test]
fn incast_with_tiny_buffer_drops_and_recovers_every_byte() {
    let yaml = "\
mode: data
nic: {mtu: 1KiB, rto: 30us}
switch_buffer: {total: 8KiB}
topology:
  star: {hosts: 5, bandwidth: 100Gbps, latency: 1us}
workload:
  messages:
    - {src: h1, dst: h0, size: 200KiB}
    - {src: h2, dst: h0, size: 200KiB}
    - {src: h3, dst: h0, size: 200000B}
    - {src: h4, dst: h0, size: 1B}
";
    let r = run_yaml(yaml, 1);
    assert!(r.totals.drops > 0, "the buffer should overflow");
    assert!(r.totals.retransmitted_packets > 0);
    assert!(r.invariants.ok, "{:?}", r.invariants.violations);
    assert_eq!(r.totals.messages_completed, 4);
    for m in &r.messages {
        assert_eq!(m.data_ok, Some(true), "message {} corrupted", m.tag);
    }
    let nak_or_timeout: u64 = r
        .nics
        .iter()
        .map(|n| n.stats.naks_received + n.stats.timeouts)
        .sum();
    assert!(nak_or_timeout > 0);
}

#[test]
fn lossless_flag_turns_a_drop_into_exit_code_3() {
    let yaml = "\
mode: timing
lossless: true
switch_buffer: {total: 8KiB}
topology:
  star: {hosts: 3, bandwidth: 100Gbps, latency: 1us}
workload:
  messages:
    - {src: h1, dst: h0, size: 64KiB}
    - {src: h2, dst: h0, size: 64KiB}
";
    let path = temp_scenario("lossless.yaml", yaml);
    let out = fabemu(&["run", &path.to_string_lossy()]);
    assert_eq!(out.status.code(), Some(3));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("lossless") && err.contains("dropped"), "{err}");
}

#[test]
fn unfinished_transfer_is_exit_code_3() {
    // 1 GiB at 100 Gb/s needs ~86 ms; stop at 1 ms.
    let yaml = "\
mode: timing
until: 1ms
hosts: [a, b]
links: [{a: a, b: b, bandwidth: 100Gbps, latency: 1us}]
workload:
  messages: [{src: a, dst: b, size: 1GiB}]
";
    let path = temp_scenario("unfinished.yaml", yaml);
    let out = fabemu(&["run", &path.to_string_lossy()]);
    assert_eq!(out.status.code(), Some(3));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("never finished") && err.contains("until"),
        "{err}"
    );
}
