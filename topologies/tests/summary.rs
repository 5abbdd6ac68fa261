//! What `fabemu topo` prints: counts, links per dimension or tier, per-host bandwidth,
//! diameter and bisection bandwidth for each fabric kind, and the Graphviz drawing.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: a failure is a panic

use fabemu_topologies::astra_sim::{self, BPS_PER_GB_PER_S};
use fabemu_topologies::summary::{summarize, to_dot, Bisection, ClassSummary, TopologySummary};
use fabemu_topologies::{
    fat_tree, leaf_spine, ring, routes_for, star, torus, FatTreeSpec, Graph, LeafSpineSpec,
    LinkClass, Routes, Tier, TopologyError,
};

const G: u64 = 1_000_000_000;

fn summary(g: &Graph) -> TopologySummary {
    summarize(g, &routes_for(g).unwrap()).unwrap()
}

fn class(s: &TopologySummary, c: LinkClass) -> &ClassSummary {
    s.links_by_class.iter().find(|x| x.class == c).unwrap()
}

#[test]
fn star_and_ring() {
    let s = summary(&star(8, 100 * G, 1000).unwrap());
    assert_eq!((s.hosts, s.switches, s.links), (8, 1, 8));
    assert_eq!(s.diameter_hops, 2);
    assert_eq!(s.per_host_bandwidth_bps, 100 * G);
    assert_eq!(s.bisection, Bisection::Exact(400 * G));
    let s = summary(&ring(8, 100 * G, 1000).unwrap());
    assert_eq!((s.hosts, s.switches, s.links), (8, 0, 8));
    assert_eq!(s.diameter_hops, 4);
    assert_eq!(s.per_host_bandwidth_bps, 200 * G);
    assert_eq!(s.bisection, Bisection::Exact(200 * G));
    let dim0 = class(&s, LinkClass::Dimension(0));
    assert_eq!(dim0.links, 8);
    assert_eq!(dim0.per_host_bandwidth_bps, Some(200 * G));
}

#[test]
fn leaf_spine_and_fat_tree() {
    let g = leaf_spine(LeafSpineSpec {
        leaves: 4,
        spines: 2,
        hosts_per_leaf: 4,
        host_bw_bps: 100 * G,
        host_latency_ps: 1,
        fabric_bw_bps: 400 * G,
        fabric_latency_ps: 1,
    })
    .unwrap();
    let s = summary(&g);
    assert_eq!((s.hosts, s.switches, s.links), (16, 6, 24));
    assert_eq!(class(&s, LinkClass::Tier(Tier::Host)).links, 16);
    assert_eq!(class(&s, LinkClass::Tier(Tier::LeafSpine)).links, 8);
    assert_eq!(s.diameter_hops, 4);
    // Cheapest: half the hosts cut off their leaves (8 × 100G) rather than 2 leaves from the
    // spines (2 spines × 2 × 400G).
    assert_eq!(s.bisection, Bisection::Exact(800 * G));

    let g = fat_tree(FatTreeSpec {
        k: 4,
        oversubscription: 1,
        host_bw_bps: 100 * G,
        host_latency_ps: 1,
        edge_agg_bw_bps: 100 * G,
        edge_agg_latency_ps: 1,
        agg_core_bw_bps: 40 * G,
        agg_core_latency_ps: 1,
    })
    .unwrap();
    let s = summary(&g);
    assert_eq!((s.hosts, s.switches, s.links), (16, 20, 48));
    assert_eq!(s.fabric, "fat-tree");
    assert_eq!(s.diameter_hops, 6);
    let tiers: Vec<_> = s
        .links_by_class
        .iter()
        .map(|c| (c.class, c.links))
        .collect();
    assert_eq!(
        tiers,
        [
            (LinkClass::Tier(Tier::Host), 16),
            (LinkClass::Tier(Tier::EdgeAggregation), 16),
            (LinkClass::Tier(Tier::AggregationCore), 16)
        ]
    );
    let host = class(&s, LinkClass::Tier(Tier::Host));
    assert_eq!(host.per_host_bandwidth_bps, Some(100 * G));
    assert_eq!(
        class(&s, LinkClass::Tier(Tier::AggregationCore)).per_host_bandwidth_bps,
        None
    );
    // Core links of half the pods: (k/2)³ = 8 links of 40G.
    assert_eq!(s.bisection, Bisection::Exact(320 * G));
}

#[test]
fn torus_of_three_dimensions() {
    let s = summary(&torus(&[4, 4, 2], 50 * G, 1).unwrap());
    assert_eq!(
        (s.hosts, s.switches, s.links),
        (32, 0, 16 * 2 + 16 * 2 + 16)
    );
    assert_eq!(s.dimensions, Some(vec![4, 4, 2]));
    assert_eq!(s.diameter_hops, 5);
    assert_eq!(s.per_host_bandwidth_bps, 250 * G);
    assert_eq!(
        class(&s, LinkClass::Dimension(2)).per_host_bandwidth_bps,
        Some(50 * G)
    );
    // Halve a dimension of 4: 8 rings cut twice each.
    assert_eq!(s.bisection, Bisection::Exact(16 * 50 * G));
}

