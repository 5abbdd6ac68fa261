//! Building the [`Report`] of a finished run from the facts of its actors
//! ([`super::facts`]) and the engine's counters, in named steps: the NICs and switches, the
//! messages, the collectives, the training iteration, the run's invariants, the links, the
//! faults. The violations are collected as the steps go, in the report's order.

use std::collections::HashMap;
use std::time::Duration;

use fabemu_collectives::JobRecord;
use fabemu_fabric::units::{ByteSize, Time};
use fabemu_topologies::Graph;

use super::facts::{self, ActorFacts};
use super::invariants::deadlock_cycle;
use super::*;
use crate::collective;
use crate::scenario::Source;
use crate::training::Schedule;
use crate::world::Finished;

/// Builds the report of a finished run (the facts taken from its actors).
pub fn build(src: &Source, fin: &Finished, threads: usize, wall: Duration) -> Report {
    let facts = facts::of_all(&fin.output.actors);
    build_from(src, fin, &facts, threads, wall)
}

/// Figures summed over the NICs and switches, before they become the report's.
#[derive(Default)]
struct Devices {
    /// (receiver, sender, imm) -> (delivered, data_ok)
    deliveries: HashMap<(u32, u32, u32), (Time, Option<bool>)>,
    acks: HashMap<u64, Time>,
    totals: Totals,
    nics: Vec<NicReport>,
    switches: Vec<SwitchReport>,
    latency_sum: u128,
    invalid: u64,
    qps_failed: u64,
    length_mismatches: u64,
}

/// A host's name by rank.
fn host_name(g: &Graph, rank: u32) -> String {
    g.host_at(rank as usize)
        .map(|id| g.node(id).name.clone())
        .unwrap_or_else(|| format!("host{rank}"))
}

/// Step 1: every NIC's and switch's counters, summed into the totals.
fn devices(g: &Graph, facts: &[ActorFacts]) -> Devices {
    let mut d = Devices::default();
    for (id, actor) in facts.iter().enumerate() {
        let name = g.node(id).name.clone();
        match actor {
            ActorFacts::Host(h) => {
                let rank = g.host_index(id).unwrap_or(0) as u32;
                for r in &h.received {
                    d.deliveries
                        .insert((rank, r.src, r.imm), (r.delivered_at, r.data_ok));
                }
                d.acks.extend(h.acked.iter().copied());
                let st = &h.stats;
                let t = &mut d.totals;
                t.data_packets_sent += st.data_packets_sent;
                t.control_packets_sent += st.acks_sent + st.naks_sent;
                t.retransmitted_packets += st.retransmitted_packets;
                t.retransmitted_bytes += st.retransmitted_bytes;
                t.timeouts += st.timeouts;
                t.drops += st.relay_dropped + st.rx_buffer_dropped + st.blackholed;
                t.xoff_frames_sent += st.pause_frames_sent - st.xon_frames_sent;
                t.xon_frames_sent += st.xon_frames_sent;
                t.cnps_sent += st.cnps_sent;
                t.paused_time_ps += st.paused_time_ps;
                d.latency_sum += st.latency_sum_ps as u128;
                d.invalid += st.dropped_invalid;
                d.qps_failed += st.qps_failed;
                d.length_mismatches += st.length_mismatches;
                let qp_rates = h
                    .qp_rates
                    .iter()
                    .map(|q| QpRate {
                        peer: host_name(g, q.peer),
                        final_rate_bps: q.final_rate_bps,
                        rate_changes: q.rate_changes,
                        cuts: q.cuts,
                        min_rate_bps: q.min_rate_bps,
                        mean_rate_bps: q.mean_rate_bps,
                        history_samples: q.history_samples,
                        history_resolution_ps: q.history_resolution_ps,
                        samples: q.samples.clone(),
                    })
                    .collect();
                d.nics.push(NicReport {
                    name,
                    stats: st.clone(),
                    qp_rates,
                });
            }
            ActorFacts::Switch(s) => {
                let stats = &s.stats;
                let t = &mut d.totals;
                t.drops += s.dropped_packets
                    + stats.no_route
                    + stats.blackholed
                    + stats.ttl_expired
                    + stats.malformed;
                d.invalid += stats.tx_refused;
                t.lossless_drops += stats.lossless_drops;
                t.xoff_frames_sent += stats.pause_frames_sent - stats.xon_frames_sent;
                t.xon_frames_sent += stats.xon_frames_sent;
                t.ecn_marked += stats.ecn_marked;
                t.paused_time_ps += s.paused_time_ps;
                d.switches.push(SwitchReport {
                    name,
                    stats: stats.clone(),
                    stranded_packets: s.queued_packets,
                    priority_inversions: s.priority_inversions,
                    ports: s
                        .ports
                        .iter()
                        .cloned()
                        .zip(s.classes.iter().cloned())
                        .map(|(stats, classes)| PortReport { stats, classes })
                        .collect(),
                });
            }
        }
    }
    let received_packets: u64 = d.nics.iter().map(|n| n.stats.data_packets_received).sum();
    d.totals.mean_packet_latency_ps = (d.latency_sum / received_packets.max(1) as u128) as u64;
    d
}

