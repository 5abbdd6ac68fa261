//! `workload.training` and `workload.device`: the built-in training model's parallelism and
//! the compute speed of an NPU.

use fabemu_fabric::units::{Bandwidth, ByteSize, Time};
use serde::{Deserialize, Serialize};

use super::{model, one, ModelYaml, RecomputeYaml, ScheduleYaml};

/// `workload.training`: one iteration of a model split over data, tensor, pipeline and expert
/// parallel groups (by default rank = t + tp x (e + ep x (d + dp x p)): tensor-parallel
/// innermost, see `mapping`), micro-batches in a 1F1B pipeline schedule, gradients
/// all-reduced over the data-parallel group in buckets overlapped with the last micro-batch's
/// backward pass, then the optimizer step.
///
/// ```yaml
/// training:
///   dp: 2
///   tp: 2
///   pp: 2
///   ep: 1                     # expert parallelism: an All-To-All pair per layer when > 1
///   mapping: [tp, ep, dp, pp] # innermost first: which host stride each group spans
///   layers: 8                 # split evenly over the pp stages
///   forward: 100us            # per layer and micro-batch (or forward_flops)
///   backward: 200us           # default 2 x forward
///   micro_batches: 8
///   activation_bytes: 4MiB    # sent to the next stage per micro-batch (and back in backward)
///   tp_bytes: 4MiB            # All-Reduce over the tp group per layer, forward and backward
///   moe_bytes: 0B             # each MoE All-To-All (dispatch, combine) per layer, with ep > 1
///   parameter_bytes: 32MiB    # gradient bytes per layer (each tp rank holds 1/tp)
///   bucket: 25MiB             # gradient All-Reduce bucket size
///   optimizer: 50us
/// ```
///
/// Or a transformer by its hyper-parameters or a preset (`model`, see [`model`]), from which
/// the per-layer work and byte counts are derived (the fields `layers` to `parameter_bytes`
/// are then refused), with the parallel settings `sp`, `schedule`, `virtual_stages`,
/// `recompute` and `zero`.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrainingYaml {
    /// A transformer (a preset's name or hyper-parameters) whose work is derived.
    #[serde(default, deserialize_with = "model_opt")]
    pub model: Option<ModelYaml>,
    /// Sequence parallelism: the tensor-parallel All-Reduces become Reduce-Scatter +
    /// All-Gather pairs (with `model`).
    #[serde(default)]
    pub sp: bool,
    /// Pipeline schedule: `1f1b` (default), `interleaved` (with `virtual_stages`), `gpipe`.
    #[serde(default)]
    pub schedule: ScheduleYaml,
    /// Model chunks per stage for the interleaved schedule (default 2 with it).
    #[serde(default)]
    pub virtual_stages: Option<usize>,
    /// Activation recomputation: `none` (default), `selective` or `full` (with `model`).
    #[serde(default)]
    pub recompute: RecomputeYaml,
    /// ZeRO stage over the data-parallel group: 0 (default, gradients all-reduced), 1 or 2
    /// (gradients reduce-scattered, parameters all-gathered after the step), 3 (FSDP:
    /// parameters all-gathered before each layer's passes, prefetched one layer ahead).
    #[serde(default)]
    pub zero: u8,
    /// Data-parallel degree.
    #[serde(default = "one")]
    pub dp: usize,
    /// Tensor-parallel degree.
    #[serde(default = "one")]
    pub tp: usize,
    /// Pipeline-parallel degree (stages).
    #[serde(default = "one")]
    pub pp: usize,
    /// Expert-parallel degree: the ranks of an expert group hold different experts and trade
    /// tokens by All-To-All around every layer's compute.
    #[serde(default = "one")]
    pub ep: usize,
    /// The order in which the parallel dimensions are laid over the hosts, innermost first
    /// (default `[tp, ep, dp, pp]`); dimensions left out follow, outermost, in that order.
    #[serde(default)]
    pub mapping: Vec<ParallelDim>,
    /// Layers of the model, split evenly over the stages.
    #[serde(default)]
    pub layers: Option<usize>,
    /// Forward compute per layer and micro-batch, as a time (or give `forward_flops`).
    #[serde(default)]
    pub forward: Option<Time>,
    /// Forward floating-point operations per layer and micro-batch, timed by
    /// `workload.device` (instead of `forward`).
    #[serde(default)]
    pub forward_flops: Option<f64>,
    /// Bytes a layer's forward pass moves to and from device memory (with `forward_flops`:
    /// the roofline takes the longer of compute and memory time).
    #[serde(default)]
    pub forward_memory: Option<ByteSize>,
    /// Backward compute per layer and micro-batch (default twice the forward pass, in
    /// whichever form it is given).
    #[serde(default)]
    pub backward: Option<Time>,
    /// Backward floating-point operations per layer and micro-batch (instead of `backward`).
    #[serde(default)]
    pub backward_flops: Option<f64>,
    /// Bytes a layer's backward pass moves to and from device memory (with `backward_flops`).
    #[serde(default)]
    pub backward_memory: Option<ByteSize>,
    /// Micro-batches per iteration (default 1).
    #[serde(default)]
    pub micro_batches: Option<usize>,
    /// Activation bytes a stage sends the next per micro-batch (the same gradient comes back).
    #[serde(default)]
    pub activation_bytes: Option<ByteSize>,
    /// Bytes of the tensor-parallel All-Reduce after each layer, forward and backward.
    #[serde(default)]
    pub tp_bytes: Option<ByteSize>,
    /// Bytes of each MoE All-To-All on the expert-parallel group (nccl-tests' size: what one
    /// rank sends and receives), one dispatch before and one combine after every layer's
    /// compute, forward and backward; needs `ep` > 1.
    #[serde(default)]
    pub moe_bytes: Option<ByteSize>,
    /// Gradient bytes per layer (all-reduced over the data-parallel group).
    #[serde(default)]
    pub parameter_bytes: Option<ByteSize>,
    /// Gradient bucket: an All-Reduce starts when this many bytes of gradients are ready.
    #[serde(default = "default_bucket")]
    pub bucket: ByteSize,
    /// The optimizer step after the gradients are reduced.
    #[serde(default)]
    pub optimizer: Time,
    /// Iterations, one after the other (the next starts after the optimizer step).
    #[serde(default = "one")]
    pub iterations: usize,
}

