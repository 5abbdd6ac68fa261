//! The fabric graph: named hosts and switches joined by full-duplex links.
//!
//! Ids are dense indices handed out in insertion order, so every per-node table elsewhere
//! (actors, routes, statistics) can be a plain `Vec` indexed by [`NodeId`]. Each link end
//! becomes one port of its node; a node's ports are numbered in the order its links were
//! added, which makes port numbers predictable from the scenario file alone.
//!
//! A graph made by a builder also knows what it is ([`FabricKind`]): that fixes its routing
//! policy, its formulas (bisection) and, for fabrics with dimensions, each host's coordinates
//! and address. Each link carries a [`LinkClass`] (its dimension or tier) so reports can count
//! links and bytes per dimension or tier.

use std::collections::HashMap;
use std::fmt;

use crate::address;
use crate::builders::LeafSpineSpec;
use crate::clos::FatTreeSpec;
use crate::dimensional::{DimKind, DimSpec, TorusSpec};
use crate::error::TopologyError;

/// Index of a node in its [`Graph`] (`0..graph.nodes().len()`), in insertion order.
pub type NodeId = usize;
/// Index of a link in its [`Graph`] (`0..graph.links().len()`), in insertion order.
pub type LinkId = usize;
/// Index of a port among one node's ports (`0..graph.ports(node).len()`).
pub type PortId = usize;

/// What a node is: an endpoint that runs collectives, or a switch that only forwards.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NodeKind {
    /// An endpoint (an NPU with its NIC); hosts are the ranks of a collective.
    Host,
    /// A packet switch.
    Switch,
}

/// A host or switch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Node {
    /// The unique, non-empty name the user knows the node by.
    pub name: String,
    /// Host or switch.
    pub kind: NodeKind,
}

/// A tier of a Clos fabric (leaf-spine or fat-tree), named for the two layers a link joins.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Tier {
    /// A host to its leaf (leaf-spine) or edge (fat-tree) switch.
    Host,
    /// A leaf to a spine (leaf-spine).
    LeafSpine,
    /// An edge switch to an aggregation switch of its pod (fat-tree).
    EdgeAggregation,
    /// An aggregation switch to a core switch (fat-tree).
    AggregationCore,
}

impl Tier {
    /// The label reports use: `host`, `leaf-spine`, `edge-aggregation`, `aggregation-core`.
    pub fn label(self) -> &'static str {
        match self {
            Tier::Host => "host",
            Tier::LeafSpine => "leaf-spine",
            Tier::EdgeAggregation => "edge-aggregation",
            Tier::AggregationCore => "aggregation-core",
        }
    }
}

/// What role a link plays in its fabric, so reports can give links (and bytes) per dimension or
/// tier. Ordered: explicit links first, then dimensions in order, then tiers from the hosts up.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum LinkClass {
    /// No structural role: a link written out by hand ([`Graph::add_link`]'s default).
    #[default]
    Explicit,
    /// A link of dimension `d` (0-based) of a star, ring, torus or multi-dimensional fabric.
    Dimension(usize),
    /// A link of a tier of a Clos fabric.
    Tier(Tier),
}

impl fmt::Display for LinkClass {
    /// `explicit`, `dim0`, `dim1`, ..., or the tier's [`Tier::label`].
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LinkClass::Explicit => f.write_str("explicit"),
            LinkClass::Dimension(d) => write!(f, "dim{d}"),
            LinkClass::Tier(t) => f.write_str(t.label()),
        }
    }
}

/// What a graph is: written by hand, or one of the builders' fabrics with the parameters it was
/// built from.
///
/// Builders set it; any change to the graph afterwards ([`Graph::add_host`],
/// [`Graph::add_switch`], [`Graph::add_link`]) turns it back to [`FabricKind::Explicit`], so a
/// kind other than `Explicit` always describes the graph exactly and formulas may rely on it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum FabricKind {
    /// Built by hand (or changed after building).
    #[default]
    Explicit,
    /// [`star`](crate::star): one dimension of kind [`DimKind::Switch`].
    Star {
        /// Number of hosts.
        hosts: usize,
    },
    /// [`ring`](crate::ring): one dimension of kind [`DimKind::Ring`].
    Ring {
        /// Number of hosts.
        hosts: usize,
    },
    /// [`leaf_spine`](crate::leaf_spine).
    LeafSpine(LeafSpineSpec),
    /// [`fat_tree`](crate::fat_tree).
    FatTree(FatTreeSpec),
    /// [`torus`](crate::torus): every dimension a ring.
    Torus(TorusSpec),
    /// [`multi_dim`](crate::multi_dim).
    MultiDim(Vec<DimSpec>),
}

