//! Transformers as ML engineers describe them: hyper-parameters (or a published model's
//! preset), a device, and parallel settings, turned into the built-in model's per-layer work
//! and byte counts ([`crate::model::ModelSpec`]).
//!
//! The arithmetic follows Megatron-LM's accounting (Narayanan et al., SC21, appendix; and
//! Korthikanti et al., 2022, for sequence parallelism and selective recomputation). For a
//! micro-batch of `b` sequences of `s` tokens, hidden size `h`, FFN hidden `f`, `a` heads of
//! which `k` key-value heads (head size `h / a`), vocabulary `V`, one layer's forward pass costs
//!
//! - attention: `2 b s h (h + 2 k h / a)` (Q, K, V projections) `+ 4 b s^2 h` (scores and
//!   their product with V) `+ 2 b s h^2` (output projection);
//! - MLP: `2 b s h f` per weight matrix (2 for GELU, 3 for SwiGLU's gated form), times
//!   `top_k` for a mixture of experts, plus the router's `2 b s h E`;
//!
//! and the LM head `2 b s h V` on the last stage. Backward is twice the forward;
//! recomputation adds the forward again (`full`) or only the attention core's `4 b s^2 h`
//! (`selective`). For GPT (`f = 4h`, `k = a`, GELU, full recomputation) one iteration is
//! `96 B s l h^2 (1 + s/(6h) + V/(16 l h))`, the paper's formula.
//!
//! Communication per micro-batch: with tensor parallelism two All-Reduces of `b s h` elements
//! per layer and pass (after attention and after the MLP), or with sequence parallelism an
//! All-Gather before and a Reduce-Scatter after each of them; `s b h` elements to the next
//! pipeline stage (and the gradient back); with experts, an All-To-All of the routed tokens
//! (`b s h top_k / tp` elements per rank) before and after the MLP; the gradients of each
//! layer's parameters over the data-parallel group.
//!
//! Expert parallelism carves the data-parallel replicas: the `ep` ranks of an expert group
//! each take their own micro-batches (as in Megatron-LM), so an iteration covers `dp x ep`
//! replicas' micro-batches. A simplification: every layer's gradients are reduced over the
//! `dp` group of the rank's expert index (Megatron reduces the dense layers' over `dp x ep`).

use crate::model::{Extra, Part, Schedule, TpComm, Work};
use fabemu_fabric::units::{Time, PS_PER_S};

use crate::trace::Op;

/// A transformer's hyper-parameters (one iteration's batch included).
#[derive(Clone, Debug, PartialEq)]
pub struct Transformer {
    /// Transformer layers.
    pub layers: u64,
    /// Hidden size `h`.
    pub hidden: u64,
    /// FFN hidden size (per expert with experts).
    pub ffn_hidden: u64,
    /// Attention heads.
    pub heads: u64,
    /// Key-value heads (grouped-query attention; `heads` for multi-head attention).
    pub kv_heads: u64,
    /// Sequence length in tokens.
    pub sequence: u64,
    /// Vocabulary size.
    pub vocabulary: u64,
    /// Sequences per iteration over all data-parallel replicas.
    pub global_batch: u64,
    /// Sequences per micro-batch.
    pub micro_batch: u64,
    /// Bytes per element of activations, parameters and gradients (2 for bf16).
    pub dtype_bytes: u64,
    /// The MLP's form.
    pub mlp: Mlp,
    /// Experts per MoE layer (1: a dense model).
    pub experts: u64,
    /// Experts each token is routed to.
    pub top_k: u64,
    /// Whether the LM head shares the embedding's weights (GPT-3) or has its own (Llama).
    pub tied_embeddings: bool,
}

/// The MLP of a layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mlp {
    /// Two weight matrices and a GELU (GPT).
    Gelu,
    /// Three weight matrices, a gated SiLU (Llama, Mixtral).
    SwiGlu,
}

/// A published model's hyper-parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Preset {
    /// GPT-3 175B (Brown et al. 2020, Table 2.1; vocabulary padded to 51200 and global batch
    /// 1536 as in Narayanan et al. SC21, Table 1).
    Gpt3_175b,
    /// Llama-2 70B (Touvron et al. 2023; the Hugging Face `config.json` of
    /// meta-llama/Llama-2-70b-hf).
    Llama2_70b,
    /// Mixtral 8x7B (Jiang et al. 2024; the Hugging Face `config.json` of
    /// mistralai/Mixtral-8x7B-v0.1).
    Mixtral8x7b,
}

