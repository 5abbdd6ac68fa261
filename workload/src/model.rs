//! The built-in training model: data, tensor, pipeline and expert parallelism over a stack of
//! identical layers, generated as one trace per rank in the same form as a Chakra trace's
//! ([`crate::trace::RankTrace`]), so the same scheduler runs both.
//!
//! A rank's trace: micro-batches in the 1F1B order of its stage (warm-up forwards, then one
//! forward and one backward in turn, then the remaining backwards), each pass layer by layer
//! on the compute stream; a tensor-parallel All-Reduce after each layer's pass, the MoE
//! All-To-All before and after it; the activation (forward) or its gradient (backward) sent to
//! the neighbouring stage per micro-batch; the gradients all-reduced over the data-parallel
//! group in buckets while the last micro-batch's backward pass runs; the optimizer step last.
//! Group names: `tp{p}.{d}`, `dp{p}.{t}` (stage, data and tensor index), with expert
//! parallelism `ep{p}.{d}.{t}` and the expert index appended to the others.

use std::collections::BTreeMap;

use fabemu_fabric::units::Time;

use crate::trace::{CollKind, Op, RankTrace, TraceNode};

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
    traces(m, hosts, has_device).map_err(|(field, message)| ModelError { field, message })
}

/// Communicator groups: group id -> ranks.
pub type Groups = BTreeMap<String, Vec<usize>>;

/// The built-in model's traces, groups, and per rank the last node of each iteration.
pub type Model = (Vec<RankTrace>, Groups, Vec<Vec<u32>>);

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
fn traces(m: &ModelSpec, hosts: usize, has_device: bool) -> Result<Model, FieldError> {
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
    if m.layers % pp != 0 {
        return Err((
            "layers",
            format!("{} layers do not split evenly over {pp} stages", m.layers),
        ));
    }
    if m.bucket == 0 {
        return Err(("bucket", "must be greater than 0".into()));
    }
    let moe = m.moe_bytes;
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
    let (act, tpb) = (m.activation_bytes, m.tp_bytes);
    let grad = m.parameter_bytes / tp as u64;
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

/// One rank's nodes of the built-in model (see [`traces`]) and the node that ends each
/// iteration. `at` is the rank's (stage, data, tensor, expert) coordinates; `sizes` are
/// (layers per stage, activation, tp All-Reduce, MoE All-To-All, gradient bytes per layer).
fn rank_nodes(
    m: &ModelSpec,
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
            // Without an activation size the message is empty: a stage still waits for its
            // neighbour's pass, as it would for the tensor.
            if let Some(q) = from {
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
                    // Full buckets go as they fill, a layer's gradients split over as many
                    // as they need; the stage's first layer sends what is left.
                    while bucket >= m.bucket || (k + 1 == layers && bucket > 0) {
                        let size = bucket.min(m.bucket);
                        reduces.push(push(
                            format!("dp all_reduce {size} B after layer {layer}"),
                            coll(CollKind::AllReduce, size, format!("dp{p}.{t}{}", ex(e))),
                            deps.clone(),
                        ));
                        bucket -= size;
                    }
                }
            }
            let to = if fwd {
                (p + 1 < pp).then_some(p + 1)
            } else {
                p.checked_sub(1)
            };
            if let Some(q) = to {
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
