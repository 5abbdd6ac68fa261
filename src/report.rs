//! What a run reports: the JSON report (every figure, units in field names), the readable
//! summary, and the invariant checks that decide exit code 3.
//!
//! Everything outside the top-level `"host"` object is a function of the scenario and seed
//! only; `"host"` holds what depends on the machine and the thread count.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::time::Duration;

use fabemu_fabric::host::HostStats;
use fabemu_fabric::units::{ByteSize, Time};
use fabemu_switch::egress::ClassReport;
use fabemu_switch::{SwitchPortStats, SwitchStats};
use serde::Serialize;

use crate::collective::{self, CollectiveResult};
use crate::scenario::{Fidelity, Mode, Source};
use crate::world::{Finished, Node};

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
    /// Invariant checks.
    pub invariants: Invariants,
    /// Latency distributions (percentiles).
    pub latency: crate::observe::histograms::Latencies,
    /// Machine- and thread-dependent figures (excluded from determinism comparisons).
    pub host: HostInfo,
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

/// Builds the report of a finished run.
pub fn build(src: &Source, fin: &Finished, threads: usize, wall: Duration) -> Report {
    let g = &fin.graph;
    let out = &fin.output;
    let host_name = |rank: u32| {
        g.host_at(rank as usize)
            .map(|id| g.node(id).name.clone())
            .unwrap_or_else(|| format!("host{rank}"))
    };
    // (receiver, sender, imm) -> (delivered, data_ok)
    let mut deliveries: HashMap<(u32, u32, u32), (Time, Option<bool>)> = HashMap::new();
    let mut acks: HashMap<u64, Time> = HashMap::new();
    let mut totals = Totals::default();
    let mut nics = Vec::new();
    let mut switches = Vec::new();
    let mut latency_sum = 0u128;
    let mut invalid = 0u64;
    let mut qps_failed = 0u64;
    let mut length_mismatches = 0u64;
    for (id, actor) in out.actors.iter().enumerate() {
        let name = g.node(id).name.clone();
        match actor {
            Node::Host(h) => {
                let rank = g.host_index(id).unwrap_or(0) as u32;
                for r in &h.app.messages.received {
                    deliveries.insert((rank, r.src, r.imm), (r.delivered_at, r.data_ok));
                }
                for s in &h.app.messages.sends {
                    if let Some(t) = s.acked_at {
                        acks.insert(s.spec.tag, t);
                    }
                }
                let st = &h.nic.stats;
                totals.data_packets_sent += st.data_packets_sent;
                totals.control_packets_sent += st.acks_sent + st.naks_sent;
                totals.retransmitted_packets += st.retransmitted_packets;
                totals.retransmitted_bytes += st.retransmitted_bytes;
                totals.timeouts += st.timeouts;
                totals.drops += st.relay_dropped + st.rx_buffer_dropped;
                totals.xoff_frames_sent += st.pause_frames_sent - st.xon_frames_sent;
                totals.xon_frames_sent += st.xon_frames_sent;
                totals.cnps_sent += st.cnps_sent;
                totals.paused_time_ps += st.paused_time_ps;
                latency_sum += st.latency_sum_ps as u128;
                invalid += st.dropped_invalid;
                qps_failed += st.qps_failed;
                length_mismatches += st.length_mismatches;
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
                        QpRate {
                            peer: host_name(q.peer),
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
                nics.push(NicReport {
                    name,
                    stats: st.clone(),
                    qp_rates,
                });
            }
            Node::Switch(s) => {
                totals.drops += s.dropped_packets()
                    + s.stats.no_route
                    + s.stats.ttl_expired
                    + s.stats.malformed;
                invalid += s.stats.tx_refused;
                totals.lossless_drops += s.stats.lossless_drops;
                totals.xoff_frames_sent += s.stats.pause_frames_sent - s.stats.xon_frames_sent;
                totals.xon_frames_sent += s.stats.xon_frames_sent;
                totals.ecn_marked += s.stats.ecn_marked;
                totals.paused_time_ps += s
                    .port_stats
                    .iter()
                    .flat_map(|p| p.priorities.iter())
                    .map(|p| p.paused_time_ps)
                    .sum::<u64>();
                switches.push(SwitchReport {
                    name,
                    stats: s.stats.clone(),
                    stranded_packets: s.queued_packets(),
                    priority_inversions: s.priority_inversions(),
                    ports: s
                        .port_stats
                        .iter()
                        .cloned()
                        .zip(s.port_classes())
                        .map(|(stats, classes)| PortReport { stats, classes })
                        .collect(),
                });
            }
        }
    }
    let received_packets: u64 = nics.iter().map(|n| n.stats.data_packets_received).sum();
    totals.mean_packet_latency_ps = (latency_sum / received_packets.max(1) as u128) as u64;

    let mut violations = Vec::new();
    let mut messages = Vec::with_capacity(fin.messages.len());
    let mut undelivered = 0usize;
    let mut corrupted = 0usize;
    for m in &fin.messages {
        let d = deliveries.get(&(m.dst, m.src, m.tag as u32)).copied();
        let acked = acks.get(&m.tag).copied();
        let delivered = d.map(|x| x.0);
        let ct = delivered.map(|t| t.saturating_sub(m.start));
        let data_ok = d.and_then(|x| x.1);
        if delivered.is_none() || acked.is_none() {
            undelivered += 1;
        } else {
            let last = delivered.max(acked).map_or(0, Time::ps);
            totals.completion_time_ps = totals.completion_time_ps.max(last);
            totals.messages_completed += 1;
            totals.bytes_delivered += m.len;
        }
        if data_ok == Some(false) {
            corrupted += 1;
        }
        messages.push(MessageResult {
            tag: m.tag,
            src: host_name(m.src),
            dst: host_name(m.dst),
            size_bytes: m.len,
            start_ps: m.start.ps(),
            delivered_ps: delivered.map(Time::ps),
            acked_ps: acked.map(Time::ps),
            completion_time_ps: ct.map(Time::ps),
            goodput_gbps: ct
                .filter(|t| t.ps() > 0)
                .map(|t| m.len as f64 * 8.0 / t.as_secs_f64() / 1e9),
            data_ok,
        });
    }
    // Collectives: the ranks' records, by rank.
    let mut exec_errors = Vec::new();
    let records: Vec<Vec<&fabemu_collectives::JobRecord>> = out
        .actors
        .iter()
        .filter_map(|a| match a {
            Node::Host(h) => {
                exec_errors.extend(h.app.collectives.errors.iter().map(|e| e.to_string()));
                Some(h.app.collectives.records().collect())
            }
            Node::Switch(_) => None,
        })
        .collect();
    let collectives = collective::results(&fin.collectives, &records);
    for (j, c) in collectives.iter().enumerate() {
        let what = format!(
            "collective {j} ({} {}, {})",
            c.op,
            ByteSize(c.size_bytes),
            c.algorithm
        );
        match c.end_ps {
            Some(end) => totals.completion_time_ps = totals.completion_time_ps.max(end),
            None => {
                let why = if out.stats.stopped_at_limit {
                    format!(
                        " (the run reached `until` = {} with work pending)",
                        src.scenario.until
                    )
                } else {
                    String::new()
                };
                violations.push(format!(
                    "{what} never finished on {} of {} ranks{why}",
                    c.ranks - c.finished_ranks,
                    c.ranks
                ))
            }
        }
        if let Some(w) = c.wrong.filter(|&w| w > 0) {
            violations.push(format!("{what} produced {w} wrong elements"));
        }
    }
    let training = fin.training.as_ref().map(|info| {
        // The trace's jobs follow the scenario's collectives, numbered per host.
        let results = collective::results_with(&info.collectives, |k, h| {
            let j = info.job_base + info.slots.get(k).copied()?;
            records.get(h)?.get(j).copied()
        });
        let scheds: Vec<Option<&fabemu_workload::RankScheduler>> = out
            .actors
            .iter()
            .filter_map(|a| match a {
                Node::Host(h) => Some(h.app.training.as_ref()),
                Node::Switch(_) => None,
            })
            .collect();
        for s in scheds.iter().flatten() {
            exec_errors.extend(s.errors.iter().cloned());
        }
        crate::training::report(info, &scheds, results)
    });
    if let Some(t) = &training {
        if let Some(it) = t.iteration_time_ps {
            totals.completion_time_ps = totals.completion_time_ps.max(it);
        }
        for (j, c) in t.collectives.iter().enumerate() {
            if let Some(w) = c.wrong.filter(|&w| w > 0) {
                violations.push(format!(
                    "training collective {j} ({} {}) produced {w} wrong elements",
                    c.op,
                    ByteSize(c.size_bytes)
                ));
            }
        }
        if !t.waiting.is_empty() {
            let why = if out.stats.stopped_at_limit {
                format!(
                    " (the run reached `until` = {} with work pending)",
                    src.scenario.until
                )
            } else {
                " (deadlock)".to_string()
            };
            violations.push(format!("the training iteration did not finish{why}"));
            violations.extend(t.waiting.iter().take(10).cloned());
            if t.waiting.len() > 10 {
                violations.push(format!("... and {} more", t.waiting.len() - 10));
            }
        }
    }
    let shown = exec_errors.len().min(5);
    for e in &exec_errors[..shown] {
        violations.push(e.clone());
    }
    if exec_errors.len() > shown {
        violations.push(format!(
            "... and {} more collective errors",
            exec_errors.len() - shown
        ));
    }
    totals.messages = fin.messages.len();
    totals.packet_hops = out.stats.packet_hops;
    totals.events = out.stats.events;
    totals.simulated_time_ps = out.stats.end_time.ps();

    if undelivered > 0 {
        let why = if qps_failed > 0 {
            format!(
                " ({qps_failed} queue pairs gave up after {} retransmission timeouts in a row)",
                src.scenario.nic.retry_limit
            )
        } else if out.stats.halted_at.is_some() {
            " (the run was stopped by a PFC deadlock)".to_string()
        } else if out.stats.stopped_at_limit {
            format!(
                " (the run reached `until` = {} with work pending)",
                src.scenario.until
            )
        } else {
            String::new()
        };
        violations.push(format!(
            "{undelivered} of {} messages never finished{why}",
            fin.messages.len()
        ));
    }
    if corrupted > 0 {
        violations.push(format!(
            "{corrupted} messages arrived with data different from what was sent"
        ));
    }
    if length_mismatches > 0 {
        violations.push(format!(
            "{length_mismatches} messages arrived with a length different from the one announced"
        ));
    }
    if totals.lossless_drops > 0 {
        violations.push(format!(
            "{} frames were dropped on lossless priorities (PFC headroom too small, or a \
             neighbour that does not honour pause frames)",
            totals.lossless_drops
        ));
    }
    if let Some(at) = out.stats.halted_at {
        violations.push(match deadlock_cycle(fin) {
            Some(cycle) => format!("PFC deadlock detected at {at}: {cycle}"),
            None => format!(
                "the run was stopped at {at}: a switch found egress queues paused with frames \
                 for longer than `deadlock_timeout` (a PFC deadlock)"
            ),
        });
    }
    if src.scenario.lossless && totals.drops > 0 {
        violations.push(format!(
            "the scenario is lossless but {} frames were dropped",
            totals.drops
        ));
    }
    if invalid > 0 {
        violations.push(format!(
            "{invalid} frames were lost inside fabemu (unroutable at a host, malformed, or refused by a port)"
        ));
    }

    let end = if totals.completion_time_ps > 0 {
        totals.completion_time_ps
    } else {
        out.stats.end_time.ps()
    }
    .max(1) as f64;
    let links = g
        .links()
        .iter()
        .enumerate()
        .map(|(li, l)| {
            let dir = |node: usize| {
                let port = g.ports(node).iter().position(|p| p.link == li);
                let s = port
                    .and_then(|p| out.port_stats.get(node).and_then(|v| v.get(p)))
                    .copied()
                    .unwrap_or_default();
                Direction {
                    tx_packets: s.tx_packets,
                    tx_wire_bytes: s.tx_wire_bytes,
                    utilization: s.busy.ps() as f64 / end,
                }
            };
            LinkReport {
                a: g.node(l.a).name.clone(),
                b: g.node(l.b).name.clone(),
                class: l.class.to_string(),
                bandwidth_bps: l.bandwidth_bps,
                latency_ps: l.latency_ps,
                a_to_b: dir(l.a),
                b_to_a: dir(l.b),
            }
        })
        .collect::<Vec<LinkReport>>();
    let mut link_classes: Vec<ClassUsage> = Vec::new();
    let mut classes: Vec<_> = g.links().iter().map(|l| l.class).collect();
    classes.sort();
    classes.dedup();
    for class in classes {
        let (mut n, mut cap, mut bytes) = (0usize, 0u64, 0u64);
        for (l, rep) in g.links().iter().zip(&links) {
            if l.class == class {
                n += 1;
                cap = cap.saturating_add(l.bandwidth_bps.saturating_mul(2));
                bytes += rep.a_to_b.tx_wire_bytes + rep.b_to_a.tx_wire_bytes;
            }
        }
        link_classes.push(ClassUsage {
            class: class.to_string(),
            links: n,
            capacity_bps: cap,
            tx_wire_bytes: bytes,
            utilization: bytes as f64 * 8.0 / (cap.max(1) as f64 * end / 1e12),
        });
    }

    let secs = wall.as_secs_f64().max(1e-9);
    let latency = crate::observe::histograms::latencies(fin, &messages);
    Report {
        interrupted: out.cancelled,
        fabemu_version: env!("CARGO_PKG_VERSION"),
        scenario: ScenarioInfo {
            name: src.scenario.name.clone(),
            seed: src.scenario.seed,
            mode: src.scenario.mode,
            fidelity: src.scenario.fidelity,
            hosts: g.host_count(),
            switches: g.nodes().len() - g.host_count(),
            links: g.links().len(),
            fabric: g.fabric().name().to_string(),
            overrides: src.overrides.iter().map(|o| o.text.clone()).collect(),
        },
        messages,
        collectives,
        link_classes,
        totals,
        links,
        nics,
        switches,
        training,
        invariants: Invariants {
            ok: violations.is_empty(),
            violations,
        },
        latency,
        host: HostInfo {
            wall_time_s: wall.as_secs_f64(),
            threads,
            partitions: out.layout.partitions,
            lookahead_ps: (out.layout.partitions > 1).then_some(out.layout.lookahead.ps()),
            windows: out.layout.windows,
            events_per_second: out.stats.events as f64 / secs,
            packet_hops_per_second: out.stats.packet_hops as f64 / secs,
        },
    }
}

/// The readable summary.
pub fn summary(r: &Report) -> String {
    let mut s = String::new();
    let sc = &r.scenario;
    let flow = sc.fidelity == Fidelity::Flow;
    let _ = writeln!(
        s,
        "fabemu {} — {}: {} hosts, {} switches, {} links; {} mode, seed {}{}",
        r.fabemu_version,
        sc.name.as_deref().unwrap_or("scenario"),
        sc.hosts,
        sc.switches,
        sc.links,
        match sc.mode {
            Mode::Data => "data",
            Mode::Timing => "timing",
        },
        sc.seed,
        if flow { ", flow fidelity" } else { "" }
    );
    if !sc.overrides.is_empty() {
        let _ = writeln!(s, "overrides: --set {}", sc.overrides.join(" --set "));
    }
    let _ = writeln!(s);
    if !r.collectives.is_empty() {
        s.push_str(&collective::table(&r.collectives));
        let dims: Vec<&ClassUsage> = r
            .link_classes
            .iter()
            .filter(|c| c.class.starts_with("dim") || r.link_classes.len() > 1)
            .collect();
        if !dims.is_empty() {
            let _ = writeln!(
                s,
                "# link use: {}",
                dims.iter()
                    .map(|c| format!(
                        "{} {:.1} MB ({:.1}% of capacity)",
                        c.class,
                        c.tx_wire_bytes as f64 / 1e6,
                        c.utilization * 100.0
                    ))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
        let _ = writeln!(s);
    }
    if !r.messages.is_empty() {
        messages_table(&mut s, r);
    }
    if let Some(t) = &r.training {
        s.push_str(&crate::training::summary(t));
        let _ = writeln!(s);
    }
    let t = &r.totals;
    let verified = if sc.mode == Mode::Data {
        " (data verified)"
    } else {
        ""
    };
    let delivered = if t.messages > 0 {
        format!(
            "{}/{} messages delivered{}, {} delivered; ",
            t.messages_completed,
            t.messages,
            if corrupted_free(r) { verified } else { "" },
            ByteSize(t.bytes_delivered),
        )
    } else {
        String::new()
    };
    let _ = writeln!(
        s,
        "Totals: {delivered}{} data packets, {} drops, {} retransmitted packets, {} timeouts",
        t.data_packets_sent, t.drops, t.retransmitted_packets, t.timeouts
    );
    if flow {
        // No packets ran: the counts are those the messages' packets would make.
        let _ = writeln!(
            s,
            "        {} packet-hops (as the packets would cross), {} events, completion time {}",
            t.packet_hops,
            t.events,
            Time(t.completion_time_ps)
        );
    } else {
        let _ = writeln!(
            s,
            "        {} packet-hops, {} events, completion time {}, mean packet latency {}",
            t.packet_hops,
            t.events,
            Time(t.completion_time_ps),
            Time(t.mean_packet_latency_ps)
        );
    }
    if t.xoff_frames_sent + t.xon_frames_sent + t.ecn_marked + t.cnps_sent + t.lossless_drops > 0 {
        let _ = writeln!(
            s,
            "        {} XOFF and {} XON pause frames ({} paused in total), {} ECN marks, {} CNPs, {} lossless drops",
            t.xoff_frames_sent,
            t.xon_frames_sent,
            Time(t.paused_time_ps),
            t.ecn_marked,
            t.cnps_sent,
            t.lossless_drops
        );
    }
    s.push_str(&crate::observe::histograms::summary_lines(&r.latency));
    let h = &r.host;
    if flow {
        let _ = writeln!(
            s,
            "Run:    wall {:.3} s at flow fidelity (one thread), {:.2} M events/s",
            h.wall_time_s,
            h.events_per_second / 1e6
        );
    } else {
        let _ = writeln!(
            s,
        "Run:    wall {:.3} s on {} thread(s) ({} partition(s)), {:.2} M events/s, {:.2} M packet-hops/s",
        h.wall_time_s,
        h.threads,
        h.partitions,
        h.events_per_second / 1e6,
        h.packet_hops_per_second / 1e6
    );
    }
    if !r.invariants.ok {
        let _ = writeln!(s);
        for v in &r.invariants.violations {
            let _ = writeln!(s, "INVARIANT VIOLATED: {v}");
        }
    }
    s
}

fn messages_table(s: &mut String, r: &Report) {
    let _ = writeln!(
        *s,
        "{:>6}  {:<10} {:<10} {:>10} {:>12} {:>14} {:>13}",
        "msg", "src", "dst", "size", "start", "completion", "goodput"
    );
    let show = if r.messages.len() > 40 {
        20
    } else {
        r.messages.len()
    };
    for m in r.messages.iter().take(show) {
        let ct = m
            .completion_time_ps
            .map_or("unfinished".to_string(), |t| Time(t).to_string());
        let gp = m.goodput_gbps.map_or("-".to_string(), |g| rate(g * 1e9));
        let _ = writeln!(
            *s,
            "{:>6}  {:<10} {:<10} {:>10} {:>12} {:>14} {:>13}{}",
            m.tag,
            m.src,
            m.dst,
            ByteSize(m.size_bytes).to_string(),
            Time(m.start_ps).to_string(),
            ct,
            gp,
            if m.data_ok == Some(false) {
                "  DATA MISMATCH"
            } else {
                ""
            }
        );
    }
    if show < r.messages.len() {
        let cts: Vec<u64> = r
            .messages
            .iter()
            .filter_map(|m| m.completion_time_ps)
            .collect();
        let _ = writeln!(
            *s,
            "{:>6}  ... {} more (all in the JSON report)",
            "",
            r.messages.len() - show
        );
        if !cts.is_empty() {
            let mean = cts.iter().map(|&c| c as u128).sum::<u128>() / cts.len() as u128;
            let _ = writeln!(
                *s,
                "{:>6}  completion time: min {}, mean {}, max {}",
                "",
                Time(cts.iter().copied().min().unwrap_or(0)),
                Time(mean as u64),
                Time(cts.iter().copied().max().unwrap_or(0))
            );
        }
    }
    let _ = writeln!(s);
}

/// The cycle of paused ports when a PFC deadlock stopped the run: switch A points at switch B
/// when one of A's egress ports toward B is paused and holds frames. Returns the first cycle
/// found (in node order) as `A port p -> B port q -> ... -> A (priority 3)`.
fn deadlock_cycle(fin: &Finished) -> Option<String> {
    let g = &fin.graph;
    let n = fin.output.actors.len();
    // blocked[a] = (port, peer, priorities) of a's egress ports paused with frames queued.
    let mut blocked: Vec<Vec<(usize, usize, u8)>> = vec![Vec::new(); n];
    for (a, actor) in fin.output.actors.iter().enumerate() {
        let Node::Switch(sw) = actor else { continue };
        let stalled = sw.stalled();
        for (port, info) in g.ports(a).iter().enumerate() {
            let mut prios = 0u8;
            for p in 0..8u8 {
                if sw.paused(port) & (1 << p) != 0 && sw.mmu().egress_bytes(port, p) > 0 {
                    prios |= 1 << p;
                }
            }
            for q in stalled.iter().filter(|q| q.port == port) {
                prios |= 1 << q.priority;
            }
            if prios != 0 {
                blocked[a].push((port, info.peer, prios));
            }
        }
    }
    // Depth-first search for a cycle in the "waits for" graph.
    let mut state = vec![0u8; n]; // 0 new, 1 on the path, 2 done
    let mut path: Vec<(usize, usize, u8)> = Vec::new(); // (node, port taken, priorities)
    for start in 0..n {
        if state[start] != 0 || blocked[start].is_empty() {
            continue;
        }
        // Iterative DFS: stack of (node, next edge index).
        let mut stack = vec![(start, 0usize)];
        state[start] = 1;
        while let Some(&mut (v, ref mut i)) = stack.last_mut() {
            if let Some(&(port, w, prios)) = blocked[v].get(*i) {
                *i += 1;
                path.truncate(stack.len() - 1);
                path.push((v, port, prios));
                if state[w] == 1 {
                    let from = path.iter().position(|&(x, _, _)| x == w)?;
                    let cyc = &path[from..];
                    let mut text = cyc
                        .iter()
                        .map(|&(x, port, _)| format!("{} port {port}", g.node(x).name))
                        .collect::<Vec<_>>()
                        .join(" -> ");
                    let prios = cyc.iter().fold(0u8, |acc, &(_, _, p)| acc | p);
                    let list = (0..8)
                        .filter(|p| prios & (1 << p) != 0)
                        .map(|p| p.to_string())
                        .collect::<Vec<_>>()
                        .join(", ");
                    text.push_str(&format!(
                        " -> {} (each port paused by the next switch with frames queued; \
                         priority {list})",
                        g.node(w).name
                    ));
                    return Some(text);
                }
                if state[w] == 0 && !blocked[w].is_empty() {
                    state[w] = 1;
                    stack.push((w, 0));
                }
            } else {
                state[v] = 2;
                stack.pop();
            }
        }
    }
    None
}

/// A rate in bit/s with a unit that keeps 3 to 5 significant digits (`12.50 Gb/s`,
/// `3.20 Mb/s`): a Mb/s-scale flow must not read `0.00 Gb/s`.
pub fn rate(bps: f64) -> String {
    let (div, unit) = [(1e12, "Tb/s"), (1e9, "Gb/s"), (1e6, "Mb/s"), (1e3, "Kb/s")]
        .into_iter()
        .find(|&(d, _)| bps.abs() >= d)
        .unwrap_or((1.0, "b/s"));
    format!("{:.2} {unit}", bps / div)
}

fn corrupted_free(r: &Report) -> bool {
    r.messages.iter().all(|m| m.data_ok != Some(false))
}