impl Preset {
    /// Every preset with its name in a scenario.
    pub const ALL: [(&'static str, Preset); 3] = [
        ("gpt3-175b", Preset::Gpt3_175b),
        ("llama2-70b", Preset::Llama2_70b),
        ("mixtral-8x7b", Preset::Mixtral8x7b),
    ];

    /// The preset of a scenario's name.
    pub fn by_name(name: &str) -> Option<Preset> {
        Self::ALL.iter().find(|(n, _)| *n == name).map(|&(_, p)| p)
    }

    /// The preset's hyper-parameters.
    pub fn transformer(self) -> Transformer {
        match self {
            Preset::Gpt3_175b => Transformer {
                layers: 96,
                hidden: 12288,
                ffn_hidden: 4 * 12288,
                heads: 96,
                kv_heads: 96,
                sequence: 2048,
                vocabulary: 51200,
                global_batch: 1536,
                micro_batch: 1,
                dtype_bytes: 2,
                mlp: Mlp::Gelu,
                experts: 1,
                top_k: 1,
                tied_embeddings: true,
            },
            // 4M tokens per batch (Touvron et al., Section 2.2): 1024 sequences of 4096.
            Preset::Llama2_70b => Transformer {
                layers: 80,
                hidden: 8192,
                ffn_hidden: 28672,
                heads: 64,
                kv_heads: 8,
                sequence: 4096,
                vocabulary: 32000,
                global_batch: 1024,
                micro_batch: 1,
                dtype_bytes: 2,
                mlp: Mlp::SwiGlu,
                experts: 1,
                top_k: 1,
                tied_embeddings: false,
            },
            // The paper gives no batch; 1024 sequences of 4096 as for Llama-2.
            Preset::Mixtral8x7b => Transformer {
                layers: 32,
                hidden: 4096,
                ffn_hidden: 14336,
                heads: 32,
                kv_heads: 8,
                sequence: 4096,
                vocabulary: 32000,
                global_batch: 1024,
                micro_batch: 1,
                dtype_bytes: 2,
                mlp: Mlp::SwiGlu,
                experts: 8,
                top_k: 2,
                tied_embeddings: false,
            },
        }
    }
}

/// Activation recomputation (Korthikanti et al. 2022).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Recompute {
    /// Every activation kept.
    #[default]
    None,
    /// The attention core (scores, softmax, product with V) recomputed in the backward pass.
    Selective,
    /// Each layer's forward pass run again before its backward pass.
    Full,
}

/// ZeRO / FSDP sharding of the data-parallel group's state (Rajbhandari et al. 2020).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Zero {
    /// Plain data parallelism: gradients all-reduced.
    #[default]
    Off,
    /// Optimizer state sharded: gradients reduce-scattered, updated parameters all-gathered
    /// after the step.
    Stage1,
    /// Gradients sharded too (the same traffic as stage 1).
    Stage2,
    /// Parameters sharded too (FSDP's full sharding): each layer's parameters all-gathered
    /// before its forward and its backward pass (prefetched one layer ahead), gradients
    /// reduce-scattered.
    Stage3,
}

/// The parallel settings the work is derived for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Parallel {
    /// Data-parallel degree.
    pub dp: u64,
    /// Tensor-parallel degree.
    pub tp: u64,
    /// Pipeline-parallel degree.
    pub pp: u64,
    /// Expert-parallel degree.
    pub ep: u64,
    /// Sequence parallelism (with tp > 1).
    pub sp: bool,
    /// Pipeline schedule.
    pub schedule: Schedule,
    /// Recomputation.
    pub recompute: Recompute,
    /// Sharding of the data-parallel state.
    pub zero: Zero,
}

