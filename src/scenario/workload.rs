//! The `workload` section: traces, collectives, sweeps and point-to-point messages.

use std::fmt;

use fabemu_fabric::units::{Bandwidth, ByteSize, Time};
use serde::{Deserialize, Serialize};

use super::one;
use super::training::{device_opt, DeviceYaml, TrainingYaml};

/// The workload.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Workload {
    /// Point-to-point messages.
    #[serde(default)]
    pub messages: Vec<MessageYaml>,
    /// Every host sends `size` to every other host (n(n-1) messages), all at `start`.
    #[serde(default)]
    pub all_to_all: Option<AllToAllYaml>,
    /// Collectives over all hosts (rank = host index), run one after the other on each rank.
    #[serde(default)]
    pub collectives: Vec<CollectiveYaml>,
    /// A training iteration from Chakra execution traces, one file per rank.
    #[serde(default)]
    pub chakra: Option<ChakraYaml>,
    /// A training iteration from the built-in parallelism model (instead of traces).
    #[serde(default)]
    pub training: Option<TrainingYaml>,
    /// The NPU model that times compute and memory nodes without a recorded duration.
    #[serde(default, deserialize_with = "device_opt")]
    pub device: Option<DeviceYaml>,
    /// The algorithm of each kind of collective a trace runs (default: `ring`, `direct` for
    /// All-To-All).
    #[serde(default)]
    pub collective_algorithms: CollectiveAlgorithms,
}

/// `workload.chakra`: the traces' prefix (`PREFIX.0.et`, `PREFIX.1.et`, ..., relative to the
/// scenario's folder), or the long form with communicator groups and a rank-to-host map.
///
/// ```yaml
/// chakra: traces/allreduce            # rank r = host r; as many traces as hosts
/// chakra:
///   traces: traces/allreduce
///   comm_groups: traces/groups.json   # ASTRA-sim's {"group id": [ranks...]} for `pg_name`
///   hosts: [h0, h2, h4, h6]           # rank r runs on hosts[r]
/// ```
#[derive(Clone, Debug, Serialize)]
pub struct ChakraYaml {
    /// The traces' path prefix.
    pub traces: String,
    /// A communicator-group JSON file, for nodes that name a process group (`pg_name`).
    pub comm_groups: Option<String>,
    /// The host of each rank, rank 0 first; absent: rank r is host r.
    pub hosts: Option<Vec<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ChakraLong {
    traces: String,
    #[serde(default)]
    comm_groups: Option<String>,
    #[serde(default)]
    hosts: Option<Vec<String>>,
}

// By hand rather than `untagged`, so a mistake in the long form gets serde's own message.
impl<'de> Deserialize<'de> for ChakraYaml {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = ChakraYaml;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a trace prefix or a mapping with `traces`")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<ChakraYaml, E> {
                Ok(ChakraYaml {
                    traces: v.to_string(),
                    comm_groups: None,
                    hosts: None,
                })
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                map: A,
            ) -> Result<ChakraYaml, A::Error> {
                let l = ChakraLong::deserialize(serde::de::value::MapAccessDeserializer::new(map))?;
                Ok(ChakraYaml {
                    traces: l.traces,
                    comm_groups: l.comm_groups,
                    hosts: l.hosts,
                })
            }
        }
        d.deserialize_any(V)
    }
}
/// `workload.collective_algorithms`: one algorithm (or one per dimension) per kind of
/// collective in a trace.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CollectiveAlgorithms {
    /// All-Reduce (and Barrier, run as a tiny All-Reduce).
    #[serde(default)]
    pub all_reduce: Option<AlgorithmYaml>,
    /// All-Gather.
    #[serde(default)]
    pub all_gather: Option<AlgorithmYaml>,
    /// Reduce-Scatter.
    #[serde(default)]
    pub reduce_scatter: Option<AlgorithmYaml>,
    /// All-To-All.
    #[serde(default)]
    pub all_to_all: Option<AlgorithmYaml>,
    /// Broadcast.
    #[serde(default)]
    pub broadcast: Option<AlgorithmYaml>,
    /// Reduce.
    #[serde(default)]
    pub reduce: Option<AlgorithmYaml>,
    /// With a per-dimension list: `local_bw_aware` (default) or `baseline`.
    #[serde(default)]
    pub scheme: Option<fabemu_collectives::plan::Scheme>,
    /// With a per-dimension list: dimension order `fixed` (default) or `themis`.
    #[serde(default)]
    pub policy: Option<fabemu_collectives::plan::DimPolicy>,
    /// Pieces each collective is cut into and pipelined (default 1).
    #[serde(default)]
    pub chunks: Option<usize>,
    /// At most this many of a collective's chunks in progress per rank (default: no limit).
    #[serde(default)]
    pub chunks_in_flight: Option<usize>,
    /// How a rank runs the collectives of one communicator: in trace order on one stream
    /// (`per_communicator`, the default, as NCCL) or each on its own stream (`concurrent`).
    #[serde(default)]
    pub streams: CollectiveStreams,
}

