//! Traffic classes of messages and collectives: the scenario's `dscp`, `priority`, `deadline`,
//! `slack` and `rank` turned into the [`TrafficClass`] the NIC sends a message in.
//!
//! A class is what the fabric sees of a message besides its bytes. The DSCP is real: it goes
//! into the IPv4 header of every data packet, and each switch maps it to a priority with its
//! `dscp_priority` map (default DSCP >> 3), which picks the PFC class, the ECN queue and the
//! strict-priority queue of the default egress, and what PIFO trees match and rank by.
//! `priority` is a way to name that class: alone it stands for DSCP 8 x priority (the class
//! selector codepoint CSp); given with `dscp` it is a check that the DSCP really lands in that
//! priority on every switch, so a remapped `dscp_priority` cannot silently put the message in
//! another class. Deadline, slack and rank travel beside the bytes for PIFO schedulers (see
//! [`fabemu_fabric::packet::PacketMeta`]).
//!
//! Distinct classes are numbered in the order they first appear (messages, then collectives)
//! into the run's [`ClassTable`]: the NICs open QPs of their own for each, and the switches'
//! PIFO trees read deadline, slack and rank from the table by the packet's destination QP.
//!
//! Classes act at packet fidelity; the fluid flow model has no queues to order and ignores them.

use fabemu_fabric::host::CLASS_QPN_HOSTS;
use fabemu_fabric::transport::{ClassId, ClassTable, TrafficClass};
use fabemu_fabric::units::Time;
use fabemu_switch::priority::DscpMap;

use crate::scenario::{FieldPath, ScenarioError, Source};
use fabemu_topologies::Graph;

/// Highest DSCP.
const MAX_DSCP: u64 = 63;
/// Highest priority.
const MAX_PRIORITY: u64 = 7;

/// What one scenario entry (a message or a collective) asks for.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct ClassFields {
    pub(crate) dscp: Option<u64>,
    pub(crate) priority: Option<u64>,
    /// Deadline, counted from the message's start.
    pub(crate) deadline: Option<Time>,
    pub(crate) slack: Option<Time>,
    pub(crate) rank: Option<u64>,
}

/// Every switch's DSCP map, named for messages: the scenario's own switches by name, and
/// `switch_buffer`'s map for the rest (generated topologies).
fn dscp_maps(src: &Source) -> Vec<(String, DscpMap)> {
    let s = &src.scenario;
    let mut maps = vec![("`switch_buffer`".to_string(), s.switch_buffer.dscp_priority)];
    for sw in &s.switches {
        if let Some(b) = &sw.buffer {
            maps.push((format!("switch `{}`", sw.name), b.dscp_priority));
        }
    }
    maps
}

/// The class of the entry at `at` (its fields are `at.dscp`, `at.priority`, ...), checked:
/// DSCP 0..=63, priority 0..=7 and consistent with the DSCP on every switch, deadline > 0,
/// and room for a class of its own in the QP numbers of `hosts` hosts. The deadline is left
/// relative.
fn resolve(
    src: &Source,
    at: &FieldPath,
    f: &ClassFields,
    hosts: usize,
) -> Result<TrafficClass, ScenarioError> {
    if let Some(d) = f.dscp {
        if d > MAX_DSCP {
            return Err(src.error_at(
                &at.key("dscp"),
                format!("dscp {d} is out of range: a DSCP is 0..=63"),
            ));
        }
    }
    if let Some(p) = f.priority {
        if p > MAX_PRIORITY {
            return Err(src.error_at(
                &at.key("priority"),
                format!("priority {p} is out of range: a priority is 0..=7"),
            ));
        }
    }
    // Both checked above: the casts are exact.
    let dscp = match (f.dscp, f.priority) {
        (Some(d), _) => Some(d as u8),
        (None, Some(p)) => Some(p as u8 * 8),
        (None, None) => None,
    };
    if let (Some(d), Some(p)) = (dscp, f.priority) {
        for (who, map) in dscp_maps(src) {
            let got = map.priority(d);
            if u64::from(got) != p {
                let what = if f.dscp.is_some() {
                    format!("dscp {d}")
                } else {
                    format!("priority {p} stands for dscp {d} (8 x priority), which")
                };
                return Err(src.error_at(
                    &at.key("priority"),
                    format!(
                        "{what} is priority {got} on {who} (its `dscp_priority` map), not {p}; \
                         give a dscp that maps to priority {p}"
                    ),
                ));
            }
        }
    }
    if f.deadline == Some(Time::ZERO) {
        return Err(src.error_at(
            &at.key("deadline"),
            "deadline must be > 0 (it is counted from the message's start)",
        ));
    }
    let class = TrafficClass {
        dscp,
        deadline: f.deadline.unwrap_or(Time::ZERO),
        slack: f.slack.unwrap_or(Time::ZERO),
        rank: f.rank.unwrap_or(0),
    };
    if !class.is_default() && hosts as u64 > u64::from(CLASS_QPN_HOSTS) {
        return Err(src.error_at(
            at,
            format!(
                "a traffic class needs queue pairs of its own, whose numbers hold at most \
                 {CLASS_QPN_HOSTS} hosts; this fabric has {hosts}"
            ),
        ));
    }
    Ok(class)
}

