//! What was built: counts, links per dimension or tier, per-host bandwidth, diameter and
//! bisection bandwidth ([`summarize`]), and a Graphviz drawing ([`to_dot`]).
//!
//! Bandwidths are per direction, in bits per second. The diameter is measured on the routes
//! the fabric will use (the longest route between two hosts, in links), so it reflects
//! dimension-order routing where that is the policy, not just the graph.

use std::collections::BTreeMap;
use std::fmt;
use std::fmt::Write as _;

use crate::bisection::bisection;
use crate::error::TopologyError;
use crate::graph::{Graph, LinkClass, NodeKind};
use crate::routes::Routes;
use crate::validate::validate_routes;

/// The links of one [`LinkClass`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClassSummary {
    /// The dimension or tier.
    pub class: LinkClass,
    /// How many links it has.
    pub links: usize,
    /// The bandwidth of its links (bits per second, each direction) if they all have the same.
    pub bandwidth_bps: Option<u64>,
    /// The latency of its links (picoseconds) if they all have the same.
    pub latency_ps: Option<u64>,
    /// What each host can send into this class at once (the sum of its ports' bandwidths in the
    /// class), if every host has the same nonzero amount; `None` for a class hosts have no
    /// ports in (e.g. a fat-tree's core tier) or where hosts differ.
    pub per_host_bandwidth_bps: Option<u64>,
}

/// Bisection bandwidth: the least capacity (one direction, bits per second) of the links that
/// must be cut to split the hosts into two halves of `⌊N/2⌋` and `⌈N/2⌉`, switches placed on
/// whichever side makes the cut smallest.
///
/// Computing it is NP-hard in general, so each fabric kind gets what can be shown:
///
/// - **star** (`n` hosts, links of `b`): `⌊n/2⌋·b` — the switch is on one side, and every host
///   on the other side is cut off by its one link. **ring**: `2b` (`b` for two hosts) — a
///   cycle split into two arcs is cut in two places.
/// - **leaf-spine** (`L` leaves of `h` hosts, `S` spines): `min over a in 0..=L of
///   |a·h − ⌊N/2⌋|·b_host + S·min(a, L − a)·b_fabric` — with `a` leaves on one side, each
///   spine joins the side holding most of its leaves, and the fewest hosts are parted from
///   their leaf. Exact: every cut is of this form.
/// - **fat-tree** (`k`, oversubscription `r`): `(k/2)³ · min(r·b_host, b_edge_agg,
///   b_agg_core)` — the cheapest of cutting half the host links, the uplinks of half the edge
///   switches, or the core links of half the pods. (The cost of moving hosts to the other
///   side grows linearly at each tier, so mixtures do not beat the cheapest pure tier; the unit
///   tests check the formula against exhaustive search for k = 2 and 4 with several
///   oversubscriptions and tier bandwidths.)
/// - **torus and multi-dimensional**: an upper bound from the plane cuts (halve an
///   even-sized dimension `d`: `N/s_d` groups each cut by 2 ring links (1 when `s_d = 2`),
///   `(s_d/2)²` fully-connected links or `s_d/2` switch links) and a lower bound from routing
///   one unit between every ordered pair of hosts dimension-order (ties split evenly): the
///   `⌊N/2⌋·⌈N/2⌉` units crossing any bisection load no link past its busiest
///   load-to-capacity ratio. The bounds meet, and the value is exact, when the dimension with
///   the least lower bound is a ring or fully-connected dimension of even size (so for every
///   torus whose such dimension is even); a single dimension is exact by the star, ring or
///   clique argument. Otherwise (notably when a switch dimension binds: the flow bound is
///   loose for stars) exhaustive search decides if the fabric is small enough, else both
///   bounds are reported.
/// - **explicit**: exhaustive search when small enough, else the cut between the lower and
///   upper halves of the ranks as an upper bound (lower bound 0).
///
/// Exhaustive search (used up to 20 000 splits) tries every split of the hosts (hosts that hang off the same switch by
/// one link each of equal bandwidth are interchangeable, so only how many of them go to each
/// side matters) and places the switches optimally by a minimum cut (max-flow).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bisection {
    /// The exact value.
    Exact(u64),
    /// The value lies between these (inclusive).
    Bounds {
        /// A proven lower bound (0 when nothing better is known).
        at_least: u64,
        /// The capacity of an actual bisection.
        at_most: u64,
    },
}

