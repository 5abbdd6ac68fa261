//! The built-in training model: data, tensor, pipeline and expert parallelism over a stack of
//! identical layers, generated as one trace per rank in the same form as a Chakra trace's
//! ([`crate::trace::RankTrace`]), so the same scheduler runs both.
//!
//! A rank's trace: micro-batches in its stage's order of the [`Schedule`] (1F1B: warm-up
//! forwards, then one forward and one backward in turn, then the remaining backwards;
//! interleaved 1F1B over several model chunks per stage; GPipe), each pass layer by layer on
//! the compute stream. A layer is one or more pieces ([`Part`]: one from the per-layer fields,
//! attention and MLP for a [`crate::transformer`]), each a compute node with its
//! tensor-parallel collectives (an All-Reduce after it, or with sequence parallelism an
//! All-Gather before and a Reduce-Scatter after) and the MoE All-To-All around it; the
//! embedding and the LM head on the first and last chunk; the activation (forward) or its
//! gradient (backward) sent to the neighbouring chunk per micro-batch; the gradients reduced
//! over the data-parallel group in buckets while the last micro-batch's backward pass runs
//! (All-Reduce, or with ZeRO Reduce-Scatter and an All-Gather of the parameters after the
//! step; ZeRO-3 gathers each layer's parameters one layer ahead of its passes); the optimizer
//! step last. Group names: `tp{p}.{d}`, `dp{p}.{t}` (stage, data and tensor index), with
//! expert parallelism `ep{p}.{d}.{t}` and the expert index appended to the others.

use std::collections::BTreeMap;

use fabemu_fabric::units::Time;

use crate::trace::{CollKind, Op, RankTrace, TraceNode};
use crate::transformer::Zero;

/// A parallel dimension, for the order in which they are laid over the ranks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ParallelDim {
    /// Tensor parallelism.
    Tp,
    /// Expert parallelism.
    Ep,
    /// Data parallelism.
    Dp,
    /// Pipeline parallelism.
    Pp,
}

/// The model as a scenario gives it (`workload.training`): degrees, per-layer work and the
/// bytes each kind of communication moves.
#[derive(Clone, Debug)]
pub struct ModelSpec {
    /// Data-parallel degree.
    pub dp: usize,
    /// Tensor-parallel degree.
    pub tp: usize,
    /// Pipeline-parallel degree (stages).
    pub pp: usize,
    /// Expert-parallel degree.
    pub ep: usize,
    /// The order of the dimensions over the ranks, innermost first; the rest follow in the
    /// order tp, ep, dp, pp.
    pub mapping: Vec<ParallelDim>,
    /// Layers, split evenly over the stages.
    pub layers: usize,
    /// Forward time per layer and micro-batch (or `forward_flops`).
    pub forward: Option<Time>,
    /// Forward FLOPs per layer and micro-batch, for the device model.
    pub forward_flops: Option<f64>,
    /// Bytes a forward pass moves to and from device memory (beside `forward_flops`).
    pub forward_memory: Option<u64>,
    /// Backward time per layer and micro-batch (default twice the forward).
    pub backward: Option<Time>,
    /// Backward FLOPs per layer and micro-batch.
    pub backward_flops: Option<f64>,
    /// Bytes a backward pass moves to and from device memory.
    pub backward_memory: Option<u64>,
    /// Micro-batches per iteration.
    pub micro_batches: usize,
    /// Activation bytes a stage sends the next per micro-batch (and its gradient back).
    pub activation_bytes: u64,
    /// Bytes of the tensor-parallel All-Reduce after each layer's pass.
    pub tp_bytes: u64,
    /// Bytes of each MoE All-To-All.
    pub moe_bytes: u64,
    /// Gradient bytes per layer (before the tensor-parallel split).
    pub parameter_bytes: u64,
    /// Gradient bucket size.
    pub bucket: u64,
    /// The optimizer step.
    pub optimizer: Time,
    /// Iterations, one after the other.
    pub iterations: usize,
    /// The pipeline schedule.
    pub schedule: Schedule,
    /// How the data-parallel group shares its state (ZeRO stage).
    pub zero: Zero,
    /// Sequence parallelism for `tp_bytes`: a Reduce-Scatter and an All-Gather in place of
    /// each All-Reduce (a `work` says it per piece).
    pub sp: bool,
    /// A transformer's work ([`crate::transformer`]) in place of the per-layer fields
    /// `forward`..`backward_memory`, `tp_bytes` and `moe_bytes`.
    pub work: Option<Work>,
}

