//! Collectives in a scenario: from the `workload.collectives` list to one job per rank per
//! collective, and from the ranks' records back to nccl-tests figures.
//!
//! Ranks are the hosts in graph order. Each list entry (or each size of a sweep) is one
//! collective; consecutive collectives run in stream order on each rank (see
//! [`fabemu_collectives::executor`]). A collective's time is from its earliest start on any rank
//! to its latest finish on any rank; algbw = size / time (GB = 10^9 B) and busbw = algbw x the
//! nccl-tests factor of the operation.

use std::fmt::Write as _;
use std::sync::Arc;

use fabemu_collectives::executor::{DataSpec, Job, JobRecord, JobStart, MAX_CHANNELS, MAX_JOBS};
use fabemu_collectives::plan::{self, Algorithm, DimPolicy, Layout, Plan, Scheme};
use fabemu_collectives::program::StepGen;
use fabemu_collectives::synth;
use fabemu_collectives::{data, metrics, ChunkRange, Collective, DataType, Program, ReduceOp};
use fabemu_fabric::transport::ClassId;
use fabemu_fabric::units::{ByteSize, Time};
use fabemu_topologies::{DimKind, Graph, LinkClass};
use serde::Serialize;

use crate::scenario::{AlgorithmYaml, CollectiveYaml, FieldPath, Mode, ScenarioError, Source};

/// Upper bound on program steps over all ranks and collectives (about 64 bytes each).
const MAX_STEPS: u64 = 1 << 26;
/// Upper bound on data-mode buffer bytes over all ranks and collectives.
const MAX_DATA_BYTES: u64 = 4 << 30;

/// One collective as the workload defines it (one size of a sweep).
#[derive(Clone, Debug)]
pub struct CollectiveInfo {
    /// Index of its entry in `workload.collectives`.
    pub entry: usize,
    /// The operation.
    pub op: Collective,
    /// The algorithm as the user wrote it (`ring`, `ring+direct`, ...).
    pub algorithm: String,
    /// Size in bytes (nccl-tests' meaning).
    pub size_bytes: u64,
    /// Elements.
    pub count: usize,
    /// Element type.
    pub dtype: DataType,
    /// Reduction operator.
    pub redop: ReduceOp,
    /// Root of Broadcast / Reduce.
    pub root: usize,
    /// Ranks taking part.
    pub ranks: usize,
    /// Pipelined pieces.
    pub chunks: usize,
    /// Each rank's program without its steps: buffer size and where input and output are.
    /// Shared by the collectives of one shape (a training workload's thousands).
    pub layouts: std::sync::Arc<[Program]>,
    /// Whether buffers hold real data.
    pub data: bool,
    /// The host of each rank (rank 0 first).
    pub hosts: Vec<usize>,
    /// The hosts' names when the collective runs on a subset (`hosts:` in the scenario).
    pub host_names: Option<Vec<String>>,
}

/// Builds the collectives of a scenario: their descriptions and, per rank, its jobs.
pub fn build_jobs(
    src: &Source,
    g: &Graph,
) -> Result<(Vec<CollectiveInfo>, Vec<Vec<Job>>), ScenarioError> {
    let s = &src.scenario;
    let mut infos = Vec::new();
    let classes = crate::classes::Classes::of(src, g)?;
    let mut per_rank: Vec<Vec<Job>> = (0..g.host_count()).map(|_| Vec::new()).collect();
    let mut budget = Budget::default();
    for (i, c) in s.workload.collectives.iter().enumerate() {
        let at = FieldPath::root()
            .key("workload")
            .key("collectives")
            .index(i);
        let err = |field: &str, msg: String| src.error_at(&at.key(field), msg);
        let sizes = sizes_of(c.size, c.sizes.as_ref()).map_err(|(f, m)| err(f, m))?;
        let field = if c.sizes.is_some() { "sizes" } else { "size" };
        let members = members_of(src, g, &at, c)?;
        if infos.len() + sizes.len() > MAX_JOBS {
            return Err(err(
                field,
                format!("more than {MAX_JOBS} collectives in one workload"),
            ));
        }
        check_options(c, members.len()).map_err(|(f, m)| err(f, m))?;
        let class = classes.collectives.get(i).copied().unwrap_or(0);
        let entry = entry_of(src, g, &at, c, members, class)?;
        for (k, &size) in sizes.iter().enumerate() {
            let count = count_of(c, size).map_err(|m| err(field, m))?;
            let (programs, streams) = programs_of(src, &at, c, &entry, count, &mut budget)?;
            let layouts = add_jobs(&mut per_rank, c, &entry, k == 0, programs, streams, src);
            infos.push(CollectiveInfo {
                entry: i,
                op: c.op,
                algorithm: entry.label.clone(),
                size_bytes: size,
                count,
                dtype: c.dtype,
                redop: c.redop,
                root: c.root,
                ranks: entry.members.len(),
                chunks: c.chunks,
                layouts: layouts.into(),
                data: s.mode == Mode::Data,
                hosts: entry.members.clone(),
                host_names: c.hosts.clone(),
            });
        }
    }
    Ok((infos, per_rank))
}

