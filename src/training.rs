//! Training workloads in a scenario: Chakra traces turned into per-host schedulers, and the
//! iteration-time breakdown read back from them.
//!
//! `workload.chakra` names one trace per rank. Each rank's nodes become
//! [`fabemu_workload::Action`]s: compute and memory nodes take their recorded duration or the
//! device model's roofline time (`workload.device`); a point-to-point node names its peer
//! rank, mapped to that rank's host; a collective becomes a job of the collective executor,
//! compiled by the same algorithm library as `workload.collectives`
//! ([`crate::collective::compile_one`]).
//!
//! Matching collectives across ranks: the ranks of a communicator (the node's `pg_name` group
//! of the `comm_groups` file, or every rank) must issue the same sequence of collectives on
//! it; the k-th collective of a group in trace order on each member is one job. A member with
//! a different operation or size at the same place, or a different number of collectives, is
//! a located error, since the run would otherwise hang.
//!
//! A training collective's message names its job (see [`fabemu_collectives::executor`]): the
//! jobs of `workload.collectives` come first, then the trace's, numbered group by group.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use fabemu_collectives::executor::{DataSpec, Job, JobStart, MAX_JOBS};
use fabemu_collectives::{ChunkRange, Collective, DataType, Program, ReduceOp};
use fabemu_fabric::units::{Time, PS_PER_S};
use fabemu_topologies::Graph;
use fabemu_workload::scheduler::{Action, RankScheduler, SchedNode, TAG_MASK};
use fabemu_workload::trace::{load_traces, CollKind, Op, RankTrace, TraceNode};
use serde::Serialize;

use crate::collective::{self, CollectiveInfo};
use crate::scenario::{AlgorithmYaml, CollectiveYaml, FieldPath, Mode, ScenarioError, Source};

/// A training workload as built: which host runs which trace, and its collectives.
#[derive(Clone, Debug)]
pub struct TrainingInfo {
    /// The traces' prefix as given, or a description of the built-in model.
    pub traces: String,
    /// Per rank: its host and its file.
    pub ranks: Vec<RankInfo>,
    /// The trace's collectives, in job order (job = `job_base` + index).
    pub collectives: Vec<CollectiveInfo>,
    /// The group each collective ran on (`all` or the `pg_name`).
    pub groups: Vec<String>,
    /// The job number of the first trace collective.
    pub job_base: usize,
    /// Per rank, the node that ends each iteration (the built-in model's several
    /// iterations); empty: the trace is one iteration.
    pub iteration_ends: Vec<Vec<u32>>,
}

/// One rank of a training workload.
#[derive(Clone, Debug)]
pub struct RankInfo {
    /// Host index.
    pub host: usize,
    /// Its trace file.
    pub file: String,
}

/// Path `rel` relative to the scenario's folder.
fn relative_to_scenario(src: &Source, rel: &str) -> PathBuf {
    let base = Path::new(&src.file)
        .parent()
        .filter(|p| !p.as_os_str().is_empty() && !src.file.starts_with('<'));
    match base {
        Some(b) => b.join(rel),
        None => PathBuf::from(rel),
    }
}

/// Largest point-to-point message (RoCE's DMA length is 32 bits).
const MAX_MESSAGE: u64 = (1 << 32) - 1;
/// Program steps over all the trace's collectives and ranks (about 64 bytes each).
const MAX_STEPS: u64 = 1 << 26;
/// Payload bytes a data-mode training run may hold.
const MAX_DATA_BYTES: u64 = 4 << 30;

/// A built training workload: its description and a scheduler per host (`None`: the host
/// runs no rank).
pub(crate) type Built = (TrainingInfo, Vec<Option<RankScheduler>>);

/// A collective placeholder while groups are matched: `(node index, kind, bytes)`.
type Pending = (usize, CollKind, u64);

