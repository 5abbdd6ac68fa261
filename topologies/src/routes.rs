//! The route table: for every (node, destination host), the egress ports a packet may take.
//!
//! The table is dense (one entry per node × host) because a switch looks a route up per packet
//! and must not search. To keep thousands of hosts affordable, an entry is a `u32` id of a port
//! *set*, and each distinct set is stored once: in a Clos fabric almost every entry is "the one
//! downlink to that host" or "all uplinks", so the pool stays tiny while the table is 4 bytes
//! per entry.
//!
//! A node whose every route is the same set (a host with one NIC port: "port 0" to every other
//! host) keeps that one id instead of a row: on an 8192-host fat-tree the hosts' rows were 268
//! of the table's 310 MB. A row is laid out on the first write that differs from its set.
//!
//! A table is bound to the graph it was made for: it keeps a copy of the graph's shape (names,
//! ports and their peers) so that hand-written routes can be checked and errors can name nodes.

use rustc_hash::FxHashMap;
use std::fmt;

use crate::error::TopologyError;
use crate::graph::{Graph, NodeId, PortId};

/// Set id of the empty port set: no route (or already at the destination).
const EMPTY: u32 = 0;
/// In `Routes::row`: the node has no row of its own (see `Routes::uniform`).
const NO_ROW: usize = usize::MAX;

/// Next hops for every (node, destination host): the egress ports a packet may leave by, sorted
/// ascending and without repeats. More than one port means equal-cost multi-path (ECMP).
///
/// Made by [`shortest_paths`](crate::shortest_paths), or by hand with [`Routes::empty`] and
/// [`Routes::set`] (then check them with [`validate_routes`](crate::validate_routes)).
#[derive(Clone)]
pub struct Routes {
    nodes: usize,
    hosts: usize,
    /// Set id per (node, host rank) of the nodes that have a row: at `row[node] * hosts + rank`.
    entries: Vec<u32>,
    /// Per node: its row in `entries`, or [`NO_ROW`]: then every route of the node is the set
    /// `uniform[node]` (except toward itself, which is always empty).
    row: Vec<usize>,
    uniform: Vec<u32>,
    /// Set `k` is `pool[set_start[k]..set_start[k + 1]]`; set 0 is the empty set.
    set_start: Vec<usize>,
    pool: Vec<PortId>,
    /// Finds the id of a set already stored, so equal sets share storage.
    interned: FxHashMap<Vec<PortId>, u32>,
    /// Id of the one-port set `{p}` at index `p` (0 = not stored yet): most entries are a
    /// single port, and this spares hashing them.
    single: Vec<u32>,
    /// Shape of the graph the routes belong to.
    names: Vec<String>,
    host_index: Vec<Option<usize>>,
    /// Peers of node `n`'s ports are `peers[port_start[n]..port_start[n + 1]]`.
    port_start: Vec<usize>,
    peers: Vec<NodeId>,
}

impl Routes {
    /// A table for `g` with no routes at all, to be filled with [`Routes::set`].
    ///
    /// # Errors
    /// [`TopologyError::TooLarge`] if nodes × hosts entries cannot be addressed.
    pub fn empty(g: &Graph) -> Result<Self, TopologyError> {
        let nodes = g.nodes().len();
        let hosts = g.host_count();
        nodes.checked_mul(hosts).ok_or(TopologyError::TooLarge {
            what: "route table (nodes × hosts)",
        })?;
        let mut port_start = Vec::with_capacity(nodes + 1);
        let mut peers = Vec::with_capacity(2 * g.links().len());
        port_start.push(0);
        for n in 0..nodes {
            peers.extend(g.ports(n).iter().map(|p| p.peer));
            port_start.push(peers.len());
        }
        Ok(Self {
            nodes,
            hosts,
            entries: Vec::new(),
            row: vec![NO_ROW; nodes],
            uniform: vec![EMPTY; nodes],
            set_start: vec![0, 0],
            pool: Vec::new(),
            interned: FxHashMap::from_iter([(Vec::new(), EMPTY)]),
            single: Vec::new(),
            names: g.nodes().iter().map(|n| n.name.clone()).collect(),
            host_index: (0..nodes).map(|n| g.host_index(n)).collect(),
            port_start,
            peers,
        })
    }

