//! PIFO trees described in configuration: [`TreeConfig`] deserializes (with serde, e.g. from a
//! scenario's YAML) into a description of a [`PifoTree`], [`TreeConfig::validate`] checks it
//! and reports the offending field by its path, and [`TreeConfig::build`] makes the tree, with a
//! [`MatchClassifier`] built from the leaves' `match` predicates.
//!
//! One YAML mapping describes one node; `children` nest. A node with children is an *inner*
//! node, one without a *leaf*. Quantities carry units (`10Gbps`, `64KiB`, `10us`).
//!
//! ```yaml
//! # The egress scheduler of one port.
//! name: port                      # every node has a name, unique in the tree
//! scheduling: strict_priority     # at an inner node: the first child first, then the second...
//! children:
//!   - name: control               # a leaf (no children) for network control traffic
//!     match: {dscp: [48, 56]}     # it takes packets with DSCP 48 or 56 (CS6, CS7)
//!     capacity: 256               # at most 256 packets; `scheduling` omitted: fifo
//!   - name: tenants
//!     scheduling: wfq             # weighted fair queueing (STFQ) among the children
//!     weights: [3, 1]             # one per child, in order: gold 3/4, bronze 1/4
//!     children:
//!       - name: gold
//!         scheduling: wfq         # inside the leaf: fair queueing among flows
//!         by: flow
//!         match: {priority: [3, 4], size_at_least: 1KiB}   # every given condition must hold
//!         capacity: 4000
//!         overflow: evict_largest # when full, push out the packet that would leave last
//!         pifo: bucket            # calendar queue; WFQ ranks grow 2^16 per byte, so use
//!         bucket: {window_log2: 16, granularity_log2: 16}  # one bucket per byte of virtual time
//!       - name: bronze            # no `match`: the default leaf (at most one in the tree)
//!         shaping: {kind: token_bucket, rate: 10Gbps, burst: 64KiB}   # never above 10 Gb/s
//!                                 # of frame bytes; `bytes: wire` counts FCS, preamble, gap
//!         capacity: 4000
//!   - name: bulk
//!     scheduling: edf             # earliest deadline first among its packets
//!     match: {qp: [257, 258]}     # RoCE queue pairs 257 and 258
//!     shaping: {kind: stop_and_go, frame: 10us}   # released at the end of each 10 us frame
//!     capacity: 1000
//! ```
//!
//! **Classification.** A packet joins the first leaf, in depth-first order (the order leaves
//! appear in the file), whose `match` holds; if none holds, the default leaf (the leaf without
//! `match`), wherever it is; if there is no default leaf either, the tree refuses the packet
//! with [`EnqueueError::NoLeaf`](super::EnqueueError::NoLeaf).
//!
//! **Classes.** `wfq`, `round_robin`, `strict_priority` and `min_rate` keep state per *class*,
//! keyed by `by`: `child` (the default at inner nodes; the child an element comes from, numbered
//! by position from 0), `priority` (802.1p, 0..=7), `dscp` (0..=63), `qp` (the queue pair number)
//! or `flow` (the flow hash). A leaf has no children, so there `by` is required and cannot be
//! `child`. Per-class lists (`weights`, `rates`) are indexed by class number: entry `k` is child
//! `k`, priority `k`, DSCP `k` or queue pair `k`.
//!
//! **Ranks.** See [`transactions`](super::transactions) for the formulas. `strict_priority` by
//! `child` serves the first child first; by `priority` the highest 802.1p priority (7) first; by
//! `dscp` the highest DSCP first; by `qp` the smallest queue pair number first; `flow` is refused
//! (a hash has no order).
//!
//! Node ids: [`TreeConfig::build`] adds nodes depth-first in file order, so the root is
//! [`NodeId`]`(0)` and ids follow the file; [`PifoTree::name`] and [`PifoTree::all_stats`] give
//! the names back.

use std::collections::HashMap;

use fabemu_fabric::link::EthernetOverhead;
use fabemu_fabric::units::{Bandwidth, ByteSize, Time};
use serde::{Deserialize, Serialize};

use super::classifier::Classifier;
use super::transactions::{
    ClassBy, Edf, Fifo, Las, Lstf, MinRate, RoundRobin, SchedulingTransaction, ShapingTransaction,
    Sjf, Srpt, StopAndGo, StrictPriority, TokenBucket, Wfq,
};
use super::{
    BucketConfig, NodeId, NodeSpec, OverflowPolicy, PacketInfo, PifoKind, PifoTree,
    PifoTreeBuilder, MAX_CHILDREN,
};

/// PFC priorities (classes by `priority`).
const PRIORITIES: usize = 8;
/// DSCP values (classes by `dscp`).
const DSCPS: usize = 64;
/// Valid `bucket.window_log2` values (as [`BucketConfig`] documents them).
/// Capped at 2^16 buckets: every port of every switch gets its own trees, so a larger window
/// multiplies into gigabytes.
const WINDOW_LOG2: std::ops::RangeInclusive<u32> = 6..=16;
/// Largest `bucket.granularity_log2`.
const MAX_GRANULARITY_LOG2: u32 = 63;

/// One node of a PIFO tree and, through `children`, its subtree: the YAML mapping described in
/// the [module docs](self).
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct TreeConfig {
    /// The node's name, unique in the tree (reports and [`PifoTree::name`] use it).
    pub name: String,
    /// The scheduling transaction that ranks elements in this node's PIFO (default `fifo`).
    #[serde(default)]
    pub scheduling: SchedulingKind,
    /// How the scheduling transaction keys its classes (`wfq`, `round_robin`,
    /// `strict_priority`, `min_rate`, `las`). Default at inner nodes: `child`; required at a
    /// leaf (except for `las`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<ClassKey>,
    /// `wfq`: relative weight per class, each a positive number (integer or decimal). By
    /// `child`: exactly one per child. By `priority`/`dscp`/`qp`: optional, classes past the
    /// list weigh 1. By `flow`: not allowed (every flow weighs 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weights: Option<Vec<f64>>,
    /// `min_rate`: guaranteed rate per class, each above 0; classes past the list (e.g. the
    /// last children) have no guarantee.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rates: Option<Vec<Bandwidth>>,
    /// `min_rate`: the token-bucket size of every class (above 0; at least one packet).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub burst: Option<ByteSize>,
    /// `stop_and_go` scheduling: the frame length (above 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub frame: Option<Time>,
    /// A shaping transaction holding elements back from the parent (not at the root).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shaping: Option<ShapingConfig>,
    /// Leaves only: the packets this leaf takes. A leaf without it is the default leaf.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub r#match: Option<MatchConfig>,
    /// Leaves only: the most packets the leaf holds (at least 1; default unbounded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity: Option<usize>,
    /// Leaves with a `capacity` only: what a full leaf does (default `drop_arriving`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overflow: Option<OverflowKind>,
    /// The PIFO implementation (default `heap`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pifo: Option<PifoImpl>,
    /// With `pifo: bucket` only: the calendar queue's window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bucket: Option<BucketWindow>,
    /// The children, in order (position = class number by `child`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub children: Vec<TreeConfig>,
}