/// Builds the schedulers of the scenario's training workload, appending its collectives' jobs
/// to `jobs` (per host; each host already holds `job_base` jobs). `None` without one.
pub(crate) fn build(
    src: &Source,
    g: &Graph,
    job_base: usize,
    jobs: &mut [Vec<Job>],
) -> Result<Option<Built>, ScenarioError> {
    let s = &src.scenario;
    let n_hosts = g.host_count();
    // Per rank, the last node of each iteration (the built-in model's optimizer steps).
    let mut marks: Vec<Vec<u32>> = Vec::new();
    let (at, traces, groups, hosts, label) = if let Some(ch) = &s.workload.chakra {
        let at = FieldPath::root().key("workload").key("chakra");
        if s.workload.training.is_some() {
            return Err(src.error_at(
                &at,
                "give `chakra` (traces) or `training` (the built-in model), not both",
            ));
        }
        let hosts: Vec<usize> = match &ch.hosts {
            None => (0..n_hosts).collect(),
            Some(names) => crate::collective::host_ranks(src, g, &at.key("hosts"), names)?,
        };
        let prefix = relative_to_scenario(src, &ch.traces);
        let traces =
            load_traces(&prefix, hosts.len()).map_err(|e| src.error_at(&at, e.to_string()))?;
        let groups = match &ch.comm_groups {
            None => None,
            Some(rel) => Some(read_groups(src, &at, rel, hosts.len())?),
        };
        (at, traces, groups, hosts, ch.traces.clone())
    } else if let Some(m) = &s.workload.training {
        let at = FieldPath::root().key("workload").key("training");
        let (traces, groups, m_marks) =
            model_traces(m, n_hosts).map_err(|(f, msg)| src.error_at(&at.key(f), msg))?;
        marks = m_marks;
        let label = format!(
            "the built-in model (dp {} x tp {} x pp {}, {} micro-batches)",
            m.dp, m.tp, m.pp, m.micro_batches
        );
        (at, traces, Some(groups), (0..n_hosts).collect(), label)
    } else {
        return Ok(None);
    };
    let device_at = FieldPath::root().key("workload").key("device");
    if let Some(d) = &s.workload.device {
        if !(d.peak_flops > 0.0 && d.peak_flops.is_finite()) {
            return Err(src.error_at(&device_at.key("peak_flops"), "must be greater than 0"));
        }
        if d.memory_bandwidth.bps() == 0 {
            return Err(src.error_at(&device_at.key("memory_bandwidth"), "must be greater than 0"));
        }
        if !(d.efficiency > 0.0 && d.efficiency <= 1.0) {
            return Err(src.error_at(
                &device_at.key("efficiency"),
                "must be in (0, 1]: the fraction of peak compute reaches",
            ));
        }
    }
    let data_mode = s.mode == Mode::Data;

    // Memory a data-mode run holds for the workload's payloads, and program steps in all.
    let (mut data_bytes, mut steps_total) = (0u64, 0u64);
    // Per rank: actions (collectives filled in below), and the collectives per group.
    let mut actions: Vec<Vec<Action>> = Vec::with_capacity(traces.len());
    let mut by_group: BTreeMap<String, BTreeMap<usize, Vec<Pending>>> = BTreeMap::new();
    for (r, t) in traces.iter().enumerate() {
        let mut acts = Vec::with_capacity(t.nodes.len());
        for (i, n) in t.nodes.iter().enumerate() {
            let node_err =
                |what: String| src.error_at(&at, format!("{}: node {}: {what}", t.file, n.id));
            let peer_host = |peer: u32, field: &str| {
                if peer as usize == r {
                    return Err(node_err(format!("`{field}` is the node's own rank {r}")));
                }
                hosts.get(peer as usize).map(|&h| h as u32).ok_or_else(|| {
                    node_err(format!(
                        "`{field}` {peer} is not a rank (the workload has {} ranks)",
                        hosts.len()
                    ))
                })
            };
            let a = match &n.op {
                Op::Compute {
                    duration,
                    num_ops,
                    tensor_bytes,
                } => Action::Compute(match (duration, num_ops, tensor_bytes) {
                    (Some(d), _, _) => *d,
                    (None, None, None) => Time::ZERO,
                    (None, ops, bytes) => {
                        let d = s.workload.device.as_ref().ok_or_else(|| {
                            node_err(
                                "a compute node with `num_ops`/`tensor_size` and no duration \
                                 needs `workload.device` to time it"
                                    .into(),
                            )
                        })?;
                        let flops = ops.unwrap_or(0) as f64 / (d.peak_flops * d.efficiency);
                        let mem = bytes.unwrap_or(0) as f64 * 8.0 / d.memory_bandwidth.bps() as f64;
                        secs(flops.max(mem))
                    }
                }),
                Op::Memory {
                    duration, bytes, ..
                } => Action::Compute(match (duration, bytes) {
                    (Some(d), _) => *d,
                    (None, None) => Time::ZERO,
                    (None, Some(b)) => {
                        let d = s.workload.device.as_ref().ok_or_else(|| {
                            node_err(
                                "a memory node with `tensor_size` and no duration needs \
                                 `workload.device` to time it"
                                    .into(),
                            )
                        })?;
                        secs(*b as f64 * 8.0 / d.memory_bandwidth.bps() as f64)
                    }
                }),
                Op::Marker { duration } => Action::Delay(duration.unwrap_or(Time::ZERO)),
                Op::Send { bytes, .. } | Op::Recv { bytes, .. } if *bytes > MAX_MESSAGE => {
                    return Err(node_err(format!(
                        "comm_size {bytes} B: a message is at most {MAX_MESSAGE} B (RoCE's \
                         32-bit DMA length)"
                    )))
                }
                Op::Send { peer, bytes, tag } => {
                    if data_mode {
                        data_bytes = data_bytes.saturating_add(*bytes);
                    }
                    Action::Send {
                        dst: peer_host(*peer, "comm_dst")?,
                        tag: *tag,
                        bytes: *bytes,
                    }
                }
                Op::Recv { peer, bytes, tag } => Action::Recv {
                    src: peer_host(*peer, "comm_src")?,
                    tag: *tag,
                    bytes: *bytes,
                },
                Op::Collective { kind, bytes, group } => {
                    let key = match (group, &groups) {
                        (Some(name), Some(map)) => {
                            let members = map.get(name).ok_or_else(|| {
                                node_err(format!(
                                    "process group `{name}` is not in the comm_groups file"
                                ))
                            })?;
                            if !members.contains(&r) {
                                return Err(node_err(format!(
                                    "rank {r} runs a collective on group `{name}`, which does \
                                     not include it"
                                )));
                            }
                            name.clone()
                        }
                        _ => String::new(),
                    };
                    by_group
                        .entry(key)
                        .or_default()
                        .entry(r)
                        .or_default()
                        .push((i, *kind, *bytes));
                    Action::Collective(None)
                }
            };
            acts.push(a);
        }
        actions.push(acts);
    }

    if data_bytes > MAX_DATA_BYTES {
        return Err(src.error_at(
            &at,
            format!(
                "data mode holds every payload in memory; the sends need {data_bytes} B (limit \
                 {MAX_DATA_BYTES} B; use `mode: timing`)"
            ),
        ));
    }
    // Match each group's collectives across its members; compile one job per match.
    let mut infos = Vec::new();
    let mut group_names = Vec::new();
    let all: Vec<usize> = (0..hosts.len()).collect();
    for (key, per_rank) in &by_group {
        let members: &[usize] = if key.is_empty() {
            &all
        } else {
            groups
                .as_ref()
                .and_then(|m| m.get(key))
                .map_or(&all[..], Vec::as_slice)
        };
        let label = if key.is_empty() {
            "all".to_string()
        } else {
            key.clone()
        };
        let empty = Vec::new();
        let first = members[0];
        let reference = per_rank.get(&first).unwrap_or(&empty);
        for &m in members {
            let mine = per_rank.get(&m).unwrap_or(&empty);
            if mine.len() != reference.len() {
                let (who, list) = if mine.len() > reference.len() {
                    (m, mine)
                } else {
                    (first, reference)
                };
                let extra = list[mine.len().min(reference.len())].0;
                return Err(src.error_at(
                    &at,
                    format!(
                        "{}: node {}: rank {who} issues {} collectives on group {label}, rank {} \
                         issues {}; every member must issue the same sequence",
                        traces[who].file,
                        traces[who].nodes[extra].id,
                        list.len(),
                        if who == m { first } else { m },
                        mine.len().min(reference.len()),
                    ),
                ));
            }
            for (k, (&(i, kind, bytes), &(i0, kind0, bytes0))) in
                mine.iter().zip(reference).enumerate()
            {
                if (kind, bytes) != (kind0, bytes0) {
                    return Err(src.error_at(
                        &at,
                        format!(
                            "{}: node {}: collective #{k} of rank {m} on group {label} is {} of \
                             {bytes} B, rank {first}'s (node {}) is {} of {bytes0} B",
                            traces[m].file,
                            traces[m].nodes[i].id,
                            kind.key(),
                            traces[first].nodes[i0].id,
                            kind0.key()
                        ),
                    ));
                }
            }
        }
        let member_hosts: Vec<usize> = members.iter().map(|&r| hosts[r]).collect();
        for (k, &(i0, kind, bytes)) in reference.iter().enumerate() {
            let job = if members.len() < 2 || (bytes == 0 && kind != CollKind::Barrier) {
                None
            } else {
                let j = job_base + infos.len();
                if j >= MAX_JOBS {
                    return Err(src.error_at(
                        &at,
                        format!(
                            "the traces run more than {} collectives; fabemu runs at most \
                             {MAX_JOBS} per run (workload.collectives included)",
                            MAX_JOBS - job_base
                        ),
                    ));
                }
                let node_err = |what: String| {
                    src.error_at(
                        &at,
                        format!(
                            "{}: node {}: {what}",
                            traces[first].file, traces[first].nodes[i0].id
                        ),
                    )
                };
                let (op, alg) = algorithm_of(s, kind);
                if matches!(alg, Some(AlgorithmYaml::PerDim(_)))
                    && member_hosts != (0..n_hosts).collect::<Vec<_>>()
                {
                    return Err(node_err(format!(
                        "a per-dimension algorithm (workload.collective_algorithms.{}) runs over \
                         every host in order; this collective runs on group {label}",
                        op.key()
                    )));
                }
                // Barrier: one float per rank, all-reduced. Payloads in floats when they
                // divide; in timing mode, else in bytes.
                let (count, es) = if kind == CollKind::Barrier {
                    (members.len(), 4)
                } else if bytes % 4 == 0 {
                    ((bytes / 4) as usize, 4)
                } else if !data_mode {
                    (bytes as usize, 1)
                } else {
                    return Err(node_err(format!(
                        "comm_size {bytes} B is not a whole number of floats (data mode)"
                    )));
                };
                let spec = collective_spec(s, op, alg)
                    .map_err(|e| node_err(format!("cannot build the collective: {e}")))?;
                let (info, programs) =
                    collective::compile_one(g, &spec, count, es, &member_hosts, data_mode)
                        .map_err(|e| node_err(format!("{} {k}: {e}", kind.key())))?;
                steps_total = programs
                    .iter()
                    .fold(steps_total, |a, p| a.saturating_add(p.steps.len() as u64));
                if steps_total > MAX_STEPS {
                    return Err(node_err(format!(
                        "the trace's collectives need more than {MAX_STEPS} program steps in all"
                    )));
                }
                if data_mode {
                    data_bytes = programs.iter().fold(data_bytes, |a, p| {
                        a.saturating_add((p.buffer_len as u64).saturating_mul(es))
                    });
                }
                if data_bytes > MAX_DATA_BYTES {
                    return Err(node_err(format!(
                        "data mode holds every payload in memory; this workload needs more than \
                         {MAX_DATA_BYTES} B (use `mode: timing`)"
                    )));
                }
                let shared: Arc<[u32]> = member_hosts.iter().map(|&h| h as u32).collect();
                let mut program_of: BTreeMap<usize, Program> =
                    member_hosts.iter().copied().zip(programs).collect();
                for (h, list) in jobs.iter_mut().enumerate() {
                    list.push(match program_of.remove(&h) {
                        Some(program) => Job {
                            program,
                            start: JobStart::OnDemand,
                            elem_bytes: es,
                            data: data_mode.then_some(DataSpec {
                                dtype: DataType::F32,
                                op: ReduceOp::Sum,
                            }),
                            class: 0,
                            reduce_rate: None,
                            hosts: Some(shared.clone()),
                        },
                        // Not a member: an empty job keeps the numbering the same everywhere.
                        None => Job {
                            program: Program {
                                rank: 0,
                                buffer_len: 0,
                                input: ChunkRange::new(0, 0),
                                output: ChunkRange::new(0, 0),
                                steps: Vec::new(),
                            },
                            start: JobStart::OnDemand,
                            elem_bytes: es,
                            data: None,
                            class: 0,
                            reduce_rate: None,
                            hosts: None,
                        },
                    });
                }
                infos.push(info);
                group_names.push(label.clone());
                Some(j)
            };
            for &m in members {
                if let Some(&(i, _, _)) = per_rank.get(&m).and_then(|v| v.get(k)) {
                    actions[m][i] = Action::Collective(job);
                }
            }
        }
    }

    let mut scheds: Vec<Option<RankScheduler>> = (0..n_hosts).map(|_| None).collect();
    for (r, (t, acts)) in traces.iter().zip(actions).enumerate() {
        scheds[hosts[r]] = Some(RankScheduler::new(nodes_of(t, acts), data_mode));
    }
    let info = TrainingInfo {
        traces: label,
        ranks: traces
            .iter()
            .enumerate()
            .map(|(r, t)| RankInfo {
                host: hosts[r],
                file: t.file.clone(),
            })
            .collect(),
        collectives: infos,
        groups: group_names,
        job_base,
        iteration_ends: marks,
    };
    Ok(Some((info, scheds)))
}

