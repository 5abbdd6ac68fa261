//! From traces to schedulers: each rank's nodes as actions, and the collectives matched across
//! the members of their communicator into jobs of the collective executor.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use fabemu_collectives::executor::{DataSpec, Job, JobStart, MAX_JOBS};
use fabemu_collectives::{ChunkRange, Collective, DataType, Program, ReduceOp, StepGen};
use fabemu_fabric::units::Time;
use fabemu_topologies::Graph;
use fabemu_workload::model;
use fabemu_workload::scheduler::{Action, RankScheduler, SchedNode, Stream};
use fabemu_workload::trace::{load_traces, CollKind, Op, RankTrace};
use fabemu_workload::transformer::{self, Device};

use super::{ModelFigures, RankInfo, TrainingInfo};
use crate::collective::{self, CollectiveInfo, Compiled};
use crate::scenario::{
    AlgorithmYaml, CollectiveStreams, CollectiveYaml, FieldPath, Mode, ScenarioError, Source,
};

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
/// Listed program steps over all the trace's collectives and ranks (about 64 bytes each);
/// generated ones (flat ring All-Reduces) take no memory per step and are not counted.
const MAX_STEPS: u64 = 1 << 26;
/// Payload bytes a data-mode training run may hold.
const MAX_DATA_BYTES: u64 = 4 << 30;

/// A built training workload: its description and a scheduler per host (`None`: the host
/// runs no rank).
pub(crate) type Built = (TrainingInfo, Vec<Option<RankScheduler>>);

/// A collective placeholder while groups are matched: `(node index, kind, bytes)`.
type Pending = (usize, CollKind, u64);

/// Per communicator (`""`: every rank), per rank, its collectives in trace order.
type ByGroup = BTreeMap<String, BTreeMap<usize, Vec<Pending>>>;

/// The workload's traces before they are scheduled: Chakra's or the built-in model's.
struct Traces {
    /// The scenario field errors are reported at.
    at: FieldPath,
    /// One per rank.
    traces: Vec<RankTrace>,
    /// Communicator groups (group id -> ranks), if any.
    groups: Option<BTreeMap<String, Vec<usize>>>,
    /// Per rank, its host.
    hosts: Vec<usize>,
    /// The description in the report.
    label: String,
    /// Per rank, the last node of each iteration (the built-in model's optimizer steps).
    marks: Vec<Vec<u32>>,
    /// The device that times FLOPs and bytes, and the fraction of its peak reached.
    device: Option<(Device, f64)>,
    /// A transformer's figures, for tokens/s, TFLOP/s and MFU.
    figures: Option<ModelFigures>,
}

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
    jobs: &mut [Vec<Arc<Job>>],
) -> Result<Option<Built>, ScenarioError> {
    let device = check_device(src)?;
    let Some(tr) = traces_of(src, g, device)? else {
        return Ok(None);
    };
    let data_mode = src.scenario.mode == Mode::Data;
    // Per rank: actions (collectives filled in below), and the collectives per group.
    let mut data_bytes = 0u64;
    let mut actions: Vec<Vec<Action>> = Vec::with_capacity(tr.traces.len());
    let mut by_group = ByGroup::new();
    for r in 0..tr.traces.len() {
        actions.push(rank_actions(
            src,
            &tr,
            r,
            data_mode,
            &mut data_bytes,
            &mut by_group,
        )?);
    }
    if data_bytes > MAX_DATA_BYTES {
        return Err(src.error_at(
            &tr.at,
            format!(
                "data mode holds every payload in memory; the sends need {data_bytes} B (limit \
                 {MAX_DATA_BYTES} B; use `mode: timing`)"
            ),
        ));
    }
    // Match each group's collectives across its members; compile one job per match.
    let mut m = Matcher {
        src,
        g,
        tr: &tr,
        data_mode,
        job_base,
        infos: Vec::new(),
        slots: Vec::new(),
        group_names: Vec::new(),
        next_free: vec![0usize; g.host_count()],
        group_members: BTreeMap::new(),
        compiled: BTreeMap::new(),
        shared: BTreeMap::new(),
        no_job: Arc::new(Job {
            program: Program {
                rank: 0,
                buffer_len: 0,
                input: ChunkRange::new(0, 0),
                output: ChunkRange::new(0, 0),
                steps: Vec::new(),
            },
            start: JobStart::OnDemand,
            elem_bytes: 4,
            data: None,
            class: 0,
            reduce_rate: None,
            hosts: None,
            stream: None,
        }),
        steps_total: 0,
        data_bytes,
    };
    for (key, per_rank) in &by_group {
        m.match_group(key, per_rank, &mut actions, jobs)?;
    }
    let Matcher {
        infos,
        slots,
        group_names,
        group_members,
        ..
    } = m;
    let in_order =
        src.scenario.workload.collective_algorithms.streams == CollectiveStreams::PerCommunicator;
    let mut scheds: Vec<Option<RankScheduler>> = (0..g.host_count()).map(|_| None).collect();
    let mut tr = tr;
    for r in 0..tr.traces.len() {
        let acts = std::mem::take(&mut actions[r]);
        let mut nodes = nodes_of(&mut tr.traces[r], acts);
        if in_order {
            one_stream_per_communicator(src, &tr, r, &by_group, &mut nodes)?;
        }
        scheds[tr.hosts[r]] = Some(RankScheduler::new(nodes, data_mode));
    }
    let info = TrainingInfo {
        ranks: tr
            .traces
            .iter()
            .enumerate()
            .map(|(r, t)| RankInfo {
                host: tr.hosts[r],
                file: t.file.clone(),
            })
            .collect(),
        collectives: infos,
        slots,
        groups: group_names,
        job_base,
        members: group_members,
        traces: tr.label,
        iteration_ends: tr.marks,
        model: tr.figures,
    };
    Ok(Some((info, scheds)))
}

