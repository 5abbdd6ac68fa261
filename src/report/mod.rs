//! What a run reports: the JSON report (every figure, units in field names), the readable
//! summary, and the invariant checks that decide exit code 3.
//!
//! Everything outside the top-level `"host"` and `"mpi"` objects is a function of the scenario
//! and seed only; `"host"` holds what depends on the machine and the thread count, `"mpi"` how
//! a run over MPI ranks shared the work.
//!
//! The schema (the serde structs below) lives in this file; `build.rs` turns a finished run
//! into a [`Report`] (and collects the invariant violations as it goes), `invariants.rs` holds
//! the checks that need more than a counter (the PFC deadlock cycle), and `summary.rs` renders
//! the text summary. The builder reads no actor: it reads the facts `facts.rs` takes of each
//! actor at the end of the run, which `wire.rs` carries between the processes of a run over
//! MPI ranks.

use fabemu_fabric::host::HostStats;
use fabemu_switch::egress::ClassReport;
use fabemu_switch::{SwitchPortStats, SwitchStats};
use serde::Serialize;

use crate::collective::CollectiveResult;
use crate::scenario::{Fidelity, Mode};

mod build;
pub mod facts;
mod invariants;
mod summary;
pub mod wire;

pub use self::build::{build, build_from};
pub use self::summary::{rate, summary};

/// The whole report.
#[derive(Debug, Serialize)]
pub struct Report {
    /// fabemu's version.
    pub fabemu_version: &'static str,
    /// True when the run was stopped before it finished (Ctrl-C): every figure covers the run
    /// up to the time it reached, and depends on when the stop came. Absent from complete runs.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub interrupted: bool,
    /// What was run.
    pub scenario: ScenarioInfo,
    /// Per message of the workload, by tag.
    pub messages: Vec<MessageResult>,
    /// Per collective of the workload, in order (the nccl-tests rows).
    pub collectives: Vec<CollectiveResult>,
    /// Per class of links (dimension or tier): bytes carried and utilization.
    pub link_classes: Vec<ClassUsage>,
    /// Totals over the run.
    pub totals: Totals,
    /// Per link, both directions.
    pub links: Vec<LinkReport>,
    /// Per host, its NIC's counters.
    pub nics: Vec<NicReport>,
    /// Per switch, its counters.
    pub switches: Vec<SwitchReport>,
    /// A training workload's iteration (only with `workload.chakra`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub training: Option<crate::training::TrainingReport>,
    /// Injected faults: what each did (only with `faults:`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub faults: Option<crate::faults::FaultsReport>,
    /// Real programs' traffic, when the run was an emulation (`fabemu emulate`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub emulation: Option<crate::emulate::EmulationReport>,
    /// At flow fidelity, the switch ports where senders without congestion control would
    /// have queued beyond the buffer's threshold (the packet level would pause or drop there,
    /// and the flow-level figures are too early); absent when there are none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub flow_limits: Vec<crate::flow::FlowLimit>,
    /// Invariant checks.
    pub invariants: Invariants,
    /// Latency distributions (percentiles).
    pub latency: crate::observe::histograms::Latencies,
    /// Machine- and thread-dependent figures (excluded from determinism comparisons).
    pub host: HostInfo,
    /// How a run over MPI ranks shared the work (absent on threads; with `host`, the only
    /// part of the report that differs between the two).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mpi: Option<MpiInfo>,
}

/// How a run over MPI ranks shared the work.
#[derive(Debug, Serialize)]
pub struct MpiInfo {
    /// Ranks.
    pub ranks: usize,
    /// Threads per rank.
    pub threads_per_rank: usize,
    /// `groups`: whole groups of the fabric (pods, leaves with their hosts, slices of the
    /// last dimension) per rank; `engine`: the engine's partitions cut into blocks.
    pub placement: &'static str,
    /// Partitions, all ranks together.
    pub partitions: usize,
    /// Window length (the lookahead, ps).
    pub lookahead_ps: u64,
    /// Windows run.
    pub windows: u64,
    /// Frames sent from one rank to another, in all.
    pub frames_crossing_ranks: u64,
    /// The same per window.
    pub frames_crossing_ranks_per_window: f64,
    /// Events per window, all ranks together.
    pub events_per_window: f64,
}