/// Communicator groups: group id -> ranks.
type Groups = BTreeMap<String, Vec<usize>>;

/// The built-in model's traces, groups, and per rank the last node of each iteration.
type Model = (Vec<RankTrace>, Groups, Vec<Vec<u32>>);

/// The per-rank traces of the built-in model (`workload.training`, see its doc) and its
/// communicator groups (`tp{p}.{d}`, `dp{p}.{t}`); errors name the field.
fn model_traces(
    m: &crate::scenario::TrainingYaml,
    hosts: usize,
) -> Result<Model, (&'static str, String)> {
    let (dp, tp, pp, mbs) = (m.dp, m.tp, m.pp, m.micro_batches);
    for (f, v) in [
        ("dp", dp),
        ("tp", tp),
        ("pp", pp),
        ("micro_batches", mbs),
        ("layers", m.layers),
    ] {
        if v == 0 {
            return Err((f, "must be at least 1".into()));
        }
    }
    let ranks = dp.saturating_mul(tp).saturating_mul(pp);
    if ranks != hosts {
        return Err((
            "dp",
            format!(
                "dp x tp x pp = {dp} x {tp} x {pp} = {ranks} ranks; the fabric has {hosts} hosts"
            ),
        ));
    }
    if m.layers % pp != 0 {
        return Err((
            "layers",
            format!("{} layers do not split evenly over {pp} stages", m.layers),
        ));
    }
    if m.bucket.bytes() == 0 {
        return Err(("bucket", "must be greater than 0".into()));
    }
    // Bound the model's size: nodes per rank ~ micro-batches x layers x 4.
    let per_rank = (mbs as u64)
        .saturating_mul(m.layers as u64 / pp as u64)
        .saturating_mul(4);
    if per_rank.saturating_mul(ranks as u64) > 1 << 24 {
        return Err((
            "micro_batches",
            "the iteration would have more than 2^24 nodes".into(),
        ));
    }
    let forward = m.forward;
    let backward = m.backward.unwrap_or(Time(m.forward.ps().saturating_mul(2)));
    let rank_of = |p: usize, d: usize, t: usize| t + tp * (d + dp * p);
    let mut groups = BTreeMap::new();
    for p in 0..pp {
        for d in 0..dp {
            groups.insert(
                format!("tp{p}.{d}"),
                (0..tp).map(|t| rank_of(p, d, t)).collect(),
            );
        }
        for t in 0..tp {
            groups.insert(
                format!("dp{p}.{t}"),
                (0..dp).map(|d| rank_of(p, d, t)).collect(),
            );
        }
    }
    let layers = m.layers / pp;
    let (act, tpb) = (m.activation_bytes.bytes(), m.tp_bytes.bytes());
    let grad = m.parameter_bytes.bytes() / tp as u64;
    let mut traces = Vec::with_capacity(ranks);
    let mut marks = Vec::with_capacity(ranks);
    for r in 0..ranks {
        let (t, d, p) = (r % tp, (r / tp) % dp, r / (tp * dp));
        let mut nodes: Vec<TraceNode> = Vec::new();
        let mut push = |name: String, op: Op, deps: Vec<u32>| {
            let id = nodes.len() as u32;
            nodes.push(TraceNode {
                id: u64::from(id),
                name,
                op,
                deps,
            });
            id
        };
        let compute = |d: Time| Op::Compute {
            duration: Some(d),
            num_ops: None,
            tensor_bytes: None,
        };
        let all_reduce = |bytes: u64, group: String| Op::Collective {
            kind: CollKind::AllReduce,
            bytes,
            group: Some(group),
        };
        // 1F1B: warm-up forwards, then one forward and one backward in turn, then the rest.
        let warm = (pp - p - 1).min(mbs);
        let mut order: Vec<(bool, usize)> = (0..warm).map(|i| (true, i)).collect();
        for i in 0..mbs - warm {
            order.push((true, warm + i));
            order.push((false, i));
        }
        order.extend((mbs - warm..mbs).map(|i| (false, i)));
        let mut stream: Option<u32> = None;
        let mut ends = Vec::with_capacity(m.iterations);
        for it in 0..m.iterations {
            let (mut bucket, mut reduces) = (0u64, Vec::new());
            for &(fwd, mb) in &order {
                let mut deps: Vec<u32> = Vec::new();
                let from = if fwd {
                    p.checked_sub(1)
                } else {
                    (p + 1 < pp).then_some(p + 1)
                };
                let tag = 2 * (it * mbs + mb) as u64 + u64::from(!fwd);
                if let Some(q) = from.filter(|_| act > 0) {
                    // Posted in schedule order, once the stream reaches this micro-batch.
                    deps.push(push(
                        format!("recv mb{mb} from stage {q}"),
                        Op::Recv {
                            peer: rank_of(q, d, t) as u32,
                            bytes: act,
                            tag,
                        },
                        stream.into_iter().collect(),
                    ));
                }
                for k in 0..layers {
                    let layer = if fwd {
                        p * layers + k
                    } else {
                        p * layers + layers - 1 - k
                    };
                    deps.extend(stream);
                    let c = push(
                        format!(
                            "{} layer {layer} mb{mb}",
                            if fwd { "forward" } else { "backward" }
                        ),
                        compute(if fwd { forward } else { backward }),
                        std::mem::take(&mut deps),
                    );
                    stream = Some(c);
                    deps.push(c);
                    if tp > 1 && tpb > 0 {
                        let a = push(
                            format!("tp all_reduce layer {layer} mb{mb}"),
                            all_reduce(tpb, format!("tp{p}.{d}")),
                            vec![c],
                        );
                        // Tensor parallelism waits for its All-Reduce before the next layer.
                        deps = vec![a];
                        stream = Some(a);
                    }
                    if !fwd && mb + 1 == mbs && dp > 1 && grad > 0 {
                        bucket += grad;
                        if bucket >= m.bucket.bytes() || k + 1 == layers {
                            reduces.push(push(
                                format!("dp all_reduce {bucket} B after layer {layer}"),
                                all_reduce(bucket, format!("dp{p}.{t}")),
                                deps.clone(),
                            ));
                            bucket = 0;
                        }
                    }
                }
                let to = if fwd {
                    (p + 1 < pp).then_some(p + 1)
                } else {
                    p.checked_sub(1)
                };
                if let Some(q) = to.filter(|_| act > 0) {
                    push(
                        format!("send mb{mb} to stage {q}"),
                        Op::Send {
                            peer: rank_of(q, d, t) as u32,
                            bytes: act,
                            tag,
                        },
                        deps,
                    );
                }
            }
            let mut deps = reduces;
            deps.extend(stream);
            let opt = push(
                format!("optimizer iteration {it}"),
                compute(m.optimizer),
                deps,
            );
            // The next iteration starts when this one's optimizer step is done.
            stream = Some(opt);
            ends.push(opt);
        }
        marks.push(ends);
        traces.push(RankTrace {
            file: format!("model rank {r}"),
            version: String::new(),
            nodes,
        });
    }
    Ok((traces, groups, marks))
}