/// The scheduling transactions of [`transactions`](super::transactions), by YAML name.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SchedulingKind {
    /// `fifo`: [`Fifo`], arrival order.
    #[default]
    Fifo,
    /// `strict_priority`: [`StrictPriority`] on the classes `by` selects (see the
    /// [module docs](self) for which class goes first).
    StrictPriority,
    /// `wfq`: [`Wfq`] (start-time fair queueing) with `weights`.
    Wfq,
    /// `round_robin`: [`RoundRobin`], one packet per class per round.
    RoundRobin,
    /// `lstf`: [`Lstf`], least slack first.
    Lstf,
    /// `srpt`: [`Srpt`], fewest remaining message bytes first.
    Srpt,
    /// `sjf`: [`Sjf`], smallest message first.
    Sjf,
    /// `las`: [`Las`], least attained service first: the packet's attained bytes, or with
    /// `by: flow` the bytes counted per flow at this node.
    Las,
    /// `edf`: [`Edf`], earliest deadline first.
    Edf,
    /// `stop_and_go`: [`StopAndGo`] as a scheduling transaction, with `frame`.
    StopAndGo,
    /// `min_rate`: [`MinRate`], elements within their class's guaranteed `rates` first.
    MinRate,
}

impl SchedulingKind {
    fn name(self) -> &'static str {
        match self {
            SchedulingKind::Fifo => "fifo",
            SchedulingKind::StrictPriority => "strict_priority",
            SchedulingKind::Wfq => "wfq",
            SchedulingKind::RoundRobin => "round_robin",
            SchedulingKind::Lstf => "lstf",
            SchedulingKind::Srpt => "srpt",
            SchedulingKind::Sjf => "sjf",
            SchedulingKind::Las => "las",
            SchedulingKind::Edf => "edf",
            SchedulingKind::StopAndGo => "stop_and_go",
            SchedulingKind::MinRate => "min_rate",
        }
    }

    /// The node-level parameters this kind takes.
    fn params(self) -> &'static [&'static str] {
        match self {
            SchedulingKind::Fifo
            | SchedulingKind::Lstf
            | SchedulingKind::Srpt
            | SchedulingKind::Sjf
            | SchedulingKind::Edf => &[],
            SchedulingKind::StrictPriority | SchedulingKind::RoundRobin | SchedulingKind::Las => {
                &["by"]
            }
            SchedulingKind::Wfq => &["by", "weights"],
            SchedulingKind::StopAndGo => &["frame"],
            SchedulingKind::MinRate => &["by", "rates", "burst"],
        }
    }
}

/// What a per-class transaction keys its classes on (see [`ClassBy`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ClassKey {
    /// `child`: the child an element comes from (inner nodes only).
    Child,
    /// `priority`: [`PacketInfo::priority`].
    Priority,
    /// `dscp`: [`PacketInfo::dscp`].
    Dscp,
    /// `flow`: [`PacketInfo::flow`].
    Flow,
    /// `qp`: [`PacketInfo::qp`].
    Qp,
}

impl ClassKey {
    fn name(self) -> &'static str {
        match self {
            ClassKey::Child => "child",
            ClassKey::Priority => "priority",
            ClassKey::Dscp => "dscp",
            ClassKey::Flow => "flow",
            ClassKey::Qp => "qp",
        }
    }
}

impl From<ClassKey> for ClassBy {
    fn from(k: ClassKey) -> ClassBy {
        match k {
            ClassKey::Child => ClassBy::Child,
            ClassKey::Priority => ClassBy::Priority,
            ClassKey::Dscp => ClassBy::Dscp,
            ClassKey::Flow => ClassBy::Flow,
            ClassKey::Qp => ClassBy::Qp,
        }
    }
}

/// A shaping transaction: `{kind: token_bucket, rate, burst}` or `{kind: stop_and_go, frame}`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ShapingConfig {
    /// Which shaper.
    pub kind: ShapingKind,
    /// `token_bucket`: the rate (above 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate: Option<Bandwidth>,
    /// `token_bucket`: the bucket size (`0B` paces every packet at the rate).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub burst: Option<ByteSize>,
    /// `stop_and_go`: the frame length (above 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub frame: Option<Time>,
    /// `token_bucket`: what a packet costs in tokens ([`ShapedBytes`]; default `frame`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes: Option<ShapedBytes>,
}

/// What the token bucket counts per packet.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ShapedBytes {
    /// `frame`: the frame as the queue holds it, without FCS, preamble/SFD or inter-frame
    /// gap (the rate is then of frame bytes: the link carries more).
    #[default]
    Frame,
    /// `wire`: what the frame occupies on the wire, with the scenario's Ethernet overhead
    /// (FCS, preamble/SFD and gap; padded to the minimum frame), so the rate is a share of
    /// the line rate.
    Wire,
}

/// The shaping transactions, by YAML name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ShapingKind {
    /// `token_bucket`: [`TokenBucket`] with `rate` and `burst`.
    TokenBucket,
    /// `stop_and_go`: [`StopAndGo`] with `frame`.
    StopAndGo,
}

/// A leaf's predicate: every condition given must hold (an absent one always holds).
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct MatchConfig {
    /// The packet's 802.1p priority is one of these (0..=7).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<Vec<u8>>,
    /// The packet's DSCP is one of these (0..=63).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dscp: Option<Vec<u8>>,
    /// The packet's destination queue pair is one of these.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub qp: Option<Vec<u32>>,
    /// The packet's RDMA message is at most this long ([`PacketInfo::message_size`]; the frame
    /// length for packets outside messages, such as ACKs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size_at_most: Option<ByteSize>,
    /// The packet's RDMA message is at least this long (as `size_at_most`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size_at_least: Option<ByteSize>,
}

/// What a full leaf does (see [`OverflowPolicy`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OverflowKind {
    /// `drop_arriving`: [`OverflowPolicy::DropArriving`].
    #[default]
    DropArriving,
    /// `evict_largest`: [`OverflowPolicy::EvictLargest`].
    EvictLargest,
}

impl From<OverflowKind> for OverflowPolicy {
    fn from(k: OverflowKind) -> OverflowPolicy {
        match k {
            OverflowKind::DropArriving => OverflowPolicy::DropArriving,
            OverflowKind::EvictLargest => OverflowPolicy::EvictLargest,
        }
    }
}

/// The PIFO implementation of a node (see [`PifoKind`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PifoImpl {
    /// `heap`: [`HeapPifo`](super::HeapPifo), any rank in O(log n).
    #[default]
    Heap,
    /// `bucket`: [`BucketPifo`](super::BucketPifo), O(1) for ranks within its window.
    Bucket,
}

/// The window of a `pifo: bucket` node (see [`BucketConfig`]); absent fields take
/// [`BucketConfig::default`]'s values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct BucketWindow {
    /// log2 of the number of buckets, 6..=16 (default 12).
    #[serde(default = "default_window_log2")]
    pub window_log2: u32,
    /// log2 of the ranks per bucket, 0..=63 (default 0: exact).
    #[serde(default = "default_granularity_log2")]
    pub granularity_log2: u32,
}

fn default_window_log2() -> u32 {
    BucketConfig::default().window_log2
}

fn default_granularity_log2() -> u32 {
    BucketConfig::default().granularity_log2
}

/// A tree description that cannot be built: the field at fault and why.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("`{path}`: {message}")]
pub struct ConfigError {
    /// Where, relative to the tree's root node, in YAML field names: `weights`,
    /// `children[1].children[0].frame`, `children[0].match.dscp[2]`; empty for the root node
    /// itself. Segments are `.name` and `[index]` (see [`ConfigError::segments`]).
    pub path: String,
    /// What is wrong.
    pub message: String,
}

/// One step of a [`ConfigError::path`].
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum PathSegment {
    /// A mapping key.
    Key(String),
    /// A sequence index.
    Index(usize),
}