/// The order of a stage's forward and backward passes over the micro-batches.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Schedule {
    /// One forward, one backward (PipeDream-Flush, Megatron-LM's default): `pp - 1 - stage`
    /// warm-up forwards, then forward and backward in turn.
    #[default]
    OneFOneB,
    /// Megatron-LM's interleaved 1F1B: each stage holds this many model chunks (virtual
    /// stages), micro-batches in groups of `pp` (Narayanan et al. SC21, section 2.2.2).
    Interleaved(usize),
    /// All forwards, then all backwards (Huang et al. 2019).
    GPipe,
}

impl Schedule {
    /// Model chunks per stage.
    pub fn virtual_stages(self) -> usize {
        match self {
            Schedule::Interleaved(v) => v.max(1),
            _ => 1,
        }
    }
}

/// One piece of a layer (attention, MLP): its compute per pass and the collectives around it.
#[derive(Clone, Debug)]
pub struct Part {
    /// Its name in node names (empty: the layer is one piece).
    pub name: &'static str,
    /// Forward compute per micro-batch on one rank.
    pub forward: Op,
    /// Backward compute (recomputation included).
    pub backward: Op,
    /// The tensor-parallel collectives around it.
    pub tp: TpComm,
    /// Bytes of the MoE All-To-All before (dispatch) and after (combine) it; 0: none.
    pub moe: u64,
}

/// Tensor-parallel communication of a piece of a layer, per pass (forward and backward alike,
/// Megatron-LM's conjugate operators `f` and `g`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TpComm {
    /// None.
    None,
    /// An All-Reduce of this many bytes after the piece.
    AllReduce(u64),
    /// Sequence parallelism: an All-Gather before and a Reduce-Scatter after, of this many
    /// bytes each (nccl-tests' sizes: the gathered output, the scattered input).
    Sequence(u64),
}

/// The embedding (first stage) or the LM head (last stage).
#[derive(Clone, Debug)]
pub struct Extra {
    /// Its name in node names.
    pub name: &'static str,
    /// Forward compute per micro-batch.
    pub forward: Op,
    /// Backward compute.
    pub backward: Op,
    /// Its gradient bytes on one rank (reduced with the layers').
    pub grad_bytes: u64,
}

/// A transformer's per-rank work per layer and micro-batch.
#[derive(Clone, Debug)]
pub struct Work {
    /// The pieces of a layer, in forward order.
    pub parts: Vec<Part>,
    /// Before the first layer, on the first stage.
    pub embedding: Option<Extra>,
    /// After the last layer, on the last stage.
    pub head: Option<Extra>,
    /// Of a layer's gradient bytes (`ModelSpec::parameter_bytes`), the experts' (every
    /// expert, before the tensor- and expert-parallel split). With ep > 1 a rank holds
    /// 1/ep of them and reduces them over its data-parallel group (`dp{p}.{t}.{e}`); the rest
    /// (attention, router, norms, embedding, LM head) is replicated over dp x ep ranks and
    /// reduced over them (`dp{p}.{t}`), as Megatron-LM does.
    pub expert_bytes: u64,
}

/// A field of the model that is wrong, and why; the scenario locates it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct ModelError {
    /// The field (`dp`, `layers`, ...).
    pub field: &'static str,
    /// What is wrong with it.
    pub message: String,
}

/// The built-in model for `hosts` ranks: per rank its trace and the node that ends each
/// iteration, and the communicator groups (group name -> ranks). `has_device`: a device
/// model is there to time FLOPs.
pub fn build(m: &ModelSpec, hosts: usize, has_device: bool) -> Result<Model, ModelError> {
    let (traces, groups, marks) = traces(m, hosts, has_device, false)
        .map_err(|(field, message)| ModelError { field, message })?;
    Ok((traces.into_iter().flatten().collect(), groups, marks))
}

