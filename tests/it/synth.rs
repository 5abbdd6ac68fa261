//! `algorithm: synthesized` end to end: the TACOS-style schedule runs at
//! packet level through the library on symmetric, explicit, heterogeneous and degraded fabrics,
//! is compared with the built-in ring, computes the right thing in data mode (#wrong 0) and is
//! deterministic.
//!
//! The ratios below were measured with these exact scenarios (4 MiB All-Reduce, 4 KiB MTU);
//! each bound leaves room for packet-level effects the synthesizer does not model (headers,
//! ACKs, store-and-forward) without letting a regression to ring-like behaviour pass.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: a failure is a panic

use crate::common;

use common::run_yaml;
use fabemu::Report;

const NIC: &str = "nic: {mtu: 4KiB, ack_every: 1}";

fn time_ps(r: &Report, i: usize) -> u64 {
    let c = &r.collectives[i];
    assert!(r.invariants.ok, "{:?}", r.invariants.violations);
    match (c.start_ps, c.end_ps) {
        (Some(s), Some(e)) => e - s,
        _ => panic!("collective {i} did not finish: {c:?}"),
    }
}

/// Runs `ring` then `synthesized` (`extra` fields on the synthesized entry) of every op in
/// `ops` on the fabric, in data mode; checks #wrong 0 for all and returns `synthesized / ring`
/// time ratios in op order.
fn ratios(fabric: &str, ops: &[&str], extra: &str) -> Vec<f64> {
    let mut yaml = format!("mode: data\n{NIC}\n{fabric}\nworkload:\n  collectives:\n");
    for op in ops {
        yaml.push_str(&format!(
            "    - {{op: {op}, algorithm: ring, size: 4MiB}}\n    - {{op: {op}, algorithm: synthesized, size: 4MiB{extra}}}\n"
        ));
    }
    let r = run_yaml(&yaml, 1);
    for (i, c) in r.collectives.iter().enumerate() {
        assert_eq!(
            c.wrong,
            Some(0),
            "collective {i} ({}) is wrong",
            c.algorithm
        );
    }
    let v: Vec<f64> = (0..ops.len())
        .map(|k| time_ps(&r, 2 * k + 1) as f64 / time_ps(&r, 2 * k) as f64)
        .collect();
    eprintln!("synthesized / ring for {ops:?}: {v:.3?}");
    v
}

/// An explicit fabric of hosts joined directly by `links` (`(a, b, bandwidth)`).
fn explicit(hosts: &[String], links: &[(String, String, &str)]) -> String {
    let mut s = format!("hosts: [{}]\nlinks:\n", hosts.join(", "));
    for (a, b, bw) in links {
        s.push_str(&format!(
            "  - {{a: {a}, b: {b}, bandwidth: {bw}, latency: 500ns}}\n"
        ));
    }
    s
}

#[test]
fn on_a_switch_synthesis_matches_ring() {
    // On one switch every host has one uplink and one downlink, and ring already keeps both
    // busy all the time, so it is bandwidth-optimal: synthesis must equal it. Measured:
    // 0.977 (All-Reduce), 0.978 (All-Gather), 0.975 (Reduce-Scatter) - the synthesized
    // exchanges are pairwise, so the ACKs a host sends ride a little better beside its data.
    // Bound: within 3% either way (2% plus the ACK effect).
    let r = ratios(
        "topology:\n  star: {hosts: 8, bandwidth: 100Gbps, latency: 500ns}",
        &["all_reduce", "all_gather", "reduce_scatter"],
        "",
    );
    for x in r {
        assert!((0.97..=1.02).contains(&x), "synthesized / ring = {x:.3}");
    }
}