#[test]
fn astra_sim_three_dimensions() {
    let net = astra_sim::parse(
        "topology: [Ring, FullyConnected, Switch]\nnpus_count: [2, 8, 4]\n\
         bandwidth: [200, 100, 50]\nlatency: [50, 500, 2000]\n",
    )
    .unwrap();
    let s = summary(&net.build().unwrap());
    let gb = BPS_PER_GB_PER_S;
    assert_eq!((s.hosts, s.switches, s.links), (64, 16, 320));
    assert_eq!(s.per_host_bandwidth_bps, (200 + 7 * 100 + 50) * gb);
    assert_eq!(s.per_host_bandwidth_max_bps, s.per_host_bandwidth_bps);
    assert_eq!(s.diameter_hops, 4);
    let per_dim: Vec<_> = s
        .links_by_class
        .iter()
        .map(|c| (c.links, c.bandwidth_bps, c.latency_ps))
        .collect();
    assert_eq!(
        per_dim,
        [
            (32, Some(200 * gb), Some(50_000)),
            (224, Some(100 * gb), Some(500_000)),
            (64, Some(50 * gb), Some(2_000_000))
        ]
    );
    // The switch dimension binds; its plane cut is the upper bound.
    match s.bisection {
        Bisection::Bounds { at_least, at_most } => {
            assert_eq!(at_most, 32 * 50 * gb);
            assert!(at_least > 0 && at_least < at_most);
        }
        other => panic!("{other:?}"),
    }
    let text = s.to_string();
    assert!(
        text.contains("fabric: multi-dimensional (2 x 8 x 4)"),
        "{text}"
    );
    assert!(
        text.contains("hosts: 64, switches: 16, links: 320"),
        "{text}"
    );
    assert!(
        text.contains("dim2: 64 links of 429.4967296 Gb/s, 2000 ns; 429.4967296 Gb/s per host"),
        "{text}"
    );
    assert!(text.contains("diameter: 4 hops"), "{text}");
    assert!(text.contains("bisection bandwidth: between"), "{text}");
}

#[test]
fn explicit_fabrics_and_bad_routes() {
    let mut g = Graph::new();
    let a = g.add_host("a").unwrap();
    let b = g.add_host("b").unwrap();
    let c = g.add_host("c").unwrap();
    let s = g.add_switch("s").unwrap();
    g.add_link(a, s, 10 * G, 1).unwrap();
    g.add_link(b, s, 10 * G, 1).unwrap();
    g.add_link(c, s, 40 * G, 1).unwrap();
    let sum = summary(&g);
    assert_eq!(sum.fabric, "explicit");
    assert_eq!(sum.per_host_bandwidth_bps, 10 * G);
    assert_eq!(sum.per_host_bandwidth_max_bps, 40 * G);
    let e = class(&sum, LinkClass::Explicit);
    assert_eq!((e.links, e.bandwidth_bps), (3, None));
    assert_eq!(sum.bisection, Bisection::Exact(10 * G));
    assert!(sum
        .to_string()
        .contains("per-host bandwidth: 10 Gb/s to 40 Gb/s"));

    let mut broken = routes_for(&g).unwrap();
    broken.set(s, b, &[]).unwrap();
    assert_eq!(
        summarize(&g, &broken),
        Err(TopologyError::MissingRoute {
            at: "s".into(),
            dst: "b".into(),
            from: "a".into()
        })
    );
    let other = Routes::empty(&star(3, 1, 1).unwrap()).unwrap();
    assert_eq!(
        summarize(&g, &other),
        Err(TopologyError::RoutesGraphMismatch)
    );
}

#[test]
fn dot_draws_every_node_and_link() {
    let g = fat_tree(FatTreeSpec {
        k: 4,
        oversubscription: 2,
        host_bw_bps: 100 * G,
        host_latency_ps: 1,
        edge_agg_bw_bps: 400 * G,
        edge_agg_latency_ps: 1,
        agg_core_bw_bps: 400 * G,
        agg_core_latency_ps: 1,
    })
    .unwrap();
    let dot = to_dot(&g);
    assert!(dot.starts_with("graph fabric {\n") && dot.ends_with("}\n"));
    assert_eq!(dot.matches(" -- ").count(), g.links().len());
    assert_eq!(dot.matches("[shape=box").count(), g.host_count());
    assert_eq!(dot.matches("[shape=ellipse]").count(), 20);
    assert!(dot.contains("\"edge0\" -- \"agg0\" [label=\"edge-aggregation 400 Gb/s\"];"));
    assert!(dot.contains("\"h0\" -- \"edge0\" [label=\"host 100 Gb/s\"];"));
}
