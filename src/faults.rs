//! Fault injection, from the scenario's `faults:` list to what the engine and switches do.
//!
//! Each entry names a target — a link by its two ends (one direction with `direction: a->b`)
//! or a node — one effect and a time window. The effects on the wire (down, random loss, bit
//! errors, lower bandwidth) become rules on the transmitting ports of the link directions
//! involved ([`fabemu_fabric::fault`]); a failed node is every direction into and out of it
//! being down.
//!
//! **Failover.** A link or node that is down is noticed `routing.failover` later (detection
//! plus route convergence, as BFD and a routing protocol would give); from then on every
//! forwarding node routes around it — switches, and hosts with several ports (a relaying host
//! forwards by its table, and a multi-port NIC re-picks its QPs' egress ports by it). The rule,
//! per node and destination: keep, of the fabric's equal-cost next hops, those whose link is up
//! and from which the destination is still reachable along the fabric's routes — so a spine
//! that lost its link to a leaf stops being used toward that leaf by every other leaf too. If
//! none is left, recompute as a link-state protocol would: the next hops on a shortest path of
//! the graph minus the failed links and nodes, through switches and the hosts the fabric's
//! routes already relay through (round a ring the other way, round a torus the other direction
//! or through another dimension). The two never loop: a node on the fabric's routes only hands
//! frames to nodes that reach the destination by those routes, and a fallback hop is one hop
//! closer in the surviving graph. A node with no path at all drops the frames (counted as
//! blackholed). A recovery is taken back the same delay later. The set of failed links changes only at the
//! window edges, so the tables are computed before the run, once per distinct set, and handed
//! to the switches with the time to take them.

use std::collections::BTreeSet;

use fabemu_fabric::fault::{FaultKind, FaultPlan, FaultWindow, PortFault};
use fabemu_fabric::host::HostDirectory;
use fabemu_fabric::link::Rate;
use fabemu_fabric::route::RouteTable;
use fabemu_fabric::units::Time;
use fabemu_topologies::{Graph, NodeKind, Routes};
use std::collections::HashMap;

use crate::scenario::{FaultSpec, FieldPath, ScenarioError, Source};

/// At most this many window edges of link and node failures before `until` (a flap with a tiny
/// period would otherwise ask for millions of route changes).
const MAX_CHANGES: usize = 100_000;

/// One fault entry, resolved against the fabric.
#[derive(Clone, Debug)]
pub struct Resolved {
    /// What the report calls it: `link leaf0-spine0`, `link h1->leaf0`, `node h3`.
    pub target: String,
    /// The effect, as the report names it: `down`, `loss 0.01`, `ber 1e-9`, `bandwidth 25 Gb/s`.
    pub effect: String,
    /// When it is active.
    pub window: FaultWindow,
    /// What it does on the wire.
    pub kind: FaultKind,
    /// The link directions it acts on: transmitting (node, port).
    pub directions: Vec<(usize, usize)>,
    /// The links it takes down (for routing), when it is a failure.
    pub down_links: Vec<usize>,
    /// The node it takes down, when it is a node failure.
    pub down_node: Option<usize>,
}

/// The links and the nodes down at one time (sorted).
type Failed = (Vec<usize>, Vec<usize>);

/// What a run needs: the engine's rules, and per node the route tables to take and when.
pub(crate) struct Setup {
    pub(crate) plan: FaultPlan,
    pub(crate) reroutes: Vec<Vec<(Time, RouteTable)>>,
}

fn err(src: &Source, i: usize, field: &str, msg: impl Into<String>) -> ScenarioError {
    let p = FieldPath::root().key("faults").index(i);
    let p = if field.is_empty() { p } else { p.key(field) };
    src.error_at(&p, msg)
}

/// Checks and resolves every fault entry against the fabric `g`.
pub fn resolve(src: &Source, g: &Graph) -> Result<Vec<Resolved>, ScenarioError> {
    src.scenario
        .faults
        .iter()
        .enumerate()
        .map(|(i, f)| resolve_one(src, g, i, f))
        .collect()
}

