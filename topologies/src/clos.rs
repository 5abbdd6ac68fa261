//! Three-tier Clos fabrics: the k-ary fat-tree (Al-Fares et al., SIGCOMM 2008), with an
//! oversubscription ratio at the edge. (The two-tier leaf-spine is [`leaf_spine`](crate::leaf_spine).)
//!
//! `k` (even) is the radix of the aggregation and core switches. There are `k` pods; each pod
//! has `k/2` edge and `k/2` aggregation switches, every edge switch linked to every
//! aggregation switch of its pod. There are `(k/2)²` core switches in `k/2` groups of `k/2`:
//! aggregation switch `a` of every pod links to each core of group `a`. With oversubscription
//! `r` (an integer, `r:1`), each edge switch has `r·k/2` hosts below its `k/2` uplinks, so
//! with equal link bandwidths an edge switch can take in `r` times what it can send up; `r = 1`
//! is the classic non-blocking tree with `k³/4` hosts, and in general there are `r·k³/4`
//! hosts, `k²/2` edge, `k²/2` aggregation and `k²/4` core switches, and
//! `r·k³/4 + k³/4 + k³/4` links. (Edge switches then have `(r+1)·k/2` ports; the upper
//! tiers keep radix `k`.)
//!
//! **Layout.** Node ids: hosts `h0..` (id = rank), edges `edge0..`, aggregations `agg0..`,
//! cores `core0..`. Numbering is pod-major: edge `e` of pod `p` is `edge{p·k/2 + e}`,
//! aggregation `a` of pod `p` is `agg{p·k/2 + a}`, core `j` of group `a` is `core{a·k/2 + j}`,
//! and host `i` of `edge{x}` is `h{x·r·k/2 + i}`. Ports: a host's port 0 goes to its edge; an
//! edge's ports `0..r·k/2` go to its hosts and port `r·k/2 + a` to aggregation `a` of its pod;
//! an aggregation's ports `0..k/2` go to the edges of its pod and port `k/2 + j` to core `j` of
//! its group; a core's port `p` goes to pod `p`. Links are tagged [`Tier::Host`],
//! [`Tier::EdgeAggregation`] and [`Tier::AggregationCore`].
//!
//! Hosts on one edge are 2 hops apart, in one pod 4, in different pods 6; route with
//! [`shortest_paths`](crate::shortest_paths): toward another pod an edge switch has `k/2`
//! equal-cost uplinks, and so does an aggregation switch.

use crate::error::TopologyError;
use crate::graph::{FabricKind, Graph, LinkClass, Tier};

/// Size, oversubscription and per-tier link parameters of a [`fat_tree`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FatTreeSpec {
    /// Radix of the aggregation and core switches; even, at least 2.
    pub k: usize,
    /// Hosts per edge switch over the edge's `k/2` uplinks (`r:1`); at least 1.
    pub oversubscription: usize,
    /// Bandwidth of each host-edge link, in bits per second.
    pub host_bw_bps: u64,
    /// Latency of each host-edge link, in picoseconds.
    pub host_latency_ps: u64,
    /// Bandwidth of each edge-aggregation link, in bits per second.
    pub edge_agg_bw_bps: u64,
    /// Latency of each edge-aggregation link, in picoseconds.
    pub edge_agg_latency_ps: u64,
    /// Bandwidth of each aggregation-core link, in bits per second.
    pub agg_core_bw_bps: u64,
    /// Latency of each aggregation-core link, in picoseconds.
    pub agg_core_latency_ps: u64,
}

#[cfg(test)]
impl FatTreeSpec {
    /// A fat-tree whose every bandwidth and latency is 1, for tests of its structure alone.
    pub(crate) fn unit(k: usize, oversubscription: usize) -> FatTreeSpec {
        FatTreeSpec {
            k,
            oversubscription,
            host_bw_bps: 1,
            host_latency_ps: 1,
            edge_agg_bw_bps: 1,
            edge_agg_latency_ps: 1,
            agg_core_bw_bps: 1,
            agg_core_latency_ps: 1,
        }
    }
}

impl FatTreeSpec {
    /// Number of hosts, `r·k³/4`, if it fits a `usize`.
    pub fn hosts(&self) -> Option<usize> {
        let half = self.k / 2;
        self.k
            .checked_mul(half)?
            .checked_mul(half)?
            .checked_mul(self.oversubscription)
    }
}

const NAME: &str = "fat-tree";