/// What a fabric is made of.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TopologySummary {
    /// The fabric's kind ([`FabricKind::name`](crate::FabricKind::name)).
    pub fabric: &'static str,
    /// Dimension sizes, for fabrics with dimensions.
    pub dimensions: Option<Vec<usize>>,
    /// Number of hosts.
    pub hosts: usize,
    /// Number of switches.
    pub switches: usize,
    /// Number of links.
    pub links: usize,
    /// Links per dimension or tier, in [`LinkClass`] order.
    pub links_by_class: Vec<ClassSummary>,
    /// The least total bandwidth of any host's ports (its injection bandwidth), bits/s.
    pub per_host_bandwidth_bps: u64,
    /// The greatest total bandwidth of any host's ports, bits/s (equal to the least on regular
    /// fabrics).
    pub per_host_bandwidth_max_bps: u64,
    /// The most links any route between two hosts takes.
    pub diameter_hops: u32,
    /// The bisection bandwidth.
    pub bisection: Bisection,
}

/// Summarizes `g` as routed by `routes` (the diameter follows the first next hop at each step;
/// for computed routes every choice is as long).
///
/// # Errors
/// [`TopologyError::RoutesGraphMismatch`] if `routes` were made for another graph; if some host
/// cannot reach another by the routes, the error [`validate_routes`] gives.
pub fn summarize(g: &Graph, routes: &Routes) -> Result<TopologySummary, TopologyError> {
    if !routes.fits(g) {
        return Err(TopologyError::RoutesGraphMismatch);
    }
    let diameter_hops = diameter(g, routes)?;

    struct Acc {
        links: usize,
        bw: Option<u64>,
        lat: Option<u64>,
        mixed_bw: bool,
        mixed_lat: bool,
        per_host: Vec<u64>,
    }
    let hosts = g.host_count();
    let mut classes: BTreeMap<LinkClass, Acc> = BTreeMap::new();
    for l in g.links() {
        let acc = classes.entry(l.class).or_insert_with(|| Acc {
            links: 0,
            bw: Some(l.bandwidth_bps),
            lat: Some(l.latency_ps),
            mixed_bw: false,
            mixed_lat: false,
            per_host: vec![0; hosts],
        });
        acc.links += 1;
        acc.mixed_bw |= acc.bw != Some(l.bandwidth_bps);
        acc.mixed_lat |= acc.lat != Some(l.latency_ps);
        for end in [l.a, l.b] {
            if let Some(r) = g.host_index(end) {
                acc.per_host[r] = acc.per_host[r].saturating_add(l.bandwidth_bps);
            }
        }
    }
    let links_by_class = classes
        .into_iter()
        .map(|(class, acc)| {
            let first = acc.per_host.first().copied().filter(|&v| v > 0);
            let uniform = acc.per_host.iter().all(|&v| Some(v) == first);
            ClassSummary {
                class,
                links: acc.links,
                bandwidth_bps: acc.bw.filter(|_| !acc.mixed_bw),
                latency_ps: acc.lat.filter(|_| !acc.mixed_lat),
                per_host_bandwidth_bps: first.filter(|_| uniform),
            }
        })
        .collect();

    let injection = g.hosts().map(|h| {
        g.ports(h).iter().fold(0u64, |sum, p| {
            sum.saturating_add(g.link(p.link).bandwidth_bps)
        })
    });
    let (min, max) = injection.fold((u64::MAX, 0), |(lo, hi), v| (lo.min(v), hi.max(v)));

    Ok(TopologySummary {
        fabric: g.fabric().name(),
        dimensions: g.dimensions().map(<[usize]>::to_vec),
        hosts,
        switches: g
            .nodes()
            .iter()
            .filter(|n| n.kind == NodeKind::Switch)
            .count(),
        links: g.links().len(),
        links_by_class,
        per_host_bandwidth_bps: if hosts == 0 { 0 } else { min },
        per_host_bandwidth_max_bps: max,
        diameter_hops,
        bisection: bisection(g),
    })
}

