//! Bisection bandwidth by fabric kind: formulas, closed-form bounds, and exhaustive search
//! (max-flow placement of switches) for small fabrics. What each kind gets is documented on
//! [`Bisection`].

use std::collections::HashMap;

use crate::dimensional::DimKind;
use crate::graph::{FabricKind, Graph, NodeId, NodeKind};
use crate::summary::Bisection;

/// Host splits [`bisection`] may try in an exhaustive search.
pub(crate) const SEARCH_BUDGET: usize = 20_000;

/// The bisection bandwidth of `g` (see the [module documentation](self)).
pub(crate) fn bisection(g: &Graph) -> Bisection {
    let n = g.host_count();
    if n < 2 {
        return Bisection::Exact(0);
    }
    let b0 = g.links().first().map_or(0, |l| u128::from(l.bandwidth_bps));
    let exact = |v: u128| Bisection::Exact(sat(v));
    match g.fabric() {
        FabricKind::Star { hosts } => exact((*hosts / 2) as u128 * b0),
        FabricKind::Ring { hosts } => exact(if *hosts == 2 { b0 } else { 2 * b0 }),
        FabricKind::LeafSpine(s) => {
            let half = (n / 2) as u128;
            let (l, h) = (s.leaves as u128, s.hosts_per_leaf as u128);
            let (bh, bf) = (u128::from(s.host_bw_bps), u128::from(s.fabric_bw_bps));
            let best = (0..=l)
                .map(|a| (a * h).abs_diff(half) * bh + s.spines as u128 * a.min(l - a) * bf)
                .min()
                .unwrap_or(0);
            exact(best)
        }
        FabricKind::FatTree(s) => {
            let cube = ((s.k / 2) as u128).pow(3);
            let per = (s.oversubscription as u128 * u128::from(s.host_bw_bps))
                .min(u128::from(s.edge_agg_bw_bps))
                .min(u128::from(s.agg_core_bw_bps));
            exact(cube * per)
        }
        FabricKind::Torus(t) => {
            let dims: Vec<_> = t
                .sizes
                .iter()
                .map(|&s| (DimKind::Ring, s, u128::from(t.bandwidth_bps)))
                .collect();
            dimensional(g, &dims)
        }
        FabricKind::MultiDim(specs) => {
            let dims: Vec<_> = specs
                .iter()
                .map(|d| (d.kind, d.size, u128::from(d.bandwidth_bps)))
                .collect();
            dimensional(g, &dims)
        }
        FabricKind::Explicit => match exhaustive(g, SEARCH_BUDGET) {
            Some(v) => Bisection::Exact(v),
            None => Bisection::Bounds {
                at_least: 0,
                at_most: rank_split_cut(g),
            },
        },
    }
}

fn sat(v: u128) -> u64 {
    u64::try_from(v).unwrap_or(u64::MAX)
}

/// Bisection of a torus or multi-dimensional fabric from its dimensions `(kind, size, bw)`.
fn dimensional(g: &Graph, dims: &[(DimKind, usize, u128)]) -> Bisection {
    let n = g.host_count() as u128;
    if let [(kind, s, b)] = dims {
        let s = *s as u128;
        let v = match kind {
            DimKind::Ring if s == 2 => *b,
            DimKind::Ring => 2 * b,
            DimKind::FullyConnected => (s / 2) * s.div_ceil(2) * b,
            DimKind::Switch => (s / 2) * b,
        };
        return Bisection::Exact(sat(v));
    }
    // Upper bound: plane cuts through even dimensions.
    let plane = dims
        .iter()
        .filter(|(_, s, _)| s % 2 == 0)
        .map(|&(kind, s, b)| {
            let s = s as u128;
            let per_group = match kind {
                DimKind::Ring if s == 2 => 1,
                DimKind::Ring => 2,
                DimKind::FullyConnected => (s / 2) * (s / 2),
                DimKind::Switch => s / 2,
            };
            (n / s).saturating_mul(per_group).saturating_mul(b)
        })
        .min();
    let upper = match plane {
        Some(v) => sat(v),
        None => rank_split_cut(g),
    };
    // Lower bound: Q·b / load per directed link of the busiest dimension, load = num/den.
    let q = (n / 2) * n.div_ceil(2);
    let lower = dims
        .iter()
        .map(|&(kind, s, b)| {
            let s = s as u128;
            let (num, den) = match kind {
                DimKind::Ring if s == 2 => (n, 2),
                DimKind::Ring if s % 2 == 0 => (n * s, 8),
                DimKind::Ring => (n * (s * s - 1), 8 * s),
                DimKind::FullyConnected => (n, s),
                DimKind::Switch => (n * (s - 1), s),
            };
            q.checked_mul(b)
                .and_then(|x| x.checked_mul(den))
                .map_or(u128::MAX, |x| x / num.max(1))
        })
        .min()
        .map_or(0, sat);
    if lower >= upper {
        return Bisection::Exact(upper);
    }
    match exhaustive(g, SEARCH_BUDGET) {
        Some(v) => Bisection::Exact(v),
        None => Bisection::Bounds {
            at_least: lower,
            at_most: upper,
        },
    }
}