/// A field of the model (or the parallel settings) that is wrong, and why.
pub type FieldError = (&'static str, String);

/// The work of one iteration as the built-in model takes it, and the figures the report
/// derives its metrics from.
#[derive(Clone, Debug)]
pub struct Derived {
    /// Per-rank work per layer and micro-batch (compute as FLOPs).
    pub work: Work,
    /// Micro-batches per iteration on each pipeline.
    pub micro_batches: u64,
    /// Bytes a stage sends the next per micro-batch.
    pub activation_bytes: u64,
    /// Gradient bytes per layer (before the tensor-parallel split).
    pub parameter_bytes: u64,
    /// Figures for the report.
    pub figures: Figures,
}

/// An iteration's size, for tokens/s, TFLOP/s and MFU.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Figures {
    /// Tokens per iteration over all replicas.
    pub tokens: u64,
    /// The model's FLOPs per iteration (forward and backward, without recomputation): the
    /// numerator of MFU (Chowdhery et al. 2022).
    pub model_flops: f64,
    /// The FLOPs the devices execute per iteration (recomputation included).
    pub hardware_flops: f64,
    /// Parameters of the model.
    pub parameters: f64,
}

impl Transformer {
    /// Size of a head.
    fn head_dim(&self) -> u64 {
        self.hidden / self.heads.max(1)
    }

    /// Weight matrices of the MLP.
    fn mlp_matrices(&self) -> f64 {
        match self.mlp {
            Mlp::Gelu => 2.0,
            Mlp::SwiGlu => 3.0,
        }
    }

    /// Forward FLOPs of one layer's attention for `b` sequences (all tensor-parallel ranks).
    pub fn attention_flops(&self, b: f64) -> f64 {
        let (s, h) = (self.sequence as f64, self.hidden as f64);
        let kv = (self.kv_heads * self.head_dim()) as f64;
        2.0 * b * s * h * (h + 2.0 * kv) + 4.0 * b * s * s * h + 2.0 * b * s * h * h
    }

    /// The attention core's FLOPs (what selective recomputation runs again).
    pub fn attention_core_flops(&self, b: f64) -> f64 {
        let (s, h) = (self.sequence as f64, self.hidden as f64);
        4.0 * b * s * s * h
    }

    /// Forward FLOPs of one layer's MLP for `b` sequences (routed experts and router included).
    pub fn mlp_flops(&self, b: f64) -> f64 {
        let (s, h, f) = (
            self.sequence as f64,
            self.hidden as f64,
            self.ffn_hidden as f64,
        );
        let dense = self.mlp_matrices() * 2.0 * b * s * h * f;
        if self.experts > 1 {
            dense * self.top_k as f64 + 2.0 * b * s * h * self.experts as f64
        } else {
            dense
        }
    }

    /// Forward FLOPs of the LM head for `b` sequences.
    pub fn head_flops(&self, b: f64) -> f64 {
        2.0 * b * (self.sequence * self.hidden * self.vocabulary) as f64
    }

    /// Parameters of one layer (attention, MLP with every expert, router, two norms).
    pub fn layer_parameters(&self) -> f64 {
        let h = self.hidden as f64;
        let kv = (self.kv_heads * self.head_dim()) as f64;
        let attention = h * (h + 2.0 * kv) + h * h;
        let mlp = self.mlp_matrices() * h * self.ffn_hidden as f64 * self.experts as f64;
        let router = if self.experts > 1 {
            h * self.experts as f64
        } else {
            0.0
        };
        attention + mlp + router + 2.0 * h
    }

    /// Parameters of the embedding (and of the LM head when it has its own).
    pub fn embedding_parameters(&self) -> f64 {
        let e = (self.vocabulary * self.hidden) as f64;
        if self.tied_embeddings {
            e
        } else {
            2.0 * e
        }
    }

    /// Parameters of the whole model.
    pub fn parameters(&self) -> f64 {
        self.layers as f64 * self.layer_parameters() + self.embedding_parameters()
    }

    /// FLOPs of one iteration (all ranks): forward and backward of every layer and the LM
    /// head for the global batch, plus what `recompute` runs again.
    pub fn iteration_flops(&self, recompute: Recompute) -> f64 {
        let b = self.global_batch as f64;
        let layer = self.attention_flops(b) + self.mlp_flops(b);
        let again = match recompute {
            Recompute::None => 0.0,
            Recompute::Selective => self.attention_core_flops(b),
            Recompute::Full => layer,
        };
        self.layers as f64 * (3.0 * layer + again) + 3.0 * self.head_flops(b)
    }

