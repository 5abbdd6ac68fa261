//! Multi-dimensional fabrics as ASTRA-sim defines them, k-dimensional tori, and
//! dimension-order routing over both.
//!
//! A fabric is a list of dimensions; dimension `d` has a kind, a size `s_d`, and its own link
//! bandwidth and latency. There are `N = s_0 × s_1 × ...` hosts; the host of rank
//! `c0 + s0*c1 + s0*s1*c2 + ...` sits at coordinates `[c0, c1, c2, ...]` (dimension 0 varies
//! fastest, as in ASTRA-sim). In dimension `d` the hosts that agree on every other coordinate
//! form a *group* of `s_d` hosts, and each group is wired by the dimension's kind:
//!
//! | kind | links per group | ports per host | hops across the dimension |
//! |---|---|---|---|
//! | [`DimKind::Ring`] | `s` (`1` when `s = 2`) | 2 (1 when `s = 2`) | ring distance, the shorter way |
//! | [`DimKind::FullyConnected`] | `s(s-1)/2` | `s - 1` | 1 |
//! | [`DimKind::Switch`] | `s`, plus one switch | 1 | 2 |
//!
//! A ring of two hosts and a fully-connected pair are both a single link (not two parallel
//! links). Hosts forward traffic (a host relays along rings and between dimensions).
//!
//! **Layout.** Node ids: hosts `h0..h{N-1}` (id = rank), then the switches of dimension 0,
//! 1, ..., each dimension's in group order. Group `g` of dimension `d` is numbered by the
//! host's other coordinates in mixed radix (lower dimensions faster); its switch is named
//! `d{d}.sw{g}`. Links are added dimension by dimension, so a host's ports come in dimension
//! order; within one dimension they are, for a ring, as in [`ring`](crate::ring) (position 0:
//! `+1` then `-1` neighbour; others: `-1` then `+1`), for a fully-connected group the other
//! members in increasing coordinate, and for a switch the one port to the group's switch,
//! whose port `i` leads to the member with coordinate `i`.
//!
//! **Dimension-order routing** ([`dimension_order_routes`]): a packet corrects its coordinates
//! in order 0, 1, ..., D-1. In a ring dimension it takes the shorter direction; on an exact
//! tie (the destination halfway round an even ring) it takes the positive direction
//! (`c → c + 1`). In a fully-connected dimension it takes the direct link; in a switch
//! dimension it goes to the group's switch, which sends it to the member with the wanted
//! coordinate. Every pair therefore has exactly one path, with the sum over differing
//! dimensions of the hops in the table above.

use crate::address::coordinates_of;
use crate::error::TopologyError;
use crate::graph::{FabricKind, Graph, LinkClass, NodeKind, PortId};
use crate::routes::Routes;

/// How the hosts of one group of a dimension are wired (ASTRA-sim's building blocks).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DimKind {
    /// A bidirectional ring of host-to-host links.
    Ring,
    /// A direct link between every pair of hosts.
    FullyConnected,
    /// One switch, with one link from each host.
    Switch,
}

impl DimKind {
    /// ASTRA-sim's name: `Ring`, `FullyConnected` or `Switch`.
    pub fn name(self) -> &'static str {
        match self {
            DimKind::Ring => "Ring",
            DimKind::FullyConnected => "FullyConnected",
            DimKind::Switch => "Switch",
        }
    }

    /// Hops a dimension-order route takes across a dimension of this kind and size `size`
    /// from coordinate `from` to coordinate `to` (0 when they are equal).
    pub fn hops(self, size: usize, from: usize, to: usize) -> u32 {
        if from == to {
            return 0;
        }
        match self {
            DimKind::Ring => {
                let f = (to + size - from) % size;
                f.min(size - f) as u32
            }
            DimKind::FullyConnected => 1,
            DimKind::Switch => 2,
        }
    }
}

/// One dimension of a multi-dimensional fabric.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DimSpec {
    /// How each group is wired.
    pub kind: DimKind,
    /// Hosts per group, at least 2.
    pub size: usize,
    /// Bandwidth of each link of this dimension, in bits per second (each direction).
    pub bandwidth_bps: u64,
    /// One-way latency of each link of this dimension, in picoseconds.
    pub latency_ps: u64,
}

