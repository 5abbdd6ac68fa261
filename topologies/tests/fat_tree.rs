//! Fat-trees: counts against formulas, every pair routed loop-free in 2/4/6 hops, the k/2
//! equal-cost uplinks, and ECMP spreading flows over them while each flow keeps its path.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: a failure is a panic

mod common;

use std::collections::HashMap;

use common::{assert_all_pairs, count, flow_hash, mix};
use fabemu_topologies::{
    fat_tree, routes_for, validate_routes, FatTreeSpec, Graph, LinkClass, NodeId, NodeKind, Routes,
    Tier,
};
use proptest::prelude::*;

fn spec(k: usize, r: usize) -> FatTreeSpec {
    FatTreeSpec {
        k,
        oversubscription: r,
        host_bw_bps: 100_000_000_000,
        host_latency_ps: 500_000,
        edge_agg_bw_bps: 400_000_000_000,
        edge_agg_latency_ps: 1_000_000,
        agg_core_bw_bps: 400_000_000_000,
        agg_core_latency_ps: 1_000_000,
    }
}

fn tier_links(g: &Graph, tier: Tier) -> usize {
    g.links()
        .iter()
        .filter(|l| l.class == LinkClass::Tier(tier))
        .count()
}

#[test]
fn fat_tree_counts_match_formulas() {
    for k in [2, 4, 6, 8] {
        for r in [1, 2, 3] {
            let g = fat_tree(spec(k, r)).unwrap();
            let hosts = r * k * k * k / 4;
            assert_eq!(count(&g, NodeKind::Host), hosts, "k={k} r={r}");
            assert_eq!(count(&g, NodeKind::Switch), 5 * k * k / 4, "k={k} r={r}");
            assert_eq!(tier_links(&g, Tier::Host), hosts);
            assert_eq!(tier_links(&g, Tier::EdgeAggregation), k * k * k / 4);
            assert_eq!(tier_links(&g, Tier::AggregationCore), k * k * k / 4);
            assert_eq!(g.links().len(), hosts + k * k * k / 2);
            assert!(g.hosts().all(|h| g.ports(h).len() == 1));
            for i in 0..k * k / 2 {
                let edge = g.find(&format!("edge{i}")).unwrap();
                assert_eq!(g.ports(edge).len(), (r + 1) * k / 2);
                let agg = g.find(&format!("agg{i}")).unwrap();
                assert_eq!(g.ports(agg).len(), k);
            }
            for c in 0..k * k / 4 {
                let core = g.find(&format!("core{c}")).unwrap();
                assert_eq!(g.ports(core).len(), k);
            }
        }
    }
}

/// Pod and edge switch of host rank `h`.
fn place(k: usize, r: usize, h: usize) -> (usize, usize) {
    let per_edge = r * k / 2;
    let edge = h / per_edge;
    (edge / (k / 2), edge)
}

#[test]
fn switches_offer_half_k_uplinks_toward_remote_pods() {
    for (k, r) in [(4, 1), (6, 2), (8, 1)] {
        let g = fat_tree(spec(k, r)).unwrap();
        let routes = routes_for(&g).unwrap();
        let half = k / 2;
        let per_edge = r * half;
        let uplinks: Vec<usize> = (per_edge..per_edge + half).collect();
        let agg_up: Vec<usize> = (half..k).collect();
        for e in 0..k * half {
            let edge = g.find(&format!("edge{e}")).unwrap();
            let agg = g.find(&format!("agg{e}")).unwrap();
            for dst in g.hosts() {
                let (pod, dst_edge) = place(k, r, dst);
                let hops = routes.next_hops(edge, dst);
                if dst_edge == e {
                    assert_eq!(hops, &[dst % per_edge]);
                } else {
                    // Another edge, in this pod or not: any aggregation switch of the pod.
                    assert_eq!(hops, uplinks.as_slice(), "edge{e} -> h{dst}");
                }
                let hops = routes.next_hops(agg, dst);
                if pod == e / half {
                    assert_eq!(hops, &[dst_edge % half]);
                } else {
                    assert_eq!(hops, agg_up.as_slice(), "agg{e} -> h{dst}");
                }
            }
        }
    }
}

/// The next hop of a flow hashing to `hash` among `hops`: multiply-shift, as the emulator's
/// route table (`fabemu_fabric::route::RouteTable::select`) chooses.
fn ecmp_pick(hops: &[usize], hash: u64) -> Option<usize> {
    hops.get(((u128::from(hash) * hops.len() as u128) >> 64) as usize)
        .copied()
}

