//! Every kind of fabric end to end: a message between the two farthest hosts completes at the
//! closed-form time. One packet: the sum over the path's links of serialization + latency.
//! Many packets: store-and-forward pipelining, computed with the max-plus recurrence (a node
//! starts a packet when it has fully arrived and the previous one has left) over the path's
//! links, each with its own rate and latency. Both must match to the picosecond: integer
//! time, nothing else on the path.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: a failure is a panic

use crate::common;

use common::*;
use fabemu::{load_str, run_source, world};
use fabemu_fabric::units::Bandwidth;

/// (bandwidth, latency) of each link on the route from `src` to `dst` (first next hop at
/// each node; equal-cost alternatives have the same link kinds on every fabric here).
fn path_links(yaml: &str, src: &str, dst: &str) -> Vec<(u64, u64)> {
    let s = load_str(yaml, "<test>").unwrap_or_else(|e| panic!("{e}"));
    let (g, routes) = world::fabric(&s).unwrap_or_else(|e| panic!("{e}"));
    let (a, b) = (g.find(src).unwrap(), g.find(dst).unwrap());
    let mut out = Vec::new();
    let mut n = a;
    while n != b {
        let port = routes.next_hops(n, b)[0];
        let p = &g.ports(n)[port];
        let l = g.link(p.link);
        out.push((l.bandwidth_bps, l.latency_ps));
        n = p.peer;
        assert!(out.len() < 64, "route loops");
    }
    out
}

/// The two hosts farthest apart by route hops (the first such pair in rank order).
fn farthest(yaml: &str) -> (String, String, u32) {
    let s = load_str(yaml, "<test>").unwrap_or_else(|e| panic!("{e}"));
    let (g, routes) = world::fabric(&s).unwrap_or_else(|e| panic!("{e}"));
    let hosts: Vec<usize> = g.hosts().collect();
    let mut best = (0, 0, 0);
    for &a in &hosts {
        for &b in &hosts {
            if let Some(h) = routes.hops(a, b) {
                if h > best.2 {
                    best = (a, b, h);
                }
            }
        }
    }
    (
        g.node(best.0).name.clone(),
        g.node(best.1).name.clone(),
        best.2,
    )
}

fn delivery(wire: &[u64], links: &[(u64, u64)]) -> u64 {
    let ser = |bytes: u64, bps: u64| Bandwidth(bps).serialization_time(bytes).ps();
    let mut arrive = Vec::with_capacity(wire.len());
    let mut free = 0u64;
    for &w in wire {
        free += ser(w, links[0].0);
        arrive.push(free + links[0].1);
    }
    for &(bps, lat) in &links[1..] {
        let mut free = 0u64;
        for (a, &w) in arrive.iter_mut().zip(wire) {
            let start = (*a).max(free);
            free = start + ser(w, bps);
            *a = free + lat;
        }
    }
    arrive.last().copied().unwrap_or(0)
}

fn check(kind: &str, fabric: &str, expected_hops: u32) {
    let base = format!("mode: timing\n{fabric}workload:\n  messages: []\n");
    let (a, b, hops) = farthest(&base);
    assert_eq!(hops, expected_hops, "{kind}: diameter");
    let links = path_links(&base, &a, &b);
    for (size, mtu) in [(1000u64, 4096u64), (1 << 20, 4096)] {
        let yaml = base.replace(
            "  messages: []\n",
            &format!("  messages:\n    - {{src: {a}, dst: {b}, size: {size}B}}\n"),
        );
        let s = load_str(&yaml, "<test>").unwrap_or_else(|e| panic!("{e}"));
        let r = run_source(&s, 1, None).unwrap_or_else(|e| panic!("{e}"));
        let wire = message_wire_bytes(size, mtu);
        let expected = delivery(&wire, &links);
        assert_eq!(
            r.messages[0].completion_time_ps,
            Some(expected),
            "{kind}: {size} B from {a} to {b}"
        );
        if size == 1000 {
            // One packet: hops x (serialization + latency), link by link.
            let closed: u64 = links
                .iter()
                .map(|&(bps, lat)| Bandwidth(bps).serialization_time(wire[0]).ps() + lat)
                .sum();
            assert_eq!(expected, closed);
        } else {
            // Large: bound by the slowest link's rate, within the pipeline's fill time.
            let slowest = links.iter().map(|l| l.0).min().unwrap();
            let total: u64 = wire.iter().sum();
            let bound = Bandwidth(slowest).serialization_time(total).ps();
            assert!(expected >= bound && expected < bound + links.len() as u64 * 2_000_000);
        }
    }
}