/// The parameters a [`torus`] was built from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TorusSpec {
    /// Size of each dimension, each at least 2.
    pub sizes: Vec<usize>,
    /// Bandwidth of every link, in bits per second.
    pub bandwidth_bps: u64,
    /// Latency of every link, in picoseconds.
    pub latency_ps: u64,
}

const MULTI_DIM: &str = "multi-dimensional";
const TORUS: &str = "torus";

/// A multi-dimensional fabric (see the [module documentation](self) for the wiring, the node
/// and port layout, and the names).
///
/// # Errors
/// [`TopologyError::NoDimensions`], [`TopologyError::DimensionTooSmall`] for a size below 2,
/// [`TopologyError::MustBePositive`] for a zero bandwidth, [`TopologyError::TooLarge`] if the
/// host count overflows.
pub fn multi_dim(dims: &[DimSpec]) -> Result<Graph, TopologyError> {
    let mut g = build(MULTI_DIM, dims)?;
    g.set_fabric(FabricKind::MultiDim(dims.to_vec()));
    Ok(g)
}

/// A k-dimensional torus: a [`multi_dim`] fabric whose every dimension is a ring (with
/// wrap-around), all links alike. A dimension of size 2 is one link per pair of hosts, as in
/// [`DimKind::Ring`].
///
/// # Errors
/// As [`multi_dim`]; a zero bandwidth is [`TopologyError::MustBePositive`] naming
/// `bandwidth_bps`.
pub fn torus(sizes: &[usize], bandwidth_bps: u64, latency_ps: u64) -> Result<Graph, TopologyError> {
    if bandwidth_bps == 0 {
        return Err(TopologyError::MustBePositive {
            topology: TORUS,
            param: "bandwidth_bps".into(),
        });
    }
    let dims: Vec<DimSpec> = sizes
        .iter()
        .map(|&size| DimSpec {
            kind: DimKind::Ring,
            size,
            bandwidth_bps,
            latency_ps,
        })
        .collect();
    let mut g = build(TORUS, &dims)?;
    g.set_fabric(FabricKind::Torus(TorusSpec {
        sizes: sizes.to_vec(),
        bandwidth_bps,
        latency_ps,
    }));
    Ok(g)
}

/// Checks `dims` and returns the host count.
fn host_count(topology: &'static str, dims: &[DimSpec]) -> Result<usize, TopologyError> {
    if dims.is_empty() {
        return Err(TopologyError::NoDimensions { topology });
    }
    let mut n = 1usize;
    for (d, spec) in dims.iter().enumerate() {
        if spec.size < 2 {
            return Err(TopologyError::DimensionTooSmall {
                topology,
                dim: d,
                size: spec.size,
            });
        }
        if spec.bandwidth_bps == 0 {
            return Err(TopologyError::MustBePositive {
                topology,
                param: format!("dimension {d} bandwidth_bps"),
            });
        }
        n = n.checked_mul(spec.size).ok_or(TopologyError::TooLarge {
            what: "host count (the product of the dimension sizes)",
        })?;
    }
    Ok(n)
}

fn build(topology: &'static str, dims: &[DimSpec]) -> Result<Graph, TopologyError> {
    let n = host_count(topology, dims)?;
    let mut g = Graph::new();
    for i in 0..n {
        g.add_host(format!("h{i}"))?;
    }
    let mut stride = 1usize;
    for (d, spec) in dims.iter().enumerate() {
        let s = spec.size;
        let class = LinkClass::Dimension(d);
        let (bw, lat) = (spec.bandwidth_bps, spec.latency_ps);
        // `stride * s` divides n, so neither product below can overflow.
        for group in 0..n / s {
            let base = group % stride + (group / stride) * stride * s;
            let member = |i: usize| base + i * stride;
            match spec.kind {
                DimKind::Ring => {
                    let links = if s == 2 { 1 } else { s };
                    for i in 0..links {
                        g.add_link_with_class(member(i), member((i + 1) % s), bw, lat, class)?;
                    }
                }
                DimKind::FullyConnected => {
                    for i in 0..s {
                        for j in i + 1..s {
                            g.add_link_with_class(member(i), member(j), bw, lat, class)?;
                        }
                    }
                }
                DimKind::Switch => {
                    let sw = g.add_switch(format!("d{d}.sw{group}"))?;
                    for i in 0..s {
                        g.add_link_with_class(member(i), sw, bw, lat, class)?;
                    }
                }
            }
        }
        stride *= s;
    }
    Ok(g)
}

