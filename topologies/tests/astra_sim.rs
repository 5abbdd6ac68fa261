//! ASTRA-sim network files: the two shapes of its examples build the expected fabric with
//! bandwidth converted from GB/s (GB = 2^30 bytes) exactly, and bad files are refused naming
//! the field.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: a failure is a panic

use fabemu_topologies::astra_sim::{self, AstraSimError, BPS_PER_GB_PER_S};
use fabemu_topologies::{
    routes_for, validate_routes, DimKind, DimSpec, LinkClass, NodeKind, RoutingPolicy,
};

/// Our copy of the shape of ASTRA-sim's one-dimensional ring example.
const RING_8: &str = "\
topology: [ Ring ]
npus_count: [ 8 ]  # number of NPUs
bandwidth: [ 50.0 ]  # GB/s
latency: [ 500.0 ]  # ns
";

/// Our copy of the shape of ASTRA-sim's three-dimensional example.
const THREE_DIM: &str = "\
topology: [ Ring, FullyConnected, Switch ]
npus_count: [ 2, 8, 4 ]
bandwidth: [ 200, 100, 50 ]  # GB/s
latency: [ 50, 500, 2000 ]  # ns
";

#[test]
fn one_gb_per_s_is_eight_gibibits() {
    assert_eq!(BPS_PER_GB_PER_S, 8 * 1024 * 1024 * 1024);
}

#[test]
fn ring_of_eight_builds_as_astra_sim_defines_it() {
    let net = astra_sim::parse(RING_8).unwrap();
    assert_eq!(
        net.dims,
        vec![DimSpec {
            kind: DimKind::Ring,
            size: 8,
            bandwidth_bps: 429_496_729_600, // 50 × 2^30 × 8
            latency_ps: 500_000,
        }]
    );
    assert!(net.ignored_keys.is_empty());
    assert_eq!(net.npus(), Some(8));
    let g = net.build().unwrap();
    assert_eq!(g.host_count(), 8);
    assert_eq!(g.nodes().len(), 8);
    assert_eq!(g.links().len(), 8);
    assert!(g.hosts().all(|h| g.ports(h).len() == 2));
    assert!(g
        .links()
        .iter()
        .all(|l| l.bandwidth_bps == 50 * BPS_PER_GB_PER_S && l.latency_ps == 500_000));
    let r = routes_for(&g).unwrap();
    validate_routes(&g, &r).unwrap();
    assert_eq!(r.hops(0, 4), Some(4));
    assert_eq!(r.hops(0, 5), Some(3));
}

#[test]
fn three_dimensions_build_as_astra_sim_defines_them() {
    let net = astra_sim::parse(THREE_DIM).unwrap();
    let gb = BPS_PER_GB_PER_S;
    let expect = [
        (DimKind::Ring, 2, 200 * gb, 50_000),
        (DimKind::FullyConnected, 8, 100 * gb, 500_000),
        (DimKind::Switch, 4, 50 * gb, 2_000_000),
    ];
    assert_eq!(net.dims.len(), 3);
    for (d, (kind, size, bw, lat)) in expect.into_iter().enumerate() {
        assert_eq!(
            net.dims[d],
            DimSpec {
                kind,
                size,
                bandwidth_bps: bw,
                latency_ps: lat
            }
        );
    }
    assert_eq!(net.dims[0].bandwidth_bps, 1_717_986_918_400);
    assert_eq!(net.npus(), Some(64));
    let g = net.build().unwrap();
    assert_eq!(g.host_count(), 64);
    let switches = g
        .nodes()
        .iter()
        .filter(|n| n.kind == NodeKind::Switch)
        .count();
    assert_eq!(switches, 16);
    // Per dimension: 32 pairs (one link each), 8 cliques of 28 links, 16 switches × 4 links.
    for (d, links, (_, _, bw, lat)) in [(0, 32, expect[0]), (1, 224, expect[1]), (2, 64, expect[2])]
    {
        let of_dim: Vec<_> = g
            .links()
            .iter()
            .filter(|l| l.class == LinkClass::Dimension(d))
            .collect();
        assert_eq!(of_dim.len(), links, "dimension {d}");
        assert!(of_dim
            .iter()
            .all(|l| l.bandwidth_bps == bw && l.latency_ps == lat));
    }
    assert_eq!(g.links().len(), 320);
    // 1 ring port, 7 clique ports, 1 switch port.
    assert!(g.hosts().all(|h| g.ports(h).len() == 9));
    assert_eq!(RoutingPolicy::for_graph(&g), RoutingPolicy::DimensionOrder);
    let r = routes_for(&g).unwrap();
    validate_routes(&g, &r).unwrap();
    // Ring = 1 hop (two NPUs), FullyConnected = 1, Switch = 2.
    assert_eq!(r.hops(0, 1), Some(1));
    assert_eq!(r.hops(0, 2), Some(1));
    assert_eq!(r.hops(0, 16), Some(2));
    assert_eq!(r.hops(0, 63), Some(4));
}