/// The longest first-choice route between two hosts, memoized per destination: O(hosts ×
/// nodes).
fn diameter(g: &Graph, routes: &Routes) -> Result<u32, TopologyError> {
    const UNKNOWN: u32 = u32::MAX;
    const VISITING: u32 = u32::MAX - 1;
    let mut dist = vec![UNKNOWN; g.nodes().len()];
    let mut path = Vec::new();
    let mut best = 0;
    // Routes that do not deliver: let the validator name the problem.
    let broken = || match validate_routes(g, routes) {
        Err(e) => e,
        Ok(()) => TopologyError::RoutesGraphMismatch,
    };
    for dst in g.hosts() {
        dist.fill(UNKNOWN);
        dist[dst] = 0;
        for src in g.hosts() {
            let mut v = src;
            while dist[v] == UNKNOWN {
                dist[v] = VISITING;
                path.push(v);
                let next = routes
                    .next_hops(v, dst)
                    .first()
                    .and_then(|&p| g.ports(v).get(p));
                v = next.ok_or_else(broken)?.peer;
            }
            if dist[v] == VISITING {
                return Err(broken());
            }
            let mut d = dist[v];
            while let Some(u) = path.pop() {
                d += 1;
                dist[u] = d;
            }
            best = best.max(dist[src]);
        }
    }
    Ok(best)
}

/// `bps` in the largest unit that keeps it at least 1 (`b/s`, `kb/s`, `Mb/s`, `Gb/s`,
/// `Tb/s`, decimal prefixes), exactly: `429.4967296 Gb/s`.
pub fn format_bps(bps: u64) -> String {
    let units = [
        (1_000_000_000_000, "Tb/s"),
        (1_000_000_000, "Gb/s"),
        (1_000_000, "Mb/s"),
        (1_000, "kb/s"),
    ];
    for (scale, unit) in units {
        if bps >= scale {
            return format!("{} {unit}", exact_ratio(bps, scale));
        }
    }
    format!("{bps} b/s")
}

/// `ps` in nanoseconds, exactly: `500 ns`, `0.25 ns`.
pub fn format_ps(ps: u64) -> String {
    format!("{} ns", exact_ratio(ps, 1000))
}

/// `v / scale` (a power of ten) as a decimal without trailing zeros.
fn exact_ratio(v: u64, scale: u64) -> String {
    let (int, frac) = (v / scale, v % scale);
    if frac == 0 {
        return int.to_string();
    }
    let width = scale.ilog10() as usize;
    let digits = format!("{frac:0width$}");
    format!("{int}.{}", digits.trim_end_matches('0'))
}

impl fmt::Display for Bisection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Bisection::Exact(v) => f.write_str(&format_bps(v)),
            Bisection::Bounds { at_least, at_most } => write!(
                f,
                "between {} and {} (bounds; not computed exactly)",
                format_bps(at_least),
                format_bps(at_most)
            ),
        }
    }
}

impl fmt::Display for TopologySummary {
    /// A human-readable block, one fact per line.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "fabric: {}", self.fabric)?;
        if let Some(d) = &self.dimensions {
            let sizes: Vec<String> = d.iter().map(usize::to_string).collect();
            write!(f, " ({})", sizes.join(" x "))?;
        }
        writeln!(f)?;
        writeln!(
            f,
            "hosts: {}, switches: {}, links: {}",
            self.hosts, self.switches, self.links
        )?;
        for c in &self.links_by_class {
            write!(f, "  {}: {} links", c.class, c.links)?;
            if let Some(bw) = c.bandwidth_bps {
                write!(f, " of {}", format_bps(bw))?;
            }
            if let Some(lat) = c.latency_ps {
                write!(f, ", {}", format_ps(lat))?;
            }
            if let Some(h) = c.per_host_bandwidth_bps {
                write!(f, "; {} per host", format_bps(h))?;
            }
            writeln!(f)?;
        }
        write!(
            f,
            "per-host bandwidth: {}",
            format_bps(self.per_host_bandwidth_bps)
        )?;
        if self.per_host_bandwidth_max_bps != self.per_host_bandwidth_bps {
            write!(f, " to {}", format_bps(self.per_host_bandwidth_max_bps))?;
        }
        writeln!(f)?;
        writeln!(f, "diameter: {} hops", self.diameter_hops)?;
        writeln!(f, "bisection bandwidth: {}", self.bisection)
    }
}