    /// Checks the hyper-parameters; the error names the field.
    pub fn check(&self) -> Result<(), FieldError> {
        for (f, v) in [
            ("layers", self.layers),
            ("hidden", self.hidden),
            ("ffn_hidden", self.ffn_hidden),
            ("heads", self.heads),
            ("kv_heads", self.kv_heads),
            ("sequence", self.sequence),
            ("vocabulary", self.vocabulary),
            ("global_batch", self.global_batch),
            ("micro_batch", self.micro_batch),
            ("experts", self.experts),
            ("top_k", self.top_k),
        ] {
            if v == 0 {
                return Err((f, "must be at least 1".into()));
            }
            // Products of a few of these must stay exact in f64 and u64.
            if v > 1 << 24 {
                return Err((f, format!("{v}: at most {} supported", 1u64 << 24)));
            }
        }
        if self.hidden % self.heads != 0 {
            return Err((
                "heads",
                format!(
                    "{} heads do not divide the hidden size {}",
                    self.heads, self.hidden
                ),
            ));
        }
        if self.heads % self.kv_heads != 0 {
            return Err((
                "kv_heads",
                format!(
                    "{} key-value heads do not divide the {} heads",
                    self.kv_heads, self.heads
                ),
            ));
        }
        if self.top_k > self.experts {
            return Err((
                "top_k",
                format!(
                    "routes each token to {} experts; the model has {}",
                    self.top_k, self.experts
                ),
            ));
        }
        if self.global_batch % self.micro_batch != 0 {
            return Err((
                "global_batch",
                format!(
                    "{} sequences are not a whole number of micro-batches of {}",
                    self.global_batch, self.micro_batch
                ),
            ));
        }
        Ok(())
    }

    /// The built-in model's work for these parallel settings. Errors name the field: a
    /// hyper-parameter's, or `dp`, `tp`, `pp`, `ep`, `sp`, `virtual_stages`.
    pub fn derive(&self, par: &Parallel) -> Result<Derived, FieldError> {
        self.check()?;
        let (tp, pp, ep) = (par.tp, par.pp, par.ep);
        let replicas = par.dp.saturating_mul(ep);
        let per_replica = self.global_batch / replicas.max(1);
        if replicas == 0 || self.global_batch % replicas != 0 || per_replica % self.micro_batch != 0
        {
            return Err((
                "global_batch",
                format!(
                    "{} sequences do not split into micro-batches of {} over dp x ep = {} \
                     replicas",
                    self.global_batch, self.micro_batch, replicas
                ),
            ));
        }
        let micro_batches = per_replica / self.micro_batch;
        for (f, v, of, what) in [
            ("tp", tp, self.heads, "attention heads"),
            ("tp", tp, self.kv_heads, "key-value heads"),
            ("tp", tp, self.ffn_hidden, "FFN hidden size"),
            ("tp", tp, self.vocabulary, "vocabulary"),
            ("ep", ep, self.experts, "experts"),
        ] {
            if v == 0 || of % v != 0 {
                return Err((f, format!("{f} {v} does not divide the {what} ({of})")));
            }
        }
        if ep > 1 && self.experts == 1 {
            return Err((
                "ep",
                "expert parallelism needs a mixture of experts (`experts` > 1)".into(),
            ));
        }
        let chunks = pp.saturating_mul(par.schedule.virtual_stages() as u64);
        if chunks == 0 || self.layers % chunks != 0 {
            return Err((
                if par.schedule.virtual_stages() > 1 {
                    "virtual_stages"
                } else {
                    "pp"
                },
                format!(
                    "{} layers do not split evenly over {pp} stages x {} virtual stages",
                    self.layers,
                    par.schedule.virtual_stages()
                ),
            ));
        }
        if par.sp && tp == 1 {
            return Err((
                "sp",
                "sequence parallelism splits the tensor-parallel group's activations: set \
                 `tp` > 1"
                    .into(),
            ));
        }
        if par.sp && self.sequence % tp != 0 {
            return Err((
                "sp",
                format!(
                    "tp {tp} does not divide the sequence ({} tokens)",
                    self.sequence
                ),
            ));
        }
        let b = self.micro_batch as f64;
        let tpf = tp as f64;
        let dt = self.dtype_bytes;
        // One micro-batch's activation: s b h elements.
        let act = self.sequence * self.micro_batch * self.hidden * dt;
        let tp_comm = if tp == 1 {
            TpComm::None
        } else if par.sp {
            TpComm::Sequence(act)
        } else {
            TpComm::AllReduce(act)
        };
        let again = |forward: f64, core: f64| match par.recompute {
            Recompute::None => 0.0,
            Recompute::Selective => core,
            Recompute::Full => forward,
        };
        let attn = self.attention_flops(b) / tpf;
        let mlp = self.mlp_flops(b) / tpf;
        let part = |name: &'static str, fwd: f64, extra: f64, moe: u64| Part {
            name,
            forward: flops_op(fwd),
            backward: flops_op(2.0 * fwd + extra),
            tp: tp_comm,
            moe,
        };
        let moe = if ep > 1 { act * self.top_k / tp } else { 0 };
        let head_params = (self.vocabulary * self.hidden) as f64 / tpf;
        let work = Work {
            parts: vec![
                part(
                    "attention",
                    attn,
                    again(attn, self.attention_core_flops(b) / tpf),
                    0,
                ),
                part("mlp", mlp, again(mlp, 0.0), moe),
            ],
            // A gather of s b h elements out of the table: memory-bound.
            embedding: Some(Extra {
                name: "embedding",
                forward: memory_op(act / tp),
                backward: memory_op(act / tp),
                grad_bytes: (head_params * dt as f64) as u64,
            }),
            head: Some(Extra {
                name: "lm head",
                forward: flops_op(self.head_flops(b) / tpf),
                backward: flops_op(2.0 * self.head_flops(b) / tpf),
                grad_bytes: if self.tied_embeddings {
                    0
                } else {
                    (head_params * dt as f64) as u64
                },
            }),
            expert_bytes: if self.experts > 1 {
                (self.mlp_matrices()
                    * self.hidden as f64
                    * self.ffn_hidden as f64
                    * self.experts as f64
                    * dt as f64) as u64
            } else {
                0
            },
        };
        let figures = Figures {
            tokens: self.global_batch * self.sequence,
            model_flops: self.iteration_flops(Recompute::None),
            hardware_flops: self.iteration_flops(par.recompute),
            parameters: self.parameters(),
        };
        Ok(Derived {
            work,
            micro_batches,
            activation_bytes: act,
            parameter_bytes: (self.layer_parameters() * dt as f64) as u64,
            figures,
        })
    }
}