const INF: u128 = u128::MAX / 4;

/// A flow network for minimum cuts (Dinic's algorithm).
struct Flow {
    adj: Vec<Vec<usize>>,
    to: Vec<usize>,
    /// Capacity of each arc as set; `residual` is reset from it before each run.
    cap: Vec<u128>,
    residual: Vec<u128>,
    level: Vec<u32>,
    next: Vec<usize>,
}

impl Flow {
    fn new(nodes: usize) -> Self {
        Self {
            adj: vec![Vec::new(); nodes],
            to: Vec::new(),
            cap: Vec::new(),
            residual: Vec::new(),
            level: vec![0; nodes],
            next: vec![0; nodes],
        }
    }

    /// Adds arc `u → v` of capacity `c` and `v → u` of capacity `back`; returns the first's index.
    fn add(&mut self, u: usize, v: usize, c: u128, back: u128) -> usize {
        let e = self.to.len();
        self.to.extend([v, u]);
        self.cap.extend([c, back]);
        self.adj[u].push(e);
        self.adj[v].push(e + 1);
        e
    }

    fn max_flow(&mut self, s: usize, t: usize) -> u128 {
        self.residual.clone_from(&self.cap);
        let mut total = 0u128;
        loop {
            self.level.fill(u32::MAX);
            self.level[s] = 0;
            let mut queue = vec![s];
            let mut head = 0;
            while let Some(&u) = queue.get(head) {
                head += 1;
                for &e in &self.adj[u] {
                    let w = self.to[e];
                    if self.residual[e] > 0 && self.level[w] == u32::MAX {
                        self.level[w] = self.level[u] + 1;
                        queue.push(w);
                    }
                }
            }
            if self.level[t] == u32::MAX {
                return total;
            }
            self.next.fill(0);
            loop {
                let f = self.push(s, t, INF);
                if f == 0 {
                    break;
                }
                total = total.saturating_add(f);
            }
        }
    }

    fn push(&mut self, u: usize, t: usize, limit: u128) -> u128 {
        if u == t {
            return limit;
        }
        while self.next[u] < self.adj[u].len() {
            let e = self.adj[u][self.next[u]];
            let w = self.to[e];
            if self.residual[e] > 0 && self.level[w] == self.level[u] + 1 {
                let f = self.push(w, t, limit.min(self.residual[e]));
                if f > 0 {
                    self.residual[e] -= f;
                    self.residual[e ^ 1] += f;
                    return f;
                }
            }
            self.next[u] += 1;
        }
        0
    }
}

/// Interchangeable hosts: `members` hosts hanging by one link of `bw` off switch `attach`, or
/// one host (`single`) that is a node of the flow network itself.
struct Group {
    members: usize,
    bw: u128,
    attach: usize,
    /// For a single host: the arcs source → host and host → sink.
    single: Option<NodeId>,
    /// Arcs source → attach and attach → sink (or source → host, host → sink).
    arcs: (usize, usize),
}