impl FabricKind {
    /// A short name for messages and reports: `explicit`, `star`, `ring`, `leaf-spine`,
    /// `fat-tree`, `torus`, `multi-dimensional`.
    pub fn name(&self) -> &'static str {
        match self {
            FabricKind::Explicit => "explicit",
            FabricKind::Star { .. } => "star",
            FabricKind::Ring { .. } => "ring",
            FabricKind::LeafSpine(_) => "leaf-spine",
            FabricKind::FatTree(_) => "fat-tree",
            FabricKind::Torus(_) => "torus",
            FabricKind::MultiDim(_) => "multi-dimensional",
        }
    }

    /// The kind and size of each dimension, for the fabrics that have dimensions (star, ring,
    /// torus, multi-dimensional); `None` for the others.
    pub fn dimensions(&self) -> Option<Vec<(DimKind, usize)>> {
        match self {
            FabricKind::Star { hosts } => Some(vec![(DimKind::Switch, *hosts)]),
            FabricKind::Ring { hosts } => Some(vec![(DimKind::Ring, *hosts)]),
            FabricKind::Torus(t) => Some(t.sizes.iter().map(|&s| (DimKind::Ring, s)).collect()),
            FabricKind::MultiDim(dims) => Some(dims.iter().map(|d| (d.kind, d.size)).collect()),
            FabricKind::Explicit | FabricKind::LeafSpine(_) | FabricKind::FatTree(_) => None,
        }
    }
}

/// A full-duplex link; `a` and `b` each get one port for it (the port index is the position of
/// this link among the node's links, in insertion order).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Link {
    /// One end.
    pub a: NodeId,
    /// The other end (never equal to `a`).
    pub b: NodeId,
    /// Bandwidth of each direction, in bits per second (never zero).
    pub bandwidth_bps: u64,
    /// One-way propagation latency, in picoseconds.
    pub latency_ps: u64,
    /// The link's dimension or tier ([`LinkClass::Explicit`] for links added by hand).
    pub class: LinkClass,
}

/// One port of a node: which link it drives and what is at the other end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PortInfo {
    /// The link behind this port.
    pub link: LinkId,
    /// The node at the far end of the link.
    pub peer: NodeId,
    /// The port of `peer` that the link arrives at.
    pub peer_port: PortId,
}

/// Hosts, switches and the links between them.
///
/// Parallel links between the same two nodes are allowed (they are separate ports, which ECMP
/// can spread traffic over); self-loops are not.
#[derive(Clone, Debug, Default)]
pub struct Graph {
    nodes: Vec<Node>,
    links: Vec<Link>,
    ports: Vec<Vec<PortInfo>>,
    by_name: HashMap<String, NodeId>,
    /// Dense rank of each node among hosts; `None` for switches.
    host_index: Vec<Option<usize>>,
    hosts: Vec<NodeId>,
    fabric: FabricKind,
    /// Size of each dimension, when `fabric` has dimensions.
    dims: Option<Vec<usize>>,
}

impl Graph {
    /// An empty graph.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a host named `name`; its rank ([`Graph::host_index`]) is the number of hosts added
    /// before it.
    ///
    /// # Errors
    /// [`TopologyError::DuplicateName`] or [`TopologyError::EmptyName`].
    pub fn add_host(&mut self, name: impl Into<String>) -> Result<NodeId, TopologyError> {
        self.add_node(name.into(), NodeKind::Host)
    }

    /// Adds a switch named `name`.
    ///
    /// # Errors
    /// [`TopologyError::DuplicateName`] or [`TopologyError::EmptyName`].
    pub fn add_switch(&mut self, name: impl Into<String>) -> Result<NodeId, TopologyError> {
        self.add_node(name.into(), NodeKind::Switch)
    }

    fn add_node(&mut self, name: String, kind: NodeKind) -> Result<NodeId, TopologyError> {
        if name.is_empty() {
            return Err(TopologyError::EmptyName);
        }
        if self.by_name.contains_key(&name) {
            return Err(TopologyError::DuplicateName { name });
        }
        self.set_fabric(FabricKind::Explicit);
        let id = self.nodes.len();
        self.by_name.insert(name.clone(), id);
        self.nodes.push(Node { name, kind });
        self.ports.push(Vec::new());
        match kind {
            NodeKind::Host => {
                self.host_index.push(Some(self.hosts.len()));
                self.hosts.push(id);
            }
            NodeKind::Switch => self.host_index.push(None),
        }
        Ok(id)
    }