/// Seconds as a time, rounded up to the picosecond.
fn secs(s: f64) -> Time {
    Time((s * PS_PER_S as f64).ceil() as u64)
}

fn nodes_of(t: &RankTrace, acts: Vec<Action>) -> Vec<SchedNode> {
    t.nodes
        .iter()
        .zip(acts)
        .map(|(n, action)| SchedNode {
            id: n.id,
            name: n.name.clone(),
            action,
            deps: n.deps.clone(),
        })
        .collect()
}

/// The operation that runs a trace collective and the algorithm the scenario gives it.
fn algorithm_of(
    s: &crate::scenario::Scenario,
    kind: CollKind,
) -> (Collective, Option<&AlgorithmYaml>) {
    let a = &s.workload.collective_algorithms;
    match kind {
        CollKind::AllReduce | CollKind::Barrier => (Collective::AllReduce, a.all_reduce.as_ref()),
        CollKind::AllGather => (Collective::AllGather, a.all_gather.as_ref()),
        CollKind::ReduceScatter => (Collective::ReduceScatter, a.reduce_scatter.as_ref()),
        CollKind::AllToAll => (Collective::AllToAll, a.all_to_all.as_ref()),
        CollKind::Broadcast => (Collective::Broadcast, a.broadcast.as_ref()),
        CollKind::Reduce => (Collective::Reduce, a.reduce.as_ref()),
    }
}