/// `workload.collective_algorithms.streams`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CollectiveStreams {
    /// A communicator's collectives run one at a time on each rank, in trace order (NCCL
    /// enqueues a communicator's operations on one CUDA stream).
    #[default]
    PerCommunicator,
    /// Every collective starts as soon as its dependencies are done and shares the links
    /// with those still running (as ASTRA-sim issues them).
    Concurrent,
}

/// One collective of the workload, or a sweep of sizes (as nccl-tests' `-b/-e/-f`).
///
/// ```yaml
/// collectives:
///   - op: all_reduce          # all_reduce reduce_scatter all_gather all_to_all broadcast reduce
///     algorithm: ring         # or one per dimension on multi-dimensional fabrics: [ring, direct]
///     sizes: {from: 1MiB, to: 64MiB, factor: 2}   # or `size: 8MiB`
///     type: float             # float int32 double int64
///     redop: sum              # sum min max
///     chunks: 4               # pipeline the collective in 4 pieces ...
///     chunks_in_flight: 2     # ... at most 2 at a time (0: no limit)
///     scheme: local_bw_aware  # multi-dimensional: local_bw_aware or baseline
///     policy: themis          # multi-dimensional dimension order: fixed or themis
///     root: 0                 # broadcast / reduce
///     start: 10us             # default: when the previous collective finished on that rank
///     reduce_bandwidth: 400GB/s  # reduction speed of a rank (default: instant)
///     hosts: [h0, h2, h4, h6]    # a communicator: these hosts are ranks 0.. (default: all)
/// ```
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CollectiveYaml {
    /// The operation.
    pub op: fabemu_collectives::Collective,
    /// The algorithm, or one per dimension; `ring` (`direct` for all_to_all) when absent.
    #[serde(default)]
    pub algorithm: Option<AlgorithmYaml>,
    /// Size as nccl-tests counts it: the whole buffer (All-Gather: the output; Reduce-Scatter:
    /// the input; All-To-All: one rank's send buffer).
    #[serde(default)]
    pub size: Option<ByteSize>,
    /// A sweep of sizes instead of `size`.
    #[serde(default)]
    pub sizes: Option<SweepYaml>,
    /// Element type.
    #[serde(default, rename = "type")]
    pub dtype: fabemu_collectives::DataType,
    /// Reduction operator.
    #[serde(default)]
    pub redop: fabemu_collectives::ReduceOp,
    /// Pieces the collective is cut into and pipelined (1: not cut).
    #[serde(default = "one")]
    pub chunks: usize,
    /// At most this many pieces in progress on a rank (0: no limit).
    #[serde(default)]
    pub chunks_in_flight: usize,
    /// Multi-dimensional composition (with a per-dimension `algorithm` list).
    #[serde(default)]
    pub scheme: Option<fabemu_collectives::plan::Scheme>,
    /// Multi-dimensional dimension order (with a per-dimension `algorithm` list).
    #[serde(default)]
    pub policy: Option<fabemu_collectives::plan::DimPolicy>,
    /// Root rank of Broadcast and Reduce.
    #[serde(default)]
    pub root: usize,
    /// Start time; absent: each rank starts when it finished the previous collective.
    #[serde(default)]
    pub start: Option<Time>,
    /// How fast a rank reduces an incoming message into its buffer; absent: at once.
    #[serde(default)]
    pub reduce_bandwidth: Option<Bandwidth>,
    /// The hosts taking part, rank 0 first (a communicator); absent: every host, in order.
    #[serde(default)]
    pub hosts: Option<Vec<String>>,
    /// DSCP of the collective's data packets, 0..=63 (default: `nic.dscp`).
    #[serde(default)]
    pub dscp: Option<u64>,
    /// Priority (PFC class) 0..=7, as for messages.
    #[serde(default)]
    pub priority: Option<u64>,
    /// An explicit rank for PIFO experiments, on every packet of the collective.
    #[serde(default)]
    pub rank: Option<u64>,
}

