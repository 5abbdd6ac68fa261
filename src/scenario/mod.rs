//! Scenario files: what a user writes to describe a fabric and a workload.
//!
//! A scenario is YAML, read with serde_yaml with unknown fields rejected; every quantity
//! carries its unit (`100Gbps`, `1.5us`, `4KiB`). Errors — syntax, types, units, unknown
//! fields, and problems found later such as a link to an unknown node — name the file, the
//! line and column, and the field ([`ScenarioError`]).
//!
//! The fabric is either listed explicitly (`hosts`, `switches`, `links`) or built by a
//! `topology` builder (`star`, `ring`, `leaf_spine`, `fat_tree`, `torus`, `multi_dim`, or an
//! ASTRA-sim network file). Routes follow the fabric's kind by default (dimension order or
//! shortest paths with ECMP), or are given explicitly (`routing: explicit` plus `routes`).

mod locate;
pub mod model;
pub mod overrides;
mod validate;
mod yaml_limits;

use std::fmt;
use std::path::Path;

use fabemu_fabric::host::NicConfig;
use fabemu_fabric::link::EthernetOverhead;
use fabemu_fabric::units::{Bandwidth, ByteSize, Time};
use fabemu_switch::buffer::BufferConfig;
use fabemu_switch::pifo::config::TreeConfig;
use serde::{Deserialize, Serialize};

pub use self::locate::{locate, FieldPath, Seg};
pub use self::model::{ModelYaml, RecomputeYaml, ScheduleYaml};
pub use self::overrides::Override;

/// The default scenario, compiled into the binary (`examples/quickstart.yaml`).
pub const QUICKSTART: &str = include_str!("../../examples/quickstart.yaml");

/// Whether payloads are real bytes or lengths only.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// Payloads are real bytes; receivers check them.
    Data,
    /// Payloads are lengths only (for scale); headers are still real.
    #[default]
    Timing,
}

/// How finely the network is emulated.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Fidelity {
    /// Every packet is a real frame through NICs and switches (default).
    #[default]
    Packet,
    /// Every message is a fluid flow on its routed path with max-min fair rates: no packets,
    /// switches or NICs; for cluster scale (see README "How it works").
    Flow,
}

/// How flows share links at flow fidelity.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FlowModel {
    /// Weighted max-min fair rates (default): exact for symmetric collectives and incasts, the
    /// fastest.
    #[default]
    MaxMin,
    /// Fluid FIFO queues: overloaded links share by arrival rate and queue the excess, as
    /// switches without congestion control do (oversubscribed fabrics, ECMP collisions).
    Queues,
}

/// How routes are made.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Routing {
    /// By the kind of fabric: dimension-order on tori and multi-dimensional fabrics, shortest
    /// paths with ECMP everywhere else.
    #[default]
    Auto,
    /// Shortest paths by hop count; equal-cost next hops are all kept (ECMP). Hosts forward
    /// when some host has several ports.
    ShortestPath,
    /// Dimension-order routing (tori and multi-dimensional fabrics only).
    DimensionOrder,
    /// Only the routes listed under `routes`.
    Explicit,
}

