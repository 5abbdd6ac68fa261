//! `workload.training.model` and the parallel settings that go with it: a transformer as an
//! ML engineer describes it, by a published model's name and/or its hyper-parameters.
//!
//! ```yaml
//! training:
//!   model: llama2-70b              # a preset, or:
//!   model:
//!     preset: gpt3-175b            # optional; the fields below override it
//!     layers: 8
//!     global_batch: 64
//!   dp: 2
//!   tp: 4
//!   pp: 2
//!   sp: true
//!   schedule: interleaved          # 1f1b (default), interleaved, gpipe
//!   virtual_stages: 2
//!   recompute: selective           # none (default), selective, full
//!   zero: 1                        # 0 (default), 1, 2, 3 (3 = FSDP's full sharding)
//! ```

use std::fmt;

use fabemu_workload::transformer::{Mlp, Preset, Transformer};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// `workload.training.model`: a preset's name, or hyper-parameters (over a preset's).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelYaml {
    /// `gpt3-175b`, `llama2-70b` or `mixtral-8x7b`; every field below overrides it.
    #[serde(default)]
    pub preset: Option<String>,
    /// Transformer layers.
    #[serde(default)]
    pub layers: Option<u64>,
    /// Hidden size.
    #[serde(default)]
    pub hidden: Option<u64>,
    /// FFN hidden size (default 4 x hidden; per expert).
    #[serde(default)]
    pub ffn_hidden: Option<u64>,
    /// Attention heads.
    #[serde(default)]
    pub heads: Option<u64>,
    /// Key-value heads (default: `heads`, multi-head attention).
    #[serde(default)]
    pub kv_heads: Option<u64>,
    /// Sequence length in tokens.
    #[serde(default)]
    pub sequence: Option<u64>,
    /// Vocabulary size.
    #[serde(default)]
    pub vocabulary: Option<u64>,
    /// Sequences per iteration, over all data-parallel replicas.
    #[serde(default)]
    pub global_batch: Option<u64>,
    /// Sequences per micro-batch (default 1).
    #[serde(default)]
    pub micro_batch: Option<u64>,
    /// `bf16` (default), `fp16`, `fp32` or `fp8`: activations, parameters and gradients.
    #[serde(default)]
    pub dtype: Option<Dtype>,
    /// `gelu` (two matrices, default) or `swiglu` (three).
    #[serde(default)]
    pub mlp: Option<MlpYaml>,
    /// Experts per MoE layer (default 1: dense).
    #[serde(default)]
    pub experts: Option<u64>,
    /// Experts per token (default 1; 2 for Mixtral).
    #[serde(default)]
    pub top_k: Option<u64>,
    /// Whether the LM head shares the embedding's weights.
    #[serde(default)]
    pub tied_embeddings: Option<bool>,
}

/// An element type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Dtype {
    /// bfloat16.
    Bf16,
    /// IEEE half.
    Fp16,
    /// IEEE single.
    Fp32,
    /// 8-bit floats.
    Fp8,
}

impl Dtype {
    /// Bytes per element.
    pub fn bytes(self) -> u64 {
        match self {
            Dtype::Fp8 => 1,
            Dtype::Bf16 | Dtype::Fp16 => 2,
            Dtype::Fp32 => 4,
        }
    }
}

/// The MLP's form.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MlpYaml {
    /// Two matrices and a GELU.
    Gelu,
    /// Three matrices, gated SiLU.
    Swiglu,
}

impl ModelYaml {
    /// The transformer: the preset's hyper-parameters with the fields given over them. The
    /// error names the field.
    pub fn transformer(&self) -> Result<Transformer, (&'static str, String)> {
        let base = match &self.preset {
            Some(name) => Some(Preset::by_name(name).map(Preset::transformer).ok_or((
                "preset",
                format!(
                    "unknown model `{name}`; known: {}",
                    Preset::ALL.map(|(n, _)| n).join(", ")
                ),
            ))?),
            None => None,
        };
        let need = |field: &'static str, v: Option<u64>, from: Option<u64>| {
            v.or(from)
                .ok_or((field, format!("missing: give `{field}` (or a `preset`)")))
        };
        let b = base.as_ref();
        let hidden = need("hidden", self.hidden, b.map(|t| t.hidden))?;
        let heads = need("heads", self.heads, b.map(|t| t.heads))?;
        Ok(Transformer {
            layers: need("layers", self.layers, b.map(|t| t.layers))?,
            hidden,
            ffn_hidden: self
                .ffn_hidden
                .or(b.map(|t| t.ffn_hidden))
                .unwrap_or(hidden.saturating_mul(4)),
            heads,
            kv_heads: self.kv_heads.or(b.map(|t| t.kv_heads)).unwrap_or(heads),
            sequence: need("sequence", self.sequence, b.map(|t| t.sequence))?,
            vocabulary: need("vocabulary", self.vocabulary, b.map(|t| t.vocabulary))?,
            global_batch: need("global_batch", self.global_batch, b.map(|t| t.global_batch))?,
            micro_batch: self.micro_batch.or(b.map(|t| t.micro_batch)).unwrap_or(1),
            dtype_bytes: self
                .dtype
                .map(Dtype::bytes)
                .or(b.map(|t| t.dtype_bytes))
                .unwrap_or(2),
            mlp: match self.mlp {
                Some(MlpYaml::Gelu) => Mlp::Gelu,
                Some(MlpYaml::Swiglu) => Mlp::SwiGlu,
                None => b.map_or(Mlp::Gelu, |t| t.mlp),
            },
            experts: self.experts.or(b.map(|t| t.experts)).unwrap_or(1),
            top_k: self.top_k.or(b.map(|t| t.top_k)).unwrap_or(1),
            tied_embeddings: self
                .tied_embeddings
                .or(b.map(|t| t.tied_embeddings))
                .unwrap_or(true),
        })
    }
}

/// `workload.training.schedule`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum ScheduleYaml {
    /// One forward, one backward.
    #[default]
    #[serde(rename = "1f1b")]
    OneFOneB,
    /// Interleaved 1F1B over `virtual_stages` model chunks per stage.
    #[serde(rename = "interleaved")]
    Interleaved,
    /// All forwards, then all backwards.
    #[serde(rename = "gpipe")]
    GPipe,
}

/// `workload.training.recompute`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RecomputeYaml {
    /// Keep every activation.
    #[default]
    None,
    /// Recompute the attention core.
    Selective,
    /// Recompute each layer's forward pass.
    Full,
}

/// A section given by a preset's name (`model: llama2-70b`) or as a mapping (`model: {preset:
/// llama2-70b, layers: 8}`): the name is read as `{preset: NAME}`. By hand rather than
/// `untagged`, so a mistake in the mapping gets serde's own located message.
pub fn preset_or_map<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: DeserializeOwned,
{
    struct V<T>(std::marker::PhantomData<T>);
    impl<'de, T: DeserializeOwned> serde::de::Visitor<'de> for V<T> {
        type Value = T;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a preset's name or a mapping")
        }
        fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<T, E> {
            let m = serde::de::value::MapDeserializer::<_, E>::new(std::iter::once(("preset", v)));
            T::deserialize(m)
        }
        fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
            T::deserialize(serde::de::value::MapAccessDeserializer::new(map))
        }
    }
    d.deserialize_any(V(std::marker::PhantomData))
}
