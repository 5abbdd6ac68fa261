//! Traffic classes end to end: `dscp`/`priority` per message and collective reach the switches
//! as the IPv4 DSCP and pick the strict-priority queue; `deadline`, `slack` and `rank` reach PIFO
//! schedulers; bad values are refused with a located error; runs stay identical for any thread
//! count.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: a failure is a panic

use crate::common;

use common::*;
use fabemu::Report;

const MTU: u64 = 4096;
/// An ACK frame: Ethernet 14 + IPv4 20 + UDP 8 + BTH 12 + AETH 4 + ICRC 4, plus the overhead.
const ACK_WIRE: u64 = 62 + ETH_OVERHEAD;
/// Propagation latency of every link in these scenarios.
const LATENCY_PS: u64 = 1_000_000;

fn wire(m: u64) -> u64 {
    message_wire_bytes(m, MTU).iter().sum()
}

/// The largest data frame on the wire (a first packet: RETH, full MTU), in ps at 100 Gb/s: the
/// longest a frame already being sent can hold a port.
fn frame_ps() -> u64 {
    message_wire_bytes(2 * MTU, MTU)[0] * PS_PER_BYTE_100G
}

/// A 4 MiB ring All-Reduce over h0..h3 of an 8-host star starting at 20 us, in `class`, beside
/// a 4:1 incast of 4 MiB messages from h4..h7 into h0 at time 0 in `incast_class` (`None`: no
/// incast).
fn collective_and_incast(class: &str, incast_class: Option<&str>) -> String {
    let mut y = format!(
        "mode: timing\nnic: {{mtu: 4KiB}}\ntopology:\n  star: {{hosts: 8, bandwidth: 100Gbps, latency: 1us}}\nworkload:\n  collectives:\n    - {{op: all_reduce, algorithm: ring, size: 4MiB, hosts: [h0, h1, h2, h3], start: 20us{class}}}\n"
    );
    match incast_class {
        None => y.push_str("  messages: []\n"),
        Some(c) => {
            y.push_str("  messages:\n");
            for h in 4..8 {
                y.push_str(&format!("    - {{src: h{h}, dst: h0, size: 4MiB{c}}}\n"));
            }
        }
    }
    y
}

fn collective_ps(r: &Report) -> u64 {
    assert!(r.invariants.ok, "{:?}", r.invariants.violations);
    let c = &r.collectives[0];
    match (c.start_ps, c.end_ps) {
        (Some(s), Some(e)) => e - s,
        _ => panic!("the collective did not finish: {c:?}"),
    }
}

#[test]
fn a_high_priority_collective_ignores_a_low_priority_incast() {
    // Closed form of the collective alone (tests/it/collectives.rs): 2(n-1) = 6 ring steps of
    // 1 MiB, each its wire bytes plus the ACKs of the step's incoming 1 MiB on the same uplink,
    // one store-and-forward packet and two hops of latency, at 100 Gb/s.
    let m = 1u64 << 20;
    let steps = 6;
    let step = (wire(m) + m.div_ceil(MTU) * ACK_WIRE + message_wire_bytes(m, MTU)[0])
        * PS_PER_BYTE_100G
        + 2 * LATENCY_PS;
    let closed = steps * step;
    let solo = collective_ps(&run_yaml(&collective_and_incast("", None), 1));
    // 3%: the tolerance of the collective tests, whose closed forms this one is.
    let off = (solo as f64 - closed as f64).abs() / closed as f64;
    assert!(off < 0.03, "solo {solo} ps vs closed form {closed} ps");

    // Priority 5 (DSCP 40) over an incast on DSCP 8 (priority 1) that keeps h0's downlink
    // saturated for the whole collective: the default egress is strict priority, so the
    // collective loses at most, per step, one low-priority frame already on the wire at each of
    // its two hops (non-preemptive), plus h0's uplink time for the few ACKs of incast data that
    // gets through between the collective's packets (< 0.1% here): bound 2 frames per step.
    let high = run_yaml(
        &collective_and_incast(", priority: 5", Some(", dscp: 8")),
        1,
    );
    let t_high = collective_ps(&high);
    let bound = solo + 2 * steps * frame_ps();
    assert!(
        t_high <= bound,
        "prioritised collective {t_high} ps, solo {solo} ps, bound {bound} ps"
    );
    // The incast still finished: it took the leftover and then the whole link.
    assert!(high.messages.iter().all(|m| m.completion_time_ps.is_some()));

    // The contrast: in one class the incast takes 4/5 of h0's downlink and the collective
    // slows down several times (3.5x here), so the bound above is not met by accident.
    let shared = collective_ps(&run_yaml(&collective_and_incast("", Some("")), 1));
    assert!(
        shared > 2 * solo,
        "shared class {shared} ps, solo {solo} ps"
    );
}