/// One `workload.collectives` entry, checked: where it runs and by which algorithm.
struct Entry {
    /// Its hosts, rank 0 first.
    members: Vec<usize>,
    /// The same for the jobs, when the entry names its hosts (`None`: rank r is host r).
    member_hosts: Option<Arc<[u32]>>,
    /// An MSCCL algorithm and its file.
    msccl: Option<(fabemu_collectives::msccl::Msccl, String)>,
    /// The fabric a synthesized algorithm is built for.
    synth_fabric: Option<synth::SynthFabric>,
    /// A built-in algorithm's layout.
    layout: Option<Layout>,
    /// The algorithm as the report names it.
    label: String,
    /// Its traffic class.
    class: ClassId,
}

/// What the collectives built so far take, against [`MAX_STEPS`] and [`MAX_DATA_BYTES`].
#[derive(Default)]
struct Budget {
    steps: u64,
    data: u64,
}

/// The hosts of an entry at `at` (every host without `hosts`), rank 0 first.
fn members_of(
    src: &Source,
    g: &Graph,
    at: &FieldPath,
    c: &CollectiveYaml,
) -> Result<Vec<usize>, ScenarioError> {
    let err = |msg: String| src.error_at(&at.key("hosts"), msg);
    let Some(names) = &c.hosts else {
        return Ok((0..g.host_count()).collect());
    };
    let v = host_ranks(src, g, &at.key("hosts"), names)?;
    if v.is_empty() {
        return Err(err("a collective needs at least one host".into()));
    }
    if matches!(c.algorithm, Some(AlgorithmYaml::PerDim(_))) {
        return Err(err(
            "a per-dimension algorithm list runs over every host of the fabric; leave `hosts` \
             out or use one algorithm"
                .into(),
        ));
    }
    Ok(v)
}

/// The entry's reduction rate, chunks and root, for `ranks` ranks: `(field, message)` when
/// one is wrong.
fn check_options(c: &CollectiveYaml, ranks: usize) -> Result<(), (&'static str, String)> {
    if c.reduce_bandwidth.is_some_and(|b| b.bps() == 0) {
        return Err((
            "reduce_bandwidth",
            "must be greater than zero (leave it out for instant reductions)".into(),
        ));
    }
    if c.chunks == 0 {
        return Err(("chunks", "chunks must be at least 1".into()));
    }
    if c.root >= ranks.max(1) {
        return Err((
            "root",
            format!(
                "root {} is not a rank (the collective has {ranks} ranks)",
                c.root
            ),
        ));
    }
    Ok(())
}

/// The entry's algorithm: an MSCCL file, a synthesized schedule or a built-in layout, checked
/// against the options that go with it.
fn entry_of(
    src: &Source,
    g: &Graph,
    at: &FieldPath,
    c: &CollectiveYaml,
    members: Vec<usize>,
    class: ClassId,
) -> Result<Entry, ScenarioError> {
    let err = |field: &str, msg: String| src.error_at(&at.key(field), msg);
    let per_dim_only = || {
        err(
            "scheme",
            "`scheme` and `policy` apply to a per-dimension algorithm list".into(),
        )
    };
    let msccl = match &c.algorithm {
        Some(AlgorithmYaml::Msccl { msccl }) => {
            if c.scheme.is_some() || c.policy.is_some() {
                return Err(per_dim_only());
            }
            if c.chunks != 1 {
                return Err(err(
                    "chunks",
                    "an MSCCL algorithm cuts the buffer itself (nchunksperloop); leave \
                     `chunks` out"
                        .into(),
                ));
            }
            Some(load_msccl(src, &at.key("algorithm").key("msccl"), msccl)?)
        }
        _ => None,
    };
    let synthesized = matches!(c.algorithm, Some(AlgorithmYaml::Synthesized));
    let synth_fabric = if synthesized {
        if c.scheme.is_some() || c.policy.is_some() {
            return Err(per_dim_only());
        }
        if !matches!(
            c.op,
            Collective::AllGather | Collective::ReduceScatter | Collective::AllReduce
        ) {
            return Err(err(
                "algorithm",
                format!(
                    "{} has no synthesized algorithm; synthesis builds all_gather, \
                     reduce_scatter and all_reduce",
                    c.op.key()
                ),
            ));
        }
        Some(synth_fabric(g, &members))
    } else {
        None
    };
    let (layout, label) = match &msccl {
        _ if synthesized => (None, "synthesized".to_string()),
        Some((m, _)) => (
            None,
            format!(
                "msccl {}",
                if m.name.is_empty() {
                    "algorithm"
                } else {
                    &m.name
                }
            ),
        ),
        None => {
            let (l, label) = layout_of(c, g).map_err(|(f, m)| err(f, m))?;
            (Some(l), label)
        }
    };
    let member_hosts = c
        .hosts
        .is_some()
        .then(|| members.iter().map(|&h| h as u32).collect());
    Ok(Entry {
        members,
        member_hosts,
        msccl,
        synth_fabric,
        layout,
        label,
        class,
    })
}

/// The elements of a collective of `size` bytes; the message when the size is not one fabemu
/// runs.
fn count_of(c: &CollectiveYaml, size: u64) -> Result<usize, String> {
    let es = c.dtype.size() as u64;
    // Above it, the messages a collective is cut into (at most 4 GiB each, per step) are too
    // many to queue.
    let max = fabemu_workload::trace::MAX_COLLECTIVE_BYTES;
    if size > max {
        return Err(format!(
            "{} is larger than {}, the largest collective fabemu runs",
            ByteSize(size),
            ByteSize(max)
        ));
    }
    if size == 0 || size % es != 0 {
        return Err(format!(
            "{} is not a positive multiple of the {} element size ({es}B)",
            ByteSize(size),
            c.dtype
        ));
    }
    Ok((size / es) as usize)
}

