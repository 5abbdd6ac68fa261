//! Building the [`Report`] of a finished run: one pass over the messages, NICs, switches and
//! links of the run's output, collecting the figures and the invariant violations.

use std::collections::HashMap;
use std::time::Duration;

use fabemu_fabric::units::{ByteSize, Time};

use super::invariants::deadlock_cycle;
use super::*;
use crate::collective;
use crate::scenario::Source;
use crate::world::{Finished, Node};

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
                totals.drops += st.relay_dropped + st.rx_buffer_dropped + st.blackholed;
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
                let stats = s.stats();
                totals.drops += s.dropped_packets()
                    + stats.no_route
                    + stats.blackholed
                    + stats.ttl_expired
                    + stats.malformed;
                invalid += stats.tx_refused;
                totals.lossless_drops += stats.lossless_drops;
                totals.xoff_frames_sent += stats.pause_frames_sent - stats.xon_frames_sent;
                totals.xon_frames_sent += stats.xon_frames_sent;
                totals.ecn_marked += stats.ecn_marked;
                totals.paused_time_ps += s
                    .port_counters()
                    .iter()
                    .flat_map(|p| p.priorities.iter())
                    .map(|p| p.paused_time_ps)
                    .sum::<u64>();
                switches.push(SwitchReport {
                    name,
                    stats,
                    stranded_packets: s.queued_packets(),
                    priority_inversions: s.priority_inversions(),
                    ports: s
                        .port_stats()
                        .into_iter()
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
                    reached_until(src)
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
                            None => format!("rank {r} ({})", host_name(r as u32)),
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
                Node::Host(h) => Some(h.app.training.as_deref()),
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
            reached_until(src)
        } else {
            String::new()
        };
        violations.push(format!(
            "{undelivered} of {} messages never finished{why}",
            fin.messages.len()
        ));
    }
    if !violations.is_empty() {
        violations.extend(crate::faults::failed_hosts(src, g));
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

    let secs = wall.as_secs_f64().max(1e-9);
    let latency = crate::observe::histograms::latencies(fin, &messages);
    let blackholed: Vec<(String, u64)> = switches
        .iter()
        .map(|s| (s.name.clone(), s.stats.blackholed))
        .chain(nics.iter().map(|n| (n.name.clone(), n.stats.blackholed)))
        .collect();
    // What the NICs measured of the faults: messages in flight and delayed per entry (summed),
    // and every loss recovery with the host that made it.
    let mut watched: Vec<(u64, u64)> = Vec::new();
    let mut recoveries = Vec::new();
    for (id, actor) in out.actors.iter().enumerate() {
        if let (Node::Host(h), Some(rank)) = (actor, g.host_index(id)) {
            if let Some(w) = h.nic.fault_watch() {
                for (k, (a, b)) in w.message_counts().into_iter().enumerate() {
                    if watched.len() <= k {
                        watched.resize(k + 1, (0, 0));
                    }
                    watched[k].0 += a;
                    watched[k].1 += b;
                }
                recoveries.extend(w.recoveries().into_iter().map(|r| (rank as u32, r)));
            }
        }
    }
    let faults = crate::faults::FaultsReport::build(
        src,
        g,
        &out.faults,
        &crate::faults::Measured {
            messages: &watched,
            recoveries: &recoveries,
        },
        &blackholed,
    );
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
    }
}

/// Why work is pending when the run stopped at its time limit (appended to a violation).
fn reached_until(src: &Source) -> String {
    format!(
        " (the run reached `until` = {} with work pending)",
        src.scenario.until
    )
}