#[test]
fn other_keys_are_ignored_and_listed() {
    let text = format!("{RING_8}\nnotes: from a sweep\nlinks_count: [ 2 ]\n");
    let net = astra_sim::parse(&text).unwrap();
    assert_eq!(net.ignored_keys, vec!["notes", "links_count"]);
    assert_eq!(net.npus(), Some(8));
}

#[test]
fn fractional_values_convert_exactly() {
    let net = astra_sim::parse(
        "topology: [Switch]\nnpus_count: [4]\nbandwidth: [12.5]\nlatency: [0.0015]\n",
    )
    .unwrap();
    assert_eq!(
        net.dims[0].bandwidth_bps,
        12 * BPS_PER_GB_PER_S + BPS_PER_GB_PER_S / 2
    );
    assert_eq!(net.dims[0].latency_ps, 2); // 1.5 ps rounds half up
    let net =
        astra_sim::parse("topology: [Ring]\nnpus_count: [4]\nbandwidth: [0.1]\nlatency: [0]\n")
            .unwrap();
    // 0.1 × 8 × 2^30 = 858 993 459.2 bit/s.
    assert_eq!(net.dims[0].bandwidth_bps, 858_993_459);
    assert_eq!(net.dims[0].latency_ps, 0);
}

fn err(text: &str) -> AstraSimError {
    astra_sim::parse(text).unwrap_err()
}

#[test]
fn lists_of_different_lengths_are_named() {
    let e = err("topology: [Ring, Switch]\nnpus_count: [4, 2]\nbandwidth: [1]\nlatency: [1, 1]\n");
    assert_eq!(
        e,
        AstraSimError::LengthMismatch {
            field: "bandwidth",
            len: 1,
            dims: 2
        }
    );
    assert_eq!(
        e.to_string(),
        "`bandwidth` has 1 entries but `topology` has 2: one entry per dimension is needed"
    );
    let e = err("topology: [Ring]\nnpus_count: [4, 2]\nbandwidth: [1]\nlatency: [1]\n");
    assert!(matches!(
        e,
        AstraSimError::LengthMismatch {
            field: "npus_count",
            ..
        }
    ));
}

#[test]
fn bad_values_are_named() {
    let file = |t: &str, n: &str, b: &str, l: &str| {
        format!("topology: [{t}]\nnpus_count: [{n}]\nbandwidth: [{b}]\nlatency: [{l}]\n")
    };
    assert_eq!(
        err(&file("Ring, Torus", "2, 2", "1, 1", "1, 1")).to_string(),
        "topology[1]: unknown kind `Torus`; ASTRA-sim's kinds are Ring, FullyConnected and Switch"
    );
    assert!(matches!(
        err(&file("ring", "2", "1", "1")),
        AstraSimError::UnknownKind { index: 0, .. }
    ));
    assert_eq!(
        err(&file("Ring, Switch", "4, 1", "1, 1", "1, 1")).to_string(),
        "npus_count[1] = 1: must be a whole number of at least 2"
    );
    assert_eq!(
        err(&file("Ring", "2.5", "1", "1")).to_string(),
        "npus_count[0] = 2.5: must be a whole number of at least 2"
    );
    assert_eq!(
        err(&file("Ring", "4", "0", "1")).to_string(),
        "bandwidth[0] = 0: must be a number greater than 0 (GB/s)"
    );
    assert_eq!(
        err(&file("Ring", "4", "-50.0", "1")).to_string(),
        "bandwidth[0] = -50.0: must be a number greater than 0 (GB/s)"
    );
    assert!(matches!(
        err(&file("Ring", "4", "fast", "1")),
        AstraSimError::BadValue {
            field: "bandwidth",
            ..
        }
    ));
    assert!(matches!(
        err(&file("Ring", "4", "1e-30", "1")),
        AstraSimError::BadValue {
            field: "bandwidth",
            reason: "is below 1 bit/s",
            ..
        }
    ));
    assert!(matches!(
        err(&file("Ring", "4", "1e30", "1")),
        AstraSimError::BadValue {
            reason: "is too large",
            ..
        }
    ));
    assert_eq!(
        err(&file("Ring", "4", "1", "-1")).to_string(),
        "latency[0] = -1: must be a number of at least 0 (ns)"
    );
}

#[test]
fn malformed_files_are_explained() {
    assert_eq!(
        err("topology: [Ring]\nnpus_count: [4]\nbandwidth: [1]\n"),
        AstraSimError::MissingField { field: "latency" }
    );
    assert_eq!(
        err("topology: [Ring]\nnpus_count: 4\nbandwidth: [1]\nlatency: [1]\n").to_string(),
        "`npus_count` must be a list with one entry per dimension, e.g. `npus_count: [ ... ]`"
    );
    assert_eq!(
        err("topology: []\nnpus_count: []\nbandwidth: []\nlatency: []\n"),
        AstraSimError::NoDimensions
    );
    assert_eq!(err("- Ring\n"), AstraSimError::NotAMapping);
    assert!(matches!(
        err("topology: [Ring\nnpus_count: [4]\n"),
        AstraSimError::Yaml { .. }
    ));
}
