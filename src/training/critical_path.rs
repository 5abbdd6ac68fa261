//! The critical path of a finished iteration: the chain of nodes across ranks that set its
//! time, each credited with the time it added (see [`CriticalPath`]).

use std::collections::{BTreeMap, BTreeSet};

use fabemu_workload::scheduler::{Action, Stream};

use super::Schedule;
use serde::Serialize;

use super::TrainingInfo;

/// The chain of nodes that set the iteration time, across ranks: from the last node to
/// finish back through the dependency that finished last, where a node's dependencies are
/// its parents on its rank (for a compute node that waited for the stream: the compute node
/// that freed it), for a collective also the parents of the same collective on every other
/// member (it could not finish before the last member joined), and for a receive also the
/// parents of the send whose message it took (the message could not leave before them). Each
/// node on it is credited with the time from that dependency's finish to its own, so the
/// credits add up to the iteration time.
#[derive(Clone, Debug, Serialize)]
pub struct CriticalPath {
    /// The rank it ends on (the one that finished last).
    pub rank: usize,
    /// Ranks it passes through.
    pub ranks: usize,
    /// Nodes on it.
    pub nodes: usize,
    /// Time credited to compute (and memory) nodes.
    pub compute_ps: u64,
    /// Time credited to communication nodes (collectives, sends, receives).
    pub comm_ps: u64,
    /// Time credited to delays (marker nodes) and before the first node.
    pub other_ps: u64,
    /// The nodes credited most, most first (at most 5).
    pub top: Vec<PathStep>,
    /// The credited time per kind of node, by name with its layer and micro-batch numbers
    /// dropped (`forward layer #`, `tp all_reduce layer # mb#`), most first (at most 8).
    pub by_name: Vec<PathGroup>,
}

/// One node on the critical path.
#[derive(Clone, Debug, Serialize)]
pub struct PathStep {
    /// The rank it ran on.
    pub rank: usize,
    /// Node id.
    pub node: u64,
    /// Node name.
    pub name: String,
    /// `compute`, `communication` or `delay`.
    pub kind: &'static str,
    /// Time credited to it: from its dependency's finish to its own.
    pub time_ps: u64,
}

/// Critical-path time of the nodes that share a name once numbers are dropped.
#[derive(Clone, Debug, Serialize)]
pub struct PathGroup {
    /// The name with every run of digits written `#`.
    pub name: String,
    /// `compute`, `communication` or `delay`.
    pub kind: &'static str,
    /// Nodes of it on the path.
    pub count: usize,
    /// Their credited time.
    pub time_ps: u64,
}

/// `name` with each run of digits replaced by `#`.
fn generic_name(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut in_digits = false;
    for c in name.chars() {
        if c.is_ascii_digit() {
            if !in_digits {
                out.push('#');
            }
            in_digits = true;
        } else {
            out.push(c);
            in_digits = false;
        }
    }
    out
}