    /// Joins `a` and `b` with a full-duplex link of class [`LinkClass::Explicit`]; each gets a
    /// new port at the end of its list.
    ///
    /// # Errors
    /// [`TopologyError::UnknownNode`], [`TopologyError::SelfLoop`] or
    /// [`TopologyError::ZeroBandwidth`].
    pub fn add_link(
        &mut self,
        a: NodeId,
        b: NodeId,
        bandwidth_bps: u64,
        latency_ps: u64,
    ) -> Result<LinkId, TopologyError> {
        self.add_link_with_class(a, b, bandwidth_bps, latency_ps, LinkClass::Explicit)
    }

    /// Like [`Graph::add_link`], with the link's dimension or tier.
    ///
    /// # Errors
    /// As [`Graph::add_link`].
    pub fn add_link_with_class(
        &mut self,
        a: NodeId,
        b: NodeId,
        bandwidth_bps: u64,
        latency_ps: u64,
        class: LinkClass,
    ) -> Result<LinkId, TopologyError> {
        for id in [a, b] {
            if id >= self.nodes.len() {
                return Err(TopologyError::UnknownNode {
                    id,
                    nodes: self.nodes.len(),
                });
            }
        }
        if a == b {
            return Err(TopologyError::SelfLoop {
                node: self.nodes[a].name.clone(),
            });
        }
        if bandwidth_bps == 0 {
            return Err(TopologyError::ZeroBandwidth {
                a: self.nodes[a].name.clone(),
                b: self.nodes[b].name.clone(),
            });
        }
        self.set_fabric(FabricKind::Explicit);
        let link = self.links.len();
        let port_a = self.ports[a].len();
        let port_b = self.ports[b].len();
        self.ports[a].push(PortInfo {
            link,
            peer: b,
            peer_port: port_b,
        });
        self.ports[b].push(PortInfo {
            link,
            peer: a,
            peer_port: port_a,
        });
        self.links.push(Link {
            a,
            b,
            bandwidth_bps,
            latency_ps,
            class,
        });
        Ok(link)
    }

    /// Records what a builder made (builders call this last).
    pub(crate) fn set_fabric(&mut self, fabric: FabricKind) {
        self.dims = fabric
            .dimensions()
            .map(|d| d.into_iter().map(|(_, s)| s).collect());
        self.fabric = fabric;
    }

    /// What this graph is; [`FabricKind::Explicit`] unless a builder made it and it was not
    /// changed since.
    pub fn fabric(&self) -> &FabricKind {
        &self.fabric
    }

    /// The size of each dimension for fabrics with dimensions (star, ring, torus,
    /// multi-dimensional), else `None`. The host of rank `c0 + s0*c1 + s0*s1*c2 + ...` has
    /// coordinates `[c0, c1, c2, ...]`: dimension 0 varies fastest, as in ASTRA-sim.
    pub fn dimensions(&self) -> Option<&[usize]> {
        self.dims.as_deref()
    }

    /// The coordinates of the host of rank `rank` (see [`Graph::dimensions`]); `None` if the
    /// fabric has no dimensions or there is no such rank.
    pub fn coordinates(&self, rank: usize) -> Option<Vec<usize>> {
        let dims = self.dims.as_deref()?;
        (rank < self.host_count()).then(|| address::coordinates_of(rank, dims))
    }

    /// The IPv4 address of the host of rank `rank`, the one its packets carry: derived from
    /// its coordinates on fabrics with dimensions ([`host_ipv4`](crate::host_ipv4)), else
    /// `10.0.0.0 + rank + 1` ([`rank_ipv4`](crate::rank_ipv4)). On one-dimensional fabrics
    /// (star, ring) the two schemes agree, so those keep the rank-based addresses.
    ///
    /// # Errors
    /// [`TopologyError::UnknownRank`], or [`TopologyError::TooLarge`] past the 10.0.0.0/8
    /// address space.
    pub fn host_address(&self, rank: usize) -> Result<[u8; 4], TopologyError> {
        if rank >= self.host_count() {
            return Err(TopologyError::UnknownRank {
                rank,
                hosts: self.host_count(),
            });
        }
        match self.dims.as_deref() {
            Some(dims) => address::host_ipv4(&address::coordinates_of(rank, dims), dims),
            None => address::rank_ipv4(rank),
        }
    }

    /// The node with id `id`.
    ///
    /// # Panics
    /// If `id` was not handed out by this graph (use [`Graph::nodes`]`.get(id)` for unchecked ids).
    pub fn node(&self, id: NodeId) -> &Node {
        &self.nodes[id]
    }