/// Puts rank `r`'s collectives of each communicator on one stream: each waits for the one
/// before it in trace order (NCCL runs a communicator's operations in the order they were
/// enqueued). Refused, naming the group, where the trace's dependencies run them in another
/// order (the added waits would close a cycle and the run would hang).
fn one_stream_per_communicator(
    src: &Source,
    tr: &Traces,
    r: usize,
    by_group: &ByGroup,
    nodes: &mut [SchedNode],
) -> Result<(), ScenarioError> {
    for per_rank in by_group.values() {
        let Some(list) = per_rank.get(&r) else {
            continue;
        };
        for w in list.windows(2) {
            let (prev, next) = (w[0].0 as u32, w[1].0);
            if !nodes[next].deps.contains(&prev) {
                nodes[next].deps.push(prev);
            }
        }
    }
    if let Some(node) = first_on_cycle(nodes) {
        let t = &tr.traces[r];
        return Err(src.error_at(
            &tr.at,
            format!(
                "{}: node {}: the collectives of a communicator depend on each other against \
                 their order in the trace, so one stream cannot run them in order; set \
                 `workload.collective_algorithms.streams: concurrent`",
                t.file, t.nodes[node].id,
            ),
        ));
    }
    Ok(())
}

/// A node on a dependency cycle, if there is one (Kahn's algorithm).
fn first_on_cycle(nodes: &[SchedNode]) -> Option<usize> {
    let mut pending: Vec<usize> = nodes.iter().map(|n| n.deps.len()).collect();
    let mut children = vec![Vec::new(); nodes.len()];
    for (i, n) in nodes.iter().enumerate() {
        for &d in &n.deps {
            if let Some(c) = children.get_mut(d as usize) {
                c.push(i);
            }
        }
    }
    let mut ready: Vec<usize> = (0..nodes.len()).filter(|&i| pending[i] == 0).collect();
    while let Some(i) = ready.pop() {
        for &c in &children[i] {
            pending[c] -= 1;
            if pending[c] == 0 {
                ready.push(c);
            }
        }
    }
    pending.iter().position(|&p| p > 0)
}