/// A three-tier k-ary fat-tree (see the [module documentation](self) for the structure, the
/// node and port layout and the names).
///
/// # Errors
/// [`TopologyError::InvalidSize`] if `k < 2` or `oversubscription < 1`,
/// [`TopologyError::OddFatTreeK`] for an odd `k`, [`TopologyError::MustBePositive`] for a zero
/// bandwidth, [`TopologyError::TooLarge`] if the host count overflows.
pub fn fat_tree(spec: FatTreeSpec) -> Result<Graph, TopologyError> {
    for (param, value) in [("k", spec.k), ("oversubscription", spec.oversubscription)] {
        let min = if param == "k" { 2 } else { 1 };
        if value < min {
            return Err(TopologyError::InvalidSize {
                topology: NAME,
                param,
                value,
                min,
            });
        }
    }
    if spec.k % 2 != 0 {
        return Err(TopologyError::OddFatTreeK { k: spec.k });
    }
    for (param, bw) in [
        ("host_bw_bps", spec.host_bw_bps),
        ("edge_agg_bw_bps", spec.edge_agg_bw_bps),
        ("agg_core_bw_bps", spec.agg_core_bw_bps),
    ] {
        if bw == 0 {
            return Err(TopologyError::MustBePositive {
                topology: NAME,
                param: param.into(),
            });
        }
    }
    let hosts = spec.hosts().ok_or(TopologyError::TooLarge {
        what: "fat-tree host count (oversubscription × k³/4)",
    })?;
    let half = spec.k / 2;
    let per_edge = spec.oversubscription * half;
    let edges = spec.k * half;
    let cores = half * half;

    let mut g = Graph::new();
    for i in 0..hosts {
        g.add_host(format!("h{i}"))?;
    }
    let edge0 = hosts;
    for e in 0..edges {
        g.add_switch(format!("edge{e}"))?;
    }
    let agg0 = edge0 + edges;
    for a in 0..edges {
        g.add_switch(format!("agg{a}"))?;
    }
    let core0 = agg0 + edges;
    for c in 0..cores {
        g.add_switch(format!("core{c}"))?;
    }

    let host = LinkClass::Tier(Tier::Host);
    for h in 0..hosts {
        g.add_link_with_class(
            h,
            edge0 + h / per_edge,
            spec.host_bw_bps,
            spec.host_latency_ps,
            host,
        )?;
    }
    let edge_agg = LinkClass::Tier(Tier::EdgeAggregation);
    for pod in 0..spec.k {
        for e in 0..half {
            for a in 0..half {
                g.add_link_with_class(
                    edge0 + pod * half + e,
                    agg0 + pod * half + a,
                    spec.edge_agg_bw_bps,
                    spec.edge_agg_latency_ps,
                    edge_agg,
                )?;
            }
        }
    }
    let agg_core = LinkClass::Tier(Tier::AggregationCore);
    for pod in 0..spec.k {
        for a in 0..half {
            for j in 0..half {
                g.add_link_with_class(
                    agg0 + pod * half + a,
                    core0 + a * half + j,
                    spec.agg_core_bw_bps,
                    spec.agg_core_latency_ps,
                    agg_core,
                )?;
            }
        }
    }
    g.set_fabric(FabricKind::FatTree(spec));
    Ok(g)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(k: usize, r: usize) -> FatTreeSpec {
        FatTreeSpec {
            k,
            oversubscription: r,
            host_bw_bps: 100,
            host_latency_ps: 1,
            edge_agg_bw_bps: 200,
            edge_agg_latency_ps: 2,
            agg_core_bw_bps: 300,
            agg_core_latency_ps: 3,
        }
    }

    #[test]
    fn bad_parameters_are_named() {
        assert_eq!(
            fat_tree(spec(5, 1)).unwrap_err().to_string(),
            "fat-tree: `k` must be even, got 5"
        );
        assert_eq!(
            fat_tree(spec(0, 1)).unwrap_err().to_string(),
            "fat-tree: `k` must be at least 2, got 0"
        );
        assert_eq!(
            fat_tree(spec(4, 0)).unwrap_err().to_string(),
            "fat-tree: `oversubscription` must be at least 1, got 0"
        );
        let mut s = spec(4, 1);
        s.agg_core_bw_bps = 0;
        assert_eq!(
            fat_tree(s).unwrap_err().to_string(),
            "fat-tree: `agg_core_bw_bps` must be greater than 0"
        );
        assert!(matches!(
            fat_tree(spec(usize::MAX - 1, 1)),
            Err(TopologyError::TooLarge { .. })
        ));
    }

    #[test]
    fn layout_matches_the_documentation() {
        // k = 4, r = 2: 32 hosts, 4 per edge; 8 edges, 8 aggs, 4 cores.
        let g = fat_tree(spec(4, 2)).unwrap();
        assert_eq!(g.find("edge0"), Some(32));
        assert_eq!(g.find("agg0"), Some(40));
        assert_eq!(g.find("core0"), Some(48));
        // h13 is host 1 of edge3 (pod 1, edge 1).
        let edge3 = g.find("edge3").unwrap();
        assert_eq!(g.ports(13)[0].peer, edge3);
        assert_eq!(g.ports(edge3)[1].peer, 13);
        // edge3's port 4 + 1 goes to agg 1 of pod 1 = agg3.
        assert_eq!(g.ports(edge3)[5].peer, g.find("agg3").unwrap());
        // agg3 (pod 1, a = 1): ports 0, 1 to edge2, edge3; port 2 + j to core 1·2 + j.
        let agg3 = g.find("agg3").unwrap();
        assert_eq!(g.ports(agg3)[1].peer, edge3);
        assert_eq!(g.ports(agg3)[3].peer, g.find("core3").unwrap());
        // core3's port 1 goes to pod 1.
        let core3 = g.find("core3").unwrap();
        assert_eq!(g.ports(core3)[1].peer, agg3);
        assert_eq!(
            g.link(g.ports(core3)[0].link).class,
            LinkClass::Tier(Tier::AggregationCore)
        );
        assert_eq!(g.fabric(), &FabricKind::FatTree(spec(4, 2)));
    }
}
