//! Fabric topologies for fabemu: the graph of hosts, switches and links, builders for common
//! fabrics, and the routes packets follow.
//!
//! This crate is pure graph and routing; it knows nothing of packets, time or actors. The
//! emulator uses it in three steps:
//!
//! 1. build a [`Graph`]: by hand from a scenario file, with a builder ([`star`], [`ring`],
//!    [`leaf_spine`], [`fat_tree`], [`torus`], [`multi_dim`]), or from an ASTRA-sim network
//!    file ([`astra_sim::parse`]); every link end is a port, numbered per node in link
//!    insertion order, and every host has an address ([`Graph::host_address`], scheme in
//!    [`address`]);
//! 2. compute [`Routes`] with [`routes_for`], which picks the fabric's [`RoutingPolicy`]:
//!    [`dimension_order_routes`] for tori and multi-dimensional fabrics, [`shortest_paths`]
//!    (minimum hops, all equal-cost next hops kept for ECMP) for the rest; or write routes by
//!    hand and check them with [`validate_routes`];
//! 3. create one actor per node with one port per [`PortInfo`], and let each switch look up
//!    [`Routes::next_hops`] for a packet's destination host and pick one by a hash of the
//!    flow (fabemu's switches use `fabemu_fabric::route`'s multiply-shift over the hash).
//!
//! [`summary::summarize`] reports what was built (counts, links per dimension or tier,
//! per-host bandwidth, diameter, bisection bandwidth) and [`summary::to_dot`] draws it.
//!
//! ```
//! use fabemu_topologies::{leaf_spine, shortest_paths, LeafSpineSpec, RoutingOptions};
//!
//! let g = leaf_spine(LeafSpineSpec {
//!     leaves: 2,
//!     spines: 2,
//!     hosts_per_leaf: 2,
//!     host_bw_bps: 100_000_000_000,
//!     host_latency_ps: 500_000,
//!     fabric_bw_bps: 400_000_000_000,
//!     fabric_latency_ps: 1_000_000,
//! })?;
//! let routes = shortest_paths(&g, &RoutingOptions::default())?;
//! // Builders add hosts first (ids = ranks), then leaves: h0..h3 are 0..=3, leaf0 is 4.
//! let (h0, h3, leaf0) = (0, 3, 4);
//! assert_eq!(g.find("leaf0"), Some(leaf0));
//! assert_eq!(routes.hops(h0, h3), Some(4));
//! assert_eq!(routes.next_hops(leaf0, h3), &[2, 3]); // both spines
//! # Ok::<(), fabemu_topologies::TopologyError>(())
//! ```

#![warn(missing_docs, unreachable_pub)]

pub mod address;
pub mod astra_sim;
mod bisection;
mod builders;
pub mod clos;
pub mod dimensional;
mod error;
mod graph;
mod routes;
mod routing;
mod shortest_paths;
pub mod summary;
mod validate;

pub use address::{host_ipv4, rank_ipv4};
pub use builders::{leaf_spine, ring, star, LeafSpineSpec};
pub use clos::{fat_tree, FatTreeSpec};
pub use dimensional::{dimension_order_routes, multi_dim, torus, DimKind, DimSpec, TorusSpec};
pub use error::TopologyError;
pub use graph::{
    FabricKind, Graph, Link, LinkClass, LinkId, Node, NodeId, NodeKind, PortId, PortInfo, Tier,
};
pub use routes::Routes;
pub use routing::{compute_routes, routes_for, RoutingPolicy};
pub use shortest_paths::{shortest_paths, RoutingOptions};
pub use validate::validate_routes;
