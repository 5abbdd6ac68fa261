//! Faults and recovery: loss recovery that does not lock step, and (below) injected
//! faults — link and node failures, random loss, bit errors, degradation — with failover.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: a failure is a panic

use crate::common;

use common::*;

/// The defect this guards against: a lossy leaf-spine (4 leaves x 8 hosts, 2 spines: 4:1 over the
/// spines), 256 KiB switch buffers, `rto: 100us`, an all-to-all of 256 KiB messages plus an
/// 8 MiB All-To-All collective.
const LOCK_STEP: &str = "\
name: lock-step
mode: timing
seed: 1
nic: {rto: 100us}
switch_buffer: {total: 256KiB}
topology:
  leaf_spine: {leaves: 4, spines: 2, hosts_per_leaf: 8, host_bandwidth: 100Gbps, host_latency: 500ns, fabric_bandwidth: 100Gbps, fabric_latency: 1us}
workload:
  all_to_all: {size: 256KiB}
  collectives:
    - {op: all_to_all, size: 8MiB}
";

#[test]
fn lock_step_scenario_completes_with_bounded_recovery() {
    // Before the recovery window, every timeout resent a QP's whole unacknowledged window into
    // full buffers: 1.18 M drops, 1.6 M retransmissions for 127 K packets of data, 193 QPs gave
    // up after 7 timeouts and the run exited 3 (191 of 992 messages unfinished). With the
    // window (restart from 1 packet after a timeout, halve on a NAK, grow back per ACK) it
    // measured: every message complete at 9.759 ms, 85 897 retransmitted packets (0.68 per
    // packet of data), 52 014 drops, 11 284 timeouts.
    let out = fabemu(&[
        "run",
        &temp_scenario("lock-step.yaml", LOCK_STEP).to_string_lossy(),
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r = run_yaml(LOCK_STEP, 1);
    assert!(r.invariants.ok, "{:?}", r.invariants.violations);
    assert_eq!(r.totals.messages_completed, r.totals.messages);
    assert_eq!(r.totals.messages, 32 * 31);
    let c = &r.collectives[0];
    assert_eq!(c.finished_ranks, 32);
    assert!(c.end_ps.is_some());
    assert!(r.nics.iter().all(|n| n.stats.qps_failed == 0));
    // The spine bottleneck bounds it below: 3/4 of 248 MiB crosses 8 x 100 Gb/s of leaf
    // uplinks, ~2.0 ms. Loss recovery may cost a multiple of that, but not the tens of
    // milliseconds of the lock-stepped backoff (46.8 ms and still unfinished before); 15 ms
    // leaves room for the seeded jitter's draws to change without the test flapping.
    let t = r.totals.completion_time_ps;
    assert!(t > 2_000_000_000 && t < 15_000_000_000, "completion {t} ps");
    // Retransmissions stay below one per packet of data (they were 12 per packet).
    let data_packets = r.totals.data_packets_sent - r.totals.retransmitted_packets;
    assert!(
        r.totals.retransmitted_packets < data_packets,
        "{} retransmitted for {data_packets}",
        r.totals.retransmitted_packets
    );
}

/// A leaf-spine of `leaves` x `per_leaf` hosts and 2 spines, 100 Gb/s everywhere.
fn leaf_spine(leaves: usize, per_leaf: usize) -> String {
    format!(
        "topology:\n  leaf_spine: {{leaves: {leaves}, spines: 2, hosts_per_leaf: {per_leaf}, host_bandwidth: 100Gbps, host_latency: 500ns, fabric_bandwidth: 100Gbps, fabric_latency: 1us}}\n"
    )
}

/// Every link of that leaf-spine, as `faults:` names them.
fn every_link(leaves: usize, per_leaf: usize) -> Vec<(String, String)> {
    let mut v = Vec::new();
    for l in 0..leaves {
        for h in 0..per_leaf {
            v.push((format!("h{}", l * per_leaf + h), format!("leaf{l}")));
        }
        for s in 0..2 {
            v.push((format!("leaf{l}"), format!("spine{s}")));
        }
    }
    v
}

fn ring_all_reduce(size: &str) -> String {
    format!(
        "workload:\n  collectives:\n    - {{op: all_reduce, algorithm: ring, type: float, redop: sum, size: {size}}}\n"
    )
}

fn run_exit(name: &str, yaml: &str, extra: &[&str]) -> std::process::Output {
    let path = temp_scenario(name, yaml);
    let p = path.to_string_lossy().to_string();
    let mut args = vec!["run", p.as_str(), "--quiet"];
    args.extend_from_slice(extra);
    fabemu(&args)
}

#[test]
fn one_percent_loss_everywhere_still_reduces_correctly() {
    let base = format!(
        "mode: data\nseed: 5\nnic: {{rto: 50us}}\n{}{}",
        leaf_spine(4, 4),
        ring_all_reduce("4MiB")
    );
    let mut lossy = base.clone();
    lossy.push_str("faults:\n");
    for (a, b) in every_link(4, 4) {
        lossy.push_str(&format!("  - {{link: [{a}, {b}], loss: 0.01}}\n"));
    }
    let clean = run_yaml(&base, 1);
    let r = run_yaml(&lossy, 1);
    assert!(r.invariants.ok, "{:?}", r.invariants.violations);
    let c = &r.collectives[0];
    assert_eq!(c.wrong, Some(0));
    assert_eq!(c.finished_ranks, 16);
    let f = r.faults.as_ref().unwrap();
    let lost: u64 = f.entries.iter().map(|e| e.frames_lost).sum();
    // ~1% of the frames each link carries; every link carries data or ACKs.
    let hops = r.totals.packet_hops;
    assert!(
        lost as f64 > 0.005 * hops as f64 && (lost as f64) < 0.015 * hops as f64,
        "{lost} of {hops}"
    );
    assert!(r.totals.retransmitted_packets > 0);
    // Measured: 0.716 ms without loss, 4.458 ms with it (6.2x). Go-back-N is what makes
    // RoCE fragile under random loss (IRN, SIGCOMM 2018, measures the same collapse): a
    // path crosses ~4 lossy links, so ~4% of packets are lost; a lost data frame costs a NAK
    // round trip, resending everything behind it and halving the QP's window (the recovery
    // rule treats loss as congestion, as TCP does); a lost last packet or ACK costs a timeout
    // of at least 50 us against ring steps of ~24 us, and each of the 30 steps waits for the
    // slowest of its 16 transfers. Bound: slower than loss-free, less than 8x (a rule change
    // that made loss recovery much worse would cross it).
    let (t0, t1) = (clean.collectives[0].end_ps.unwrap(), c.end_ps.unwrap());
    assert!(t1 > t0 && t1 < 8 * t0, "loss-free {t0} ps, lossy {t1} ps");
    let out = run_exit("loss.yaml", &lossy, &[]);
    assert_eq!(out.status.code(), Some(0));
}

#[test]
fn bit_errors_are_counted_and_never_accepted() {
    // 1e-6 per bit: a 4 KiB frame (~33 600 wire bits) is damaged with probability ~3.3%.
    let yaml = format!(
        "mode: data\nseed: 2\nnic: {{rto: 50us}}\n{}{}faults:\n  - {{link: [h0, leaf0], ber: 1e-6}}\n",
        leaf_spine(2, 4),
        ring_all_reduce("2MiB")
    );
    let r = run_yaml(&yaml, 1);
    assert!(r.invariants.ok, "{:?}", r.invariants.violations);
    assert_eq!(r.collectives[0].wrong, Some(0));
    let e = &r.faults.as_ref().unwrap().entries[0];
    assert!(e.frames_corrupted > 0 && e.frames_lost == 0, "{e:?}");
    // The link's own counters carry the same number, split by direction.
    let l = r.links.iter().find(|l| l.a == "h0" || l.b == "h0").unwrap();
    assert_eq!(l.a_to_b.corrupted + l.b_to_a.corrupted, e.frames_corrupted);
    // The damaged frames arrived (with a flipped bit) and their receivers discarded them:
    // h0 by its ICRC check (data frames) or FCS (ACKs), leaf0 on its FCS check.
    let (l_ab, l_ba) = if l.a == "h0" {
        (l.a_to_b.corrupted, l.b_to_a.corrupted)
    } else {
        (l.b_to_a.corrupted, l.a_to_b.corrupted)
    };
    let h0 = r.nics.iter().find(|n| n.name == "h0").unwrap();
    let leaf0 = r.switches.iter().find(|s| s.name == "leaf0").unwrap();
    assert_eq!(leaf0.stats.fcs_dropped, l_ab);
    assert_eq!(h0.stats.corrupted_discarded, l_ba);
    assert!(
        h0.stats.icrc_errors > 0 && h0.stats.icrc_errors <= l_ba,
        "{:?}",
        h0.stats
    );
    // Every damaged frame was retransmitted, never accepted: the reduction is exact.
    assert!(r.totals.retransmitted_packets > 0);
}

#[test]
fn a_failed_spine_link_is_routed_around_and_the_all_reduce_completes() {
    let base = format!(
        "mode: data\nseed: 3\nnic: {{rto: 100us}}\n{}workload:\n  collectives:\n    - {{op: all_to_all, type: float, size: 8MiB}}\n",
        leaf_spine(2, 4)
    );
    let failed = format!("{base}faults:\n  - {{link: [leaf0, spine0], down: true, at: 300us}}\n");
    let clean = run_yaml(&base, 1);
    let r = run_yaml(&failed, 1);
    assert!(r.invariants.ok, "{:?}", r.invariants.violations);
    assert_eq!(r.collectives[0].wrong, Some(0));
    let f = r.faults.as_ref().unwrap();
    let e = &f.entries[0];
    // Frames sent into the dead link until switches moved off it, 50 us later: both
    // directions carry at most ~150 4-KiB frames in 50 us, and the frames already queued for
    // the link when the switches reroute still go out on it (measured: 335). Bound: 2 x 150
    // plus as many again queued.
    assert!(e.frames_lost > 0 && e.frames_lost < 600, "{e:?}");
    assert_eq!(e.rerouted_at_ps, Some(350_000_000));
    assert!(r.totals.retransmitted_packets > 0);
    // Collective messages count as in flight (the workload has no `messages:`; before, this
    // was 0): the All-To-All's 56 transfers were all under way at 300 us (measured: 56). A
    // failure for good delays only what never finishes: none.
    assert!(e.messages_in_flight > 0, "{e:?}");
    assert_eq!(e.messages_delayed, 0);
    // Time to recover, measured (rule: FaultEntryReport::time_to_recover_ps): frames are lost
    // until the switches reroute (50 us) and the queues on the dead link drain, so the last
    // QP to recover cannot be done before 50 us; and every recovery ends with an ACK, so
    // before the last message's ACK: the collective's end plus an ACK's trip back (a few
    // hops of ~1 us; 20 us is ample). Measured: 18 QPs hit, 907.5 us (losses to the halved
    // spine capacity that follow extend the recoveries).
    assert!(e.qps_hit > 0 && e.qps_unrecovered == 0, "{e:?}");
    let ttr = e.time_to_recover_ps.unwrap();
    let end = r.collectives[0].end_ps.unwrap();
    assert!(
        ttr >= 50_000_000 && 300_000_000 + ttr <= end + 20_000_000,
        "time to recover {ttr} ps, collective end {end} ps"
    );
    // A failure that ends at 500 us delays every message in flight past its end (measured:
    // 56 of 56), and its recovery is measured the same way.
    let brief = format!(
        "{base}faults:\n  - {{link: [leaf0, spine0], down: true, from: 300us, until: 500us}}\n"
    );
    let rb = run_yaml(&brief, 1);
    assert!(rb.invariants.ok, "{:?}", rb.invariants.violations);
    let eb = &rb.faults.as_ref().unwrap().entries[0];
    assert!(
        eb.messages_delayed > 0 && eb.messages_delayed <= eb.messages_in_flight,
        "{eb:?}"
    );
    assert!(
        eb.time_to_recover_ps.is_some_and(|t| t >= 50_000_000),
        "{eb:?}"
    );
    // After the failover everything between the leaves crosses spine1: it carries more than
    // in the loss-free run, where ECMP split the traffic over both spines.
    let spine1 = |rep: &fabemu::Report| -> u64 {
        rep.links
            .iter()
            .filter(|l| l.b == "spine1" || l.a == "spine1")
            .map(|l| l.a_to_b.tx_packets + l.b_to_a.tx_packets)
            .sum()
    };
    assert!(spine1(&r) > spine1(&clean));
    // Measured: 1.052 ms loss-free, 1.292 ms with the failure (half the spine capacity for
    // the second half of the run, plus the recovery of the lost frames).
    let (t0, t1) = (
        clean.collectives[0].end_ps.unwrap(),
        r.collectives[0].end_ps.unwrap(),
    );
    assert!(t1 > t0 && t1 < 2 * t0, "{t0} {t1}");
}

#[test]
fn a_failed_host_exits_3_naming_it_and_the_waiting_ranks() {
    let yaml = format!(
        "mode: timing\nnic: {{rto: 20us}}\n{}{}faults:\n  - {{node: h3, down: true, at: 50us}}\n",
        leaf_spine(2, 4),
        ring_all_reduce("8MiB")
    );
    let out = run_exit("host-down.yaml", &yaml, &[]);
    assert_eq!(out.status.code(), Some(3));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("host h3 failed at 50us"), "{err}");
    assert!(err.contains("waiting: rank 0 (h0)"), "{err}");
    assert!(err.contains("never finished"), "{err}");
}

#[test]
fn a_flapping_link_costs_between_never_failing_and_failing_for_good() {
    let base = format!(
        "mode: timing\nseed: 3\nnic: {{rto: 100us}}\n{}workload:\n  collectives:\n    - {{op: all_to_all, size: 16MiB}}\n",
        leaf_spine(2, 4)
    );
    let time = |faults: &str| {
        let r = run_yaml(&format!("{base}{faults}"), 1);
        assert!(r.invariants.ok, "{:?}", r.invariants.violations);
        r.collectives[0].end_ps.unwrap()
    };
    let up = time("");
    let down = time("faults:\n  - {link: [leaf0, spine0], down: true, at: 200us}\n");
    let flap = time(
        "faults:\n  - {link: [leaf0, spine0], down: true, from: 200us, until: 400us, period: 800us}\n",
    );
    assert!(
        up < flap && flap < down,
        "up {up}, flapping {flap}, down {down}"
    );
}

#[test]
fn faults_keep_results_identical_for_1_2_and_4_threads() {
    let yaml = format!(
        "mode: data\nseed: 9\nnic: {{rto: 50us}}\n{}workload:\n  all_to_all: {{size: 64KiB}}\nfaults:\n  - {{link: [leaf0, spine0], down: true, from: 20us, until: 120us}}\n  - {{link: [h1, leaf0], loss: 0.02}}\n  - {{link: [leaf1, spine1], ber: 1e-6, direction: spine1->leaf1}}\n  - {{link: [h6, leaf1], bandwidth: 25Gbps, from: 10us, until: 60us}}\n",
        leaf_spine(2, 4)
    );
    let path = temp_scenario("faults-determinism.yaml", &yaml);
    let p = path.to_string_lossy().to_string();
    let json = |threads: &str| report_json(&p, threads);
    let one = json("1");
    let f = &one["faults"]["entries"];
    assert!(f[0]["frames_lost"].as_u64().unwrap() > 0);
    assert!(f[1]["frames_lost"].as_u64().unwrap() > 0);
    assert!(f[2]["frames_corrupted"].as_u64().unwrap() > 0);
    for t in ["2", "4"] {
        assert!(one == json(t), "report differs with {t} threads");
    }
}

#[test]
fn bad_fault_entries_exit_2_located() {
    let head = format!(
        "mode: timing\n{}workload:\n  all_to_all: {{size: 4KiB}}\nfaults:\n",
        leaf_spine(2, 2)
    );
    let line = head.lines().count() + 1;
    for (entry, expect) in [
        ("  - {link: [leaf0, spine7], down: true}", "faults[0].link"),
        ("  - {link: [h0, h1], down: true}", "no link joins"),
        ("  - {link: [h0, leaf0], loss: 1.5}", "faults[0].loss"),
        (
            "  - {link: [h0, leaf0], loss: 0.1, from: 2ms, until: 1ms}",
            "faults[0].until",
        ),
        (
            "  - {link: [h0, leaf0], down: true, until: 1ms, period: 400us, from: 500us}",
            "faults[0].period",
        ),
        ("  - {node: nope, down: true}", "faults[0].node"),
        ("  - {node: h0, loss: 0.1}", "faults[0].node"),
        (
            "  - {link: [h0, leaf0], loss: 0.1, ber: 1e-9}",
            "one effect per entry",
        ),
        (
            "  - {link: [h0, leaf0], direction: h1->leaf0, down: true}",
            "faults[0].direction",
        ),
        ("  - {link: [h0, leaf0]}", "no effect"),
    ] {
        let out = run_exit("bad-fault.yaml", &format!("{head}{entry}\n"), &[]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{entry}: {err}");
        assert!(err.contains(expect), "{entry}: {err}");
        assert!(
            err.contains(&format!(":{line}:")),
            "{entry}: no line {line} in {err}"
        );
        assert!(!err.contains("panicked"), "{err}");
    }
}

#[test]
fn the_failover_delay_is_routing_failover_and_bad_values_exit_2_located() {
    let head = format!(
        "mode: timing\n{}workload:\n  all_to_all: {{size: 4KiB}}\nfaults:\n  - {{link: [leaf0, spine0], down: true, at: 1us}}\n",
        leaf_spine(2, 2)
    );
    let line = head.lines().count() + 1;
    for (extra, expect) in [
        ("routing: {failover: 50}", "routing.failover"),
        ("routing: {failover: soon}", "routing.failover"),
        (
            "routing: {failover: 5us, after: 1us}",
            "unknown field `after`",
        ),
        ("routing: {policy: sideways}", "routing.policy"),
        (
            "failover: 5us\nrouting: {failover: 5us}",
            "give the failover delay once",
        ),
    ] {
        let out = run_exit("bad-failover.yaml", &format!("{head}{extra}\n"), &[]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{extra}: {err}");
        assert!(err.contains(expect), "{extra}: {err}");
        assert!(
            err.contains(&format!(":{line}:")),
            "{extra}: no line {line} in {err}"
        );
        assert!(!err.contains("panicked"), "{err}");
    }
    // The long form and the older top-level spelling both set it; the report says which
    // delay was used and when the switches rerouted.
    for (extra, failover) in [
        ("", 50_000_000),
        ("routing: {failover: 20us}", 20_000_000),
        ("routing: {policy: shortest_path, failover: 7us}", 7_000_000),
        ("routing: shortest_path", 50_000_000),
        ("failover: 30us", 30_000_000),
    ] {
        let r = run_yaml(&format!("{head}{extra}\n"), 1);
        let f = r.faults.as_ref().unwrap();
        assert_eq!(f.failover_ps, failover, "{extra}");
        assert_eq!(f.entries[0].rerouted_at_ps, Some(1_000_000 + failover));
    }
}

#[test]
fn fault_windows_are_shaded_on_the_time_series_plots() {
    // A flap every 800 us from 200 us, 200 us down each time: a band from each start before
    // the traffic ends (measured: ends at 2.18 ms, so 200, 1000 and 1800 us).
    let yaml = format!(
        "mode: timing\nseed: 3\nnic: {{rto: 100us}}\n{}workload:\n  collectives:\n    - {{op: all_to_all, size: 16MiB}}\nfaults:\n  - {{link: [leaf0, spine0], down: true, from: 200us, until: 400us, period: 800us}}\n",
        leaf_spine(2, 4)
    );
    let dir = temp_path("fault-plot", "out");
    let out = run_exit("fault_plot.yaml", &yaml, &["--out", dir.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let svg = std::fs::read_to_string(dir.join("link_utilization.svg")).unwrap();
    let bands = svg.matches("opacity=\"0.12\" fill=\"#FF0000\"").count();
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("report.json")).unwrap()).unwrap();
    let end = report["totals"]["completion_time_ps"].as_u64().unwrap();
    let expected = (0..)
        .map(|k| 200_000_000 + k * 800_000_000u64)
        .take_while(|&a| a < end)
        .count();
    assert!(expected >= 3, "traffic ended at {end} ps");
    assert_eq!(bands, expected, "shaded bands in the utilization plot");
    // Without faults, no band.
    let plain = run_exit(
        "fault_plot_none.yaml",
        &yaml[..yaml.find("faults:").unwrap()],
        &["--out", dir.join("none").to_str().unwrap()],
    );
    assert!(plain.status.success());
    let svg = std::fs::read_to_string(dir.join("none").join("link_utilization.svg")).unwrap();
    assert_eq!(svg.matches("opacity=\"0.12\" fill=\"#FF0000\"").count(), 0);
}