/// Messages that did not finish and that arrived with other data.
struct MessageCounts {
    undelivered: usize,
    corrupted: usize,
}

/// Step 2: every point-to-point message's result.
fn messages(fin: &Finished, d: &mut Devices) -> (Vec<MessageResult>, MessageCounts) {
    let g = &fin.graph;
    let mut results = Vec::with_capacity(fin.messages.len());
    let mut counts = MessageCounts {
        undelivered: 0,
        corrupted: 0,
    };
    let totals = &mut d.totals;
    for m in &fin.messages {
        let got = d.deliveries.get(&(m.dst, m.src, m.tag as u32)).copied();
        let acked = d.acks.get(&m.tag).copied();
        let delivered = got.map(|x| x.0);
        let ct = delivered.map(|t| t.saturating_sub(m.start));
        let data_ok = got.and_then(|x| x.1);
        if delivered.is_none() || acked.is_none() {
            counts.undelivered += 1;
        } else {
            let last = delivered.max(acked).map_or(0, Time::ps);
            totals.completion_time_ps = totals.completion_time_ps.max(last);
            totals.messages_completed += 1;
            totals.bytes_delivered += m.len;
        }
        if data_ok == Some(false) {
            counts.corrupted += 1;
        }
        results.push(MessageResult {
            tag: m.tag,
            src: host_name(g, m.src),
            dst: host_name(g, m.dst),
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
    (results, counts)
}

/// Step 3: the collectives' results from the ranks' records (`records[host]`), with the
/// violations of those that did not finish or produced wrong data.
fn collectives(
    src: &Source,
    fin: &Finished,
    records: &[Vec<&JobRecord>],
    totals: &mut Totals,
    violations: &mut Vec<String>,
) -> Vec<CollectiveResult> {
    let g = &fin.graph;
    let results = collective::results(&fin.collectives, records);
    for (j, c) in results.iter().enumerate() {
        let what = format!(
            "collective {j} ({} {}, {})",
            c.op,
            ByteSize(c.size_bytes),
            c.algorithm
        );
        match c.end_ps {
            Some(end) => totals.completion_time_ps = totals.completion_time_ps.max(end),
            None => {
                let why = if fin.output.cancelled || fin.output.stats.stopped_at_limit {
                    stopped_early(src, fin)
                } else {
                    String::new()
                };
                violations.push(format!(
                    "{what} never finished on {} of {} ranks{why}",
                    c.ranks - c.finished_ranks,
                    c.ranks
                ));
                if !src.scenario.faults.is_empty() {
                    // With faults, say who waits: the ranks that never finished, by host.
                    let waiting: Vec<String> = c
                        .rank_finish_ps
                        .iter()
                        .enumerate()
                        .filter(|(_, t)| t.is_none())
                        .map(|(r, _)| match c.hosts.as_ref().and_then(|h| h.get(r)) {
                            Some(h) => format!("rank {r} ({h})"),
                            None => format!("rank {r} ({})", host_name(g, r as u32)),
                        })
                        .collect();
                    violations.push(format!("{what}: waiting: {}", waiting.join(", ")));
                }
            }
        }
        if let Some(w) = c.wrong.filter(|&w| w > 0) {
            violations.push(format!("{what} produced {w} wrong elements"));
        }
    }
    results
}

/// Step 4: the training iteration, with its violations; the schedulers' errors join
/// `errors`.
fn training(
    src: &Source,
    fin: &Finished,
    facts: &[ActorFacts],
    records: &[Vec<&JobRecord>],
    totals: &mut Totals,
    violations: &mut Vec<String>,
    errors: &mut Vec<String>,
) -> Option<crate::training::TrainingReport> {
    let info = fin.training.as_ref()?;
    // The trace's jobs follow the scenario's collectives, numbered per host.
    let results = collective::results_with(&info.collectives, |k, h| {
        let j = info.job_base + info.slots.get(k).copied()?;
        records.get(h)?.get(j).copied()
    });
    let scheds: Vec<Option<Schedule<'_>>> = facts
        .iter()
        .filter_map(ActorFacts::host)
        .map(|h| {
            h.training.as_ref().map(|t| Schedule {
                nodes: &t.nodes,
                records: &t.records,
                unmatched: &t.unmatched,
            })
        })
        .collect();
    for h in facts.iter().filter_map(ActorFacts::host) {
        errors.extend(h.training.iter().flat_map(|t| t.errors.iter().cloned()));
    }
    let t = crate::training::report(info, &scheds, results);
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
        let why = if fin.output.cancelled || fin.output.stats.stopped_at_limit {
            stopped_early(src, fin)
        } else {
            " (deadlock)".to_string()
        };
        violations.push(format!("the training iteration did not finish{why}"));
        violations.extend(t.waiting.iter().take(10).cloned());
        if t.waiting.len() > 10 {
            violations.push(format!("... and {} more", t.waiting.len() - 10));
        }
    }
    Some(t)
}

/// Step 5: the run's own invariants, after those of the collectives and the training.
fn run_violations(
    src: &Source,
    fin: &Finished,
    facts: &[ActorFacts],
    d: &Devices,
    counts: &MessageCounts,
    violations: &mut Vec<String>,
) {
    let stats = &fin.output.stats;
    if counts.undelivered > 0 {
        let why = if d.qps_failed > 0 {
            format!(
                " ({} queue pairs gave up after {} retransmission timeouts in a row)",
                d.qps_failed, src.scenario.nic.retry_limit
            )
        } else if stats.halted_at.is_some() {
            " (the run was stopped by a PFC deadlock)".to_string()
        } else if fin.output.cancelled || stats.stopped_at_limit {
            stopped_early(src, fin)
        } else {
            String::new()
        };
        violations.push(format!(
            "{} of {} messages never finished{why}",
            counts.undelivered,
            fin.messages.len()
        ));
    }
    if !violations.is_empty() {
        violations.extend(crate::faults::failed_hosts(src, &fin.graph));
    }
    if counts.corrupted > 0 {
        violations.push(format!(
            "{} messages arrived with data different from what was sent",
            counts.corrupted
        ));
    }
    if d.length_mismatches > 0 {
        violations.push(format!(
            "{} messages arrived with a length different from the one announced",
            d.length_mismatches
        ));
    }
    if d.totals.lossless_drops > 0 {
        violations.push(format!(
            "{} frames were dropped on lossless priorities (PFC headroom too small, or a \
             neighbour that does not honour pause frames)",
            d.totals.lossless_drops
        ));
    }
    if let Some(at) = stats.halted_at {
        violations.push(match deadlock_cycle(&fin.graph, facts) {
            Some(cycle) => format!("PFC deadlock detected at {at}: {cycle}"),
            None => format!(
                "the run was stopped at {at}: a switch found egress queues paused with frames \
                 for longer than `deadlock_timeout` (a PFC deadlock)"
            ),
        });
    }
    if src.scenario.lossless && d.totals.drops > 0 {
        violations.push(format!(
            "the scenario is lossless but {} frames were dropped",
            d.totals.drops
        ));
    }
    if d.invalid > 0 {
        violations.push(format!(
            "{} frames were lost inside fabemu (unroutable at a host, malformed, or refused by a port)",
            d.invalid
        ));
    }
}

/// Step 6: every link's two directions, and the links by class; `end` is the time
/// utilization is measured over (ps).
fn links(fin: &Finished, end: f64) -> (Vec<LinkReport>, Vec<ClassUsage>) {
    let g = &fin.graph;
    let out = &fin.output;
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
                let f = port
                    .and_then(|p| {
                        out.faults
                            .ports
                            .binary_search_by_key(&(node as u32, p), |&(k, _)| k)
                            .ok()
                            .map(|i| out.faults.ports[i].1)
                    })
                    .unwrap_or_default();
                Direction {
                    tx_packets: s.tx_packets,
                    tx_wire_bytes: s.tx_wire_bytes,
                    utilization: s.busy.ps() as f64 / end,
                    lost: f.lost,
                    corrupted: f.corrupted,
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
    (links, link_classes)
}

/// Step 7: the faults section, with what the NICs measured of them: messages in flight and
/// delayed per entry (summed), and every loss recovery with the host that made it.
fn faults(
    src: &Source,
    fin: &Finished,
    facts: &[ActorFacts],
    d: &Devices,
) -> Option<crate::faults::FaultsReport> {
    let g = &fin.graph;
    let blackholed: Vec<(String, u64)> = d
        .switches
        .iter()
        .map(|s| (s.name.clone(), s.stats.blackholed))
        .chain(d.nics.iter().map(|n| (n.name.clone(), n.stats.blackholed)))
        .collect();
    let mut watched: Vec<(u64, u64)> = Vec::new();
    let mut recoveries = Vec::new();
    for (id, actor) in facts.iter().enumerate() {
        let (Some(h), Some(rank)) = (actor.host(), g.host_index(id)) else {
            continue;
        };
        if let Some(w) = &h.watch {
            for (k, &(a, b)) in w.messages.iter().enumerate() {
                if watched.len() <= k {
                    watched.resize(k + 1, (0, 0));
                }
                watched[k].0 += a;
                watched[k].1 += b;
            }
            recoveries.extend(w.recoveries.iter().map(|&r| (rank as u32, r)));
        }
    }
    crate::faults::FaultsReport::build(
        src,
        g,
        &fin.output.faults,
        &crate::faults::Measured {
            messages: &watched,
            recoveries: &recoveries,
        },
        &blackholed,
    )
}

/// Builds the report of a finished run from the facts of its actors (`facts[actor id]`), the
/// same whichever process ran each actor.
pub fn build_from(
    src: &Source,
    fin: &Finished,
    facts: &[ActorFacts],
    threads: usize,
    wall: Duration,
) -> Report {
    let g = &fin.graph;
    let out = &fin.output;
    let mut d = devices(g, facts);
    let (messages, counts) = messages(fin, &mut d);
    // Collectives: the ranks' records, by rank; their errors first among the executors'.
    let hosts: Vec<_> = facts.iter().filter_map(ActorFacts::host).collect();
    let records: Vec<Vec<&JobRecord>> = hosts.iter().map(|h| h.jobs.iter().collect()).collect();
    let mut exec_errors: Vec<String> = hosts
        .iter()
        .flat_map(|h| h.collective_errors.iter().cloned())
        .collect();
    let mut violations = Vec::new();
    let collectives = collectives(src, fin, &records, &mut d.totals, &mut violations);
    let training = training(
        src,
        fin,
        facts,
        &records,
        &mut d.totals,
        &mut violations,
        &mut exec_errors,
    );
    let shown = exec_errors.len().min(5);
    violations.extend(exec_errors[..shown].iter().cloned());
    if exec_errors.len() > shown {
        violations.push(format!(
            "... and {} more collective errors",
            exec_errors.len() - shown
        ));
    }
    let totals = &mut d.totals;
    totals.messages = fin.messages.len();
    totals.packet_hops = out.stats.packet_hops;
    totals.events = out.stats.events;
    totals.simulated_time_ps = out.stats.end_time.ps();
    run_violations(src, fin, facts, &d, &counts, &mut violations);

    let end = if d.totals.completion_time_ps > 0 {
        d.totals.completion_time_ps
    } else {
        out.stats.end_time.ps()
    }
    .max(1) as f64;
    let (links, link_classes) = links(fin, end);
    let latency = crate::observe::histograms::latencies(facts, &messages);
    let faults = faults(src, fin, facts, &d);
    let secs = wall.as_secs_f64().max(1e-9);
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
        totals: d.totals,
        links,
        nics: d.nics,
        switches: d.switches,
        training,
        faults,
        flow_limits: fin.flow_limits.clone(),
        emulation: None,
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
        mpi: None,
    }
}

/// Why work was left pending when the run stopped before it finished: interrupted (Ctrl-C,
/// SIGTERM) or at its time limit.
fn stopped_early(src: &Source, fin: &Finished) -> String {
    if fin.output.cancelled {
        return format!(
            " (the run was interrupted at simulated time {})",
            fin.output.stats.end_time
        );
    }
    match src.scenario.until {
        Some(t) => format!(" (the run reached `until` = {t} with work pending)"),
        None => format!(
            " (the run reached {}, the bound of a run without `until`, with work pending; set \
             `until` to run longer)",
            src.scenario.until()
        ),
    }
}
