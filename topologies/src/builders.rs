//! Ready-made fabrics: star, ring and leaf-spine (fat-tree, torus and multi-dimensional
//! fabrics have modules of their own).
//!
//! Builders add hosts first, so a host's [`NodeId`](crate::NodeId) equals its rank, and add
//! links in a fixed order, so port numbers are documented facts a test or a dimension-order
//! router can rely on. Names follow one scheme everywhere: hosts `h0..`, then switches named
//! for their role with their own counter (`leaf0..`, `spine0..`). Each builder records its
//! [`FabricKind`] and tags each link with its [`LinkClass`]: a star and a ring are
//! one-dimensional fabrics (links of dimension 0), leaf-spine links are of tier
//! [`Tier::Host`] or [`Tier::LeafSpine`].

use crate::error::TopologyError;
use crate::graph::{FabricKind, Graph, LinkClass, Tier};

fn at_least(
    topology: &'static str,
    param: &'static str,
    value: usize,
    min: usize,
) -> Result<(), TopologyError> {
    if value < min {
        return Err(TopologyError::InvalidSize {
            topology,
            param,
            value,
            min,
        });
    }
    Ok(())
}

fn add_hosts(g: &mut Graph, count: usize) -> Result<(), TopologyError> {
    for i in 0..count {
        g.add_host(format!("h{i}"))?;
    }
    Ok(())
}

/// `hosts` hosts `h0..` on one switch `switch0`; every pair of hosts is 2 hops apart.
///
/// Ports: each host has port 0 to the switch; the switch's port `i` leads to `h{i}`.
///
/// # Errors
/// [`TopologyError::InvalidSize`] if `hosts` is 0; [`TopologyError::ZeroBandwidth`].
pub fn star(hosts: usize, bandwidth_bps: u64, latency_ps: u64) -> Result<Graph, TopologyError> {
    at_least("star", "hosts", hosts, 1)?;
    let mut g = Graph::new();
    add_hosts(&mut g, hosts)?;
    let switch = g.add_switch("switch0")?;
    for h in 0..hosts {
        g.add_link_with_class(
            h,
            switch,
            bandwidth_bps,
            latency_ps,
            LinkClass::Dimension(0),
        )?;
    }
    g.set_fabric(FabricKind::Star { hosts });
    Ok(g)
}

/// `hosts` hosts `h0..` in a bidirectional ring of direct host-to-host links, `h{i}` joined
/// to `h{i+1 mod hosts}`; route it with
/// [`RoutingOptions::transit_hosts`](crate::RoutingOptions::transit_hosts) set.
///
/// Links: link `i` joins `h{i}` and `h{i+1 mod hosts}`. Ports: `h0` has port 0 to `h1` and
/// port 1 to the last host; every other `h{i}` has port 0 to `h{i-1}` and port 1 to `h{i+1}`.
/// Two hosts share a single link (one port each); one host has no links.
///
/// # Errors
/// [`TopologyError::InvalidSize`] if `hosts` is 0; [`TopologyError::ZeroBandwidth`].
pub fn ring(hosts: usize, bandwidth_bps: u64, latency_ps: u64) -> Result<Graph, TopologyError> {
    at_least("ring", "hosts", hosts, 1)?;
    let mut g = Graph::new();
    add_hosts(&mut g, hosts)?;
    // Two hosts would otherwise get two parallel links; one host would get a self-loop.
    let links = match hosts {
        1 => 0,
        2 => 1,
        n => n,
    };
    for i in 0..links {
        g.add_link_with_class(
            i,
            (i + 1) % hosts,
            bandwidth_bps,
            latency_ps,
            LinkClass::Dimension(0),
        )?;
    }
    g.set_fabric(FabricKind::Ring { hosts });
    Ok(g)
}

/// Sizes and link parameters of a two-tier leaf-spine (folded Clos) fabric.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeafSpineSpec {
    /// Number of leaf (top-of-rack) switches, at least 1.
    pub leaves: usize,
    /// Number of spine switches, at least 1; every leaf links to every spine.
    pub spines: usize,
    /// Hosts below each leaf, at least 1.
    pub hosts_per_leaf: usize,
    /// Bandwidth of each host-leaf link, in bits per second.
    pub host_bw_bps: u64,
    /// Latency of each host-leaf link, in picoseconds.
    pub host_latency_ps: u64,
    /// Bandwidth of each leaf-spine link, in bits per second.
    pub fabric_bw_bps: u64,
    /// Latency of each leaf-spine link, in picoseconds.
    pub fabric_latency_ps: u64,
}