/// A whole scenario file.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// A short name for reports.
    #[serde(default)]
    pub name: Option<String>,
    /// Free text.
    #[serde(default)]
    pub description: Option<String>,
    /// Seed of every random choice (ECMP hashing, data patterns); same seed, same results.
    #[serde(default = "default_seed")]
    pub seed: u64,
    /// `data` or `timing`.
    #[serde(default)]
    pub mode: Mode,
    /// `packet` (default) or `flow`.
    #[serde(default)]
    pub fidelity: Fidelity,
    /// At flow fidelity: `max_min` (default) or `queues`.
    #[serde(default)]
    pub flow_model: FlowModel,
    /// Stop the run at this simulated time; messages not finished by then are an error.
    #[serde(default = "default_until")]
    pub until: Time,
    /// Assert that no frame is dropped anywhere (a drop is then an invariant violation).
    #[serde(default)]
    pub lossless: bool,
    /// NIC transport settings for every host.
    #[serde(default)]
    pub nic: NicConfig,
    /// Ethernet overhead counted on the wire.
    #[serde(default)]
    pub ethernet: EthernetOverhead,
    /// Buffer of every switch that does not set its own.
    #[serde(default)]
    pub switch_buffer: BufferConfig,
    /// The egress scheduler (a PIFO tree) of every port of every switch that does not set its
    /// own; FIFO when absent.
    #[serde(default)]
    pub switch_scheduler: Option<TreeConfig>,
    /// Host names (explicit fabric).
    #[serde(default)]
    pub hosts: Vec<String>,
    /// Switches (explicit fabric).
    #[serde(default)]
    pub switches: Vec<SwitchSpec>,
    /// Links (explicit fabric).
    #[serde(default)]
    pub links: Vec<LinkSpec>,
    /// A generated fabric instead of the explicit lists.
    #[serde(default)]
    pub topology: Option<TopologySpec>,
    /// How routes are made and how fast they change after a failure: a policy name
    /// (`routing: auto`) or `{policy, failover}` (see [`RoutingSpec`]).
    #[serde(default)]
    pub routing: RoutingSpec,
    /// Routes, with `routing: explicit`.
    #[serde(default)]
    pub routes: Vec<RouteSpec>,
    /// What the hosts do.
    pub workload: Workload,
    /// Injected faults: failing links and nodes, random loss, bit errors, degraded links
    /// (see [`FaultSpec`]).
    #[serde(default)]
    pub faults: Vec<FaultSpec>,
    /// The older spelling of `routing.failover`, kept as an alias (giving both is an error).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failover: Option<Time>,
}

/// The failover delay when the scenario gives none.
pub const DEFAULT_FAILOVER: Time = Time::from_us(50);

impl Scenario {
    /// How long after a link or node fails (or recovers) switches and relaying hosts take the
    /// routes that avoid it (failure detection plus route convergence): `routing.failover`,
    /// or the top-level `failover` alias, or 50 us.
    pub fn failover(&self) -> Time {
        self.routing
            .failover
            .or(self.failover)
            .unwrap_or(DEFAULT_FAILOVER)
    }
}

/// The `routing` key: a policy name (`routing: shortest_path`), or a mapping
/// `{policy: shortest_path, failover: 50us}` where both keys are optional.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct RoutingSpec {
    /// How routes are made.
    pub policy: Routing,
    /// Detection plus convergence delay after a failure or recovery; [`DEFAULT_FAILOVER`]
    /// when absent.
    pub failover: Option<Time>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RoutingLong {
    #[serde(default)]
    policy: Routing,
    #[serde(default)]
    failover: Option<Time>,
}

// By hand rather than `untagged`, so a mistake in the long form gets serde's own message.
impl<'de> Deserialize<'de> for RoutingSpec {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = RoutingSpec;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a routing policy name or a mapping with `policy` and `failover`")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<RoutingSpec, E> {
                let policy = Routing::deserialize(serde::de::value::StrDeserializer::new(v))?;
                Ok(RoutingSpec {
                    policy,
                    failover: None,
                })
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                map: A,
            ) -> Result<RoutingSpec, A::Error> {
                let l =
                    RoutingLong::deserialize(serde::de::value::MapAccessDeserializer::new(map))?;
                Ok(RoutingSpec {
                    policy: l.policy,
                    failover: l.failover,
                })
            }
        }
        d.deserialize_any(V)
    }
}

/// One injected fault: a target (`link: [a, b]`, optionally one `direction: a->b`, or
/// `node: NAME`), exactly one effect (`down: true`, `loss`, `ber`, `bandwidth`) and a time
/// window (`from`/`at`, `until`, `period` for a flap).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FaultSpec {
    /// The link, by the names of its two ends (`fabemu topo --links` lists them).
    #[serde(default)]
    pub link: Option<Vec<String>>,
    /// Only this direction of the link (`a->b`); both when absent.
    #[serde(default)]
    pub direction: Option<String>,
    /// A node (host NIC or switch) that fails: it stops sending and receiving.
    #[serde(default)]
    pub node: Option<String>,
    /// Start of the fault (default 0). `at` is a synonym.
    #[serde(default)]
    pub from: Option<Time>,
    /// Synonym of `from`.
    #[serde(default)]
    pub at: Option<Time>,
    /// End of the fault (exclusive); absent: it lasts.
    #[serde(default)]
    pub until: Option<Time>,
    /// Repeat the window every `period` (a flap); needs `until`.
    #[serde(default)]
    pub period: Option<Time>,
    /// The link or node is down.
    #[serde(default)]
    pub down: Option<bool>,
    /// Probability that a frame is lost, per direction, independently per frame.
    #[serde(default)]
    pub loss: Option<f64>,
    /// Bit error rate: each bit flips with this probability; a damaged frame is discarded by
    /// the receiver's frame check.
    #[serde(default)]
    pub ber: Option<f64>,
    /// The link runs at this bandwidth while the fault lasts.
    #[serde(default)]
    pub bandwidth: Option<Bandwidth>,
}