fn resolve_one(
    src: &Source,
    g: &Graph,
    i: usize,
    f: &FaultSpec,
) -> Result<Resolved, ScenarioError> {
    let window = fault_window(src, i, f)?;
    let (kind, effect) = fault_effect(src, i, f)?;
    let target = match (&f.link, &f.node) {
        (Some(_), Some(_)) => Err(err(src, i, "node", "give `link` or `node`, not both")),
        (None, None) => Err(err(
            src,
            i,
            "",
            "no target: give `link: [a, b]` or `node: NAME`",
        )),
        (None, Some(name)) => node_target(src, g, i, f, name, kind),
        (Some(ends), None) => link_target(src, g, i, f, ends, kind),
    }?;
    Ok(Resolved {
        target: target.name,
        effect,
        window,
        kind,
        directions: target.directions,
        down_links: target.down_links,
        down_node: target.down_node,
    })
}

/// What a fault entry acts on, resolved against the fabric.
struct Target {
    name: String,
    directions: Vec<(usize, usize)>,
    down_links: Vec<usize>,
    down_node: Option<usize>,
}

/// Checks entry `i`'s `from`/`at`, `until` and `period` and gives its window.
fn fault_window(src: &Source, i: usize, f: &FaultSpec) -> Result<FaultWindow, ScenarioError> {
    if f.from.is_some() && f.at.is_some() {
        return Err(err(src, i, "at", "give `from` or `at`, not both"));
    }
    let from = f.from.or(f.at).unwrap_or(Time::ZERO);
    let until = f.until.unwrap_or(Time::NEVER);
    if until <= from {
        return Err(err(
            src,
            i,
            "until",
            format!("the window ends ({until}) before it starts ({from})"),
        ));
    }
    if let Some(p) = f.period {
        if f.until.is_none() {
            return Err(err(
                src,
                i,
                "period",
                "a flap needs `until` (the end of its first down stretch)",
            ));
        }
        if p <= until.saturating_sub(from) {
            return Err(err(
                src,
                i,
                "period",
                format!(
                    "{p} is not longer than the window ({}): the fault would never end",
                    until.saturating_sub(from)
                ),
            ));
        }
    }
    Ok(FaultWindow {
        from,
        until,
        period: f.period,
    })
}

/// Checks that entry `i` gives exactly one valid effect and gives it with its report name.
fn fault_effect(
    src: &Source,
    i: usize,
    f: &FaultSpec,
) -> Result<(FaultKind, String), ScenarioError> {
    let mut effects = Vec::new();
    if let Some(d) = f.down {
        if !d {
            return Err(err(
                src,
                i,
                "down",
                "`down: false` is no fault; leave the entry out",
            ));
        }
        effects.push(("down", FaultKind::Down, "down".to_string()));
    }
    if let Some(p) = f.loss {
        if !(0.0..=1.0).contains(&p) {
            return Err(err(
                src,
                i,
                "loss",
                format!("{p} is not a probability (0..1)"),
            ));
        }
        effects.push(("loss", FaultKind::Loss(p), format!("loss {p}")));
    }
    if let Some(b) = f.ber {
        if !(0.0..=1.0).contains(&b) {
            return Err(err(
                src,
                i,
                "ber",
                format!("{b} is not a bit error rate (0..1)"),
            ));
        }
        effects.push(("ber", FaultKind::Ber(b), format!("ber {b:e}")));
    }
    if let Some(bw) = f.bandwidth {
        if bw.bps() == 0 {
            return Err(err(
                src,
                i,
                "bandwidth",
                "must be greater than zero; use `down: true` for a failed link",
            ));
        }
        effects.push((
            "bandwidth",
            FaultKind::Bandwidth(Rate::new(bw)),
            format!("bandwidth {bw}"),
        ));
    }
    match effects.as_slice() {
        [(_, k, e)] => Ok((*k, e.clone())),
        [] => Err(err(
            src,
            i,
            "",
            "no effect: give one of `down: true`, `loss`, `ber`, `bandwidth`",
        )),
        [_, (second, ..), ..] => Err(err(
            src,
            i,
            second,
            "one effect per entry; write a second entry for another",
        )),
    }
}

/// The node named `name` in entry `i`'s `field`.
fn find_node(
    src: &Source,
    g: &Graph,
    i: usize,
    field: &str,
    name: &str,
) -> Result<usize, ScenarioError> {
    g.find(name).ok_or_else(|| {
        err(
            src,
            i,
            field,
            format!("unknown node `{name}` (`fabemu topo --links` lists the fabric)"),
        )
    })
}

