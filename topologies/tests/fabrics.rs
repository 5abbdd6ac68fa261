//! Builders and routing through the public API: sizes against formulas, and for every pair of
//! hosts that every choice of next hop arrives in exactly the expected number of hops.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: a failure is a panic

mod common;

use common::{assert_all_pairs, count};
use fabemu_topologies::{
    leaf_spine, ring, shortest_paths, star, validate_routes, Graph, LeafSpineSpec, NodeKind,
    Routes, RoutingOptions, TopologyError,
};
use proptest::prelude::*;

const TRANSIT: RoutingOptions = RoutingOptions {
    transit_hosts: true,
};

fn spec(leaves: usize, spines: usize, hosts_per_leaf: usize) -> LeafSpineSpec {
    LeafSpineSpec {
        leaves,
        spines,
        hosts_per_leaf,
        host_bw_bps: 100_000_000_000,
        host_latency_ps: 500_000,
        fabric_bw_bps: 400_000_000_000,
        fabric_latency_ps: 1_000_000,
    }
}

#[test]
fn star_counts() {
    for hosts in [1, 2, 3, 8, 100] {
        let g = star(hosts, 1, 1).unwrap();
        assert_eq!(count(&g, NodeKind::Host), hosts);
        assert_eq!(count(&g, NodeKind::Switch), 1);
        assert_eq!(g.links().len(), hosts);
        let sw = g.find("switch0").unwrap();
        assert_eq!(g.ports(sw).len(), hosts);
        assert!(g.hosts().all(|h| g.ports(h).len() == 1));
    }
}

#[test]
fn ring_counts() {
    for (hosts, links, ports) in [(1, 0, 0), (2, 1, 1), (3, 3, 2), (4, 4, 2), (9, 9, 2)] {
        let g = ring(hosts, 1, 1).unwrap();
        assert_eq!(count(&g, NodeKind::Host), hosts);
        assert_eq!(count(&g, NodeKind::Switch), 0);
        assert_eq!(g.links().len(), links, "ring({hosts})");
        assert!(
            g.hosts().all(|h| g.ports(h).len() == ports),
            "ring({hosts})"
        );
    }
}

#[test]
fn leaf_spine_counts() {
    for (leaves, spines, per_leaf) in [(1, 1, 1), (2, 1, 3), (4, 2, 8), (8, 4, 16), (3, 7, 2)] {
        let g = leaf_spine(spec(leaves, spines, per_leaf)).unwrap();
        let hosts = leaves * per_leaf;
        assert_eq!(count(&g, NodeKind::Host), hosts);
        assert_eq!(count(&g, NodeKind::Switch), leaves + spines);
        assert_eq!(g.links().len(), hosts + leaves * spines);
        for l in 0..leaves {
            let leaf = g.find(&format!("leaf{l}")).unwrap();
            assert_eq!(g.ports(leaf).len(), per_leaf + spines);
        }
        for s in 0..spines {
            let spine = g.find(&format!("spine{s}")).unwrap();
            assert_eq!(g.ports(spine).len(), leaves);
        }
        // Leaf-major numbering: h{l * per_leaf + j} hangs off leaf{l}.
        for h in g.hosts() {
            let leaf = g.node(g.ports(h)[0].peer);
            assert_eq!(leaf.name, format!("leaf{}", h / per_leaf));
            assert_eq!(g.host_index(h), Some(h));
        }
    }
}

#[test]
fn ring_of_two_or_three_needs_no_transit_but_larger_rings_do() {
    for n in [2, 3] {
        let g = ring(n, 1, 1).unwrap();
        let r = shortest_paths(&g, &RoutingOptions::default()).unwrap();
        assert_all_pairs(&g, &r, |i, j| u32::from(i != j));
    }
    let err = shortest_paths(&ring(4, 1, 1).unwrap(), &RoutingOptions::default()).unwrap_err();
    assert_eq!(
        err,
        TopologyError::Unreachable {
            src: "h2".into(),
            dst: "h0".into(),
            transit_hosts: false
        }
    );
}

#[test]
fn even_ring_spreads_the_opposite_host_over_both_directions() {
    let g = ring(6, 1, 1).unwrap();
    let r = shortest_paths(&g, &TRANSIT).unwrap();
    assert_eq!(r.next_hops(0, 3), &[0, 1]);
    assert_eq!(r.next_hops(0, 2), &[0]); // via h1
    assert_eq!(r.next_hops(0, 4), &[1]); // via h5
}

#[test]
fn leaf_uses_every_spine_toward_another_leaf() {
    let (leaves, spines, per_leaf) = (3, 4, 2);
    let g = leaf_spine(spec(leaves, spines, per_leaf)).unwrap();
    let r = shortest_paths(&g, &RoutingOptions::default()).unwrap();
    let leaf0 = g.find("leaf0").unwrap();
    let far = g.find("h5").unwrap(); // on leaf2
    let near = g.find("h1").unwrap(); // on leaf0
    let uplinks: Vec<_> = (per_leaf..per_leaf + spines).collect();
    assert_eq!(r.next_hops(leaf0, far), uplinks.as_slice());
    assert_eq!(r.next_hops(leaf0, near), &[1]);
    let spine2 = g.find("spine2").unwrap();
    assert_eq!(r.next_hops(spine2, far), &[2]);
    assert_eq!(r.next_hops(far, near), &[0]);
}