#[test]
fn on_a_symmetric_ring_synthesis_is_never_slower_than_ring() {
    // The built-in ring drives one direction of each link; the synthesized schedule finds the
    // other direction too, so the chunks of a rank travel half the ring each way: closed form
    // ring (n-1)/n S/B per half against about (n/2)/n S/B, 7/4 = 1.75 faster for n = 8.
    // Measured: 0.583 (All-Reduce), 0.582 (All-Gather). Bound: 0.62, which implies never
    // slower than ring (the aim is within 2%) and fails if the second direction is lost.
    let r = ratios(
        "topology:\n  ring: {hosts: 8, bandwidth: 100Gbps, latency: 500ns}",
        &["all_reduce", "all_gather"],
        "",
    );
    for x in r {
        assert!(x <= 0.62, "synthesized / ring = {x:.3}");
    }
}

#[test]
fn on_a_2d_mesh_without_wraparound_synthesis_beats_ring() {
    // 3 x 3 mesh, direct host-to-host links, no wrap-around: the ring's 9 hops must include
    // a 3-hop way back through the mesh, and ring only uses 9 of the 24 link directions.
    // Measured: 0.450 (All-Reduce), 0.544 (Reduce-Scatter). Bound: 0.65.
    let name = |r: usize, c: usize| format!("m{r}{c}");
    let hosts: Vec<String> = (0..3)
        .flat_map(|r| (0..3).map(move |c| name(r, c)))
        .collect();
    let mut links = Vec::new();
    for r in 0..3 {
        for c in 0..3 {
            if c < 2 {
                links.push((name(r, c), name(r, c + 1), "100Gbps"));
            }
            if r < 2 {
                links.push((name(r, c), name(r + 1, c), "100Gbps"));
            }
        }
    }
    let r = ratios(
        &explicit(&hosts, &links),
        &["all_reduce", "reduce_scatter"],
        "",
    );
    for x in r {
        assert!(x <= 0.65, "synthesized / ring = {x:.3}");
    }
}

#[test]
fn on_a_heterogeneous_multi_dimensional_fabric_synthesis_beats_ring() {
    // A 400 Gb/s ring of 4 inside, a 100 Gb/s switch of 2 outside: the flat ring is held to
    // the switch's rate, synthesis keeps most traffic on the fast rings. 4 chunks per rank let
    // it pipeline. Measured: 0.349. Bound: 0.5.
    let r = ratios(
        "topology:\n  multi_dim:\n    dimensions:\n      - {kind: ring, size: 4, bandwidth: 400Gbps, latency: 100ns}\n      - {kind: switch, size: 2, bandwidth: 100Gbps, latency: 1us}",
        &["all_reduce"],
        ", chunks: 4",
    );
    assert!(r[0] <= 0.5, "synthesized / ring = {:.3}", r[0]);
}

#[test]
fn on_a_ring_with_one_slow_link_synthesis_beats_ring() {
    // A ring of 8 at 100 Gb/s with one link at 25 Gb/s: the built-in ring pushes every chunk
    // through the slow link; synthesis routes most around it, the other way.
    // Measured: 0.593 (All-Reduce, 4 chunks). Bound: 0.75.
    let hosts: Vec<String> = (0..8).map(|i| format!("h{i}")).collect();
    let links: Vec<_> = (0..8)
        .map(|i| {
            let bw = if i == 3 { "25Gbps" } else { "100Gbps" };
            (format!("h{i}"), format!("h{}", (i + 1) % 8), bw)
        })
        .collect();
    let r = ratios(&explicit(&hosts, &links), &["all_reduce"], ", chunks: 4");
    assert!(r[0] <= 0.75, "synthesized / ring = {:.3}", r[0]);
}

#[test]
fn synthesis_is_deterministic_for_any_thread_count() {
    let yaml = format!(
        "mode: data\nseed: 3\n{NIC}\ntopology:\n  multi_dim:\n    dimensions:\n      - {{kind: ring, size: 4, bandwidth: 400Gbps, latency: 100ns}}\n      - {{kind: switch, size: 2, bandwidth: 100Gbps, latency: 1us}}\nworkload:\n  collectives:\n    - {{op: all_reduce, algorithm: synthesized, size: 1MiB, chunks: 2}}\n"
    );
    let strip = |r: &Report| {
        let mut v = serde_json::to_value(r).unwrap_or_default();
        v.as_object_mut().map(|o| o.remove("host"));
        v
    };
    let a = strip(&run_yaml(&yaml, 1));
    let b = strip(&run_yaml(&yaml, 2));
    let c = strip(&run_yaml(&yaml, 1));
    assert_eq!(a, b);
    assert_eq!(a, c);
}