/// A `workload.collectives` entry for `op` with `alg`, the scenario's `collective_algorithms`
/// options and every other option at its default (built through serde, so new options keep
/// their defaults here too).
fn collective_spec(
    s: &crate::scenario::Scenario,
    op: Collective,
    alg: Option<&AlgorithmYaml>,
) -> Result<CollectiveYaml, String> {
    let e = |e: serde_yaml::Error| e.to_string();
    let o = &s.workload.collective_algorithms;
    let mut m = serde_yaml::Mapping::new();
    m.insert("op".into(), op.key().into());
    if let Some(a) = alg {
        m.insert("algorithm".into(), serde_yaml::to_value(a).map_err(e)?);
        if let AlgorithmYaml::PerDim(_) = a {
            if let Some(x) = &o.scheme {
                m.insert("scheme".into(), serde_yaml::to_value(x).map_err(e)?);
            }
            if let Some(x) = &o.policy {
                m.insert("policy".into(), serde_yaml::to_value(x).map_err(e)?);
            }
        }
    }
    if let Some(c) = o.chunks {
        m.insert("chunks".into(), (c as u64).into());
    }
    serde_yaml::from_value(serde_yaml::Value::Mapping(m)).map_err(e)
}

/// Reads ASTRA-sim's communicator groups: `{"group id": [ranks...]}`.
fn read_groups(
    src: &Source,
    at: &FieldPath,
    rel: &str,
    ranks: usize,
) -> Result<BTreeMap<String, Vec<usize>>, ScenarioError> {
    let here = at.key("comm_groups");
    let path = relative_to_scenario(src, rel);
    let text = std::fs::read_to_string(&path)
        .map_err(|e| src.error_at(&here, format!("cannot read {}: {e}", path.display())))?;
    let map: BTreeMap<String, Vec<usize>> = serde_json::from_str(&text).map_err(|e| {
        src.error_at(
            &here,
            format!(
                "{}: line {} column {}: {e} (expected {{\"group id\": [ranks...]}})",
                path.display(),
                e.line(),
                e.column()
            ),
        )
    })?;
    for (name, members) in &map {
        if members.is_empty() {
            return Err(src.error_at(
                &here,
                format!("{}: group `{name}` has no ranks", path.display()),
            ));
        }
        for (k, &m) in members.iter().enumerate() {
            if m >= ranks {
                return Err(src.error_at(
                    &here,
                    format!(
                        "{}: group `{name}` names rank {m}; the workload has {ranks} ranks",
                        path.display()
                    ),
                ));
            }
            if members[..k].contains(&m) {
                return Err(src.error_at(
                    &here,
                    format!("{}: group `{name}` lists rank {m} twice", path.display()),
                ));
            }
        }
    }
    Ok(map)
}

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
    /// How many collectives ran on it.
    pub count: usize,
    /// Their sizes summed.
    pub bytes: u64,
    /// Their times summed, microseconds.
    pub time_us: f64,
}