/// Entry `i`'s `node: NAME`: every direction into and out of the node, and its links.
fn node_target(
    src: &Source,
    g: &Graph,
    i: usize,
    f: &FaultSpec,
    name: &str,
    kind: FaultKind,
) -> Result<Target, ScenarioError> {
    if f.direction.is_some() {
        return Err(err(src, i, "direction", "a direction belongs to a link"));
    }
    let n = find_node(src, g, i, "node", name)?;
    if !matches!(kind, FaultKind::Down) {
        return Err(err(
            src,
            i,
            "node",
            "a node can only be `down`; loss, ber and bandwidth apply to links",
        ));
    }
    let mut directions = Vec::new();
    let mut down_links = Vec::new();
    for (p, port) in g.ports(n).iter().enumerate() {
        directions.push((n, p));
        directions.push((port.peer, port.peer_port));
        down_links.push(port.link);
    }
    Ok(Target {
        name: format!("node {name}"),
        directions,
        down_links,
        down_node: Some(n),
    })
}

/// Entry `i`'s `link: [a, b]` (with its `direction`): the directions of every link joining
/// the two ends, and the links when it is a failure.
fn link_target(
    src: &Source,
    g: &Graph,
    i: usize,
    f: &FaultSpec,
    ends: &[String],
    kind: FaultKind,
) -> Result<Target, ScenarioError> {
    let [a, b] = ends else {
        return Err(err(
            src,
            i,
            "link",
            format!("a link is its two ends, `[a, b]`; got {} names", ends.len()),
        ));
    };
    let na = find_node(src, g, i, "link", a)?;
    let nb = find_node(src, g, i, "link", b)?;
    let ports: Vec<(usize, usize)> = g
        .ports(na)
        .iter()
        .enumerate()
        .filter(|(_, p)| p.peer == nb)
        .map(|(k, _)| (na, k))
        .collect();
    if ports.is_empty() {
        return Err(err(
            src,
            i,
            "link",
            format!("no link joins `{a}` and `{b}` (`fabemu topo --links` lists them)"),
        ));
    }
    let (forward, backward) = match &f.direction {
        None => (true, true),
        Some(d) => match d.split_once("->").map(|(x, y)| (x.trim(), y.trim())) {
            Some((x, y)) if x == a && y == b => (true, false),
            Some((x, y)) if x == b && y == a => (false, true),
            _ => {
                return Err(err(
                    src,
                    i,
                    "direction",
                    format!("`{d}` is not `{a}->{b}` or `{b}->{a}`"),
                ))
            }
        },
    };
    let mut directions = Vec::new();
    let mut down_links = Vec::new();
    for &(n, p) in &ports {
        let info = &g.ports(n)[p];
        if forward {
            directions.push((n, p));
        }
        if backward {
            directions.push((info.peer, info.peer_port));
        }
        down_links.push(info.link);
    }
    let name = match (forward, backward) {
        (true, true) => format!("link {a}-{b}"),
        (true, false) => format!("link {a}->{b}"),
        _ => format!("link {b}->{a}"),
    };
    if !matches!(kind, FaultKind::Down) {
        down_links.clear();
    }
    Ok(Target {
        name,
        directions,
        down_links,
        down_node: None,
    })
}

/// How many times `w` changes up to `horizon` (an upper bound of `w.changes(horizon).len()`),
/// by arithmetic.
fn change_count(w: &FaultWindow, horizon: Time) -> u64 {
    if w.from > horizon {
        return 0;
    }
    let len = w.until.ps().saturating_sub(w.from.ps());
    match w.period {
        Some(p) if p.ps() > len && w.until != Time::NEVER => {
            2 * ((horizon.ps() - w.from.ps()) / p.ps() + 1)
        }
        _ => 2,
    }
}

