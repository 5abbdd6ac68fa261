//! Scenario files: what a user writes to describe a fabric and a workload.
//!
//! A scenario is YAML, read with serde_norway (serde_yaml's maintained fork, named `serde_yaml`
//! in this workspace's Cargo.toml) with unknown fields rejected; every quantity
//! carries its unit (`100Gbps`, `1.5us`, `4KiB`). Errors — syntax, types, units, unknown
//! fields, and problems found later such as a link to an unknown node — name the file, the
//! line and column, and the field ([`ScenarioError`]).
//!
//! The fabric is either listed explicitly (`hosts`, `switches`, `links`) or built by a
//! `topology` builder (`star`, `ring`, `leaf_spine`, `fat_tree`, `torus`, `multi_dim`, or an
//! ASTRA-sim network file). Routes follow the fabric's kind by default (dimension order or
//! shortest paths with ECMP), or are given explicitly (`routing: explicit` plus `routes`).

mod astra_network;
mod astra_system;
mod error;
mod fabric;
mod load;
mod locate;
pub mod model;
pub mod overrides;
mod training;
mod validate;
mod workload;
mod yaml_limits;

use std::fmt;

use fabemu_fabric::host::NicConfig;
use fabemu_fabric::link::EthernetOverhead;
use fabemu_fabric::units::Time;
use fabemu_switch::buffer::BufferConfig;
use fabemu_switch::pifo::config::TreeConfig;
use serde::{Deserialize, Serialize};

pub use self::astra_network::{did_you_mean, load_astra_file, AstraFile};
pub use self::astra_system::{AstraSystem, MAX_SYSTEM_BYTES};
pub use self::error::ScenarioError;
pub use self::fabric::{
    DimKindYaml, DimYaml, FatTreeYaml, FaultSpec, LeafSpineYaml, LinkSpec, MultiDimYaml, RouteSpec,
    SwitchSpec, TopologySpec, TorusYaml, UniformSpec,
};
pub use self::load::{check_fidelity, load_file, load_file_with, load_str, load_str_with, Source};
pub use self::locate::{locate, FieldPath, Seg};
pub use self::model::{ModelYaml, RecomputeYaml, ScheduleYaml};
pub use self::overrides::Override;
pub use self::training::{DeviceYaml, ParallelDim, TrainingYaml};
pub use self::workload::{
    AlgorithmYaml, AllToAllYaml, ChakraYaml, CollectiveAlgorithms, CollectiveStreams,
    CollectiveYaml, MessageYaml, SweepYaml, Workload,
};

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
    /// switches or NICs; for cluster scale (see docs/FLOW.md).
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
    /// Unset: [`default_until`], or for a training workload [`TRAINING_UNTIL`] (see
    /// [`Scenario::until`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until: Option<Time>,
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
    /// How the system runs collectives, from another tool's description (see [`SystemSpec`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system: Option<SystemSpec>,
}

/// `system`: settings of `workload.collective_algorithms` from another tool's file.
///
/// ```yaml
/// system:
///   astra_sim: system/Ring_4chunks.json   # ASTRA-sim's system JSON, relative to this file
/// ```
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SystemSpec {
    /// An ASTRA-sim system file (JSON): collective implementations per dimension, chunking;
    /// mapped onto `workload.collective_algorithms` (see [`AstraSystem`]).
    pub astra_sim: String,
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

/// The default of counts that are 1 unless set (`#[serde(default = "one")]`).
fn one() -> usize {
    1
}

fn default_seed() -> u64 {
    1
}

/// The `until` a scenario without a training workload gets when it sets none.
pub fn default_until() -> Time {
    Time(10 * fabemu_fabric::units::PS_PER_S)
}

/// The bound of a training workload's run when the scenario sets no `until`: the run ends when
/// the workload has finished (nothing is left to happen), and this guard stops one that never
/// would (a receive nobody sends ends earlier, as a deadlock). An hour of virtual time is
/// far more than any iteration of a published model on its cluster (GPT-3 175B on 1024 GPUs:
/// 18 s), and a run that reaches it says so.
pub const TRAINING_UNTIL: Time = Time(3600 * fabemu_fabric::units::PS_PER_S);

impl Scenario {
    /// When the run stops: `until` if the scenario sets it; otherwise a training workload
    /// runs to its end (under [`TRAINING_UNTIL`]) and anything else for [`default_until`].
    pub fn until(&self) -> Time {
        match self.until {
            Some(t) => t,
            None if self.workload.training.is_some() || self.workload.chakra.is_some() => {
                TRAINING_UNTIL
            }
            None => default_until(),
        }
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