    /// Sets the next hops of `node` toward `dst_host` (replacing any before); `ports` may be in
    /// any order and repeat, they are stored sorted and deduplicated. An empty list removes the
    /// route.
    ///
    /// # Errors
    /// [`TopologyError::UnknownNode`] for an id not in the graph, [`TopologyError::NotAHost`] if
    /// `dst_host` is a switch, [`TopologyError::NoSuchPort`], or
    /// [`TopologyError::RouteAtDestination`] for next hops at the destination itself.
    pub fn set(
        &mut self,
        node: NodeId,
        dst_host: NodeId,
        ports: &[PortId],
    ) -> Result<(), TopologyError> {
        for id in [node, dst_host] {
            if id >= self.nodes {
                return Err(TopologyError::UnknownNode {
                    id,
                    nodes: self.nodes,
                });
            }
        }
        let rank = self.host_index[dst_host].ok_or_else(|| TopologyError::NotAHost {
            node: self.names[dst_host].clone(),
        })?;
        let port_count = self.port_count(node);
        if let Some(&port) = ports.iter().find(|&&p| p >= port_count) {
            return Err(TopologyError::NoSuchPort {
                node: self.names[node].clone(),
                port,
                ports: port_count,
            });
        }
        if node == dst_host && !ports.is_empty() {
            return Err(TopologyError::RouteAtDestination {
                node: self.names[node].clone(),
            });
        }
        let mut set = ports.to_vec();
        set.sort_unstable();
        set.dedup();
        let id = self.intern(&set)?;
        self.store(node, rank, id);
        Ok(())
    }

    /// The egress ports of `node` toward host `dst_host`, sorted ascending. Empty when `node` is
    /// the destination, when there is no route, or for ids that are not a node / not a host.
    pub fn next_hops(&self, node: NodeId, dst_host: NodeId) -> &[PortId] {
        match (node < self.nodes, self.host_index.get(dst_host)) {
            (true, Some(&Some(rank))) => {
                let id = match self.row[node] {
                    NO_ROW if node == dst_host => EMPTY,
                    NO_ROW => self.uniform[node],
                    r => self.entries[r * self.hosts + rank],
                };
                self.set_ports(id)
            }
            _ => &[],
        }
    }

    /// Hop count from `src` to host `dst_host` taking the first next hop at each step (for
    /// routes from [`shortest_paths`](crate::shortest_paths) every choice takes as many hops).
    /// `Some(0)` when `src == dst_host`; `None` when the routes do not lead there (no route, or
    /// a loop).
    pub fn hops(&self, src: NodeId, dst_host: NodeId) -> Option<u32> {
        if src >= self.nodes || self.host_index.get(dst_host).copied().flatten().is_none() {
            return None;
        }
        let mut at = src;
        let mut hops = 0u32;
        // A loop-free walk visits each node at most once.
        for _ in 0..=self.nodes {
            if at == dst_host {
                return Some(hops);
            }
            let &port = self.next_hops(at, dst_host).first()?;
            at = self.peer(at, port)?;
            hops = hops.checked_add(1)?;
        }
        None
    }

    /// Number of nodes of the graph the routes were made for.
    pub fn node_count(&self) -> usize {
        self.nodes
    }

    /// Number of hosts of the graph the routes were made for.
    pub fn host_count(&self) -> usize {
        self.hosts
    }

    /// True if these routes were made for a graph with exactly `g`'s nodes and ports.
    pub fn fits(&self, g: &Graph) -> bool {
        self.nodes == g.nodes().len()
            && self.hosts == g.host_count()
            && self.names.iter().zip(g.nodes()).all(|(a, b)| *a == b.name)
            && (0..self.nodes).all(|n| {
                let ours = &self.peers[self.port_start[n]..self.port_start[n + 1]];
                let theirs = g.ports(n);
                ours.len() == theirs.len() && ours.iter().zip(theirs).all(|(&a, b)| a == b.peer)
            })
    }

    pub(crate) fn name(&self, node: NodeId) -> &str {
        &self.names[node]
    }

    pub(crate) fn port_count(&self, node: NodeId) -> usize {
        self.port_start[node + 1] - self.port_start[node]
    }

    /// The node at the far end of `node`'s `port`.
    pub(crate) fn peer(&self, node: NodeId, port: PortId) -> Option<NodeId> {
        (port < self.port_count(node)).then(|| self.peers[self.port_start[node] + port])
    }