/// Builds the engine's fault rules and the switches' failover route tables.
pub(crate) fn setup(
    src: &Source,
    g: &Graph,
    routes: &Routes,
    directory: &HostDirectory,
) -> Result<Setup, ScenarioError> {
    let s = &src.scenario;
    let resolved = resolve(src, g)?;
    let mut plan = FaultPlan {
        rules: Vec::new(),
        entries: resolved.len(),
        seed: s.seed,
    };
    for (i, r) in resolved.iter().enumerate() {
        for &(n, p) in &r.directions {
            plan.rules.push((
                n as u32,
                p,
                PortFault {
                    entry: i as u32,
                    window: r.window,
                    kind: r.kind,
                },
            ));
        }
    }
    let mut reroutes = vec![Vec::new(); g.nodes().len()];
    // Window edges of the failures, in time order.
    let mut edges: BTreeSet<Time> = BTreeSet::new();
    // Counted before any is listed: a flap of 2 ps over 10 s would list 10^13.
    let mut count = 0u64;
    for (i, r) in resolved.iter().enumerate() {
        if r.down_links.is_empty() && r.down_node.is_none() {
            continue;
        }
        count = count.saturating_add(change_count(&r.window, s.until()));
        if count > MAX_CHANGES as u64 {
            let field = if r.window.period.is_some() {
                "period"
            } else {
                ""
            };
            return Err(err(
                src,
                i,
                field,
                format!(
                    "the failures would change the routes about {count} times before `until` \
                     ({}), more than {MAX_CHANGES}; lengthen the period or shorten `until`",
                    s.until()
                ),
            ));
        }
    }
    for r in resolved
        .iter()
        .filter(|r| !r.down_links.is_empty() || r.down_node.is_some())
    {
        for (t, _) in r.window.changes(s.until()) {
            edges.insert(t);
            if edges.len() > MAX_CHANGES {
                return Err(src.error_at(
                    &FieldPath::root().key("faults"),
                    format!("more than {MAX_CHANGES} failures and recoveries before `until`; lengthen the period or shorten `until`"),
                ));
            }
        }
    }
    let mut tables: HashMap<Failed, Vec<Option<RouteTable>>> = HashMap::new();
    let fwd = if edges.is_empty() {
        Vec::new()
    } else {
        forwarders(g, routes)
    };
    let mut current: Failed = (Vec::new(), Vec::new());
    for t in edges {
        let mut links: Vec<usize> = Vec::new();
        let mut nodes: Vec<usize> = Vec::new();
        for r in resolved.iter().filter(|r| r.window.active(t)) {
            links.extend(&r.down_links);
            nodes.extend(r.down_node);
        }
        links.sort_unstable();
        links.dedup();
        nodes.sort_unstable();
        nodes.dedup();
        let state = (links, nodes);
        if state == current {
            continue;
        }
        let per_node = tables
            .entry(state.clone())
            .or_insert_with(|| failover_tables(g, routes, directory, &fwd, &state.0, &state.1));
        let at = t + s.failover();
        for (n, table) in per_node.iter().enumerate() {
            if let Some(table) = table {
                reroutes[n].push((at, table.clone()));
            }
        }
        current = state;
    }
    Ok(Setup { plan, reroutes })
}

/// The nodes that forward frames for others: switches, and hosts the fabric's own routes pass
/// through (rings, tori, multi-dimensional host fabrics). A host with several ports that the
/// routes never cross (dual-homed NICs under switches) is not made a router by a failure.
fn forwarders(g: &Graph, routes: &Routes) -> Vec<bool> {
    let n = g.nodes().len();
    let mut fwd: Vec<bool> = g
        .nodes()
        .iter()
        .map(|node| node.kind == NodeKind::Switch)
        .collect();
    let multi: Vec<usize> = g.hosts().filter(|&h| g.ports(h).len() > 1).collect();
    if multi.is_empty() {
        return fwd;
    }
    for dst in g.hosts() {
        for v in 0..n {
            for &p in routes.next_hops(v, dst) {
                if let Some(info) = g.ports(v).get(p) {
                    if info.peer != dst && g.node(info.peer).kind == NodeKind::Host {
                        fwd[info.peer] = true;
                    }
                }
            }
        }
    }
    fwd
}

/// Hops from every node to `dst` over live links and nodes, passing only through forwarders
/// (`u32::MAX`: cut off). A breadth-first search from `dst`.
fn surviving_distances(
    g: &Graph,
    dst: usize,
    fwd: &[bool],
    link_down: &[bool],
    node_down: &[bool],
) -> Vec<u32> {
    let mut dist = vec![u32::MAX; g.nodes().len()];
    if node_down.get(dst).copied().unwrap_or(true) {
        return dist;
    }
    dist[dst] = 0;
    let mut queue = std::collections::VecDeque::from([dst]);
    while let Some(x) = queue.pop_front() {
        for info in g.ports(x) {
            let u = info.peer;
            if link_down.get(info.link).copied().unwrap_or(false)
                || node_down.get(u).copied().unwrap_or(true)
                || dist[u] != u32::MAX
            {
                continue;
            }
            dist[u] = dist[x] + 1;
            if fwd[u] {
                queue.push_back(u);
            }
        }
    }
    dist
}

