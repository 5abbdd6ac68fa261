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

mod classifier;
mod compile;
mod error;
#[cfg(test)]
mod tests;

pub use self::classifier::MatchClassifier;
use self::classifier::Rule;
use self::error::{describe, join};
pub use self::error::{ConfigError, PathSegment};

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
