//! The fabric's part of a scenario: explicit switches and links, generated topologies,
//! explicit routes and injected faults.

use fabemu_fabric::units::{Bandwidth, Time};
use fabemu_switch::buffer::BufferConfig;
use fabemu_switch::pifo::config::TreeConfig;
use serde::{Deserialize, Serialize};

use super::one;

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