#[test]
fn star() {
    check(
        "star",
        "topology:\n  star: {hosts: 6, bandwidth: 100Gbps, latency: 1us}\n",
        2,
    );
}

#[test]
fn ring() {
    check(
        "ring",
        "topology:\n  ring: {hosts: 9, bandwidth: 200Gbps, latency: 300ns}\n",
        4,
    );
}

#[test]
fn leaf_spine() {
    check("leaf_spine", "topology:\n  leaf_spine: {leaves: 3, spines: 2, hosts_per_leaf: 2, host_bandwidth: 100Gbps, host_latency: 500ns, fabric_bandwidth: 400Gbps, fabric_latency: 1us}\n", 4);
}

#[test]
fn fat_tree() {
    check("fat_tree", "topology:\n  fat_tree: {k: 4, host_bandwidth: 100Gbps, host_latency: 500ns, fabric_bandwidth: 200Gbps, fabric_latency: 1us, core_bandwidth: 400Gbps}\n", 6);
}

#[test]
fn torus() {
    // 4 x 3 x 2: ring distances 2 + 1 + 1.
    check(
        "torus",
        "topology:\n  torus: {dims: [4, 3, 2], bandwidth: 100Gbps, latency: 250ns}\n",
        4,
    );
}

#[test]
fn multi_dim() {
    // Ring of 4 (2 hops), fully connected (1), switch (2).
    check("multi_dim", "topology:\n  multi_dim:\n    dimensions:\n      - {kind: ring, size: 4, bandwidth: 400Gbps, latency: 100ns}\n      - {kind: fully_connected, size: 3, bandwidth: 200Gbps, latency: 500ns}\n      - {kind: switch, size: 2, bandwidth: 100Gbps, latency: 1us}\n", 5);
}

#[test]
fn astra_sim_file() {
    // examples/astra-sim/3d.yaml: ring of 2 (1 hop), fully connected (1), switch (2); GB/s
    // with GB = 2^30 bytes, so rates that are not whole picoseconds per byte (rounded up).
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/astra-sim/3d.yaml");
    check("astra_sim", &format!("topology:\n  astra_sim: {path}\n"), 4);
}

#[test]
fn astra_sim_shapes_build_as_astra_sim_defines_them() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/astra-sim");
    let out = fabemu(&["topo", "--astra-sim", &format!("{dir}/ring8.yaml")]);
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    // 50 GB/s = 50 x 2^30 x 8 bit/s = 429.4967296 Gb/s.
    assert!(text.contains("hosts: 8, switches: 0, links: 8"), "{text}");
    assert!(text.contains("429.4967296 Gb/s"), "{text}");
    let out = fabemu(&["topo", "--astra-sim", &format!("{dir}/3d.yaml")]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("hosts: 64, switches: 16"), "{text}");
    for line in ["dim0: 32 links", "dim1: 224 links", "dim2: 64 links"] {
        assert!(text.contains(line), "{line}: {text}");
    }
}

#[test]
fn dot_output_is_written() {
    let dot = temp_path("dot", "torus.dot");
    let ex = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/torus.yaml");
    let out = fabemu(&["topo", ex, "--dot", &dot.to_string_lossy()]);
    assert_eq!(out.status.code(), Some(0));
    let text = std::fs::read_to_string(&dot).unwrap_or_default();
    assert!(text.starts_with("graph fabric {") && text.matches(" -- ").count() == 192);
}

#[test]
fn every_example_runs_clean() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/examples");
    let mut n = 0;
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.extension().is_some_and(|x| x == "yaml") {
            let out = fabemu(&["run", &p.to_string_lossy(), "--quiet"]);
            assert_eq!(
                out.status.code(),
                Some(0),
                "{}: {}",
                p.display(),
                String::from_utf8_lossy(&out.stderr)
            );
            n += 1;
        }
    }
    assert!(n >= 9);
}

