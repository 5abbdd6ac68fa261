//! Priorities: which of the eight 802.1Qbb classes a frame belongs to.
//!
//! A routed RoCEv2 fabric carries no VLAN tag, so the class comes from the IPv4 DSCP (the
//! "DSCP-based PFC" of current datacenter NICs and switches). The default map is the class
//! selector, priority = DSCP >> 3: DSCP 26 (the RoCE data default) is priority 3, DSCP 48 (CNPs
//! and ACKs) priority 6. A scenario overrides single entries (`dscp_priority: {48: 7}`); the
//! other 63 keep the class selector. The map is a fixed 64-byte table, so classifying a frame is
//! one index.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

/// PFC priority classes (802.1Qbb).
pub const PRIORITIES: usize = 8;

/// Number of DSCP values (6 bits).
const DSCPS: usize = 64;

/// A configuration value out of range.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PriorityError {
    /// A DSCP above 63.
    #[error("DSCP {0} is out of range (0..=63)")]
    Dscp(u8),
    /// A priority above 7.
    #[error("priority {0} is out of range (0..=7)")]
    Priority(u8),
}

/// DSCP → priority (0..=7). Serialized as the entries that differ from the class selector.
#[derive(Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "BTreeMap<u8, u8>", into = "BTreeMap<u8, u8>")]
pub struct DscpMap([u8; DSCPS]);

impl DscpMap {
    /// The class selector: priority = DSCP >> 3.
    pub const CLASS_SELECTOR: DscpMap = {
        let mut t = [0u8; DSCPS];
        let mut d = 0;
        while d < DSCPS {
            t[d] = (d >> 3) as u8;
            d += 1;
        }
        DscpMap(t)
    };

    /// The priority of `dscp` (only its low 6 bits are read).
    #[inline]
    pub fn priority(&self, dscp: u8) -> u8 {
        self.0[usize::from(dscp & 0x3F)]
    }

    /// The map with `dscp` sent to `priority`.
    pub fn with(mut self, dscp: u8, priority: u8) -> Result<DscpMap, PriorityError> {
        if usize::from(dscp) >= DSCPS {
            return Err(PriorityError::Dscp(dscp));
        }
        if usize::from(priority) >= PRIORITIES {
            return Err(PriorityError::Priority(priority));
        }
        self.0[usize::from(dscp)] = priority;
        Ok(self)
    }
}

impl Default for DscpMap {
    fn default() -> Self {
        DscpMap::CLASS_SELECTOR
    }
}

impl fmt::Debug for DscpMap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map()
            .entries(BTreeMap::<u8, u8>::from(*self))
            .finish()
    }
}

impl TryFrom<BTreeMap<u8, u8>> for DscpMap {
    type Error = PriorityError;
    fn try_from(overrides: BTreeMap<u8, u8>) -> Result<Self, Self::Error> {
        overrides
            .into_iter()
            .try_fold(DscpMap::CLASS_SELECTOR, |m, (d, p)| m.with(d, p))
    }
}

impl From<DscpMap> for BTreeMap<u8, u8> {
    fn from(m: DscpMap) -> Self {
        (0..DSCPS as u8)
            .filter(|&d| m.priority(d) != DscpMap::CLASS_SELECTOR.priority(d))
            .map(|d| (d, m.priority(d)))
            .collect()
    }
}

/// A set of priorities, bit p = priority p. Serialized as a list (`[3, 4]`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "Vec<u8>", into = "Vec<u8>")]
pub struct PrioritySet(pub u8);

impl PrioritySet {
    /// True when `priority` is in the set.
    #[inline]
    pub fn contains(self, priority: u8) -> bool {
        priority < 8 && self.0 & (1 << priority) != 0
    }
    /// How many priorities the set holds.
    pub fn len(self) -> u32 {
        self.0.count_ones()
    }
    /// True when the set is empty.
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }
}

impl Default for PrioritySet {
    /// Priority 3 only: where DSCP 26, the RoCE default, lands under the class selector.
    fn default() -> Self {
        PrioritySet(1 << 3)
    }
}

impl TryFrom<Vec<u8>> for PrioritySet {
    type Error = PriorityError;
    fn try_from(list: Vec<u8>) -> Result<Self, Self::Error> {
        list.into_iter().try_fold(PrioritySet(0), |s, p| {
            if usize::from(p) >= PRIORITIES {
                Err(PriorityError::Priority(p))
            } else {
                Ok(PrioritySet(s.0 | 1 << p))
            }
        })
    }
}

impl From<PrioritySet> for Vec<u8> {
    fn from(s: PrioritySet) -> Self {
        (0..PRIORITIES as u8).filter(|&p| s.contains(p)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn class_selector_and_overrides() {
        let m = DscpMap::default();
        assert_eq!(m.priority(26), 3);
        assert_eq!(m.priority(48), 6);
        assert_eq!(m.priority(63), 7);
        let m: DscpMap = serde_yaml::from_str("{48: 7, 0: 1}").unwrap();
        assert_eq!((m.priority(48), m.priority(0), m.priority(26)), (7, 1, 3));
        let back = serde_yaml::to_string(&m).unwrap();
        assert_eq!(serde_yaml::from_str::<DscpMap>(&back).unwrap(), m);
        assert!(serde_yaml::from_str::<DscpMap>("{64: 1}").is_err());
        assert!(serde_yaml::from_str::<DscpMap>("{3: 8}").is_err());
    }

    #[test]
    fn priority_sets_are_lists() {
        let s: PrioritySet = serde_yaml::from_str("[3, 4]").unwrap();
        assert_eq!(s, PrioritySet(0b11000));
        assert!(s.contains(4) && !s.contains(5) && !s.contains(200));
        assert_eq!(Vec::<u8>::from(s), vec![3, 4]);
        assert!(serde_yaml::from_str::<PrioritySet>("[8]").is_err());
        assert_eq!(PrioritySet::default().len(), 1);
    }
}