fn default_seed() -> u64 {
    1
}

/// The `until` a scenario gets when it sets none.
pub fn default_until() -> Time {
    Time(10 * fabemu_fabric::units::PS_PER_S)
}

/// A switch of an explicit fabric.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SwitchSpec {
    /// Unique node name.
    pub name: String,
    /// Its buffer; the scenario's `switch_buffer` when absent.
    #[serde(default)]
    pub buffer: Option<BufferConfig>,
    /// Its ports' scheduler; the scenario's `switch_scheduler` when absent.
    #[serde(default)]
    pub scheduler: Option<TreeConfig>,
}

/// A full-duplex link of an explicit fabric.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LinkSpec {
    /// One end (a host or switch name).
    pub a: String,
    /// The other end.
    pub b: String,
    /// Bandwidth of each direction.
    pub bandwidth: Bandwidth,
    /// Propagation latency of each direction.
    pub latency: Time,
}

/// A generated fabric: exactly one of the fields.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TopologySpec {
    /// Hosts around one switch.
    #[serde(default)]
    pub star: Option<UniformSpec>,
    /// Hosts in a bidirectional ring of host-to-host links (hosts forward).
    #[serde(default)]
    pub ring: Option<UniformSpec>,
    /// Two-tier leaf-spine Clos.
    #[serde(default)]
    pub leaf_spine: Option<LeafSpineYaml>,
    /// Three-tier k-ary fat-tree.
    #[serde(default)]
    pub fat_tree: Option<FatTreeYaml>,
    /// k-dimensional torus of host-to-host links (hosts forward).
    #[serde(default)]
    pub torus: Option<TorusYaml>,
    /// ASTRA-sim-style multi-dimensional fabric: a list of dimensions.
    #[serde(default)]
    pub multi_dim: Option<MultiDimYaml>,
    /// An ASTRA-sim network file, read as it is (path relative to this scenario's folder).
    #[serde(default)]
    pub astra_sim: Option<String>,
}

impl TopologySpec {
    /// The names of the kinds given (a valid spec has exactly one).
    pub fn kinds(&self) -> Vec<&'static str> {
        let mut v = Vec::new();
        for (name, given) in [
            ("star", self.star.is_some()),
            ("ring", self.ring.is_some()),
            ("leaf_spine", self.leaf_spine.is_some()),
            ("fat_tree", self.fat_tree.is_some()),
            ("torus", self.torus.is_some()),
            ("multi_dim", self.multi_dim.is_some()),
            ("astra_sim", self.astra_sim.is_some()),
        ] {
            if given {
                v.push(name);
            }
        }
        v
    }
}

/// A three-tier k-ary fat-tree: k pods of k/2 edge and k/2 aggregation switches, (k/2)^2 core
/// switches; each edge switch has `oversubscription` x k/2 hosts under its k/2 uplinks.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FatTreeYaml {
    /// Switch radix (even, at least 2).
    pub k: usize,
    /// Hosts per uplink at the edge (1 = non-blocking; 2 = 2:1 oversubscribed ...).
    #[serde(default = "one")]
    pub oversubscription: usize,
    /// Host-to-edge link bandwidth.
    pub host_bandwidth: Bandwidth,
    /// Host-to-edge link latency.
    pub host_latency: Time,
    /// Edge-to-aggregation and aggregation-to-core link bandwidth.
    pub fabric_bandwidth: Bandwidth,
    /// Edge-to-aggregation and aggregation-to-core link latency.
    pub fabric_latency: Time,
    /// Aggregation-to-core bandwidth, if different from `fabric_bandwidth`.
    #[serde(default)]
    pub core_bandwidth: Option<Bandwidth>,
    /// Aggregation-to-core latency, if different from `fabric_latency`.
    #[serde(default)]
    pub core_latency: Option<Time>,
}

fn one() -> usize {
    1
}