#[test]
fn bad_astra_sim_files_name_the_file_line_and_field() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/astra-sim");
    for (file, line, fragments) in [
        (
            "lengths_differ.yaml",
            4,
            &["field `bandwidth`", "2 entries", "has 3"][..],
        ),
        (
            "unknown_kind.yaml",
            2,
            &["field `topology[1]`", "unknown kind `Mesh`"][..],
        ),
        (
            "size_one.yaml",
            3,
            &["field `npus_count[1]`", "at least 2"][..],
        ),
        (
            "zero_bandwidth.yaml",
            4,
            &["field `bandwidth[0]`", "greater than 0"][..],
        ),
    ] {
        let path = format!("{dir}/{file}");
        // Read directly, and through a scenario that names the file.
        let scenario = temp_scenario(
            &format!("astra-{file}"),
            &format!("topology:\n  astra_sim: {path}\nworkload: {{}}\n"),
        );
        for out in [
            fabemu(&["topo", "--astra-sim", &path]),
            fabemu(&["run", &scenario.to_string_lossy()]),
        ] {
            assert_eq!(out.status.code(), Some(2), "{file}");
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(
                err.starts_with(&format!("error: {path}:{line}:")),
                "{file}: {err}"
            );
            for f in fragments {
                assert!(err.contains(f), "{file}: `{f}` not in {err}");
            }
            assert!(!err.contains("panicked"));
        }
    }
}

/// Packets each edge switch sent up to each aggregation switch, per edge switch.
fn edge_uplink_packets(r: &fabemu::Report) -> Vec<Vec<u64>> {
    let mut per_edge: std::collections::BTreeMap<String, Vec<u64>> = Default::default();
    for l in r.links.iter().filter(|l| l.class == "edge-aggregation") {
        // Links are listed edge -> aggregation or the other way; count the edge's direction.
        let (edge, up) = if l.a.starts_with("edge") {
            (&l.a, l.a_to_b.tx_packets)
        } else {
            (&l.b, l.b_to_a.tx_packets)
        };
        per_edge.entry(edge.clone()).or_default().push(up);
    }
    per_edge.into_values().collect()
}

#[test]
fn ecmp_spreads_flows_over_fat_tree_uplinks_with_the_emulators_hash() {
    // k = 8: 128 hosts, 16256 one-packet flows; each edge switch sends ~500 flows leaving its
    // pod or edge over 4 uplinks. A uniform hash gives each uplink 1/4 (binomial sd ~10 per
    // uplink of ~125); 30% is over 3 sd, so a fair hash passes and a biased one fails.
    let yaml = "mode: timing\nnic: {ack_every: 1}\ntopology:\n  fat_tree: {k: 8, host_bandwidth: 100Gbps, host_latency: 500ns, fabric_bandwidth: 100Gbps, fabric_latency: 1us}\nworkload:\n  all_to_all: {size: 1000B}\n";
    let r = run_yaml(yaml, 1);
    assert!(r.invariants.ok);
    for ups in edge_uplink_packets(&r) {
        assert_eq!(ups.len(), 4);
        let total: u64 = ups.iter().sum();
        let mean = total as f64 / 4.0;
        for u in &ups {
            assert!(
                (*u as f64 - mean).abs() / mean < 0.30,
                "uplinks {ups:?} (data + ACK packets)"
            );
        }
    }
}

#[test]
fn one_flow_keeps_one_path() {
    // A 1 MiB message (256 packets) from h0 to a host in another pod: exactly one of h0's
    // edge switch's uplinks carries it (its ACKs come back down, not up).
    let yaml = "mode: timing\ntopology:\n  fat_tree: {k: 4, host_bandwidth: 100Gbps, host_latency: 500ns, fabric_bandwidth: 100Gbps, fabric_latency: 1us}\nworkload:\n  messages:\n    - {src: h0, dst: h15, size: 1MiB}\n";
    let r = run_yaml(yaml, 1);
    let ups = &edge_uplink_packets(&r)[0];
    assert_eq!(ups.iter().filter(|&&u| u > 0).count(), 1, "{ups:?}");
    assert_eq!(ups.iter().sum::<u64>(), 256);
}
