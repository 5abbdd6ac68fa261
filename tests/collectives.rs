//! Collectives end to end: programs executed by the hosts' NICs over the emulated fabric.
//!
//! Data: every operation and algorithm leaves 0 wrong elements for several rank counts and sizes
//! (including sizes not divisible by the rank count, and fewer elements than ranks).
//!
//! Timing: the closed forms of DESIGN.md §8 refined to packets. A ring step sends m bytes to the
//! next rank; it takes the message's wire bytes (payload + 58 header bytes + 24 Ethernet
//! overhead per 4 KiB packet, RETH and ImmDt once) at the link rate, plus on a switch one packet
//! time for the store-and-forward hop, plus the latency of each hop. On a switch the sender's
//! uplink also carries the 86-byte ACKs of the message it receives in the same step, so those
//! count too. The tolerance is 3%, as the issue asks; the closed forms already include header
//! and ACK bytes, so what remains is scheduling slack (one packet per step, < 1% here).

mod common;

use common::{message_wire_bytes, run_yaml, ETH_OVERHEAD, PS_PER_BYTE_100G};
use fabemu::Report;

const MTU: u64 = 4096;
/// An ACK frame: Ethernet 14 + IPv4 20 + UDP 8 + BTH 12 + AETH 4 + ICRC 4, plus the overhead.
const ACK_WIRE: u64 = 62 + ETH_OVERHEAD;

fn wire(m: u64) -> u64 {
    message_wire_bytes(m, MTU).iter().sum()
}

fn packets(m: u64) -> u64 {
    m.div_ceil(MTU).max(1)
}

fn scenario(topology: &str, mode: &str, collectives: &str) -> String {
    format!(
        "mode: {mode}\nnic: {{mtu: 4KiB, ack_every: 1}}\ntopology:\n{topology}\nworkload:\n  collectives:\n{collectives}"
    )
}

fn star(n: usize) -> String {
    format!("  star: {{hosts: {n}, bandwidth: 100Gbps, latency: 500ns}}")
}

fn ring(n: usize) -> String {
    format!("  ring: {{hosts: {n}, bandwidth: 100Gbps, latency: 500ns}}")
}

fn one(op: &str, algorithm: &str, size: &str, extra: &str) -> String {
    format!("    - {{op: {op}, algorithm: {algorithm}, size: {size}{extra}}}\n")
}

fn time_ps(r: &Report, i: usize) -> u64 {
    let c = &r.collectives[i];
    assert!(r.invariants.ok, "{:?}", r.invariants.violations);
    match (c.start_ps, c.end_ps) {
        (Some(s), Some(e)) => e - s,
        _ => panic!("collective {i} did not finish: {c:?}"),
    }
}

fn assert_close(what: &str, got: u64, want: u64, tol: f64) {
    let err = (got as f64 - want as f64).abs() / want as f64;
    assert!(
        err <= tol,
        "{what}: emulated {got} ps, closed form {want} ps ({:.2}% off, tolerance {:.1}%)",
        err * 100.0,
        tol * 100.0
    );
}

/// One step of a ring algorithm through one switch: m bytes, ACKs of the incoming m bytes on
/// the same uplink, one store-and-forward packet, two hops of 500 ns.
fn switch_step_ps(m: u64) -> u64 {
    let first_pkt = message_wire_bytes(m, MTU)[0];
    (wire(m) + packets(m) * ACK_WIRE + first_pkt) * PS_PER_BYTE_100G + 2 * 500_000
}

#[test]
fn ring_all_reduce_on_a_switch_matches_the_closed_form() {
    for n in [4u64, 8] {
        let size = 4u64 << 20;
        let r = run_yaml(
            &scenario(
                &star(n as usize),
                "timing",
                &one("all_reduce", "ring", "4MiB", ""),
            ),
            1,
        );
        let want = 2 * (n - 1) * switch_step_ps(size / n);
        assert_close(
            &format!("ring all-reduce n={n}"),
            time_ps(&r, 0),
            want,
            0.03,
        );
    }
}

#[test]
fn ring_all_reduce_on_a_ring_matches_the_closed_form() {
    // Neighbours are one link apart and ACKs travel on the other direction of that link, so a
    // step is the message's wire bytes plus one latency.
    for n in [4u64, 6] {
        let size = 3u64 << 20;
        let r = run_yaml(
            &scenario(
                &ring(n as usize),
                "timing",
                &one("all_reduce", "ring", "3MiB", ""),
            ),
            1,
        );
        let m = size / n;
        let want = 2 * (n - 1) * (wire(m) * PS_PER_BYTE_100G + 500_000);
        assert_close(
            &format!("ring all-reduce on a ring n={n}"),
            time_ps(&r, 0),
            want,
            0.03,
        );
    }
}