    /// Stores the next hops of `node` toward the host of rank `rank` (already sorted, distinct
    /// and valid: the caller built them from the graph).
    pub(crate) fn set_checked(
        &mut self,
        node: NodeId,
        rank: usize,
        ports: &[PortId],
    ) -> Result<(), TopologyError> {
        let id = self.intern(ports)?;
        self.store(node, rank, id);
        Ok(())
    }

    /// Gives `node` toward the host of rank `to` the route it has toward the host of rank
    /// `from` (the same stored set, no lookup).
    pub(crate) fn copy_route(&mut self, node: NodeId, from: usize, to: usize) {
        let id = match self.row[node] {
            NO_ROW if self.host_index[node] == Some(from) => EMPTY,
            NO_ROW => self.uniform[node],
            r => self.entries[r * self.hosts + from],
        };
        self.store(node, to, id);
    }

    /// Gives `node` toward each host of ranks `to` the route it has toward the host of rank
    /// `from`: [`copy_route`](Self::copy_route) for each, and one fill of the row when the
    /// node has one (a fat-tree's 16 hosts behind a switch are a cache line of it).
    pub(crate) fn copy_routes(&mut self, node: NodeId, from: usize, to: std::ops::Range<usize>) {
        let r = self.row[node];
        if r == NO_ROW {
            for rank in to {
                self.copy_route(node, from, rank);
            }
            return;
        }
        let base = r * self.hosts;
        let id = self.entries[base + from];
        self.entries[base + to.start..base + to.end].fill(id);
    }

    /// Makes `ports` (already sorted, distinct and valid) the next hops of `node` toward every
    /// host but itself, replacing its whole row.
    pub(crate) fn set_row_checked(
        &mut self,
        node: NodeId,
        ports: &[PortId],
    ) -> Result<(), TopologyError> {
        let id = self.intern(ports)?;
        self.row[node] = NO_ROW;
        self.uniform[node] = id;
        Ok(())
    }

    /// Stores set `id` as the route of `node` toward the host of rank `rank`, laying out the
    /// node's row if it had none and `id` differs from its uniform set.
    fn store(&mut self, node: NodeId, rank: usize, id: u32) {
        if self.row[node] == NO_ROW {
            // Toward itself a node's route is always empty (`set` refuses anything else).
            if id == self.uniform[node] || self.host_index[node] == Some(rank) {
                return;
            }
            let r = self.entries.len().checked_div(self.hosts).unwrap_or(0);
            self.entries
                .resize(self.entries.len() + self.hosts, self.uniform[node]);
            if let Some(own) = self.host_index[node] {
                self.entries[r * self.hosts + own] = EMPTY;
            }
            self.row[node] = r;
        }
        let r = self.row[node];
        self.entries[r * self.hosts + rank] = id;
    }

    /// How many different next-hop sets the table stores (the empty set included).
    pub(crate) fn distinct_sets(&self) -> usize {
        self.set_start.len() - 1
    }

    fn set_ports(&self, id: u32) -> &[PortId] {
        let k = id as usize;
        &self.pool[self.set_start[k]..self.set_start[k + 1]]
    }

    fn intern(&mut self, ports: &[PortId]) -> Result<u32, TopologyError> {
        if let &[port] = ports {
            if let Some(&id) = self.single.get(port).filter(|&&id| id != EMPTY) {
                return Ok(id);
            }
        } else if let Some(&id) = self.interned.get(ports) {
            return Ok(id);
        }
        let id = u32::try_from(self.set_start.len() - 1).map_err(|_| TopologyError::TooLarge {
            what: "number of distinct next-hop sets",
        })?;
        self.pool.extend_from_slice(ports);
        self.set_start.push(self.pool.len());
        if let &[port] = ports {
            if self.single.len() <= port {
                self.single.resize(port + 1, EMPTY);
            }
            self.single[port] = id;
        } else {
            self.interned.insert(ports.to_vec(), id);
        }
        Ok(id)
    }
}