/// The scenario's traces: read from `workload.chakra` or generated from `workload.training`.
fn traces_of(
    src: &Source,
    g: &Graph,
    device: Option<(Device, f64)>,
) -> Result<Option<Traces>, ScenarioError> {
    let s = &src.scenario;
    let n_hosts = g.host_count();
    if let Some(ch) = &s.workload.chakra {
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
        Ok(Some(Traces {
            at,
            traces,
            groups,
            hosts,
            label: ch.traces.clone(),
            marks: Vec::new(),
            device,
            figures: None,
        }))
    } else if let Some(m) = &s.workload.training {
        let at = FieldPath::root().key("workload").key("training");
        let (spec, figures) = model_spec(m, device.map(|d| d.0))
            .map_err(|(path, message)| src.error_at(&path, message))?;
        // With a model, the fields it derives are blamed on the hyper-parameters they come
        // from.
        let field_at = |f: &'static str| match (f, &m.model) {
            ("micro_batches", Some(_)) => at.key("model").key("global_batch"),
            ("layers", Some(_)) => at.key("model").key("layers"),
            _ => at.key(f),
        };
        let (traces, groups, marks) = model::build(&spec, n_hosts, device.is_some())
            .map_err(|e| src.error_at(&field_at(e.field), e.message))?;
        let mut label = format!(
            "the built-in model (dp {} x tp {} x pp {}{}, {} micro-batches)",
            spec.dp,
            spec.tp,
            spec.pp,
            if spec.ep > 1 {
                format!(" x ep {}", spec.ep)
            } else {
                String::new()
            },
            spec.micro_batches
        );
        if let Some(mm) = &m.model {
            label = format!(
                "{} on {label}",
                mm.preset.as_deref().unwrap_or("a transformer")
            );
        }
        Ok(Some(Traces {
            at,
            traces,
            groups: Some(groups),
            hosts: (0..n_hosts).collect(),
            label,
            marks,
            device,
            figures,
        }))
    } else {
        Ok(None)
    }
}

/// A located field error: where, and what is wrong.
type Located = (FieldPath, String);