/// Every rank's program of one size (`count` elements) of an entry, and the generators when a
/// flat ring All-Reduce's steps are generated on demand by each rank (O(window) memory, see
/// `plan::stream`; the programs are then headers), counted against the budget.
fn programs_of(
    src: &Source,
    at: &FieldPath,
    c: &CollectiveYaml,
    e: &Entry,
    count: usize,
    budget: &mut Budget,
) -> Result<(Vec<Program>, Option<Vec<StepGen>>), ScenarioError> {
    let field = if c.sizes.is_some() { "sizes" } else { "size" };
    let err = |field: &str, msg: String| src.error_at(&at.key(field), msg);
    let (ranks, es) = (e.members.len(), c.dtype.size() as u64);
    let plan_of = |layout: &Layout| Plan {
        op: c.op,
        ranks,
        count,
        root: c.root,
        layout: layout.clone(),
        chunks: c.chunks,
        chunks_in_flight: c.chunks_in_flight,
    };
    let streams = match (&e.msccl, &e.layout) {
        (None, Some(layout)) if e.synth_fabric.is_none() => plan::stream(&plan_of(layout)),
        _ => None,
    };
    // Bound the programs before building them: no built-in algorithm takes more than about 4
    // steps per peer per piece on a rank.
    let est = (ranks as u64)
        .saturating_mul(ranks as u64)
        .saturating_mul(4)
        .saturating_mul(c.chunks as u64);
    if streams.is_none() {
        budget.steps = budget.steps.saturating_add(est);
    }
    if budget.steps > MAX_STEPS {
        return Err(err(
            field,
            format!(
                "the collectives would need about {} program steps over {ranks} ranks (limit \
                 {MAX_STEPS}); use fewer ranks, chunks or sizes",
                budget.steps
            ),
        ));
    }
    let programs = match (&e.msccl, &e.layout, &e.synth_fabric) {
        _ if streams.is_some() => streams.iter().flatten().map(|g| g.header()).collect(),
        (_, _, Some(fabric)) => {
            let chunk_bytes = synth_chunk_bytes(count, ranks, c.chunks, es);
            let schedule = synth::synthesize(fabric, c.chunks, chunk_bytes)
                .map_err(|e| err("algorithm", e.to_string()))?;
            synth::compile(c.op, &schedule, count).map_err(|e| err("algorithm", e.to_string()))?
        }
        (Some((m, file)), _, None) => m
            .compile(c.op, ranks, count)
            .map_err(|e| msccl_error(file, e, || err(field, String::new())))?,
        (None, Some(layout), None) => {
            plan::compile(&plan_of(layout)).map_err(|e| err("algorithm", e.to_string()))?
        }
        (None, None, None) => return Err(err("algorithm", "no algorithm".into())),
    };
    // Messages name their channel in the immediate: a plan the executor could not run is
    // refused here, at the field that makes it.
    let channels = programs.iter().flat_map(|p| &p.steps);
    if let Some(ch) = channels
        .filter_map(|s| s.kind.channel())
        .map(|(_, ch)| ch)
        .find(|&ch| ch >= MAX_CHANNELS)
    {
        return Err(err(
            if e.msccl.is_some() {
                "algorithm"
            } else {
                "chunks"
            },
            format!(
                "the algorithm uses channel {ch}; a collective's messages name at most \
                 {MAX_CHANNELS} channels (fewer chunks)"
            ),
        ));
    }
    if src.scenario.mode == Mode::Data {
        budget.data = programs.iter().fold(budget.data, |acc, p| {
            acc.saturating_add((p.buffer_len as u64).saturating_mul(es))
        });
        if budget.data > MAX_DATA_BYTES {
            return Err(src.error_at(
                &FieldPath::root().key("mode"),
                format!(
                    "data mode holds every rank's buffers in memory; these collectives need {} \
                     (limit {}); use `mode: timing`",
                    ByteSize(budget.data),
                    ByteSize(MAX_DATA_BYTES)
                ),
            ));
        }
    }
    Ok((programs, streams))
}