/// A leaf-spine fabric: hosts `h0..` numbered leaf-major (`h{l * hosts_per_leaf + j}` is host
/// `j` of `leaf{l}`), leaves `leaf0..`, spines `spine0..`, every leaf linked to every spine.
/// Hosts on one leaf are 2 hops apart, on different leaves 4, with `spines` equal-cost paths.
///
/// Node ids: hosts, then leaves, then spines. Ports: a host's port 0 goes to its leaf; a
/// leaf's ports `0..hosts_per_leaf` go to its hosts in order and port `hosts_per_leaf + s` to
/// `spine{s}`; a spine's port `l` goes to `leaf{l}`.
///
/// # Errors
/// [`TopologyError::InvalidSize`] for a size of 0, [`TopologyError::TooLarge`] if the host
/// count overflows, [`TopologyError::ZeroBandwidth`].
pub fn leaf_spine(spec: LeafSpineSpec) -> Result<Graph, TopologyError> {
    const NAME: &str = "leaf-spine";
    at_least(NAME, "leaves", spec.leaves, 1)?;
    at_least(NAME, "spines", spec.spines, 1)?;
    at_least(NAME, "hosts_per_leaf", spec.hosts_per_leaf, 1)?;
    let hosts = spec
        .leaves
        .checked_mul(spec.hosts_per_leaf)
        .ok_or(TopologyError::TooLarge {
            what: "leaf-spine host count (leaves × hosts_per_leaf)",
        })?;
    let mut g = Graph::new();
    add_hosts(&mut g, hosts)?;
    let leaf0 = hosts;
    for l in 0..spec.leaves {
        g.add_switch(format!("leaf{l}"))?;
    }
    let spine0 = leaf0 + spec.leaves;
    for s in 0..spec.spines {
        g.add_switch(format!("spine{s}"))?;
    }
    for h in 0..hosts {
        let leaf = leaf0 + h / spec.hosts_per_leaf;
        g.add_link_with_class(
            h,
            leaf,
            spec.host_bw_bps,
            spec.host_latency_ps,
            LinkClass::Tier(Tier::Host),
        )?;
    }
    for l in 0..spec.leaves {
        for s in 0..spec.spines {
            g.add_link_with_class(
                leaf0 + l,
                spine0 + s,
                spec.fabric_bw_bps,
                spec.fabric_latency_ps,
                LinkClass::Tier(Tier::LeafSpine),
            )?;
        }
    }
    g.set_fabric(FabricKind::LeafSpine(spec));
    Ok(g)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::NodeKind;

    fn spec(leaves: usize, spines: usize, hosts_per_leaf: usize) -> LeafSpineSpec {
        LeafSpineSpec {
            leaves,
            spines,
            hosts_per_leaf,
            host_bw_bps: 100,
            host_latency_ps: 1,
            fabric_bw_bps: 400,
            fabric_latency_ps: 2,
        }
    }

    #[test]
    fn sizes_below_minimum_are_named() {
        assert_eq!(
            star(0, 1, 1).unwrap_err(),
            TopologyError::InvalidSize {
                topology: "star",
                param: "hosts",
                value: 0,
                min: 1
            }
        );
        assert!(matches!(
            ring(0, 1, 1),
            Err(TopologyError::InvalidSize { param: "hosts", .. })
        ));
        let err = leaf_spine(spec(2, 0, 2)).unwrap_err();
        assert_eq!(
            err.to_string(),
            "leaf-spine: `spines` must be at least 1, got 0"
        );
        assert!(matches!(
            leaf_spine(spec(0, 1, 1)),
            Err(TopologyError::InvalidSize {
                param: "leaves",
                ..
            })
        ));
        assert!(matches!(
            leaf_spine(spec(1, 1, 0)),
            Err(TopologyError::InvalidSize {
                param: "hosts_per_leaf",
                ..
            })
        ));
        assert!(matches!(
            leaf_spine(spec(usize::MAX, 1, 2)),
            Err(TopologyError::TooLarge { .. })
        ));
    }

    #[test]
    fn zero_bandwidth_names_the_link() {
        assert_eq!(
            star(2, 0, 1).unwrap_err(),
            TopologyError::ZeroBandwidth {
                a: "h0".into(),
                b: "switch0".into()
            }
        );
        let mut s = spec(2, 1, 1);
        s.fabric_bw_bps = 0;
        assert_eq!(
            leaf_spine(s).unwrap_err(),
            TopologyError::ZeroBandwidth {
                a: "leaf0".into(),
                b: "spine0".into()
            }
        );
    }

    #[test]
    fn leaf_spine_layout_matches_its_documentation() {
        let g = leaf_spine(spec(3, 2, 4)).unwrap();
        assert_eq!(g.node(5).name, "h5");
        assert_eq!(g.find("leaf0"), Some(12));
        assert_eq!(g.find("spine1"), Some(16));
        assert_eq!(g.node(16).kind, NodeKind::Switch);
        // h5 is host 1 of leaf1.
        assert_eq!(g.ports(5)[0].peer, 13);
        assert_eq!(g.ports(13)[1].peer, 5);
        // leaf2's port hosts_per_leaf + 1 goes to spine1, which sees it on port 2.
        let up = g.ports(14)[4 + 1];
        assert_eq!((up.peer, up.peer_port), (16, 2));
        let l = g.link(up.link);
        assert_eq!((l.bandwidth_bps, l.latency_ps), (400, 2));
        assert_eq!(g.link(g.ports(0)[0].link).bandwidth_bps, 100);
    }

    #[test]
    fn ring_ports_match_their_documentation() {
        let g = ring(5, 1, 1).unwrap();
        assert_eq!(g.ports(0)[0].peer, 1);
        assert_eq!(g.ports(0)[1].peer, 4);
        assert_eq!(g.ports(3)[0].peer, 2);
        assert_eq!(g.ports(3)[1].peer, 4);
        assert_eq!(g.ports(4)[1].peer, 0);
        let lone = ring(1, 1, 1).unwrap();
        assert_eq!((lone.nodes().len(), lone.links().len()), (1, 0));
    }
}
