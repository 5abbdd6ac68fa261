//! The training section of the report: iteration times, how each rank's time divides into
//! compute, exposed and hidden communication and idle, and the collectives by kind and by
//! communicator.

use std::collections::BTreeMap;

use fabemu_fabric::units::Time;
use fabemu_workload::scheduler::{self, Action, NodeRecord, SchedNode, TAG_MASK};
use serde::Serialize;

use super::critical_path::{critical_path, CriticalPath};
use super::TrainingInfo;
use crate::collective;

/// A run's training figures (the JSON report's `training` section).
#[derive(Clone, Debug, Serialize)]
pub struct TrainingReport {
    /// The traces' prefix.
    pub traces: String,
    /// Ranks.
    pub ranks: usize,
    /// From time zero to the last node's finish on any rank, all iterations (null if some
    /// node never ran).
    pub iteration_time_ps: Option<u64>,
    /// The same in microseconds.
    pub iteration_time_us: Option<f64>,
    /// Each iteration's time (from the previous iteration's end on the last rank to this
    /// one's), when the workload has several; else the one iteration time.
    pub iterations_ps: Vec<u64>,
    /// Their mean.
    pub mean_iteration_ps: Option<u64>,
    /// Summed over the ranks: every rank's iteration split as below.
    pub overall: Breakdown,
    /// Per rank.
    pub per_rank: Vec<RankBreakdown>,
    /// Per kind of collective: count, bytes, time, bus bandwidth.
    pub collective_kinds: Vec<KindStats>,
    /// Per communicator (`all` or the `pg_name` group): count, bytes, time.
    pub communicators: Vec<GroupStats>,
    /// Every collective of the trace, in job order (the nccl-tests figures).
    pub collectives: Vec<collective::CollectiveResult>,
    /// What set the iteration time (null if it did not finish).
    pub critical_path: Option<CriticalPath>,
    /// Ranks' nodes that never finished, with what they waited for (a deadlock).
    pub waiting: Vec<String>,
    /// Exposed communication summed over the ranks, split by kind (see [`CommKinds`]); the
    /// kinds add up to `overall.exposed_comm_ps`.
    pub exposed_by_kind: Vec<KindExposed>,
    /// A transformer's throughput figures (`workload.training.model`).
    pub model: Option<ModelMetrics>,
}

/// Exposed communication of one kind.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct KindExposed {
    /// `tp`, `ep`, `pp`, `dp` (the built-in model's groups and pipeline messages), or
    /// `collective` and `p2p` (a Chakra trace's).
    pub kind: &'static str,
    /// Picoseconds.
    pub exposed_ps: u64,
}

/// Throughput of a transformer's iteration (from the mean iteration time).
#[derive(Clone, Debug, Serialize)]
pub struct ModelMetrics {
    /// Parameters of the model.
    pub parameters: f64,
    /// Tokens per iteration over all replicas.
    pub tokens_per_iteration: u64,
    /// Tokens per second.
    pub tokens_per_s: f64,
    /// The model's FLOPs per iteration (forward and backward, without recomputation).
    pub model_flops_per_iteration: f64,
    /// FLOPs executed per iteration (recomputation included).
    pub hardware_flops_per_iteration: f64,
    /// Executed TFLOP/s per GPU (Narayanan et al.'s figure: recomputation counted).
    pub tflops_per_gpu: f64,
    /// Model FLOPs utilization: the model's FLOP/s over the GPUs' peak (Chowdhery et al.
    /// 2022; recomputation not counted); null without a device peak.
    pub mfu: Option<f64>,
    /// Bytes of device memory per GPU on the stage that needs most (model states under ZeRO
    /// and activations: see `fabemu_workload::memory`).
    pub memory_per_gpu: f64,
    /// That pipeline stage.
    pub memory_peak_stage: u64,
    /// Whether that fits the device's memory (null when the device's memory is not given).
    pub fits_device: Option<bool>,
}

/// The kinds of communication exposed time is split into, in the order each exposed instant
/// is attributed: where communication of several kinds overlaps while the compute stream is
/// idle, the instant goes to the first kind in this order (tensor and expert parallelism
/// block the layer they belong to; the pipeline's messages block a stage's next pass; the
/// data-parallel gradients are what is left at the iteration's end).
pub const KIND_ORDER: [&str; 6] = ["tp", "ep", "pp", "dp", "collective", "p2p"];

