//! Finish times and carried bytes against closed forms.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: a failure is a panic

use fabemu_fabric::units::Time;
use fabemu_flow::{FlowId, FlowNetwork, LinkId};

/// 3 GB/s: 333.33.. ps per byte, so finish times are not whole picoseconds and the rounding up
/// shows.
const C: f64 = 3e9;

fn ceil_ps(bytes: f64, rate: f64) -> u64 {
    (bytes * 1e12 / rate).ceil() as u64
}

#[test]
fn one_flow_alone_finishes_at_bytes_over_capacity_rounded_up() {
    let mut net = FlowNetwork::new(vec![C]).unwrap();
    let f = net
        .start(Time::ZERO, &[(LinkId(0), 1.0)], 1000, None, 7)
        .unwrap();
    // 1000 B / 3 GB/s = 333333.33 ps -> 333334.
    assert_eq!(net.next_finish(), Some(Time(333_334)));
    assert_eq!(net.rate(f), Some(C));
    let mut done = Vec::new();
    net.advance(Time(333_333), &mut done);
    assert!(
        done.is_empty(),
        "one picosecond early, the last byte is not out"
    );
    net.advance(Time(333_334), &mut done);
    assert_eq!(done, vec![(f, 7)]);
    assert_eq!(net.active(), 0);
    assert_eq!(net.next_finish(), None);
}

#[test]
fn two_equal_flows_finish_together_at_twice_the_time() {
    let mut net = FlowNetwork::new(vec![C]).unwrap();
    let a = net
        .start(Time::ZERO, &[(LinkId(0), 1.0)], 1000, None, 1)
        .unwrap();
    let b = net
        .start(Time::ZERO, &[(LinkId(0), 1.0)], 1000, None, 2)
        .unwrap();
    assert_eq!(net.rate(a), Some(C / 2.0));
    // 2 x 1000 B / 3 GB/s = 666666.67 ps -> 666667, both at once, in FlowId order.
    let t = net.next_finish().unwrap();
    assert_eq!(t, Time(666_667));
    let mut done = Vec::new();
    net.advance(t, &mut done);
    assert_eq!(done, vec![(a, 1), (b, 2)]);
}

#[test]
fn the_long_flow_speeds_up_when_the_short_one_ends() {
    let (short, long) = (1000u64, 5000u64);
    let mut net = FlowNetwork::new(vec![C]).unwrap();
    let s = net
        .start(Time::ZERO, &[(LinkId(0), 1.0)], short, None, 0)
        .unwrap();
    let l = net
        .start(Time::ZERO, &[(LinkId(0), 1.0)], long, None, 1)
        .unwrap();
    // Shared at C/2 until the short one is out at ceil(2 * short / C).
    let t1 = ceil_ps(short as f64, C / 2.0);
    assert_eq!(net.next_finish(), Some(Time(t1)));
    let mut done = Vec::new();
    net.advance(Time(t1), &mut done);
    assert_eq!(done, vec![(s, 0)]);
    // Then alone at C: what is left, (long - C/2 * t1), at full rate.
    assert_eq!(net.rate(l), Some(C));
    let left = long as f64 - C / 2.0 * t1 as f64 / 1e12;
    let t2 = t1 + ceil_ps(left, C);
    assert_eq!(net.next_finish(), Some(Time(t2)));
    // Closed form without rounding: (short + long) / C = 2 us; each of the two finishes
    // rounds up by less than 1 ps.
    let exact = (short + long) as f64 * 1e12 / C;
    assert!((t2 as f64 - exact).abs() <= 2.0, "{t2} vs {exact}");
    net.advance(Time(t2), &mut done);
    assert_eq!(done, vec![(s, 0), (l, 1)]);
}