#[test]
fn direct_all_to_all_on_a_switch_matches_the_closed_form() {
    // (n-1) messages of S/n leave every sender at once; its uplink carries them and the ACKs
    // of the n-1 messages it receives: (n-1)(S/n)/B refined to wire bytes, plus the last
    // packet's store-and-forward and two latencies.
    let n = 8u64;
    let size = 8u64 << 20;
    let r = run_yaml(
        &scenario(
            &star(n as usize),
            "timing",
            &one("all_to_all", "direct", "8MiB", ""),
        ),
        1,
    );
    let m = size / n;
    let want =
        ((n - 1) * (wire(m) + packets(m) * ACK_WIRE) + MTU + 82) * PS_PER_BYTE_100G + 2 * 500_000;
    assert_close("direct all-to-all", time_ps(&r, 0), want, 0.03);
}

#[test]
fn busbw_approaches_the_link_bandwidth_as_size_grows() {
    let r = run_yaml(
        &scenario(
            &star(8),
            "timing",
            "    - {op: all_reduce, algorithm: ring, sizes: {from: 64KiB, to: 16MiB, factor: 4}}\n",
        ),
        1,
    );
    assert!(r.invariants.ok, "{:?}", r.invariants.violations);
    let bus: Vec<f64> = r
        .collectives
        .iter()
        .map(|c| c.busbw_gbps.unwrap_or(0.0))
        .collect();
    assert_eq!(bus.len(), 5);
    for w in bus.windows(2) {
        assert!(w[1] > w[0], "busbw must grow with size: {bus:?}");
    }
    // 100 Gb/s = 12.5 GB/s; headers and ACKs take 4% (82 + 86 bytes per 4 KiB), latency
    // terms the rest at 16 MiB.
    let last = bus[bus.len() - 1];
    assert!(last > 0.92 * 12.5 && last < 12.5, "busbw at 16 MiB: {last}");
}

#[test]
fn every_collective_leaves_correct_data() {
    // 4136 B = 1034 floats or 517 int64 (divisible by none of 3, 5, 8); 8 B = 2 floats or 1
    // int64 (fewer elements than ranks).
    for n in [3usize, 5, 8] {
        for size in ["4136B", "8B", "64KiB"] {
            let mut list = String::new();
            list += &one("all_reduce", "ring", size, "");
            list += &one("reduce_scatter", "ring", size, "");
            list += &one("all_gather", "ring", size, ", type: int32");
            list += &one("all_to_all", "direct", size, "");
            list += &one("all_reduce", "ring", size, ", type: int32, redop: min");
            list += &one("all_reduce", "ring", size, ", type: int64, redop: max");
            list += &one("all_reduce", "ring", size, ", type: double");
            let r = run_yaml(&scenario(&star(n), "data", &list), 1);
            assert!(
                r.invariants.ok,
                "n={n} size={size}: {:?}",
                r.invariants.violations
            );
            for c in &r.collectives {
                assert_eq!(c.wrong, Some(0), "n={n} size={size}: {c:?}");
                assert_eq!(c.finished_ranks, n);
            }
        }
    }
}

#[test]
fn collectives_run_in_stream_order_or_at_their_start_time() {
    let list = one("all_reduce", "ring", "1MiB", "")
        + &one("all_reduce", "ring", "1MiB", "")
        + &one("all_reduce", "ring", "1MiB", ", start: 1ms");
    let r = run_yaml(&scenario(&star(4), "timing", &list), 1);
    let c = &r.collectives;
    let (s0, e0) = (c[0].start_ps.unwrap_or(0), c[0].end_ps.unwrap_or(0));
    let (s1, e1) = (c[1].start_ps.unwrap_or(0), c[1].end_ps.unwrap_or(0));
    assert_eq!(s0, 0);
    // The second starts on each rank when that rank finished the first: no later than the
    // first's end, and the two take the same time on an idle fabric (within one step).
    assert!(s1 <= e0 && s1 > s0);
    let step = switch_step_ps((1 << 20) / 4);
    assert!((e1 - s1).abs_diff(e0 - s0) <= step, "{c:?}");
    assert_eq!(c[2].start_ps, Some(1_000_000_000));
}

#[test]
fn collective_reports_are_identical_for_any_thread_count() {
    let topo = "  leaf_spine: {leaves: 2, spines: 2, hosts_per_leaf: 4, host_bandwidth: 100Gbps, host_latency: 500ns, fabric_bandwidth: 100Gbps, fabric_latency: 1us}";
    let list = one("all_reduce", "ring", "1MiB", "") + &one("all_to_all", "direct", "1MiB", "");
    let yaml = scenario(topo, "data", &list);
    let json = |threads| {
        let r = run_yaml(&yaml, threads);
        let mut v = serde_json::to_value(&r).unwrap_or_default();
        if let Some(o) = v.as_object_mut() {
            o.remove("host");
        }
        serde_json::to_string(&v).unwrap_or_default()
    };
    let one_thread = json(1);
    assert!(one_thread.contains("\"wrong\":0"));
    for t in [2, 4] {
        assert_eq!(one_thread, json(t), "{t} threads differ from 1");
    }
}