/// Four 1 MiB messages into h0 of a 5-host star whose switch runs one PIFO ranked by
/// `scheduling`; message i carries `field: values[i]`.
fn four_into_one(scheduling: &str, field: &str, values: [&str; 4]) -> String {
    let mut y = format!(
        "mode: timing\nnic: {{mtu: 4KiB}}\nswitch_scheduler: {{name: only, scheduling: {scheduling}}}\ntopology:\n  star: {{hosts: 5, bandwidth: 100Gbps, latency: 1us}}\nworkload:\n  messages:\n"
    );
    for (i, v) in values.iter().enumerate() {
        y.push_str(&format!(
            "    - {{src: h{}, dst: h0, size: 1MiB, {field}: {v}}}\n",
            i + 1
        ));
    }
    y
}

/// Completion times of the messages, and the order they finished in (message indices).
fn completions(r: &Report) -> (Vec<u64>, Vec<usize>) {
    assert!(r.invariants.ok, "{:?}", r.invariants.violations);
    let t: Vec<u64> = r
        .messages
        .iter()
        .map(|m| m.completion_time_ps.unwrap())
        .collect();
    let mut order: Vec<usize> = (0..t.len()).collect();
    order.sort_by_key(|&i| t[i]);
    (t, order)
}

#[test]
fn edf_lstf_and_explicit_ranks_serve_messages_in_the_order_given() {
    // Deadlines 400, 100, 300, 200 us: EDF must finish h2, h4, h3, h1 — each message whole,
    // one after the other on h0's link. The k-th to finish ends after k messages' wire bytes
    // at 100 Gb/s (the senders start together and the port never idles), plus two hops of
    // latency, one store-and-forward frame, and at most one frame of another message that
    // was already on the wire when the first packets met (the PIFO is non-preemptive).
    let expected_order = vec![1, 3, 2, 0];
    let one = wire(1 << 20) * PS_PER_BYTE_100G;
    let check = |what: &str, r: &Report| {
        let (t, order) = completions(r);
        assert_eq!(order, expected_order, "{what}: completions {t:?}");
        for (k, &i) in order.iter().enumerate() {
            let base = (k as u64 + 1) * one + 2 * LATENCY_PS;
            assert!(
                t[i] >= base && t[i] <= base + 2 * frame_ps(),
                "{what}: message {i} ({}th) done at {} ps, expected {base}..{} ps",
                k + 1,
                t[i],
                base + 2 * frame_ps()
            );
        }
        assert_eq!(r.switches[0].priority_inversions, 0, "{what}");
    };
    let edf = run_yaml(
        &four_into_one("edf", "deadline", ["400us", "100us", "300us", "200us"]),
        1,
    );
    check("edf", &edf);
    // The same order from slack (LSTF: arrival + slack) and from explicit ranks.
    let lstf = run_yaml(
        &four_into_one("lstf", "slack", ["400us", "100us", "300us", "200us"]),
        1,
    );
    check("lstf", &lstf);
    let rank = run_yaml(&four_into_one("rank", "rank", ["40", "10", "30", "20"]), 1);
    check("rank", &rank);

    // Without deadlines the same PIFO is FIFO: the four interleave packet by packet and all
    // finish near 4 messages' time, so the first of them is nowhere near one message's time.
    let fifo = run_yaml(
        &four_into_one("edf", "start", ["0us", "0us", "0us", "0us"]),
        1,
    );
    let (t, _) = completions(&fifo);
    assert!(t.iter().all(|&x| x > 3 * one), "{t:?}");
}

/// Runs the binary on `yaml` and returns its exit code and stderr.
fn run_bad(name: &str, yaml: &str) -> (Option<i32>, String) {
    let path = temp_scenario(name, yaml);
    let out = fabemu(&["run", &path.to_string_lossy(), "--quiet"]);
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}