#[test]
fn advancing_past_several_finishes_reports_them_in_order() {
    // Three flows of 1, 2 and 3 kB on one link: they share it three, then two, then one way,
    // finishing at 3 kB/C, 5 kB/C and 6 kB/C (up to a picosecond of rounding each).
    let mut net = FlowNetwork::new(vec![C]).unwrap();
    let ids: Vec<FlowId> = [3000, 1000, 2000]
        .iter()
        .map(|&b| {
            net.start(Time::ZERO, &[(LinkId(0), 1.0)], b, None, b)
                .unwrap()
        })
        .collect();
    let mut done = Vec::new();
    net.advance(Time(10_000_000), &mut done);
    assert_eq!(done, vec![(ids[1], 1000), (ids[2], 2000), (ids[0], 3000)]);
    assert_eq!(net.now(), Time(10_000_000));
    // All bytes (6 kB) went over the link; each finish rounds up by under 1 ps at <= C.
    let moved = net.link_bytes(LinkId(0));
    assert!((moved - 6000.0).abs() <= 3.0 * C * 1e-12 + 1e-9, "{moved}");
}

#[test]
fn link_bytes_equal_the_weighted_bytes_moved() {
    // Forward path 0 -> 1 with wire overhead 1.0625 per payload byte, ACKs on the reverse link 2
    // with 1/32 per payload byte; a second flow on links 1 and 3 only, capped.
    let mut net = FlowNetwork::new(vec![1.25e10, 1e10, 1.25e10, 4e9]).unwrap();
    let fwd = [
        (LinkId(0), 1.0625),
        (LinkId(1), 1.0625),
        (LinkId(2), 0.03125),
    ];
    net.start(Time::ZERO, &fwd, 3_000_000, None, 0).unwrap();
    net.start(
        Time::ZERO,
        &[(LinkId(1), 1.0), (LinkId(3), 1.0)],
        1_000_000,
        Some(2e9),
        1,
    )
    .unwrap();
    let mut done = Vec::new();
    // Check mid-way too: carried bytes grow with the load.
    let t = net.next_finish().unwrap();
    net.advance(Time(t.ps() / 2), &mut done);
    let half = Time(t.ps() / 2).as_secs_f64();
    let load0 = net.link_load(LinkId(0));
    assert!((net.link_bytes(LinkId(0)) - load0 * half).abs() <= 1e-6);
    net.advance(Time(1_000_000_000), &mut done);
    assert_eq!(done.len(), 2);
    // Tolerance: each finish rounds up by < 1 ps, i.e. at most capacity x 1e-12 bytes (0.0125 B)
    // per flow on a link, plus float rounding of the sums (relative 1e-12).
    let want = [1.0625 * 3e6, 1.0625 * 3e6 + 1e6, 0.03125 * 3e6, 1e6];
    for (l, w) in want.into_iter().enumerate() {
        let got = net.link_bytes(LinkId(l as u32));
        assert!(
            (got - w).abs() <= 2.0 * 0.0125 + 1e-12 * w,
            "link {l}: {got} vs {w}"
        );
        assert_eq!(net.link_load(LinkId(l as u32)), 0.0);
    }
}

#[test]
fn starting_later_moves_time_and_ids_are_reused() {
    let mut net = FlowNetwork::new(vec![C]).unwrap();
    let a = net
        .start(Time(1_000), &[(LinkId(0), 1.0)], 3, None, 0)
        .unwrap();
    assert_eq!(net.now(), Time(1_000));
    // 3 B / 3 GB/s = 1000 ps.
    assert_eq!(net.next_finish(), Some(Time(2_000)));
    let mut done = Vec::new();
    net.advance(Time(2_000), &mut done);
    assert!(!net.is_active(a));
    assert_eq!(net.rate(a), None);
    let b = net
        .start(Time(2_000), &[(LinkId(0), 1.0)], 3, None, 1)
        .unwrap();
    assert_eq!(a, b, "a finished flow's id is reused");
    assert_eq!(net.next_finish(), Some(Time(3_000)));
}

#[test]
fn a_flow_without_links_runs_at_its_cap() {
    let mut net = FlowNetwork::new(vec![C]).unwrap();
    let f = net.start(Time::ZERO, &[], 1000, Some(1e9), 0).unwrap();
    assert_eq!(net.rate(f), Some(1e9));
    assert_eq!(net.next_finish(), Some(Time(1_000_000)));
}