/// Appends one size of an entry (its programs, and generators when streamed) to every host's
/// jobs; returns each rank's layout (its program without steps). `first`: the entry's first
/// size, which starts at the entry's `start`.
fn add_jobs(
    per_rank: &mut [Vec<Job>],
    c: &CollectiveYaml,
    e: &Entry,
    first: bool,
    programs: Vec<Program>,
    streams: Option<Vec<StepGen>>,
    src: &Source,
) -> Vec<Program> {
    let es = c.dtype.size() as u64;
    let start = match (first, c.start) {
        (true, Some(t)) => JobStart::At(t),
        _ => JobStart::AfterPrevious,
    };
    let data_spec = (src.scenario.mode == Mode::Data).then_some(DataSpec {
        dtype: c.dtype,
        op: c.redop,
    });
    // Hosts outside the communicator get an empty job, so every host numbers the workload's
    // collectives alike (messages name their collective by that number). It passes the turn
    // on at once ("after previous"), whatever the collective's own start: for a host, "after
    // the previous" means the previous one it takes part in.
    let mut member = vec![false; per_rank.len()];
    for &h in &e.members {
        member[h] = true;
    }
    for (h, jobs) in per_rank.iter_mut().enumerate() {
        if !member[h] {
            jobs.push(Job {
                program: Program {
                    rank: 0,
                    buffer_len: 0,
                    input: ChunkRange::new(0, 0),
                    output: ChunkRange::new(0, 0),
                    steps: Vec::new(),
                },
                start: JobStart::AfterPrevious,
                elem_bytes: es,
                data: None,
                reduce_rate: None,
                hosts: None,
                class: Default::default(),
                stream: None,
            });
        }
    }
    let mut layouts = Vec::with_capacity(programs.len());
    for (r, prog) in programs.into_iter().enumerate() {
        layouts.push(layout_only(&prog));
        if let Some(jobs) = e.members.get(r).and_then(|&h| per_rank.get_mut(h)) {
            jobs.push(Job {
                program: prog,
                start,
                elem_bytes: es,
                data: data_spec,
                reduce_rate: c.reduce_bandwidth,
                hosts: e.member_hosts.clone(),
                class: e.class,
                stream: streams.as_ref().and_then(|g| g.get(r).copied()),
            });
        }
    }
    layouts
}

/// A program without its steps: the buffer size and where input and output are.
fn layout_only(prog: &Program) -> Program {
    Program {
        rank: prog.rank,
        buffer_len: prog.buffer_len,
        input: prog.input,
        output: prog.output,
        steps: Vec::new(),
    }
}

/// The synthesized schedule of every size of workload entry `entry` (which must be a
/// collective of a scenario [`build_jobs`] accepted, with `algorithm: synthesized`), as
/// `(size in bytes, schedule)`; for `fabemu algo show`.
pub fn synth_schedules(
    src: &Source,
    g: &Graph,
    entry: usize,
) -> Result<Vec<(u64, synth::Schedule)>, String> {
    let c = src
        .scenario
        .workload
        .collectives
        .get(entry)
        .ok_or_else(|| format!("the workload has no collective {entry}"))?;
    let members: Vec<usize> = match &c.hosts {
        None => (0..g.host_count()).collect(),
        Some(names) => names
            .iter()
            .map(|n| {
                g.find(n)
                    .and_then(|id| g.host_index(id))
                    .ok_or_else(|| format!("`{n}` is not a host"))
            })
            .collect::<Result<_, _>>()?,
    };
    let fabric = synth_fabric(g, &members);
    let es = c.dtype.size() as u64;
    let sizes = sizes_of(c.size, c.sizes.as_ref()).map_err(|(_, m)| m)?;
    sizes
        .into_iter()
        .map(|size| {
            let count = (size / es.max(1)) as usize;
            let chunk_bytes = synth_chunk_bytes(count, members.len(), c.chunks, es);
            synth::synthesize(&fabric, c.chunks, chunk_bytes)
                .map(|s| (size, s))
                .map_err(|e| e.to_string())
        })
        .collect()
}

/// Bytes of one synthesized chunk: the collective's `count` elements cut into `ranks x chunks`
/// pieces (at least one element, so latency-bound sizes still weigh bandwidth).
pub fn synth_chunk_bytes(count: usize, ranks: usize, chunks: usize, elem_bytes: u64) -> u64 {
    let pieces = ranks.saturating_mul(chunks).max(1);
    (count.div_ceil(pieces).max(1) as u64).saturating_mul(elem_bytes)
}

/// The fabric as the synthesizer sees it, for the collective over the hosts `members` (rank
/// `r` is host `members[r]`).
///
/// A direct link between two members is a path of its own, occupying that link direction.
/// Through switches, a member reaches every member host behind them (breadth-first over
/// switches only): the path's bandwidth is its slowest hop, its latency the sum of the hops',
/// and it occupies the sender's uplink and the receiver's downlink, so every path leaving one
/// host shares that host's link (switch-to-switch links are assumed not to be the bottleneck).
/// Hosts outside the collective are not used to forward.
pub fn synth_fabric(g: &Graph, members: &[usize]) -> synth::SynthFabric {
    let mut rank_of = vec![None; g.host_count()];
    for (r, &h) in members.iter().enumerate() {
        if let Some(slot) = rank_of.get_mut(h) {
            *slot = Some(r);
        }
    }
    let rank_of_node = |node: usize| {
        g.host_index(node)
            .and_then(|h| rank_of.get(h).copied().flatten())
    };
    // Resource of a link direction: 2 link + (0 when leaving `a`, 1 when leaving `b`).
    let dir = |link: usize, from: usize| 2 * link + usize::from(g.link(link).a != from);
    let mut links = Vec::new();
    for (r, &h) in members.iter().enumerate() {
        let Some(node) = g.host_at(h) else { continue };
        for p in g.ports(node) {
            let up = g.link(p.link);
            if g.host_index(p.peer).is_some() {
                if let Some(d) = rank_of_node(p.peer) {
                    links.push(synth::SynthLink {
                        src: r,
                        dst: d,
                        bandwidth_bps: up.bandwidth_bps,
                        latency_ps: up.latency_ps,
                        resources: vec![dir(p.link, node)],
                    });
                }
                continue;
            }
            // Breadth-first over switches from this uplink: (switch, min bandwidth, latency).
            let mut seen_switch = vec![false; g.nodes().len()];
            let mut seen_host = vec![false; g.nodes().len()];
            seen_host[node] = true;
            seen_switch[p.peer] = true;
            let mut queue =
                std::collections::VecDeque::from([(p.peer, up.bandwidth_bps, up.latency_ps)]);
            while let Some((sw, bw, lat)) = queue.pop_front() {
                for q in g.ports(sw) {
                    let l = g.link(q.link);
                    let (bw2, lat2) = (bw.min(l.bandwidth_bps), lat.saturating_add(l.latency_ps));
                    if g.host_index(q.peer).is_none() {
                        if !seen_switch[q.peer] {
                            seen_switch[q.peer] = true;
                            queue.push_back((q.peer, bw2, lat2));
                        }
                    } else if !seen_host[q.peer] {
                        seen_host[q.peer] = true;
                        if let Some(d) = rank_of_node(q.peer) {
                            links.push(synth::SynthLink {
                                src: r,
                                dst: d,
                                bandwidth_bps: bw2,
                                latency_ps: lat2,
                                resources: vec![dir(p.link, node), dir(q.link, sw)],
                            });
                        }
                    }
                }
            }
        }
    }
    synth::SynthFabric {
        ranks: members.len(),
        links,
    }
}

