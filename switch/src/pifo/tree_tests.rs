//! Tests of [`PifoTree`] and the transactions inside trees: the paper's example, fairness and
//! priority shares on a saturated virtual link, shaping bounds, minimum rates, PFC masking.

use fabemu_fabric::units::{Bandwidth, Time};
use proptest::prelude::*;

use super::classifier::{Field, Fixed, Table};
use super::transactions::{
    ClassBy, Fifo, MinRate, Srpt, StopAndGo, StrictPriority, TokenBucket, TxnCtx, Wfq,
};
use super::{
    BucketConfig, EnqueueError, NodeId, NodeSpec, OverflowPolicy, PacketInfo, PifoKind, PifoTree,
    PifoTreeBuilder, TreeError,
};

const BOTH_KINDS: [PifoKind; 2] = [
    PifoKind::Heap,
    PifoKind::Bucket(BucketConfig {
        window_log2: 16,
        granularity_log2: 0,
    }),
];

fn info(flow: u64, len: u32) -> PacketInfo {
    PacketInfo {
        flow,
        len,
        ..PacketInfo::default()
    }
}

/// A root over `n` FIFO leaves, classified by `flow mod n`.
fn one_level<T>(root: NodeSpec, n: usize, kind: PifoKind) -> (PifoTree<T>, Vec<NodeId>) {
    let mut b = PifoTreeBuilder::new(root.pifo(kind));
    let leaves: Vec<NodeId> = (0..n)
        .map(|i| b.add(b.root(), NodeSpec::new(format!("leaf{i}"), Fifo).pifo(kind)))
        .collect::<Result<_, _>>()
        .unwrap();
    let tree = b.build(Table::new(Field::Flow, leaves.clone())).unwrap();
    (tree, leaves)
}

#[test]
fn paper_example_dequeues_p3_p1_p2_p4() {
    // Root PIFO [L, R, R, L]; left leaf [P3, P4]; right leaf [P1, P2]. The root rank comes from
    // `qp`, the leaf rank from `message_size`.
    for kind in BOTH_KINDS {
        let root = NodeSpec::new("root", |i: &PacketInfo, _: &TxnCtx| u64::from(i.qp)).pifo(kind);
        let mut b = PifoTreeBuilder::new(root);
        let leaf = |name: &str| {
            NodeSpec::new(name, |i: &PacketInfo, _: &TxnCtx| i.message_size).pifo(kind)
        };
        let l = b.add(b.root(), leaf("L")).unwrap();
        let r = b.add(b.root(), leaf("R")).unwrap();
        let mut t: PifoTree<&str> = b.build(Table::new(Field::Flow, vec![l, r])).unwrap();
        // (name, leaf flow, root rank, leaf rank)
        for (name, flow, root_rank, leaf_rank) in [
            ("P1", 1, 1, 0),
            ("P2", 1, 2, 1),
            ("P3", 0, 0, 0),
            ("P4", 0, 3, 1),
        ] {
            let i = PacketInfo {
                flow,
                qp: root_rank,
                message_size: leaf_rank,
                ..PacketInfo::default()
            };
            t.enqueue(Time::ZERO, i, name).unwrap();
        }
        assert_eq!(
            (t.node_len(NodeId(0)), t.node_len(l), t.node_len(r)),
            (4, 2, 2)
        );
        let order: Vec<&str> = std::iter::from_fn(|| t.dequeue(Time::ZERO, 0)).collect();
        assert_eq!(order, ["P3", "P1", "P2", "P4"]);
        assert_eq!(t.priority_inversions(), 0);
        assert!(t.is_empty());
    }
}

#[test]
fn equal_ranks_keep_arrival_order_through_the_tree() {
    for kind in BOTH_KINDS {
        // FIFO root over two FIFO leaves: the root's partitions (one per child) must merge in
        // arrival order, the leaves keep theirs.
        let (mut t, _) = one_level::<u32>(NodeSpec::new("root", Fifo), 2, kind);
        for i in 0..6000u32 {
            let flow = u64::from((i / 3 + i) % 2);
            t.enqueue(Time::ZERO, info(flow, 100), i).unwrap();
        }
        let order: Vec<u32> = std::iter::from_fn(|| t.dequeue(Time::ZERO, 0)).collect();
        assert_eq!(order, (0..6000).collect::<Vec<u32>>());
    }
}

