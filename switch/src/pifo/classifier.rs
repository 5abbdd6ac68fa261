//! Classifiers: which leaf of a PIFO tree a packet joins.
//!
//! In the PIFO paper each node carries a *predicate* on packets; the leaf whose predicate holds
//! receives the packet. fabemu folds the predicates of a tree into one [`Classifier`], which
//! maps a [`PacketInfo`] to a leaf's [`NodeId`] (or to none: the packet is refused). Built-ins
//! cover the usual keys (a fixed leaf, priority, DSCP, queue pair, flow hash); a closure
//! `FnMut(&PacketInfo) -> Option<NodeId>` is a classifier too.

use super::{NodeId, PacketInfo};

/// Picks the leaf a packet joins.
pub trait Classifier: Send {
    /// The leaf for the packet, or `None` to refuse it.
    fn classify(&mut self, info: &PacketInfo) -> Option<NodeId>;
}

impl<F> Classifier for F
where
    F: FnMut(&PacketInfo) -> Option<NodeId> + Send,
{
    fn classify(&mut self, info: &PacketInfo) -> Option<NodeId> {
        self(info)
    }
}

/// Every packet to one leaf.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fixed(pub NodeId);

impl Classifier for Fixed {
    fn classify(&mut self, _info: &PacketInfo) -> Option<NodeId> {
        Some(self.0)
    }
}

/// The packet field a [`Table`] looks up.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Field {
    /// [`PacketInfo::priority`]: `leaves[priority]`.
    Priority,
    /// [`PacketInfo::dscp`]: `leaves[dscp]`.
    Dscp,
    /// [`PacketInfo::qp`]: `leaves[qp mod n]` (spreads queue pairs over the leaves).
    Qp,
    /// [`PacketInfo::flow`]: `leaves[flow mod n]` (spreads flows over the leaves).
    Flow,
}

/// A lookup table from one packet field to leaves.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Table {
    field: Field,
    leaves: Vec<NodeId>,
    default: Option<NodeId>,
}

impl Table {
    /// `leaves` indexed by `field` (see [`Field`] for how values map to positions).
    pub fn new(field: Field, leaves: Vec<NodeId>) -> Self {
        Table {
            field,
            leaves,
            default: None,
        }
    }
    /// The leaf for values beyond the table (otherwise such packets are refused).
    pub fn with_default(mut self, leaf: NodeId) -> Self {
        self.default = Some(leaf);
        self
    }
}

impl Classifier for Table {
    fn classify(&mut self, info: &PacketInfo) -> Option<NodeId> {
        let n = self.leaves.len() as u64;
        let i = match self.field {
            Field::Priority => u64::from(info.priority),
            Field::Dscp => u64::from(info.dscp),
            Field::Qp if n > 0 => u64::from(info.qp) % n,
            Field::Flow if n > 0 => info.flow % n,
            Field::Qp | Field::Flow => return self.default,
        };
        usize::try_from(i)
            .ok()
            .and_then(|i| self.leaves.get(i).copied())
            .or(self.default)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_map_fields_to_leaves() {
        let (a, b) = (NodeId(1), NodeId(2));
        let info = PacketInfo {
            priority: 1,
            dscp: 40,
            flow: 7,
            qp: 4,
            ..PacketInfo::default()
        };
        assert_eq!(
            Table::new(Field::Priority, vec![a, b]).classify(&info),
            Some(b)
        );
        assert_eq!(Table::new(Field::Dscp, vec![a, b]).classify(&info), None);
        assert_eq!(
            Table::new(Field::Dscp, vec![a])
                .with_default(b)
                .classify(&info),
            Some(b)
        );
        assert_eq!(Table::new(Field::Flow, vec![a, b]).classify(&info), Some(b));
        assert_eq!(Table::new(Field::Qp, vec![a, b]).classify(&info), Some(a));
        assert_eq!(Table::new(Field::Qp, vec![]).classify(&info), None);
        assert_eq!(Fixed(a).classify(&info), Some(a));
        let mut f = |i: &PacketInfo| (i.flow > 5).then_some(b);
        assert_eq!(f.classify(&info), Some(b));
    }
}
