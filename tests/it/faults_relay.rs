//! Failover on fabrics whose hosts relay: after the failover delay a relaying
//! host, and a NIC choosing its QPs' egress port, route around a failed link — the other way
//! round a ring, another direction or dimension of a torus.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: a failure is a panic

use crate::common;

use common::*;

/// A data-mode ring All-Reduce of 8 MiB on an 8-host bidirectional ring, 100 Gb/s, 1 us.
const RING: &str = "\
mode: data
seed: 3
nic: {rto: 100us}
topology:
  ring: {hosts: 8, bandwidth: 100Gbps, latency: 1us}
workload:
  collectives:
    - {op: all_reduce, algorithm: ring, type: float, redop: sum, size: 8MiB}
";

/// Both directions' frames over a link.
fn frames(l: &fabemu::report::LinkReport) -> u64 {
    l.a_to_b.tx_packets + l.b_to_a.tx_packets
}

#[test]
fn a_ring_routes_the_other_way_round_a_failed_link() {
    let clean = run_yaml(RING, 1);
    // Measured loss-free: 1.212 ms; the link fails at 300 us, a quarter of the way in.
    let failed = |failover: &str| {
        let yaml = format!(
            "{RING}routing: {{failover: {failover}}}\nfaults:\n  - {{link: [h3, h4], down: true, at: 300us}}\n"
        );
        let r = run_yaml(&yaml, 1);
        assert!(r.invariants.ok, "{:?}", r.invariants.violations);
        assert_eq!(r.collectives[0].wrong, Some(0));
        assert_eq!(r.collectives[0].finished_ranks, 8);
        r
    };
    let r = failed("50us");
    let f = r.faults.as_ref().unwrap();
    let e = &f.entries[0];
    // Every host still reaches every other one the long way round: nothing blackholed, and
    // the frames lost on the dead link were retransmitted.
    assert_eq!(f.blackholed_frames, 0);
    assert!(e.frames_lost > 0);
    assert!(r.totals.retransmitted_packets >= e.frames_lost, "{e:?}");
    // Lost only until the hosts moved off the link: at 100 Gb/s a 4 KiB data frame takes
    // ~335 ns on the wire, so 50 us carry ~150 frames per direction; allow both directions
    // plus frames already queued on the port when the routes changed (measured: 151).
    assert!(e.frames_lost < 2 * 150 + 100, "{e:?}");
    // Twice the failover delay loses about twice as many frames (measured 151 -> ~300): the
    // losses belong to the failover window, not to the rest of the run.
    let r2 = failed("100us");
    let lost2 = r2.faults.as_ref().unwrap().entries[0].frames_lost;
    assert!(
        lost2 * 10 > e.frames_lost * 16 && lost2 < 2 * 300 + 100,
        "{} -> {lost2}",
        e.frames_lost
    );
    // The traffic moved to the other direction: every other link carries more than in the
    // loss-free run (measured 7168 -> 12613 frames each), the failed one far less (it carried
    // only the first 350 us: measured 1925).
    for (lc, lf) in clean.links.iter().zip(&r.links) {
        assert_eq!((&lc.a, &lc.b), (&lf.a, &lf.b));
        if (lf.a.as_str(), lf.b.as_str()) == ("h3", "h4") {
            assert!(frames(lf) * 2 < frames(lc), "{} {}", frames(lc), frames(lf));
        } else {
            assert!(
                frames(lf) * 10 > frames(lc) * 15,
                "{} {}",
                frames(lc),
                frames(lf)
            );
        }
    }
    // It costs time (the long way round is 7 hops and shares links), but completes.
    let (t0, t1) = (
        clean.collectives[0].end_ps.unwrap(),
        r.collectives[0].end_ps.unwrap(),
    );
    assert!(t1 > t0 && t1 < 3 * t0, "{t0} {t1}");
}

#[test]
fn a_torus_routes_around_a_failed_link() {
    let base = "\
mode: data
seed: 3
nic: {rto: 100us}
topology:
  torus: {dims: [4, 4], bandwidth: 100Gbps, latency: 1us}
workload:
  collectives:
    - {op: all_to_all, type: float, size: 4MiB}
";
    let r = run_yaml(
        &format!("{base}faults:\n  - {{link: [h1, h2], down: true, at: 30us}}\n"),
        1,
    );
    assert!(r.invariants.ok, "{:?}", r.invariants.violations);
    let c = &r.collectives[0];
    assert_eq!((c.wrong, c.finished_ranks), (Some(0), 16));
    let f = r.faults.as_ref().unwrap();
    assert_eq!(f.blackholed_frames, 0);
    assert!(f.entries[0].frames_lost > 0);
    assert!(r.totals.retransmitted_packets > 0);
    // h1 -> h2 is a one-hop route in dimension 0; after failover it goes another way (the
    // other direction round the dimension-0 ring, or through dimension 1), so the failed
    // link carries less than the others of its ring.
    let link = |a: &str, b: &str| {
        r.links
            .iter()
            .find(|l| l.a == a && l.b == b)
            .map(frames)
            .unwrap()
    };
    assert!(link("h1", "h2") < link("h0", "h1"));
}

#[test]
fn ring_failover_is_identical_for_1_2_and_4_threads() {
    let yaml = format!(
        "{RING}routing: {{failover: 20us}}\nfaults:\n  - {{link: [h3, h4], down: true, from: 100us, until: 400us}}\n  - {{link: [h6, h7], ber: 1e-6}}\n"
    );
    let path = temp_scenario("ring-failover-threads.yaml", &yaml);
    let p = path.to_string_lossy().to_string();
    let json = |threads: &str| report_json(&p, threads);
    let one = json("1");
    // The failure and its recovery (routes taken back at 420 us) both happened.
    let e = &one["faults"]["entries"][0];
    assert!(e["frames_lost"].as_u64().unwrap() > 0, "{e}");
    assert!(e["time_to_recover_ps"].as_u64().is_some(), "{e}");
    assert_eq!(json("2"), one);
    assert_eq!(json("4"), one);
}

#[test]
fn a_cut_ring_blackholes_at_the_relaying_host_and_names_the_cut() {
    // Two links down from the start cut h4..h6 off h7..h3: h5's message to h0 has no path.
    // h5 keeps sending toward h6 (its QP has no route left, so it keeps its port); h6, a
    // relaying host without a route after the failover, blackholes what arrives.
    let yaml = "\
mode: timing
seed: 3
until: 5ms
nic: {rto: 20us}
topology:
  ring: {hosts: 8, bandwidth: 100Gbps, latency: 1us}
workload:
  messages:
    - {src: h5, dst: h0, size: 1MiB}
faults:
  - {link: [h3, h4], down: true}
  - {link: [h6, h7], down: true}
";
    let r = run_yaml(yaml, 1);
    assert!(!r.invariants.ok);
    let f = r.faults.as_ref().unwrap();
    assert!(f.blackholed_frames > 0);
    assert_eq!(f.blackholed_at.len(), 1);
    let b = &f.blackholed_at[0];
    assert_eq!(b.switch, "h6");
    assert_eq!(b.cut_off_by, vec!["link h3-h4", "link h6-h7"]);
    // Before the failover the frames died on h6 -> h7; the QP never recovered.
    let e = &f.entries[1];
    assert!(e.frames_lost > 0 && e.qps_unrecovered == 1, "{e:?}");
    assert_eq!(e.time_to_recover_ps, None);
    let out = fabemu(&[
        "run",
        &temp_scenario("cut-ring.yaml", yaml).to_string_lossy(),
        "--quiet",
    ]);
    assert_eq!(out.status.code(), Some(3));
}