/// A parallel dimension of the built-in training model (`workload.training.mapping`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
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

fn model_opt<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<ModelYaml>, D::Error> {
    model::preset_or_map(d).map(Some)
}

pub(super) fn device_opt<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<DeviceYaml>, D::Error> {
    model::preset_or_map(d).map(Some)
}

fn default_bucket() -> ByteSize {
    ByteSize(25 << 20)
}

/// `workload.device`: how fast an NPU computes, for nodes that carry work (`num_ops`,
/// `tensor_size`) rather than a measured duration. A compute node takes
/// `max(num_ops / (peak_flops x efficiency), tensor_size / memory_bandwidth)` (a roofline, as
/// ASTRA-sim's); a memory node `tensor_size / memory_bandwidth`.
///
/// `device: h100` (or `{preset: h100, efficiency: 0.5}`) takes a preset's peak, bandwidth
/// and memory (`a100`, `h100`: NVIDIA's datasheets, dense BF16); fields given override it.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeviceYaml {
    /// `a100` or `h100`.
    #[serde(default)]
    pub preset: Option<String>,
    /// Peak floating-point operations per second, e.g. `989e12`.
    #[serde(default)]
    pub peak_flops: Option<f64>,
    /// Memory bandwidth, e.g. `3350GB/s`.
    #[serde(default)]
    pub memory_bandwidth: Option<Bandwidth>,
    /// Device memory, e.g. `80GB`.
    #[serde(default)]
    pub memory: Option<ByteSize>,
    /// The fraction of the peak compute reaches (0 < efficiency <= 1).
    #[serde(default = "one_f64")]
    pub efficiency: f64,
}

impl model::Named for DeviceYaml {
    fn named(name: &str) -> Self {
        DeviceYaml {
            preset: Some(name.to_string()),
            peak_flops: None,
            memory_bandwidth: None,
            memory: None,
            efficiency: 1.0,
        }
    }
}

impl DeviceYaml {
    /// The device with the preset's figures under the fields given; the error names the
    /// field.
    pub fn resolved(&self) -> Result<fabemu_workload::transformer::Device, (&'static str, String)> {
        use fabemu_workload::transformer::{device_preset, DEVICE_PRESETS};
        let base = match &self.preset {
            Some(n) => Some(device_preset(n).ok_or((
                "preset",
                format!("unknown device `{n}`; known: {}", DEVICE_PRESETS.join(", ")),
            ))?),
            None => None,
        };
        let peak_flops = self.peak_flops.or(base.map(|d| d.peak_flops)).ok_or((
            "peak_flops",
            "missing: give `peak_flops` (or a `preset`)".to_string(),
        ))?;
        let memory_bandwidth = match (self.memory_bandwidth, base) {
            (Some(b), _) => b.bps() as f64 / 8.0,
            (None, Some(d)) => d.memory_bandwidth,
            (None, None) => {
                return Err((
                    "memory_bandwidth",
                    "missing: give `memory_bandwidth` (or a `preset`)".to_string(),
                ))
            }
        };
        if !(peak_flops > 0.0 && peak_flops.is_finite()) {
            return Err(("peak_flops", "must be greater than 0".into()));
        }
        if memory_bandwidth <= 0.0 {
            return Err(("memory_bandwidth", "must be greater than 0".into()));
        }
        if !(self.efficiency > 0.0 && self.efficiency <= 1.0) {
            return Err((
                "efficiency",
                "must be in (0, 1]: the fraction of peak compute reaches".into(),
            ));
        }
        Ok(fabemu_workload::transformer::Device {
            peak_flops,
            memory_bandwidth,
            memory: self
                .memory
                .map(|m| m.bytes())
                .or(base.map(|d| d.memory))
                .unwrap_or(0),
        })
    }
}

fn one_f64() -> f64 {
    1.0
}
