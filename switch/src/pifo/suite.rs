//! One test suite for every [`Pifo`] implementation, instantiated per implementation by a macro
//! (`pifo_suite!(module, |capacity, policy| constructor)`).

use super::{Overflow, OverflowPolicy, Pifo};

/// The reference model: a list searched linearly; order (rank, arrival).
#[derive(Default)]
pub(super) struct Model {
    v: Vec<(u64, u64, u32)>,
    seq: u64,
    capacity: usize,
    policy: OverflowPolicy,
}

impl Model {
    pub(super) fn new(capacity: usize, policy: OverflowPolicy) -> Model {
        Model {
            capacity,
            policy,
            ..Model::default()
        }
    }
    fn min_at(&self) -> Option<usize> {
        (0..self.v.len()).min_by_key(|&i| (self.v[i].0, self.v[i].1))
    }
    fn max_at(&self) -> Option<usize> {
        (0..self.v.len()).max_by_key(|&i| (self.v[i].0, self.v[i].1))
    }
    pub(super) fn push(&mut self, rank: u64, item: u32) -> Result<(), Overflow<u32>> {
        let seq = self.seq;
        self.seq += 1;
        if self.v.len() >= self.capacity {
            let last = self.max_at();
            let evict = match (self.policy, last) {
                (OverflowPolicy::EvictLargest, Some(i)) if rank < self.v[i].0 => i,
                _ => return Err(Overflow::Refused { rank, item }),
            };
            let (r, _, it) = self.v.remove(evict);
            self.v.push((rank, seq, item));
            return Err(Overflow::Evicted { rank: r, item: it });
        }
        self.v.push((rank, seq, item));
        Ok(())
    }
    pub(super) fn pop(&mut self) -> Option<(u64, u32)> {
        let i = self.min_at()?;
        let (r, _, it) = self.v.remove(i);
        Some((r, it))
    }
    pub(super) fn pop_largest(&mut self) -> Option<(u64, u32)> {
        let i = self.max_at()?;
        let (r, _, it) = self.v.remove(i);
        Some((r, it))
    }
    pub(super) fn peek(&self) -> Option<(u64, u32)> {
        self.min_at().map(|i| (self.v[i].0, self.v[i].2))
    }
    pub(super) fn peek_largest(&self) -> Option<(u64, u32)> {
        self.max_at().map(|i| (self.v[i].0, self.v[i].2))
    }
    pub(super) fn len(&self) -> usize {
        self.v.len()
    }
}

/// Drains a PIFO into (rank, item) pairs.
pub(super) fn drain<P: Pifo<u32>>(p: &mut P) -> Vec<(u64, u32)> {
    std::iter::from_fn(|| p.pop()).collect()
}

/// An operation of the property test.
#[derive(Clone, Debug)]
pub(super) enum Op {
    Push(u64),
    Pop,
    PopLargest,
}

