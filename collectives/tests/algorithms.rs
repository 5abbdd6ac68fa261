//! The built-in algorithms compute their collective, validate, and move the expected traffic.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: a failure is a panic

use fabemu_collectives::algorithms::{
    all_to_all_blocks, direct_all_to_all, ring_all_gather, ring_all_reduce, ring_reduce_scatter,
};
use fabemu_collectives::{
    run_local, validate, ChunkRange, Collective, Program, StepId, StepKind, ValidationError,
};
use proptest::prelude::*;

/// Counts below, equal to, and not divisible by the rank counts tested.
const COUNTS: [usize; 14] = [0, 1, 2, 3, 5, 7, 8, 9, 10, 16, 17, 31, 64, 100];

/// A distinct, deterministic value for element `e` of rank `r`.
fn value(seed: i64, r: usize, e: usize) -> i64 {
    seed.wrapping_mul(31)
        .wrapping_add((r as i64 + 1) * 1_000_003)
        .wrapping_add(e as i64 * 7919)
}

fn full_inputs(seed: i64, n: usize, count: usize) -> Vec<Vec<i64>> {
    (0..n)
        .map(|r| (0..count).map(|e| value(seed, r, e)).collect())
        .collect()
}

fn column_sum(seed: i64, n: usize, e: usize) -> i64 {
    (0..n).fold(0i64, |acc, r| acc.wrapping_add(value(seed, r, e)))
}

fn range(c: ChunkRange) -> std::ops::Range<usize> {
    c.offset..c.offset + c.len
}

fn check_all_reduce(n: usize, count: usize, seed: i64) {
    let programs = ring_all_reduce(n, count).unwrap();
    let out = run_local(&programs, full_inputs(seed, n, count)).unwrap();
    let expected: Vec<i64> = (0..count).map(|e| column_sum(seed, n, e)).collect();
    for (r, o) in out.iter().enumerate() {
        assert_eq!(o, &expected, "n={n} count={count} rank={r}");
    }
}

fn check_reduce_scatter(n: usize, count: usize, seed: i64) {
    let programs = ring_reduce_scatter(n, count).unwrap();
    let out = run_local(&programs, full_inputs(seed, n, count)).unwrap();
    let chunks = ChunkRange::even_split(count, n);
    for (r, o) in out.iter().enumerate() {
        let expected: Vec<i64> = range(chunks[r]).map(|e| column_sum(seed, n, e)).collect();
        assert_eq!(o, &expected, "n={n} count={count} rank={r}");
    }
}

fn check_all_gather(n: usize, count: usize, seed: i64) {
    let programs = ring_all_gather(n, count).unwrap();
    let chunks = ChunkRange::even_split(count, n);
    // Rank r contributes its own chunk of the global pattern.
    let inputs = (0..n)
        .map(|r| range(chunks[r]).map(|e| value(seed, r, e)).collect())
        .collect();
    let out = run_local(&programs, inputs).unwrap();
    let expected: Vec<i64> = chunks
        .iter()
        .enumerate()
        .flat_map(|(owner, c)| range(*c).map(move |e| value(seed, owner, e)))
        .collect();
    for (r, o) in out.iter().enumerate() {
        assert_eq!(o, &expected, "n={n} count={count} rank={r}");
    }
}

fn check_all_to_all(n: usize, count: usize, seed: i64) {
    let programs = direct_all_to_all(n, count).unwrap();
    let inputs = full_inputs(seed, n, count);
    let out = run_local(&programs, inputs.clone()).unwrap();
    for (j, out_j) in out.iter().enumerate() {
        let out_blocks = all_to_all_blocks(n, count, j);
        for (i, in_i) in inputs.iter().enumerate() {
            let in_block = all_to_all_blocks(n, count, i)[j];
            assert_eq!(
                &out_j[range(out_blocks[i])],
                &in_i[range(in_block)],
                "n={n} count={count}: rank {i} block {j} -> rank {j} block {i}"
            );
        }
    }
}

fn generated(n: usize, count: usize) -> Vec<(&'static str, Vec<Program>)> {
    vec![
        ("reduce_scatter", ring_reduce_scatter(n, count).unwrap()),
        ("all_gather", ring_all_gather(n, count).unwrap()),
        ("all_reduce", ring_all_reduce(n, count).unwrap()),
        ("all_to_all", direct_all_to_all(n, count).unwrap()),
    ]
}

#[test]
fn ring_all_reduce_sums_at_every_rank() {
    for n in 1..=9 {
        for count in COUNTS {
            check_all_reduce(n, count, 1);
        }
    }
}