/// Which kind each communication node of a rank is: collectives by their communicator's name
/// (`tp...`, `ep...`, `dp...` for the built-in model), point-to-point messages as the
/// pipeline's (`pp`) in the built-in model.
pub struct CommKinds {
    /// (host, job) -> kind.
    jobs: BTreeMap<(usize, usize), &'static str>,
    /// The built-in model (its groups and messages have kinds).
    model: bool,
}

impl CommKinds {
    /// The kinds of `info`'s collectives.
    pub fn new(info: &TrainingInfo) -> CommKinds {
        let model = !info.iteration_ends.is_empty();
        let mut jobs = BTreeMap::new();
        for (c, slot) in info.slots.iter().enumerate() {
            let Some(group) = info.groups.get(c) else {
                continue;
            };
            let kind = match group.get(..2) {
                Some("tp") if model => "tp",
                Some("ep") if model => "ep",
                Some("dp") if model => "dp",
                _ => "collective",
            };
            for &h in info.members.get(group).into_iter().flatten() {
                jobs.insert((h, info.job_base + slot), kind);
            }
        }
        CommKinds { jobs, model }
    }

    /// The kind of a node's action on `host` (None: not communication).
    pub fn of(&self, host: usize, a: &Action) -> Option<&'static str> {
        match a {
            Action::Collective(Some(j)) => {
                Some(self.jobs.get(&(host, *j)).copied().unwrap_or("collective"))
            }
            Action::Collective(None) => Some("collective"),
            Action::Send { .. } | Action::Recv { .. } => {
                Some(if self.model { "pp" } else { "p2p" })
            }
            Action::Compute(..) | Action::Delay(_) => None,
        }
    }
}

/// How a rank's iteration time divides (each in picoseconds; they add up to the iteration).
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct Breakdown {
    /// The compute stream busy (compute and memory nodes), communication or not.
    pub compute_ps: u64,
    /// Communication while the compute stream is idle: what the iteration waits for.
    pub exposed_comm_ps: u64,
    /// Communication while the compute stream is busy: hidden by overlap.
    pub hidden_comm_ps: u64,
    /// Neither computing nor communicating (dependencies, bubbles, the end of other ranks).
    pub idle_ps: u64,
}

/// One rank's breakdown.
#[derive(Clone, Debug, Serialize)]
pub struct RankBreakdown {
    /// Rank.
    pub rank: usize,
    /// Its host's index.
    pub host: usize,
    /// When its last node finished.
    pub finish_ps: Option<u64>,
    /// Nodes.
    pub nodes: usize,
    /// The split of the iteration time.
    #[serde(flatten)]
    pub breakdown: Breakdown,
    /// Its exposed communication by kind (adding up to `exposed_comm_ps`).
    pub exposed_by_kind: Vec<KindExposed>,
}

/// The collectives of one kind.
#[derive(Clone, Debug, Serialize)]
pub struct KindStats {
    /// Operation (`all_reduce`, ...).
    pub op: &'static str,
    /// How many.
    pub count: usize,
    /// Their sizes summed.
    pub bytes: u64,
    /// Their times summed (first start to last finish of each), microseconds.
    pub time_us: f64,
    /// Mean bus bandwidth over them (GB/s, nccl-tests' factor per operation).
    pub busbw_gbps: Option<f64>,
}

/// The collectives of one communicator.
#[derive(Clone, Debug, Serialize)]
pub struct GroupStats {
    /// `all` or the group id of the comm_groups file.
    pub group: String,
    /// Ranks in it.
    pub ranks: usize,
    /// Their hosts' indices, in rank order.
    pub hosts: Vec<usize>,
    /// How many collectives ran on it.
    pub count: usize,
    /// Their sizes summed.
    pub bytes: u64,
    /// Their times summed, microseconds.
    pub time_us: f64,
}