/// Dequeues `n` fixed-size packets from an always-backlogged tree whose items are their class;
/// each dequeued packet is replaced by one of its class. Returns packets per class.
fn saturate(t: &mut PifoTree<u64>, classes: u64, n: usize) -> Vec<u64> {
    let mut now = Time::ZERO;
    for c in 0..classes {
        for _ in 0..50 {
            t.enqueue(now, info(c, 1000), c).unwrap();
        }
    }
    let mut served = vec![0u64; classes as usize];
    for _ in 0..n {
        let c = t.dequeue(now, 0).unwrap();
        served[c as usize] += 1;
        now = now.add(Time::from_ns(80)); // 1000 B at 100 Gb/s
        t.enqueue(now, info(c, 1000), c).unwrap();
    }
    served
}

fn assert_shares(served: &[u64], want: &[f64]) {
    let total: u64 = served.iter().sum();
    for (k, (&s, &w)) in served.iter().zip(want).enumerate() {
        let share = s as f64 / total as f64;
        assert!(
            (share - w).abs() <= 0.02 * w,
            "class {k}: share {share:.4}, want {w:.4} (served {served:?})"
        );
    }
}

#[test]
fn wfq_one_two_three_shares_on_a_saturated_link() {
    let kinds = [
        PifoKind::Heap,
        // Virtual time in whole bytes per bucket.
        PifoKind::Bucket(BucketConfig {
            window_log2: 16,
            granularity_log2: 16,
        }),
    ];
    for kind in kinds {
        let root = NodeSpec::new("wfq", Wfq::new(ClassBy::Child, &[1.0, 2.0, 3.0]).unwrap());
        let (mut t, leaves) = one_level::<u64>(root, 3, kind);
        let served = saturate(&mut t, 3, 60_000);
        assert_shares(&served, &[1.0 / 6.0, 2.0 / 6.0, 3.0 / 6.0]);
        let bytes: Vec<u64> = leaves
            .iter()
            .map(|&l| t.stats(l).unwrap().dequeued_bytes)
            .collect();
        assert_eq!(bytes, served.iter().map(|s| s * 1000).collect::<Vec<_>>());
        assert_eq!(t.priority_inversions(), 0);
    }
}

#[test]
fn hierarchical_wfq_shares_are_products() {
    let wfq = |name: &str, w: &[f64]| NodeSpec::new(name, Wfq::new(ClassBy::Child, w).unwrap());
    let mut b = PifoTreeBuilder::new(wfq("root", &[0.1, 0.9]));
    let left = b.add(b.root(), wfq("left", &[0.3, 0.7])).unwrap();
    let right = b.add(b.root(), wfq("right", &[0.4, 0.6])).unwrap();
    let mut leaves = Vec::new();
    for (parent, n) in [(left, 2), (right, 2)] {
        for i in 0..n {
            leaves.push(b.add(parent, NodeSpec::new(format!("q{i}"), Fifo)).unwrap());
        }
    }
    let mut t: PifoTree<u64> = b.build(Table::new(Field::Flow, leaves.clone())).unwrap();
    let served = saturate(&mut t, 4, 200_000);
    assert_shares(&served, &[0.03, 0.07, 0.36, 0.54]);
    // Inner nodes count their subtree.
    let l = t.stats(left).unwrap().dequeued_packets;
    assert_eq!(l, served[0] + served[1]);
}

#[test]
fn strict_priority_starves_low_while_high_is_backlogged() {
    for kind in BOTH_KINDS {
        let root = NodeSpec::new("sp", StrictPriority::new(ClassBy::Child));
        let (mut t, leaves) = one_level::<u64>(root, 2, kind);
        let served = saturate(&mut t, 2, 10_000);
        assert_eq!(served, vec![10_000, 0]);
        // Once high drains, low flows.
        let queued_high = t.node_len(leaves[0]);
        let rest: Vec<u64> = std::iter::from_fn(|| t.dequeue(Time::ZERO, 0)).collect();
        assert!(rest[..queued_high].iter().all(|&c| c == 0));
        assert!(rest[queued_high..].iter().all(|&c| c == 1));
        assert_eq!(rest.len(), queued_high + 50);
    }
}

