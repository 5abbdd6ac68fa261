//! Multi-dimensional fabrics and tori: node, link and port counts against formulas, and for
//! every pair of hosts that the dimension-order route exists, is loop-free and takes the sum of
//! the per-dimension hops.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: a failure is a panic

mod common;

use common::{assert_all_pairs, count};
use fabemu_topologies::{
    dimension_order_routes, host_ipv4, leaf_spine, multi_dim, rank_ipv4, ring, routes_for,
    shortest_paths, star, torus, validate_routes, DimKind, DimSpec, FabricKind, Graph,
    LeafSpineSpec, LinkClass, NodeKind, RoutingOptions, RoutingPolicy, TopologyError,
};
use proptest::prelude::*;

fn dims(list: &[(DimKind, usize)]) -> Vec<DimSpec> {
    list.iter()
        .enumerate()
        .map(|(d, &(kind, size))| DimSpec {
            kind,
            size,
            bandwidth_bps: 100_000_000_000 * (d as u64 + 1),
            latency_ps: 1_000 * (d as u64 + 1),
        })
        .collect()
}

/// Links in one group of a dimension, and ports that gives each host.
fn per_group(kind: DimKind, s: usize) -> (usize, usize) {
    match kind {
        DimKind::Ring if s == 2 => (1, 1),
        DimKind::Ring => (s, 2),
        DimKind::FullyConnected => (s * (s - 1) / 2, s - 1),
        DimKind::Switch => (s, 1),
    }
}

fn assert_counts(g: &Graph, list: &[(DimKind, usize)]) {
    let n: usize = list.iter().map(|&(_, s)| s).product();
    assert_eq!(count(g, NodeKind::Host), n, "{list:?}");
    let switches: usize = list
        .iter()
        .filter(|(k, _)| *k == DimKind::Switch)
        .map(|&(_, s)| n / s)
        .sum();
    assert_eq!(count(g, NodeKind::Switch), switches, "{list:?}");
    let mut total = 0;
    let mut ports = 0;
    for (d, &(kind, s)) in list.iter().enumerate() {
        let (links, host_ports) = per_group(kind, s);
        let in_dim = g
            .links()
            .iter()
            .filter(|l| l.class == LinkClass::Dimension(d))
            .count();
        assert_eq!(in_dim, n / s * links, "{list:?} dim {d}");
        total += n / s * links;
        ports += host_ports;
    }
    assert_eq!(g.links().len(), total, "{list:?}");
    assert!(g.hosts().all(|h| g.ports(h).len() == ports), "{list:?}");
    for v in (0..g.nodes().len()).filter(|&v| g.node(v).kind == NodeKind::Switch) {
        let d = match g.link(g.ports(v)[0].link).class {
            LinkClass::Dimension(d) => d,
            other => panic!("switch link of class {other}"),
        };
        assert_eq!(g.ports(v).len(), list[d].1);
    }
    assert_eq!(
        g.dimensions(),
        Some(list.iter().map(|&(_, s)| s).collect::<Vec<_>>().as_slice())
    );
}

/// Dimension-order hop count between ranks `a` and `b`.
fn expected_hops(list: &[(DimKind, usize)], mut a: usize, mut b: usize) -> u32 {
    let mut hops = 0;
    for &(kind, s) in list {
        hops += kind.hops(s, a % s, b % s);
        a /= s;
        b /= s;
    }
    hops
}

#[test]
fn multi_dim_counts_match_formulas() {
    use DimKind::*;
    let cases: &[&[(DimKind, usize)]] = &[
        &[(Ring, 2)],
        &[(Ring, 8)],
        &[(FullyConnected, 2)],
        &[(FullyConnected, 5)],
        &[(Switch, 6)],
        &[(Ring, 2), (FullyConnected, 8), (Switch, 4)],
        &[(Switch, 3), (Switch, 4)],
        &[(Ring, 4), (Ring, 3), (FullyConnected, 2), (Switch, 2)],
        &[(FullyConnected, 16), (Switch, 16)],
    ];
    for list in cases {
        let g = multi_dim(&dims(list)).unwrap();
        assert_counts(&g, list);
        assert!(matches!(g.fabric(), FabricKind::MultiDim(d) if d.len() == list.len()));
    }
}