/// Every forwarding node's route table with `links` and `nodes` failed (see the module doc):
/// switches, and hosts with several ports (a relaying host forwards by it, and every
/// multi-port NIC picks its QPs' egress ports by it); `None` for the other hosts.
fn failover_tables(
    g: &Graph,
    routes: &Routes,
    directory: &HostDirectory,
    fwd: &[bool],
    links: &[usize],
    nodes: &[usize],
) -> Vec<Option<RouteTable>> {
    let n = g.nodes().len();
    let mut link_down = vec![false; g.links().len()];
    for &l in links {
        if let Some(d) = link_down.get_mut(l) {
            *d = true;
        }
    }
    let mut node_down = vec![false; n];
    for &x in nodes {
        if let Some(d) = node_down.get_mut(x) {
            *d = true;
        }
    }
    let mut tables: Vec<Option<RouteTable>> = g
        .nodes()
        .iter()
        .enumerate()
        .map(|(id, node)| {
            (node.kind == NodeKind::Switch || g.ports(id).len() > 1).then(RouteTable::new)
        })
        .collect();
    // reach[v]: 0 unknown, 1 being visited, 2 reaches the destination, 3 does not.
    let mut reach = vec![0u8; n];
    for dst in g.hosts() {
        reach.iter_mut().for_each(|r| *r = 0);
        let Some(addr) = g
            .host_index(dst)
            .and_then(|rank| directory.get(rank as u32))
            .map(|a| a.ip)
        else {
            continue;
        };
        // The surviving graph's distances, computed only when some node needs them.
        let mut dist: Option<Vec<u32>> = None;
        for v in 0..n {
            if v == dst {
                continue;
            }
            if let Some(Some(table)) = tables.get_mut(v) {
                let mut live: Vec<usize> = routes
                    .next_hops(v, dst)
                    .iter()
                    .copied()
                    .filter(|&p| {
                        hop_alive(g, routes, v, p, dst, &link_down, &node_down, &mut reach)
                    })
                    .collect();
                if live.is_empty() && !node_down[v] {
                    // No equal-cost hop survives: a shortest path of the surviving graph, as
                    // a link-state protocol would recompute it.
                    let d = dist.get_or_insert_with(|| {
                        surviving_distances(g, dst, fwd, &link_down, &node_down)
                    });
                    if d[v] != u32::MAX {
                        live = g
                            .ports(v)
                            .iter()
                            .enumerate()
                            .filter(|(_, info)| {
                                let u = info.peer;
                                !link_down.get(info.link).copied().unwrap_or(false)
                                    && !node_down[u]
                                    && d[u].saturating_add(1) == d[v]
                                    && (u == dst || fwd[u])
                            })
                            .map(|(p, _)| p)
                            .collect();
                    }
                }
                if !live.is_empty() {
                    table.insert(addr, &live);
                }
            }
        }
    }
    tables
}

/// Whether `v`'s next hop through port `p` toward `dst` still leads there.
#[allow(clippy::too_many_arguments)]
fn hop_alive(
    g: &Graph,
    routes: &Routes,
    v: usize,
    p: usize,
    dst: usize,
    link_down: &[bool],
    node_down: &[bool],
    reach: &mut [u8],
) -> bool {
    let Some(info) = g.ports(v).get(p) else {
        return false;
    };
    !link_down.get(info.link).copied().unwrap_or(false)
        && reaches(g, routes, info.peer, dst, link_down, node_down, reach)
}

/// Whether `v` reaches `dst` along the routes through live links and nodes (memoized in
/// `reach`; routes are loop-free, a node met again on the way counts as not reaching).
fn reaches(
    g: &Graph,
    routes: &Routes,
    v: usize,
    dst: usize,
    link_down: &[bool],
    node_down: &[bool],
    reach: &mut [u8],
) -> bool {
    if node_down.get(v).copied().unwrap_or(true) {
        return false;
    }
    if v == dst {
        return true;
    }
    match reach.get(v).copied() {
        Some(2) => return true,
        Some(1) | Some(3) | None => return false,
        _ => {}
    }
    reach[v] = 1;
    let ok = routes
        .next_hops(v, dst)
        .iter()
        .any(|&p| hop_alive(g, routes, v, p, dst, link_down, node_down, reach));
    reach[v] = if ok { 2 } else { 3 };
    ok
}