/// A compute node of `flops` operations (at least one), timed by the device.
fn flops_op(flops: f64) -> Op {
    Op::Compute {
        cpu: false,
        duration: None,
        num_ops: Some(flops.round().max(1.0) as u64),
        tensor_bytes: None,
    }
}

/// A compute node that only moves `bytes` through device memory.
fn memory_op(bytes: u64) -> Op {
    Op::Compute {
        cpu: false,
        duration: None,
        num_ops: None,
        tensor_bytes: Some(bytes.max(1)),
    }
}

/// A compute or memory node's time: its recorded duration, else the device's roofline
/// (`device` with the fraction of its peak reached): the larger of FLOPs over FLOP/s and
/// bytes over memory bandwidth. Other nodes take no compute time.
pub fn node_time(device: Option<(Device, f64)>, op: &Op) -> Result<Time, &'static str> {
    match op {
        Op::Compute {
            duration,
            num_ops,
            tensor_bytes,
            ..
        } => match (duration, num_ops, tensor_bytes) {
            (Some(d), _, _) => Ok(*d),
            (None, None, None) => Ok(Time::ZERO),
            (None, ops, bytes) => {
                let d = device.ok_or(
                    "a compute node with `num_ops`/`tensor_size` and no duration needs \
                     `workload.device` to time it",
                )?;
                let (d, efficiency) = d;
                let flops = ops.unwrap_or(0) as f64 / (d.peak_flops * efficiency);
                let mem = bytes.unwrap_or(0) as f64 / d.memory_bandwidth;
                Ok(secs(flops.max(mem)))
            }
        },
        Op::Memory {
            duration, bytes, ..
        } => match (duration, bytes) {
            (Some(d), _) => Ok(*d),
            (None, None) => Ok(Time::ZERO),
            (None, Some(b)) => {
                let d = device.ok_or(
                    "a memory node with `tensor_size` and no duration needs `workload.device` \
                     to time it",
                )?;
                Ok(secs(*b as f64 / d.0.memory_bandwidth))
            }
        },
        _ => Ok(Time::ZERO),
    }
}

/// Seconds as a time, rounded up to the picosecond.
fn secs(s: f64) -> Time {
    Time((s * PS_PER_S as f64).ceil() as u64)
}