/// `s` with Graphviz's escapes for a quoted string.
fn escaped(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"")
}

/// `s` as a quoted Graphviz ID.
fn quoted(s: &str) -> String {
    format!("\"{}\"", escaped(s))
}

/// A Graphviz drawing of `g` (`dot -Tsvg`): hosts as boxes labelled with their coordinates
/// where the fabric has them, switches as ellipses, one undirected edge per link labelled with
/// its class and bandwidth.
pub fn to_dot(g: &Graph) -> String {
    let mut out = String::new();
    // Writing to a String cannot fail.
    let _ = writeln!(out, "graph fabric {{");
    let _ = writeln!(
        out,
        "  // fabemu {} fabric: {} hosts, {} nodes, {} links",
        g.fabric().name(),
        g.host_count(),
        g.nodes().len(),
        g.links().len()
    );
    let _ = writeln!(out, "  node [fontname=\"Helvetica\"];");
    let _ = writeln!(out, "  edge [fontname=\"Helvetica\", fontsize=9];");
    for (id, node) in g.nodes().iter().enumerate() {
        let name = quoted(&node.name);
        match g.host_index(id) {
            Some(rank) => {
                // `\n` is Graphviz's line break inside a label.
                let label = match g.coordinates(rank) {
                    Some(c) => {
                        let c: Vec<String> = c.iter().map(usize::to_string).collect();
                        format!("\"{}\\n[{}]\"", escaped(&node.name), c.join(","))
                    }
                    None => name.clone(),
                };
                let _ = writeln!(out, "  {name} [shape=box, label={label}];");
            }
            None => {
                let _ = writeln!(out, "  {name} [shape=ellipse];");
            }
        }
    }
    for l in g.links() {
        let _ = writeln!(
            out,
            "  {} -- {} [label={}];",
            quoted(&g.node(l.a).name),
            quoted(&g.node(l.b).name),
            quoted(&format!("{} {}", l.class, format_bps(l.bandwidth_bps)))
        );
    }
    out.push_str("}\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_are_exact() {
        assert_eq!(format_bps(429_496_729_600), "429.4967296 Gb/s");
        assert_eq!(format_bps(400_000_000_000), "400 Gb/s");
        assert_eq!(format_bps(1_600_000_000_000), "1.6 Tb/s");
        assert_eq!(format_bps(999), "999 b/s");
        assert_eq!(format_bps(1_500), "1.5 kb/s");
        assert_eq!(format_ps(500_000), "500 ns");
        assert_eq!(format_ps(250), "0.25 ns");
    }

    #[test]
    fn dot_quotes_names_and_labels_coordinates() {
        let mut g = Graph::new();
        let a = g.add_host("a\"b").unwrap();
        let s = g.add_switch("s\\1").unwrap();
        g.add_link(a, s, 1_000, 1).unwrap();
        let dot = to_dot(&g);
        assert!(dot.starts_with("graph fabric {"), "{dot}");
        assert!(dot.contains("\"a\\\"b\" [shape=box"), "{dot}");
        assert!(dot.contains("\"s\\\\1\" [shape=ellipse]"), "{dot}");
        assert!(dot.contains("[label=\"explicit 1 kb/s\"]"), "{dot}");
        let t = crate::torus(&[2, 3], 1, 1).unwrap();
        assert!(to_dot(&t).contains("label=\"h5\\n[1,2]\""));
    }
}