impl ConfigError {
    fn new(path: String, message: impl Into<String>) -> Self {
        ConfigError {
            path,
            message: message.into(),
        }
    }

    /// The error with its path placed under `prefix` (a path in the same notation, e.g.
    /// `switches.leaf.scheduler`), for a loader that embeds the tree in a larger document.
    pub fn prefixed(mut self, prefix: &str) -> Self {
        self.path = if prefix.is_empty() {
            self.path
        } else if self.path.is_empty() {
            prefix.to_string()
        } else if self.path.starts_with('[') {
            format!("{prefix}{}", self.path)
        } else {
            format!("{prefix}.{}", self.path)
        };
        self
    }

    /// [`ConfigError::path`] split into keys and indices (empty for the root node).
    pub fn segments(&self) -> Vec<PathSegment> {
        let mut out = Vec::new();
        for part in self.path.split('.').filter(|p| !p.is_empty()) {
            let (key, mut rest) = part.split_at(part.find('[').unwrap_or(part.len()));
            if !key.is_empty() {
                out.push(PathSegment::Key(key.to_string()));
            }
            while let Some(end) = rest.find(']') {
                if let Some(Ok(i)) = rest.get(1..end).map(str::parse::<usize>) {
                    out.push(PathSegment::Index(i));
                }
                rest = rest.get(end + 1..).unwrap_or("");
            }
        }
        out
    }
}

/// `base.field` (or `field` at the root).
fn join(base: &str, field: &str) -> String {
    if base.is_empty() {
        field.to_string()
    } else {
        format!("{base}.{field}")
    }
}

/// How a node is called in messages.
fn describe(path: &str) -> String {
    if path.is_empty() {
        "the root".to_string()
    } else {
        format!("`{path}`")
    }
}

/// A [`Classifier`] made of the leaves' `match` predicates: the first leaf (depth-first, in
/// file order) whose predicate holds, else the default leaf, else none (the tree then refuses
/// the packet with [`EnqueueError::NoLeaf`](super::EnqueueError::NoLeaf)).
///
/// Made by [`TreeConfig::classifier`]; its [`NodeId`]s are those [`TreeConfig::build`] gives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MatchClassifier {
    rules: Vec<(Rule, NodeId)>,
    default: Option<NodeId>,
}

/// A compiled [`MatchConfig`]: bit sets for priority and DSCP, a sorted list of queue pairs.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Rule {
    priority: Option<u8>,
    dscp: Option<u64>,
    qp: Option<Vec<u32>>,
    size_at_least: u64,
    size_at_most: u64,
}

impl Rule {
    /// Compiles a validated predicate (values out of range are ignored).
    fn new(m: &MatchConfig) -> Rule {
        let bits = |vals: &[u8], n: usize| {
            vals.iter()
                .filter(|&&v| usize::from(v) < n)
                .fold(0u64, |acc, &v| acc | 1 << v)
        };
        Rule {
            priority: m.priority.as_deref().map(|v| bits(v, PRIORITIES) as u8),
            dscp: m.dscp.as_deref().map(|v| bits(v, DSCPS)),
            qp: m.qp.as_ref().map(|v| {
                let mut v = v.clone();
                v.sort_unstable();
                v.dedup();
                v
            }),
            size_at_least: m.size_at_least.map_or(0, ByteSize::bytes),
            size_at_most: m.size_at_most.map_or(u64::MAX, ByteSize::bytes),
        }
    }

    #[inline]
    fn holds(&self, info: &PacketInfo) -> bool {
        // The message's size, so that every packet of a message (its short tail too) goes to
        // the same leaf and a flow is never split across leaves; the frame's length for
        // packets outside messages (ACKs).
        let len = if info.message_size > 0 {
            info.message_size
        } else {
            u64::from(info.len)
        };
        len >= self.size_at_least
            && len <= self.size_at_most
            && self
                .priority
                .is_none_or(|m| info.priority < 8 && m & (1 << info.priority) != 0)
            && self
                .dscp
                .is_none_or(|m| info.dscp < 64 && m & (1 << info.dscp) != 0)
            && self
                .qp
                .as_ref()
                .is_none_or(|v| v.binary_search(&info.qp).is_ok())
    }
}

impl MatchClassifier {
    /// The leaf for `info` (see [`MatchClassifier`]), without needing `&mut`.
    pub fn leaf_for(&self, info: &PacketInfo) -> Option<NodeId> {
        self.rules
            .iter()
            .find(|(r, _)| r.holds(info))
            .map(|&(_, id)| id)
            .or(self.default)
    }

    /// The default leaf, if the tree has one.
    pub fn default_leaf(&self) -> Option<NodeId> {
        self.default
    }
}

impl Classifier for MatchClassifier {
    fn classify(&mut self, info: &PacketInfo) -> Option<NodeId> {
        self.leaf_for(info)
    }
}

/// The result of walking a valid tree: node specs in depth-first order (with their parent's
/// index) and the classifier.
struct Compiled {
    nodes: Vec<(usize, NodeSpec)>,
    classifier: MatchClassifier,
}

/// State of the walk over the tree.
#[derive(Default)]
struct Walk<'a> {
    /// What a frame costs on the wire beyond its length (shapers counting wire bytes).
    overhead: EthernetOverhead,
    /// Name → path of the node that has it.
    names: HashMap<&'a str, String>,
    /// Path of the default leaf, once found.
    default_path: Option<String>,
    nodes: Vec<(usize, NodeSpec)>,
    rules: Vec<(Rule, NodeId)>,
    default: Option<NodeId>,
}

impl<'a> Walk<'a> {
    fn node(
        &mut self,
        cfg: &'a TreeConfig,
        path: &str,
        parent: Option<usize>,
    ) -> Result<(), ConfigError> {
        let at = |field: &str, msg: String| Err(ConfigError::new(join(path, field), msg));
        let leaf = cfg.children.is_empty();
        if cfg.name.is_empty() {
            return at("name", "a node needs a non-empty name".into());
        }
        if let Some(first) = self.names.get(cfg.name.as_str()) {
            return at(
                "name",
                format!(
                    "`{}` is already the name of {}; names must be unique in the tree",
                    cfg.name,
                    describe(first)
                ),
            );
        }
        self.names.insert(&cfg.name, path.to_string());
        if cfg.children.len() > MAX_CHILDREN {
            return at(
                "children",
                format!(
                    "{} children; a node has at most {MAX_CHILDREN}",
                    cfg.children.len()
                ),
            );
        }
        if parent.is_none() && cfg.shaping.is_some() {
            return at(
                "shaping",
                "the root cannot be shaped (it has no parent to release elements to); \
                 shape a child, or put the rate limit on the port"
                    .into(),
            );
        }
        if !leaf {
            for (field, given) in [
                ("match", cfg.r#match.is_some()),
                ("capacity", cfg.capacity.is_some()),
                ("overflow", cfg.overflow.is_some()),
            ] {
                if given {
                    return at(
                        field,
                        format!("only leaves take `{field}`; this node has children"),
                    );
                }
            }
        }
        let scheduling = cfg.scheduling(path, leaf)?;
        let mut spec = NodeSpec::boxed(cfg.name.clone(), scheduling);
        if let Some(sh) = &cfg.shaping {
            spec = spec.shaping_boxed(sh.build(&join(path, "shaping"), self.overhead)?);
        }
        spec = spec.pifo(cfg.pifo_kind(path)?);
        if let Some(cap) = cfg.capacity {
            if cap == 0 {
                return at(
                    "capacity",
                    "a leaf must hold at least 1 packet (omit `capacity` for no bound)".into(),
                );
            }
            spec = spec.capacity(cap, cfg.overflow.unwrap_or_default().into());
        } else if cfg.overflow.is_some() {
            return at(
                "overflow",
                "`overflow` needs a `capacity` (an unbounded leaf never overflows)".into(),
            );
        }
        let id = self.nodes.len();
        self.nodes.push((parent.unwrap_or(usize::MAX), spec));
        if leaf {
            let node = NodeId(id as u32);
            match &cfg.r#match {
                Some(m) => {
                    m.check(&join(path, "match"))?;
                    self.rules.push((Rule::new(m), node));
                }
                None => {
                    if let Some(first) = &self.default_path {
                        return Err(ConfigError::new(
                            path.to_string(),
                            format!(
                                "a second leaf without `match`: {} is already the default leaf \
                                 (at most one); give one of them a `match`",
                                describe(first)
                            ),
                        ));
                    }
                    self.default_path = Some(path.to_string());
                    self.default = Some(node);
                }
            }
        }
        for (i, child) in cfg.children.iter().enumerate() {
            self.node(child, &join(path, &format!("children[{i}]")), Some(id))?;
        }
        Ok(())
    }
}