/// Length of the union of intervals.
fn union_len(mut v: Vec<(u64, u64)>) -> u64 {
    v.sort_unstable();
    let (mut total, mut cur): (u64, Option<(u64, u64)>) = (0, None);
    for (a, b) in v {
        match cur {
            Some((s, e)) if a <= e => cur = Some((s, e.max(b))),
            Some((s, e)) => {
                total += e - s;
                cur = Some((a, b));
            }
            None => cur = Some((a, b)),
        }
    }
    total + cur.map_or(0, |(s, e)| e - s)
}

/// Merges intervals into disjoint sorted ones.
fn merged(mut v: Vec<(u64, u64)>) -> Vec<(u64, u64)> {
    v.sort_unstable();
    let mut out: Vec<(u64, u64)> = Vec::new();
    for (a, b) in v {
        match out.last_mut() {
            Some(l) if a <= l.1 => l.1 = l.1.max(b),
            _ => out.push((a, b)),
        }
    }
    out
}

/// Length of the intersection of two disjoint sorted interval lists.
fn overlap(a: &[(u64, u64)], b: &[(u64, u64)]) -> u64 {
    let (mut i, mut j, mut total) = (0, 0, 0);
    while i < a.len() && j < b.len() {
        let lo = a[i].0.max(b[j].0);
        let hi = a[i].1.min(b[j].1);
        if lo < hi {
            total += hi - lo;
        }
        if a[i].1 < b[j].1 {
            i += 1;
        } else {
            j += 1;
        }
    }
    total
}

/// A training rank's schedule and when each of its nodes ran: what the report reads of a
/// finished scheduler, whether taken from the scheduler itself or from facts gathered from
/// another process.
#[derive(Clone, Copy, Debug)]
pub struct Schedule<'a> {
    /// The nodes, as built.
    pub nodes: &'a [SchedNode],
    /// Per node, when it became ready, started and ended.
    pub records: &'a [NodeRecord],
    /// Messages that arrived and no receive took: `(src host, tag bits, bytes)`.
    pub unmatched: &'a [(u32, u64, u64)],
}

impl<'a> Schedule<'a> {
    /// The nodes.
    pub fn nodes(&self) -> &'a [SchedNode] {
        self.nodes
    }
    /// Per node, when it ran.
    pub fn records(&self) -> &'a [NodeRecord] {
        self.records
    }
    /// Messages that arrived and no receive took.
    pub fn unmatched_messages(&self) -> &'a [(u32, u64, u64)] {
        self.unmatched
    }
    /// Nodes that never finished.
    fn unfinished(&self) -> usize {
        self.records.iter().filter(|r| r.end.is_none()).count()
    }
    /// Nodes that never finished, with what each waits for.
    fn waiting(&self) -> Vec<(u64, String)> {
        scheduler::waiting(self.nodes, self.records)
    }
    /// Ids of the send nodes to `dst` with `tag`, in the order posted.
    fn sends_to(&self, dst: u32, tag: u64) -> Vec<u64> {
        scheduler::sends_to(self.nodes, self.records, dst, tag)
    }
}