    /// All nodes, indexed by [`NodeId`].
    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    /// The link with id `id`.
    ///
    /// # Panics
    /// If `id` was not handed out by this graph (use [`Graph::links`]`.get(id)` for unchecked ids).
    pub fn link(&self, id: LinkId) -> &Link {
        &self.links[id]
    }

    /// All links, indexed by [`LinkId`].
    pub fn links(&self) -> &[Link] {
        &self.links
    }

    /// The ports of `node`, indexed by [`PortId`]; empty for an id this graph does not have.
    pub fn ports(&self, node: NodeId) -> &[PortInfo] {
        self.ports.get(node).map_or(&[], Vec::as_slice)
    }

    /// The node named `name`, if any.
    pub fn find(&self, name: &str) -> Option<NodeId> {
        self.by_name.get(name).copied()
    }

    /// Host ids in increasing order, which is also rank order.
    pub fn hosts(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.hosts.iter().copied()
    }

    /// How many hosts the graph has.
    pub fn host_count(&self) -> usize {
        self.hosts.len()
    }

    /// The rank of `node` among hosts (`0..host_count()`), or `None` for a switch or an
    /// unknown id.
    pub fn host_index(&self, node: NodeId) -> Option<usize> {
        self.host_index.get(node).copied().flatten()
    }

    /// The host with rank `index`, the inverse of [`Graph::host_index`].
    pub fn host_at(&self, index: usize) -> Option<NodeId> {
        self.hosts.get(index).copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_follow_link_insertion_order_and_point_back() {
        let mut g = Graph::new();
        let h0 = g.add_host("h0").unwrap();
        let s = g.add_switch("s").unwrap();
        let h1 = g.add_host("h1").unwrap();
        let l0 = g.add_link(h0, s, 100, 1).unwrap();
        let l1 = g.add_link(s, h1, 100, 1).unwrap();
        let l2 = g.add_link(h0, s, 100, 1).unwrap(); // parallel link: a second port
        assert_eq!((l0, l1, l2), (0, 1, 2));
        assert_eq!(g.ports(s).len(), 3);
        assert_eq!(g.ports(h0).len(), 2);
        assert_eq!(
            g.ports(s)[1],
            PortInfo {
                link: 1,
                peer: h1,
                peer_port: 0
            }
        );
        assert_eq!(
            g.ports(h0)[1],
            PortInfo {
                link: 2,
                peer: s,
                peer_port: 2
            }
        );
        for (node, ports) in (0..g.nodes().len()).map(|n| (n, g.ports(n))) {
            for (p, info) in ports.iter().enumerate() {
                let back = g.ports(info.peer)[info.peer_port];
                assert_eq!((back.peer, back.peer_port, back.link), (node, p, info.link));
            }
        }
    }

    #[test]
    fn hosts_are_ranked_densely_in_id_order() {
        let mut g = Graph::new();
        let a = g.add_host("a").unwrap();
        let s = g.add_switch("s").unwrap();
        let b = g.add_host("b").unwrap();
        assert_eq!(g.hosts().collect::<Vec<_>>(), vec![a, b]);
        assert_eq!(g.host_index(a), Some(0));
        assert_eq!(g.host_index(s), None);
        assert_eq!(g.host_index(b), Some(1));
        assert_eq!(g.host_index(99), None);
        assert_eq!(g.host_at(1), Some(b));
        assert_eq!(g.host_count(), 2);
        assert_eq!(g.find("s"), Some(s));
        assert_eq!(g.find("nope"), None);
        assert_eq!(g.node(s).kind, NodeKind::Switch);
    }

    #[test]
    fn bad_nodes_and_links_are_rejected_by_name() {
        let mut g = Graph::new();
        let a = g.add_host("a").unwrap();
        let b = g.add_switch("b").unwrap();
        assert_eq!(
            g.add_switch("a"),
            Err(TopologyError::DuplicateName { name: "a".into() })
        );
        assert_eq!(g.add_host(""), Err(TopologyError::EmptyName));
        assert_eq!(
            g.add_link(a, a, 1, 0),
            Err(TopologyError::SelfLoop { node: "a".into() })
        );
        assert_eq!(
            g.add_link(a, b, 0, 0),
            Err(TopologyError::ZeroBandwidth {
                a: "a".into(),
                b: "b".into()
            })
        );
        assert_eq!(
            g.add_link(a, 7, 1, 0),
            Err(TopologyError::UnknownNode { id: 7, nodes: 2 })
        );
        // Failed calls leave the graph untouched.
        assert_eq!(g.nodes().len(), 2);
        assert!(g.links().is_empty());
        assert!(g.ports(a).is_empty());
        assert!(g.ports(7).is_empty());
    }
}