/// Checks a per-class list's length against the classes `by` defines.
fn check_class_list(
    path: &str,
    field: &str,
    len: usize,
    by: ClassKey,
    children: usize,
    exact_per_child: bool,
) -> Result<(), ConfigError> {
    let err = |msg: String| Err(ConfigError::new(join(path, field), msg));
    match by {
        ClassKey::Child if exact_per_child && len != children => err(format!(
            "{len} entries for {children} children; give exactly one per child, in order"
        )),
        ClassKey::Child if len > children => err(format!(
            "{len} entries for {children} children; give at most one per child, in order"
        )),
        ClassKey::Priority if len > PRIORITIES => err(format!(
            "{len} entries; by priority there are {PRIORITIES} classes (0..=7)"
        )),
        ClassKey::Dscp if len > DSCPS => err(format!(
            "{len} entries; by dscp there are {DSCPS} classes (0..=63)"
        )),
        _ if len == 0 => err("empty list".into()),
        _ => Ok(()),
    }
}

impl TreeConfig {
    /// Checks the whole tree: every node has exactly the parameters its `scheduling` (and
    /// `shaping`) needs, with valid values; `match`, `capacity` and `overflow` only on leaves;
    /// no `shaping` at the root; unique, non-empty names; at most one default leaf; at most
    /// [`MAX_CHILDREN`] children per node. The first problem found (depth-first) is returned.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.compile(EthernetOverhead::default()).map(drop)
    }

    /// Validates the tree and builds it, classified by its [`MatchClassifier`]. Nodes are
    /// numbered depth-first in file order (the root is [`NodeId`]`(0)`). Shapers that count
    /// wire bytes (`bytes: wire`) use standard Ethernet's overhead; see
    /// [`TreeConfig::build_for`].
    pub fn build<T>(&self) -> Result<PifoTree<T>, ConfigError> {
        self.build_for(EthernetOverhead::default())
    }

    /// [`TreeConfig::build`] for links whose frames cost `overhead` on the wire (the
    /// scenario's `ethernet`).
    pub fn build_for<T>(&self, overhead: EthernetOverhead) -> Result<PifoTree<T>, ConfigError> {
        let Compiled { nodes, classifier } = self.compile(overhead)?;
        let tree_err = |e: super::TreeError| ConfigError::new(String::new(), e.to_string());
        let mut nodes = nodes.into_iter();
        let Some((_, root)) = nodes.next() else {
            return Err(ConfigError::new(String::new(), "empty tree"));
        };
        let mut builder = PifoTreeBuilder::new(root);
        for (parent, spec) in nodes {
            builder.add(NodeId(parent as u32), spec).map_err(tree_err)?;
        }
        builder.build_boxed(Box::new(classifier)).map_err(tree_err)
    }

    /// Validates the tree and returns its classifier alone (the one [`TreeConfig::build`]
    /// installs).
    pub fn classifier(&self) -> Result<MatchClassifier, ConfigError> {
        self.compile(EthernetOverhead::default())
            .map(|c| c.classifier)
    }

    fn compile(&self, overhead: EthernetOverhead) -> Result<Compiled, ConfigError> {
        let mut walk = Walk {
            overhead,
            ..Walk::default()
        };
        walk.node(self, "", None)?;
        Ok(Compiled {
            nodes: walk.nodes,
            classifier: MatchClassifier {
                rules: walk.rules,
                default: walk.default,
            },
        })
    }

    /// The class key in effect, checked against the node's place in the tree.
    fn class_key(&self, path: &str, leaf: bool) -> Result<ClassKey, ConfigError> {
        let kind = self.scheduling.name();
        match (self.by, leaf) {
            (Some(ClassKey::Child), true) => Err(ConfigError::new(
                join(path, "by"),
                "a leaf has no children to key classes on; use priority, dscp, flow or qp",
            )),
            (Some(by), _) => Ok(by),
            (None, false) => Ok(ClassKey::Child),
            (None, true) => Err(ConfigError::new(
                join(path, "by"),
                format!("`{kind}` at a leaf needs `by`: priority, dscp, flow or qp"),
            )),
        }
    }

    /// Checks the scheduling parameters and makes the transaction.
    fn scheduling(
        &self,
        path: &str,
        leaf: bool,
    ) -> Result<Box<dyn SchedulingTransaction>, ConfigError> {
        let kind = self.scheduling;
        let allowed = kind.params();
        for (field, given) in [
            ("by", self.by.is_some()),
            ("weights", self.weights.is_some()),
            ("rates", self.rates.is_some()),
            ("burst", self.burst.is_some()),
            ("frame", self.frame.is_some()),
        ] {
            if given && !allowed.contains(&field) {
                let takes = if allowed.is_empty() {
                    "no parameters".to_string()
                } else {
                    allowed
                        .iter()
                        .map(|p| format!("`{p}`"))
                        .collect::<Vec<_>>()
                        .join(", ")
                };
                return Err(ConfigError::new(
                    join(path, field),
                    format!("`{}` takes no `{field}` (it takes {takes})", kind.name()),
                ));
            }
        }
        let children = self.children.len();
        let missing = |field: &str, what: &str| {
            Err(ConfigError::new(
                join(path, field),
                format!("`{}` needs `{field}`: {what}", kind.name()),
            ))
        };
        Ok(match kind {
            SchedulingKind::Fifo => Box::new(Fifo),
            SchedulingKind::Lstf => Box::new(Lstf),
            SchedulingKind::Srpt => Box::new(Srpt),
            SchedulingKind::Sjf => Box::new(Sjf),
            SchedulingKind::Edf => Box::new(Edf),
            SchedulingKind::StrictPriority => match self.class_key(path, leaf)? {
                ClassKey::Child => Box::new(StrictPriority::new(ClassBy::Child)),
                ClassKey::Priority => Box::new(StrictPriority::pcp()),
                ClassKey::Dscp => Box::new(StrictPriority::with_levels(
                    ClassBy::Dscp,
                    (0..DSCPS as u64).rev().collect(),
                )),
                ClassKey::Qp => Box::new(StrictPriority::new(ClassBy::Qp)),
                ClassKey::Flow => {
                    return Err(ConfigError::new(
                        join(path, "by"),
                        "strict priority by flow has no meaning (a flow hash has no order); \
                         use child, priority, dscp or qp",
                    ))
                }
            },
            SchedulingKind::RoundRobin => {
                Box::new(RoundRobin::new(self.class_key(path, leaf)?.into()))
            }
            SchedulingKind::Las => match self.by {
                None => Box::new(Las::from_packet()),
                Some(ClassKey::Flow) => Box::new(Las::per_flow()),
                Some(other) => {
                    return Err(ConfigError::new(
                        join(path, "by"),
                        format!(
                            "`las` counts bytes per flow: `by` may only be `flow` (count at this \
                             node), or be omitted (read the packet's attained bytes), not `{}`",
                            other.name()
                        ),
                    ))
                }
            },
            SchedulingKind::Wfq => {
                let by = self.class_key(path, leaf)?;
                match (&self.weights, by) {
                    (None, ClassKey::Child) => {
                        return missing("weights", &format!("one per child ({children})"))
                    }
                    (None, _) => Box::new(Wfq::fair(by.into())),
                    (Some(_), ClassKey::Flow) => {
                        return Err(ConfigError::new(
                            join(path, "weights"),
                            "wfq by flow weighs every flow equally; remove `weights`",
                        ))
                    }
                    (Some(w), _) => {
                        check_class_list(path, "weights", w.len(), by, children, true)?;
                        if let Some((k, &bad)) = w
                            .iter()
                            .enumerate()
                            .find(|(_, &x)| !(x.is_finite() && x > 0.0))
                        {
                            return Err(ConfigError::new(
                                join(path, &format!("weights[{k}]")),
                                format!("weight {bad} must be a positive finite number"),
                            ));
                        }
                        let wfq = Wfq::new(by.into(), w)
                            .map_err(|e| ConfigError::new(join(path, "weights"), e.to_string()))?;
                        Box::new(wfq)
                    }
                }
            }
            SchedulingKind::MinRate => {
                if leaf {
                    return Err(ConfigError::new(
                        join(path, "scheduling"),
                        "min_rate at a leaf would flip one flow's ranks between packets and \
                         reorder it; use it at an inner node over its children",
                    ));
                }
                let by = self.class_key(path, leaf)?;
                if by == ClassKey::Flow {
                    return Err(ConfigError::new(
                        join(path, "by"),
                        "min_rate by flow cannot list rates (a flow hash is not a class \
                         number); use child, priority, dscp or qp",
                    ));
                }
                let Some(rates) = &self.rates else {
                    return missing("rates", "the guaranteed rate of each class, in order");
                };
                check_class_list(path, "rates", rates.len(), by, children, false)?;
                if let Some(k) = rates.iter().position(|r| r.bps() == 0) {
                    return Err(ConfigError::new(
                        join(path, &format!("rates[{k}]")),
                        "a guaranteed rate must be above 0 (leave classes without a \
                         guarantee off the end of the list)",
                    ));
                }
                let Some(burst) = self.burst else {
                    return missing("burst", "the token-bucket size of each class, e.g. 64KiB");
                };
                if burst.bytes() == 0 {
                    return Err(ConfigError::new(
                        join(path, "burst"),
                        "must be above 0 (at least one packet, or nothing is ever within its \
                         guarantee)",
                    ));
                }
                Box::new(MinRate::new(by.into(), rates, burst.bytes()))
            }
            SchedulingKind::StopAndGo => {
                let Some(frame) = self.frame else {
                    return missing("frame", "the frame length, e.g. 10us");
                };
                let sg = StopAndGo::new(frame)
                    .map_err(|e| ConfigError::new(join(path, "frame"), e.to_string()))?;
                Box::new(sg)
            }
        })
    }

    /// Checks `pifo` and `bucket` and gives the PIFO kind.
    fn pifo_kind(&self, path: &str) -> Result<PifoKind, ConfigError> {
        match (self.pifo.unwrap_or_default(), self.bucket) {
            (PifoImpl::Heap, None) => Ok(PifoKind::Heap),
            (PifoImpl::Heap, Some(_)) => Err(ConfigError::new(
                join(path, "bucket"),
                "`bucket` shapes a `pifo: bucket` node's window; this node uses a heap",
            )),
            (PifoImpl::Bucket, w) => {
                let cfg = BucketConfig::default();
                let w = w.unwrap_or(BucketWindow {
                    window_log2: cfg.window_log2,
                    granularity_log2: cfg.granularity_log2,
                });
                if !WINDOW_LOG2.contains(&w.window_log2) {
                    return Err(ConfigError::new(
                        join(path, "bucket.window_log2"),
                        format!(
                            "{} is outside {}..={}",
                            w.window_log2,
                            WINDOW_LOG2.start(),
                            WINDOW_LOG2.end()
                        ),
                    ));
                }
                if w.granularity_log2 > MAX_GRANULARITY_LOG2 {
                    return Err(ConfigError::new(
                        join(path, "bucket.granularity_log2"),
                        format!(
                            "{} is outside 0..={MAX_GRANULARITY_LOG2}",
                            w.granularity_log2
                        ),
                    ));
                }
                Ok(PifoKind::Bucket(BucketConfig {
                    window_log2: w.window_log2,
                    granularity_log2: w.granularity_log2,
                }))
            }
        }
    }
}

