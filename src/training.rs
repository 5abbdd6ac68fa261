//! Training workloads in a scenario: Chakra traces turned into per-host schedulers, and the
//! iteration-time breakdown read back from them.
//!
//! `workload.chakra` names one trace per rank. Each rank's nodes become
//! [`fabemu_workload::Action`]s: compute and memory nodes take their recorded duration or the
//! device model's roofline time (`workload.device`); a point-to-point node names its peer
//! rank, mapped to that rank's host; a collective becomes a job of the collective executor,
//! compiled by the same algorithm library as `workload.collectives`
//! (`crate::collective::compile_one`).
//!
//! Matching collectives across ranks: the ranks of a communicator (the node's `pg_name` group
//! of the `comm_groups` file, or every rank) must issue the same sequence of collectives on
//! it; the k-th collective of a group in trace order on each member is one job. A member with
//! a different operation or size at the same place, or a different number of collectives, is
//! a located error, since the run would otherwise hang.
//!
//! A training collective's message names its job (see [`fabemu_collectives::executor`]): the
//! jobs of `workload.collectives` come first, then the trace's, numbered group by group.

use std::collections::{BTreeMap, BTreeSet};
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
    /// The trace's collectives, in the order they were matched (group by group).
    pub collectives: Vec<CollectiveInfo>,
    /// Each collective's job number on its members' runners, after `job_base`: collectives
    /// that share no host share numbers (see `build`).
    pub slots: Vec<usize>,
    /// The group each collective ran on (`all` or the `pg_name`).
    pub groups: Vec<String>,
    /// The job number of the first trace collective.
    pub job_base: usize,
    /// Per rank, the node that ends each iteration (the built-in model's several
    /// iterations); empty: the trace is one iteration.
    pub iteration_ends: Vec<Vec<u32>>,
    /// The hosts of each communicator that ran a collective (`all` or the group's name), in
    /// rank order.
    pub members: BTreeMap<String, Vec<usize>>,
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
///
/// Job numbers are per host: a collective takes the first number free on all of its members
/// (after the numbers their earlier collectives took), so collectives of disjoint groups (the
/// tensor-parallel groups of different stages, say) share numbers. A host's runner holds only
/// the jobs up to its highest number, and the run's limit of [`MAX_JOBS`] applies to the
/// collectives one host takes part in, not to all of them (4096 tensor-parallel All-Reduces
/// over 128 groups are 32 numbers).
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
        let (traces, groups, m_marks) = model_traces(m, n_hosts, s.workload.device.is_some())
            .map_err(|(f, msg)| src.error_at(&at.key(f), msg))?;
        marks = m_marks;
        let label = format!(
            "the built-in model (dp {} x tp {} x pp {}{}, {} micro-batches)",
            m.dp,
            m.tp,
            m.pp,
            if m.ep > 1 {
                format!(" x ep {}", m.ep)
            } else {
                String::new()
            },
            m.micro_batches
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
    let mut slots = Vec::new();
    let mut group_names = Vec::new();
    // Per host, the first job number (after `job_base`) none of its collectives uses yet.
    let mut next_free = vec![0usize; n_hosts];
    let mut group_members = BTreeMap::new();
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
        group_members.insert(label.clone(), member_hosts.clone());
        for (k, &(i0, kind, bytes)) in reference.iter().enumerate() {
            let job = if members.len() < 2 || (bytes == 0 && kind != CollKind::Barrier) {
                None
            } else {
                let slot = member_hosts
                    .iter()
                    .map(|&h| next_free[h])
                    .max()
                    .unwrap_or(0);
                let j = job_base + slot;
                if j >= MAX_JOBS {
                    return Err(src.error_at(
                        &at,
                        format!(
                            "a host takes part in more than {} of the traces' collectives; \
                             fabemu runs at most {MAX_JOBS} per host (workload.collectives \
                             included)",
                            MAX_JOBS - job_base
                        ),
                    ));
                }
                for &h in &member_hosts {
                    next_free[h] = slot + 1;
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
                let program_of: BTreeMap<usize, Program> =
                    member_hosts.iter().copied().zip(programs).collect();
                for (h, program) in program_of {
                    let Some(list) = jobs.get_mut(h) else {
                        continue;
                    };
                    // Numbers this host does not use: empty jobs keep the numbering.
                    while list.len() <= j {
                        list.push(Job {
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
                            stream: None,
                        });
                    }
                    list[j] = Job {
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
                        stream: None,
                    };
                }
                slots.push(slot);
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
        slots,
        groups: group_names,
        job_base,
        iteration_ends: marks,
        members: group_members,
    };
    Ok(Some((info, scheds)))
}

/// Communicator groups: group id -> ranks.
type Groups = BTreeMap<String, Vec<usize>>;

/// The built-in model's traces, groups, and per rank the last node of each iteration.
type Model = (Vec<RankTrace>, Groups, Vec<Vec<u32>>);

/// A per-layer compute of the built-in model: a time, or work for the device model.
fn layer_op(time: Option<Time>, flops: Option<u64>, memory: Option<u64>) -> Op {
    Op::Compute {
        duration: time,
        num_ops: flops,
        tensor_bytes: memory,
    }
}

/// Reads `field` (FLOPs per layer) as a whole number of operations.
fn flops_of(field: &'static str, v: Option<f64>) -> Result<Option<u64>, (&'static str, String)> {
    match v {
        None => Ok(None),
        // Below 2^63 so that doubling it for the default backward pass stays exact.
        Some(x) if x.is_finite() && x > 0.0 && x < 9.2e18 => Ok(Some(x.round().max(1.0) as u64)),
        Some(x) => Err((
            field,
            format!("{x}: must be a number of operations > 0 (and < 9.2e18)"),
        )),
    }
}

/// The forward and backward compute of one layer (see `workload.training`'s fields): exactly
/// one of a time and FLOPs per pass (backward defaults to twice the forward), memory bytes
/// only beside FLOPs, FLOPs only with a device to time them.
fn layer_ops(
    m: &crate::scenario::TrainingYaml,
    has_device: bool,
) -> Result<(Op, Op), (&'static str, String)> {
    let ff = flops_of("forward_flops", m.forward_flops)?;
    let bf = flops_of("backward_flops", m.backward_flops)?;
    let fmem = m.forward_memory.map(|b| b.bytes());
    let bmem = m.backward_memory.map(|b| b.bytes());
    let forward = match (m.forward, ff) {
        (Some(_), Some(_)) => {
            return Err((
                "forward_flops",
                "give the forward pass as a time (`forward`) or as FLOPs (`forward_flops`), \
                 not both"
                    .into(),
            ))
        }
        (None, None) => {
            return Err((
                "forward",
                "the forward pass needs a time per layer (`forward`) or FLOPs \
                 (`forward_flops`, timed by `workload.device`)"
                    .into(),
            ))
        }
        (t, f) => (t, f),
    };
    if m.backward.is_some() && bf.is_some() {
        return Err((
            "backward_flops",
            "give the backward pass as a time (`backward`) or as FLOPs (`backward_flops`), \
             not both"
                .into(),
        ));
    }
    for (field, mem, flops) in [
        ("forward_memory", fmem, forward.1),
        (
            "backward_memory",
            bmem,
            bf.or(if m.backward.is_none() {
                forward.1
            } else {
                None
            }),
        ),
    ] {
        if mem.is_some() && flops.is_none() {
            return Err((
                field,
                "memory bytes time a pass given as FLOPs (the roofline's other bound); this \
                 pass is given as a time"
                    .into(),
            ));
        }
    }
    if (forward.1.is_some() || bf.is_some()) && !has_device {
        return Err((
            if forward.1.is_some() {
                "forward_flops"
            } else {
                "backward_flops"
            },
            "compute given as FLOPs needs `workload.device` (peak_flops, memory_bandwidth, \
             efficiency) to time it"
                .into(),
        ));
    }
    let fwd = layer_op(forward.0, forward.1, forward.1.and(fmem));
    let bwd = match (m.backward, bf) {
        (Some(t), _) => layer_op(Some(t), None, None),
        (None, Some(f)) => layer_op(None, Some(f), bmem),
        // Twice the forward pass, in its own form.
        (None, None) => match forward {
            (Some(t), _) => layer_op(Some(Time(t.ps().saturating_mul(2))), None, None),
            (None, f) => layer_op(
                None,
                f.map(|x| x.saturating_mul(2)),
                bmem.or(fmem.map(|b| b.saturating_mul(2))),
            ),
        },
    };
    Ok((fwd, bwd))
}

/// Where each parallel dimension sits on the hosts: per dimension (tp, ep, dp, pp) its host
/// stride, from `mapping` (innermost first; the rest follow in the default order).
fn strides(m: &crate::scenario::TrainingYaml) -> Result<[usize; 4], (&'static str, String)> {
    use crate::scenario::ParallelDim as D;
    let all = [D::Tp, D::Ep, D::Dp, D::Pp];
    let mut order: Vec<D> = Vec::with_capacity(4);
    for &d in &m.mapping {
        if order.contains(&d) {
            return Err((
                "mapping",
                format!("{d:?} is listed twice; list each of tp, ep, dp, pp at most once")
                    .to_lowercase(),
            ));
        }
        order.push(d);
    }
    order.extend(all.iter().filter(|d| !m.mapping.contains(d)));
    let degree = |d: D| match d {
        D::Tp => m.tp,
        D::Ep => m.ep,
        D::Dp => m.dp,
        D::Pp => m.pp,
    };
    let mut out = [0usize; 4];
    let mut stride = 1usize;
    for d in order {
        out[all.iter().position(|&x| x == d).unwrap_or(0)] = stride;
        stride = stride.saturating_mul(degree(d));
    }
    Ok(out)
}

/// The per-rank traces of the built-in model (`workload.training`, see its doc) and its
/// communicator groups (`tp{p}.{d}`, `dp{p}.{t}`, with ep > 1 also `ep{p}.{d}.{t}` and the
/// expert index appended to the others); errors name the field. Rank = host index; where a
/// rank's coordinates put it is `mapping`'s business ([`strides`]).
fn model_traces(
    m: &crate::scenario::TrainingYaml,
    hosts: usize,
    has_device: bool,
) -> Result<Model, (&'static str, String)> {
    let (dp, tp, pp, ep, mbs) = (m.dp, m.tp, m.pp, m.ep, m.micro_batches);
    for (f, v) in [
        ("dp", dp),
        ("tp", tp),
        ("pp", pp),
        ("ep", ep),
        ("micro_batches", mbs),
        ("layers", m.layers),
    ] {
        if v == 0 {
            return Err((f, "must be at least 1".into()));
        }
    }
    let ranks = dp.saturating_mul(tp).saturating_mul(pp).saturating_mul(ep);
    if ranks != hosts {
        return Err((
            "dp",
            if ep == 1 {
                format!(
                    "dp x tp x pp = {dp} x {tp} x {pp} = {ranks} ranks; the fabric has {hosts} \
                     hosts"
                )
            } else {
                format!(
                    "dp x tp x pp x ep = {dp} x {tp} x {pp} x {ep} = {ranks} ranks; the fabric \
                     has {hosts} hosts"
                )
            },
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
    let moe = m.moe_bytes.bytes();
    if moe > 0 && ep == 1 {
        return Err((
            "moe_bytes",
            "the MoE All-To-All runs on the expert-parallel group: set `ep` > 1".into(),
        ));
    }
    let (forward, backward) = layer_ops(m, has_device)?;
    // Bound the model's size: nodes per rank ~ micro-batches x layers x 6.
    let per_rank = (mbs as u64)
        .saturating_mul(m.layers as u64 / pp as u64)
        .saturating_mul(6)
        .saturating_mul(m.iterations as u64);
    if per_rank.saturating_mul(ranks as u64) > 1 << 24 {
        return Err((
            "micro_batches",
            "the iteration would have more than 2^24 nodes".into(),
        ));
    }
    let [st, se, sd, sp] = strides(m)?;
    let rank_of = |p: usize, d: usize, t: usize, e: usize| t * st + e * se + d * sd + p * sp;
    // The expert index, in group names only when there is expert parallelism (the names
    // without it stay as they were).
    let ex = |e: usize| {
        if ep > 1 {
            format!(".{e}")
        } else {
            String::new()
        }
    };
    let mut groups = BTreeMap::new();
    for p in 0..pp {
        for e in 0..ep {
            for d in 0..dp {
                groups.insert(
                    format!("tp{p}.{d}{}", ex(e)),
                    (0..tp).map(|t| rank_of(p, d, t, e)).collect(),
                );
            }
            for t in 0..tp {
                groups.insert(
                    format!("dp{p}.{t}{}", ex(e)),
                    (0..dp).map(|d| rank_of(p, d, t, e)).collect(),
                );
            }
        }
        if ep > 1 {
            for d in 0..dp {
                for t in 0..tp {
                    groups.insert(
                        format!("ep{p}.{d}.{t}"),
                        (0..ep).map(|e| rank_of(p, d, t, e)).collect(),
                    );
                }
            }
        }
    }
    let layers = m.layers / pp;
    let (act, tpb) = (m.activation_bytes.bytes(), m.tp_bytes.bytes());
    let grad = m.parameter_bytes.bytes() / tp as u64;
    let mut traces: Vec<Option<RankTrace>> = (0..ranks).map(|_| None).collect();
    let mut marks: Vec<Vec<u32>> = vec![Vec::new(); ranks];
    for p in 0..pp {
        for d in 0..dp {
            for e in 0..ep {
                for t in 0..tp {
                    let r = rank_of(p, d, t, e);
                    let (nodes, ends) = rank_nodes(
                        m,
                        (p, d, t, e),
                        &rank_of,
                        &ex,
                        (&forward, &backward),
                        (layers, act, tpb, moe, grad),
                    );
                    if let Some(slot) = traces.get_mut(r) {
                        *slot = Some(RankTrace {
                            file: format!("model rank {r}"),
                            version: String::new(),
                            nodes,
                        });
                    }
                    if let Some(slot) = marks.get_mut(r) {
                        *slot = ends;
                    }
                }
            }
        }
    }
    // The strides are a mixed radix over the degrees, so every rank got its trace.
    let traces: Vec<RankTrace> = traces.into_iter().flatten().collect();
    if traces.len() != ranks {
        return Err((
            "mapping",
            "does not place every rank on its own host".into(),
        ));
    }
    Ok((traces, groups, marks))
}

/// One rank's nodes of the built-in model (see [`model_traces`]) and the node that ends each
/// iteration. `at` is the rank's (stage, data, tensor, expert) coordinates; `sizes` are
/// (layers per stage, activation, tp All-Reduce, MoE All-To-All, gradient bytes per layer).
fn rank_nodes(
    m: &crate::scenario::TrainingYaml,
    at: (usize, usize, usize, usize),
    rank_of: &dyn Fn(usize, usize, usize, usize) -> usize,
    ex: &dyn Fn(usize) -> String,
    (forward, backward): (&Op, &Op),
    (layers, act, tpb, moe, grad): (usize, u64, u64, u64, u64),
) -> (Vec<TraceNode>, Vec<u32>) {
    let (p, d, t, e) = at;
    let (pp, dp, tp, ep, mbs) = (m.pp, m.dp, m.tp, m.ep, m.micro_batches);
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
    let coll = |kind: CollKind, bytes: u64, group: String| Op::Collective {
        kind,
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
                        peer: rank_of(q, d, t, e) as u32,
                        bytes: act,
                        tag,
                    },
                    stream.into_iter().collect(),
                ));
            }
            let pass = if fwd { "forward" } else { "backward" };
            for k in 0..layers {
                let layer = if fwd {
                    p * layers + k
                } else {
                    p * layers + layers - 1 - k
                };
                deps.extend(stream);
                if ep > 1 && moe > 0 {
                    // Tokens (or their gradients) go to the ranks holding their experts.
                    let a = push(
                        format!("ep all_to_all dispatch {pass} layer {layer} mb{mb}"),
                        coll(CollKind::AllToAll, moe, format!("ep{p}.{d}.{t}")),
                        std::mem::take(&mut deps),
                    );
                    deps.push(a);
                }
                let c = push(
                    format!("{pass} layer {layer} mb{mb}"),
                    if fwd {
                        forward.clone()
                    } else {
                        backward.clone()
                    },
                    std::mem::take(&mut deps),
                );
                stream = Some(c);
                deps.push(c);
                if ep > 1 && moe > 0 {
                    // ... and come back to their tokens' ranks before the layer ends.
                    let a = push(
                        format!("ep all_to_all combine {pass} layer {layer} mb{mb}"),
                        coll(CollKind::AllToAll, moe, format!("ep{p}.{d}.{t}")),
                        vec![c],
                    );
                    deps = vec![a];
                    stream = Some(a);
                }
                if tp > 1 && tpb > 0 {
                    let a = push(
                        format!("tp all_reduce layer {layer} mb{mb}"),
                        coll(CollKind::AllReduce, tpb, format!("tp{p}.{d}{}", ex(e))),
                        std::mem::take(&mut deps),
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
                            coll(CollKind::AllReduce, bucket, format!("dp{p}.{t}{}", ex(e))),
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
                        peer: rank_of(q, d, t, e) as u32,
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
            layer_op(Some(m.optimizer), None, None),
            deps,
        );
        // The next iteration starts when this one's optimizer step is done.
        stream = Some(opt);
        ends.push(opt);
    }
    (nodes, ends)
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
    let text = fabemu_workload::input::read_text_limited(
        &path,
        crate::scenario::MAX_GROUPS_BYTES,
        "a communicator-group file",
    )
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
    /// Their hosts' indices, in rank order.
    pub hosts: Vec<usize>,
    /// How many collectives ran on it.
    pub count: usize,
    /// Their sizes summed.
    pub bytes: u64,
    /// Their times summed, microseconds.
    pub time_us: f64,
}

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
fn critical_path(
    info: &TrainingInfo,
    scheds: &[Option<&RankScheduler>],
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
    // Per host, compute nodes by the time they freed the stream.
    let mut freed: BTreeMap<(usize, u64), Vec<usize>> = BTreeMap::new();
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
        let waited_for_stream =
            matches!(node.action, Action::Compute(_)) && r.ready.is_some_and(|t| t < start);
        if waited_for_stream {
            if freed_built.insert(h) {
                for (k, (n, rec)) in nodes.iter().zip(recs).enumerate() {
                    if let (Action::Compute(_), Some(e)) = (&n.action, rec.end) {
                        freed.entry((h, e.ps())).or_default().push(k);
                    }
                }
            }
            if let Some(k) = freed
                .get(&(h, start.ps()))
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
            Action::Compute(_) => {
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
    let mut groups: BTreeMap<(String, &'static str), (usize, u64)> = BTreeMap::new();
    for st in &steps {
        let g = groups
            .entry((generic_name(&st.name), st.kind))
            .or_insert((0, 0));
        g.0 += 1;
        g.1 += st.time_ps;
    }
    let mut by_name: Vec<PathGroup> = groups
        .into_iter()
        .map(|((name, kind), (count, time_ps))| PathGroup {
            name,
            kind,
            count,
            time_ps,
        })
        .collect();
    by_name.sort_by(|a, b| b.time_ps.cmp(&a.time_ps).then(a.name.cmp(&b.name)));
    by_name.truncate(8);
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
    // With each post, the send node (for the critical path's waits across ranks).
    let mut posted: BTreeMap<(u32, u32, u64), Vec<(u64, usize)>> = BTreeMap::new();
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
    // Per (host, receive node): the (host, send node) whose message it took.
    let mut sender_of: BTreeMap<(usize, usize), (usize, usize)> = BTreeMap::new();
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
                if let Some(&(t, send)) = posts.and_then(|p| p.get(k)) {
                    recv_from.insert(i, t);
                    sender_of.insert((ri.host, i), (src as usize, send));
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
            hosts: info.members.get(name).cloned().unwrap_or_default(),
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
        critical_path(info, scheds, r.host, &sender_of)
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
            "          critical path (ends on rank {}, through {} ranks): {} nodes, compute {:.3}us, communication {:.3}us; longest: {}",
            c.rank,
            c.ranks,
            c.nodes,
            us(c.compute_ps),
            us(c.comm_ps),
            c.top
                .iter()
                .map(|p| format!(
                    "rank {} node {} {} {:.3}us",
                    p.rank,
                    p.node,
                    p.name,
                    us(p.time_ps)
                ))
                .collect::<Vec<_>>()
                .join(", ")
        );
        let _ = writeln!(
            s,
            "          critical path by kind: {}",
            c.by_name
                .iter()
                .map(|g| format!("{} x{} {:.3}us", g.name, g.count, us(g.time_ps)))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    if t.communicators.len() > 1 {
        // A large model has hundreds of groups: the first few, then the JSON has them all.
        const SHOWN: usize = 12;
        for g in t.communicators.iter().take(SHOWN) {
            let _ = writeln!(
                s,
                "          group {} ({} ranks): {} collectives, {} B, {:.3}us",
                g.group, g.ranks, g.count, g.bytes, g.time_us
            );
        }
        if t.communicators.len() > SHOWN {
            let _ = writeln!(
                s,
                "          ... and {} more groups (the JSON report's training.communicators)",
                t.communicators.len() - SHOWN
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
            crate::world::Node::Host(h) => Some(h.app.training.as_deref()),
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
