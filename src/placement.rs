//! Which actors belong together when a run is spread over processes (MPI ranks): the groups
//! that exchange most of their frames among themselves, so that a rank holding whole groups
//! sends few frames to the others.
//!
//! The fabrics built from a description say where their traffic stays: a fat-tree's pods (edge
//! and aggregation switches and their hosts), a leaf-spine's leaves with their hosts, a torus's
//! or a multi-dimensional fabric's slices along its last dimension (the rings or switches of
//! the lower dimensions stay whole). In every case the groups are what is left joined when the
//! fabric's top tier or last dimension is cut; the switches of that tier (core switches,
//! spines, the last dimension's switches) join no group of their own and are dealt to the
//! groups in turn. Hand-written fabrics have no such structure: the engine's own partitioning
//! (by link latency and breadth-first order) is used for them.

use fabemu_topologies::{Graph, LinkClass, Tier};

/// The group of every node of `g` (by node id, groups numbered in the order of their first
/// host), or `None` when the fabric has no tier or dimension to cut (hand-written fabrics, a
/// single switch) or fewer than two groups result.
pub fn rank_groups(g: &Graph) -> Option<Vec<u32>> {
    let cut = g.links().iter().map(|l| l.class).max()?;
    match cut {
        LinkClass::Explicit | LinkClass::Tier(Tier::Host) => return None,
        LinkClass::Dimension(_) | LinkClass::Tier(_) => {}
    }
    let n = g.nodes().len();
    let mut parent: Vec<usize> = (0..n).collect();
    fn find(p: &mut [usize], mut x: usize) -> usize {
        while p[x] != x {
            p[x] = p[p[x]];
            x = p[x];
        }
        x
    }
    for l in g.links().iter().filter(|l| l.class != cut) {
        let (a, b) = (find(&mut parent, l.a), find(&mut parent, l.b));
        if a != b {
            parent[a.max(b)] = a.min(b);
        }
    }
    // Groups with hosts, numbered by their first host (hosts are in rank order).
    let mut group_of_root = vec![u32::MAX; n];
    let mut groups = 0u32;
    for h in g.hosts() {
        let r = find(&mut parent, h);
        if group_of_root[r] == u32::MAX {
            group_of_root[r] = groups;
            groups += 1;
        }
    }
    if groups < 2 {
        return None;
    }
    // Nodes without a host among them (the cut tier's switches), dealt in turn.
    let mut next = 0u32;
    let mut out = Vec::with_capacity(n);
    for a in 0..n {
        let r = find(&mut parent, a);
        if group_of_root[r] == u32::MAX {
            group_of_root[r] = next % groups;
            next += 1;
        }
        out.push(group_of_root[r]);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use fabemu_topologies::{self as topo, FatTreeSpec, LeafSpineSpec};

    #[test]
    fn a_fat_tree_is_grouped_by_pod() {
        let g = topo::fat_tree(FatTreeSpec {
            k: 4,
            oversubscription: 1,
            host_bw_bps: 100_000_000_000,
            host_latency_ps: 1_000_000,
            edge_agg_bw_bps: 100_000_000_000,
            edge_agg_latency_ps: 1_000_000,
            agg_core_bw_bps: 100_000_000_000,
            agg_core_latency_ps: 1_000_000,
        })
        .unwrap();
        let groups = rank_groups(&g).unwrap();
        // k = 4: 4 pods of 4 hosts; only aggregation-core links join different groups
        // (besides the cores dealt to the pods).
        assert_eq!(groups.iter().max(), Some(&3));
        for l in g.links() {
            if l.class != LinkClass::Tier(Tier::AggregationCore) {
                assert_eq!(groups[l.a], groups[l.b], "{l:?}");
            }
        }
        for (rank, h) in g.hosts().enumerate() {
            assert_eq!(groups[h] as usize, rank / 4);
        }
    }

    #[test]
    fn a_leaf_spine_is_grouped_by_leaf_and_a_torus_by_its_last_dimension() {
        let g = topo::leaf_spine(LeafSpineSpec {
            leaves: 4,
            spines: 2,
            hosts_per_leaf: 3,
            host_bw_bps: 100_000_000_000,
            host_latency_ps: 1_000_000,
            fabric_bw_bps: 100_000_000_000,
            fabric_latency_ps: 1_000_000,
        })
        .unwrap();
        let groups = rank_groups(&g).unwrap();
        for (rank, h) in g.hosts().enumerate() {
            assert_eq!(groups[h] as usize, rank / 3);
        }
        let t = topo::torus(&[4, 3], 100_000_000_000, 1_000_000).unwrap();
        let groups = rank_groups(&t).unwrap();
        // Rank = c0 + 4 c1: the slices of the last dimension are rings of 4 along dimension 0.
        for (rank, h) in t.hosts().enumerate() {
            assert_eq!(groups[h] as usize, rank / 4);
        }
    }

    #[test]
    fn a_hand_written_fabric_has_no_groups() {
        let mut g = Graph::new();
        let a = g.add_host("a").unwrap();
        let b = g.add_host("b").unwrap();
        let s = g.add_switch("s").unwrap();
        g.add_link(a, s, 100_000_000_000, 1_000_000).unwrap();
        g.add_link(b, s, 100_000_000_000, 1_000_000).unwrap();
        assert!(rank_groups(&g).is_none());
    }
}
