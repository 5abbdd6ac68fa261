//! What the report reads of every actor's final state, taken out of the actor once at the end
//! of a run into owned values: the report is built from these facts alone.
//!
//! On threads the facts are taken from the actors the engine hands back. Over MPI ranks an
//! actor's final state lives only in the rank that ran it: that rank takes its facts and sends
//! them to rank 0 (encoded by [`super::wire`]), which builds the same report from them. One
//! builder for both paths keeps the report the same, and the thread path's tests prove the
//! facts complete: a figure the report needs and the facts lack cannot be written.
//!
//! Only final state is carried. What an actor holds as built (a training rank's schedule) is
//! the same in every process, which all build the whole world: rank 0 reads it from its own
//! copy.

use fabemu_collectives::JobRecord;
use fabemu_fabric::histogram::LatencyHistogram;
use fabemu_fabric::host::{Host, HostStats, Recovery};
use fabemu_fabric::units::Time;
use fabemu_switch::egress::ClassReport;
use fabemu_switch::{Switch, SwitchPortStats, SwitchStats};
use fabemu_workload::scheduler::{NodeRecord, SchedNode};

use crate::world::{HostApp, Node};

/// The final state of one actor, as the report reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ActorFacts {
    /// A host: its NIC and applications.
    Host(Box<HostFacts>),
    /// A switch.
    Switch(Box<SwitchFacts>),
}

/// A message this host received.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Delivery {
    /// Sending host (rank).
    pub src: u32,
    /// The tag's low 32 bits.
    pub imm: u32,
    /// When the last byte arrived.
    pub delivered_at: Time,
    /// Data mode: whether the bytes were the ones sent.
    pub data_ok: Option<bool>,
}

/// One queue pair's congestion-control rate over the run.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct QpFacts {
    /// The peer host (rank).
    pub peer: u32,
    /// The rate in force at the end, `None` at line rate.
    pub final_rate_bps: Option<u64>,
    /// Rate changes.
    pub rate_changes: u64,
    /// Changes that lowered the rate.
    pub cuts: u64,
    /// Lowest rate reached.
    pub min_rate_bps: Option<u64>,
    /// Time-weighted mean rate from the first change to the last.
    pub mean_rate_bps: Option<u64>,
    /// Samples the decimated history kept.
    pub history_samples: usize,
    /// Smallest spacing of the kept samples.
    pub history_resolution_ps: u64,
    /// `[time ps, rate b/s]`, the kept samples and the last change.
    pub samples: Vec<[u64; 2]>,
}

/// What the NIC measured of the scenario's faults.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WatchFacts {
    /// Per fault entry: messages in flight during it that were acknowledged, and delayed ones.
    pub messages: Vec<(u64, u64)>,
    /// Every loss recovery.
    pub recoveries: Vec<Recovery>,
}

/// A training rank's final state: when each node of its schedule ran, and its errors. The
/// schedule's nodes are as built.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TrainingFacts {
    /// The schedule (static: the same in every process).
    pub nodes: std::sync::Arc<[SchedNode]>,
    /// Per node, when it became ready, started and ended.
    pub records: Vec<NodeRecord>,
    /// Messages that arrived and no receive took: `(src host, tag bits, bytes)`.
    pub unmatched: Vec<(u32, u64, u64)>,
    /// Problems met.
    pub errors: Vec<String>,
}

/// A host's final state, as the report reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostFacts {
    /// Messages received.
    pub received: Vec<Delivery>,
    /// `(tag, when)` of every message sent and acknowledged.
    pub acked: Vec<(u64, Time)>,
    /// The NIC's counters.
    pub stats: HostStats,
    /// Queue pairs whose rate history has samples.
    pub qp_rates: Vec<QpFacts>,
    /// Fault measurements, when the scenario has faults.
    pub watch: Option<WatchFacts>,
    /// The collective jobs' records, in job order.
    pub jobs: Vec<JobRecord>,
    /// The collective runner's errors, as text.
    pub collective_errors: Vec<String>,
    /// The training rank, if any.
    pub training: Option<TrainingFacts>,
}

/// An egress queue paused with frames: a port and the priorities held.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Blocked {
    /// The port.
    pub port: usize,
    /// Bit p set: priority p is paused with frames queued, or stalled past the watchdog.
    pub priorities: u8,
}

/// A switch's final state, as the report reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SwitchFacts {
    /// Whole-switch counters.
    pub stats: SwitchStats,
    /// Frames dropped at its ports.
    pub dropped_packets: u64,
    /// Frames still queued at the end.
    pub queued_packets: usize,
    /// Priority inversions of its custom schedulers.
    pub priority_inversions: u64,
    /// Time its priorities were paused, summed over ports and priorities (ps).
    pub paused_time_ps: u64,
    /// Per port counters ([`Switch::port_stats`]).
    pub ports: Vec<SwitchPortStats>,
    /// Per port, the classes of its scheduler.
    pub classes: Vec<Vec<ClassReport>>,
    /// Egress queues paused with frames at the end (for the PFC deadlock cycle).
    pub blocked: Vec<Blocked>,
}