/// `workload.training` as the workload crate's model takes it; with `model`, the work derived
/// from the transformer and its figures.
pub(crate) fn model_spec(
    m: &crate::scenario::TrainingYaml,
    device: Option<Device>,
) -> Result<(model::ModelSpec, Option<ModelFigures>), Located> {
    use crate::scenario::{ParallelDim as D, RecomputeYaml, ScheduleYaml};
    let at = FieldPath::root().key("workload").key("training");
    let schedule = match (m.schedule, m.virtual_stages) {
        (ScheduleYaml::Interleaved, v) => model::Schedule::Interleaved(v.unwrap_or(2)),
        (_, Some(_)) => {
            return Err((
                at.key("virtual_stages"),
                "virtual stages go with `schedule: interleaved`".into(),
            ))
        }
        (ScheduleYaml::OneFOneB, None) => model::Schedule::OneFOneB,
        (ScheduleYaml::GPipe, None) => model::Schedule::GPipe,
    };
    if m.virtual_stages == Some(0) {
        return Err((at.key("virtual_stages"), "must be at least 1".into()));
    }
    let zero = match m.zero {
        0 => transformer::Zero::Off,
        1 => transformer::Zero::Stage1,
        2 => transformer::Zero::Stage2,
        3 => transformer::Zero::Stage3,
        z => return Err((at.key("zero"), format!("ZeRO stage {z}: give 0, 1, 2 or 3"))),
    };
    let recompute = match m.recompute {
        RecomputeYaml::None => transformer::Recompute::None,
        RecomputeYaml::Selective => transformer::Recompute::Selective,
        RecomputeYaml::Full => transformer::Recompute::Full,
    };
    let mut spec = model::ModelSpec {
        dp: m.dp,
        tp: m.tp,
        pp: m.pp,
        ep: m.ep,
        mapping: m
            .mapping
            .iter()
            .map(|d| match d {
                D::Tp => model::ParallelDim::Tp,
                D::Ep => model::ParallelDim::Ep,
                D::Dp => model::ParallelDim::Dp,
                D::Pp => model::ParallelDim::Pp,
            })
            .collect(),
        layers: m.layers.unwrap_or(0),
        forward: m.forward,
        forward_flops: m.forward_flops,
        forward_memory: m.forward_memory.map(|b| b.bytes()),
        backward: m.backward,
        backward_flops: m.backward_flops,
        backward_memory: m.backward_memory.map(|b| b.bytes()),
        micro_batches: m.micro_batches.unwrap_or(1),
        activation_bytes: m.activation_bytes.map_or(0, |b| b.bytes()),
        tp_bytes: m.tp_bytes.map_or(0, |b| b.bytes()),
        moe_bytes: m.moe_bytes.map_or(0, |b| b.bytes()),
        parameter_bytes: m.parameter_bytes.map_or(0, |b| b.bytes()),
        bucket: m.bucket.bytes(),
        optimizer: m.optimizer,
        iterations: m.iterations,
        schedule,
        zero,
        sp: m.sp,
        work: None,
    };
    let Some(mm) = &m.model else {
        if m.layers.is_none() {
            return Err((
                at.key("layers"),
                "missing: give `layers` (and the per-layer work), or a `model`".into(),
            ));
        }
        if recompute != transformer::Recompute::None {
            return Err((
                at.key("recompute"),
                "recomputation is derived from a `model`; without one, give the backward \
                 pass's time or FLOPs"
                    .into(),
            ));
        }
        return Ok((spec, None));
    };
    // What the model derives cannot also be given.
    let given = [
        ("layers", m.layers.is_some()),
        ("forward", m.forward.is_some()),
        ("forward_flops", m.forward_flops.is_some()),
        ("forward_memory", m.forward_memory.is_some()),
        ("backward", m.backward.is_some()),
        ("backward_flops", m.backward_flops.is_some()),
        ("backward_memory", m.backward_memory.is_some()),
        ("micro_batches", m.micro_batches.is_some()),
        ("activation_bytes", m.activation_bytes.is_some()),
        ("tp_bytes", m.tp_bytes.is_some()),
        ("moe_bytes", m.moe_bytes.is_some()),
        ("parameter_bytes", m.parameter_bytes.is_some()),
    ];
    if let Some((f, _)) = given.iter().find(|(_, g)| *g) {
        return Err((
            at.key(f),
            "derived from `model`; remove it (set the model's hyper-parameters instead, e.g. \
             `model.layers`, `model.global_batch`, `model.micro_batch`)"
                .to_string(),
        ));
    }
    let model_at = at.key("model");
    let t = mm
        .transformer()
        .map_err(|(f, msg)| (model_at.key(f), msg))?;
    let par = transformer::Parallel {
        dp: m.dp as u64,
        tp: m.tp as u64,
        pp: m.pp as u64,
        ep: m.ep as u64,
        sp: m.sp,
        schedule,
        recompute,
        zero,
    };
    const PARALLEL: [&str; 6] = ["dp", "tp", "pp", "ep", "sp", "virtual_stages"];
    let d = t.derive(&par).map_err(|(f, msg)| {
        if PARALLEL.contains(&f) {
            (at.key(f), msg)
        } else {
            (model_at.key(f), msg)
        }
    })?;
    spec.layers = t.layers as usize;
    spec.micro_batches = usize::try_from(d.micro_batches).unwrap_or(usize::MAX);
    spec.activation_bytes = d.activation_bytes;
    spec.parameter_bytes = d.parameter_bytes;
    spec.work = Some(d.work);
    let figures = ModelFigures {
        tokens: d.figures.tokens,
        model_flops: d.figures.model_flops,
        hardware_flops: d.figures.hardware_flops,
        parameters: d.figures.parameters,
        peak_flops: device.map(|x| x.peak_flops),
        memory: {
            let inputs = fabemu_workload::memory::MemoryInputs::new(&t, &par);
            let (stage, mem) = fabemu_workload::memory::peak(&inputs, schedule, d.micro_batches);
            (stage, mem.total())
        },
        device_memory: device.map(|x| x.memory).filter(|&m| m > 0),
    };
    Ok((spec, Some(figures)))
}

/// The scenario's device (its preset under the fields given) and efficiency; refuses one
/// that cannot time anything.
pub(crate) fn check_device(src: &Source) -> Result<Option<(Device, f64)>, ScenarioError> {
    let device_at = FieldPath::root().key("workload").key("device");
    let Some(d) = &src.scenario.workload.device else {
        return Ok(None);
    };
    let dev = d
        .resolved()
        .map_err(|(f, msg)| src.error_at(&device_at.key(f), msg))?;
    Ok(Some((dev, d.efficiency)))
}