/// A FIFO root over one leaf shaped by `shaper`, fed by `arrivals` (time, bytes), drained by an
/// infinitely fast link. Returns (release time, bytes) of every packet in order.
fn drive_shaped(
    shaper: impl super::ShapingTransaction + 'static,
    arrivals: &[(Time, u32)],
) -> Vec<(Time, u32)> {
    let mut b = PifoTreeBuilder::new(NodeSpec::new("root", Fifo));
    let leaf = b
        .add(b.root(), NodeSpec::new("shaped", Fifo).shaping(shaper))
        .unwrap();
    let mut t: PifoTree<u32> = b.build(Fixed(leaf)).unwrap();
    let mut out = Vec::new();
    let mut next = 0;
    loop {
        let arrival = arrivals.get(next).map(|a| a.0);
        let release = t.next_release(Time::ZERO);
        let now = match (arrival, release) {
            (None, None) => break,
            (a, r) => a.unwrap_or(Time::NEVER).min(r.unwrap_or(Time::NEVER)),
        };
        while let Some(&(at, len)) = arrivals.get(next) {
            if at > now {
                break;
            }
            t.enqueue(now, info(0, len), len).unwrap();
            next += 1;
        }
        while let Some(len) = t.dequeue(now, 0) {
            out.push((now, len));
        }
    }
    assert!(t.is_empty());
    out
}

#[test]
fn token_bucket_bounds_every_interval_and_holds_the_rate() {
    // 8 Gb/s = 1 B/ns, burst 4000 B; offered 2 B/ns of 1000 B packets for 1 ms, plus a burst
    // of 10 packets at time 0.
    let rate_b_per_ps = 1.0 / 1000.0;
    let burst = 4000u64;
    let tb = TokenBucket::new(Bandwidth::from_gbps(8), burst).unwrap();
    let mut arrivals: Vec<(Time, u32)> = (0..10).map(|_| (Time::ZERO, 1000)).collect();
    arrivals.extend((0..2000u64).map(|k| (Time::from_ns(500 * k), 1000)));
    let out = drive_shaped(tb, &arrivals);
    assert_eq!(out.len(), arrivals.len());
    // The bucket starts full: the first 4 packets leave at once.
    assert_eq!(out.iter().filter(|(t, _)| *t == Time::ZERO).count(), 4);
    // For every interval [t_i, t_j]: bytes released <= burst + rate x (t_j - t_i).
    for i in 0..out.len() {
        let mut bytes = 0u64;
        for &(tj, len) in &out[i..] {
            bytes += u64::from(len);
            let allowed = burst as f64 + rate_b_per_ps * (tj.ps() - out[i].0.ps()) as f64;
            assert!(
                bytes as f64 <= allowed + 1e-6,
                "{bytes} B by {tj} from {}",
                out[i].0
            );
        }
    }
    // Long run: the rate, within 1%.
    let (first, last) = (out[0].0, out[out.len() - 1].0);
    let bytes: u64 = out.iter().map(|&(_, l)| u64::from(l)).sum::<u64>() - burst;
    let rate = bytes as f64 / (last.ps() - first.ps()) as f64;
    assert!((rate / rate_b_per_ps - 1.0).abs() < 0.01, "rate {rate}");
}

#[test]
fn stop_and_go_releases_at_frame_ends() {
    let sg = StopAndGo::new(Time::from_us(10)).unwrap();
    let arrivals = [
        (Time::from_us(3), 100),
        (Time::from_us(9), 200),
        (Time::from_us(10), 300),
        (Time::from_us(25), 400),
    ];
    let out = drive_shaped(sg, &arrivals);
    assert_eq!(
        out,
        vec![
            (Time::from_us(10), 100),
            (Time::from_us(10), 200),
            (Time::from_us(20), 300),
            (Time::from_us(30), 400)
        ]
    );
}

#[test]
fn shaped_elements_wait_and_next_release_says_when() {
    let mut b = PifoTreeBuilder::new(NodeSpec::new("root", Fifo));
    let leaf = b
        .add(
            b.root(),
            NodeSpec::new("l", Fifo).shaping(StopAndGo::new(Time::from_us(1)).unwrap()),
        )
        .unwrap();
    let mut t: PifoTree<u8> = b.build(Fixed(leaf)).unwrap();
    t.enqueue(Time::from_ns(100), info(0, 64), 7).unwrap();
    assert_eq!(t.len(), 1);
    assert_eq!(t.dequeue(Time::from_ns(200), 0), None);
    assert_eq!(t.next_release(Time::from_ns(200)), Some(Time::from_us(1)));
    assert_eq!(t.next_release(Time::from_us(2)), Some(Time::from_us(2)));
    assert_eq!(t.dequeue(Time::from_us(1), 0), Some(7));
    assert_eq!(t.next_release(Time::from_us(1)), None);
    assert_eq!(t.stats(leaf).unwrap().shaped, 1);
    assert_eq!(
        t.stats(leaf).unwrap().queueing_delay_sum_ps,
        Time::from_ns(900).ps()
    );
}