/// A k-dimensional torus: every host links to its neighbours in each dimension, wrapping around.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TorusYaml {
    /// Size of each dimension (each at least 2), dimension 0 first.
    pub dims: Vec<usize>,
    /// Bandwidth of every link.
    pub bandwidth: Bandwidth,
    /// Latency of every link.
    pub latency: Time,
}

/// A multi-dimensional fabric as ASTRA-sim defines it.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MultiDimYaml {
    /// The dimensions, dimension 0 (varying fastest in the rank) first.
    pub dimensions: Vec<DimYaml>,
}

/// The kind of one dimension.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DimKindYaml {
    /// Each group of `size` hosts forms a bidirectional ring of host-to-host links.
    Ring,
    /// A direct link between every pair of the group.
    FullyConnected,
    /// One switch per group, one link from each host.
    Switch,
}

/// One dimension.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DimYaml {
    /// `ring`, `fully_connected` or `switch`.
    pub kind: DimKindYaml,
    /// Hosts per group (at least 2).
    pub size: usize,
    /// Bandwidth of this dimension's links.
    pub bandwidth: Bandwidth,
    /// Latency of this dimension's links.
    pub latency: Time,
}

/// A fabric of `hosts` hosts whose links are all alike.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UniformSpec {
    /// Number of hosts.
    pub hosts: usize,
    /// Bandwidth of every link.
    pub bandwidth: Bandwidth,
    /// Latency of every link.
    pub latency: Time,
}

/// A leaf-spine fabric.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LeafSpineYaml {
    /// Leaf (top-of-rack) switches.
    pub leaves: usize,
    /// Spine switches; every leaf links to every spine.
    pub spines: usize,
    /// Hosts under each leaf.
    pub hosts_per_leaf: usize,
    /// Host-to-leaf link bandwidth.
    pub host_bandwidth: Bandwidth,
    /// Host-to-leaf link latency.
    pub host_latency: Time,
    /// Leaf-to-spine link bandwidth.
    pub fabric_bandwidth: Bandwidth,
    /// Leaf-to-spine link latency.
    pub fabric_latency: Time,
}

/// An explicit route: at node `at`, frames for host `dst` leave toward the neighbours `via`
/// (several neighbours: ECMP among them).
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouteSpec {
    /// The forwarding node.
    pub at: String,
    /// The destination host.
    pub dst: String,
    /// Neighbour nodes to forward to.
    pub via: Vec<String>,
}

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

fn device_opt<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<DeviceYaml>, D::Error> {
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

/// A problem with a scenario, pointing at where it is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScenarioError {
    /// The file (or `<embedded quickstart>`).
    pub file: String,
    /// 1-based line, when known.
    pub line: Option<usize>,
    /// 1-based column, when known.
    pub column: Option<usize>,
    /// The field, e.g. `links[3].bandwidth` (empty when the whole document is at fault).
    pub field: String,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for ScenarioError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file)?;
        if let (Some(l), Some(c)) = (self.line, self.column) {
            write!(f, ":{l}:{c}")?;
        }
        if self.field.is_empty() {
            write!(f, ": {}", self.message)
        } else {
            write!(f, ": field `{}`: {}", self.field, self.message)
        }
    }
}

impl std::error::Error for ScenarioError {}

/// A parsed scenario with the text it came from (for locating later errors).
#[derive(Clone, Debug)]
pub struct Source {
    /// The scenario.
    pub scenario: Scenario,
    /// Its text.
    pub text: String,
    /// Its file name, for messages.
    pub file: String,
    /// The ASTRA-sim network file `topology.astra_sim` names, read and parsed.
    pub astra: Option<AstraFile>,
    /// The `--set` overrides applied over `text`, in order.
    pub overrides: Vec<Override>,
}

/// An ASTRA-sim network file read for a scenario.
#[derive(Clone, Debug)]
pub struct AstraFile {
    /// Its path as resolved (relative paths are relative to the scenario's folder).
    pub path: String,
    /// The dimensions it defines.
    pub network: fabemu_topologies::astra_sim::AstraNetwork,
    /// One sentence per key the file has and ASTRA-sim does not read (ignored, as ASTRA-sim
    /// does), with its position and the key it was probably meant to be; the command line
    /// prints them as warnings.
    pub warnings: Vec<String>,
}

/// The keys of an ASTRA-sim network file that ASTRA-sim reads.
const ASTRA_KEYS: [&str; 4] = ["topology", "npus_count", "bandwidth", "latency"];