/// The path of one flow: at each node the next hop is picked by the flow's hash salted with
/// the node (each switch has its own ECMP seed, as in the emulator).
fn path(
    g: &Graph,
    routes: &Routes,
    src: NodeId,
    dst: NodeId,
    sport: u16,
    seed: u64,
) -> Vec<NodeId> {
    let (sa, da) = (g.host_address(src).unwrap(), g.host_address(dst).unwrap());
    let mut at = src;
    let mut p = vec![at];
    while at != dst {
        let salt = mix(seed ^ at as u64);
        let port = ecmp_pick(routes.next_hops(at, dst), flow_hash(sa, da, sport, salt)).unwrap();
        at = g.ports(at)[port].peer;
        p.push(at);
        assert!(p.len() <= 7, "path too long: {p:?}");
    }
    p
}

/// 1000 flows between random hosts in different pods of a k = 8 fat-tree: each of an edge
/// switch's 4 uplinks carries 250 ± 20% of them (summed over edge switches, by uplink
/// position), likewise each aggregation switch's 4 core links, and each of the 16 core
/// switches carries 62.5 ± 50%. (The spread is deterministic: fixed flows, fixed seed.)
#[test]
fn ecmp_spreads_a_thousand_flows_over_the_uplinks() {
    let (k, r) = (8, 1);
    let g = fat_tree(spec(k, r)).unwrap();
    let routes = routes_for(&g).unwrap();
    validate_routes(&g, &routes).unwrap();
    let n = g.host_count();
    let seed = 0x5eed;
    let mut rng = 12345u64;
    let mut next = || {
        rng = rng.wrapping_add(1);
        mix(rng)
    };
    let mut edge_up = [0usize; 4];
    let mut agg_up = [0usize; 4];
    let mut cores: HashMap<NodeId, usize> = HashMap::new();
    let mut flows = 0;
    while flows < 1000 {
        let src = (next() % n as u64) as usize;
        let dst = (next() % n as u64) as usize;
        if place(k, r, src).0 == place(k, r, dst).0 {
            continue;
        }
        let sport = (next() & 0xffff) as u16;
        let p = path(&g, &routes, src, dst, sport, seed);
        assert_eq!(p.len(), 7); // 6 hops
        let (edge, agg, core) = (p[1], p[2], p[3]);
        let up =
            |from: NodeId, to: NodeId| g.ports(from).iter().position(|q| q.peer == to).unwrap();
        edge_up[up(edge, agg) - r * k / 2] += 1;
        agg_up[up(agg, core) - k / 2] += 1;
        *cores.entry(core).or_default() += 1;
        flows += 1;
    }
    for (what, counts) in [("edge uplink", edge_up), ("aggregation uplink", agg_up)] {
        for (i, &c) in counts.iter().enumerate() {
            assert!(
                (200..=300).contains(&c),
                "{what} {i}: {c} of 1000 ({counts:?})"
            );
        }
    }
    assert_eq!(cores.len(), 16);
    for (core, &c) in &cores {
        assert!((31..=94).contains(&c), "{}: {c}", g.node(*core).name);
    }
}

#[test]
fn one_flow_keeps_one_path_and_other_flows_take_others() {
    let g = fat_tree(spec(8, 1)).unwrap();
    let routes = routes_for(&g).unwrap();
    let (src, dst) = (0, g.host_count() - 1);
    let first = path(&g, &routes, src, dst, 4791, 7);
    for _ in 0..50 {
        assert_eq!(path(&g, &routes, src, dst, 4791, 7), first);
    }
    // Between the same two hosts, other source ports use other cores.
    let mut cores: Vec<NodeId> = (0..200u16)
        .map(|sport| path(&g, &routes, src, dst, sport, 7)[3])
        .collect();
    cores.sort_unstable();
    cores.dedup();
    assert_eq!(cores.len(), 16);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(12))]

    #[test]
    fn fat_tree_routes_every_pair_in_two_four_or_six_hops(
        k in prop::sample::select(vec![2usize, 4, 6]),
        r in 1usize..=3,
    ) {
        let g = fat_tree(spec(k, r)).unwrap();
        let routes = routes_for(&g).unwrap();
        validate_routes(&g, &routes).unwrap();
        assert_all_pairs(&g, &routes, |a, b| {
            let ((pa, ea), (pb, eb)) = (place(k, r, a), place(k, r, b));
            match (a == b, ea == eb, pa == pb) {
                (true, _, _) => 0,
                (false, true, _) => 2,
                (false, false, true) => 4,
                (false, false, false) => 6,
            }
        });
    }
}