#[test]
fn ring_reduce_scatter_leaves_each_rank_its_reduced_chunk() {
    for n in 1..=9 {
        for count in COUNTS {
            check_reduce_scatter(n, count, 2);
        }
    }
}

#[test]
fn ring_all_gather_gives_everyone_everything() {
    for n in 1..=9 {
        for count in COUNTS {
            check_all_gather(n, count, 3);
        }
    }
}

#[test]
fn direct_all_to_all_transposes_blocks() {
    for n in 1..=9 {
        for count in COUNTS {
            check_all_to_all(n, count, 4);
        }
    }
}

#[test]
fn generated_programs_validate() {
    for n in 1..=9 {
        for count in COUNTS {
            for (name, programs) in generated(n, count) {
                assert_eq!(programs.len(), n);
                assert_eq!(validate(&programs), Ok(()), "{name} n={n} count={count}");
            }
        }
    }
}

#[test]
fn single_rank_programs_are_no_ops() {
    for count in [0, 1, 5] {
        for (name, programs) in generated(1, count) {
            assert!(programs[0].steps.is_empty(), "{name}");
            let out = run_local(&programs, vec![(0..count as i64).collect()]).unwrap();
            assert_eq!(out, [(0..count as i64).collect::<Vec<_>>()], "{name}");
        }
    }
}

#[test]
fn ring_all_reduce_traffic_matches_bus_factor() {
    for n in 1..=9 {
        for count in COUNTS {
            let programs = ring_all_reduce(n, count).unwrap();
            let ideal = Collective::AllReduce.bus_factor(n) * count as f64;
            let mut total = 0;
            for p in &programs {
                assert_eq!(p.sends().count(), 2 * (n - 1), "n={n} count={count}");
                let sent = p.sent_elements();
                // Each of the 2(n-1) chunks is within one element of count/n; the two chunks a
                // rank does not send bound the deviation below 2 elements.
                assert!(
                    (sent as f64 - ideal).abs() < 2.0,
                    "n={n} count={count} rank={}: sent {sent}, ideal {ideal}",
                    p.rank
                );
                total += sent;
            }
            // Over all ranks the rounding cancels exactly.
            assert_eq!(total, 2 * (n - 1) * count, "n={n} count={count}");
        }
    }
}

#[test]
fn validate_rejects_broken_generated_programs() {
    let good = ring_all_reduce(4, 10).unwrap();

    let mut dangling = good.clone();
    dangling[2].steps[3].deps.push(StepId(99));
    assert!(matches!(
        validate(&dangling),
        Err(ValidationError::DanglingDep { rank: 2, .. })
    ));

    // Drop all of rank 1's receives: rank 0's sends to it are unmatched.
    let mut unmatched = good.clone();
    unmatched[1]
        .steps
        .retain(|s| !matches!(s.kind, StepKind::Recv { .. }));
    for (i, s) in unmatched[1].steps.iter_mut().enumerate() {
        s.id = StepId(i);
        s.deps.clear();
    }
    assert!(matches!(
        validate(&unmatched),
        Err(ValidationError::UnmatchedSend { src: 0, dst: 1, .. })
    ));

    let mut short = good.clone();
    let StepKind::Recv {
        peer,
        chunk,
        reduce,
        channel,
    } = short[3].steps[1].kind
    else {
        panic!("step 1 of a ring is a receive");
    };
    short[3].steps[1].kind = StepKind::Recv {
        peer,
        chunk: ChunkRange::new(chunk.offset, chunk.len - 1),
        reduce,
        channel,
    };
    assert!(matches!(
        validate(&short),
        Err(ValidationError::LengthMismatch {
            src: 2,
            dst: 3,
            index: 0,
            ..
        })
    ));

    let mut racy = good;
    racy[0].steps[2].deps.clear();
    assert!(matches!(
        validate(&racy),
        Err(ValidationError::Race { rank: 0, .. })
    ));
}

#[test]
fn programs_roundtrip_through_json() {
    for (name, programs) in generated(3, 7) {
        let json = serde_json::to_string(&programs).unwrap();
        let back: Vec<Program> = serde_json::from_str(&json).unwrap();
        assert_eq!(back, programs, "{name}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn collectives_are_correct_for_any_n_and_count(
        n in 1usize..=16,
        count in 0usize..=120,
        seed in any::<i64>(),
    ) {
        for (_, programs) in generated(n, count) {
            prop_assert_eq!(validate(&programs), Ok(()));
        }
        check_all_reduce(n, count, seed);
        check_reduce_scatter(n, count, seed);
        check_all_gather(n, count, seed);
        check_all_to_all(n, count, seed);
    }
}
