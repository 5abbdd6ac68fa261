//! Choosing how a fabric is routed, and how a packet picks among equal-cost next hops.
//!
//! Fabrics with dimensions route dimension-order (one path per pair, as ASTRA-sim models
//! them); Clos fabrics and hand-written graphs route by shortest paths keeping every
//! equal-cost next hop. The choice among those next hops happens per packet in the emulator,
//! by a hash of the flow's 5-tuple and the scenario seed (`fabemu_fabric::route`), so a flow
//! keeps one path (no reordering) while many flows spread.

use crate::dimensional::dimension_order_routes;
use crate::error::TopologyError;
use crate::graph::{FabricKind, Graph};
use crate::routes::Routes;
use crate::shortest_paths::{shortest_paths, RoutingOptions};

/// How to compute a fabric's routes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RoutingPolicy {
    /// [`dimension_order_routes`]: one path per pair, dimensions corrected in order.
    DimensionOrder,
    /// [`shortest_paths`] with every equal-cost next hop kept (ECMP).
    ShortestPath(RoutingOptions),
}

impl RoutingPolicy {
    /// The policy a fabric is routed by, from its [`Graph::fabric`]:
    ///
    /// | fabric | policy |
    /// |---|---|
    /// | torus, multi-dimensional | dimension-order |
    /// | leaf-spine, fat-tree, star | shortest paths, hosts do not forward |
    /// | ring | shortest paths, hosts forward (both directions on an even ring's tie: the routes fabemu has always used for `ring`) |
    /// | explicit | shortest paths; hosts forward iff some host has more than one port |
    pub fn for_graph(g: &Graph) -> RoutingPolicy {
        let transit = |transit_hosts| RoutingPolicy::ShortestPath(RoutingOptions { transit_hosts });
        match g.fabric() {
            FabricKind::Torus(_) | FabricKind::MultiDim(_) => RoutingPolicy::DimensionOrder,
            FabricKind::Star { .. } | FabricKind::LeafSpine(_) | FabricKind::FatTree(_) => {
                transit(false)
            }
            FabricKind::Ring { .. } => transit(true),
            FabricKind::Explicit => transit(g.hosts().any(|h| g.ports(h).len() > 1)),
        }
    }
}

/// Routes for `g` by `policy`.
///
/// # Errors
/// Those of [`dimension_order_routes`] or [`shortest_paths`] (notably
/// [`TopologyError::Unreachable`] for a fabric with unreachable hosts).
pub fn compute_routes(g: &Graph, policy: RoutingPolicy) -> Result<Routes, TopologyError> {
    match policy {
        RoutingPolicy::DimensionOrder => dimension_order_routes(g),
        RoutingPolicy::ShortestPath(opts) => shortest_paths(g, &opts),
    }
}

/// Routes for `g` by its own policy, [`RoutingPolicy::for_graph`]. Routes do not depend on the
/// scenario seed: the seed only enters the per-packet choice of next hop.
///
/// # Errors
/// As [`compute_routes`].
pub fn routes_for(g: &Graph) -> Result<Routes, TopologyError> {
    compute_routes(g, RoutingPolicy::for_graph(g))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policies_follow_the_fabric() {
        let sp = |t| RoutingPolicy::ShortestPath(RoutingOptions { transit_hosts: t });
        assert_eq!(
            RoutingPolicy::for_graph(&crate::torus(&[3, 3], 1, 1).unwrap()),
            RoutingPolicy::DimensionOrder
        );
        assert_eq!(
            RoutingPolicy::for_graph(&crate::ring(4, 1, 1).unwrap()),
            sp(true)
        );
        assert_eq!(
            RoutingPolicy::for_graph(&crate::star(4, 1, 1).unwrap()),
            sp(false)
        );
        let mut g = Graph::new();
        let a = g.add_host("a").unwrap();
        let b = g.add_host("b").unwrap();
        g.add_link(a, b, 1, 1).unwrap();
        assert_eq!(RoutingPolicy::for_graph(&g), sp(false));
        g.add_link(a, b, 1, 1).unwrap();
        assert_eq!(RoutingPolicy::for_graph(&g), sp(true));
    }
}