/// The report's `faults` section.
#[derive(Debug, serde::Serialize)]
pub struct FaultsReport {
    /// The detection and convergence delay before switches route around a failure.
    pub failover_ps: u64,
    /// Per scenario entry, in order.
    pub entries: Vec<FaultEntryReport>,
    /// Frames switches and relaying hosts dropped for want of a surviving next hop, over the
    /// run.
    pub blackholed_frames: u64,
    /// Where they were dropped: per switch (then per relaying host), its count (nodes with
    /// none left out).
    pub blackholed_at: Vec<BlackholedAt>,
}

/// Frames one switch or relaying host blackholed.
#[derive(Debug, serde::Serialize)]
pub struct BlackholedAt {
    /// The switch or relaying host (the key keeps its first name).
    pub switch: String,
    /// Frames dropped without a next hop.
    pub frames: u64,
    /// The failures that never end (a switch without a route after failover lost it to one of
    /// them, or to a failure whose window had not yet been routed around).
    pub cut_off_by: Vec<String>,
}

/// What one fault entry did.
#[derive(Debug, serde::Serialize)]
pub struct FaultEntryReport {
    /// What failed: `link a-b`, `link a->b`, `node NAME`.
    pub target: String,
    /// What it did: `down`, `loss P`, `ber B`, `bandwidth BW`.
    pub effect: String,
    /// Start of the (first) window.
    pub from_ps: u64,
    /// End of the (first) window; absent when it lasts.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub until_ps: Option<u64>,
    /// The flap period, when it repeats.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub period_ps: Option<u64>,
    /// Frames lost on its link directions (down, or random loss).
    pub frames_lost: u64,
    /// Frames corrupted by bit errors (discarded by the receiver's frame check).
    pub frames_corrupted: u64,
    /// Messages in flight during the fault's (first) window: every message posted to a NIC
    /// (the workload's `messages:` and every message of a collective), posted before the window
    /// ends and not acknowledged to its sender by its start.
    pub messages_in_flight: u64,
    /// Of those, messages acknowledged only at or after the window's end (or never).
    pub messages_delayed: u64,
    /// For a failure: when switches and relaying hosts had routed around it
    /// (`from + routing.failover`), its recovery time as far as routing goes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rerouted_at_ps: Option<u64>,
    /// Queue pairs that lost a frame to the fault (a data frame of theirs, or an ACK/NAK
    /// meant for them).
    pub qps_hit: usize,
    /// Measured time to recover: from the fault's start until the last queue pair that lost a
    /// frame to it finished recovering from its last such loss — the first loss recovery of
    /// that QP (from the NAK or timeout that detected a loss until everything it had sent by
    /// then was acknowledged) to end after the frame was lost. A QP whose lost frame needed
    /// no recovery (an ACK a later one covered) does not count. Absent when the fault lost no
    /// frame, or when a QP never recovered (see `qps_unrecovered`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub time_to_recover_ps: Option<u64>,
    /// Queue pairs that lost a frame to the fault and never finished the recovery (the run
    /// ended first or the QP gave up); absent when none.
    #[serde(skip_serializing_if = "is_zero")]
    pub qps_unrecovered: usize,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// What the NICs measured of the faults (see [`fabemu_fabric::host::FaultWatch`]).
pub struct Measured<'a> {
    /// Per fault entry, messages in flight during its window and delayed by it.
    pub messages: &'a [(u64, u64)],
    /// Every loss recovery, with the host (rank) whose QP made it.
    pub recoveries: &'a [(u32, fabemu_fabric::host::Recovery)],
}