/// A device: how fast it computes, how much memory it has.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Device {
    /// Peak dense 16-bit FLOP/s.
    pub peak_flops: f64,
    /// Memory bandwidth, bytes per second.
    pub memory_bandwidth: f64,
    /// Memory, bytes.
    pub memory: u64,
}

/// A device preset by its name in a scenario (`a100`, `h100`): NVIDIA's datasheets (A100 SXM4
/// 80 GB: 312 TFLOP/s dense BF16, 2039 GB/s HBM2e; H100 SXM5: 989 TFLOP/s dense BF16,
/// 3.35 TB/s HBM3, 80 GB).
pub fn device_preset(name: &str) -> Option<Device> {
    match name {
        "a100" => Some(Device {
            peak_flops: 312e12,
            memory_bandwidth: 2039e9,
            memory: 80_000_000_000,
        }),
        "h100" => Some(Device {
            peak_flops: 989e12,
            memory_bandwidth: 3350e9,
            memory: 80_000_000_000,
        }),
        _ => None,
    }
}

/// Names of the device presets.
pub const DEVICE_PRESETS: [&str; 2] = ["a100", "h100"];

#[cfg(test)]
mod tests {
    use super::*;

    fn par(tp: u64, pp: u64, dp: u64) -> Parallel {
        Parallel {
            dp,
            tp,
            pp,
            ep: 1,
            sp: false,
            schedule: Schedule::OneFOneB,
            recompute: Recompute::Full,
            zero: Zero::Off,
        }
    }

    /// Narayanan et al.'s formula, written out independently of the per-layer sums.
    #[test]
    fn gpt3_flops_match_narayanan() {
        let t = Preset::Gpt3_175b.transformer();
        let (b, s, l, h, v) = (1536.0, 2048.0, 96.0, 12288.0, 51200.0);
        let paper = 96.0 * b * s * l * h * h * (1.0 + s / (6.0 * h) + v / (16.0 * l * h));
        let ours = t.iteration_flops(Recompute::Full);
        assert!((ours / paper - 1.0).abs() < 1e-3, "{ours} vs {paper}");
        // Without recomputation: 72 B s l h^2 (1 + s/(6h) + V/(12 l h)).
        let model = 72.0 * b * s * l * h * h * (1.0 + s / (6.0 * h) + v / (12.0 * l * h));
        let ours = t.iteration_flops(Recompute::None);
        assert!((ours / model - 1.0).abs() < 1e-3, "{ours} vs {model}");
        // The per-rank work of a split adds up to the same: tp 8 x pp 16 x dp 8.
        let d = t.derive(&par(8, 16, 8)).unwrap();
        let of = |o: &Op| match o {
            Op::Compute { num_ops, .. } => num_ops.unwrap_or(0) as f64,
            _ => 0.0,
        };
        let per_layer: f64 = d
            .work
            .parts
            .iter()
            .map(|p| of(&p.forward) + of(&p.backward))
            .sum();
        let head = d
            .work
            .head
            .as_ref()
            .map_or(0.0, |x| of(&x.forward) + of(&x.backward));
        let all = (per_layer * l + head) * 8.0 * d.micro_batches as f64 * 8.0;
        assert!((all / paper - 1.0).abs() < 1e-3, "{all} vs {paper}");
        assert_eq!(d.micro_batches, 192);
        assert_eq!(d.activation_bytes, 2048 * 12288 * 2);
    }

    /// Parameter counts of the presets against the published sizes.
    #[test]
    fn preset_parameters() {
        for (p, billions) in [
            (Preset::Gpt3_175b, 175.0),
            (Preset::Llama2_70b, 69.0),
            (Preset::Mixtral8x7b, 46.7),
        ] {
            let n = p.transformer().parameters() / 1e9;
            assert!((n / billions - 1.0).abs() < 0.01, "{p:?}: {n}B");
        }
    }

    #[test]
    fn bad_fields_are_named() {
        let mut t = Preset::Llama2_70b.transformer();
        t.kv_heads = 7;
        assert_eq!(t.check().unwrap_err().0, "kv_heads");
        let t = Preset::Llama2_70b.transformer();
        assert_eq!(t.derive(&par(16, 1, 1)).unwrap_err().0, "tp");
        assert_eq!(t.derive(&par(8, 3, 1)).unwrap_err().0, "pp");
        assert_eq!(t.derive(&par(8, 1, 3)).unwrap_err().0, "global_batch");
    }
}