/// One pipeline of the built-in model: the traces of the ranks at data, tensor and expert
/// index 0 (one per stage, `(rank, trace)` by rank), and every communicator group.
/// The other replicas run the same work on groups of the same shape, so an estimate of
/// the iteration needs only these ([`crate::estimate`]).
pub fn build_pipeline(
    m: &ModelSpec,
    hosts: usize,
    has_device: bool,
) -> Result<(Vec<(usize, RankTrace)>, Groups), ModelError> {
    let (traces, groups, _) = traces(m, hosts, has_device, true)
        .map_err(|(field, message)| ModelError { field, message })?;
    let ranks = traces
        .into_iter()
        .enumerate()
        .filter_map(|(r, t)| t.map(|t| (r, t)))
        .collect();
    Ok((ranks, groups))
}

/// Communicator groups: group id -> ranks.
pub type Groups = BTreeMap<String, Vec<usize>>;

/// The built-in model's traces, groups, and per rank the last node of each iteration.
pub type Model = (Vec<RankTrace>, Groups, Vec<Vec<u32>>);

/// Per rank its trace (None: not built) and iteration ends, and the groups.
type SomeRanks = (Vec<Option<RankTrace>>, Groups, Vec<Vec<u32>>);

/// A field of the model that is wrong, and why.
type FieldError = (&'static str, String);

/// A per-layer compute of the built-in model: a time, or work for the device model.
fn layer_op(time: Option<Time>, flops: Option<u64>, memory: Option<u64>) -> Op {
    Op::Compute {
        cpu: false,
        duration: time,
        num_ops: flops,
        tensor_bytes: memory,
    }
}

/// Reads `field` (FLOPs per layer) as a whole number of operations.
fn flops_of(field: &'static str, v: Option<f64>) -> Result<Option<u64>, FieldError> {
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
fn layer_ops(m: &ModelSpec, has_device: bool) -> Result<(Op, Op), FieldError> {
    let ff = flops_of("forward_flops", m.forward_flops)?;
    let bf = flops_of("backward_flops", m.backward_flops)?;
    let fmem = m.forward_memory;
    let bmem = m.backward_memory;
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
fn strides(m: &ModelSpec) -> Result<[usize; 4], FieldError> {
    use ParallelDim as D;
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
fn traces(
    m: &ModelSpec,
    hosts: usize,
    has_device: bool,
    one_pipeline: bool,
) -> Result<SomeRanks, FieldError> {
    let (dp, tp, pp, ep, mbs) = (m.dp, m.tp, m.pp, m.ep, m.micro_batches);
    check(m, hosts)?;
    let ranks = dp * tp * pp * ep;
    let v = m.schedule.virtual_stages();
    let moe = m.moe_bytes;
    if moe > 0 && ep == 1 {
        return Err((
            "moe_bytes",
            "the MoE All-To-All runs on the expert-parallel group: set `ep` > 1".into(),
        ));
    }
    let work = match &m.work {
        Some(w) => w.clone(),
        None => {
            let (forward, backward) = layer_ops(m, has_device)?;
            Work {
                parts: vec![Part {
                    name: "",
                    forward,
                    backward,
                    tp: match (m.tp_bytes, m.sp) {
                        (0, _) => TpComm::None,
                        (b, false) => TpComm::AllReduce(b),
                        (b, true) => TpComm::Sequence(b),
                    },
                    moe,
                }],
                embedding: None,
                head: None,
                // The per-layer fields' gradients all stay with their expert rank (see
                // `GradSizes`).
                expert_bytes: 0,
            }
        }
    };
    if m.work.is_some() && !has_device {
        return Err((
            "model",
            "a model's compute is FLOPs: give `workload.device` (a preset or peak_flops) to \
             time it"
                .into(),
        ));
    }
    // Bound the model's size: nodes per rank ~ micro-batches x layers x 6 per piece.
    let per_rank = (mbs as u64)
        .saturating_mul(m.layers as u64 / pp as u64)
        .saturating_mul(6 * work.parts.len() as u64)
        .saturating_mul(m.iterations as u64);
    if per_rank.saturating_mul(ranks as u64) > 1 << 24 {
        // The largest of the factors is the one to shrink.
        let field = [
            ("micro_batches", mbs),
            ("layers", m.layers / pp),
            ("iterations", m.iterations),
        ]
        .into_iter()
        .rev()
        .max_by_key(|&(_, v)| v)
        .map_or("micro_batches", |(f, _)| f);
        return Err((
            field,
            format!(
                "micro_batches x layers per stage x iterations x ranks = {mbs} x {} x {} x \
                 {ranks}: the run would have more than 2^24 nodes",
                m.layers / pp,
                m.iterations
            ),
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
    let groups = groups_of(m, &rank_of, &ex);
    let layers = m.layers / (pp * v);
    let act = m.activation_bytes;
    let grads = GradSizes::of(m, &work);
    let mut traces: Vec<Option<RankTrace>> = (0..ranks).map(|_| None).collect();
    let mut marks: Vec<Vec<u32>> = vec![Vec::new(); ranks];
    for p in 0..pp {
        for d in 0..dp {
            for e in 0..ep {
                for t in 0..tp {
                    if one_pipeline && (d, e, t) != (0, 0, 0) {
                        continue;
                    }
                    let r = rank_of(p, d, t, e);
                    let (nodes, ends) =
                        rank_nodes(m, (p, d, t, e), &rank_of, &ex, &work, (layers, act, grads));
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
    let made = traces.iter().filter(|t| t.is_some()).count();
    // The strides are a mixed radix over the degrees, so every rank got its trace.
    if made != if one_pipeline { pp } else { ranks } {
        return Err((
            "mapping",
            "does not place every rank on its own host".into(),
        ));
    }
    Ok((traces, groups, marks))
}

/// The degrees, micro-batches, layers and bucket checked against each other and the hosts.
fn check(m: &ModelSpec, hosts: usize) -> Result<(), FieldError> {
    let (dp, tp, pp, ep, mbs) = (m.dp, m.tp, m.pp, m.ep, m.micro_batches);
    for (f, v) in [
        ("dp", dp),
        ("tp", tp),
        ("pp", pp),
        ("ep", ep),
        ("micro_batches", mbs),
        ("layers", m.layers),
        ("iterations", m.iterations),
    ] {
        if v == 0 {
            return Err((f, "must be at least 1".into()));
        }
    }
    let ranks = dp.saturating_mul(tp).saturating_mul(pp).saturating_mul(ep);
    if ranks != hosts {
        // Blame a degree that cannot fit (one that does not divide the hosts), else the
        // largest.
        let degrees = [("dp", dp), ("tp", tp), ("pp", pp), ("ep", ep)];
        let field = degrees
            .iter()
            .find(|(_, v)| hosts % v != 0)
            .or_else(|| degrees.iter().rev().max_by_key(|(_, v)| *v))
            .map_or("dp", |(f, _)| *f);
        return Err((
            field,
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
    let v = m.schedule.virtual_stages();
    if m.layers % (pp * v) != 0 {
        return Err((
            "layers",
            if v > 1 {
                format!(
                    "{} layers do not split evenly over {pp} stages x {v} virtual stages",
                    m.layers
                )
            } else {
                format!("{} layers do not split evenly over {pp} stages", m.layers)
            },
        ));
    }
    if v > 1 && mbs % pp != 0 {
        return Err((
            "micro_batches",
            format!(
                "the interleaved schedule takes micro-batches in groups of pp: {mbs} is not a \
                 multiple of {pp}"
            ),
        ));
    }
    if m.bucket == 0 {
        return Err(("bucket", "must be greater than 0".into()));
    }
    Ok(())
}

/// The communicator groups (see [`traces`]).
fn groups_of(
    m: &ModelSpec,
    rank_of: &dyn Fn(usize, usize, usize, usize) -> usize,
    ex: &dyn Fn(usize) -> String,
) -> Groups {
    let (dp, tp, pp, ep) = (m.dp, m.tp, m.pp, m.ep);
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
            // The dense gradients' group: every replica of the dense weights.
            for t in 0..tp {
                groups.insert(
                    format!("dp{p}.{t}"),
                    (0..dp)
                        .flat_map(|d| (0..ep).map(move |e| (d, e)))
                        .map(|(d, e)| rank_of(p, d, t, e))
                        .collect(),
                );
            }
        }
    }
    groups
}

/// Gradient bytes per layer on one rank. Split (a transformer's work with ep > 1): the dense
/// weights' (reduced over their dp x ep replicas) and the rank's experts' (over dp).
/// Otherwise all in `dense`, over the rank's data-parallel group (the per-layer fields keep
/// every layer an expert layer held whole by its rank).
#[derive(Clone, Copy, Debug)]
struct GradSizes {
    dense: u64,
    expert: u64,
    split: bool,
}

impl GradSizes {
    fn of(m: &ModelSpec, work: &Work) -> GradSizes {
        let tp = m.tp as u64;
        if m.ep > 1 && m.work.is_some() {
            let expert = work.expert_bytes.min(m.parameter_bytes);
            GradSizes {
                dense: (m.parameter_bytes - expert) / tp,
                expert: expert / (tp * m.ep as u64),
                split: true,
            }
        } else {
            GradSizes {
                dense: m.parameter_bytes / tp,
                expert: 0,
                split: false,
            }
        }
    }
}

/// The order of a stage's passes: (forward?, micro-batch, model chunk on this stage).
/// 1F1B is the interleaved schedule with one chunk (Megatron-LM's
/// `forward_backward_pipelining_with_interleaving`: micro-batches in groups of `pp`, each
/// group through every chunk in turn).
fn pass_order(schedule: Schedule, pp: usize, p: usize, mbs: usize) -> Vec<(bool, usize, usize)> {
    if schedule == Schedule::GPipe {
        return (0..mbs)
            .map(|i| (true, i, 0))
            .chain((0..mbs).map(|i| (false, i, 0)))
            .collect();
    }
    let v = schedule.virtual_stages();
    let total = mbs * v;
    let group = pp * v;
    let mb = |k: usize| (k / group) * pp + k % pp;
    let fwd = |k: usize| (true, mb(k), (k / pp) % v);
    let bwd = |k: usize| (false, mb(k), v - 1 - (k / pp) % v);
    let warm = if v == 1 {
        pp - p - 1
    } else {
        (pp - p - 1) * 2 + (v - 1) * pp
    }
    .min(total);
    let mut order: Vec<(bool, usize, usize)> = (0..warm).map(fwd).collect();
    for i in 0..total - warm {
        order.push(fwd(warm + i));
        order.push(bwd(i));
    }
    order.extend((total - warm..total).map(bwd));
    order
}

/// A gradient stream: its group, bytes per layer on one rank, replicas, and a word for node
/// names.
type GradStream = (String, u64, usize, &'static str);

/// The gradient streams of the rank at (stage, tensor, expert) index: split, the dense
/// weights' over their replicas (dp x ep ranks: the group without the expert index) and the
/// experts' over dp; otherwise one stream over dp (the second empty).
fn grad_streams(
    grads: GradSizes,
    (p, t, e): (usize, usize, usize),
    (dp, ep): (usize, usize),
    ex: &dyn Fn(usize) -> String,
) -> [GradStream; 2] {
    let expert_group = format!("dp{p}.{t}{}", ex(e));
    if grads.split {
        [
            (format!("dp{p}.{t}"), grads.dense, dp * ep, ""),
            (expert_group, grads.expert, dp, " experts"),
        ]
    } else {
        [
            (expert_group.clone(), grads.dense, dp, ""),
            (expert_group, 0, dp, ""),
        ]
    }
}

/// Gradients reduced in buckets as they become ready, per stream.
struct Reducer<'a> {
    streams: &'a [GradStream; 2],
    bucket: u64,
    /// ZeRO: Reduce-Scatter instead of All-Reduce.
    sharded: bool,
    /// Bytes waiting per stream.
    filled: [u64; 2],
    /// The reductions so far.
    reduces: Vec<u32>,
}

impl<'a> Reducer<'a> {
    fn new(streams: &'a [GradStream; 2], bucket: u64, sharded: bool) -> Reducer<'a> {
        Reducer {
            streams,
            bucket,
            sharded,
            filled: [0; 2],
            reduces: Vec::new(),
        }
    }

    /// Gradients `bytes` (per stream) ready after `deps`: full buckets go as they fill (a
    /// layer's split over as many as they need), `last` sends what is left.
    fn add(&mut self, b: &mut Builder, bytes: [u64; 2], deps: &[u32], after: &str, last: bool) {
        for (k, (group, _, replicas, what)) in self.streams.iter().enumerate() {
            if *replicas < 2 {
                continue;
            }
            self.filled[k] += bytes[k];
            while self.filled[k] >= self.bucket || (last && self.filled[k] > 0) {
                let size = self.filled[k].min(self.bucket);
                let kind = if self.sharded {
                    CollKind::ReduceScatter
                } else {
                    CollKind::AllReduce
                };
                self.reduces.push(b.push(
                    format!("dp {} {size} B{what} after {after}", kind.key()),
                    coll(kind, size, group.clone()),
                    deps.to_vec(),
                ));
                self.filled[k] -= size;
            }
        }
    }
}

/// ZeRO 1 and 2 after the optimizer step `opt`: the parameters of `layers` layers (and
/// `extras` bytes of the first stream's) gathered back in buckets, one after the other;
/// returns the last node.
fn gather_parameters(
    b: &mut Builder,
    streams: &[GradStream; 2],
    layers: u64,
    extras: u64,
    bucket: u64,
    opt: u32,
) -> u32 {
    let mut prev = opt;
    for (k, (group, bytes, replicas, what)) in streams.iter().enumerate() {
        if *replicas < 2 {
            continue;
        }
        let mut held = bytes.saturating_mul(layers);
        if k == 0 {
            held = held.saturating_add(extras);
        }
        while held > 0 {
            let size = held.min(bucket);
            prev = b.push(
                format!("dp all_gather{what} parameters {size} B"),
                coll(CollKind::AllGather, size, group.clone()),
                vec![prev],
            );
            held -= size;
        }
    }
    prev
}

/// One piece of a layer in one pass after `deps` (taken): with sequence parallelism its
/// All-Gather, the MoE dispatch, the compute, the MoE combine, and the tensor-parallel
/// collective after it. Leaves in `deps` what the next piece waits for and returns the node
/// that ends the piece on the rank's stream.
fn piece(
    b: &mut Builder,
    part: &Part,
    (fwd, layer, mb): (bool, usize, usize),
    (tp_group, ep_group, tp, ep): (&str, &str, usize, usize),
    deps: &mut Vec<u32>,
) -> u32 {
    let pass = if fwd { "forward" } else { "backward" };
    let piece = if part.name.is_empty() {
        format!("layer {layer}")
    } else {
        format!("layer {layer} {}", part.name)
    };
    if let (TpComm::Sequence(bytes), true) = (part.tp, tp > 1) {
        let a = b.push(
            format!("tp all_gather {pass} {piece} mb{mb}"),
            coll(CollKind::AllGather, bytes, tp_group.to_string()),
            std::mem::take(deps),
        );
        deps.push(a);
    }
    if ep > 1 && part.moe > 0 {
        // Tokens (or their gradients) go to the ranks holding their experts.
        let a = b.push(
            format!("ep all_to_all dispatch {pass} {piece} mb{mb}"),
            coll(CollKind::AllToAll, part.moe, ep_group.to_string()),
            std::mem::take(deps),
        );
        deps.push(a);
    }
    let c = b.push(
        format!("{pass} {piece} mb{mb}"),
        if fwd {
            part.forward.clone()
        } else {
            part.backward.clone()
        },
        std::mem::take(deps),
    );
    let mut end = c;
    deps.push(c);
    if ep > 1 && part.moe > 0 {
        // ... and come back to their tokens' ranks before the piece ends.
        let a = b.push(
            format!("ep all_to_all combine {pass} {piece} mb{mb}"),
            coll(CollKind::AllToAll, part.moe, ep_group.to_string()),
            vec![c],
        );
        *deps = vec![a];
        end = a;
    }
    let after = match (part.tp, tp > 1) {
        (TpComm::AllReduce(bytes), true) if bytes > 0 => Some((CollKind::AllReduce, bytes)),
        (TpComm::Sequence(bytes), true) => Some((CollKind::ReduceScatter, bytes)),
        _ => None,
    };
    if let Some((kind, bytes)) = after {
        // Tensor parallelism waits for its collective before going on.
        let a = b.push(
            format!("tp {} {piece} mb{mb}", kind.key()),
            coll(kind, bytes, tp_group.to_string()),
            std::mem::take(deps),
        );
        *deps = vec![a];
        end = a;
    }
    end
}

/// FSDP: a layer's parameters gathered per gradient stream, each after the previous gather
/// and `after` (the compute two layers back, so one layer ahead); `gathers` holds them all.
fn fsdp_gathers(
    b: &mut Builder,
    streams: &[GradStream; 2],
    gathers: &mut Vec<u32>,
    after: Option<u32>,
    name: &str,
) -> Vec<u32> {
    let mut out = Vec::new();
    for (group, bytes, replicas, what) in streams {
        if *replicas < 2 || *bytes == 0 {
            continue;
        }
        let mut deps: Vec<u32> = gathers.last().copied().into_iter().collect();
        deps.extend(after);
        let g = b.push(
            format!("dp all_gather{what} {name}"),
            coll(CollKind::AllGather, *bytes, group.clone()),
            deps,
        );
        gathers.push(g);
        out.push(g);
    }
    out
}

/// The embedding or the LM head in a pass of micro-batch `mb`, after `deps` and the stream.
fn extra(
    b: &mut Builder,
    x: &Extra,
    (fwd, mb): (bool, usize),
    deps: &mut Vec<u32>,
    stream: &mut Option<u32>,
) {
    let pass = if fwd { "forward" } else { "backward" };
    deps.extend(stream.iter());
    let c = b.push(
        format!("{pass} {} mb{mb}", x.name),
        if fwd {
            x.forward.clone()
        } else {
            x.backward.clone()
        },
        std::mem::take(deps),
    );
    *stream = Some(c);
    deps.push(c);
}

/// A pipeline message of micro-batch `mb` to (`send`) or from stage `stage`: (peer rank,
/// bytes, tag).
fn message(
    b: &mut Builder,
    send: bool,
    (mb, stage): (usize, usize),
    (peer, bytes, tag): (u32, u64, u64),
    deps: Vec<u32>,
) -> u32 {
    if send {
        b.push(
            format!("send mb{mb} to stage {stage}"),
            Op::Send { peer, bytes, tag },
            deps,
        )
    } else {
        b.push(
            format!("recv mb{mb} from stage {stage}"),
            Op::Recv { peer, bytes, tag },
            deps,
        )
    }
}

/// One rank's node list under construction.
struct Builder {
    nodes: Vec<TraceNode>,
}

impl Builder {
    fn push(&mut self, name: String, op: Op, deps: Vec<u32>) -> u32 {
        let id = self.nodes.len() as u32;
        self.nodes.push(TraceNode {
            id: u64::from(id),
            name,
            op,
            deps,
        });
        id
    }
}

/// A collective of `kind` on `group`.
fn coll(kind: CollKind, bytes: u64, group: String) -> Op {
    Op::Collective {
        kind,
        bytes,
        group: Some(group),
    }
}

/// One rank's nodes of the built-in model (see [`traces`]) and the node that ends each
/// iteration. `at` is the rank's (stage, data, tensor, expert) coordinates; `sizes` are
/// (layers per model chunk, activation bytes, gradient bytes per layer on this rank).
fn rank_nodes(
    m: &ModelSpec,
    at: (usize, usize, usize, usize),
    rank_of: &dyn Fn(usize, usize, usize, usize) -> usize,
    ex: &dyn Fn(usize) -> String,
    work: &Work,
    (layers, act, grads): (usize, u64, GradSizes),
) -> (Vec<TraceNode>, Vec<u32>) {
    let (p, d, t, e) = at;
    let (pp, dp, tp, ep, mbs) = (m.pp, m.dp, m.tp, m.ep, m.micro_batches);
    let v = m.schedule.virtual_stages();
    let chunks = pp * v;
    let mut b = Builder { nodes: Vec::new() };
    let tp_group = format!("tp{p}.{d}{}", ex(e));
    let ep_group = format!("ep{p}.{d}.{t}");
    let streams = grad_streams(grads, (p, t, e), (dp, ep), ex);
    let grad = grads.dense + grads.expert;
    let sharded = m.zero != Zero::Off;
    let fsdp = m.zero == Zero::Stage3;
    let order = pass_order(m.schedule, pp, p, mbs);
    let mut stream: Option<u32> = None;
    let mut ends = Vec::with_capacity(m.iterations);
    for it in 0..m.iterations {
        let mut reducer = Reducer::new(&streams, m.bucket, sharded);
        for &(fwd, mb, c) in &order {
            let q = c * pp + p;
            let mut deps: Vec<u32> = Vec::new();
            let from = if fwd {
                q.checked_sub(1)
            } else {
                (q + 1 < chunks).then_some(q + 1)
            };
            // The boundary between chunks q and q + 1 carries the message both ways.
            let tag = |boundary: usize| {
                (((it * mbs + mb) * chunks + boundary) * 2 + usize::from(!fwd)) as u64
            };
            // Without an activation size the message is empty: a stage still waits for its
            // neighbour's pass, as it would for the tensor.
            if let Some(qq) = from {
                // Posted in schedule order, once the stream reaches this micro-batch.
                let peer = rank_of(qq % pp, d, t, e) as u32;
                let msg = (peer, act, tag(q.max(qq)));
                deps.push(message(
                    &mut b,
                    false,
                    (mb, qq % pp),
                    msg,
                    stream.into_iter().collect(),
                ));
            }
            let pass = if fwd { "forward" } else { "backward" };
            let last_mb = !fwd && mb + 1 == mbs;
            // The embedding opens the first chunk's forward and closes its backward; the LM
            // head closes the last chunk's forward and opens its backward.
            let (first, last) = (q == 0, q + 1 == chunks);
            let (first_extra, last_extra) = if fwd {
                (
                    work.embedding.as_ref().filter(|_| first),
                    work.head.as_ref().filter(|_| last),
                )
            } else {
                (
                    work.head.as_ref().filter(|_| last),
                    work.embedding.as_ref().filter(|_| first),
                )
            };
            if let Some(x) = first_extra {
                extra(&mut b, x, (fwd, mb), &mut deps, &mut stream);
                if last_mb && x.grad_bytes > 0 {
                    reducer.add(&mut b, [x.grad_bytes, 0], &deps, x.name, false);
                }
            }
            // FSDP: each layer's parameters gathered one layer ahead of its compute.
            let mut computes: Vec<u32> = Vec::new();
            let mut gathers: Vec<u32> = Vec::new();
            for k in 0..layers {
                let layer = if fwd {
                    q * layers + k
                } else {
                    q * layers + layers - 1 - k
                };
                let gather = if fsdp {
                    let after = if k >= 2 {
                        computes.get(k - 2).copied()
                    } else {
                        stream
                    };
                    let name = format!("parameters {pass} layer {layer} mb{mb}");
                    fsdp_gathers(&mut b, &streams, &mut gathers, after, &name)
                } else {
                    Vec::new()
                };
                let parts: Vec<&Part> = if fwd {
                    work.parts.iter().collect()
                } else {
                    work.parts.iter().rev().collect()
                };
                for part in parts {
                    deps.extend(stream);
                    deps.extend(gather.iter().copied());
                    let groups = (tp_group.as_str(), ep_group.as_str(), tp, ep);
                    stream = Some(piece(&mut b, part, (fwd, layer, mb), groups, &mut deps));
                }
                computes.extend(stream);
                if last_mb && grad > 0 {
                    let last = k + 1 == layers && !(q == 0 && work.embedding.is_some());
                    reducer.add(
                        &mut b,
                        [grads.dense, grads.expert],
                        &deps,
                        &format!("layer {layer}"),
                        last,
                    );
                }
            }
            if let Some(x) = last_extra {
                extra(&mut b, x, (fwd, mb), &mut deps, &mut stream);
                if last_mb {
                    reducer.add(&mut b, [x.grad_bytes, 0], &deps, x.name, true);
                }
            }
            let to = if fwd {
                (q + 1 < chunks).then_some(q + 1)
            } else {
                q.checked_sub(1)
            };
            if let Some(qq) = to {
                let peer = rank_of(qq % pp, d, t, e) as u32;
                message(
                    &mut b,
                    true,
                    (mb, qq % pp),
                    (peer, act, tag(q.max(qq))),
                    deps,
                );
            }
        }
        let mut deps = reducer.reduces;
        deps.extend(stream);
        let opt = b.push(
            format!("optimizer iteration {it}"),
            layer_op(Some(m.optimizer), None, None),
            deps,
        );
        let mut end = opt;
        if sharded && !fsdp {
            // ZeRO 1 and 2: each rank updated its shard; the parameters are gathered back.
            let extras = [(&work.embedding, p == 0), (&work.head, p + 1 == pp)]
                .into_iter()
                .filter_map(|(x, on)| x.as_ref().filter(|_| on))
                .fold(0u64, |a, x| a.saturating_add(x.grad_bytes));
            end = gather_parameters(&mut b, &streams, (layers * v) as u64, extras, m.bucket, opt);
        }
        // The next iteration starts when this one's optimizer step is done.
        stream = Some(end);
        ends.push(end);
    }
    (b.nodes, ends)
}
