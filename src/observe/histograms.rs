//! Tails, not only means: message completion times, per-packet one-way latency, and queueing
//! delay in switches (per port in the JSON, all switches together in the summary), as p50/p90/p99/p99.9/max.
//!
//! Quantiles come from hdrhistogram at 3 significant digits (within 0.1% of the value);
//! count, min and max are exact.

use std::fmt::Write as _;

use fabemu_fabric::histogram::{LatencyHistogram, Percentiles};
use fabemu_fabric::units::Time;
use serde::Serialize;

use crate::report::facts::ActorFacts;
use crate::report::MessageResult;

/// The run's latency distributions (`null` when nothing was measured).
#[derive(Clone, Debug, Default, Serialize)]
pub struct Latencies {
    /// Point-to-point messages: posted to delivered.
    pub message_completion: Option<Percentiles>,
    /// Data packets received in order: created by the sending NIC to received by the other.
    pub packet_one_way: Option<Percentiles>,
    /// Frames through switches: arrival to the start of their transmission, over all ports.
    pub switch_queueing_delay: Option<Percentiles>,
}

/// Gathers the distributions of a finished run from its actors' facts; `messages` are the
/// report's message rows.
pub fn latencies(facts: &[ActorFacts], messages: &[MessageResult]) -> Latencies {
    let mut completion = LatencyHistogram::new();
    for ct in messages.iter().filter_map(|m| m.completion_time_ps) {
        completion.record(ct);
    }
    let mut packets = LatencyHistogram::new();
    let mut queueing = LatencyHistogram::new();
    for a in facts {
        match a {
            ActorFacts::Host(h) => packets.add(&h.stats.latency),
            ActorFacts::Switch(s) => {
                if let Some(q) = s.queueing() {
                    queueing.add(&q);
                }
            }
        }
    }
    Latencies {
        message_completion: completion.percentiles(),
        packet_one_way: packets.percentiles(),
        switch_queueing_delay: queueing.percentiles(),
    }
}

fn line(s: &mut String, what: &str, p: &Option<Percentiles>) {
    if let Some(p) = p {
        let _ = writeln!(
            s,
            "{:<9}{what:<24} p50 {}, p90 {}, p99 {}, p99.9 {}, max {} ({} samples)",
            if s.is_empty() { "Latency:" } else { "" },
            Time(p.p50_ps),
            Time(p.p90_ps),
            Time(p.p99_ps),
            Time(p.p999_ps),
            Time(p.max_ps),
            p.count
        );
    }
}

/// The summary's latency lines (empty when nothing was measured).
pub fn summary_lines(l: &Latencies) -> String {
    let mut s = String::new();
    line(&mut s, "message completion:", &l.message_completion);
    line(&mut s, "packet one-way latency:", &l.packet_one_way);
    line(&mut s, "switch queueing delay:", &l.switch_queueing_delay);
    s
}