/// The key among `known` that `key` is most likely a misspelling of, if any is close enough
/// (case and one or two typos: `latncy`, `npu_count`, `Bandwidth`).
pub fn did_you_mean<'k>(key: &str, known: &[&'k str]) -> Option<&'k str> {
    let key = key.to_lowercase();
    known
        .iter()
        .map(|k| (strsim::normalized_damerau_levenshtein(&key, k), *k))
        .filter(|(score, _)| *score >= 0.7)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, k)| k)
}

/// The top-level keys of `text` (a YAML mapping) that are not ASTRA-sim's, as written.
fn astra_extra_keys(text: &str) -> Vec<String> {
    match serde_yaml::from_str::<serde_yaml::Value>(text) {
        Ok(serde_yaml::Value::Mapping(m)) => m
            .keys()
            .filter_map(|k| k.as_str())
            .filter(|k| !ASTRA_KEYS.contains(k))
            .map(str::to_string)
            .collect(),
        _ => Vec::new(),
    }
}

/// Reads and parses an ASTRA-sim network file; errors name that file, and the line and column
/// of the offending entry when it has one.
pub fn load_astra_file(path: &Path) -> Result<AstraFile, ScenarioError> {
    use fabemu_topologies::astra_sim::{self, AstraSimError};
    let file = path.display().to_string();
    let plain = |message: String| ScenarioError {
        file: file.clone(),
        line: None,
        column: None,
        field: String::new(),
        message,
    };
    let text = fabemu_workload::input::read_text_limited(
        path,
        MAX_ASTRA_BYTES,
        "an ASTRA-sim network file",
    )
    .map_err(|e| plain(format!("cannot read the ASTRA-sim network file: {e}")))?;
    yaml_limits::check(&text).map_err(|r| refused(&file, r))?;
    let network = astra_sim::parse(&text).map_err(|e| {
        let root = FieldPath::root();
        let at = match &e {
            AstraSimError::LengthMismatch { field, .. } | AstraSimError::NotAList { field } => {
                Some(root.key(field))
            }
            AstraSimError::UnknownKind { index, .. } => Some(root.key("topology").index(*index)),
            AstraSimError::BadValue { field, index, .. } => Some(root.key(field).index(*index)),
            AstraSimError::Yaml { .. } => {
                // Again, for serde_yaml's error itself (its position, its kind).
                if let Err(ye) = serde_yaml::from_str::<serde_yaml::Value>(&text) {
                    let (at, message) = yaml_limits::explain(&ye, &text).unwrap_or_else(|| {
                        let loc = ye.location().map(|l| (l.line(), l.column()));
                        let m = ye.to_string();
                        let m = m.split(" at line ").next().unwrap_or(&m).to_string();
                        (loc, format!("not valid YAML: {m}"))
                    });
                    return ScenarioError {
                        file: file.clone(),
                        line: at.map(|a| a.0),
                        column: at.map(|a| a.1),
                        field: String::new(),
                        message,
                    };
                }
                None
            }
            AstraSimError::MissingField { field } => {
                // A misspelt key is ignored, and the key it should have been is then missing.
                let extra = astra_extra_keys(&text);
                let guess = extra.iter().find(|k| did_you_mean(k, &[field]).is_some());
                if let Some(k) = guess {
                    let p = root.key(k);
                    let loc = locate(&text, &p);
                    return ScenarioError {
                        file: file.clone(),
                        line: loc.map(|l| l.0),
                        column: loc.map(|l| l.1),
                        field: k.clone(),
                        message: format!("`{field}` is missing; is `{k}` a misspelling of it?"),
                    };
                }
                None
            }
            _ => None,
        };
        match at {
            Some(p) => {
                let loc = locate(&text, &p);
                ScenarioError {
                    file: file.clone(),
                    line: loc.map(|l| l.0),
                    column: loc.map(|l| l.1),
                    field: p.to_string(),
                    message: e.to_string(),
                }
            }
            None => plain(e.to_string()),
        }
    })?;
    // The same size limits as any scenario, before anything is built.
    let dims = network.dims.iter().map(|d| {
        let kind = match d.kind {
            fabemu_topologies::DimKind::Ring => DimKindYaml::Ring,
            fabemu_topologies::DimKind::FullyConnected => DimKindYaml::FullyConnected,
            fabemu_topologies::DimKind::Switch => DimKindYaml::Switch,
        };
        (kind, d.size)
    });
    let too_big = match validate::dims_size(dims) {
        None => Some("the fabric's size overflows 64 bits".to_string()),
        Some((h, _, _)) if h > validate::MAX_HOSTS => Some(format!(
            "{h} NPUs; fabemu supports at most {}",
            validate::MAX_HOSTS
        )),
        Some((_, _, l)) if l > validate::MAX_LINKS => Some(format!(
            "{l} links; fabemu supports at most {}",
            validate::MAX_LINKS
        )),
        Some((h, sw, _)) if h * (h + sw) > validate::MAX_ROUTE_ENTRIES => Some(format!(
            "{} routing entries; at most {}",
            h * (h + sw),
            validate::MAX_ROUTE_ENTRIES
        )),
        _ => None,
    };
    if let Some(m) = too_big {
        let loc = locate(&text, &FieldPath::root().key("npus_count"));
        return Err(ScenarioError {
            file,
            line: loc.map(|l| l.0),
            column: loc.map(|l| l.1),
            field: "npus_count".into(),
            message: format!("the fabric is too large: {m}"),
        });
    }
    let warnings = network
        .ignored_keys
        .iter()
        .map(|k| {
            let at = match locate(&text, &FieldPath::root().key(k)) {
                Some((l, c)) => format!("{file}:{l}:{c}"),
                None => file.clone(),
            };
            let hint = match did_you_mean(k, &ASTRA_KEYS) {
                Some(m) => format!("; did you mean `{m}`?"),
                None => String::new(),
            };
            format!(
                "{at}: key `{k}` is ignored (ASTRA-sim reads only topology, npus_count, \
                 bandwidth and latency){hint}"
            )
        })
        .collect();
    Ok(AstraFile {
        path: file,
        network,
        warnings,
    })
}