/// Follows the critical path back from the last node of `host` (see [`CriticalPath`]).
pub(super) fn critical_path(
    info: &TrainingInfo,
    scheds: &[Option<Schedule<'_>>],
    host: usize,
    sender_of: &BTreeMap<(usize, usize), (usize, usize)>,
) -> Option<CriticalPath> {
    let sched = |h: usize| scheds.get(h).copied().flatten();
    let rank_of: BTreeMap<usize, usize> = info
        .ranks
        .iter()
        .enumerate()
        .map(|(r, ri)| (ri.host, r))
        .collect();
    let (job_node, members) = jobs_and_members(info, scheds);
    // Per host and stream, compute nodes by the time they freed the stream.
    let mut freed: BTreeMap<(usize, Stream, u64), Vec<usize>> = BTreeMap::new();
    let end_of = |h: usize, i: usize| sched(h)?.records().get(i)?.end;
    let s = sched(host)?;
    let recs = s.records();
    let mut at = (
        host,
        (0..recs.len())
            .filter(|&i| recs[i].end.is_some())
            .max_by_key(|&i| (recs[i].end, std::cmp::Reverse(i)))?,
    );
    let mut seen: BTreeSet<(usize, usize)> = BTreeSet::new();
    let mut freed_built: BTreeSet<usize> = BTreeSet::new();
    let mut steps: Vec<PathStep> = Vec::new();
    let mut visited_ranks: BTreeSet<usize> = BTreeSet::new();
    let (mut compute_ps, mut comm_ps, mut other_ps) = (0u64, 0u64, 0u64);
    loop {
        if !seen.insert(at) {
            break;
        }
        let (h, i) = at;
        let Some(s) = sched(h) else { break };
        let (nodes, recs) = (s.nodes(), s.records());
        let (Some(node), Some(r)) = (nodes.get(i), recs.get(i)) else {
            break;
        };
        let (Some(start), Some(end)) = (r.start, r.end) else {
            break;
        };
        // Candidate dependencies: (host, node) that finished.
        let mut cands: Vec<(usize, usize)> = Vec::new();
        let stream = match node.action {
            Action::Compute(_, s) => Some(s),
            _ => None,
        };
        let waited_for_stream = stream.filter(|_| r.ready.is_some_and(|t| t < start));
        if let Some(stream) = waited_for_stream {
            if freed_built.insert(h) {
                for (k, (n, rec)) in nodes.iter().zip(recs).enumerate() {
                    if let (Action::Compute(_, s), Some(e)) = (&n.action, rec.end) {
                        freed.entry((h, *s, e.ps())).or_default().push(k);
                    }
                }
            }
            if let Some(k) = freed
                .get(&(h, stream, start.ps()))
                .into_iter()
                .flatten()
                .copied()
                .filter(|&k| !seen.contains(&(h, k)))
                .max_by_key(|&k| (recs[k].start, k))
            {
                cands.push((h, k));
            }
        } else {
            cands.extend(node.deps.iter().map(|&d| (h, d as usize)));
        }
        match node.action {
            Action::Collective(Some(j)) => {
                for &m in members.get(&(h, j)).copied().unwrap_or(&[]) {
                    if m == h {
                        continue;
                    }
                    if let (Some(&k), Some(ms)) = (job_node.get(&(m, j)), sched(m)) {
                        if let Some(n) = ms.nodes().get(k) {
                            cands.extend(n.deps.iter().map(|&d| (m, d as usize)));
                        }
                    }
                }
            }
            Action::Recv { .. } => {
                if let Some(&(sh, sn)) = sender_of.get(&(h, i)) {
                    if let Some(n) = sched(sh).and_then(|x| x.nodes().get(sn)) {
                        cands.extend(n.deps.iter().map(|&d| (sh, d as usize)));
                    }
                }
            }
            _ => {}
        }
        // The one that finished last; ties stay on this rank, then the lowest host and node.
        let prev = cands
            .into_iter()
            .filter(|c| !seen.contains(c))
            .filter_map(|c| Some((end_of(c.0, c.1)?, c)))
            .max_by_key(|&(e, c)| (e, c.0 == h, std::cmp::Reverse(c)));
        let from = prev.map_or(0, |(e, _)| e.ps()).min(end.ps());
        let time_ps = end.ps() - from;
        let kind = match node.action {
            Action::Compute(..) => {
                compute_ps += time_ps;
                "compute"
            }
            Action::Delay(_) => {
                other_ps += time_ps;
                "delay"
            }
            _ => {
                comm_ps += time_ps;
                "communication"
            }
        };
        let rank = rank_of.get(&h).copied().unwrap_or(h);
        visited_ranks.insert(rank);
        steps.push(PathStep {
            rank,
            node: node.id,
            name: node.name.clone(),
            kind,
            time_ps,
        });
        match prev {
            Some((_, c)) => at = c,
            None => {
                // Before the first node: nothing ran on this chain.
                other_ps += from;
                break;
            }
        }
    }
    let n = steps.len();
    let by_name = by_name(&steps);
    steps.sort_by(|a, b| {
        b.time_ps
            .cmp(&a.time_ps)
            .then(a.rank.cmp(&b.rank))
            .then(a.node.cmp(&b.node))
    });
    steps.truncate(5);
    Some(CriticalPath {
        rank: rank_of.get(&host).copied().unwrap_or(host),
        ranks: visited_ranks.len(),
        nodes: n,
        compute_ps,
        comm_ps,
        other_ps,
        top: steps,
        by_name,
    })
}

/// The credited time per node name with its numbers dropped, most first (at most 8).
fn by_name(steps: &[PathStep]) -> Vec<PathGroup> {
    let mut groups: BTreeMap<(String, &'static str), (usize, u64)> = BTreeMap::new();
    for st in steps {
        let g = groups
            .entry((generic_name(&st.name), st.kind))
            .or_insert((0, 0));
        g.0 += 1;
        g.1 += st.time_ps;
    }
    let mut out: Vec<PathGroup> = groups
        .into_iter()
        .map(|((name, kind), (count, time_ps))| PathGroup {
            name,
            kind,
            count,
            time_ps,
        })
        .collect();
    out.sort_by(|a, b| b.time_ps.cmp(&a.time_ps).then(a.name.cmp(&b.name)));
    out.truncate(8);
    out
}

/// Per (host, job), the node that runs it; per (host, job), the collective's member hosts.
fn jobs_and_members<'a>(
    info: &'a TrainingInfo,
    scheds: &[Option<Schedule<'_>>],
) -> (JobNodes, JobMembers<'a>) {
    // Per host, the node of each job; per (host, job), the collective's member hosts.
    let mut job_node: BTreeMap<(usize, usize), usize> = BTreeMap::new();
    for (h, s) in scheds.iter().enumerate() {
        let Some(s) = s else { continue };
        for (i, n) in s.nodes().iter().enumerate() {
            if let Action::Collective(Some(j)) = n.action {
                job_node.insert((h, j), i);
            }
        }
    }
    let mut members: BTreeMap<(usize, usize), &[usize]> = BTreeMap::new();
    for (k, c) in info.collectives.iter().enumerate() {
        let Some(&slot) = info.slots.get(k) else {
            continue;
        };
        for &h in &c.hosts {
            members.insert((h, info.job_base + slot), &c.hosts);
        }
    }
    (job_node, members)
}

/// (host, job) -> the node that runs it.
type JobNodes = BTreeMap<(usize, usize), usize>;
/// (host, job) -> the collective's member hosts.
type JobMembers<'a> = BTreeMap<(usize, usize), &'a [usize]>;