/// Reads and parses the MSCCL file `rel` (relative to the scenario's folder) named at `at`;
/// returns it with its path as resolved.
fn load_msccl(
    src: &Source,
    at: &FieldPath,
    rel: &str,
) -> Result<(fabemu_collectives::msccl::Msccl, String), ScenarioError> {
    // Relative to the scenario's folder, as for `topology.astra_sim`.
    let base = std::path::Path::new(&src.file)
        .parent()
        .filter(|p| !p.as_os_str().is_empty() && !src.file.starts_with('<'));
    let path = match base {
        Some(b) => b.join(rel),
        None => std::path::PathBuf::from(rel),
    };
    let file = path.display().to_string();
    let text = fabemu_workload::input::read_text_limited(
        &path,
        crate::scenario::MAX_MSCCL_BYTES,
        "an MSCCL file",
    )
    .map_err(|e| src.error_at(at, format!("cannot read the MSCCL file {file}: {e}")))?;
    let algo = fabemu_collectives::msccl::Msccl::parse(&text)
        .map_err(|e| msccl_error(&file, e, || src.error_at(at, String::new())))?;
    Ok((algo, file))
}

/// An MSCCL error as a scenario error: at its element in the XML file when it has one, else
/// at the scenario field `fallback` makes (with the message filled in).
fn msccl_error(
    file: &str,
    e: fabemu_collectives::msccl::MscclError,
    fallback: impl FnOnce() -> ScenarioError,
) -> ScenarioError {
    match e.at {
        Some(at) => ScenarioError {
            file: file.to_string(),
            line: Some(at.line as usize),
            column: Some(at.column as usize),
            field: at.element,
            message: e.message,
        },
        None => ScenarioError {
            message: format!("MSCCL file {file}: {}", e.message),
            ..fallback()
        },
    }
}

/// The sizes of one entry: `size`, or the sweep `from, from x factor, ..., <= to`.
pub(crate) fn sizes_of(
    size: Option<ByteSize>,
    sweep: Option<&crate::scenario::SweepYaml>,
) -> Result<Vec<u64>, (&'static str, String)> {
    match (size, sweep) {
        (Some(s), None) => Ok(vec![s.bytes()]),
        (None, Some(w)) => {
            if w.factor < 2 {
                return Err(("sizes", format!("factor {} must be at least 2", w.factor)));
            }
            if w.from.bytes() == 0 || w.from.bytes() > w.to.bytes() {
                return Err((
                    "sizes",
                    format!(
                        "`from` ({}) must be positive and at most `to` ({})",
                        w.from, w.to
                    ),
                ));
            }
            let mut v = Vec::new();
            let mut s = w.from.bytes();
            while s <= w.to.bytes() && v.len() <= MAX_JOBS {
                v.push(s);
                match s.checked_mul(w.factor) {
                    Some(n) => s = n,
                    None => break,
                }
            }
            Ok(v)
        }
        (Some(_), Some(_)) => Err(("sizes", "give `size` or `sizes`, not both".into())),
        (None, None) => Err((
            "size",
            "a collective needs `size` (or `sizes: {from, to, factor}`)".into(),
        )),
    }
}