#[test]
fn synthesized_collectives_other_than_gather_scatter_reduce_are_refused() {
    let yaml = format!(
        "{NIC}\ntopology:\n  star: {{hosts: 4, bandwidth: 100Gbps, latency: 500ns}}\nworkload:\n  collectives:\n    - {{op: broadcast, algorithm: synthesized, size: 1MiB}}\n"
    );
    let msg = match fabemu::load_str(&yaml, "<test>") {
        Err(e) => e.to_string(),
        Ok(src) => match fabemu::run_source(&src, 1, None) {
            Err(e) => e.to_string(),
            Ok(_) => panic!("broadcast: synthesized was accepted"),
        },
    };
    assert!(msg.contains("no synthesized algorithm"), "{msg}");
}

#[test]
fn algo_show_prints_the_schedule_and_its_predicted_time() {
    // One switch of 4 at 100 Gb/s, 4 MiB All-Gather: 4 chunks of 1 MiB, every host sends and
    // receives 3 of them over its own link back to back (each step sends a chunk the host
    // already held), so the model predicts 3 x 1 MiB x 8 / 100 Gb/s = 251.658 us plus one
    // 1 us path latency (two 500 ns hops) for the last chunk: 252.658 us.
    let path = common::temp_scenario(
        "synth_show.yaml",
        &format!(
            "{NIC}\ntopology:\n  star: {{hosts: 4, bandwidth: 100Gbps, latency: 500ns}}\nworkload:\n  collectives:\n    - {{op: all_gather, algorithm: synthesized, size: 4MiB}}\n"
        ),
    );
    let out = common::fabemu(&["algo", "show", &path.to_string_lossy()]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("predicted time 252.658 us"), "{text}");
    assert_eq!(
        text.lines().filter(|l| l.contains(" gather ")).count(),
        12,
        "{text}"
    );
    // Bad input is a located error and exit code 2.
    let bad = common::temp_scenario(
        "synth_show_bad.yaml",
        &format!(
            "{NIC}\ntopology:\n  star: {{hosts: 4, bandwidth: 100Gbps, latency: 500ns}}\nworkload:\n  collectives:\n    - {{op: all_to_all, algorithm: synthesized, size: 4MiB}}\n"
        ),
    );
    let out = common::fabemu(&["algo", "show", &bad.to_string_lossy()]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("synth_show_bad.yaml:") && err.contains("algorithm"),
        "{err}"
    );
}

#[test]
fn synthesis_runs_at_flow_fidelity_too() {
    // The same programs on the flow executor (timing mode: flows carry no payload). The
    // heterogeneous fabric of the packet test above; measured 0.349 at flow fidelity, as at
    // packet level (0.349). Bound: 0.5.
    let yaml = format!(
        "mode: timing\nfidelity: flow\n{NIC}\ntopology:\n  multi_dim:\n    dimensions:\n      - {{kind: ring, size: 4, bandwidth: 400Gbps, latency: 100ns}}\n      - {{kind: switch, size: 2, bandwidth: 100Gbps, latency: 1us}}\nworkload:\n  collectives:\n    - {{op: all_reduce, algorithm: ring, size: 4MiB}}\n    - {{op: all_reduce, algorithm: synthesized, size: 4MiB, chunks: 4}}\n"
    );
    let r = run_yaml(&yaml, 1);
    let x = time_ps(&r, 1) as f64 / time_ps(&r, 0) as f64;
    eprintln!("flow: synthesized / ring = {x:.3}");
    assert!(x <= 0.5, "synthesized / ring = {x:.3}");
}