impl ShapingConfig {
    /// Checks the parameters (`path` is the `shaping` field's) and makes the transaction.
    fn build(
        &self,
        path: &str,
        overhead: EthernetOverhead,
    ) -> Result<Box<dyn ShapingTransaction>, ConfigError> {
        let (name, allowed): (&str, &[&str]) = match self.kind {
            ShapingKind::TokenBucket => ("token_bucket", &["rate", "burst", "bytes"]),
            ShapingKind::StopAndGo => ("stop_and_go", &["frame"]),
        };
        for (field, given) in [
            ("rate", self.rate.is_some()),
            ("burst", self.burst.is_some()),
            ("frame", self.frame.is_some()),
            ("bytes", self.bytes.is_some()),
        ] {
            if given && !allowed.contains(&field) {
                return Err(ConfigError::new(
                    join(path, field),
                    format!(
                        "`{name}` shaping takes no `{field}` (it takes {})",
                        allowed
                            .iter()
                            .map(|p| format!("`{p}`"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                ));
            }
        }
        let missing = |field: &str, what: &str| {
            Err(ConfigError::new(
                join(path, field),
                format!("`{name}` shaping needs `{field}`: {what}"),
            ))
        };
        Ok(match self.kind {
            ShapingKind::TokenBucket => {
                let Some(rate) = self.rate else {
                    return missing("rate", "the rate limit, e.g. 10Gbps");
                };
                let Some(burst) = self.burst else {
                    return missing("burst", "the bucket size, e.g. 64KiB (0B paces strictly)");
                };
                let tb = TokenBucket::new(rate, burst.bytes())
                    .map_err(|e| ConfigError::new(join(path, "rate"), e.to_string()))?;
                match self.bytes.unwrap_or_default() {
                    ShapedBytes::Frame => Box::new(tb),
                    ShapedBytes::Wire => Box::new(tb.counting_wire_bytes(overhead)),
                }
            }
            ShapingKind::StopAndGo => {
                let Some(frame) = self.frame else {
                    return missing("frame", "the frame length, e.g. 10us");
                };
                let sg = StopAndGo::new(frame)
                    .map_err(|e| ConfigError::new(join(path, "frame"), e.to_string()))?;
                Box::new(sg)
            }
        })
    }
}

impl MatchConfig {
    /// Checks the predicate (`path` is the `match` field's): at least one condition, no empty
    /// lists, values in range, a size range that is not empty.
    fn check(&self, path: &str) -> Result<(), ConfigError> {
        let at = |field: &str, msg: String| Err(ConfigError::new(join(path, field), msg));
        if self == &MatchConfig::default() {
            return Err(ConfigError::new(
                path.to_string(),
                "no conditions (it would take every packet); omit `match` to make this the \
                 default leaf",
            ));
        }
        for (field, vals, n) in [
            ("priority", &self.priority, PRIORITIES),
            ("dscp", &self.dscp, DSCPS),
        ] {
            if let Some(vals) = vals {
                if vals.is_empty() {
                    return at(field, "empty list (it would never match)".into());
                }
                if let Some(k) = vals.iter().position(|&v| usize::from(v) >= n) {
                    return at(
                        &format!("{field}[{k}]"),
                        format!("{field} {} is outside 0..={}", vals[k], n - 1),
                    );
                }
            }
        }
        if self.qp.as_ref().is_some_and(Vec::is_empty) {
            return at("qp", "empty list (it would never match)".into());
        }
        if let (Some(lo), Some(hi)) = (self.size_at_least, self.size_at_most) {
            if lo > hi {
                return at(
                    "size_at_least",
                    format!("{lo} is above size_at_most {hi} (it would never match)"),
                );
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::EnqueueError;
    use super::*;

    fn parse(yaml: &str) -> TreeConfig {
        match serde_yaml::from_str(yaml) {
            Ok(c) => c,
            Err(e) => panic!("bad test YAML: {e}\n{yaml}"),
        }
    }

    fn tree(yaml: &str) -> PifoTree<u64> {
        match parse(yaml).build() {
            Ok(t) => t,
            Err(e) => panic!("{e}\n{yaml}"),
        }
    }

    fn id(t: &PifoTree<u64>, name: &str) -> NodeId {
        t.all_stats()
            .find(|(_, n, _)| *n == name)
            .map(|(id, _, _)| id)
            .unwrap_or_else(|| panic!("no node {name}"))
    }

    fn pkt(len: u32) -> PacketInfo {
        PacketInfo {
            len,
            ..PacketInfo::default()
        }
    }

    /// The validation error of `yaml`.
    fn error(yaml: &str) -> ConfigError {
        let cfg = parse(yaml);
        let e = cfg.validate().expect_err("should not validate");
        // build() reports the same error.
        assert_eq!(cfg.build::<u64>().err(), Some(e.clone()));
        e
    }

    #[test]
    fn the_module_doc_example_builds() {
        let src = include_str!("config.rs");
        let yaml: String = src
            .lines()
            .skip_while(|l| *l != "//! ```yaml")
            .skip(1)
            .take_while(|l| *l != "//! ```")
            .map(|l| format!("{}\n", l.strip_prefix("//! ").unwrap_or("")))
            .collect();
        assert!(yaml.contains("name: port"));
        let cfg = parse(&yaml);
        let mut t = tree(&yaml);
        let names: Vec<&str> = t.all_stats().map(|(_, n, _)| n).collect();
        assert_eq!(
            names,
            ["port", "control", "tenants", "gold", "bronze", "bulk"]
        );
        let c = cfg.classifier().unwrap();
        assert_eq!(c.default_leaf(), Some(id(&t, "bronze")));
        let cases = [
            (
                PacketInfo {
                    dscp: 48,
                    ..pkt(64)
                },
                "control",
            ),
            (
                PacketInfo {
                    priority: 3,
                    ..pkt(4096)
                },
                "gold",
            ),
            (
                PacketInfo {
                    priority: 3,
                    ..pkt(512)
                },
                "bronze",
            ),
            (
                PacketInfo {
                    qp: 258,
                    ..pkt(512)
                },
                "bulk",
            ),
            (pkt(100), "bronze"),
        ];
        for (info, leaf) in cases {
            assert_eq!(c.leaf_for(&info), Some(id(&t, leaf)), "{info:?}");
            t.enqueue(Time::ZERO, info, 0).unwrap();
        }
        // Serialization round-trips.
        let again: TreeConfig = parse(&serde_yaml::to_string(&cfg).unwrap());
        assert_eq!(again, cfg);
    }

    /// Dequeues `n` packets from an always-backlogged tree whose items are their class
    /// (0..infos.len()); each dequeued packet is replaced by one of its class.
    fn saturate(t: &mut PifoTree<u64>, infos: &[PacketInfo], n: usize) -> Vec<u64> {
        let mut now = Time::ZERO;
        for (c, &info) in infos.iter().enumerate() {
            for _ in 0..50 {
                t.enqueue(now, info, c as u64).unwrap();
            }
        }
        let mut served = vec![0u64; infos.len()];
        for _ in 0..n {
            let c = t.dequeue(now, 0).unwrap();
            served[c as usize] += 1;
            now = now.add(Time::from_ns(80)); // 1000 B at 100 Gb/s
            t.enqueue(now, infos[c as usize], c).unwrap();
        }
        served
    }

    #[test]
    fn wfq_three_to_one_shares() {
        for pifo in [
            "heap",
            "bucket\nbucket: {window_log2: 16, granularity_log2: 16}",
        ] {
            let yaml = format!(
                "
name: root
scheduling: wfq
weights: [3, 1]
pifo: {pifo}
children:
  - name: gold
    match: {{priority: [1]}}
  - name: bronze
"
            );
            let mut t = tree(&yaml);
            let infos = [
                PacketInfo {
                    priority: 1,
                    ..pkt(1000)
                },
                pkt(1000),
            ];
            let served = saturate(&mut t, &infos, 40_000);
            let share = served[0] as f64 / served.iter().sum::<u64>() as f64;
            assert!(
                (share - 0.75).abs() <= 0.02 * 0.75,
                "gold share {share} ({served:?})"
            );
            assert_eq!(t.stats(id(&t, "gold")).unwrap().dequeued_packets, served[0]);
        }
        // Decimal weights work the same.
        let mut t = tree(
            "
name: root
scheduling: wfq
weights: [0.75, 0.25]
children: [{name: a, match: {dscp: [10]}}, {name: b}]
",
        );
        let infos = [
            PacketInfo {
                dscp: 10,
                ..pkt(1000)
            },
            pkt(1000),
        ];
        let served = saturate(&mut t, &infos, 40_000);
        let share = served[0] as f64 / served.iter().sum::<u64>() as f64;
        assert!((share - 0.75).abs() <= 0.015, "share {share}");
    }

    #[test]
    fn strict_priority_by_child_serves_the_first_child_first() {
        let mut t = tree(
            "
name: root
scheduling: strict_priority
children:
  - name: high
    match: {dscp: [46]}
  - name: low
",
        );
        let infos = [
            PacketInfo {
                dscp: 46,
                ..pkt(1000)
            },
            pkt(1000),
        ];
        let served = saturate(&mut t, &infos, 5_000);
        assert_eq!(served, [5_000, 0]);
        let high = t.node_len(id(&t, "high"));
        let rest: Vec<u64> = std::iter::from_fn(|| t.dequeue(Time::ZERO, 0)).collect();
        assert!(rest[..high].iter().all(|&c| c == 0));
        assert!(rest[high..].iter().all(|&c| c == 1));
        assert_eq!(rest.len(), high + 50);
    }

    #[test]
    fn strict_priority_at_a_leaf_serves_high_priority_and_dscp_first() {
        let mut t = tree("{name: q, scheduling: strict_priority, by: priority}");
        for (i, p) in [1u8, 5, 3, 7, 0].into_iter().enumerate() {
            let info = PacketInfo {
                priority: p,
                ..pkt(100)
            };
            t.enqueue(Time::ZERO, info, i as u64).unwrap();
        }
        let order: Vec<u64> = std::iter::from_fn(|| t.dequeue(Time::ZERO, 0)).collect();
        assert_eq!(order, [3, 1, 2, 0, 4]); // priorities 7, 5, 3, 1, 0
        let mut t = tree("{name: q, scheduling: strict_priority, by: dscp}");
        for (i, d) in [0u8, 46, 26].into_iter().enumerate() {
            let info = PacketInfo {
                dscp: d,
                ..pkt(100)
            };
            t.enqueue(Time::ZERO, info, i as u64).unwrap();
        }
        let order: Vec<u64> = std::iter::from_fn(|| t.dequeue(Time::ZERO, 0)).collect();
        assert_eq!(order, [1, 2, 0]); // DSCP 46, 26, 0
    }

    #[test]
    fn match_routes_to_the_first_matching_leaf_then_the_default() {
        let yaml = "
name: root
scheduling: round_robin
children:
  - name: voice
    match: {dscp: [46], priority: [5, 6]}
  - name: inner
    scheduling: wfq
    weights: [1, 1]
    children:
      - name: small
        match: {size_at_most: 1KiB}
      - name: rdma
        match: {qp: [257, 300]}
  - name: big
    match: {size_at_least: 4KiB, size_at_most: 9000B}
  - name: other
";
        let mut t = tree(yaml);
        let cases = [
            (
                PacketInfo {
                    dscp: 46,
                    priority: 5,
                    ..pkt(200)
                },
                "voice",
            ),
            // dscp holds, priority does not: the next leaf that matches.
            (
                PacketInfo {
                    dscp: 46,
                    priority: 3,
                    ..pkt(200)
                },
                "small",
            ),
            (pkt(1024), "small"),
            (
                PacketInfo {
                    qp: 300,
                    ..pkt(1025)
                },
                "rdma",
            ),
            (
                PacketInfo {
                    qp: 301,
                    ..pkt(1025)
                },
                "other",
            ),
            (pkt(4096), "big"),
            (pkt(9000), "big"),
            (pkt(9001), "other"),
        ];
        for (info, leaf) in cases {
            let before = t.node_len(id(&t, leaf));
            t.enqueue(Time::ZERO, info, 0).unwrap();
            assert_eq!(t.node_len(id(&t, leaf)), before + 1, "{info:?} to {leaf}");
        }
        assert_eq!(t.len(), cases.len());

        // Without a default leaf an unmatched packet is refused.
        let mut t = tree(
            "
name: root
children: [{name: a, match: {priority: [1]}}, {name: b, match: {priority: [2]}}]
",
        );
        t.enqueue(
            Time::ZERO,
            PacketInfo {
                priority: 2,
                ..pkt(64)
            },
            7,
        )
        .unwrap();
        assert!(matches!(
            t.enqueue(Time::ZERO, pkt(64), 8),
            Err(EnqueueError::NoLeaf(8))
        ));
    }

    #[test]
    fn capacity_overflow_and_shaping_are_applied() {
        let mut t = tree(
            "
name: root
children:
  - name: q
    scheduling: sjf
    capacity: 2
    overflow: evict_largest
    shaping: {kind: token_bucket, rate: 8Gbps, burst: 0B}
",
        );
        let q = id(&t, "q");
        for (i, size) in [300u64, 100, 200].into_iter().enumerate() {
            let info = PacketInfo {
                message_size: size,
                ..pkt(1000)
            };
            let r = t.enqueue(Time::ZERO, info, i as u64);
            if i == 2 {
                // The largest (message 300) is evicted for the arriving 200.
                assert!(matches!(r, Err(EnqueueError::Evicted { item: 0, .. })));
            }
        }
        assert_eq!(t.stats(q).unwrap().evicted_packets, 1);
        // 8 Gb/s with no burst: 1000 B is released after 1 us.
        assert_eq!(t.dequeue(Time::ZERO, 0), None);
        assert_eq!(t.next_release(Time::ZERO), Some(Time::from_us(1)));
        assert!(t.stats(q).unwrap().shaped > 0);
    }

    #[test]
    fn every_scheduling_kind_builds() {
        let yaml = "
name: root
scheduling: min_rate
rates: [1Gbps, 2Gbps]
burst: 9KiB
children:
  - {name: a, scheduling: lstf, match: {priority: [0]}}
  - {name: b, scheduling: srpt, match: {priority: [1]}}
  - {name: c, scheduling: las, match: {priority: [2]}}
  - {name: d, scheduling: las, by: flow, match: {priority: [3]}}
  - {name: e, scheduling: edf, match: {priority: [4]}}
  - {name: f, scheduling: stop_and_go, frame: 1us, match: {priority: [5]}}
  - {name: g, scheduling: round_robin, by: qp, match: {priority: [6]}}
  - name: h
    scheduling: wfq
    by: priority
    weights: [1, 2.5]
    shaping: {kind: stop_and_go, frame: 2us}
    children:
      - {name: h0, scheduling: fifo, match: {qp: [1]}}
      - {name: h1, scheduling: wfq, by: flow}
";
        let mut t = tree(yaml);
        assert_eq!(t.leaves().count(), 9);
        for p in 0..8u8 {
            let info = PacketInfo {
                priority: p,
                ..pkt(500)
            };
            t.enqueue(Time::ZERO, info, u64::from(p)).unwrap();
        }
        let mut now = Time::ZERO;
        let mut n = 0;
        while !t.is_empty() {
            if t.dequeue(now, 0).is_some() {
                n += 1;
            } else {
                now = t.next_release(now).unwrap();
            }
        }
        assert_eq!(n, 8);
    }

    #[test]
    fn validation_errors_name_the_field() {
        let cases: &[(&str, &str, &str)] = &[
            (
                "{name: r, scheduling: wfq, weights: [3, 1, 1], children: [{name: a}, {name: b, match: {dscp: [1]}}]}",
                "weights",
                "3 entries for 2 children",
            ),
            (
                "{name: r, scheduling: wfq, children: [{name: a}]}",
                "weights",
                "needs `weights`",
            ),
            (
                "{name: r, scheduling: wfq, weights: [1, 0], children: [{name: a}, {name: b, match: {dscp: [1]}}]}",
                "weights[1]",
                "positive",
            ),
            (
                "{name: r, scheduling: wfq, weights: [1, -2], children: [{name: a}, {name: b, match: {dscp: [1]}}]}",
                "weights[1]",
                "positive",
            ),
            (
                "{name: r, scheduling: wfq, by: flow, weights: [1]}",
                "weights",
                "every flow equally",
            ),
            (
                "{name: r, scheduling: wfq, by: priority, weights: [1, 1, 1, 1, 1, 1, 1, 1, 1]}",
                "weights",
                "8 classes",
            ),
            (
                "{name: r, scheduling: round_robin, weights: [1], children: [{name: a}]}",
                "weights",
                "`round_robin` takes no `weights` (it takes `by`)",
            ),
            (
                "{name: r, frame: 1us}",
                "frame",
                "`fifo` takes no `frame` (it takes no parameters)",
            ),
            (
                "{name: r, scheduling: stop_and_go}",
                "frame",
                "needs `frame`",
            ),
            (
                "{name: r, scheduling: stop_and_go, frame: 0us}",
                "frame",
                "above 0",
            ),
            (
                "{name: r, scheduling: min_rate, burst: 1KiB, children: [{name: a}]}",
                "rates",
                "needs `rates`",
            ),
            (
                "{name: r, scheduling: min_rate, rates: [1Gbps], children: [{name: a}]}",
                "burst",
                "needs `burst`",
            ),
            (
                "{name: r, scheduling: min_rate, rates: [0Gbps], burst: 1KiB, children: [{name: a}]}",
                "rates[0]",
                "above 0",
            ),
            (
                "{name: r, scheduling: min_rate, rates: [1Gbps, 1Gbps], burst: 1KiB, children: [{name: a}]}",
                "rates",
                "at most one per child",
            ),
            (
                "{name: r, scheduling: min_rate, by: flow, rates: [1Gbps], burst: 1KiB, children: [{name: a}]}",
                "by",
                "min_rate by flow",
            ),
            (
                "{name: r, scheduling: strict_priority}",
                "by",
                "at a leaf needs `by`",
            ),
            (
                "{name: r, scheduling: round_robin, by: child}",
                "by",
                "a leaf has no children",
            ),
            (
                "{name: r, scheduling: strict_priority, by: flow}",
                "by",
                "no meaning",
            ),
            (
                "{name: r, scheduling: las, by: qp}",
                "by",
                "may only be `flow`",
            ),
            (
                "{name: r, scheduling: edf, by: flow}",
                "by",
                "`edf` takes no `by`",
            ),
            (
                "{name: r, shaping: {kind: token_bucket, rate: 1Gbps, burst: 1KiB}, children: [{name: a}]}",
                "shaping",
                "root cannot be shaped",
            ),
            (
                "{name: r, children: [{name: a, shaping: {kind: token_bucket, burst: 1KiB}}]}",
                "children[0].shaping.rate",
                "needs `rate`",
            ),
            (
                "{name: r, children: [{name: a, shaping: {kind: token_bucket, rate: 0bps, burst: 1KiB}}]}",
                "children[0].shaping.rate",
                "above 0",
            ),
            (
                "{name: r, children: [{name: a, shaping: {kind: stop_and_go, frame: 1us, rate: 1Gbps}}]}",
                "children[0].shaping.rate",
                "`stop_and_go` shaping takes no `rate` (it takes `frame`)",
            ),
            (
                "{name: r, match: {dscp: [1]}, children: [{name: a}]}",
                "match",
                "only leaves take `match`",
            ),
            (
                "{name: r, capacity: 10, children: [{name: a}]}",
                "capacity",
                "only leaves",
            ),
            (
                "{name: r, children: [{name: a, capacity: 0}]}",
                "children[0].capacity",
                "at least 1",
            ),
            (
                "{name: r, children: [{name: a, overflow: evict_largest}]}",
                "children[0].overflow",
                "needs a `capacity`",
            ),
            (
                "{name: r, children: [{name: a}, {name: b}]}",
                "children[1]",
                "`children[0]` is already the default leaf",
            ),
            (
                "{name: r, children: [{name: a}, {name: r, match: {dscp: [1]}}]}",
                "children[1].name",
                "`r` is already the name of the root",
            ),
            (
                "{name: '', children: [{name: a}]}",
                "name",
                "non-empty",
            ),
            (
                "{name: r, children: [{name: a}, {name: b, match: {}}]}",
                "children[1].match",
                "no conditions",
            ),
            (
                "{name: r, children: [{name: a}, {name: b, match: {dscp: [1, 64]}}]}",
                "children[1].match.dscp[1]",
                "outside 0..=63",
            ),
            (
                "{name: r, children: [{name: a}, {name: b, match: {priority: [8]}}]}",
                "children[1].match.priority[0]",
                "outside 0..=7",
            ),
            (
                "{name: r, children: [{name: a}, {name: b, match: {qp: []}}]}",
                "children[1].match.qp",
                "empty",
            ),
            (
                "{name: r, children: [{name: a}, {name: b, match: {size_at_least: 4KiB, size_at_most: 1KiB}}]}",
                "children[1].match.size_at_least",
                "never match",
            ),
            (
                "{name: r, bucket: {window_log2: 12}}",
                "bucket",
                "uses a heap",
            ),
            (
                "{name: r, pifo: bucket, bucket: {window_log2: 30}}",
                "bucket.window_log2",
                "outside 6..=16",
            ),
            (
                "{name: r, pifo: bucket, bucket: {granularity_log2: 64}}",
                "bucket.granularity_log2",
                "outside 0..=63",
            ),
            (
                "
name: r
scheduling: wfq
weights: [1, 1]
children:
  - name: a
    match: {dscp: [1]}
  - name: b
    children:
      - name: c
        scheduling: stop_and_go
",
                "children[1].children[0].frame",
                "needs `frame`",
            ),
        ];
        for &(yaml, path, msg) in cases {
            let e = error(yaml);
            assert_eq!(e.path, path, "{yaml}\n{e}");
            assert!(e.message.contains(msg), "{yaml}\n{e}\nwant: {msg}");
            assert_eq!(e.to_string(), format!("`{path}`: {}", e.message));
        }
    }

    #[test]
    fn too_many_children() {
        let children: Vec<String> = (0..=MAX_CHILDREN)
            .map(|i| format!("{{name: c{i}, match: {{qp: [{i}]}}}}"))
            .collect();
        let yaml = format!("{{name: r, children: [{}]}}", children.join(", "));
        let e = error(&yaml);
        assert_eq!(e.path, "children");
        assert!(e.message.contains("at most 64"), "{e}");
    }

    #[test]
    fn serde_rejects_unknown_fields_and_bad_units() {
        for yaml in [
            "{name: r, weight: [1]}",
            "{name: r, children: [{name: a, capacty: 3}]}",
            "{name: r, children: [{name: a, match: {dscp: [1], port: 3}}]}",
            "{name: r, children: [{name: a, shaping: {kind: token_bucket, rate: 1Gbps, burst: 1KiB, ceil: 2Gbps}}]}",
            "{name: r, pifo: bucket, bucket: {window: 3}}",
        ] {
            let e = serde_yaml::from_str::<TreeConfig>(yaml).expect_err(yaml);
            assert!(e.to_string().contains("unknown field"), "{yaml}: {e}");
        }
        for (yaml, want) in [
            ("{name: r, scheduling: wf2q}", "unknown variant"),
            (
                "{name: r, scheduling: min_rate, burst: 1500}",
                "has no unit",
            ),
            ("{scheduling: fifo}", "missing field `name`"),
        ] {
            let e = serde_yaml::from_str::<TreeConfig>(yaml).expect_err(yaml);
            assert!(e.to_string().contains(want), "{yaml}: {e}");
        }
    }

    #[test]
    fn error_paths_prefix_and_split() {
        let e = ConfigError::new("children[1].match.dscp[2]".into(), "x");
        assert_eq!(
            e.segments(),
            [
                PathSegment::Key("children".into()),
                PathSegment::Index(1),
                PathSegment::Key("match".into()),
                PathSegment::Key("dscp".into()),
                PathSegment::Index(2),
            ]
        );
        let p = e.prefixed("switches[0].scheduler");
        assert_eq!(p.path, "switches[0].scheduler.children[1].match.dscp[2]");
        assert_eq!(p.segments().len(), 8);
        // Hand-made paths never panic.
        for odd in ["a]", "]]", "a[x]", "[", "é]", "a..b"] {
            let _ = ConfigError::new(odd.into(), "x").segments();
        }
        let root = ConfigError::new(String::new(), "x");
        assert!(root.segments().is_empty());
        assert_eq!(root.clone().prefixed("tree").path, "tree");
        assert_eq!(root.prefixed("").path, "");
    }
}