/// Sentinel for "no port" in the lookup tables below.
const NONE: PortId = PortId::MAX;

/// Dimension-order routes for a fabric with dimensions (multi-dimensional, torus, ring or
/// star): one next hop per (node, destination), following the rules of the
/// [module documentation](self) (dimensions in order 0..D-1; rings the shorter way, the
/// positive direction on an exact tie). Hosts forward.
///
/// # Errors
/// [`TopologyError::NotDimensional`] for a graph whose [`Graph::fabric`] has no dimensions
/// (e.g. after it was changed by hand); [`TopologyError::TooLarge`] as for [`Routes::empty`].
pub fn dimension_order_routes(g: &Graph) -> Result<Routes, TopologyError> {
    let fabric = g.fabric().name();
    let not_dimensional = || TopologyError::NotDimensional { fabric };
    let dims = g.fabric().dimensions().ok_or_else(not_dimensional)?;
    let sizes: Vec<usize> = dims.iter().map(|&(_, s)| s).collect();
    let n = g.host_count();
    let nodes = g.nodes().len();
    let coords: Vec<Vec<usize>> = (0..n).map(|r| coordinates_of(r, &sizes)).collect();

    // Host lookup: `host_port[h][offset[d] + c]` is h's port to the dimension-d neighbour with
    // coordinate c (ring, fully connected) or, at `offset[d]`, to its dimension-d switch.
    let mut offset = Vec::with_capacity(sizes.len() + 1);
    offset.push(0usize);
    for &s in &sizes {
        offset.push(offset.last().copied().unwrap_or(0) + s);
    }
    let width = offset.last().copied().unwrap_or(0);
    let mut host_port = vec![NONE; n * width];
    // Switch lookup: the switch's dimension, and its port to the member with coordinate c.
    let mut switch_dim = vec![usize::MAX; nodes];
    let mut switch_port: Vec<Vec<PortId>> = vec![Vec::new(); nodes];
    for v in 0..nodes {
        for (p, info) in g.ports(v).iter().enumerate() {
            let LinkClass::Dimension(d) = g.link(info.link).class else {
                return Err(not_dimensional());
            };
            let Some(&s) = sizes.get(d) else {
                return Err(not_dimensional());
            };
            match (g.host_index(v), g.host_index(info.peer)) {
                (Some(h), Some(peer)) => host_port[h * width + offset[d] + coords[peer][d]] = p,
                (Some(h), None) => host_port[h * width + offset[d]] = p,
                (None, Some(peer)) => {
                    switch_dim[v] = d;
                    switch_port[v].resize(s, NONE);
                    switch_port[v][coords[peer][d]] = p;
                }
                (None, None) => return Err(not_dimensional()),
            }
        }
    }

    let mut routes = Routes::empty(g)?;
    for (t, dst) in coords.iter().enumerate() {
        for (h, c) in coords.iter().enumerate() {
            let Some(d) = (0..sizes.len()).find(|&d| c[d] != dst[d]) else {
                continue; // h is the destination
            };
            let s = sizes[d];
            let slot = match dims[d].0 {
                DimKind::Ring => {
                    let forward = (dst[d] + s - c[d]) % s;
                    if 2 * forward <= s {
                        (c[d] + 1) % s
                    } else {
                        (c[d] + s - 1) % s
                    }
                }
                DimKind::FullyConnected => dst[d],
                DimKind::Switch => 0,
            };
            let port = host_port[h * width + offset[d] + slot];
            if port == NONE {
                return Err(not_dimensional());
            }
            routes.set_checked(h, t, &[port])?;
        }
        for v in (0..nodes).filter(|&v| g.node(v).kind == NodeKind::Switch) {
            let d = switch_dim[v];
            let port = switch_port[v]
                .get(dst.get(d).copied().unwrap_or(usize::MAX))
                .copied()
                .unwrap_or(NONE);
            if port == NONE {
                return Err(not_dimensional());
            }
            routes.set_checked(v, t, &[port])?;
        }
    }
    Ok(routes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dim(kind: DimKind, size: usize) -> DimSpec {
        DimSpec {
            kind,
            size,
            bandwidth_bps: 100,
            latency_ps: 1,
        }
    }

    #[test]
    fn bad_dimensions_are_named() {
        assert_eq!(
            multi_dim(&[]).unwrap_err(),
            TopologyError::NoDimensions {
                topology: "multi-dimensional"
            }
        );
        let err = multi_dim(&[dim(DimKind::Ring, 4), dim(DimKind::Switch, 1)]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "multi-dimensional: dimension 1 has size 1; every dimension needs at least 2"
        );
        let mut zero = dim(DimKind::FullyConnected, 3);
        zero.bandwidth_bps = 0;
        assert_eq!(
            multi_dim(&[dim(DimKind::Ring, 2), zero])
                .unwrap_err()
                .to_string(),
            "multi-dimensional: `dimension 1 bandwidth_bps` must be greater than 0"
        );
        assert_eq!(
            torus(&[4, 0], 1, 1).unwrap_err(),
            TopologyError::DimensionTooSmall {
                topology: "torus",
                dim: 1,
                size: 0
            }
        );
        assert!(matches!(
            torus(&[4, 4], 0, 1),
            Err(TopologyError::MustBePositive { .. })
        ));
        assert!(matches!(
            torus(&[usize::MAX, 4], 1, 1),
            Err(TopologyError::TooLarge { .. })
        ));
    }

    #[test]
    fn layout_matches_the_documentation() {
        // [Ring 3, Switch 2, FullyConnected 3]: 18 hosts.
        let g = multi_dim(&[
            dim(DimKind::Ring, 3),
            dim(DimKind::Switch, 2),
            dim(DimKind::FullyConnected, 3),
        ])
        .unwrap();
        assert_eq!(g.host_count(), 18);
        // Dimension 1 groups: the 9 combinations of (c0, c2); switch of group g is node 18 + g.
        assert_eq!(g.find("d1.sw0"), Some(18));
        assert_eq!(g.find("d1.sw8"), Some(26));
        // h4 = [1, 1, 0]: ring ports (-1: h3, +1: h5), switch port, then FC peers h10, h16.
        let peers: Vec<_> = g.ports(4).iter().map(|p| p.peer).collect();
        let sw = g.find("d1.sw1").unwrap(); // group (c0 = 1, c2 = 0)
        assert_eq!(peers, vec![3, 5, sw, 10, 16]);
        assert_eq!(g.ports(sw)[1].peer, 4);
        assert_eq!(g.ports(sw)[0].peer, 1);
        // h0 (position 0 of its ring) has +1 first.
        assert_eq!(g.ports(0)[0].peer, 1);
        assert_eq!(g.ports(0)[1].peer, 2);
        assert_eq!(g.coordinates(4), Some(vec![1, 1, 0]));
        assert_eq!(g.link(g.ports(4)[2].link).class, LinkClass::Dimension(1));
    }

    #[test]
    fn ties_go_the_positive_way() {
        let g = torus(&[4], 1, 1).unwrap();
        let r = dimension_order_routes(&g).unwrap();
        // h0 -> h2 is halfway round: via h1 (port 0 of h0).
        assert_eq!(g.ports(0)[r.next_hops(0, 2)[0]].peer, 1);
        // h1 -> h3: via h2.
        assert_eq!(g.ports(1)[r.next_hops(1, 3)[0]].peer, 2);
        // h0 -> h3 is one step back.
        assert_eq!(g.ports(0)[r.next_hops(0, 3)[0]].peer, 3);
    }

    #[test]
    fn hand_changed_fabrics_are_not_dimensional() {
        let mut g = torus(&[3, 3], 1, 1).unwrap();
        g.add_link(0, 4, 1, 1).unwrap();
        assert_eq!(
            dimension_order_routes(&g).unwrap_err(),
            TopologyError::NotDimensional { fabric: "explicit" }
        );
    }
}