impl Source {
    /// An error about the value at `path`, located in the text.
    pub fn error_at(&self, path: &FieldPath, message: impl Into<String>) -> ScenarioError {
        if let Some(o) = overrides::owner(&self.overrides, path) {
            return ScenarioError {
                file: o.origin(),
                line: None,
                column: None,
                field: path.to_string(),
                message: message.into(),
            };
        }
        let loc = locate(&self.text, path);
        ScenarioError {
            file: self.file.clone(),
            line: loc.map(|l| l.0),
            column: loc.map(|l| l.1),
            field: path.to_string(),
            message: message.into(),
        }
    }
}

/// Refuses, with a located error, what the scenario's fidelity does not model (run after
/// `--fidelity` has overridden the file's choice).
pub fn check_fidelity(src: &Source) -> Result<(), ScenarioError> {
    match src.scenario.fidelity {
        Fidelity::Flow => validate::check_flow_fidelity(src),
        Fidelity::Packet => Ok(()),
    }
}

/// The largest scenario file read: far above any written by hand or generated for the
/// largest fabric fabemu builds, and a bound on what an endless input (`/dev/zero`) costs.
pub const MAX_SCENARIO_BYTES: u64 = 16 << 20;
/// The largest ASTRA-sim network file read (a real one is a few lines).
pub const MAX_ASTRA_BYTES: u64 = 1 << 20;
/// The largest MSCCL algorithm file read.
pub const MAX_MSCCL_BYTES: u64 = 64 << 20;
/// The largest communicator-group file (`workload.chakra.comm_groups`) read.
pub const MAX_GROUPS_BYTES: u64 = 16 << 20;

/// A YAML document refused before it was read (too deep, an alias bomb, a tag), as an error
/// at its place in `file`.
fn refused(file: &str, (at, message): yaml_limits::Refusal) -> ScenarioError {
    ScenarioError {
        file: file.to_string(),
        line: at.map(|a| a.0),
        column: at.map(|a| a.1),
        field: String::new(),
        message,
    }
}

/// Reads and checks the scenario in file `path`.
pub fn load_file(path: &Path) -> Result<Source, ScenarioError> {
    load_file_with(path, Vec::new())
}