/// The network for `g`: all links but those of grouped hosts, plus terminal arcs per group.
/// Source and sink are `nodes` and `nodes + 1`.
fn network(g: &Graph, group_hosts: bool) -> (Flow, Vec<Group>) {
    let nodes = g.nodes().len();
    let mut groups: Vec<Group> = Vec::new();
    let mut index: HashMap<(NodeId, u64), usize> = HashMap::new();
    let mut grouped = vec![false; nodes];
    for h in g.hosts() {
        let ports = g.ports(h);
        if let [p] = ports {
            let bw = g.link(p.link).bandwidth_bps;
            if group_hosts && g.node(p.peer).kind == NodeKind::Switch {
                grouped[h] = true;
                let k = *index.entry((p.peer, bw)).or_insert_with(|| {
                    groups.push(Group {
                        members: 0,
                        bw: u128::from(bw),
                        attach: p.peer,
                        single: None,
                        arcs: (0, 0),
                    });
                    groups.len() - 1
                });
                groups[k].members += 1;
                continue;
            }
        }
        groups.push(Group {
            members: 1,
            bw: INF,
            attach: h,
            single: Some(h),
            arcs: (0, 0),
        });
    }
    let (s, t) = (nodes, nodes + 1);
    let mut flow = Flow::new(nodes + 2);
    for l in g.links() {
        if !grouped[l.a] && !grouped[l.b] {
            let c = u128::from(l.bandwidth_bps);
            flow.add(l.a, l.b, c, c);
        }
    }
    for gr in &mut groups {
        gr.arcs = (flow.add(s, gr.attach, 0, 0), flow.add(gr.attach, t, 0, 0));
    }
    (flow, groups)
}

/// Cut of the split "`take[i]` members of group `i` on the source side".
fn cut(flow: &mut Flow, groups: &[Group], take: &[usize], s: usize, t: usize) -> u128 {
    for (gr, &x) in groups.iter().zip(take) {
        let (a, b) = gr.arcs;
        if gr.single.is_some() {
            flow.cap[a] = if x == 1 { INF } else { 0 };
            flow.cap[b] = if x == 1 { 0 } else { INF };
        } else {
            flow.cap[a] = x as u128 * gr.bw;
            flow.cap[b] = (gr.members - x) as u128 * gr.bw;
        }
    }
    flow.max_flow(s, t)
}

/// The cut between ranks `0..⌊N/2⌋` and the rest, switches placed optimally.
fn rank_split_cut(g: &Graph) -> u64 {
    let (mut flow, groups) = network(g, false);
    let half = g.host_count() / 2;
    let take: Vec<usize> = (0..groups.len()).map(|i| usize::from(i < half)).collect();
    let nodes = g.nodes().len();
    sat(cut(&mut flow, &groups, &take, nodes, nodes + 1))
}

/// The exact bisection by trying every split, or `None` if that takes more than `budget`
/// splits.
pub(crate) fn exhaustive(g: &Graph, budget: usize) -> Option<u64> {
    let n = g.host_count();
    if n < 2 {
        return Some(0);
    }
    let target = n / 2;
    let (mut flow, groups) = network(g, true);
    // ways[j]: splits of the groups so far putting j hosts on the source side (capped).
    let mut ways = vec![0usize; target + 1];
    ways[0] = 1;
    for gr in &groups {
        let mut next = vec![0usize; target + 1];
        for (j, &w) in ways.iter().enumerate().filter(|(_, &w)| w > 0) {
            for x in 0..=gr.members.min(target - j) {
                next[j + x] = next[j + x].saturating_add(w).min(budget + 1);
            }
        }
        ways = next;
    }
    if ways[target] > budget {
        return None;
    }
    // remaining[i]: members in groups i.. (to prune splits that cannot reach the target).
    let mut remaining = vec![0usize; groups.len() + 1];
    for i in (0..groups.len()).rev() {
        remaining[i] = remaining[i + 1] + groups[i].members;
    }
    let nodes = g.nodes().len();
    let mut take = vec![0usize; groups.len()];
    let mut best = u128::MAX;
    let mut search = Search {
        flow: &mut flow,
        groups: &groups,
        remaining: &remaining,
        s: nodes,
        t: nodes + 1,
    };
    search.run(0, target, &mut take, &mut best);
    Some(sat(best))
}