/// Per-flow sequence numbers in items: (flow, seq).
fn min_rate_run(root: NodeSpec) -> (f64, f64) {
    // Link 8 Gb/s (1000 B per 1000 ns). Flow A offers 40% of it, flow B 100%.
    let mut b = PifoTreeBuilder::new(root);
    let a = b.add(b.root(), NodeSpec::new("A", Fifo)).unwrap();
    let bl = b.add(b.root(), NodeSpec::new("B", Fifo)).unwrap();
    let mut t: PifoTree<(u64, u64)> = b.build(Table::new(Field::Flow, vec![a, bl])).unwrap();
    let (period_a, period_b, tx) = (2500u64, 1000u64, 1000u64);
    let end = 20_000_000u64; // 20 ms in ns
    let (mut next_a, mut next_b, mut free_at) = (0u64, 0u64, 0u64);
    let mut seq = [0u64; 2];
    let mut last_seen = [None::<u64>; 2];
    let mut served = [0u64; 2];
    let warmup = 2_000_000u64;
    loop {
        let now = next_a
            .min(next_b)
            .min(if t.is_empty() { u64::MAX } else { free_at });
        if now >= end {
            break;
        }
        for (flow, next, period) in [(0u64, &mut next_a, period_a), (1, &mut next_b, period_b)] {
            if *next == now {
                let s = &mut seq[flow as usize];
                t.enqueue(Time::from_ns(now), info(flow, 1000), (flow, *s))
                    .unwrap();
                *s += 1;
                *next += period;
            }
        }
        if free_at <= now {
            if let Some((flow, s)) = t.dequeue(Time::from_ns(now), 0) {
                let f = flow as usize;
                assert!(
                    last_seen[f].is_none_or(|l| s == l + 1),
                    "flow {flow} reordered"
                );
                last_seen[f] = Some(s);
                if now >= warmup {
                    served[f] += 1;
                }
                free_at = now + tx;
            }
        }
    }
    let capacity = ((end - warmup) / tx) as f64;
    (served[0] as f64 / capacity, served[1] as f64 / capacity)
}

#[test]
fn min_rate_guarantee_holds_under_overload_without_reordering() {
    // A is guaranteed 35% of the link; plain FIFO would give it 0.4 / 1.4 = 28.6%.
    let guarantee = MinRate::new(
        ClassBy::Child,
        &[Bandwidth(2_800_000_000), Bandwidth(0)],
        2000,
    );
    let (a, b) = min_rate_run(NodeSpec::new("minrate", guarantee));
    assert!(a >= 0.35 * 0.99, "A got {a:.4} of the link");
    assert!(a + b > 0.99, "link not saturated: {a} + {b}");
    let (a_fifo, _) = min_rate_run(NodeSpec::new("fifo", Fifo));
    assert!((a_fifo - 0.4 / 1.4).abs() < 0.01, "FIFO gave A {a_fifo:.4}");
}

#[test]
fn pfc_pause_skips_paused_priorities_without_blocking() {
    for kind in BOTH_KINDS {
        // Strict priority by leaf; leaf "hi" holds priority 3, leaf "mixed" priorities 0 and 5.
        let mut b = PifoTreeBuilder::new(
            NodeSpec::new("sp", StrictPriority::new(ClassBy::Child)).pifo(kind),
        );
        let hi = b
            .add(b.root(), NodeSpec::new("hi", Fifo).pifo(kind))
            .unwrap();
        let mixed = b
            .add(b.root(), NodeSpec::new("mixed", Fifo).pifo(kind))
            .unwrap();
        let classify = move |i: &PacketInfo| Some(if i.priority == 3 { hi } else { mixed });
        let mut t: PifoTree<&str> = b.build(classify).unwrap();
        let p = |priority: u8| PacketInfo {
            priority,
            len: 100,
            ..PacketInfo::default()
        };
        for (name, prio) in [
            ("h1", 3),
            ("a1", 0),
            ("b1", 5),
            ("h2", 3),
            ("a2", 0),
            ("b2", 5),
        ] {
            t.enqueue(Time::ZERO, p(prio), name).unwrap();
        }
        let pause = |c: u8| 1u8 << c;
        // Priority 3 paused: the high leaf must not block the mixed one; inside it, 0 paused
        // too leaves 5.
        assert_eq!(t.dequeue(Time::ZERO, pause(3) | pause(0)), Some("b1"));
        assert_eq!(t.dequeue(Time::ZERO, pause(3)), Some("a1"));
        assert_eq!(t.dequeue(Time::ZERO, pause(3) | pause(5)), Some("a2"));
        // Everything that is queued paused: nothing, and nothing lost.
        assert_eq!(t.dequeue(Time::ZERO, pause(3) | pause(5)), None);
        assert_eq!(t.len(), 3);
        assert_eq!(t.dequeue(Time::ZERO, 0), Some("h1"));
        assert_eq!(t.dequeue(Time::ZERO, 0), Some("h2"));
        assert_eq!(t.dequeue(Time::ZERO, 0xff), None);
        assert_eq!(t.dequeue(Time::ZERO, 0), Some("b2"));
        // Inversions: three pops at the root skipped the waiting high leaf (rank 0 < 1); at
        // "mixed", "b1" (rank 0) left while "a1" (rank 0 too) waited: equal, not an inversion.
        assert_eq!(t.stats(NodeId(0)).unwrap().priority_inversions, 3);
        assert_eq!(t.stats(mixed).unwrap().priority_inversions, 0);
    }
}

