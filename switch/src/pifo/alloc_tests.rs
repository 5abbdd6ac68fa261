//! Checks that the PIFOs and a PIFO tree allocate nothing per operation once warm, with a
//! counting allocator (per thread, so parallel tests do not disturb each other).

use fabemu_fabric::units::Time;

use super::classifier::{Field, Table};
use super::transactions::{ClassBy, Fifo, Wfq};
use super::{
    BucketConfig, BucketPifo, HeapPifo, NodeSpec, OverflowPolicy, PacketInfo, Pifo, PifoKind,
    PifoTree, PifoTreeBuilder,
};

/// Allocations `f` makes on this thread (the `allocation-counter` crate's counting global
/// allocator, per thread, so parallel tests do not disturb each other; its unsafe code is
/// there, not here, where the workspace forbids it).
fn allocations(f: impl FnOnce()) -> u64 {
    allocation_counter::measure(f).count_total
}

/// Steady state: `n` elements held, then push one / pop one; returns allocations in that phase.
fn steady_allocs<P: Pifo<u64>>(p: &mut P, n: u64, span: u64) -> u64 {
    let mut x = 88172645463325252u64;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for _ in 0..n {
        let r = next() % span;
        assert!(p.push(r, r).is_ok());
    }
    // Warm up: let every internal vector reach its working size.
    for _ in 0..4 * n {
        let r = next() % span;
        assert!(p.push(r, r).is_ok());
        assert!(p.pop().is_some());
    }
    allocations(|| {
        for _ in 0..20_000 {
            let r = next() % span;
            assert!(p.push(r, r).is_ok());
            assert!(p.pop().is_some());
        }
    })
}

#[test]
fn bucket_pifo_allocates_nothing_in_steady_state() {
    let mut p = BucketPifo::with_config(
        1 << 14,
        OverflowPolicy::DropArriving,
        BucketConfig {
            window_log2: 14,
            granularity_log2: 0,
        },
    );
    assert_eq!(steady_allocs(&mut p, 4096, 1 << 14), 0);
}

#[test]
fn heap_pifo_allocates_nothing_in_steady_state() {
    let mut p = HeapPifo::new(1 << 14, OverflowPolicy::DropArriving);
    assert_eq!(steady_allocs(&mut p, 4096, u64::MAX), 0);
}

#[test]
fn pifo_tree_allocates_nothing_in_steady_state() {
    for kind in [PifoKind::Heap, PifoKind::Bucket(BucketConfig::default())] {
        let root = NodeSpec::new("root", Wfq::new(ClassBy::Child, &[1.0, 3.0]).unwrap());
        let mut b = PifoTreeBuilder::new(root.pifo(kind));
        let leaves = vec![
            b.add(b.root(), NodeSpec::new("a", Fifo).pifo(kind))
                .unwrap(),
            b.add(b.root(), NodeSpec::new("b", Fifo).pifo(kind))
                .unwrap(),
        ];
        let mut t: PifoTree<u64> = b.build(Table::new(Field::Flow, leaves)).unwrap();
        let info = |flow: u64| PacketInfo {
            flow,
            len: 1000,
            ..PacketInfo::default()
        };
        let mut clock = 0u64;
        let mut step = |t: &mut PifoTree<u64>, k: u64| {
            clock += 1;
            let now = Time(clock);
            assert!(t.enqueue(now, info(k % 2), k).is_ok());
            assert!(t.dequeue(now, 0).is_some());
        };
        for k in 0..1000 {
            assert!(t.enqueue(Time::ZERO, info(k % 2), k).is_ok());
        }
        for k in 0..5000 {
            step(&mut t, k);
        }
        let n = allocations(|| {
            for k in 0..20_000 {
                step(&mut t, k);
            }
        });
        assert_eq!(n, 0, "{kind:?}");
    }
}

#[test]
fn the_counter_sees_allocations() {
    let n = allocations(|| {
        let v = std::hint::black_box(vec![1u8; 10]);
        assert_eq!(v.len(), 10);
    });
    assert!(n > 0);
}