struct Search<'a> {
    flow: &'a mut Flow,
    groups: &'a [Group],
    remaining: &'a [usize],
    s: usize,
    t: usize,
}

impl Search<'_> {
    fn run(&mut self, i: usize, left: usize, take: &mut [usize], best: &mut u128) {
        if i == self.groups.len() {
            if left == 0 {
                let c = cut(self.flow, self.groups, take, self.s, self.t);
                *best = (*best).min(c);
            }
            return;
        }
        let m = self.groups[i].members;
        let rest = self.remaining[i + 1];
        for x in left.saturating_sub(rest)..=m.min(left) {
            take[i] = x;
            self.run(i + 1, left - x, take, best);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{fat_tree, leaf_spine, multi_dim, ring, star, torus, DimSpec, FatTreeSpec};
    use crate::{LeafSpineSpec, LinkClass};

    fn exact_by_search(g: &Graph) -> u64 {
        exhaustive(g, 2_000_000).expect("small enough to search")
    }

    /// The formula's value, which must be exact.
    fn formula(g: &Graph) -> u64 {
        match bisection(g) {
            Bisection::Exact(v) => v,
            other => panic!("{} not exact: {other:?}", g.fabric().name()),
        }
    }

    #[test]
    fn star_and_ring_formulas_are_exact() {
        for n in 1..=9 {
            let g = star(n, 10, 1).unwrap();
            assert_eq!(formula(&g), exact_by_search(&g), "star {n}");
            let g = ring(n, 10, 1).unwrap();
            assert_eq!(formula(&g), exact_by_search(&g), "ring {n}");
        }
    }

    #[test]
    fn leaf_spine_formula_is_exact() {
        for (leaves, spines, per) in [(1, 1, 4), (2, 1, 3), (3, 2, 2), (4, 2, 3), (5, 3, 1)] {
            for (bh, bf) in [(1, 1), (10, 1), (1, 10), (3, 7)] {
                let g = leaf_spine(LeafSpineSpec {
                    leaves,
                    spines,
                    hosts_per_leaf: per,
                    host_bw_bps: bh,
                    host_latency_ps: 1,
                    fabric_bw_bps: bf,
                    fabric_latency_ps: 1,
                })
                .unwrap();
                assert_eq!(
                    formula(&g),
                    exact_by_search(&g),
                    "leaf-spine {leaves}x{spines}x{per} bw {bh}/{bf}"
                );
            }
        }
    }

    #[test]
    fn fat_tree_formula_is_exact() {
        let shapes = [(2, 1), (2, 2), (2, 3), (2, 4), (4, 1), (4, 2)];
        let bandwidths = [
            (1, 1, 1),
            (1, 2, 3),
            (3, 2, 1),
            (2, 1, 2),
            (5, 3, 4),
            (1, 5, 5),
        ];
        for (k, r) in shapes {
            for (bh, bea, bac) in bandwidths {
                let g = fat_tree(FatTreeSpec {
                    k,
                    oversubscription: r,
                    host_bw_bps: bh,
                    host_latency_ps: 1,
                    edge_agg_bw_bps: bea,
                    edge_agg_latency_ps: 1,
                    agg_core_bw_bps: bac,
                    agg_core_latency_ps: 1,
                })
                .unwrap();
                assert_eq!(
                    formula(&g),
                    exact_by_search(&g),
                    "fat-tree k={k} r={r} bw {bh}/{bea}/{bac}"
                );
            }
        }
    }

    fn dims(list: &[(DimKind, usize, u64)]) -> Vec<DimSpec> {
        list.iter()
            .map(|&(kind, size, bandwidth_bps)| DimSpec {
                kind,
                size,
                bandwidth_bps,
                latency_ps: 1,
            })
            .collect()
    }

    #[test]
    fn dimensional_values_match_search() {
        use DimKind::*;
        let cases: Vec<Vec<(DimKind, usize, u64)>> = vec![
            vec![(Ring, 4, 1), (Ring, 4, 1)],
            vec![(Ring, 2, 1), (Ring, 2, 1), (Ring, 2, 1), (Ring, 2, 1)],
            vec![(Ring, 6, 1), (Ring, 2, 1)],
            vec![(Ring, 4, 1), (Ring, 3, 1)],
            vec![(Ring, 4, 3), (Ring, 4, 1)],
            vec![(FullyConnected, 4, 1), (Ring, 4, 1)],
            vec![(FullyConnected, 3, 1), (FullyConnected, 4, 1)],
            vec![(Ring, 2, 5), (FullyConnected, 4, 1)],
            vec![(Switch, 2, 1), (Ring, 4, 1)],
            vec![(Ring, 5, 1)],
            vec![(FullyConnected, 5, 1)],
            vec![(Switch, 7, 1)],
        ];
        for case in cases {
            let g = multi_dim(&dims(&case)).unwrap();
            let search = exact_by_search(&g);
            match bisection(&g) {
                Bisection::Exact(v) => assert_eq!(v, search, "{case:?}"),
                Bisection::Bounds { at_least, at_most } => {
                    assert!(at_least <= search && search <= at_most, "{case:?}");
                    panic!("{case:?}: expected a certified value, got bounds");
                }
            }
        }
        for sizes in [vec![4, 4], vec![2, 2, 2], vec![6, 2], vec![4, 3], vec![8]] {
            let g = torus(&sizes, 1, 1).unwrap();
            assert_eq!(formula(&g), exact_by_search(&g), "torus {sizes:?}");
        }
    }

    #[test]
    fn large_tori_are_certified_without_search() {
        let g = torus(&[8, 8, 8], 3, 1).unwrap();
        assert_eq!(bisection(&g), Bisection::Exact(2 * 512 / 8 * 3));
        let g = torus(&[4, 16, 6], 1, 1).unwrap();
        assert_eq!(bisection(&g), Bisection::Exact(2 * 384 / 16));
        assert_eq!(exhaustive(&g, SEARCH_BUDGET), None);
    }

    #[test]
    fn switch_bound_dimensions_are_searched_when_small() {
        use DimKind::*;
        // A switch dimension binds: the flow bound is loose, and these are small enough that
        // the search settles them; checked here against the bounds themselves.
        for case in [
            vec![(Ring, 2, 4), (Switch, 4, 1)],
            vec![(Switch, 4, 1), (Switch, 4, 1)],
            vec![(Ring, 3, 1), (Ring, 3, 1)],
            vec![(FullyConnected, 3, 1), (Switch, 3, 1)],
        ] {
            let g = multi_dim(&dims(&case)).unwrap();
            let search = exact_by_search(&g);
            assert_eq!(bisection(&g), Bisection::Exact(search), "{case:?}");
        }
        // Too large to search: bounds around the plane cut.
        let g = multi_dim(&dims(&[
            (Ring, 2, 200),
            (FullyConnected, 8, 100),
            (Switch, 4, 50),
        ]))
        .unwrap();
        match bisection(&g) {
            Bisection::Bounds { at_least, at_most } => {
                assert_eq!(at_most, 32 * 50); // 16 switches, 2 hosts cut off each
                assert_eq!(at_least, 64 * 4 * 50 / 12);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn explicit_graphs_search_or_bound() {
        // Two triangles joined by one link: the bisection is that link.
        let mut g = Graph::new();
        for i in 0..6 {
            g.add_host(format!("h{i}")).unwrap();
        }
        for (a, b) in [(0, 1), (1, 2), (2, 0), (3, 4), (4, 5), (5, 3), (2, 3)] {
            g.add_link(a, b, 7, 1).unwrap();
        }
        assert_eq!(bisection(&g), Bisection::Exact(7));
        assert_eq!(g.links()[0].class, LinkClass::Explicit);
        // The same as a large explicit fabric: rank split as the upper bound.
        assert_eq!(rank_split_cut(&g), 7);
        let big = fat_tree(FatTreeSpec::unit(8, 1)).unwrap();
        assert_eq!(rank_split_cut(&big), 64);
        assert_eq!(exhaustive(&big, 1000), None);
    }
}