/// Rank `r`'s nodes as actions (collectives as placeholders, recorded in `by_group`); a
/// data-mode run's send payloads are added to `data_bytes`.
fn rank_actions(
    src: &Source,
    tr: &Traces,
    r: usize,
    data_mode: bool,
    data_bytes: &mut u64,
    by_group: &mut ByGroup,
) -> Result<Vec<Action>, ScenarioError> {
    let t = &tr.traces[r];
    let mut acts = Vec::with_capacity(t.nodes.len());
    for (i, n) in t.nodes.iter().enumerate() {
        let node_err =
            |what: String| src.error_at(&tr.at, format!("{}: node {}: {what}", t.file, n.id));
        let peer_host = |peer: u32, field: &str| {
            if peer as usize == r {
                return Err(node_err(format!("`{field}` is the node's own rank {r}")));
            }
            tr.hosts
                .get(peer as usize)
                .map(|&h| h as u32)
                .ok_or_else(|| {
                    node_err(format!(
                        "`{field}` {peer} is not a rank (the workload has {} ranks)",
                        tr.hosts.len()
                    ))
                })
        };
        let a = match &n.op {
            Op::Compute { .. } | Op::Memory { .. } => {
                let stream = match n.op {
                    Op::Compute { cpu: true, .. } => Stream::Cpu,
                    _ => Stream::Gpu,
                };
                let time =
                    transformer::node_time(tr.device, &n.op).map_err(|e| node_err(e.into()))?;
                Action::Compute(time, stream)
            }
            Op::Marker { duration } => Action::Delay(duration.unwrap_or(Time::ZERO)),
            Op::Send { bytes, .. } | Op::Recv { bytes, .. } if *bytes > MAX_MESSAGE => {
                return Err(node_err(format!(
                    "comm_size {bytes} B: a message is at most {MAX_MESSAGE} B (RoCE's \
                     32-bit DMA length)"
                )))
            }
            Op::Send { peer, bytes, tag } => {
                if data_mode {
                    *data_bytes = data_bytes.saturating_add(*bytes);
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
                let key = match (group, &tr.groups) {
                    (Some(name), Some(map)) => {
                        let members = map.get(name).ok_or_else(|| {
                            node_err(format!(
                                "process group `{name}` is not in the comm_groups file"
                            ))
                        })?;
                        if !members.contains(&r) {
                            return Err(node_err(format!(
                                "rank {r} runs a collective on group `{name}`, which does not \
                                 include it"
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
    Ok(acts)
}

/// A collective's shape: (operation, elements, element bytes, ranks).
type Shape = (&'static str, usize, u64, usize);

/// Compiled collectives by shape.
type CompiledPrograms = BTreeMap<Shape, Compiled>;

/// The jobs of a collective of one shape on one group: its description, one job per member
/// (in member order), and the listed steps and buffer elements of all of them.
type SharedJobs = (CollectiveInfo, Vec<Arc<Job>>, u64, u64);

/// Matches collectives across the members of their groups and compiles a job per match.
struct Matcher<'a> {
    src: &'a Source,
    g: &'a Graph,
    tr: &'a Traces,
    data_mode: bool,
    job_base: usize,
    /// Per job: what ran, its slot, its group's name.
    infos: Vec<CollectiveInfo>,
    slots: Vec<usize>,
    group_names: Vec<String>,
    /// Per host, the first job number (after `job_base`) none of its collectives uses yet.
    next_free: Vec<usize>,
    /// Per group name, its member hosts.
    group_members: BTreeMap<String, Vec<usize>>,
    /// Programs compiled so far by (operation, elements, element bytes, ranks): a program
    /// names ranks, not hosts, so groups of one size share them (a 1024-rank model has
    /// thousands of equal tensor-parallel All-Reduces).
    compiled: CompiledPrograms,
    /// Jobs built so far by shape and group: the members' jobs of equal collectives are the
    /// same (a tensor-parallel group's thousands of All-Reduces), so they are shared.
    shared: BTreeMap<(Shape, String), SharedJobs>,
    /// The job a host holds for a number it does not use.
    no_job: Arc<Job>,
    /// Listed program steps in all.
    steps_total: u64,
    /// Memory a data-mode run holds for the workload's payloads.
    data_bytes: u64,
}

impl Matcher<'_> {
    /// Checks that every member of group `key` issues the same collectives, compiles a job for
    /// each, and fills in the members' placeholders in `actions`.
    fn match_group(
        &mut self,
        key: &str,
        per_rank: &BTreeMap<usize, Vec<Pending>>,
        actions: &mut [Vec<Action>],
        jobs: &mut [Vec<Arc<Job>>],
    ) -> Result<(), ScenarioError> {
        let all: Vec<usize> = (0..self.tr.hosts.len()).collect();
        let members: &[usize] = if key.is_empty() {
            &all
        } else {
            self.tr
                .groups
                .as_ref()
                .and_then(|m| m.get(key))
                .map_or(&all[..], Vec::as_slice)
        };
        let label = if key.is_empty() {
            "all".to_string()
        } else {
            key.to_string()
        };
        let empty = Vec::new();
        let reference = per_rank.get(&members[0]).unwrap_or(&empty);
        self.check_sequences(&label, members, per_rank, reference)?;
        let member_hosts: Vec<usize> = members.iter().map(|&r| self.tr.hosts[r]).collect();
        self.group_members
            .insert(label.clone(), member_hosts.clone());
        for (k, &(i0, kind, bytes)) in reference.iter().enumerate() {
            let job = if members.len() < 2 || (bytes == 0 && kind != CollKind::Barrier) {
                None
            } else {
                let here = (members[0], i0, k);
                Some(self.add_job(here, kind, bytes, &label, &member_hosts, jobs)?)
            };
            for &m in members {
                if let Some(&(i, _, _)) = per_rank.get(&m).and_then(|v| v.get(k)) {
                    actions[m][i] = Action::Collective(job);
                }
            }
        }
        Ok(())
    }

    /// Every member of a group must issue the same sequence of collectives as its first.
    fn check_sequences(
        &self,
        label: &str,
        members: &[usize],
        per_rank: &BTreeMap<usize, Vec<Pending>>,
        reference: &[Pending],
    ) -> Result<(), ScenarioError> {
        let (src, traces, at) = (self.src, &self.tr.traces, &self.tr.at);
        let empty = Vec::new();
        let first = members[0];
        for &m in members {
            let mine = per_rank.get(&m).unwrap_or(&empty);
            if mine.len() != reference.len() {
                let (who, list) = if mine.len() > reference.len() {
                    (m, mine.as_slice())
                } else {
                    (first, reference)
                };
                let extra = list[mine.len().min(reference.len())].0;
                return Err(src.error_at(
                    at,
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
                        at,
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
        Ok(())
    }

    /// Compiles the `k`-th collective of a group (first member's node `i0`, `here` = (first
    /// rank, i0, k)) into a job on each member host; returns its job number.
    fn add_job(
        &mut self,
        (first, i0, k): (usize, usize, usize),
        kind: CollKind,
        bytes: u64,
        label: &str,
        member_hosts: &[usize],
        jobs: &mut [Vec<Arc<Job>>],
    ) -> Result<usize, ScenarioError> {
        let (src, s, at) = (self.src, &self.src.scenario, &self.tr.at);
        let slot = member_hosts
            .iter()
            .map(|&h| self.next_free[h])
            .max()
            .unwrap_or(0);
        let j = self.job_base + slot;
        if j >= MAX_JOBS {
            return Err(src.error_at(
                at,
                format!(
                    "a host takes part in more than {} of the traces' collectives; fabemu runs \
                     at most {MAX_JOBS} per host (workload.collectives included)",
                    MAX_JOBS - self.job_base
                ),
            ));
        }
        for &h in member_hosts {
            self.next_free[h] = slot + 1;
        }
        let trace = &self.tr.traces[first];
        let node_err = |what: String| {
            src.error_at(
                at,
                format!("{}: node {}: {what}", trace.file, trace.nodes[i0].id),
            )
        };
        let (op, alg) = algorithm_of(s, kind);
        if matches!(alg, Some(AlgorithmYaml::PerDim(_)))
            && member_hosts != (0..self.g.host_count()).collect::<Vec<_>>()
        {
            return Err(node_err(format!(
                "a per-dimension algorithm (workload.collective_algorithms.{}) runs over every \
                 host in order; this collective runs on group {label}",
                op.key()
            )));
        }
        // Barrier: one float per rank, all-reduced. Payloads in floats when they divide; in
        // timing mode, else in bytes.
        let (count, es) = if kind == CollKind::Barrier {
            (member_hosts.len(), 4)
        } else if bytes % 4 == 0 {
            ((bytes / 4) as usize, 4)
        } else if !self.data_mode {
            (bytes as usize, 1)
        } else {
            return Err(node_err(format!(
                "comm_size {bytes} B is not a whole number of floats (data mode)"
            )));
        };
        let key = (kind.key(), count, es, member_hosts.len());
        let shape = (key, label.to_string());
        if !self.shared.contains_key(&shape) {
            let (mut info, programs, streams) = match self.compiled.get(&key) {
                Some(done) => done.clone(),
                None => {
                    let spec = collective_spec(s, op, alg)
                        .map_err(|e| node_err(format!("cannot build the collective: {e}")))?;
                    let done = collective::compile_one(
                        self.g,
                        &spec,
                        count,
                        es,
                        member_hosts,
                        self.data_mode,
                    )
                    .map_err(|e| node_err(format!("{} {k}: {e}", kind.key())))?;
                    self.compiled.insert(key, done.clone());
                    done
                }
            };
            info.hosts = member_hosts.to_vec();
            let steps = programs.iter().map(|p| p.steps.len() as u64).sum();
            let elems = programs.iter().map(|p| p.buffer_len as u64).sum();
            let member_jobs = member_jobs(member_hosts, programs, streams, es, self.data_mode);
            self.shared
                .insert(shape.clone(), (info, member_jobs, steps, elems));
        }
        let Some((info, member_jobs, steps, elems)) = self.shared.get(&shape) else {
            return Err(node_err("the collective's jobs were not built".into()));
        };
        self.steps_total = self.steps_total.saturating_add(*steps);
        if self.steps_total > MAX_STEPS {
            return Err(node_err(format!(
                "the trace's collectives need more than {MAX_STEPS} program steps in all"
            )));
        }
        if self.data_mode {
            self.data_bytes = self.data_bytes.saturating_add(elems.saturating_mul(es));
        }
        if self.data_bytes > MAX_DATA_BYTES {
            return Err(node_err(format!(
                "data mode holds every payload in memory; this workload needs more than \
                 {MAX_DATA_BYTES} B (use `mode: timing`)"
            )));
        }
        for (&h, job) in member_hosts.iter().zip(member_jobs) {
            let Some(list) = jobs.get_mut(h) else {
                continue;
            };
            // Numbers this host does not use: empty jobs keep the numbering.
            if list.len() <= j {
                list.resize(j + 1, self.no_job.clone());
            }
            list[j] = job.clone();
        }
        self.infos.push(info.clone());
        self.slots.push(slot);
        self.group_names.push(label.to_string());
        Ok(j)
    }
}

/// The jobs of one collective, one per member host in `member_hosts` order: its program,
/// and generator when its steps are generated.
fn member_jobs(
    member_hosts: &[usize],
    programs: Vec<Program>,
    streams: Option<Vec<StepGen>>,
    es: u64,
    data_mode: bool,
) -> Vec<Arc<Job>> {
    let shared: Arc<[u32]> = member_hosts.iter().map(|&h| h as u32).collect();
    let mut gens = streams.map(Vec::into_iter);
    programs
        .into_iter()
        .map(|program| {
            Arc::new(Job {
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
                stream: gens.as_mut().and_then(Iterator::next),
            })
        })
        .collect()
}

/// The scheduler's nodes of trace `t` with their actions; the names and dependencies move
/// out of the trace (a large model's traces are hundreds of megabytes), the ids stay for
/// errors.
fn nodes_of(t: &mut RankTrace, acts: Vec<Action>) -> Vec<SchedNode> {
    t.nodes
        .iter_mut()
        .zip(acts)
        .map(|(n, action)| SchedNode {
            id: n.id,
            name: std::mem::take(&mut n.name),
            action,
            deps: std::mem::take(&mut n.deps),
        })
        .collect()
}

/// The operation that runs a trace collective and the algorithm the scenario gives it.
pub(crate) fn algorithm_of(
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
pub(crate) fn collective_spec(
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
    if let Some(c) = o.chunks_in_flight {
        m.insert("chunks_in_flight".into(), (c as u64).into());
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