/// Per entry: QP pairs hit, when the last of them recovered (`None` inside: never), and how
/// many never did (the rule in [`FaultEntryReport::time_to_recover_ps`]).
fn recovery_times(
    entries: usize,
    hits: &[fabemu_fabric::fault::FaultHit],
    recoveries: &[(u32, fabemu_fabric::host::Recovery)],
    directory: &HostDirectory,
) -> Vec<(usize, Option<Time>, usize)> {
    let mut by_qp: HashMap<(u32, u32, u32), Vec<&fabemu_fabric::host::Recovery>> = HashMap::new();
    for (owner, r) in recoveries {
        by_qp
            .entry((*owner, r.peer, u32::from(r.class)))
            .or_default()
            .push(r);
    }
    let mut out = vec![(0usize, None::<Time>, 0usize); entries];
    for h in hits {
        let (Some(owner), Some(peer), Some(slot)) = (
            directory.index_of(h.owner),
            directory.index_of(h.peer),
            out.get_mut(h.entry as usize),
        ) else {
            continue;
        };
        slot.0 += 1;
        let first = by_qp
            .get(&(owner, peer, h.class))
            .and_then(|rs| rs.iter().find(|r| r.end.is_none_or(|e| e > h.at)));
        if let Some(r) = first {
            match r.end {
                Some(end) => slot.1 = Some(slot.1.map_or(end, |t| t.max(end))),
                None => slot.2 += 1,
            }
        }
    }
    out
}

impl FaultsReport {
    /// Builds the section; `None` for a scenario without faults.
    pub fn build(
        src: &Source,
        g: &Graph,
        out: &fabemu_fabric::engine::FaultOutput,
        measured: &Measured<'_>,
        blackholed: &[(String, u64)],
    ) -> Option<FaultsReport> {
        let resolved = resolve(src, g).ok()?;
        if resolved.is_empty() {
            return None;
        }
        let counts = &out.entries;
        let directory = crate::world::directory(src, g).ok()?;
        let recovered = recovery_times(resolved.len(), &out.hits, measured.recoveries, &directory);
        let failover = src.scenario.failover();
        let down_now: Vec<String> = resolved
            .iter()
            .filter(|r| matches!(r.kind, FaultKind::Down) && r.window.until == Time::NEVER)
            .map(|r| r.target.clone())
            .collect();
        let entries = resolved
            .iter()
            .enumerate()
            .map(|(i, r)| {
                let c = counts.get(i).copied().unwrap_or_default();
                let (from, until) = (r.window.from.ps(), r.window.until.ps());
                let (in_flight, delayed) = measured.messages.get(i).copied().unwrap_or_default();
                let (qps_hit, last, unrecovered) = recovered.get(i).copied().unwrap_or_default();
                FaultEntryReport {
                    target: r.target.clone(),
                    effect: r.effect.clone(),
                    from_ps: from,
                    until_ps: (r.window.until != Time::NEVER).then_some(until),
                    period_ps: r.window.period.map(Time::ps),
                    frames_lost: c.lost,
                    frames_corrupted: c.corrupted,
                    messages_in_flight: in_flight,
                    messages_delayed: delayed,
                    qps_hit,
                    time_to_recover_ps: last
                        .filter(|_| unrecovered == 0)
                        .map(|t| t.ps().saturating_sub(from)),
                    qps_unrecovered: unrecovered,
                    rerouted_at_ps: (!r.down_links.is_empty() || r.down_node.is_some())
                        .then(|| (r.window.from + failover).ps()),
                }
            })
            .collect();
        let blackholed_at: Vec<BlackholedAt> = blackholed
            .iter()
            .filter(|(_, n)| *n > 0)
            .map(|(name, n)| BlackholedAt {
                switch: name.clone(),
                frames: *n,
                cut_off_by: down_now.clone(),
            })
            .collect();
        Some(FaultsReport {
            failover_ps: failover.ps(),
            entries,
            blackholed_frames: blackholed_at.iter().map(|b| b.frames).sum(),
            blackholed_at,
        })
    }
}

/// Why ranks wait when a host failed: one line per failed host named by a `node` fault,
/// for the run's invariant violations.
pub fn failed_hosts(src: &Source, g: &Graph) -> Vec<String> {
    let Ok(resolved) = resolve(src, g) else {
        return Vec::new();
    };
    resolved
        .iter()
        .filter_map(|r| {
            let n = r.down_node?;
            (g.node(n).kind == NodeKind::Host).then(|| {
                let until = if r.window.until == Time::NEVER {
                    String::new()
                } else {
                    format!(" until {}", r.window.until)
                };
                format!(
                    "host {} failed at {}{until} (fault `{} {}`): messages to and from it cannot complete",
                    g.node(n).name,
                    r.window.from,
                    r.target,
                    r.effect
                )
            })
        })
        .collect()
}
