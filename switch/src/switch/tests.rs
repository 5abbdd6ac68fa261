//! Layout and bookkeeping checks of the switch's per-frame state.

use super::SwitchPortStats;

/// What every frame reads of a switch (the route table's last 32 bytes, `base` and
/// `affine`, then the fields up to the MMU's counters, which are its first 113 bytes)
/// spans four cache lines.
#[test]
fn per_frame_switch_fields_span_four_lines() {
    use super::Switch;
    use fabemu_fabric::route::RouteTable;
    use std::mem::{align_of, offset_of, size_of};
    assert_eq!(align_of::<Switch>(), 64);
    let first = offset_of!(Switch, routes) + size_of::<RouteTable>() - 32;
    let last = offset_of!(Switch, mmu) + 113 - 1;
    assert!(offset_of!(Switch, routes) < offset_of!(Switch, mmu));
    assert!(last / 64 - first / 64 < 4, "{first}..={last}");
}

/// The flags every frame reads stay 8 bytes (eight ports a line), and the zero waits they count reach the histogram exactly:
/// 256 at each wrap, the rest when the counters are read.
#[test]
fn port_flags_count_zero_waits_in_eight_bytes() {
    use super::{PortFlags, CUT_MASK};
    assert_eq!(std::mem::size_of::<PortFlags>(), 8);
    let mut fl = PortFlags::default();
    fl.set_max_queue(5_000);
    let mut flushed = 0u64;
    for _ in 0..1_000 {
        if fl.count_cut() {
            flushed += u64::from(CUT_MASK) + 1;
        }
    }
    assert_eq!(flushed + fl.cut(), 1_000);
    assert_eq!(fl.max_queue(), 5_000);
    fl.set_max_queue(u64::MAX);
    assert_eq!(fl.max_queue(), (1 << 24) - 1);
    assert_eq!(flushed + fl.cut(), 1_000);
}

/// Waits go through the log (folded when full, the rest added when read; one too large
/// for an entry counted at once) and reach the counters as if recorded one by one; so do
/// they in a switch too wide to log ([`super::NO_LOG`], set by hand here rather than by
/// building a switch of 2^16 + 1 ports), each counted at once.
#[test]
fn logged_waits_reach_the_counters_exactly() {
    use super::{Switch, SwitchConfig, NO_LOG};
    use fabemu_fabric::route::RouteTable;
    for wide in [false, true] {
        let mut sw = Switch::new(3, RouteTable::default(), &SwitchConfig::default(), 1);
        if wide {
            sw.wait_len = NO_LOG;
        }
        waits_reach_the_counters(&mut sw);
        assert_eq!(sw.wait_len == NO_LOG, wide);
    }
}

fn waits_reach_the_counters(sw: &mut super::Switch) {
    use fabemu_fabric::histogram::LatencyHistogram;
    let mut want = vec![LatencyHistogram::rough(); 3];
    let mut sums = [0u64; 3];
    for i in 0..1_000u64 {
        let port = (i * 7 % 3) as usize;
        let waited = match i {
            500 => 1 << 50,
            _ => i * i * 1_000 % 9_000_000,
        };
        sw.log_wait(port, waited);
        want[port].record(waited);
        sums[port] += waited;
    }
    let got = sw.port_stats();
    for port in 0..3 {
        assert_eq!(got[port].queueing_delay, want[port]);
        assert_eq!(got[port].queueing_delay_sum_ps, sums[port]);
        assert_eq!(got[port].dequeued, want[port].len());
    }
}

/// The class-selector shortcut is taken exactly for the map that it computes.
#[test]
fn class_selector_shortcut_is_the_packed_map() {
    use super::{PackedDscp, Switch, SwitchConfig};
    use crate::priority::DscpMap;
    use fabemu_fabric::route::RouteTable;
    let sw = Switch::new(2, RouteTable::default(), &SwitchConfig::default(), 1);
    assert!(sw.dscp_class_selector);
    for d in 0..=255u8 {
        assert_eq!((d & 0x3F) >> 3, sw.dscp.priority(d), "{d}");
    }
    let mut cfg = SwitchConfig::default();
    cfg.buffer.dscp_priority = DscpMap::default().with(26, 5).unwrap();
    let sw = Switch::new(2, RouteTable::default(), &cfg, 1);
    assert!(!sw.dscp_class_selector);
    assert_eq!(sw.dscp.priority(26), 5);
    assert_eq!(PackedDscp::new(&DscpMap::default()).priority(26), 3);
}

#[test]
fn every_timer_comes_back_from_its_token() {
    use super::SwitchTimer;
    for t in [
        SwitchTimer::Wake(3),
        SwitchTimer::Resume(70_000, 3),
        SwitchTimer::Refresh(0),
        SwitchTimer::Watchdog(5, 7),
        SwitchTimer::Reroute(2),
    ] {
        assert_eq!(SwitchTimer::of(t.token()), Some(t));
    }
    assert_eq!(SwitchTimer::of(9 << 56), None);
}

#[test]
fn per_frame_port_counters_share_a_cache_line() {
    use fabemu_fabric::histogram::LatencyHistogram;
    assert_eq!(std::mem::align_of::<SwitchPortStats>(), 64);
    // The sum, then the whole histogram: what a departure touches is the first line.
    assert_eq!(std::mem::offset_of!(SwitchPortStats, queueing_delay), 8);
    assert!(std::mem::size_of::<LatencyHistogram>() <= 56);
}