/// The run's classes and the class of every message and collective entry of the scenario.
pub(crate) struct Classes {
    /// The table NICs and switches share.
    pub(crate) table: ClassTable,
    /// Per `workload.messages` entry, its class number.
    pub(crate) messages: Vec<ClassId>,
    /// Per `workload.collectives` entry, its class number.
    pub(crate) collectives: Vec<ClassId>,
}

impl Classes {
    /// Checks every entry's class fields and numbers the distinct classes (the same numbers
    /// every time it is called on the same scenario).
    pub(crate) fn of(src: &Source, g: &Graph) -> Result<Classes, ScenarioError> {
        let s = &src.scenario;
        let hosts = g.host_count();
        let wp = FieldPath::root().key("workload");
        let mut list: Vec<TrafficClass> = Vec::new();
        let mut intern = |at: &FieldPath, c: TrafficClass| -> Result<ClassId, ScenarioError> {
            if c.is_default() {
                return Ok(0);
            }
            let i = match list.iter().position(|x| *x == c) {
                Some(i) => i,
                None => {
                    if list.len() >= ClassTable::MAX {
                        return Err(src.error_at(
                            at,
                            format!(
                                "more than {} distinct traffic classes (dscp, priority, \
                                 deadline, slack, rank): each takes queue pairs of its own, \
                                 numbered in 6 bits",
                                ClassTable::MAX
                            ),
                        ));
                    }
                    list.push(c);
                    list.len() - 1
                }
            };
            // At most MAX (63) entries: the number fits.
            Ok(i as ClassId + 1)
        };
        let mut messages = Vec::with_capacity(s.workload.messages.len());
        for (i, m) in s.workload.messages.iter().enumerate() {
            let at = wp.key("messages").index(i);
            let fields = ClassFields {
                dscp: m.dscp,
                priority: m.priority,
                deadline: m.deadline,
                slack: m.slack,
                rank: m.rank,
            };
            let mut c = resolve(src, &at, &fields, hosts)?;
            // The table holds absolute deadlines.
            if let Some(d) = m.deadline {
                c.deadline = m.start.add(d);
            }
            messages.push(intern(&at, c)?);
        }
        let mut collectives = Vec::with_capacity(s.workload.collectives.len());
        for (i, e) in s.workload.collectives.iter().enumerate() {
            let at = wp.key("collectives").index(i);
            let fields = ClassFields {
                dscp: e.dscp,
                priority: e.priority,
                rank: e.rank,
                ..ClassFields::default()
            };
            let c = resolve(src, &at, &fields, hosts)?;
            collectives.push(intern(&at, c)?);
        }
        let table = ClassTable::new(list).ok_or_else(|| {
            src.error_at(
                &wp,
                format!("more than {} traffic classes", ClassTable::MAX),
            )
        })?;
        Ok(Classes {
            table,
            messages,
            collectives,
        })
    }
}