/// The scenario's identity.
#[derive(Debug, Serialize)]
pub struct ScenarioInfo {
    /// Its name, if it has one.
    pub name: Option<String>,
    /// Seed used.
    pub seed: u64,
    /// `data` or `timing`.
    pub mode: Mode,
    /// `packet` or `flow`: how finely the network was emulated.
    pub fidelity: Fidelity,
    /// Host count.
    pub hosts: usize,
    /// Switch count.
    pub switches: usize,
    /// Link count.
    pub links: usize,
    /// The kind of fabric (`explicit`, `star`, `ring`, `leaf-spine`, `fat-tree`, `torus`,
    /// `multi-dimensional`).
    pub fabric: String,
    /// The `--set PATH=VALUE` overrides applied to the file, in order (empty without).
    pub overrides: Vec<String>,
}

/// One message's fate.
#[derive(Debug, Serialize)]
pub struct MessageResult {
    /// Workload-wide number.
    pub tag: u64,
    /// Sender's name.
    pub src: String,
    /// Receiver's name.
    pub dst: String,
    /// Size.
    pub size_bytes: u64,
    /// When it was posted.
    pub start_ps: u64,
    /// When its last byte reached the receiver.
    pub delivered_ps: Option<u64>,
    /// When the sender saw it acknowledged.
    pub acked_ps: Option<u64>,
    /// delivered − start.
    pub completion_time_ps: Option<u64>,
    /// size × 8 / completion time.
    pub goodput_gbps: Option<f64>,
    /// Data mode: received bytes equal sent bytes.
    pub data_ok: Option<bool>,
}

/// Totals.
#[derive(Debug, Default, Serialize)]
pub struct Totals {
    /// Messages in the workload.
    pub messages: usize,
    /// Messages delivered and acknowledged.
    pub messages_completed: usize,
    /// Payload bytes delivered.
    pub bytes_delivered: u64,
    /// Data packets sent by NICs (with retransmissions).
    pub data_packets_sent: u64,
    /// ACK and NAK frames sent.
    pub control_packets_sent: u64,
    /// Frames over links (one frame over one link = one hop).
    pub packet_hops: u64,
    /// Frames dropped by switches (buffer full, no route, TTL) and by hosts (relay or receive
    /// buffer full).
    pub drops: u64,
    /// Frames dropped on lossless (PFC) priorities: always an invariant violation.
    pub lossless_drops: u64,
    /// PFC XOFF frames sent by switches and NICs (first pauses and refreshes: frames that
    /// pause some priority).
    pub xoff_frames_sent: u64,
    /// PFC XON frames sent by switches and NICs (quanta 0: resume).
    pub xon_frames_sent: u64,
    /// Frames marked CE by switches.
    pub ecn_marked: u64,
    /// CNPs sent by NICs (DCQCN notification points).
    pub cnps_sent: u64,
    /// Time transmitters spent paused by PFC, summed over switch egress (port, priority) and
    /// NIC ports.
    pub paused_time_ps: u64,
    /// Data packets retransmitted.
    pub retransmitted_packets: u64,
    /// Payload bytes retransmitted.
    pub retransmitted_bytes: u64,
    /// Retransmission timeouts.
    pub timeouts: u64,
    /// Events handled.
    pub events: u64,
    /// Time of the last event (can include retransmission timers that fire after the traffic).
    pub simulated_time_ps: u64,
    /// When the last message was delivered and acknowledged (the workload's makespan); link
    /// utilization is relative to it.
    pub completion_time_ps: u64,
    /// Mean one-way latency of data packets (NIC to NIC).
    pub mean_packet_latency_ps: u64,
}

/// One direction of a link.
#[derive(Debug, Serialize)]
pub struct Direction {
    /// Frames sent.
    pub tx_packets: u64,
    /// Wire bytes sent (frames + Ethernet overhead).
    pub tx_wire_bytes: u64,
    /// Busy time / the workload's completion time (or the simulated time when nothing completed).
    pub utilization: f64,
    /// Frames an injected fault lost in this direction (link or node down, random loss);
    /// absent when none.
    #[serde(skip_serializing_if = "is_zero")]
    pub lost: u64,
    /// Frames an injected fault corrupted in this direction (discarded by the receiver's
    /// frame check); absent when none.
    #[serde(skip_serializing_if = "is_zero")]
    pub corrupted: u64,
}

fn is_zero(x: &u64) -> bool {
    *x == 0
}