/// One algorithm for the whole collective, or one per dimension of the fabric.
#[derive(Clone, Debug, Serialize)]
#[serde(untagged)]
pub enum AlgorithmYaml {
    /// One algorithm over all ranks.
    One(fabemu_collectives::plan::Algorithm),
    /// One algorithm per dimension, dimension 0 first (hierarchical).
    PerDim(Vec<fabemu_collectives::plan::Algorithm>),
    /// `synthesized`: a schedule synthesized for this fabric by a TACOS-style greedy
    /// (All-Gather, Reduce-Scatter, All-Reduce; see `fabemu_collectives::synth`).
    #[serde(serialize_with = "synthesized_name")]
    Synthesized,
    /// `{msccl: FILE}`: an MSCCL XML algorithm, the path relative to the scenario's folder.
    Msccl {
        /// The XML file as written in the scenario.
        msccl: String,
    },
}

/// `Synthesized` serializes as its scenario spelling (untagged would make it `null`).
fn synthesized_name<S: serde::Serializer>(s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str("synthesized")
}

// By hand rather than `untagged`, so a misspelt algorithm gets serde's "unknown variant ...,
// expected one of ..." instead of "did not match any variant".
impl<'de> Deserialize<'de> for AlgorithmYaml {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use fabemu_collectives::plan::Algorithm;
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = AlgorithmYaml;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an algorithm name, a list of one per dimension, or `{msccl: FILE}`")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<AlgorithmYaml, E> {
                if v == "synthesized" {
                    return Ok(AlgorithmYaml::Synthesized);
                }
                Algorithm::deserialize(serde::de::value::StrDeserializer::<E>::new(v))
                    .map(AlgorithmYaml::One)
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<AlgorithmYaml, A::Error> {
                let mut v = Vec::new();
                while let Some(a) = seq.next_element::<Algorithm>()? {
                    v.push(a);
                }
                Ok(AlgorithmYaml::PerDim(v))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<AlgorithmYaml, A::Error> {
                use serde::de::Error as _;
                let mut file: Option<String> = None;
                while let Some(key) = map.next_key::<String>()? {
                    if key != "msccl" {
                        return Err(A::Error::unknown_field(&key, &["msccl"]));
                    }
                    if file.is_some() {
                        return Err(A::Error::duplicate_field("msccl"));
                    }
                    file = Some(map.next_value()?);
                }
                file.map(|msccl| AlgorithmYaml::Msccl { msccl })
                    .ok_or_else(|| A::Error::missing_field("msccl"))
            }
        }
        d.deserialize_any(V)
    }
}

/// Sizes `from`, `from x factor`, ... up to `to` (inclusive).
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SweepYaml {
    /// First size.
    pub from: ByteSize,
    /// Last size (included when the factor lands on it).
    pub to: ByteSize,
    /// Growth factor, at least 2.
    #[serde(default = "two")]
    pub factor: u64,
}

fn two() -> u64 {
    2
}

/// One point-to-point message (an RDMA WRITE).
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MessageYaml {
    /// Sending host.
    pub src: String,
    /// Receiving host.
    pub dst: String,
    /// Size.
    pub size: ByteSize,
    /// When the sender posts it (default 0s).
    #[serde(default)]
    pub start: Time,
    /// DSCP of the message's data packets, 0..=63 (default: `nic.dscp`).
    #[serde(default)]
    pub dscp: Option<u64>,
    /// Priority (PFC class) 0..=7 the message should travel in: alone, DSCP = 8 x priority;
    /// with `dscp`, the DSCP must map to it on every switch.
    #[serde(default)]
    pub priority: Option<u64>,
    /// Deadline, relative to `start`: EDF schedulers rank its packets by start + deadline.
    #[serde(default)]
    pub deadline: Option<Time>,
    /// Slack: how long each packet may wait in queues on its way (LSTF ranks by it).
    #[serde(default)]
    pub slack: Option<Time>,
    /// An explicit rank for PIFO experiments (the `rank` transaction).
    #[serde(default)]
    pub rank: Option<u64>,
}

/// An all-to-all exchange of point-to-point messages.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AllToAllYaml {
    /// Bytes from each host to each other host.
    pub size: ByteSize,
    /// When every host posts its messages (default 0s).
    #[serde(default)]
    pub start: Time,
}