#[test]
fn disconnected_graph_names_the_unreachable_pair() {
    // Two islands: a-s0-b and c-s1-d.
    let mut g = Graph::new();
    let [a, b, c, d] = ["a", "b", "c", "d"].map(|n| g.add_host(n).unwrap());
    let s0 = g.add_switch("s0").unwrap();
    let s1 = g.add_switch("s1").unwrap();
    for (h, s) in [(a, s0), (b, s0), (c, s1), (d, s1)] {
        g.add_link(h, s, 1, 1).unwrap();
    }
    for opts in [RoutingOptions::default(), TRANSIT] {
        let err = shortest_paths(&g, &opts).unwrap_err();
        assert_eq!(
            err,
            TopologyError::Unreachable {
                src: "c".into(),
                dst: "a".into(),
                transit_hosts: opts.transit_hosts
            }
        );
        assert!(
            err.to_string()
                .starts_with("no path from host `c` to host `a`"),
            "{err}"
        );
    }
}

/// Routes computed for leaf-spine, then broken by hand.
fn leaf_spine_routes() -> (Graph, Routes) {
    let g = leaf_spine(spec(2, 2, 1)).unwrap();
    let r = shortest_paths(&g, &RoutingOptions::default()).unwrap();
    (g, r)
}

#[test]
fn validate_routes_catches_a_loop() {
    let (g, mut r) = leaf_spine_routes();
    let h1 = g.find("h1").unwrap();
    let spine0 = g.find("spine0").unwrap();
    // spine0 port 0 leads back to leaf0, which may pick spine0 again.
    r.set(spine0, h1, &[0]).unwrap();
    let err = validate_routes(&g, &r).unwrap_err();
    assert_eq!(
        err,
        TopologyError::RoutingLoop {
            dst: "h1".into(),
            cycle: ["leaf0", "spine0", "leaf0"].map(String::from).to_vec()
        }
    );
    assert_eq!(r.hops(g.find("h0").unwrap(), h1), None);
}

#[test]
fn validate_routes_catches_a_missing_route() {
    let (g, mut r) = leaf_spine_routes();
    let h0 = g.find("h0").unwrap();
    let leaf1 = g.find("leaf1").unwrap();
    r.set(leaf1, h0, &[]).unwrap();
    assert_eq!(
        validate_routes(&g, &r).unwrap_err().to_string(),
        "traffic from host `h1` to host `h0` reaches `leaf1`, which has no route to `h0`"
    );
}

#[test]
fn hand_built_routes_for_a_ring_validate() {
    // Clockwise only: h{i} sends toward h{i+1} whatever the destination.
    let n = 5;
    let g = ring(n, 1, 1).unwrap();
    let mut r = Routes::empty(&g).unwrap();
    for src in g.hosts() {
        let clockwise = g
            .ports(src)
            .iter()
            .position(|p| p.peer == (src + 1) % n)
            .unwrap();
        for dst in g.hosts().filter(|&d| d != src) {
            r.set(src, dst, &[clockwise]).unwrap();
        }
    }
    validate_routes(&g, &r).unwrap();
    assert_all_pairs(&g, &r, |i, j| ((j + n - i) % n) as u32);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn star_routes_every_pair_in_two_hops(hosts in 1usize..40) {
        let g = star(hosts, 1, 1).unwrap();
        let r = shortest_paths(&g, &RoutingOptions::default()).unwrap();
        validate_routes(&g, &r).unwrap();
        assert_all_pairs(&g, &r, |i, j| if i == j { 0 } else { 2 });
    }

    #[test]
    fn ring_routes_every_pair_the_short_way_round(hosts in 1usize..40) {
        let g = ring(hosts, 1, 1).unwrap();
        let r = shortest_paths(&g, &TRANSIT).unwrap();
        validate_routes(&g, &r).unwrap();
        assert_all_pairs(&g, &r, |i, j| {
            let d = (j + hosts - i) % hosts;
            d.min(hosts - d) as u32
        });
    }

    #[test]
    fn leaf_spine_routes_every_pair_via_leaf_or_spines(
        leaves in 1usize..7,
        spines in 1usize..5,
        per_leaf in 1usize..6,
    ) {
        let g = leaf_spine(spec(leaves, spines, per_leaf)).unwrap();
        let r = shortest_paths(&g, &RoutingOptions::default()).unwrap();
        validate_routes(&g, &r).unwrap();
        assert_all_pairs(&g, &r, |i, j| match (i == j, i / per_leaf == j / per_leaf) {
            (true, _) => 0,
            (false, true) => 2,
            (false, false) => 4,
        });
        // ECMP: toward a host on another leaf, a leaf may use every spine.
        for dst in g.hosts() {
            for l in (0..leaves).filter(|&l| l != dst / per_leaf) {
                let leaf = g.find(&format!("leaf{l}")).unwrap();
                prop_assert_eq!(r.next_hops(leaf, dst).len(), spines);
            }
        }
        // Letting hosts forward changes nothing: no host sits between two others here.
        let t = shortest_paths(&g, &TRANSIT).unwrap();
        for src in 0..g.nodes().len() {
            for dst in g.hosts() {
                prop_assert_eq!(t.next_hops(src, dst), r.next_hops(src, dst));
            }
        }
    }
}

/// A few thousand hosts must route in reasonable time and memory.
#[test]
fn four_thousand_hosts_route() {
    let g = leaf_spine(spec(64, 16, 64)).unwrap();
    let r = shortest_paths(&g, &RoutingOptions::default()).unwrap();
    let (first, last) = (0, g.host_count() - 1);
    assert_eq!(r.hops(first, last), Some(4));
    assert_eq!(r.next_hops(g.find("leaf0").unwrap(), last).len(), 16);
}
