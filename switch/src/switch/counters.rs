//! The switch's counters as the report shows them: per (port, priority), per port, whole
//! switch; and how the log of waits reaches the per-port histograms.

use fabemu_fabric::histogram::LatencyHistogram;
use fabemu_fabric::units::Time;
use serde::Serialize;

use crate::priority::PRIORITIES;

#[cfg(doc)]
use super::Switch;

/// Per (port, priority) counters. Ingress-side ones (what this switch did to the neighbour on
/// this port) and egress-side ones (what happened to frames leaving by this port) are marked.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct PriorityStats {
    /// Ingress: XOFF frames sent for this priority (first pauses and refreshes).
    pub pause_frames_sent: u64,
    /// Ingress: XON frames (quanta 0) sent.
    pub xon_frames_sent: u64,
    /// Egress: pause frames received with a non-zero time for this priority.
    pub pause_frames_received: u64,
    /// Egress: XON frames received.
    pub xon_frames_received: u64,
    /// Egress: total time this priority was paused by the neighbour, in ps (pauses still on
    /// when the run ended are not included).
    pub paused_time_ps: u64,
    /// Egress: frames marked CE.
    pub ecn_marked: u64,
    /// Egress: frames dropped on a lossy priority.
    pub dropped_lossy: u64,
    /// Egress: frames dropped on a lossless priority (a bug or a misconfiguration).
    pub dropped_lossless: u64,
    /// Ingress: most bytes this (port, priority) held in the buffer at once.
    pub peak_ingress_bytes: u64,
}

/// Per port counters.
///
/// Laid out in declaration order from a cache line's start (`repr(C, align(64))`): all a
/// departing frame writes, `queueing_delay_sum_ps` and the histogram (its zero count,
/// extremes, counts' address and bucket constants), fill the first 64 bytes, so a departure
/// touches one line of the port's counters besides the count it increments. An arriving
/// frame writes none of them: `enqueued` and `dequeued` are derived when the counters are
/// read ([`Switch::port_stats`]; `dequeued` is the histogram's count) and `max_queue_bytes` is
/// written only when it grows (the port's flags, which every frame reads, keep a copy to
/// compare with). The report lists the fields in its own order (see the `Serialize` impl).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[repr(C, align(64))]
pub struct SwitchPortStats {
    /// Total time frames waited in this queue, in ps; divide by `dequeued` for the mean.
    pub queueing_delay_sum_ps: u64,
    /// Distribution of the time frames waited in this queue (p50 .. max in the JSON; quantiles
    /// within 6.25%, nothing finer than 1 ns; count, min and max exact).
    pub queueing_delay: LatencyHistogram,
    /// Frames admitted to this port's queue (those dequeued, still queued, or lost to an
    /// internal error; a frame a custom scheduler drops after admission is not counted).
    pub enqueued: u64,
    /// Frames for this port dropped at admission (buffer full, over threshold, headroom
    /// exhausted) or by its scheduler.
    pub dropped_packets: u64,
    /// Bytes of frames dropped at admission.
    pub dropped_bytes: u64,
    /// Deepest the queue got, in bytes.
    pub max_queue_bytes: u64,
    /// Frames that left the queue (0 as kept, [`Switch::port_counters`]: the histogram's
    /// count, which [`Switch::port_stats`] copies here).
    pub dequeued: u64,
    /// Per priority 0..=7: PFC, ECN, drops, ingress use. Boxed: written only on rare events,
    /// it would otherwise push the per-packet counters of neighbouring ports out of cache.
    /// Omitted from the report when every counter of every priority is 0: eight blocks of
    /// zeros per port made most of a large fabric's JSON (120 MB of a 146 MB report at 8192
    /// hosts, where only PFC, ECN or drops ever write them).
    pub priorities: Box<[PriorityStats; PRIORITIES]>,
}

impl Serialize for SwitchPortStats {
    /// The fields in the report's order (counters, then the delays, then the priorities),
    /// which is not the memory order the departure wants; `priorities` left out when quiet.
    /// A field added to the struct must be added here too.
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let quiet = all_priorities_quiet(&self.priorities);
        let mut st = s.serialize_struct("SwitchPortStats", 7 + usize::from(!quiet))?;
        st.serialize_field("enqueued", &self.enqueued)?;
        st.serialize_field("dropped_packets", &self.dropped_packets)?;
        st.serialize_field("dropped_bytes", &self.dropped_bytes)?;
        st.serialize_field("max_queue_bytes", &self.max_queue_bytes)?;
        st.serialize_field("queueing_delay_sum_ps", &self.queueing_delay_sum_ps)?;
        st.serialize_field("dequeued", &self.dequeued)?;
        st.serialize_field("queueing_delay", &self.queueing_delay)?;
        if quiet {
            st.skip_field("priorities")?;
        } else {
            st.serialize_field("priorities", &self.priorities)?;
        }
        st.end()
    }
}

/// Whole-switch counters.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct SwitchStats {
    /// Frames received.
    pub received: u64,
    /// Frames dropped because no route matched the destination.
    pub no_route: u64,
    /// Frames dropped because their TTL ran out (a routing loop).
    pub ttl_expired: u64,
    /// Frames dropped because they could not be parsed.
    pub malformed: u64,
    /// PFC frames received (consumed, never forwarded).
    pub pause_frames_received: u64,
    /// PFC frames sent (XOFF, refresh and XON; one frame may carry several classes).
    pub pause_frames_sent: u64,
    /// Of those, XON frames: every class they name has quanta 0 (a frame that pauses any
    /// class counts as XOFF).
    pub xon_frames_sent: u64,
    /// Frames dropped on lossless priorities; any is an error (the run should fail).
    pub lossless_drops: u64,
    /// Frames marked CE.
    pub ecn_marked: u64,
    /// When the deadlock watchdog first found a stalled queue.
    pub deadlock_detected_at: Option<Time>,
    /// Peak shared-buffer occupancy in bytes.
    pub peak_buffer_bytes: u64,
    /// Frames the engine refused to transmit (an internal error; always 0 in a sound run).
    pub tx_refused: u64,
    /// Frames dropped after a failover left no next hop toward their destination (a fault
    /// cut it off; see [`Switch::schedule_routes`]).
    pub blackholed: u64,
    /// Frames discarded by the FCS check: damaged by bit errors on the way in (omitted when 0).
    #[serde(skip_serializing_if = "is_zero")]
    pub fcs_dropped: u64,
    /// Data frames this switch appended an in-band telemetry record to (HPCC; omitted when 0).
    #[serde(skip_serializing_if = "is_zero")]
    pub int_stamped: u64,
}

/// Adds logged waits (each `wait << 16 | port`) to their ports' counters: the delay sum and
/// the histogram (`dequeued` is the histogram's count). The ports' histograms are rough:
/// [`LatencyHistogram::record_often`] finds a wait's bucket with constants, not the four its
/// histogram keeps, and writes the extremes only when they move.
pub(super) fn fold_log(stats: &mut [SwitchPortStats], log: &[u64]) {
    for &w in log {
        if let Some(ps) = stats.get_mut((w & 0xFFFF) as usize) {
            let waited = w >> 16;
            ps.queueing_delay_sum_ps += waited;
            ps.queueing_delay.record_often(waited);
        }
    }
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// True when no counter of any priority moved (the report leaves the block out).
fn all_priorities_quiet(p: &[PriorityStats; PRIORITIES]) -> bool {
    p.iter().all(|s| *s == PriorityStats::default())
}