/// A link and its two directions.
#[derive(Debug, Serialize)]
pub struct LinkReport {
    /// One end.
    pub a: String,
    /// Other end.
    pub b: String,
    /// What the link is part of: `dim0`, `dim1`, ... (multi-dimensional fabrics), a tier
    /// (`host`, `leaf-spine`, `edge-aggregation`, `aggregation-core`), or `explicit`.
    pub class: String,
    /// Bandwidth.
    pub bandwidth_bps: u64,
    /// Latency.
    pub latency_ps: u64,
    /// a → b.
    pub a_to_b: Direction,
    /// b → a.
    pub b_to_a: Direction,
}

/// A host's NIC counters.
#[derive(Debug, Serialize)]
pub struct NicReport {
    /// Host name.
    pub name: String,
    /// Counters.
    #[serde(flatten)]
    pub stats: HostStats,
    /// DCQCN: per queue pair whose rate was ever cut, its rate over time.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub qp_rates: Vec<QpRate>,
}

/// One queue pair's DCQCN rate: a summary in the JSON (its size does not grow with the run),
/// the decimated history in `--out DIR/qp_rates.csv`.
#[derive(Debug, Serialize)]
pub struct QpRate {
    /// The peer host.
    pub peer: String,
    /// The rate at the end of the run (null: back at line rate).
    pub final_rate_bps: Option<u64>,
    /// Rate changes.
    pub rate_changes: u64,
    /// Changes that lowered the rate.
    pub cuts: u64,
    /// Lowest rate reached.
    pub min_rate_bps: Option<u64>,
    /// Time-weighted mean rate from the first cut to the last change (including the recovery
    /// toward line rate after the traffic, while the rate timer ran).
    pub mean_rate_bps: Option<u64>,
    /// Samples kept in the history (at most `nic.cc.dcqcn.rate_history`).
    pub history_samples: usize,
    /// Smallest spacing of the kept samples (0: every change kept).
    pub history_resolution_ps: u64,
    /// `[time_ps, rate_bps]` kept, in time order, ending with the last change (for the CSV;
    /// not in the JSON).
    #[serde(skip)]
    pub samples: Vec<[u64; 2]>,
}

/// A switch's counters.
#[derive(Debug, Serialize)]
pub struct SwitchReport {
    /// Switch name.
    pub name: String,
    /// Whole-switch counters.
    #[serde(flatten)]
    pub stats: SwitchStats,
    /// Frames left in queues at the end.
    pub stranded_packets: usize,
    /// Frames sent while a smaller rank waited in the same PIFO (PIFO-tree ports only).
    pub priority_inversions: u64,
    /// Per egress port.
    pub ports: Vec<PortReport>,
}

/// One egress port of a switch.
#[derive(Debug, Serialize)]
pub struct PortReport {
    /// Counters.
    #[serde(flatten)]
    pub stats: SwitchPortStats,
    /// Per class (PIFO-tree leaf): frames, bytes, queueing delay, drops; empty for FIFO ports.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub classes: Vec<ClassReport>,
}

/// The links of one class (a dimension `dimN`, a tier, or `explicit`) over the run.
#[derive(Debug, Serialize)]
pub struct ClassUsage {
    /// The class.
    pub class: String,
    /// Links in it.
    pub links: usize,
    /// Sum of both directions' bandwidth over its links.
    pub capacity_bps: u64,
    /// Wire bytes sent over its links (both directions).
    pub tx_wire_bytes: u64,
    /// tx_wire_bytes x 8 / (capacity x completion time): the share of the class's capacity the
    /// workload used from time zero to its completion.
    pub utilization: f64,
}

/// Invariant checks; any violation makes the run exit with code 3.
#[derive(Debug, Serialize)]
pub struct Invariants {
    /// True when every check passed.
    pub ok: bool,
    /// What failed, in words.
    pub violations: Vec<String>,
}

/// Figures that depend on the machine and thread count.
#[derive(Debug, Serialize)]
pub struct HostInfo {
    /// Wall-clock time of the run (emulation only).
    pub wall_time_s: f64,
    /// Threads asked for.
    pub threads: usize,
    /// Partitions used.
    pub partitions: usize,
    /// Lookahead between partitions (null with one partition).
    pub lookahead_ps: Option<u64>,
    /// Synchronization windows.
    pub windows: u64,
    /// Events per wall second.
    pub events_per_second: f64,
    /// Packet-hops per wall second.
    pub packet_hops_per_second: f64,
}