/// Reads the scenario in file `path`, applies `overrides` (`--set`) in order, and checks the
/// result.
pub fn load_file_with(path: &Path, overrides: Vec<Override>) -> Result<Source, ScenarioError> {
    let file = path.display().to_string();
    let text = fabemu_workload::input::read_text_limited(path, MAX_SCENARIO_BYTES, "a scenario")
        .map_err(|e| ScenarioError {
            file: file.clone(),
            line: None,
            column: None,
            field: String::new(),
            message: format!("cannot read the scenario: {e}"),
        })?;
    load_str_with(&text, &file, overrides)
}

/// Parses and checks a scenario given as text; `file` names it in messages.
pub fn load_str(text: &str, file: &str) -> Result<Source, ScenarioError> {
    load_str_with(text, file, Vec::new())
}

/// Parses a scenario given as text, applies `overrides` (`--set`) in order, and checks the
/// result; `file` names the text in messages.
pub fn load_str_with(
    text: &str,
    file: &str,
    overrides: Vec<Override>,
) -> Result<Source, ScenarioError> {
    yaml_limits::check(text).map_err(|r| refused(file, r))?;
    let scenario: Scenario = if overrides.is_empty() {
        serde_yaml::from_str(text).map_err(|e| from_yaml_error(&e, text, file))?
    } else {
        with_overrides(text, file, &overrides)?
    };
    let mut src = Source {
        scenario,
        text: text.to_string(),
        file: file.to_string(),
        astra: None,
        overrides,
    };
    if let Some(rel) = src
        .scenario
        .topology
        .as_ref()
        .and_then(|t| t.astra_sim.clone())
    {
        // Relative to the scenario's folder, as a user reading the file would expect.
        let base = Path::new(file)
            .parent()
            .filter(|p| !p.as_os_str().is_empty() && !file.starts_with('<'));
        let path = match base {
            Some(b) => b.join(&rel),
            None => Path::new(&rel).to_path_buf(),
        };
        if !path.is_file() {
            return Err(src.error_at(
                &FieldPath::root().key("topology").key("astra_sim"),
                format!("no ASTRA-sim network file at {}", path.display()),
            ));
        }
        let astra = load_astra_file(&path)?;
        src.astra = Some(astra);
    }
    validate::check(&src)?;
    check_fidelity(&src)?;
    Ok(src)
}

/// The scenario of `text` with `overrides` applied. Errors in overridden values name the
/// override; others are located in `text`, as without overrides.
fn with_overrides(
    text: &str,
    file: &str,
    overrides: &[Override],
) -> Result<Scenario, ScenarioError> {
    // The file's own error, exactly as without overrides (its position and wording).
    let file_error = || {
        serde_yaml::from_str::<Scenario>(text)
            .err()
            .map(|e| from_yaml_error(&e, text, file))
    };
    let mut doc: serde_yaml::Value = match serde_yaml::from_str(text) {
        Ok(v) => v,
        Err(e) => return Err(file_error().unwrap_or_else(|| from_yaml_error(&e, text, file))),
    };
    for o in overrides {
        overrides::apply(&mut doc, o)?;
    }
    // Through text again, so serde_yaml's error paths name the faulty field.
    let merged = serde_yaml::to_string(&doc).map_err(|e| ScenarioError {
        file: file.to_string(),
        line: None,
        column: None,
        field: String::new(),
        message: format!("cannot apply --set: {e}"),
    })?;
    let e = match serde_yaml::from_str::<Scenario>(&merged) {
        Ok(s) => return Ok(s),
        Err(e) => from_yaml_error(&e, &merged, file),
    };
    let at = FieldPath::parse(&e.field).unwrap_or_default();
    // `unknown field `x`` is reported at the mapping; the override may be the field itself.
    let unknown = e
        .message
        .strip_prefix("unknown field `")
        .and_then(|m| m.split_once('`'))
        .map(|(k, _)| at.key(k));
    let by_override = |o: &Override| ScenarioError {
        file: o.origin(),
        line: None,
        column: None,
        field: e.field.clone(),
        message: e.message.clone(),
    };
    if let Some(o) = overrides::owner(overrides, unknown.as_ref().unwrap_or(&at)) {
        return Err(by_override(o));
    }
    // An unknown field the overrides made (`--set foo.bar=1` adds `foo`).
    if let Some(o) = unknown
        .as_ref()
        .and_then(|u| overrides.iter().rev().find(|o| o.path.0.starts_with(&u.0)))
    {
        return Err(by_override(o));
    }
    if let Some(fe) = file_error().filter(|fe| fe.field == e.field && fe.message == e.message) {
        return Err(fe);
    }
    // A value the overrides made incomplete (`--set workload.collectives[2].size=1MiB` adds
    // an entry without `op`).
    if let Some(o) = overrides.iter().rev().find(|o| o.path.0.starts_with(&at.0)) {
        if !at.0.is_empty() {
            return Err(by_override(o));
        }
    }
    let loc = locate(text, &at);
    Err(ScenarioError {
        file: file.to_string(),
        line: loc.map(|l| l.0),
        column: loc.map(|l| l.1),
        ..e
    })
}