/// The plan layout of an entry and a label for reports.
fn layout_of(
    c: &crate::scenario::CollectiveYaml,
    g: &Graph,
) -> Result<(Layout, String), (&'static str, String)> {
    let default = if c.op == Collective::AllToAll {
        Algorithm::Direct
    } else {
        Algorithm::Ring
    };
    let name = |a: Algorithm| {
        serde_json::to_value(a)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default()
    };
    match &c.algorithm {
        None
        | Some(AlgorithmYaml::One(_) | AlgorithmYaml::Msccl { .. } | AlgorithmYaml::Synthesized) => {
            if c.scheme.is_some() || c.policy.is_some() {
                return Err((
                    "scheme",
                    "`scheme` and `policy` apply to a per-dimension algorithm list".into(),
                ));
            }
            let a = match &c.algorithm {
                Some(AlgorithmYaml::One(a)) => *a,
                _ => default,
            };
            Ok((Layout::Flat(a), name(a)))
        }
        Some(AlgorithmYaml::PerDim(list)) => {
            let Some(dims) = g.fabric().dimensions() else {
                return Err((
                    "algorithm",
                    format!(
                        "a per-dimension algorithm list needs a fabric with dimensions \
                         (multi_dim, torus, ring or star); this fabric is {}",
                        g.fabric().name()
                    ),
                ));
            };
            if list.len() != dims.len() {
                return Err((
                    "algorithm",
                    format!(
                        "{} algorithms for a fabric of {} dimensions; give one per dimension",
                        list.len(),
                        dims.len()
                    ),
                ));
            }
            let specs = dims
                .iter()
                .zip(list)
                .enumerate()
                .map(|(d, (&(kind, size), &algorithm))| {
                    // The slowest link of the class bounds a synchronous phase.
                    let link_bps = g
                        .links()
                        .iter()
                        .filter(|l| l.class == LinkClass::Dimension(d))
                        .map(|l| l.bandwidth_bps)
                        .min()
                        .unwrap_or(1);
                    plan::DimSpec {
                        size,
                        algorithm,
                        bandwidth_bps: dimension_bandwidth(kind, size, algorithm, link_bps),
                    }
                })
                .collect();
            let scheme = c.scheme.unwrap_or(Scheme::LocalBwAware);
            let policy = c.policy.unwrap_or(DimPolicy::Fixed);
            let label = format!(
                "{} ({}, {})",
                list.iter().map(|&a| name(a)).collect::<Vec<_>>().join("+"),
                match scheme {
                    Scheme::LocalBwAware => "local_bw_aware",
                    Scheme::Baseline => "baseline",
                },
                match policy {
                    DimPolicy::Fixed => "fixed",
                    DimPolicy::Themis => "themis",
                }
            );
            Ok((
                Layout::Dims {
                    dims: specs,
                    scheme,
                    policy,
                },
                label,
            ))
        }
    }
}

/// The bandwidth per host that `algorithm` really gets in one phase (a Reduce-Scatter or an
/// All-Gather) over a group of `size` hosts wired as `kind` with links of `link_bps` each way:
/// what Themis weighs a dimension's load by.
///
/// A phase moves `(k - 1)` blocks (of `S / k` each) out of every host; if `L` blocks go through
/// the busiest directed link over the whole phase, the phase takes `L` block times and the host
/// sees `(k - 1) / L` links' worth of bandwidth:
///
/// - a switch dimension: every algorithm goes through the host's one link, `L = k - 1`;
/// - the ring algorithm (one direction, neighbour to neighbour) uses one link anywhere:
///   `L = k - 1`;
/// - direct over a fully connected group drives all `k - 1` links at once, one block each:
///   `L = 1`, so `(k - 1)` links' worth;
/// - direct over a ring: the block for the peer `j` steps ahead takes the shorter way (ties go
///   forward, as dimension-order routing does), so each forward link carries
///   `1 + 2 + .. + floor(k/2)` blocks;
/// - halving-doubling: round `m` (`m = k/2, .., 1`) sends `m` blocks over one link of a fully
///   connected group (`L = k - 1` in all); on a ring the `m` hosts of a half-block all cross
///   one link, `L = sum of m^2`.
///
/// Anything else (double binary tree, which only the baseline scheme runs, where the order
/// does not change any dimension's load) gets one link.
pub fn dimension_bandwidth(kind: DimKind, size: usize, algorithm: Algorithm, link_bps: u64) -> u64 {
    let k = size.max(2) as u64;
    let busiest: u64 = match (kind, algorithm) {
        (DimKind::Switch, _) => k - 1,
        (DimKind::FullyConnected, Algorithm::Direct) => 1,
        (DimKind::Ring, Algorithm::Direct) => (1..=k / 2).sum(),
        (DimKind::Ring, Algorithm::HalvingDoubling) => {
            let mut m = 1u64;
            let mut sum = 0u64;
            while m < k {
                sum = sum.saturating_add(m.saturating_mul(m.min(k - m)));
                m = m.saturating_mul(2);
            }
            sum.max(1)
        }
        _ => k - 1,
    };
    let bps = u128::from(link_bps) * u128::from(k - 1) / u128::from(busiest);
    u64::try_from(bps).unwrap_or(u64::MAX).max(1)
}

/// One collective's outcome (the nccl-tests row and more).
#[derive(Clone, Debug, Serialize)]
pub struct CollectiveResult {
    /// The operation (`all_reduce`, ...).
    pub op: &'static str,
    /// The algorithm.
    pub algorithm: String,
    /// Ranks.
    pub ranks: usize,
    /// Size in bytes.
    pub size_bytes: u64,
    /// Elements.
    pub count: usize,
    /// Element type.
    #[serde(rename = "type")]
    pub dtype: &'static str,
    /// Reduction operator.
    pub redop: &'static str,
    /// Root (Broadcast / Reduce), else null.
    pub root: Option<usize>,
    /// Pipelined pieces.
    pub chunks: usize,
    /// Earliest start over the ranks.
    pub start_ps: Option<u64>,
    /// Latest finish over the ranks (null if some rank never finished).
    pub end_ps: Option<u64>,
    /// end - start, in microseconds.
    pub time_us: Option<f64>,
    /// size / time, GB/s (10^9 bytes per second).
    pub algbw_gbps: Option<f64>,
    /// algbw x the operation's bus factor.
    pub busbw_gbps: Option<f64>,
    /// Wrong output elements over all ranks (data mode), else null.
    pub wrong: Option<u64>,
    /// The hosts taking part, rank 0 first, when not every host does (else absent).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hosts: Option<Vec<String>>,
    /// Ranks that finished.
    pub finished_ranks: usize,
    /// Payload bytes posted by all ranks.
    pub bytes_sent: u64,
    /// Per rank, when it finished (null: never).
    pub rank_finish_ps: Vec<Option<u64>>,
}