#[test]
fn torus_counts_match_formulas() {
    for sizes in [
        vec![2],
        vec![5],
        vec![4, 4],
        vec![2, 3],
        vec![3, 3, 3],
        vec![2, 2, 2, 2],
        vec![8, 4, 2],
    ] {
        let g = torus(&sizes, 400_000_000_000, 100_000).unwrap();
        let list: Vec<_> = sizes.iter().map(|&s| (DimKind::Ring, s)).collect();
        assert_counts(&g, &list);
        assert!(g
            .links()
            .iter()
            .all(|l| l.bandwidth_bps == 400_000_000_000 && l.latency_ps == 100_000));
    }
}

#[test]
fn dimension_order_is_minimal_on_tori() {
    for sizes in [vec![4, 4], vec![5, 3], vec![6, 2, 3]] {
        let g = torus(&sizes, 1, 1).unwrap();
        let dor = dimension_order_routes(&g).unwrap();
        let sp = shortest_paths(
            &g,
            &RoutingOptions {
                transit_hosts: true,
            },
        )
        .unwrap();
        for a in g.hosts() {
            for b in g.hosts() {
                assert_eq!(dor.hops(a, b), sp.hops(a, b), "{sizes:?}: h{a} -> h{b}");
            }
        }
    }
}

#[test]
fn dimensions_are_corrected_in_order() {
    // 4 x 4 torus: h0 = [0,0] to h5 = [1,1] goes through h1 = [1,0] (dimension 0 first).
    let g = torus(&[4, 4], 1, 1).unwrap();
    let r = routes_for(&g).unwrap();
    let first = g.ports(0)[r.next_hops(0, 5)[0]].peer;
    assert_eq!(first, 1);
    // A switch dimension: h0 -> h3 in [Ring 2, Switch 2] goes h0 -> h1 -> d1.sw1 -> h3.
    let g = multi_dim(&dims(&[(DimKind::Ring, 2), (DimKind::Switch, 2)])).unwrap();
    let r = routes_for(&g).unwrap();
    let mut at = 0;
    let mut path = vec![g.node(at).name.clone()];
    while at != 3 {
        at = g.ports(at)[r.next_hops(at, 3)[0]].peer;
        path.push(g.node(at).name.clone());
    }
    assert_eq!(path, ["h0", "h1", "d1.sw1", "h3"]);
}

#[test]
fn star_and_ring_keep_their_routes_and_addresses() {
    // The one-dimensional builders are routed as before (ECMP across an even ring's tie)...
    let g = ring(6, 1, 1).unwrap();
    assert_eq!(
        RoutingPolicy::for_graph(&g),
        RoutingPolicy::ShortestPath(RoutingOptions {
            transit_hosts: true
        })
    );
    assert_eq!(routes_for(&g).unwrap().next_hops(0, 3), &[0, 1]);
    // ...but are one-dimensional fabrics, so dimension-order routing applies too.
    let dor = dimension_order_routes(&g).unwrap();
    assert_eq!(dor.next_hops(0, 3), &[0]);
    validate_routes(&g, &dor).unwrap();
    let s = star(5, 1, 1).unwrap();
    assert_eq!(s.dimensions(), Some(&[5][..]));
    validate_routes(&s, &dimension_order_routes(&s).unwrap()).unwrap();
    // Addresses stay 10.0.0.0 + rank + 1 for star, ring, leaf-spine and explicit fabrics.
    let ls = leaf_spine(LeafSpineSpec {
        leaves: 3,
        spines: 2,
        hosts_per_leaf: 100,
        host_bw_bps: 1,
        host_latency_ps: 1,
        fabric_bw_bps: 1,
        fabric_latency_ps: 1,
    })
    .unwrap();
    let mut explicit = Graph::new();
    for i in 0..300 {
        explicit.add_host(format!("x{i}")).unwrap();
    }
    for g in [
        ring(300, 1, 1).unwrap(),
        star(300, 1, 1).unwrap(),
        ls,
        explicit,
    ] {
        for rank in 0..300 {
            let want = (0x0A00_0000u32 + rank as u32 + 1).to_be_bytes();
            assert_eq!(g.host_address(rank), Ok(want), "{}", g.fabric().name());
        }
        assert_eq!(
            g.host_address(300),
            Err(TopologyError::UnknownRank {
                rank: 300,
                hosts: 300
            })
        );
    }
}

