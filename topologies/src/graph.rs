//! The fabric graph: named hosts and switches joined by full-duplex links.
//!
//! Ids are dense indices handed out in insertion order, so every per-node table elsewhere
//! (actors, routes, statistics) can be a plain `Vec` indexed by [`NodeId`]. Each link end
//! becomes one port of its node; a node's ports are numbered in the order its links were
//! added, which makes port numbers predictable from the scenario file alone.

use std::collections::HashMap;

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

    /// Joins `a` and `b` with a full-duplex link; each gets a new port at the end of its list.
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
        });
        Ok(link)
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