#[test]
fn leaf_overflow_policies() {
    let mut b = PifoTreeBuilder::new(NodeSpec::new("root", Fifo));
    let drop = b
        .add(
            b.root(),
            NodeSpec::new("drop", Fifo).capacity(2, OverflowPolicy::DropArriving),
        )
        .unwrap();
    let evict = b
        .add(
            b.root(),
            NodeSpec::new("evict", Srpt).capacity(2, OverflowPolicy::EvictLargest),
        )
        .unwrap();
    let mut t: PifoTree<u32> = b.build(Table::new(Field::Flow, vec![drop, evict])).unwrap();
    let srpt = |remaining: u64| PacketInfo {
        flow: 1,
        remaining_bytes: remaining,
        len: 10,
        ..PacketInfo::default()
    };
    t.enqueue(Time::ZERO, info(0, 10), 1).unwrap();
    t.enqueue(Time::ZERO, info(0, 10), 2).unwrap();
    assert!(matches!(
        t.enqueue(Time::ZERO, info(0, 10), 3),
        Err(EnqueueError::Dropped { item: 3, .. })
    ));
    t.enqueue(Time::ZERO, srpt(500), 10).unwrap();
    t.enqueue(Time::ZERO, srpt(900), 11).unwrap();
    assert!(matches!(
        t.enqueue(Time::ZERO, srpt(100), 12),
        Err(EnqueueError::Evicted { item: 11, .. })
    ));
    assert!(matches!(
        t.enqueue(Time::ZERO, srpt(500), 13),
        Err(EnqueueError::Dropped { item: 13, .. })
    ));
    assert_eq!(t.len(), 4);
    let mut order: Vec<u32> = std::iter::from_fn(|| t.dequeue(Time::ZERO, 0)).collect();
    order.sort();
    assert_eq!(order, vec![1, 2, 10, 12]);
    let s = t.stats(evict).unwrap();
    assert_eq!((s.evicted_packets, s.dropped_packets), (1, 1));
    assert_eq!(t.stats(drop).unwrap().dropped_bytes, 10);
}