#[test]
fn addresses_spell_coordinates_and_are_unique() {
    use std::collections::HashSet;
    let g = multi_dim(&dims(&[
        (DimKind::Ring, 2),
        (DimKind::FullyConnected, 8),
        (DimKind::Switch, 4),
    ]))
    .unwrap();
    // Rank 37 = 1 + 2*2 + 16*2: coordinates [1, 2, 2] -> 10.2.2.2.
    assert_eq!(g.coordinates(37), Some(vec![1, 2, 2]));
    assert_eq!(g.host_address(37), Ok([10, 2, 2, 2]));
    assert_eq!(g.host_address(0), Ok([10, 0, 0, 1]));
    for (sizes, spelled) in [
        (vec![4, 4, 4], true),
        (vec![255, 2], true),
        (vec![256, 2], false),
        (vec![2, 2, 2, 2], false),
    ] {
        let g = torus(&sizes, 1, 1).unwrap();
        let mut seen = HashSet::new();
        for rank in 0..g.host_count() {
            let a = g.host_address(rank).unwrap();
            assert!(seen.insert(a), "{sizes:?}: duplicate {a:?}");
            let c = g.coordinates(rank).unwrap();
            assert_eq!(host_ipv4(&c, &sizes), Ok(a));
            if spelled {
                let at = |d: usize| c.get(d).copied().unwrap_or(0) as u8;
                assert_eq!(a, [10, at(2), at(1), at(0) + 1]);
            } else {
                assert_eq!(a, rank_ipv4(rank).unwrap());
            }
        }
    }
}

#[test]
fn changing_a_built_fabric_makes_it_explicit() {
    let mut g = torus(&[3, 3], 1, 1).unwrap();
    let before = g.host_address(4).unwrap();
    assert_eq!(before, [10, 0, 1, 2]);
    g.add_link(0, 4, 1, 1).unwrap();
    assert_eq!(g.fabric(), &FabricKind::Explicit);
    assert_eq!(g.dimensions(), None);
    assert_eq!(g.host_address(4), Ok([10, 0, 0, 5]));
    assert_eq!(
        RoutingPolicy::for_graph(&g),
        RoutingPolicy::ShortestPath(RoutingOptions {
            transit_hosts: true
        })
    );
    // Failed changes leave it as built.
    let mut g = torus(&[3, 3], 1, 1).unwrap();
    assert!(g.add_link(0, 0, 1, 1).is_err());
    assert!(g.add_host("h0").is_err());
    assert!(matches!(g.fabric(), FabricKind::Torus(_)));
}

fn dim_kind() -> impl Strategy<Value = DimKind> {
    prop_oneof![
        Just(DimKind::Ring),
        Just(DimKind::FullyConnected),
        Just(DimKind::Switch)
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(40))]

    #[test]
    fn multi_dim_routes_every_pair_in_dimension_order(
        list in prop::collection::vec((dim_kind(), 2usize..6), 1..=3)
            .prop_filter("at most 64 hosts", |l| l.iter().map(|&(_, s)| s).product::<usize>() <= 64),
    ) {
        let g = multi_dim(&dims(&list)).unwrap();
        assert_counts(&g, &list);
        prop_assert_eq!(RoutingPolicy::for_graph(&g), RoutingPolicy::DimensionOrder);
        let r = routes_for(&g).unwrap();
        validate_routes(&g, &r).unwrap();
        assert_all_pairs(&g, &r, |a, b| expected_hops(&list, a, b));
    }

    #[test]
    fn torus_routes_every_pair_by_the_sum_of_ring_distances(
        sizes in prop::collection::vec(2usize..7, 1..=3)
            .prop_filter("at most 100 hosts", |s| s.iter().product::<usize>() <= 100),
    ) {
        let g = torus(&sizes, 1, 1).unwrap();
        let r = routes_for(&g).unwrap();
        validate_routes(&g, &r).unwrap();
        assert_all_pairs(&g, &r, |mut a, mut b| {
            let mut sum = 0;
            for &s in &sizes {
                let f = (b % s + s - a % s) % s;
                sum += f.min(s - f) as u32;
                a /= s;
                b /= s;
            }
            sum
        });
    }
}
