//! The readable text summary of a [`Report`] and its number formatting.

use std::fmt::Write as _;

use fabemu_fabric::units::{ByteSize, Time};

use super::*;
use crate::collective;

/// The readable summary.
pub fn summary(r: &Report) -> String {
    let mut s = String::new();
    scenario_header(&mut s, r);
    let _ = writeln!(s);
    if !r.collectives.is_empty() {
        collectives_section(&mut s, r);
    }
    if !r.messages.is_empty() {
        messages_table(&mut s, r);
    }
    if let Some(t) = &r.training {
        s.push_str(&crate::training::summary(t));
        let _ = writeln!(s);
    }
    totals_lines(&mut s, r);
    if let Some(f) = &r.faults {
        fault_lines(&mut s, f);
    }
    s.push_str(&crate::observe::histograms::summary_lines(&r.latency));
    run_line(&mut s, r);
    if !r.invariants.ok {
        violation_lines(&mut s, r);
    }
    s
}

/// The scenario's name and size, mode, seed, fidelity and overrides.
fn scenario_header(s: &mut String, r: &Report) {
    let sc = &r.scenario;
    let flow = sc.fidelity == Fidelity::Flow;
    let _ = writeln!(
        *s,
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
        let _ = writeln!(*s, "overrides: --set {}", sc.overrides.join(" --set "));
    }
}

/// The collectives' table and the use of each class of links.
fn collectives_section(s: &mut String, r: &Report) {
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

/// The run's totals: messages, packets, drops, events and flow control.
fn totals_lines(s: &mut String, r: &Report) {
    let sc = &r.scenario;
    let flow = sc.fidelity == Fidelity::Flow;
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
}

/// One line per fault entry, and the frames blackholed.
fn fault_lines(s: &mut String, f: &crate::faults::FaultsReport) {
    for e in &f.entries {
        let window = match (e.until_ps, e.period_ps) {
            (Some(u), Some(p)) => format!("{}..{} every {}", Time(e.from_ps), Time(u), Time(p)),
            (Some(u), None) => format!("{}..{}", Time(e.from_ps), Time(u)),
            _ => format!("from {}", Time(e.from_ps)),
        };
        let _ = writeln!(
            s,
            "Fault:  {} {} ({window}): {} frames lost, {} corrupted; {} of {} messages in flight delayed{}{}",
            e.target,
            e.effect,
            e.frames_lost,
            e.frames_corrupted,
            e.messages_delayed,
            e.messages_in_flight,
            e.rerouted_at_ps
                .map(|t| format!("; routed around at {}", Time(t)))
                .unwrap_or_default(),
            match (e.time_to_recover_ps, e.qps_unrecovered) {
                (_, n) if n > 0 => format!("; {n} of {} QPs hit never recovered", e.qps_hit),
                (Some(t), _) => format!("; {} QPs hit, recovered in {}", e.qps_hit, Time(t)),
                _ => String::new(),
            }
        );
    }
    if f.blackholed_frames > 0 {
        let at: Vec<String> = f
            .blackholed_at
            .iter()
            .map(|b| format!("{} {}", b.switch, b.frames))
            .collect();
        let _ = writeln!(
            s,
            "        {} frames blackholed (no route left): {}",
            f.blackholed_frames,
            at.join(", ")
        );
    }
}

/// The host's wall time and speed.
fn run_line(s: &mut String, r: &Report) {
    let flow = r.scenario.fidelity == Fidelity::Flow;
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
}

/// Every invariant violated.
fn violation_lines(s: &mut String, r: &Report) {
    let _ = writeln!(s);
    for v in &r.invariants.violations {
        let _ = writeln!(s, "INVARIANT VIOLATED: {v}");
    }
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
