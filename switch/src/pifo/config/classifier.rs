//! The classifier compiled from the leaves' `match` predicates.

use super::*;

/// A [`Classifier`] made of the leaves' `match` predicates: the first leaf (depth-first, in
/// file order) whose predicate holds, else the default leaf, else none (the tree then refuses
/// the packet with [`EnqueueError::NoLeaf`](crate::pifo::EnqueueError::NoLeaf)).
///
/// Made by [`TreeConfig::classifier`]; its [`NodeId`]s are those [`TreeConfig::build`] gives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MatchClassifier {
    pub(super) rules: Vec<(Rule, NodeId)>,
    pub(super) default: Option<NodeId>,
}

/// A compiled [`MatchConfig`]: bit sets for priority and DSCP, a sorted list of queue pairs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Rule {
    priority: Option<u8>,
    dscp: Option<u64>,
    qp: Option<Vec<u32>>,
    size_at_least: u64,
    size_at_most: u64,
}

impl Rule {
    /// Compiles a validated predicate (values out of range are ignored).
    pub(super) fn new(m: &MatchConfig) -> Rule {
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