/// Turns the ranks' records (`records[rank][job]`) into results, checking data in data mode.
pub fn results(infos: &[CollectiveInfo], records: &[Vec<&JobRecord>]) -> Vec<CollectiveResult> {
    results_with(infos, |j, h| records.get(h).and_then(|r| r.get(j).copied()))
}

/// [`results`] with the records looked up by `record(collective index, host)` (a training
/// workload numbers its jobs per host).
pub fn results_with<'a>(
    infos: &[CollectiveInfo],
    record: impl Fn(usize, usize) -> Option<&'a JobRecord>,
) -> Vec<CollectiveResult> {
    infos
        .iter()
        .enumerate()
        .map(|(j, info)| {
            let recs: Vec<Option<&JobRecord>> = info.hosts.iter().map(|&h| record(j, h)).collect();
            let start = recs
                .iter()
                .filter_map(|r| r.and_then(|r| r.started_at))
                .min();
            let finishes: Vec<Option<Time>> =
                recs.iter().map(|r| r.and_then(|r| r.finished_at)).collect();
            let finished_ranks = finishes.iter().filter(|f| f.is_some()).count();
            let end = if finished_ranks == info.ranks {
                finishes.iter().flatten().max().copied()
            } else {
                None
            };
            let time = start.zip(end).map(|(s, e)| e.saturating_sub(s).ps());
            let wrong = info.data.then(|| {
                let buffers: Vec<Option<&[u8]>> = recs
                    .iter()
                    .map(|r| r.and_then(|r| r.buffer.as_deref()))
                    .collect();
                data::count_wrong(
                    info.op,
                    info.dtype,
                    info.redop,
                    info.root,
                    &info.layouts,
                    &buffers,
                )
            });
            CollectiveResult {
                op: info.op.key(),
                algorithm: info.algorithm.clone(),
                ranks: info.ranks,
                size_bytes: info.size_bytes,
                count: info.count,
                dtype: info.dtype.name(),
                redop: if info.op.reduces() {
                    info.redop.name()
                } else {
                    "none"
                },
                root: matches!(info.op, Collective::Broadcast | Collective::Reduce)
                    .then_some(info.root),
                chunks: info.chunks,
                start_ps: start.map(Time::ps),
                end_ps: end.map(Time::ps),
                time_us: time.map(|t| t as f64 / 1e6),
                algbw_gbps: time
                    .filter(|&t| t > 0)
                    .map(|t| metrics::algbw_gbps(info.size_bytes, t)),
                busbw_gbps: time
                    .filter(|&t| t > 0)
                    .map(|t| metrics::busbw_gbps(info.op, info.ranks, info.size_bytes, t)),
                wrong,
                hosts: info.host_names.clone(),
                finished_ranks,
                bytes_sent: recs.iter().flatten().map(|r| r.bytes_sent).sum(),
                rank_finish_ps: finishes.iter().map(|f| f.map(Time::ps)).collect(),
            }
        })
        .collect()
}

/// The nccl-tests-style table: one block per run of consecutive rows with the same operation
/// and algorithm, each closed by its average bus bandwidth.
pub fn table(results: &[CollectiveResult]) -> String {
    let mut out = String::new();
    let mut i = 0;
    while i < results.len() {
        let head = &results[i];
        let group: Vec<&CollectiveResult> = results[i..]
            .iter()
            .take_while(|r| r.op == head.op && r.algorithm == head.algorithm)
            .collect();
        i += group.len();
        let _ = writeln!(
            out,
            "# {} ({}), {} ranks{}",
            head.op,
            head.algorithm,
            head.ranks,
            if head.chunks > 1 {
                format!(", {} chunks", head.chunks)
            } else {
                String::new()
            }
        );
        let _ = writeln!(
            out,
            "#{:>12} {:>12} {:>8} {:>6} {:>5} {:>11} {:>8} {:>8} {:>7}",
            "size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong"
        );
        let _ = writeln!(
            out,
            "#{:>12} {:>12} {:>8} {:>6} {:>5} {:>11} {:>8} {:>8} {:>7}",
            "(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", ""
        );
        let mut bus_sum = 0.0;
        let mut bus_n = 0usize;
        for r in &group {
            let f2 = |v: Option<f64>, prec: usize| {
                v.map_or_else(|| "-".to_string(), |x| format!("{x:.prec$}"))
            };
            let _ = writeln!(
                out,
                " {:>12} {:>12} {:>8} {:>6} {:>5} {:>11} {:>8} {:>8} {:>7}",
                r.size_bytes,
                r.count,
                r.dtype,
                r.redop,
                r.root.map_or_else(|| "-1".to_string(), |x| x.to_string()),
                f2(r.time_us, 2),
                f2(r.algbw_gbps, 2),
                f2(r.busbw_gbps, 2),
                r.wrong.map_or_else(|| "N/A".to_string(), |w| w.to_string()),
            );
            if let Some(b) = r.busbw_gbps {
                bus_sum += b;
                bus_n += 1;
            }
        }
        let _ = writeln!(
            out,
            "# Avg bus bandwidth    : {:.3}",
            if bus_n > 0 {
                bus_sum / bus_n as f64
            } else {
                0.0
            }
        );
        let _ = writeln!(out, "#");
    }
    out
}