#[test]
fn bad_classes_exit_2_with_the_field_located() {
    let head = "topology:\n  star: {hosts: 4, bandwidth: 100Gbps, latency: 1us}\nworkload:\n";
    let cases: [(&str, &str, &[&str]); 6] = [
        (
            "  messages:\n    - {src: h0, dst: h1, size: 1KiB, dscp: 64}\n",
            ":5:",
            &["workload.messages[0].dscp", "dscp 64 is out of range", "0..=63"],
        ),
        (
            "  messages:\n    - {src: h0, dst: h1, size: 1KiB}\n    - src: h0\n      dst: h1\n      size: 1KiB\n      priority: 8\n",
            ":9:",
            &["workload.messages[1].priority", "priority 8 is out of range"],
        ),
        (
            "  messages:\n    - src: h0\n      dst: h1\n      size: 1KiB\n      dscp: 46\n      priority: 3\n",
            ":9:",
            &["workload.messages[0].priority", "dscp 46 is priority 5", "not 3"],
        ),
        (
            "  collectives:\n    - {op: all_reduce, size: 1MiB, dscp: 100}\n",
            ":5:",
            &["workload.collectives[0].dscp", "dscp 100 is out of range"],
        ),
        (
            "  messages:\n    - {src: h0, dst: h1, size: 1KiB, deadline: 0s}\n",
            ":5:",
            &["workload.messages[0].deadline", "> 0"],
        ),
        (
            "  messages:\n    - {src: h0, dst: h1, size: 1KiB, priority: -1}\n",
            ":5:",
            &["workload.messages[0].priority"],
        ),
    ];
    for (i, (workload, line, expect)) in cases.iter().enumerate() {
        let (code, err) = run_bad(
            &format!("classes-bad-{i}.yaml"),
            &format!("{head}{workload}"),
        );
        assert_eq!(code, Some(2), "case {i}: {err}");
        assert!(err.starts_with("error: "), "case {i}: {err}");
        assert!(
            err.contains(&format!("classes-bad-{i}.yaml{line}")),
            "case {i}: {err}"
        );
        for e in expect.iter() {
            assert!(err.contains(e), "case {i}: `{e}` not in {err}");
        }
        assert!(!err.contains("panicked"), "case {i}: {err}");
    }
    // A priority the switches map differently must be named with a DSCP that lands there.
    let remapped = "switch_buffer: {total: 32MiB, dscp_priority: {24: 5}}\n";
    let (code, err) = run_bad(
        "classes-bad-remap.yaml",
        &format!(
            "{remapped}{head}  collectives:\n    - {{op: all_reduce, size: 1MiB, priority: 3}}\n"
        ),
    );
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains(":6:")
            && err.contains("priority 3 stands for dscp 24")
            && err.contains("priority 5"),
        "{err}"
    );
}

#[test]
fn classes_run_identically_on_1_2_and_4_threads() {
    // Both mechanisms at once: strict priority between classes (the default egress) and EDF
    // and LSTF within a PIFO on h0's leaf, on a two-switch fabric so the threads' partitions
    // exchange frames.
    let yaml = "mode: timing\nnic: {mtu: 4KiB}\nswitch_scheduler:\n  name: root\n  scheduling: strict_priority\n  by: priority\n  children:\n    - {name: deadlines, scheduling: edf}\nswitches: [{name: s0}, {name: s1}]\nhosts: [h0, h1, h2, h3]\nlinks:\n  - {a: h0, b: s0, bandwidth: 100Gbps, latency: 1us}\n  - {a: h1, b: s0, bandwidth: 100Gbps, latency: 1us}\n  - {a: h2, b: s1, bandwidth: 100Gbps, latency: 1us}\n  - {a: h3, b: s1, bandwidth: 100Gbps, latency: 1us}\n  - {a: s0, b: s1, bandwidth: 100Gbps, latency: 1us}\nworkload:\n  collectives:\n    - {op: all_reduce, size: 1MiB, priority: 5, start: 5us}\n  messages:\n    - {src: h2, dst: h0, size: 512KiB, dscp: 8, deadline: 90us}\n    - {src: h3, dst: h0, size: 512KiB, dscp: 8, deadline: 30us}\n    - {src: h1, dst: h0, size: 512KiB, dscp: 8, slack: 5us, rank: 3}\n";
    let path = temp_scenario("classes-threads.yaml", yaml);
    let path = path.to_string_lossy().to_string();
    let one = report_json(&path, "1");
    assert_eq!(
        one["totals"]["messages_completed"],
        one["totals"]["messages"]
    );
    for threads in ["2", "4"] {
        assert!(
            report_json(&path, threads) == one,
            "threads {threads} differ"
        );
    }
}