macro_rules! pifo_suite {
    ($name:ident, $make:expr) => {
        mod $name {
            use super::super::{Overflow, OverflowPolicy, Pifo};
            use super::{drain, Model, Op};
            use proptest::prelude::*;

            fn make(capacity: usize, policy: OverflowPolicy) -> impl Pifo<u32> {
                #[allow(clippy::redundant_closure_call)]
                ($make)(capacity, policy)
            }

            #[test]
            fn smallest_rank_first() {
                let mut p = make(16, OverflowPolicy::DropArriving);
                for (i, r) in [5u64, 1, 9, 1, 0, 7].into_iter().enumerate() {
                    assert_eq!(p.push(r, i as u32), Ok(()));
                }
                assert_eq!(p.len(), 6);
                assert_eq!(p.capacity(), 16);
                assert_eq!(p.peek_rank(), Some(0));
                assert_eq!(p.peek_largest().map(|(r, &i)| (r, i)), Some((9, 2)));
                assert_eq!(
                    drain(&mut p),
                    vec![(0, 4), (1, 1), (1, 3), (5, 0), (7, 5), (9, 2)]
                );
                assert!(p.is_empty());
                assert_eq!(p.pop(), None);
                assert_eq!(p.peek(), None);
            }

            #[test]
            fn thousands_of_equal_ranks_keep_arrival_order() {
                let mut p = make(100_000, OverflowPolicy::DropArriving);
                // Equal ranks interleaved with smaller and larger ones, and pops in between, so
                // ties cross every internal path (heap sifts, bucket migrations).
                let mut out = Vec::new();
                for i in 0..20_000u32 {
                    let r = match i % 4 {
                        0 | 2 => 500,
                        1 => u64::from(i % 1000),
                        _ => 1_000_000 + u64::from(i % 7),
                    };
                    assert_eq!(p.push(r, i), Ok(()));
                    if i % 5 == 0 {
                        out.extend(p.pop());
                    }
                }
                out.extend(drain(&mut p));
                assert_eq!(out.len(), 20_000);
                let tied: Vec<u32> = out.iter().filter(|(r, _)| *r == 500).map(|x| x.1).collect();
                assert_eq!(tied.len(), 10_000);
                assert!(tied.windows(2).all(|w| w[0] < w[1]), "equal ranks reordered");
                // Only equal ranks at all: pure FIFO.
                let mut q = make(5000, OverflowPolicy::DropArriving);
                for i in 0..5000u32 {
                    assert_eq!(q.push(42, i), Ok(()));
                }
                let order: Vec<u32> = drain(&mut q).into_iter().map(|x| x.1).collect();
                assert_eq!(order, (0..5000).collect::<Vec<u32>>());
            }

            #[test]
            fn drop_arriving_refuses_when_full() {
                let mut p = make(2, OverflowPolicy::DropArriving);
                assert_eq!(p.push(5, 0), Ok(()));
                assert_eq!(p.push(6, 1), Ok(()));
                assert_eq!(p.push(1, 2), Err(Overflow::Refused { rank: 1, item: 2 }));
                assert_eq!(drain(&mut p), vec![(5, 0), (6, 1)]);
                let mut z = make(0, OverflowPolicy::EvictLargest);
                assert_eq!(z.push(1, 9), Err(Overflow::Refused { rank: 1, item: 9 }));
            }

            #[test]
            fn evict_largest_pushes_out_the_last_to_leave() {
                let mut p = make(3, OverflowPolicy::EvictLargest);
                for (i, r) in [4u64, 8, 8].into_iter().enumerate() {
                    assert_eq!(p.push(r, i as u32), Ok(()));
                }
                // Among the two largest (8), the later arrival goes.
                let e = p.push(1, 3);
                assert_eq!(e, Err(Overflow::Evicted { rank: 8, item: 2 }));
                assert!(e.as_ref().is_err_and(|o| o.arriving_queued()));
                // An arrival that would leave last itself (rank equal to the largest) is refused.
                assert_eq!(p.push(8, 4), Err(Overflow::Refused { rank: 8, item: 4 }));
                assert_eq!(p.push(9, 5), Err(Overflow::Refused { rank: 9, item: 5 }));
                assert_eq!(drain(&mut p), vec![(1, 3), (4, 0), (8, 1)]);
            }

            #[test]
            fn extreme_ranks() {
                let mut p = make(8, OverflowPolicy::DropArriving);
                for (i, r) in [u64::MAX, 0, u64::MAX - 1, 1 << 63, u64::MAX, 0]
                    .into_iter()
                    .enumerate()
                {
                    assert_eq!(p.push(r, i as u32), Ok(()));
                }
                assert_eq!(
                    drain(&mut p),
                    vec![
                        (0, 1),
                        (0, 5),
                        (1 << 63, 3),
                        (u64::MAX - 1, 2),
                        (u64::MAX, 0),
                        (u64::MAX, 4)
                    ]
                );
            }

            fn rank() -> impl Strategy<Value = u64> {
                prop_oneof![
                    0u64..8,
                    0u64..300,
                    any::<u64>(),
                    (0u64..4).prop_map(|k| 1_000_000 * k),
                ]
            }

            fn op() -> impl Strategy<Value = Op> {
                prop_oneof![
                    6 => rank().prop_map(Op::Push),
                    3 => Just(Op::Pop),
                    1 => Just(Op::PopLargest),
                ]
            }

            proptest! {
                #[test]
                fn matches_the_reference_model(
                    ops in proptest::collection::vec(op(), 0..400),
                    capacity in prop_oneof![1usize..6, Just(1000usize)],
                    evict in any::<bool>(),
                ) {
                    let policy = if evict {
                        OverflowPolicy::EvictLargest
                    } else {
                        OverflowPolicy::DropArriving
                    };
                    let mut p = make(capacity, policy);
                    let mut m = Model::new(capacity, policy);
                    for (i, op) in ops.into_iter().enumerate() {
                        match op {
                            Op::Push(r) => prop_assert_eq!(p.push(r, i as u32), m.push(r, i as u32)),
                            Op::Pop => prop_assert_eq!(p.pop(), m.pop()),
                            Op::PopLargest => prop_assert_eq!(p.pop_largest(), m.pop_largest()),
                        }
                        prop_assert_eq!(p.len(), m.len());
                        prop_assert_eq!(p.peek().map(|(r, &i)| (r, i)), m.peek());
                        prop_assert_eq!(p.peek_largest().map(|(r, &i)| (r, i)), m.peek_largest());
                    }
                    while let Some(x) = m.pop() {
                        prop_assert_eq!(p.pop(), Some(x));
                    }
                    prop_assert_eq!(p.pop(), None);
                }
            }
        }
    };
}

pifo_suite!(heap_pifo, super::super::HeapPifo::<u32>::new);
pifo_suite!(bucket_pifo_default, |c, p| {
    super::super::BucketPifo::<u32>::new(c, p)
});
// A 64-bucket window: most ranks of the suite fall outside it, exercising the overflow heaps,
// window slides and migrations.
pifo_suite!(bucket_pifo_narrow, |c, p| {
    super::super::BucketPifo::<u32>::with_config(
        c,
        p,
        super::super::BucketConfig {
            window_log2: 6,
            granularity_log2: 0,
        },
    )
});
