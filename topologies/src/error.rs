//! The one error type of this crate.
//!
//! Every variant names nodes by the names the user gave them (`h3`, `leaf1`), not by internal
//! ids, so a scenario author can find the offending line in their file. The only exception is
//! [`TopologyError::UnknownNode`]: an id that does not exist has no name.

use crate::graph::{NodeId, PortId};

/// Why a graph could not be built, routed, or its routes accepted.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TopologyError {
    /// Two nodes were given the same name.
    #[error("a node named `{name}` already exists")]
    DuplicateName {
        /// The repeated name.
        name: String,
    },

    /// A node was given an empty name.
    #[error("node names must not be empty")]
    EmptyName,

    /// A node id that this graph never handed out.
    #[error("node id {id} does not exist (the graph has {nodes} nodes)")]
    UnknownNode {
        /// The id that was passed.
        id: NodeId,
        /// How many nodes the graph has (valid ids are `0..nodes`).
        nodes: usize,
    },

    /// A link from a node to itself.
    #[error("link from `{node}` to itself: a link must join two different nodes")]
    SelfLoop {
        /// The node at both ends.
        node: String,
    },

    /// A link with no bandwidth would never deliver anything.
    #[error("link between `{a}` and `{b}` has zero bandwidth")]
    ZeroBandwidth {
        /// One end of the link.
        a: String,
        /// The other end.
        b: String,
    },

    /// No path joins two hosts, so shortest-path routing cannot serve them.
    #[error(
        "no path from host `{src}` to host `{dst}`{}",
        if *.transit_hosts { "" } else { " through switches (hosts do not forward unless transit_hosts is set)" }
    )]
    Unreachable {
        /// The host that cannot send.
        src: String,
        /// The host it cannot reach.
        dst: String,
        /// Whether hosts were allowed to forward when the search failed.
        transit_hosts: bool,
    },

    /// A route destination that is a switch; routes lead to hosts only.
    #[error("`{node}` is not a host; routes lead to hosts only")]
    NotAHost {
        /// The node given as a destination.
        node: String,
    },

    /// A route names a port that the node does not have.
    #[error("`{node}` has no port {port} (it has {ports} ports)")]
    NoSuchPort {
        /// The node the route is at.
        node: String,
        /// The port named by the route.
        port: PortId,
        /// How many ports the node has (valid ports are `0..ports`).
        ports: usize,
    },

    /// A destination host was given next hops toward itself.
    #[error("host `{node}` is the destination; it needs no next hop toward itself")]
    RouteAtDestination {
        /// The destination host.
        node: String,
    },

    /// Following the routes from a host leads to a node with no route onward.
    #[error(
        "traffic from host `{from}` to host `{dst}` reaches `{at}`, which has no route to `{dst}`"
    )]
    MissingRoute {
        /// The node without a next hop.
        at: String,
        /// The destination host.
        dst: String,
        /// A source host whose traffic gets stuck there.
        from: String,
    },

    /// Following the routes toward a host can go around in a circle.
    #[error("routes toward host `{dst}` loop: {}", .cycle.join(" -> "))]
    RoutingLoop {
        /// The destination host.
        dst: String,
        /// The nodes of the loop in order; the first is repeated at the end.
        cycle: Vec<String>,
    },

    /// The routes were made for another graph (different nodes or ports).
    #[error("the routes were built for a different graph")]
    RoutesGraphMismatch,

    /// A builder size below its minimum.
    #[error("{topology}: `{param}` must be at least {min}, got {value}")]
    InvalidSize {
        /// The builder, e.g. `leaf-spine`.
        topology: &'static str,
        /// The parameter, e.g. `spines`.
        param: &'static str,
        /// The value given.
        value: usize,
        /// The smallest value accepted.
        min: usize,
    },

    /// A size whose product does not fit in memory's address space.
    #[error("{what} is too large")]
    TooLarge {
        /// What overflowed, e.g. `leaf-spine host count (leaves × hosts_per_leaf)`.
        what: &'static str,
    },

    /// A multi-dimensional or torus fabric with no dimension at all.
    #[error("{topology}: at least one dimension is needed")]
    NoDimensions {
        /// The builder, e.g. `torus`.
        topology: &'static str,
    },

    /// A dimension of fewer than 2 hosts.
    #[error("{topology}: dimension {dim} has size {size}; every dimension needs at least 2")]
    DimensionTooSmall {
        /// The builder, e.g. `multi-dimensional`.
        topology: &'static str,
        /// The dimension (0-based).
        dim: usize,
        /// The size given.
        size: usize,
    },

    /// A bandwidth (or other parameter) that must be positive was zero.
    #[error("{topology}: `{param}` must be greater than 0")]
    MustBePositive {
        /// The builder, e.g. `fat-tree`.
        topology: &'static str,
        /// The parameter, e.g. `host_bw_bps` or `dimension 1 bandwidth_bps`.
        param: String,
    },

    /// A fat-tree whose `k` is odd: a k-ary fat-tree splits each switch's k ports in halves.
    #[error("fat-tree: `k` must be even, got {k}")]
    OddFatTreeK {
        /// The `k` given.
        k: usize,
    },

    /// A rank that the fabric does not have.
    #[error("rank {rank} does not exist (the fabric has {hosts} hosts)")]
    UnknownRank {
        /// The rank asked for.
        rank: usize,
        /// How many hosts the fabric has (valid ranks are `0..hosts`).
        hosts: usize,
    },

    /// Coordinates that do not fit the dimensions (wrong count, or a coordinate past its size).
    #[error("coordinates {coords:?} do not fit dimensions of sizes {dims:?}")]
    BadCoordinates {
        /// The coordinates given.
        coords: Vec<usize>,
        /// The dimension sizes.
        dims: Vec<usize>,
    },

    /// Dimension-order routing asked of a fabric without dimensions.
    #[error(
        "dimension-order routing needs a fabric with dimensions (multi-dimensional, torus, ring \
         or star), not a {fabric} fabric"
    )]
    NotDimensional {
        /// The fabric's kind, e.g. `fat-tree`.
        fabric: &'static str,
    },
}
