//! Minimum-hop routing with ECMP.
//!
//! One breadth-first search per destination host, outward from that host, gives every node its
//! hop distance to it; links are full duplex, so searching outward from the destination is the
//! same as searching the reverse graph. A node's next hops are then all ports whose peer is one
//! hop closer. Total cost O(hosts × (nodes + links)), with two scratch buffers reused across
//! searches. The searches read the graph as dense arrays made once (each node's peers, port
//! by port, in one vector; whether it relays; whether it is a one-port endpoint): a k = 32
//! fat-tree runs 8192 searches over 9472 nodes, and the graph's own node records (names
//! beside kinds) and per-node port vectors were cache misses at every step.
//!
//! Hosts with one port behind the same switch have the same routes everywhere but at that
//! switch: with hosts that do not relay, every path to either enters through the switch, so
//! every other node's distances and next hops toward them are equal. A destination that follows
//! such a sibling in rank order therefore takes the sibling's column as it is (set ids copied,
//! nothing searched or hashed) and only the shared switch's entry is its own: the one port to
//! it. On a k = 32 fat-tree that leaves 512 searches of 8192 (16 hosts per edge switch). The
//! siblings after a search take its column together, each node's entries toward them one fill
//! of its row (16 hosts: one cache line), not one copy per node and host.
//!
//! Whether hosts forward is a property of the fabric, not of the graph: in a Clos fabric a host
//! is only ever an endpoint, while in a host-to-host ring or torus every host relays. The
//! search honours this by never expanding *through* a host unless
//! [`RoutingOptions::transit_hosts`] is set.

use crate::error::TopologyError;
use crate::graph::{Graph, NodeKind, PortId};
use crate::routes::Routes;

/// How [`shortest_paths`] may route.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RoutingOptions {
    /// `false` (the default): paths may start and end at hosts but never pass through one, as
    /// in a Clos fabric. `true`: hosts forward too, as in host-to-host ring and torus fabrics.
    pub transit_hosts: bool,
}

const UNREACHED: u32 = u32::MAX;

/// Minimum-hop routes from every node to every host, keeping all equal-cost next hops (ECMP).
///
/// # Errors
/// [`TopologyError::Unreachable`] naming the first (in rank order of destination, then source)
/// pair of hosts with no path between them; [`TopologyError::TooLarge`] if the table cannot be
/// addressed. Switches that reach no host are not an error; they just have no routes.
pub fn shortest_paths(g: &Graph, opts: &RoutingOptions) -> Result<Routes, TopologyError> {
    search(g, opts, true)
}