/// The ranks of the hosts a `hosts:` list names, in its order; a name that is not a host, or
/// one listed twice, is an error located at its entry under `at`.
pub(crate) fn host_ranks(
    src: &Source,
    g: &Graph,
    at: &FieldPath,
    names: &[String],
) -> Result<Vec<usize>, ScenarioError> {
    let mut seen = std::collections::BTreeSet::new();
    let mut v: Vec<usize> = Vec::with_capacity(names.len());
    for (k, name) in names.iter().enumerate() {
        let here = at.index(k);
        let h = g
            .find(name)
            .and_then(|id| g.host_index(id))
            .ok_or_else(|| src.error_at(&here, format!("`{name}` is not a host")))?;
        if !seen.insert(h) {
            return Err(src.error_at(&here, format!("`{name}` is listed twice")));
        }
        v.push(h);
    }
    Ok(v)
}

/// One collective of a training workload as compiled: its description, one program per rank
/// and, where its steps are generated on demand, one generator per rank (the programs are then
/// headers without steps).
pub(crate) type Compiled = (CollectiveInfo, Vec<Program>, Option<Vec<StepGen>>);

/// Compiles one collective of a training workload with the same algorithm library and layout
/// rules as `workload.collectives` (`c` gives the operation, algorithm and options): `count`
/// elements of `elem_bytes` over the hosts `members` (rank r on `members[r]`). A plan whose
/// steps can be generated (a flat ring All-Reduce, see `plan::stream`) is not compiled: a
/// training run holds hundreds of thousands of them, billions of steps as lists.
pub(crate) fn compile_one(
    g: &Graph,
    c: &crate::scenario::CollectiveYaml,
    count: usize,
    elem_bytes: u64,
    members: &[usize],
    data: bool,
) -> Result<Compiled, String> {
    let (layout, label) = layout_of(c, g).map_err(|(_, m)| m)?;
    let p = Plan {
        op: c.op,
        ranks: members.len(),
        count,
        root: c.root,
        layout,
        chunks: c.chunks,
        chunks_in_flight: c.chunks_in_flight,
    };
    let streams = plan::stream(&p);
    let programs = match &streams {
        Some(gens) => gens.iter().map(StepGen::header).collect(),
        None => plan::compile(&p).map_err(|e| e.to_string())?,
    };
    let layouts = programs.iter().map(layout_only).collect();
    let info = CollectiveInfo {
        entry: 0,
        op: c.op,
        algorithm: label,
        size_bytes: count as u64 * elem_bytes,
        count,
        dtype: c.dtype,
        redop: c.redop,
        root: c.root,
        ranks: members.len(),
        chunks: c.chunks,
        layouts,
        data,
        hosts: members.to_vec(),
        host_names: None,
    };
    Ok((info, programs, streams))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dimension_bandwidth_counts_the_links_an_algorithm_drives() {
        let b = 100;
        // Direct over a fully connected group of 4: 3 links at once.
        assert_eq!(
            dimension_bandwidth(DimKind::FullyConnected, 4, Algorithm::Direct, b),
            300
        );
        // Ring (one direction) anywhere, anything on a switch: one link.
        for kind in [DimKind::Ring, DimKind::FullyConnected, DimKind::Switch] {
            assert_eq!(dimension_bandwidth(kind, 4, Algorithm::Ring, b), 100);
        }
        assert_eq!(
            dimension_bandwidth(DimKind::Switch, 8, Algorithm::Direct, b),
            100
        );
        // Direct on a ring of 3: each block one hop, either way: 2 links' worth. On a ring
        // of 8: forward links carry 1 + 2 + 3 + 4 = 10 blocks of the 7: 70.
        assert_eq!(
            dimension_bandwidth(DimKind::Ring, 3, Algorithm::Direct, b),
            200
        );
        assert_eq!(
            dimension_bandwidth(DimKind::Ring, 8, Algorithm::Direct, b),
            70
        );
        // Halving-doubling: one link per round on a fully connected group; on a ring of 4 the
        // two rounds cross one link 1 + 4 = 5 times for 3 blocks.
        assert_eq!(
            dimension_bandwidth(DimKind::FullyConnected, 8, Algorithm::HalvingDoubling, b),
            100
        );
        assert_eq!(
            dimension_bandwidth(DimKind::Ring, 4, Algorithm::HalvingDoubling, b),
            60
        );
        // A group of 2 is one link whatever the kind.
        for a in [
            Algorithm::Ring,
            Algorithm::Direct,
            Algorithm::HalvingDoubling,
        ] {
            assert_eq!(dimension_bandwidth(DimKind::Ring, 2, a, b), 100);
        }
    }
}