/// Converts serde_yaml's error (`path: message at line L column C`) into ours.
fn from_yaml_error(e: &serde_yaml::Error, text: &str, file: &str) -> ScenarioError {
    // An empty document (nothing, only comments, `---`, `~`) reads as an empty mapping or as
    // null; serde_yaml then complains about a missing field, which hides the real problem.
    let as_value = serde_yaml::from_str::<serde_yaml::Value>(text);
    if matches!(as_value, Ok(serde_yaml::Value::Null)) {
        return ScenarioError {
            file: file.to_string(),
            line: None,
            column: None,
            field: String::new(),
            message: "the scenario is empty: it needs a fabric (`hosts` and `links`, or \
                      `topology`) and a `workload`"
                .to_string(),
        };
    }
    // An alias bomb or a second document is reported as such even where the scenario's types
    // fail first: the whole file is at fault (reading it as plain YAML expands every alias and
    // reads every document).
    let limit = match &as_value {
        Err(ve)
            if ve.to_string().starts_with("repetition limit")
                || ve.to_string().contains("more than one document") =>
        {
            yaml_limits::explain(ve, text)
        }
        _ => None,
    };
    if let Some((at, message)) = limit.or_else(|| yaml_limits::explain(e, text)) {
        return ScenarioError {
            file: file.to_string(),
            line: at.map(|a| a.0),
            column: at.map(|a| a.1),
            field: String::new(),
            message,
        };
    }
    let mut msg = e.to_string();
    let mut line = e.location().map(|l| l.line());
    let mut column = e.location().map(|l| l.column());
    if let Some(loc) = e.location() {
        let suffix = format!(" at line {} column {}", loc.line(), loc.column());
        if let Some(i) = msg.find(&suffix) {
            msg.replace_range(i..i + suffix.len(), "");
        }
    }
    // serde_yaml prefixes the path of nested errors: `links[0].bandwidth: ...`.
    let mut field = String::new();
    if let Some((head, rest)) = msg.split_once(": ") {
        let is_path = !head.is_empty()
            && head
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "_.[]".contains(c));
        if is_path {
            field = head.to_string();
            msg = rest.to_string();
        }
    }
    if msg.starts_with("EOF while parsing") {
        msg = format!("{msg} (is the file empty?)");
    }
    // A list or a scalar where a section belongs: serde names the Rust type (`expected struct
    // Workload`), which means nothing to a scenario author.
    if msg.starts_with("invalid type: ") {
        if let Some(i) = msg.find("expected struct ") {
            let what = if field.is_empty() {
                "a mapping of scenario fields (`hosts:`, `workload:`, ...)"
            } else {
                "a mapping of fields"
            };
            let name = i + "expected struct ".len();
            let end = msg[name..]
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .map_or(msg.len(), |j| name + j);
            msg.replace_range(i..end, &format!("expected {what}"));
        }
    }
    // serde_yaml points a repeated key at the start of its mapping; point at the repeat.
    if let Some(key) = msg
        .strip_prefix("duplicate field `")
        .and_then(|k| k.strip_suffix('`'))
    {
        if let Some((l, c)) =
            FieldPath::parse(&field).and_then(|p| locate::locate_repeated_key(text, &p, key))
        {
            line = Some(l);
            column = Some(c);
        }
    }
    // YAML indents with spaces; a tab there gives a scanner error that does not say so.
    if let Some(l) = line {
        let indent = text
            .lines()
            .nth(l.saturating_sub(1))
            .map(|s| &s[..s.len() - s.trim_start().len()]);
        if indent.is_some_and(|i| i.contains('\t')) {
            msg.push_str(&format!(
                " (line {l} is indented with a tab; YAML indents with spaces only)"
            ));
        }
    }
    ScenarioError {
        file: file.to_string(),
        line,
        column,
        field,
        message: msg,
    }
}