/// [`shortest_paths`], with `reuse`: whether a destination may take its sibling's column (see
/// the module doc; the tests compare with and without).
fn search(g: &Graph, opts: &RoutingOptions, reuse: bool) -> Result<Routes, TopologyError> {
    let mut routes = Routes::empty(g)?;
    let n = g.nodes().len();
    let relay: Vec<bool> = (0..n)
        .map(|v| opts.transit_hosts || g.node(v).kind == NodeKind::Switch)
        .collect();
    let relays = |node: usize| relay[node];
    // Node v's peers, port by port: `peers[first[v]..first[v + 1]]`.
    let mut first = Vec::with_capacity(n + 1);
    let mut peers = Vec::new();
    for v in 0..n {
        first.push(peers.len());
        peers.extend(g.ports(v).iter().map(|p| p.peer));
    }
    first.push(peers.len());
    let peers_of = |v: usize| &peers[first[v]..first[v + 1]];
    let mut dist = vec![UNREACHED; n];
    let mut queue: Vec<usize> = Vec::with_capacity(n);
    let mut hops: Vec<PortId> = Vec::new();
    // A host with one port that does not relay reaches every other host by that port (it is
    // reached, if at all, from its one neighbour): one set for its whole row, not a row.
    let single: Vec<bool> = (0..n)
        .map(|v| !relays(v) && peers_of(v).len() == 1)
        .collect();
    let hosts: Vec<usize> = g.hosts().collect();
    for &h in hosts.iter().filter(|&&h| single[h]) {
        routes.set_row_checked(h, &[0])?;
    }

    // The relaying neighbour of a one-port destination, when its column may be shared (see
    // the module doc).
    let via_of = |dst: usize| match peers_of(dst) {
        &[e] if reuse && single[dst] && relays(e) => Some(e),
        _ => None,
    };
    // The nodes a search gave a route (reached, not one-port hosts), in search order.
    let mut routed: Vec<usize> = Vec::new();
    let mut rank = 0;
    while let Some(&dst) = hosts.get(rank) {
        dist.fill(UNREACHED);
        queue.clear();
        dist[dst] = 0;
        queue.push(dst);
        let mut head = 0;
        while let Some(&u) = queue.get(head) {
            head += 1;
            // A host other than the destination is reached (it may send) but does not relay.
            if u != dst && !relays(u) {
                continue;
            }
            for &w in peers_of(u) {
                if dist[w] == UNREACHED {
                    dist[w] = dist[u] + 1;
                    queue.push(w);
                }
            }
        }

        if let Some(&src) = hosts.iter().find(|&&h| dist[h] == UNREACHED) {
            return Err(TopologyError::Unreachable {
                src: g.node(src).name.clone(),
                dst: g.node(dst).name.clone(),
                transit_hosts: opts.transit_hosts,
            });
        }

        // Every reached node but the destination was reached from a relaying neighbour one hop
        // closer, so its set is never empty.
        routed.clear();
        for &v in queue[1..].iter().filter(|&&v| !single[v]) {
            hops.clear();
            let dv = dist[v];
            for (p, &w) in peers_of(v).iter().enumerate() {
                let dw = dist[w];
                if dw != UNREACHED && dw + 1 == dv && (w == dst || relays(w)) {
                    hops.push(p);
                }
            }
            routes.set_checked(v, rank, &hops)?;
            routed.push(v);
        }

        // The one-port hosts after it in rank order behind the same switch take its column,
        // all at once, but at the shared switch: the port to each.
        let via = via_of(dst);
        let mut end = rank + 1;
        if via.is_some() {
            while hosts.get(end).is_some_and(|&h| via_of(h) == via) {
                end += 1;
            }
        }
        if let Some(e) = via.filter(|_| end > rank + 1) {
            for &v in routed.iter().filter(|&&v| v != e) {
                routes.copy_routes(v, rank, rank + 1..end);
            }
            for (r, &d) in hosts.iter().enumerate().take(end).skip(rank + 1) {
                hops.clear();
                hops.extend(
                    peers_of(e)
                        .iter()
                        .enumerate()
                        .filter_map(|(p, &w)| (w == d).then_some(p)),
                );
                routes.set_checked(e, r, &hops)?;
            }
        }
        rank = end;
    }
    Ok(routes)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Taking a sibling's column gives the routes a search of its own gives, on fabrics with
    /// one-port hosts (siblings under every switch), hosts in several rails (none), and a
    /// ring with transit hosts (none).
    #[test]
    fn reusing_a_siblings_column_changes_no_route() {
        let leaf_spine = crate::LeafSpineSpec {
            leaves: 6,
            spines: 3,
            hosts_per_leaf: 5,
            host_bw_bps: 1,
            host_latency_ps: 1,
            fabric_bw_bps: 1,
            fabric_latency_ps: 1,
        };
        let mut graphs = vec![(crate::leaf_spine(leaf_spine).unwrap(), false)];
        for k in [4, 6] {
            // 2:1 oversubscribed too: more siblings per edge switch.
            for oversubscription in [1, 2] {
                graphs.push((
                    crate::fat_tree(crate::FatTreeSpec::unit(k, oversubscription)).unwrap(),
                    false,
                ));
            }
        }
        // Hosts alternating between two switches, and hosts with two ports.
        let mut g = Graph::new();
        let s: Vec<_> = (0..3)
            .map(|i| g.add_switch(format!("s{i}")).unwrap())
            .collect();
        g.add_link(s[0], s[1], 1, 1).unwrap();
        g.add_link(s[1], s[2], 1, 1).unwrap();
        for i in 0..9 {
            let h = g.add_host(format!("h{i}")).unwrap();
            g.add_link(h, s[i % 2], 1, 1).unwrap();
            if i % 3 == 0 {
                g.add_link(h, s[2], 1, 1).unwrap();
            }
        }
        graphs.push((g, false));
        let mut ring = Graph::new();
        let h: Vec<_> = (0..5)
            .map(|i| ring.add_host(format!("r{i}")).unwrap())
            .collect();
        for i in 0..5 {
            ring.add_link(h[i], h[(i + 1) % 5], 1, 1).unwrap();
        }
        graphs.push((ring, true));
        for (g, transit_hosts) in &graphs {
            let opts = RoutingOptions {
                transit_hosts: *transit_hosts,
            };
            let a = search(g, &opts, true).unwrap();
            let b = search(g, &opts, false).unwrap();
            assert_eq!(a.distinct_sets(), b.distinct_sets());
            for v in 0..g.nodes().len() {
                for d in g.hosts() {
                    assert_eq!(a.next_hops(v, d), b.next_hops(v, d), "node {v} to {d}");
                }
            }
        }
    }

    #[test]
    fn hosts_do_not_relay_unless_allowed() {
        // h0 - h1 - h2 in a line: h0 reaches h2 only through h1.
        let mut g = Graph::new();
        let h: Vec<_> = (0..3)
            .map(|i| g.add_host(format!("h{i}")).unwrap())
            .collect();
        g.add_link(h[0], h[1], 1, 1).unwrap();
        g.add_link(h[1], h[2], 1, 1).unwrap();
        let err = shortest_paths(&g, &RoutingOptions::default()).unwrap_err();
        assert_eq!(
            err,
            TopologyError::Unreachable {
                src: "h2".into(),
                dst: "h0".into(),
                transit_hosts: false
            }
        );
        assert!(err.to_string().contains("transit_hosts"), "{err}");
        let r = shortest_paths(
            &g,
            &RoutingOptions {
                transit_hosts: true,
            },
        )
        .unwrap();
        assert_eq!(r.hops(h[0], h[2]), Some(2));
        assert_eq!(r.next_hops(h[1], h[2]), &[1]);
    }

    #[test]
    fn a_switch_path_is_not_shortcut_through_a_host() {
        // h0 - s0 - s1 - h1, plus h0 - h2 - h1: without transit the 2-hop host path is not used.
        let mut g = Graph::new();
        let h0 = g.add_host("h0").unwrap();
        let h1 = g.add_host("h1").unwrap();
        let h2 = g.add_host("h2").unwrap();
        let s0 = g.add_switch("s0").unwrap();
        let s1 = g.add_switch("s1").unwrap();
        g.add_link(h0, s0, 1, 1).unwrap(); // h0 port 0
        g.add_link(s0, s1, 1, 1).unwrap();
        g.add_link(s1, h1, 1, 1).unwrap();
        g.add_link(h0, h2, 1, 1).unwrap(); // h0 port 1
        g.add_link(h2, h1, 1, 1).unwrap();
        g.add_link(h2, s0, 1, 1).unwrap();
        let r = shortest_paths(&g, &RoutingOptions::default()).unwrap();
        assert_eq!(r.next_hops(h0, h1), &[0]);
        assert_eq!(r.hops(h0, h1), Some(3));
        // h2 is adjacent to h1 and may use that link as a source.
        assert_eq!(r.hops(h2, h1), Some(1));
        let r = shortest_paths(
            &g,
            &RoutingOptions {
                transit_hosts: true,
            },
        )
        .unwrap();
        assert_eq!(r.next_hops(h0, h1), &[1]);
        assert_eq!(r.hops(h0, h1), Some(2));
    }

    #[test]
    fn isolated_switches_are_fine_and_unrouted() {
        let mut g = Graph::new();
        let h0 = g.add_host("h0").unwrap();
        let h1 = g.add_host("h1").unwrap();
        let s = g.add_switch("spare").unwrap();
        g.add_link(h0, h1, 1, 1).unwrap();
        let r = shortest_paths(&g, &RoutingOptions::default()).unwrap();
        assert_eq!(r.hops(h0, h1), Some(1));
        assert_eq!(r.next_hops(s, h1), &[] as &[PortId]);
        assert_eq!(r.hops(s, h1), None);
    }

    #[test]
    fn clos_tables_store_few_distinct_sets() {
        let spec = crate::LeafSpineSpec {
            leaves: 8,
            spines: 4,
            hosts_per_leaf: 16,
            host_bw_bps: 1,
            host_latency_ps: 1,
            fabric_bw_bps: 1,
            fabric_latency_ps: 1,
        };
        let g = crate::leaf_spine(spec).unwrap();
        let r = shortest_paths(&g, &RoutingOptions::default()).unwrap();
        // Empty, each single downlink port {0..16} (ports 0..8 double as spine downlinks),
        // and the leaves' shared uplink set.
        assert_eq!(r.distinct_sets(), 1 + 16 + 1);
    }

    #[test]
    fn graphs_without_hosts_or_links_route_trivially() {
        let r = shortest_paths(&Graph::new(), &RoutingOptions::default()).unwrap();
        assert_eq!((r.node_count(), r.host_count()), (0, 0));
        let mut g = Graph::new();
        let h = g.add_host("only").unwrap();
        let r = shortest_paths(&g, &RoutingOptions::default()).unwrap();
        assert_eq!(r.hops(h, h), Some(0));
    }
}