/// The chain of nodes that set the iteration time, followed back on the rank that finished
/// last: from its last node to the parent that finished last, or, for a compute node that
/// waited for the stream, to the compute node that freed it. Time a communication node
/// spent waiting for other ranks counts as that node's.
#[derive(Clone, Debug, Serialize)]
pub struct CriticalPath {
    /// The rank it is on.
    pub rank: usize,
    /// Nodes on it.
    pub nodes: usize,
    /// Compute (and memory) time on it.
    pub compute_ps: u64,
    /// Communication time on it.
    pub comm_ps: u64,
    /// The nodes that took longest on it, longest first (at most 5).
    pub top: Vec<PathStep>,
}

/// One node on the critical path.
#[derive(Clone, Debug, Serialize)]
pub struct PathStep {
    /// Node id.
    pub node: u64,
    /// Node name.
    pub name: String,
    /// `compute`, `communication` or `delay`.
    pub kind: &'static str,
    /// Start to finish.
    pub time_ps: u64,
}

fn critical_path(rank: usize, s: &RankScheduler) -> Option<CriticalPath> {
    let (nodes, recs) = (s.nodes(), s.records());
    let mut at = (0..nodes.len())
        .filter(|&i| recs[i].end.is_some())
        .max_by_key(|&i| (recs[i].end, std::cmp::Reverse(i)))?;
    // Compute nodes by the time they freed the stream (one lookup per step, not a scan).
    let mut freed: BTreeMap<u64, Vec<usize>> = BTreeMap::new();
    for (i, (n, r)) in nodes.iter().zip(recs).enumerate() {
        if let (Action::Compute(_), Some(end)) = (&n.action, r.end) {
            freed.entry(end.ps()).or_default().push(i);
        }
    }
    let mut seen = vec![false; nodes.len()];
    let mut path = Vec::new();
    let (mut compute_ps, mut comm_ps) = (0, 0);
    while !seen[at] {
        seen[at] = true;
        let r = recs[at];
        let (Some(start), Some(end)) = (r.start, r.end) else {
            break;
        };
        let time_ps = end.ps() - start.ps();
        let kind = match nodes[at].action {
            Action::Compute(_) => {
                compute_ps += time_ps;
                "compute"
            }
            Action::Delay(_) => "delay",
            _ => {
                comm_ps += time_ps;
                "communication"
            }
        };
        path.push(PathStep {
            node: nodes[at].id,
            name: nodes[at].name.clone(),
            kind,
            time_ps,
        });
        let waited_for_stream =
            matches!(nodes[at].action, Action::Compute(_)) && r.ready.is_some_and(|t| t < start);
        let prev = if waited_for_stream {
            freed
                .get(&start.ps())
                .into_iter()
                .flatten()
                .copied()
                .filter(|&i| !seen[i])
                .max_by_key(|&i| (recs[i].start, i))
        } else {
            nodes[at]
                .deps
                .iter()
                .map(|&d| d as usize)
                .filter(|&d| !seen[d] && recs[d].end.is_some())
                .max_by_key(|&d| (recs[d].end, d))
        };
        match prev {
            Some(p) => at = p,
            None => break,
        }
    }
    let n = path.len();
    path.sort_by(|a, b| b.time_ps.cmp(&a.time_ps).then(a.node.cmp(&b.node)));
    path.truncate(5);
    Some(CriticalPath {
        rank,
        nodes: n,
        compute_ps,
        comm_ps,
        top: path,
    })
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

/// The training section from the finished schedulers (`scheds[host]`) and the collective
/// results of the trace's jobs.
pub fn report(
    info: &TrainingInfo,
    scheds: &[Option<&RankScheduler>],
    collectives: Vec<collective::CollectiveResult>,
) -> TrainingReport {
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
        for (src, tag, len) in s.unmatched_messages() {
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
    let iteration = complete.then(|| finishes.iter().max().copied().unwrap_or(Time::ZERO));
    // Ranks that stalled are split up to the last time anything finished.
    let horizon = iteration
        .unwrap_or_else(|| finishes.iter().max().copied().unwrap_or(Time::ZERO))
        .ps();
    // When each message was posted, per (src, dst, tag): a receive communicates from then on;
    // before, its rank only waits for the peer (a pipeline bubble), which is idle time.
    let mut posted: BTreeMap<(u32, u32, u64), Vec<u64>> = BTreeMap::new();
    for (h, s) in scheds.iter().enumerate() {
        let Some(s) = s else { continue };
        for (n, rec) in s.nodes().iter().zip(s.records()) {
            if let (Action::Send { dst, tag, .. }, Some(t)) = (&n.action, rec.start) {
                posted
                    .entry((h as u32, *dst, tag & TAG_MASK))
                    .or_default()
                    .push(t.ps());
            }
        }
    }
    for v in posted.values_mut() {
        v.sort_unstable();
    }
    let mut overall = Breakdown::default();
    let mut per_rank = Vec::new();
    for (r, ri) in info.ranks.iter().enumerate() {
        let Some(s) = scheds.get(ri.host).copied().flatten() else {
            continue;
        };
        // Receives per key in the order they completed: the k-th took the k-th message.
        let mut recv_from: BTreeMap<usize, u64> = BTreeMap::new();
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
            let posts = posted.get(&(src, ri.host as u32, tag));
            for (k, &(_, i)) in v.iter().enumerate() {
                if let Some(&t) = posts.and_then(|p| p.get(k)) {
                    recv_from.insert(i, t);
                }
            }
        }
        let (mut comp, mut comm) = (Vec::new(), Vec::new());
        for (i, (n, rec)) in s.nodes().iter().zip(s.records()).enumerate() {
            let Some(start) = rec.start else { continue };
            let start = recv_from.get(&i).map_or(start, |&t| start.max(Time(t)));
            let end = rec.end.map_or(horizon, Time::ps);
            let iv = (start.ps(), end.max(start.ps()));
            match n.action {
                Action::Compute(_) => comp.push(iv),
                Action::Collective(_) | Action::Send { .. } | Action::Recv { .. } => comm.push(iv),
                Action::Delay(_) => {}
            }
        }
        let comp = merged(comp);
        let comm = merged(comm);
        let compute_ps = union_len(comp.clone());
        let comm_ps = union_len(comm.clone());
        let hidden = overlap(&comp, &comm);
        let exposed = comm_ps - hidden;
        let b = Breakdown {
            compute_ps,
            exposed_comm_ps: exposed,
            hidden_comm_ps: hidden,
            idle_ps: horizon.saturating_sub(compute_ps + exposed),
        };
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
        });
    }
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
            count: 0,
            bytes: 0,
            time_us: 0.0,
        });
        g.count += 1;
        g.bytes += c.size_bytes;
        g.time_us += c.time_us.unwrap_or(0.0);
    }
    let critical_path = iteration.and_then(|it| {
        let r = per_rank.iter().find(|x| x.finish_ps == Some(it.ps()))?;
        let s = scheds.get(r.host).copied().flatten()?;
        critical_path(r.rank, s)
    });
    let iterations_ps: Vec<u64> = match iteration {
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
    };
    let mean_iteration_ps = (!iterations_ps.is_empty())
        .then(|| iterations_ps.iter().sum::<u64>() / iterations_ps.len() as u64);
    TrainingReport {
        iterations_ps,
        mean_iteration_ps,
        traces: info.traces.clone(),
        ranks: info.ranks.len(),
        iteration_time_ps: iteration.map(Time::ps),
        iteration_time_us: iteration.map(Time::as_us_f64),
        overall,
        per_rank,
        collective_kinds: kinds.into_values().map(|(k, _, _)| k).collect(),
        communicators: groups.into_values().collect(),
        critical_path,
        collectives,
        waiting,
    }
}

