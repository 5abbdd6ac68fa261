//! Traffic classes: how the fabric treats a message's packets, and the run's numbered table
//! of them that NICs and switches share.

use std::sync::Arc;

use crate::units::Time;

/// The traffic class of a message: how the fabric should treat its packets.
///
/// The DSCP goes into the IPv4 header of every data packet (switches map it to a priority,
/// which selects the PFC class, the ECN queue and the strict-priority queue). Deadline, slack
/// and rank are what PIFO schedulers rank by: a class is sent on QPs of its own, whose number
/// names the class ([`ClassTable`]), and a switch reads them from its copy of the run's
/// table — the way a switch's control plane holds per-QP policy — so they cost no wire bytes
/// and no bytes in any packet. The default is the NIC's: its `dscp` and none of the three.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct TrafficClass {
    /// DSCP of the data packets, 0..=63; `None`: the NIC's `dscp`.
    pub dscp: Option<u8>,
    /// Absolute deadline of the message (EDF ranks by it); [`Time::ZERO`]: none.
    pub deadline: Time,
    /// How long each packet may wait in a switch's queue (LSTF ranks by arrival + slack);
    /// [`Time::ZERO`]: none.
    pub slack: Time,
    /// An explicit rank (the PIFO `rank` transaction); 0: none.
    pub rank: u64,
}

impl TrafficClass {
    /// True when the class is the NIC's default (nothing set).
    pub fn is_default(&self) -> bool {
        *self == TrafficClass::default()
    }
}

/// A traffic class's number in the run's [`ClassTable`]; 0 is the NIC's default class.
pub type ClassId = u8;

/// The run's traffic classes, numbered 1.. (0 is the NIC's default class, not stored; an empty
/// table allocates nothing): the
/// NICs open one QP per (peer, class) and put the number in the QP number
/// (`fabemu_fabric::host::qp_number`); switches look a packet's class up by its destination QP.
/// Built once before the run and shared read-only, so every thread sees the same table.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClassTable(Option<Arc<[TrafficClass]>>);

impl ClassTable {
    /// Most classes besides the default (the QP number holds 6 bits of class number).
    pub const MAX: usize = 63;

    /// The table of `classes`, numbered 1, 2, ... in order; `None` when there are more than
    /// [`ClassTable::MAX`].
    pub fn new(classes: Vec<TrafficClass>) -> Option<ClassTable> {
        (classes.len() <= Self::MAX)
            .then(|| ClassTable((!classes.is_empty()).then(|| classes.into())))
    }

    /// Class `id` (the default class for 0 or a number not in the table).
    #[inline]
    pub fn get(&self, id: ClassId) -> TrafficClass {
        match (&self.0, usize::from(id).checked_sub(1)) {
            (Some(t), Some(i)) => t.get(i).copied().unwrap_or_default(),
            _ => TrafficClass::default(),
        }
    }

    /// True when the run has no class besides the default.
    pub fn is_empty(&self) -> bool {
        self.0.is_none()
    }
}

#[cfg(test)]
mod tests {
    use super::{ClassTable, TrafficClass};

    #[test]
    fn class_table_numbers_from_one_and_defaults_elsewhere() {
        let a = TrafficClass {
            dscp: Some(46),
            ..TrafficClass::default()
        };
        let b = TrafficClass {
            rank: 7,
            ..TrafficClass::default()
        };
        let t = ClassTable::new(vec![a, b]).unwrap();
        assert_eq!((t.get(1), t.get(2)), (a, b));
        assert!(t.get(0).is_default() && t.get(3).is_default());
        assert!(ClassTable::new(Vec::new()).unwrap().is_empty());
        assert!(ClassTable::new(vec![a; ClassTable::MAX + 1]).is_none());
    }
}