impl ActorFacts {
    /// The facts of `node`'s final state.
    pub fn of(node: &Node) -> ActorFacts {
        match node {
            Node::Host(h) => ActorFacts::Host(Box::new(HostFacts::of(h))),
            Node::Switch(s) => ActorFacts::Switch(Box::new(SwitchFacts::of(s))),
        }
    }

    /// The host's facts, `None` for a switch.
    pub fn host(&self) -> Option<&HostFacts> {
        match self {
            ActorFacts::Host(h) => Some(h),
            ActorFacts::Switch(_) => None,
        }
    }
}

/// The facts of every actor, in actor order.
pub fn of_all(actors: &[Node]) -> Vec<ActorFacts> {
    actors.iter().map(ActorFacts::of).collect()
}

impl HostFacts {
    /// The facts of host `h`.
    pub fn of(h: &Host<HostApp>) -> HostFacts {
        let received = h
            .app
            .messages
            .received
            .iter()
            .map(|r| Delivery {
                src: r.src,
                imm: r.imm,
                delivered_at: r.delivered_at,
                data_ok: r.data_ok,
            })
            .collect();
        let acked = h
            .app
            .messages
            .sends
            .iter()
            .filter_map(|s| Some((s.spec.tag, s.acked_at?)))
            .collect();
        let qp_rates = h
            .nic
            .qp_rates()
            .filter(|q| !q.history.samples.is_empty())
            .map(|q| {
                let h = q.history;
                let mut samples: Vec<[u64; 2]> =
                    h.samples.iter().map(|(t, b)| [t.ps(), b.0]).collect();
                if let Some((t, b)) = h.last.filter(|l| h.samples.last() != Some(l)) {
                    samples.push([t.ps(), b.0]);
                }
                QpFacts {
                    peer: q.peer,
                    final_rate_bps: q.rate.map(|b| b.0),
                    rate_changes: h.changes,
                    cuts: h.cuts,
                    min_rate_bps: h.min.map(|b| b.0),
                    mean_rate_bps: h.mean_bps().map(|m| m as u64),
                    history_samples: h.samples.len(),
                    history_resolution_ps: h.resolution.ps(),
                    samples,
                }
            })
            .collect();
        let watch = h.nic.fault_watch().map(|w| WatchFacts {
            messages: w.message_counts(),
            recoveries: w.recoveries(),
        });
        let training = h.app.training.as_deref().map(|s| TrainingFacts {
            nodes: s.shared_nodes(),
            records: s.records().to_vec(),
            unmatched: s.unmatched_messages(),
            errors: s.errors.clone(),
        });
        HostFacts {
            received,
            acked,
            stats: h.nic.stats.clone(),
            qp_rates,
            watch,
            jobs: h.app.collectives.records().cloned().collect(),
            collective_errors: h
                .app
                .collectives
                .errors
                .iter()
                .map(|e| e.to_string())
                .collect(),
            training,
        }
    }
}

impl SwitchFacts {
    /// The facts of switch `s`.
    pub fn of(s: &Switch) -> SwitchFacts {
        let stalled = s.stalled();
        let ports = s.port_stats();
        let blocked = (0..ports.len())
            .filter_map(|port| {
                let mut prios = 0u8;
                for p in 0..8u8 {
                    if s.paused(port) & (1 << p) != 0 && s.mmu().egress_bytes(port, p) > 0 {
                        prios |= 1 << p;
                    }
                }
                for q in stalled.iter().filter(|q| q.port == port) {
                    prios |= 1 << q.priority;
                }
                (prios != 0).then_some(Blocked {
                    port,
                    priorities: prios,
                })
            })
            .collect();
        SwitchFacts {
            stats: s.stats(),
            dropped_packets: s.dropped_packets(),
            queued_packets: s.queued_packets(),
            priority_inversions: s.priority_inversions(),
            paused_time_ps: s
                .port_counters()
                .iter()
                .flat_map(|p| p.priorities.iter())
                .map(|p| p.paused_time_ps)
                .sum(),
            ports,
            classes: s.port_classes(),
            blocked,
        }
    }

    /// The queueing delay of all its ports together, `None` when nothing was measured (each
    /// port's own is in the JSON report).
    pub fn queueing(&self) -> Option<LatencyHistogram> {
        let mut h = LatencyHistogram::coarse();
        // `port_stats`: the kept counters lack the zero waits of frames that cut through.
        for p in &self.ports {
            h.add(&p.queueing_delay);
        }
        (!h.is_empty()).then_some(h)
    }
}