/// Summary lines for the training section.
pub fn summary(t: &TrainingReport) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    let us = |ps: u64| ps as f64 / 1e6;
    let _ = writeln!(
        s,
        "Training: {} ranks from {}; {} {}",
        t.ranks,
        t.traces,
        if t.iterations_ps.len() > 1 {
            "time of all iterations"
        } else {
            "iteration time"
        },
        t.iteration_time_us
            .map_or_else(|| "- (did not finish)".to_string(), |x| format!("{x:.3}us"))
    );
    if t.iterations_ps.len() > 1 {
        let _ = writeln!(
            s,
            "          {} iterations: {}; mean {:.3}us",
            t.iterations_ps.len(),
            t.iterations_ps
                .iter()
                .map(|&p| format!("{:.3}us", us(p)))
                .collect::<Vec<_>>()
                .join(", "),
            us(t.mean_iteration_ps.unwrap_or(0))
        );
    }
    let o = &t.overall;
    let total = (o.compute_ps + o.exposed_comm_ps + o.idle_ps).max(1) as f64;
    let _ = writeln!(
        s,
        "          over all ranks: compute {:.3}us ({:.1}%), exposed communication {:.3}us ({:.1}%), idle {:.3}us ({:.1}%); communication hidden under compute {:.3}us",
        us(o.compute_ps),
        o.compute_ps as f64 / total * 100.0,
        us(o.exposed_comm_ps),
        o.exposed_comm_ps as f64 / total * 100.0,
        us(o.idle_ps),
        o.idle_ps as f64 / total * 100.0,
        us(o.hidden_comm_ps),
    );
    for k in &t.collective_kinds {
        let _ = writeln!(
            s,
            "          {}: {} collectives, {} B, {:.3}us{}",
            k.op,
            k.count,
            k.bytes,
            k.time_us,
            k.busbw_gbps
                .map_or_else(String::new, |b| format!(", mean busbw {b:.2} GB/s"))
        );
    }
    if let Some(c) = &t.critical_path {
        let _ = writeln!(
            s,
            "          critical path on rank {}: {} nodes, compute {:.3}us, communication {:.3}us; longest: {}",
            c.rank,
            c.nodes,
            us(c.compute_ps),
            us(c.comm_ps),
            c.top
                .iter()
                .map(|p| format!("node {} {} {:.3}us", p.node, p.name, us(p.time_ps)))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    if t.communicators.len() > 1 {
        for g in &t.communicators {
            let _ = writeln!(
                s,
                "          group {} ({} ranks): {} collectives, {} B, {:.3}us",
                g.group, g.ranks, g.count, g.bytes, g.time_us
            );
        }
    }
    s
}

/// The iteration as a Chrome / Perfetto trace (`trace.json`, opens in ui.perfetto.dev): a
/// process per rank with a `compute` track and as many `comm` tracks as communication
/// overlapped on that rank (each node on the first track free at its start). `None` without
/// a training workload.
pub fn perfetto_trace(fin: &crate::world::Finished) -> Option<String> {
    let info = fin.training.as_ref()?;
    let scheds: Vec<Option<&RankScheduler>> = fin
        .output
        .actors
        .iter()
        .filter_map(|a| match a {
            crate::world::Node::Host(h) => Some(h.app.training.as_ref()),
            crate::world::Node::Switch(_) => None,
        })
        .collect();
    let us = |ps: u64| ps as f64 / 1e6;
    let mut events = Vec::new();
    for (r, ri) in info.ranks.iter().enumerate() {
        let Some(s) = scheds.get(ri.host).copied().flatten() else {
            continue;
        };
        events.push(serde_json::json!({
            "ph": "M", "name": "process_name", "pid": r,
            "args": {"name": format!("rank {r} (host {})", ri.host)}
        }));
        events.push(serde_json::json!({
            "ph": "M", "name": "thread_name", "pid": r, "tid": 0, "args": {"name": "compute"}
        }));
        // Communication lanes: the end time of the last node on each.
        let mut lanes: Vec<u64> = Vec::new();
        let mut comm: Vec<(u64, u64, usize)> = s
            .nodes()
            .iter()
            .zip(s.records())
            .enumerate()
            .filter(|(_, (n, _))| {
                matches!(
                    n.action,
                    Action::Collective(_) | Action::Send { .. } | Action::Recv { .. }
                )
            })
            .filter_map(|(i, (_, rec))| Some((rec.start?.ps(), rec.end?.ps(), i)))
            .collect();
        comm.sort_unstable();
        let mut lane_of = BTreeMap::new();
        for &(a, b, i) in &comm {
            let lane = match lanes.iter().position(|&end| end <= a) {
                Some(l) => l,
                None => {
                    lanes.push(0);
                    events.push(serde_json::json!({
                        "ph": "M", "name": "thread_name", "pid": r, "tid": lanes.len(),
                        "args": {"name": format!("comm {}", lanes.len() - 1)}
                    }));
                    lanes.len() - 1
                }
            };
            lanes[lane] = b;
            lane_of.insert(i, lane + 1);
        }
        for (i, (n, rec)) in s.nodes().iter().zip(s.records()).enumerate() {
            let (Some(a), Some(b)) = (rec.start, rec.end) else {
                continue;
            };
            let (tid, cat) = match n.action {
                Action::Compute(_) => (0, "compute"),
                Action::Delay(_) => continue,
                _ => (lane_of.get(&i).copied().unwrap_or(1), "comm"),
            };
            let name = if n.name.is_empty() {
                format!("node {}", n.id)
            } else {
                n.name.clone()
            };
            events.push(serde_json::json!({
                "ph": "X", "name": name, "cat": cat, "pid": r, "tid": tid,
                "ts": us(a.ps()), "dur": us(b.ps() - a.ps()),
                "args": {"node": n.id}
            }));
        }
    }
    serde_json::to_string(&serde_json::json!({
        "displayTimeUnit": "ns",
        "traceEvents": events,
    }))
    .ok()
}