impl fmt::Debug for Routes {
    // The full table has nodes × hosts entries; a summary is what a reader can use.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Routes")
            .field("nodes", &self.nodes)
            .field("hosts", &self.hosts)
            .field("distinct_next_hop_sets", &self.distinct_sets())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// h0 - s0 - h1, with a second (parallel) link s0 - h1.
    fn tiny() -> (Graph, NodeId, NodeId, NodeId) {
        let mut g = Graph::new();
        let h0 = g.add_host("h0").unwrap();
        let h1 = g.add_host("h1").unwrap();
        let s = g.add_switch("s0").unwrap();
        g.add_link(h0, s, 1, 1).unwrap();
        g.add_link(s, h1, 1, 1).unwrap();
        g.add_link(s, h1, 1, 1).unwrap();
        (g, h0, h1, s)
    }

    #[test]
    fn set_sorts_dedups_and_shares_storage() {
        let (g, h0, h1, s) = tiny();
        let mut r = Routes::empty(&g).unwrap();
        assert!(r.fits(&g));
        r.set(s, h1, &[2, 1, 2]).unwrap();
        r.set(h0, h1, &[0]).unwrap();
        r.set(h1, h0, &[0]).unwrap();
        assert_eq!(r.next_hops(s, h1), &[1, 2]);
        assert_eq!(r.next_hops(h0, h1), &[0]);
        assert_eq!(r.next_hops(h1, h1), &[] as &[PortId]);
        assert_eq!(r.next_hops(s, s), &[] as &[PortId]); // not a host
        assert_eq!(r.next_hops(99, h1), &[] as &[PortId]);
        // Empty, {0}, {1,2}: the two {0} entries share one set.
        assert_eq!(r.distinct_sets(), 3);
        assert_eq!(r.hops(h0, h1), Some(2));
        assert_eq!(r.hops(h1, h1), Some(0));
        assert_eq!(r.hops(s, h0), None); // no route set
        r.set(s, h1, &[]).unwrap();
        assert_eq!(r.next_hops(s, h1), &[] as &[PortId]);
    }

    #[test]
    fn set_rejects_bad_input_by_name() {
        let (g, h0, h1, s) = tiny();
        let mut r = Routes::empty(&g).unwrap();
        assert_eq!(
            r.set(s, s, &[0]),
            Err(TopologyError::NotAHost { node: "s0".into() })
        );
        assert_eq!(
            r.set(h0, h1, &[1]),
            Err(TopologyError::NoSuchPort {
                node: "h0".into(),
                port: 1,
                ports: 1
            })
        );
        assert_eq!(
            r.set(h1, h1, &[0]),
            Err(TopologyError::RouteAtDestination { node: "h1".into() })
        );
        assert_eq!(
            r.set(5, h1, &[0]),
            Err(TopologyError::UnknownNode { id: 5, nodes: 3 })
        );
    }

    #[test]
    fn a_uniform_row_reads_as_a_row_and_gives_way_to_one() {
        let (g, h0, h1, s) = tiny();
        let mut r = Routes::empty(&g).unwrap();
        r.set_row_checked(h0, &[0]).unwrap();
        assert_eq!(r.next_hops(h0, h1), &[0]);
        assert_eq!(r.next_hops(h0, h0), &[] as &[PortId]);
        assert!(r.entries.is_empty());
        // The same set again keeps it a uniform row; another set lays the row out.
        r.set(h0, h1, &[0]).unwrap();
        assert!(r.entries.is_empty());
        r.set(s, h1, &[1, 2]).unwrap();
        r.set(h0, h1, &[]).unwrap();
        assert_eq!(r.next_hops(h0, h1), &[] as &[PortId]);
        assert_eq!(r.next_hops(h0, h0), &[] as &[PortId]);
        assert_eq!(r.next_hops(s, h1), &[1, 2]);
        assert_eq!(r.next_hops(s, h0), &[] as &[PortId]);
    }

    #[test]
    fn hops_stops_on_a_loop() {
        let (g, h0, h1, s) = tiny();
        let mut r = Routes::empty(&g).unwrap();
        r.set(h0, h1, &[0]).unwrap();
        r.set(s, h1, &[0]).unwrap(); // back to h0
        assert_eq!(r.hops(h0, h1), None);
    }

    #[test]
    fn fits_only_its_own_graph() {
        let (g, ..) = tiny();
        let r = Routes::empty(&g).unwrap();
        let mut other = g.clone();
        other.add_link(0, 2, 1, 1).unwrap();
        assert!(!r.fits(&other));
        assert!(!r.fits(&Graph::new()));
    }
}