/// The training section from the finished schedulers (`scheds[host]`) and the collective
/// results of the trace's jobs.
pub fn report(
    info: &TrainingInfo,
    scheds: &[Option<Schedule<'_>>],
    collectives: Vec<collective::CollectiveResult>,
) -> TrainingReport {
    let (finishes, complete, waiting) = finishes_and_waits(info, scheds);
    let iteration = complete.then(|| finishes.iter().max().copied().unwrap_or(Time::ZERO));
    // Ranks that stalled are split up to the last time anything finished.
    let horizon = iteration
        .unwrap_or_else(|| finishes.iter().max().copied().unwrap_or(Time::ZERO))
        .ps();
    let posted = sends_posted(scheds);
    let kinds = CommKinds::new(info);
    let mut by_kind: BTreeMap<&'static str, u64> = BTreeMap::new();
    // Per (host, receive node): the (host, send node) whose message it took.
    let mut sender_of: BTreeMap<(usize, usize), (usize, usize)> = BTreeMap::new();
    let mut overall = Breakdown::default();
    let mut per_rank = Vec::new();
    for (r, ri) in info.ranks.iter().enumerate() {
        let Some(s) = scheds.get(ri.host).copied().flatten() else {
            continue;
        };
        let (b, exposed) = rank_breakdown(ri.host, &s, &posted, horizon, &mut sender_of, &kinds);
        for k in &exposed {
            *by_kind.entry(k.kind).or_default() += k.exposed_ps;
        }
        overall.compute_ps += b.compute_ps;
        overall.exposed_comm_ps += b.exposed_comm_ps;
        overall.hidden_comm_ps += b.hidden_comm_ps;
        overall.idle_ps += b.idle_ps;
        per_rank.push(RankBreakdown {
            rank: r,
            host: ri.host,
            finish_ps: s.records().iter().filter_map(|x| x.end).max().map(Time::ps),
            nodes: s.nodes().len(),
            breakdown: b,
            exposed_by_kind: exposed,
        });
    }
    let (collective_kinds, communicators) = collective_stats(info, &collectives);
    let critical_path = iteration.and_then(|it| {
        let r = per_rank.iter().find(|x| x.finish_ps == Some(it.ps()))?;
        critical_path(info, scheds, r.host, &sender_of)
    });
    let iterations_ps = iteration_times(info, scheds, iteration);
    let mean_iteration_ps = (!iterations_ps.is_empty())
        .then(|| iterations_ps.iter().sum::<u64>() / iterations_ps.len() as u64);
    let model = info
        .model
        .zip(mean_iteration_ps.filter(|&t| t > 0))
        .map(|(f, t)| {
            let secs = t as f64 / 1e12;
            let gpus = info.ranks.len().max(1) as f64;
            ModelMetrics {
                parameters: f.parameters,
                tokens_per_iteration: f.tokens,
                tokens_per_s: f.tokens as f64 / secs,
                model_flops_per_iteration: f.model_flops,
                hardware_flops_per_iteration: f.hardware_flops,
                tflops_per_gpu: f.hardware_flops / secs / gpus / 1e12,
                mfu: f.peak_flops.map(|p| f.model_flops / secs / gpus / p),
                memory_per_gpu: f.memory.1,
                memory_peak_stage: f.memory.0,
                fits_device: f.device_memory.map(|d| f.memory.1 <= d as f64),
            }
        });
    let exposed_by_kind = KIND_ORDER
        .iter()
        .filter_map(|&k| {
            by_kind.get(k).map(|&e| KindExposed {
                kind: k,
                exposed_ps: e,
            })
        })
        .collect();
    TrainingReport {
        exposed_by_kind,
        model,
        iterations_ps,
        mean_iteration_ps,
        traces: info.traces.clone(),
        ranks: info.ranks.len(),
        iteration_time_ps: iteration.map(Time::ps),
        iteration_time_us: iteration.map(Time::as_us_f64),
        overall,
        per_rank,
        collective_kinds,
        communicators,
        critical_path,
        collectives,
        waiting,
    }
}

/// Per rank with a scheduler, when its last node finished; whether every rank finished; and
/// what the ranks that did not were waiting for.
fn finishes_and_waits(
    info: &TrainingInfo,
    scheds: &[Option<Schedule<'_>>],
) -> (Vec<Time>, bool, Vec<String>) {
    let mut finishes = Vec::new();
    let mut complete = true;
    let mut waiting = Vec::new();
    for (r, ri) in info.ranks.iter().enumerate() {
        let Some(s) = scheds.get(ri.host).copied().flatten() else {
            complete = false;
            continue;
        };
        if s.unfinished() > 0 {
            complete = false;
            let w = s.waiting();
            let shown: Vec<String> = w
                .iter()
                .take(5)
                .map(|(id, why)| format!("node {id} ({why})"))
                .collect();
            waiting.push(format!(
                "rank {r} ({}): {} of {} nodes never finished; waiting: {}{}",
                ri.file,
                s.unfinished(),
                s.nodes().len(),
                if shown.is_empty() {
                    "none ready".to_string()
                } else {
                    shown.join(", ")
                },
                if w.len() > 5 {
                    format!(" and {} more", w.len() - 5)
                } else {
                    String::new()
                }
            ));
        }
        for &(src, tag, len) in s.unmatched_messages() {
            let sender = info.ranks.iter().position(|x| x.host == src as usize);
            let sends = sender
                .and_then(|p| scheds.get(info.ranks[p].host).copied().flatten())
                .map(|ss| ss.sends_to(ri.host as u32, tag))
                .unwrap_or_default();
            waiting.push(format!(
                "rank {r} ({}): a message of {len} B from rank {} with tag {tag} was never \
                 received (no matching recv; sent by node {})",
                ri.file,
                sender.map_or_else(|| "?".to_string(), |p| p.to_string()),
                sends
                    .last()
                    .map_or_else(|| "?".to_string(), |id| id.to_string())
            ));
        }
        finishes.push(
            s.records()
                .iter()
                .filter_map(|x| x.end)
                .max()
                .unwrap_or(Time::ZERO),
        );
    }
    (finishes, complete, waiting)
}

/// When each message was posted, per (src, dst, tag): a receive communicates from then on;
/// before, its rank only waits for the peer (a pipeline bubble), which is idle time. With
/// each post, the send node (for the critical path's waits across ranks).
pub(super) fn sends_posted(scheds: &[Option<Schedule<'_>>]) -> Posted {
    let mut posted = Posted::new();
    for (h, s) in scheds.iter().enumerate() {
        let Some(s) = s else { continue };
        for (i, (n, rec)) in s.nodes().iter().zip(s.records()).enumerate() {
            if let (Action::Send { dst, tag, .. }, Some(t)) = (&n.action, rec.start) {
                posted
                    .entry((h as u32, *dst, tag & TAG_MASK))
                    .or_default()
                    .push((t.ps(), i));
            }
        }
    }
    for v in posted.values_mut() {
        v.sort_unstable();
    }
    posted
}

/// Sends by (src host, dst host, tag): (post time, send node), in post order.
pub(super) type Posted = BTreeMap<(u32, u32, u64), Vec<(u64, usize)>>;

/// The message each finished receive of the rank on `host` took, by receive node: when it was
/// posted, by which host, from which send node. Receives per key take the messages in order
/// (the k-th to complete took the k-th posted). The breakdown and the trace both start a
/// receive's communication at the later of its own start and this post: before it the rank
/// only waits.
pub(super) fn receive_posts(
    host: usize,
    s: &Schedule<'_>,
    posted: &Posted,
) -> BTreeMap<usize, (u64, usize, usize)> {
    let mut out = BTreeMap::new();
    let mut by_key: BTreeMap<(u32, u64), Vec<(u64, usize)>> = BTreeMap::new();
    for (i, (n, rec)) in s.nodes().iter().zip(s.records()).enumerate() {
        if let (Action::Recv { src, tag, .. }, Some(end)) = (&n.action, rec.end) {
            by_key
                .entry((*src, tag & TAG_MASK))
                .or_default()
                .push((end.ps(), i));
        }
    }
    for ((src, tag), mut v) in by_key {
        v.sort_unstable();
        let posts = posted.get(&(src, host as u32, tag));
        for (k, &(_, i)) in v.iter().enumerate() {
            if let Some(&(t, send)) = posts.and_then(|p| p.get(k)) {
                out.insert(i, (t, src as usize, send));
            }
        }
    }
    out
}

/// How the rank on `host` spent the time up to `horizon`; records which send each of its
/// receives took in `sender_of`.
fn rank_breakdown(
    host: usize,
    s: &Schedule<'_>,
    posted: &Posted,
    horizon: u64,
    sender_of: &mut BTreeMap<(usize, usize), (usize, usize)>,
    kinds: &CommKinds,
) -> (Breakdown, Vec<KindExposed>) {
    let recv_from = receive_posts(host, s, posted);
    for (&i, &(_, src, send)) in &recv_from {
        sender_of.insert((host, i), (src, send));
    }
    let (mut comp, mut comm) = (Vec::new(), Vec::new());
    let mut by_kind: BTreeMap<&'static str, Vec<(u64, u64)>> = BTreeMap::new();
    for (i, (n, rec)) in s.nodes().iter().zip(s.records()).enumerate() {
        let Some(start) = rec.start else { continue };
        let start = recv_from
            .get(&i)
            .map_or(start, |&(t, _, _)| start.max(Time(t)));
        let end = rec.end.map_or(horizon, Time::ps);
        let iv = (start.ps(), end.max(start.ps()));
        match kinds.of(host, &n.action) {
            Some(k) => {
                comm.push(iv);
                by_kind.entry(k).or_default().push(iv);
            }
            None if matches!(n.action, Action::Compute(..)) => comp.push(iv),
            None => {}
        }
    }
    let comp = merged(comp);
    let comm = merged(comm);
    let compute_ps = union_len(comp.clone());
    let comm_ps = union_len(comm.clone());
    let hidden = overlap(&comp, &comm);
    let exposed = comm_ps - hidden;
    // Exposed instants go to the kinds in KIND_ORDER, each taking what is left.
    let mut left = subtract(&comm, &comp);
    let mut split = Vec::new();
    for k in KIND_ORDER {
        let Some(v) = by_kind.remove(k) else { continue };
        let mine = merged(v);
        split.push(KindExposed {
            kind: k,
            exposed_ps: overlap(&left, &mine),
        });
        left = subtract(&left, &mine);
    }
    (
        Breakdown {
            compute_ps,
            exposed_comm_ps: exposed,
            hidden_comm_ps: hidden,
            idle_ps: horizon.saturating_sub(compute_ps + exposed),
        },
        split,
    )
}

/// `a` without `b` (both disjoint and sorted).
fn subtract(a: &[(u64, u64)], b: &[(u64, u64)]) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    let mut j = 0;
    for &(mut lo, hi) in a {
        while j < b.len() && b[j].1 <= lo {
            j += 1;
        }
        let mut k = j;
        while k < b.len() && b[k].0 < hi {
            if b[k].0 > lo {
                out.push((lo, b[k].0));
            }
            lo = lo.max(b[k].1);
            k += 1;
        }
        if lo < hi {
            out.push((lo, hi));
        }
    }
    out
}

/// The collectives by kind and by communicator.
fn collective_stats(
    info: &TrainingInfo,
    collectives: &[collective::CollectiveResult],
) -> (Vec<KindStats>, Vec<GroupStats>) {
    let mut kinds: BTreeMap<&'static str, (KindStats, f64, usize)> = BTreeMap::new();
    let mut groups: BTreeMap<&str, GroupStats> = BTreeMap::new();
    for (j, c) in collectives.iter().enumerate() {
        let (k, bus, n) = kinds.entry(c.op).or_insert((
            KindStats {
                op: c.op,
                count: 0,
                bytes: 0,
                time_us: 0.0,
                busbw_gbps: None,
            },
            0.0,
            0,
        ));
        k.count += 1;
        k.bytes += c.size_bytes;
        k.time_us += c.time_us.unwrap_or(0.0);
        if let Some(b) = c.busbw_gbps {
            *bus += b;
            *n += 1;
            k.busbw_gbps = Some(*bus / *n as f64);
        }
        let name = info.groups.get(j).map_or("all", String::as_str);
        let g = groups.entry(name).or_insert(GroupStats {
            group: name.to_string(),
            ranks: c.ranks,
            hosts: info.members.get(name).cloned().unwrap_or_default(),
            count: 0,
            bytes: 0,
            time_us: 0.0,
        });
        g.count += 1;
        g.bytes += c.size_bytes;
        g.time_us += c.time_us.unwrap_or(0.0);
    }
    (
        kinds.into_values().map(|(k, _, _)| k).collect(),
        groups.into_values().collect(),
    )
}

/// Each iteration's time (from the previous iteration's end on the last rank to this one's),
/// or the one iteration time.
fn iteration_times(
    info: &TrainingInfo,
    scheds: &[Option<Schedule<'_>>],
    iteration: Option<Time>,
) -> Vec<u64> {
    match iteration {
        None => Vec::new(),
        Some(it) if info.iteration_ends.is_empty() => vec![it.ps()],
        Some(_) => {
            let n = info.iteration_ends.iter().map(Vec::len).max().unwrap_or(0);
            let mut prev = 0;
            (0..n)
                .map(|k| {
                    let end = info
                        .ranks
                        .iter()
                        .zip(&info.iteration_ends)
                        .filter_map(|(ri, ends)| {
                            let s = scheds.get(ri.host).copied().flatten()?;
                            s.records().get(*ends.get(k)? as usize)?.end
                        })
                        .map(Time::ps)
                        .max()
                        .unwrap_or(prev);
                    let d = end.saturating_sub(prev);
                    prev = end;
                    d
                })
                .collect()
        }
    }
}