#[test]
fn bad_trees_and_bad_packets_are_errors() {
    let shaped_root = NodeSpec::new("r", Fifo).shaping(TokenBucket::new(Bandwidth(1), 1).unwrap());
    assert_eq!(
        PifoTreeBuilder::new(shaped_root)
            .build::<u8>(Fixed(NodeId(0)))
            .err(),
        Some(TreeError::ShapingAtRoot)
    );
    let mut b = PifoTreeBuilder::new(NodeSpec::new("r", Fifo));
    assert_eq!(
        b.add(NodeId(5), NodeSpec::new("x", Fifo)).err(),
        Some(TreeError::UnknownNode(NodeId(5)))
    );
    let mut b =
        PifoTreeBuilder::new(NodeSpec::new("r", Fifo).capacity(1, OverflowPolicy::DropArriving));
    let leaf = b.add(b.root(), NodeSpec::new("l", Fifo)).unwrap();
    assert_eq!(
        b.build::<u8>(Fixed(leaf)).err(),
        Some(TreeError::CapacityOnInnerNode(NodeId(0)))
    );
    let mut b = PifoTreeBuilder::new(NodeSpec::new("r", Fifo));
    for i in 0..super::MAX_CHILDREN {
        b.add(b.root(), NodeSpec::new(format!("{i}"), Fifo))
            .unwrap();
    }
    assert!(matches!(
        b.add(b.root(), NodeSpec::new("one too many", Fifo)),
        Err(TreeError::TooManyChildren { .. })
    ));

    let mut b = PifoTreeBuilder::new(NodeSpec::new("r", Fifo));
    let leaf = b.add(b.root(), NodeSpec::new("l", Fifo)).unwrap();
    let mut t: PifoTree<u8> = b
        .build(move |i: &PacketInfo| match i.flow {
            0 => Some(leaf),
            1 => Some(NodeId(0)),
            2 => Some(NodeId(99)),
            _ => None,
        })
        .unwrap();
    assert!(matches!(
        t.enqueue(Time::ZERO, info(1, 1), 1),
        Err(EnqueueError::NotALeaf(_, 1))
    ));
    assert!(matches!(
        t.enqueue(Time::ZERO, info(2, 1), 2),
        Err(EnqueueError::NotALeaf(_, 2))
    ));
    assert!(matches!(
        t.enqueue(Time::ZERO, info(3, 1), 3),
        Err(EnqueueError::NoLeaf(3))
    ));
    let bad = PacketInfo {
        priority: 8,
        ..PacketInfo::default()
    };
    let e = t.enqueue(Time::ZERO, bad, 4);
    assert!(matches!(
        e,
        Err(EnqueueError::BadPriority { priority: 8, .. })
    ));
    assert_eq!(e.err().map(EnqueueError::into_item), Some(4));
    assert!(t.is_empty());
}

#[test]
fn a_single_node_tree_is_a_pifo() {
    let mut t: PifoTree<u32> = PifoTreeBuilder::new(NodeSpec::new("only", Srpt))
        .build(Fixed(NodeId(0)))
        .unwrap();
    for (i, r) in [30u64, 10, 20, 10].into_iter().enumerate() {
        let p = PacketInfo {
            remaining_bytes: r,
            ..PacketInfo::default()
        };
        t.enqueue(Time::ZERO, p, i as u32).unwrap();
    }
    let order: Vec<u32> = std::iter::from_fn(|| t.dequeue(Time::ZERO, 0)).collect();
    assert_eq!(order, vec![1, 3, 2, 0]);
}

proptest! {
    /// Under any sequence of enqueues, dequeues and pause masks, a dequeue never returns a paused
    /// priority, returns something whenever an unpaused item is held, and loses nothing.
    #[test]
    fn pause_never_leaks_and_never_blocks(
        ops in proptest::collection::vec((any::<bool>(), 0u64..4, 0u8..8, any::<u8>()), 1..300),
    ) {
        let mut b = PifoTreeBuilder::new(NodeSpec::new("root", Wfq::fair(ClassBy::Child)));
        let left = b.add(b.root(), NodeSpec::new("l", StrictPriority::new(ClassBy::Child))).unwrap();
        let right = b.add(b.root(), NodeSpec::new("r", Fifo)).unwrap();
        let mut leaves = Vec::new();
        for parent in [left, left, right, right] {
            leaves.push(b.add(parent, NodeSpec::new("q", Srpt)).unwrap());
        }
        let mut t: PifoTree<(u8, u32)> = b.build(Table::new(Field::Flow, leaves)).unwrap();
        let mut held = [0usize; 8];
        for (i, (push, flow, prio, paused)) in ops.into_iter().enumerate() {
            let now = Time::from_ns(i as u64);
            if push {
                let p = PacketInfo { flow, priority: prio, len: 100, remaining_bytes: (i % 7) as u64, ..PacketInfo::default() };
                t.enqueue(now, p, (prio, i as u32)).unwrap();
                held[prio as usize] += 1;
            } else {
                let unpaused: usize = (0..8).filter(|c| paused & (1 << c) == 0).map(|c| held[c]).sum();
                match t.dequeue(now, paused) {
                    Some((prio, _)) => {
                        prop_assert_eq!(paused & (1 << prio), 0, "paused priority sent");
                        held[prio as usize] -= 1;
                    }
                    None => prop_assert_eq!(unpaused, 0, "blocked by a paused priority"),
                }
            }
            prop_assert_eq!(t.len(), held.iter().sum::<usize>());
        }
    }
}

#[test]
fn a_packet_tree_is_send() {
    fn send<T: Send>() {}
    send::<PifoTree<fabemu_fabric::packet::Packet>>();
}
