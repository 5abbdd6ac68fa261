//! `compile` for every supported (collective, layout) combination, run through the reference
//! interpreter and checked against the layout conventions alone (never against the algorithm's
//! own idea of where data goes): exact integer results, so no tolerance.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: a failure is a panic

use fabemu_collectives::algorithms::all_to_all_blocks;
use fabemu_collectives::executor::MAX_CHANNELS;
use fabemu_collectives::{
    algorithms_for, compile, run_local, validate, Algorithm, AlgorithmError, ChunkRange,
    Collective, DimPolicy, DimSpec, Layout, Plan, Program, Scheme,
};

/// A distinct value for element `e` of rank `r`.
fn value(r: usize, e: usize) -> i64 {
    (r as i64 + 1) * 1_000_003 + e as i64 * 7919 + 11
}

fn column_sum(n: usize, e: usize) -> i64 {
    (0..n).map(|r| value(r, e)).sum()
}

fn range(c: ChunkRange) -> std::ops::Range<usize> {
    c.offset..c.offset + c.len
}

/// Checks that `ranges` are disjoint and cover `[0, count)`.
fn assert_disjoint_cover(ranges: &[ChunkRange], count: usize, what: &str) {
    let mut sorted: Vec<_> = ranges.iter().filter(|r| r.len > 0).copied().collect();
    sorted.sort_by_key(|r| r.offset);
    let mut at = 0;
    for r in sorted {
        assert_eq!(
            r.offset, at,
            "{what}: ranges {ranges:?} leave a gap or overlap"
        );
        at += r.len;
    }
    assert_eq!(at, count, "{what}: ranges {ranges:?} do not cover {count}");
}

/// Runs `programs` for `op` and checks the result from the conventions.
fn check(op: Collective, n: usize, count: usize, root: usize, programs: &[Program], what: &str) {
    assert_eq!(programs.len(), n, "{what}");
    assert_eq!(validate(programs), Ok(()), "{what}");
    let all = ChunkRange::new(0, count);
    let full = |r: usize| (0..count).map(|e| value(r, e)).collect::<Vec<_>>();
    let sums: Vec<i64> = (0..count).map(|e| column_sum(n, e)).collect();
    match op {
        Collective::AllReduce => {
            for p in programs {
                assert_eq!((p.input, p.output), (all, all), "{what}");
            }
            let out = run_local(programs, (0..n).map(full).collect()).unwrap();
            for (r, o) in out.iter().enumerate() {
                assert_eq!(o, &sums, "{what} rank {r}");
            }
        }
        Collective::ReduceScatter => {
            let outs: Vec<_> = programs.iter().map(|p| p.output).collect();
            assert_disjoint_cover(&outs, count, what);
            let out = run_local(programs, (0..n).map(full).collect()).unwrap();
            for (r, o) in out.iter().enumerate() {
                assert_eq!(o, &sums[range(outs[r])], "{what} rank {r}");
            }
        }
        Collective::AllGather => {
            let ins: Vec<_> = programs.iter().map(|p| p.input).collect();
            assert_disjoint_cover(&ins, count, what);
            let mut expected = vec![0; count];
            for (r, i) in ins.iter().enumerate() {
                for e in range(*i) {
                    expected[e] = value(r, e);
                }
            }
            let inputs = ins
                .iter()
                .enumerate()
                .map(|(r, i)| range(*i).map(|e| value(r, e)).collect())
                .collect();
            let out = run_local(programs, inputs).unwrap();
            for (r, o) in out.iter().enumerate() {
                assert_eq!(o, &expected, "{what} rank {r}");
            }
        }
        Collective::AllToAll => {
            let out = run_local(programs, (0..n).map(full).collect()).unwrap();
            for (j, out_j) in out.iter().enumerate() {
                let out_blocks = all_to_all_blocks(n, count, j);
                for i in 0..n {
                    let in_block = all_to_all_blocks(n, count, i)[j];
                    assert_eq!(
                        &out_j[range(out_blocks[i])],
                        &full(i)[range(in_block)],
                        "{what}: rank {i} block {j} -> rank {j} block {i}"
                    );
                }
            }
        }
        Collective::Broadcast => {
            let inputs = (0..n)
                .map(|r| if r == root { full(r) } else { Vec::new() })
                .collect();
            let out = run_local(programs, inputs).unwrap();
            for (r, o) in out.iter().enumerate() {
                assert_eq!(o, &full(root), "{what} rank {r}");
            }
        }
        Collective::Reduce => {
            let out = run_local(programs, (0..n).map(full).collect()).unwrap();
            for (r, o) in out.iter().enumerate() {
                if r == root {
                    assert_eq!(o, &sums, "{what} root {r}");
                } else {
                    assert!(o.is_empty(), "{what} rank {r}");
                }
            }
        }
    }
}

fn plan(op: Collective, n: usize, count: usize, layout: Layout) -> Plan {
    Plan {
        op,
        ranks: n,
        count,
        root: 0,
        layout,
        chunks: 1,
        chunks_in_flight: 0,
    }
}

/// Counts below, at and not divisible by the rank counts used.
const COUNTS: [usize; 8] = [0, 1, 2, 5, 7, 16, 17, 50];

#[test]
fn every_flat_algorithm_computes_its_collective() {
    for op in Collective::ALL {
        for &algorithm in algorithms_for(op) {
            for n in [1usize, 2, 3, 4, 5, 6, 7, 8, 12] {
                let pow2_only = algorithm == Algorithm::HalvingDoubling
                    && matches!(op, Collective::ReduceScatter | Collective::AllGather);
                if pow2_only && !n.is_power_of_two() {
                    continue;
                }
                for count in COUNTS {
                    for root in [0, n / 2, n - 1] {
                        let mut p = plan(op, n, count, Layout::Flat(algorithm));
                        p.root = root;
                        let what = format!("{op} {algorithm} n={n} count={count} root={root}");
                        let programs = compile(&p).unwrap_or_else(|e| panic!("{what}: {e}"));
                        check(op, n, count, root, &programs, &what);
                    }
                }
            }
        }
    }
}

#[test]
fn chunked_flat_algorithms_compute_their_collective() {
    for op in Collective::ALL {
        for &algorithm in algorithms_for(op) {
            for n in [2usize, 3, 4, 5] {
                if algorithm == Algorithm::HalvingDoubling
                    && !n.is_power_of_two()
                    && op != Collective::AllReduce
                {
                    continue;
                }
                for count in [0, 3, 17, 40] {
                    for (chunks, in_flight) in [(2, 0), (3, 1), (4, 2), (5, 0)] {
                        let mut p = plan(op, n, count, Layout::Flat(algorithm));
                        p.root = n - 1;
                        p.chunks = chunks;
                        p.chunks_in_flight = in_flight;
                        let what = format!(
                            "{op} {algorithm} n={n} count={count} chunks={chunks}/{in_flight}"
                        );
                        let programs = compile(&p).unwrap_or_else(|e| panic!("{what}: {e}"));
                        check(op, n, count, n - 1, &programs, &what);
                    }
                }
            }
        }
    }
}

fn dims(sizes: &[usize], algorithms: &[Algorithm]) -> Vec<DimSpec> {
    sizes
        .iter()
        .zip(algorithms)
        .enumerate()
        .map(|(d, (&size, &algorithm))| DimSpec {
            size,
            algorithm,
            // Distinct bandwidths so Themis orders differ from fixed.
            bandwidth_bps: 100_000_000_000 / (d as u64 + 1),
        })
        .collect()
}

#[test]
fn hierarchical_collectives_compute_their_collective() {
    use Algorithm::{Direct, HalvingDoubling as Hd, Ring};
    let grids: &[(&[usize], &[Algorithm])] = &[
        (&[2, 3], &[Ring, Direct]),
        (&[4, 2], &[Hd, Ring]),
        (&[2, 2, 2], &[Direct, Hd, Ring]),
        (&[3, 1, 2], &[Ring, Ring, Hd]),
        (&[5], &[Direct]),
        (&[2, 4], &[Ring, Hd]),
    ];
    for &(sizes, algs) in grids {
        let n: usize = sizes.iter().product();
        for op in [
            Collective::AllReduce,
            Collective::ReduceScatter,
            Collective::AllGather,
        ] {
            for scheme in [Scheme::LocalBwAware, Scheme::Baseline] {
                if scheme == Scheme::Baseline && op != Collective::AllReduce {
                    continue;
                }
                for policy in [DimPolicy::Fixed, DimPolicy::Themis] {
                    for count in [0, 1, 7, 24, 61] {
                        for (chunks, in_flight) in [(1, 0), (3, 0), (4, 1)] {
                            let layout = Layout::Dims {
                                dims: dims(sizes, algs),
                                scheme,
                                policy,
                            };
                            let mut p = plan(op, n, count, layout);
                            p.chunks = chunks;
                            p.chunks_in_flight = in_flight;
                            let what = format!(
                                "{op} {sizes:?} {algs:?} {scheme:?} {policy:?} count={count} chunks={chunks}/{in_flight}"
                            );
                            let programs = compile(&p).unwrap_or_else(|e| panic!("{what}: {e}"));
                            check(op, n, count, 0, &programs, &what);
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn baseline_accepts_every_all_reduce_algorithm_per_dimension() {
    use Algorithm::*;
    for algs in [
        [DoubleBinaryTree, Ring],
        [HalvingDoubling, DoubleBinaryTree],
        [Direct, HalvingDoubling],
    ] {
        for chunks in [1, 3] {
            let layout = Layout::Dims {
                dims: dims(&[3, 2], &algs),
                scheme: Scheme::Baseline,
                policy: DimPolicy::Themis,
            };
            let mut p = plan(Collective::AllReduce, 6, 29, layout);
            p.chunks = chunks;
            let what = format!("baseline {algs:?} chunks={chunks}");
            let programs = compile(&p).unwrap_or_else(|e| panic!("{what}: {e}"));
            check(Collective::AllReduce, 6, 29, 0, &programs, &what);
        }
    }
}

fn error(p: &Plan) -> (AlgorithmError, String) {
    let e = compile(p).expect_err("plan must be rejected");
    let text = e.to_string();
    (e, text)
}

#[test]
fn unsupported_plans_are_rejected_with_actionable_messages() {
    let flat = |op, n, alg| plan(op, n, 16, Layout::Flat(alg));

    let (e, text) = error(&flat(Collective::AllToAll, 4, Algorithm::HalvingDoubling));
    assert!(matches!(e, AlgorithmError::Unsupported { .. }));
    assert_eq!(
        text,
        "all_to_all has no halving_doubling algorithm; choose one of: ring, direct"
    );

    let (e, text) = error(&flat(
        Collective::ReduceScatter,
        6,
        Algorithm::HalvingDoubling,
    ));
    assert_eq!(e, AlgorithmError::NotPowerOfTwo { n: 6 });
    assert!(text.contains("got 6"), "{text}");
    // ... while All-Reduce folds the extra ranks in.
    assert!(compile(&flat(Collective::AllReduce, 6, Algorithm::HalvingDoubling)).is_ok());

    let mut p = flat(Collective::Broadcast, 4, Algorithm::Tree);
    p.root = 4;
    let (e, text) = error(&p);
    assert_eq!(e, AlgorithmError::RootOutOfRange { root: 4, ranks: 4 });
    assert_eq!(text, "root 4 does not exist: there are 4 ranks (0..4)");

    let mut p = flat(Collective::AllReduce, 4, Algorithm::Ring);
    p.chunks = 0;
    assert_eq!(error(&p).1, "chunks must be at least 1 (got 0)");
    assert_eq!(
        error(&flat(Collective::AllReduce, 0, Algorithm::Ring)).0,
        AlgorithmError::NoRanks
    );

    let dims_layout = |sizes: &[usize], algs: &[Algorithm], scheme| Layout::Dims {
        dims: dims(sizes, algs),
        scheme,
        policy: DimPolicy::Fixed,
    };
    use Algorithm::*;
    let (e, text) = error(&plan(
        Collective::AllReduce,
        8,
        16,
        dims_layout(&[2, 3], &[Ring, Ring], Scheme::LocalBwAware),
    ));
    assert!(matches!(
        e,
        AlgorithmError::DimProduct {
            product: 6,
            ranks: 8,
            ..
        }
    ));
    assert!(
        text.contains("multiply to 6, but the plan has 8 ranks"),
        "{text}"
    );
    let (_, text) = error(&plan(
        Collective::AllReduce,
        4,
        16,
        dims_layout(&[2, 2], &[Ring, DoubleBinaryTree], Scheme::LocalBwAware),
    ));
    assert_eq!(
        text,
        "dimension 1 uses double_binary_tree, which the local_bw_aware scheme cannot use per dimension; choose one of: ring, direct, halving_doubling"
    );
    let (e, _) = error(&plan(
        Collective::AllReduce,
        6,
        16,
        dims_layout(&[2, 3], &[Ring, HalvingDoubling], Scheme::LocalBwAware),
    ));
    assert_eq!(e, AlgorithmError::NotPowerOfTwo { n: 3 });
    let (e, _) = error(&plan(
        Collective::ReduceScatter,
        4,
        16,
        dims_layout(&[2, 2], &[Ring, Ring], Scheme::Baseline),
    ));
    assert!(matches!(e, AlgorithmError::BaselineNeedsAllReduce { .. }));
    let (e, _) = error(&plan(
        Collective::Broadcast,
        4,
        16,
        dims_layout(&[2, 2], &[Ring, Ring], Scheme::LocalBwAware),
    ));
    assert!(matches!(e, AlgorithmError::NoDimsLayout { .. }));
    let (e, _) = error(&plan(
        Collective::AllReduce,
        4,
        16,
        dims_layout(&[4, 0], &[Ring, Ring], Scheme::LocalBwAware),
    ));
    assert!(matches!(e, AlgorithmError::BadDims { .. }));
    let mut no_bw = dims(&[2, 2], &[Ring, Ring]);
    no_bw[1].bandwidth_bps = 0;
    let (e, _) = error(&plan(
        Collective::AllReduce,
        4,
        16,
        Layout::Dims {
            dims: no_bw,
            scheme: Scheme::LocalBwAware,
            policy: DimPolicy::Themis,
        },
    ));
    assert_eq!(e, AlgorithmError::MissingBandwidth { dim: 1 });
}

#[test]
fn huge_plans_fail_fast_instead_of_exhausting_memory() {
    // 65536 ranks of direct All-To-All would need 2^33 steps: rejected once the budget is
    // spent. A 2^30-element ring All-Reduce on 8 ranks is only 8 * 28 steps: programs are
    // O(steps), whatever the count.
    let (e, _) = error(&plan(
        Collective::AllToAll,
        65536,
        1 << 30,
        Layout::Flat(Algorithm::Direct),
    ));
    assert!(matches!(e, AlgorithmError::TooManySteps { .. }));
    // With a tiny buffer most messages are empty, but the loops over 65536 ranks still count
    // against the budget, so this also ends quickly instead of looping 2^33 times.
    let (e, _) = error(&plan(
        Collective::AllReduce,
        65536,
        10,
        Layout::Flat(Algorithm::Ring),
    ));
    assert!(matches!(e, AlgorithmError::TooManySteps { .. }));
    let p = compile(&plan(
        Collective::AllReduce,
        8,
        1 << 30,
        Layout::Flat(Algorithm::Ring),
    ))
    .unwrap();
    assert_eq!(p.iter().map(|p| p.steps.len()).sum::<usize>(), 8 * 28);
    let mut a2a = plan(
        Collective::AllToAll,
        4,
        usize::MAX / 2,
        Layout::Flat(Algorithm::Ring),
    );
    a2a.chunks = 1;
    assert!(matches!(
        compile(&a2a),
        Err(AlgorithmError::CountTooLarge { .. })
    ));
}

/// `(peer, elements, channel)` of every send of `p`, in list order.
fn sends(p: &Program) -> Vec<(usize, usize, u32)> {
    p.sends_on_channels()
        .map(|(peer, chunk, ch)| (peer, chunk.len, ch))
        .collect()
}

fn compile_flat(op: Collective, n: usize, count: usize, a: Algorithm) -> Vec<Program> {
    compile(&plan(op, n, count, Layout::Flat(a))).unwrap()
}

#[test]
fn message_sizes_follow_the_closed_forms() {
    // Ring All-Reduce: 2(n-1) messages of count/n to the next rank.
    for p in compile_flat(Collective::AllReduce, 8, 800, Algorithm::Ring) {
        assert_eq!(sends(&p), vec![((p.rank + 1) % 8, 100, 0); 14]);
    }
    // Direct All-Reduce: Reduce-Scatter then All-Gather, each like an All-To-All of S: n-1
    // messages of S/n, round k to rank r + k.
    for p in compile_flat(Collective::AllReduce, 5, 500, Algorithm::Direct) {
        let peers: Vec<_> = (1..5).map(|k| ((p.rank + k) % 5, 100, 0)).collect();
        assert_eq!(sends(&p), [peers.clone(), peers].concat());
    }
    // Halving-doubling: log2(n) rounds each way, sizes S/2, S/4, S/8 then back up.
    for p in compile_flat(Collective::AllReduce, 8, 800, Algorithm::HalvingDoubling) {
        let r = p.rank;
        let expected = [(4, 400), (2, 200), (1, 100), (1, 100), (2, 200), (4, 400)]
            .map(|(m, len)| (r ^ m, len, 0));
        assert_eq!(sends(&p), expected);
    }
    // Non-power-of-two: 6 = 4 + 2, ranks 1 and 3 fold into 0 and 2 and get the result back.
    let fold = compile_flat(Collective::AllReduce, 6, 600, Algorithm::HalvingDoubling);
    assert_eq!(sends(&fold[1]), [(0, 600, 0)]);
    assert_eq!(sends(&fold[3]), [(2, 600, 0)]);
    assert_eq!(sends(&fold[0]).last(), Some(&(1, 600, 0)));
    assert_eq!(sends(&fold[5]).len(), 4);
    // Ring All-To-All, blocks of 100: round s forwards n - s blocks to the next rank.
    for p in compile_flat(Collective::AllToAll, 4, 400, Algorithm::Ring) {
        let next = (p.rank + 1) % 4;
        assert_eq!(sends(&p), [(next, 300, 0), (next, 200, 0), (next, 100, 0)]);
        assert_eq!(p.buffer_len, 2 * 400 + 2 * 3 * 101);
    }
    // Pipeline Broadcast from rank 1 along 1 -> 2 -> 3 -> 0, in 8 pieces of 10.
    let mut p = plan(
        Collective::Broadcast,
        4,
        80,
        Layout::Flat(Algorithm::Pipeline),
    );
    p.root = 1;
    let bc = compile(&p).unwrap();
    for (r, next) in [(1, 2), (2, 3), (3, 0)] {
        assert_eq!(sends(&bc[r]), vec![(next, 10, 0); 8]);
    }
    assert!(sends(&bc[0]).is_empty());
    // Double binary tree, 8 ranks, halves of 800 in pieces of 100: tree 0 (0 -> 4 -> {2, 6},
    // 2 -> {1, 3}, 6 -> {5, 7}) on channel 0, its mirror on channel 1. Rank 4: interior of
    // tree 0 (up to 0, down to 2 and 6), leaf of tree 1: its mirror image 3 hangs under 2 in
    // tree 0, so rank 4 hangs under 7 - 2 = 5.
    let dbt = compile_flat(Collective::AllReduce, 8, 1600, Algorithm::DoubleBinaryTree);
    let s4 = sends(&dbt[4]);
    let count = |peer, ch| s4.iter().filter(|s| **s == (peer, 100, ch)).count();
    assert_eq!((count(0, 0), count(2, 0), count(6, 0)), (8, 8, 8));
    assert_eq!((count(5, 1), s4.len()), (8, 32));
}

#[test]
fn hierarchical_levels_move_the_shard_of_the_previous_level() {
    // Dims 4 x 2, ring in both, one chunk of 800: dim 0 moves 800/4 per step (3 steps each
    // way), dim 1 moves 200/2 (1 step each way): sum over d of 2 (p_d - 1) S_d / p_d.
    let layout = Layout::Dims {
        dims: dims(&[4, 2], &[Algorithm::Ring, Algorithm::Ring]),
        scheme: Scheme::LocalBwAware,
        policy: DimPolicy::Fixed,
    };
    let programs = compile(&plan(Collective::AllReduce, 8, 800, layout)).unwrap();
    for p in &programs {
        let r = p.rank;
        let next0 = (r / 4) * 4 + (r + 1) % 4;
        let partner1 = r ^ 4;
        let d0 = vec![(next0, 200, 0); 3];
        let d1 = vec![(partner1, 100, 0)];
        assert_eq!(
            sends(p),
            [d0.clone(), d1.clone(), d1, d0].concat(),
            "rank {r}"
        );
    }
}

/// Ancestor sets of every step (small programs only).
fn ancestors(p: &Program) -> Vec<std::collections::BTreeSet<usize>> {
    let mut anc: Vec<std::collections::BTreeSet<usize>> = Vec::new();
    for s in &p.steps {
        let mut set = std::collections::BTreeSet::new();
        for d in &s.deps {
            set.insert(d.0);
            set.extend(anc[d.0].iter().copied());
        }
        anc.push(set);
    }
    anc
}

#[test]
fn chunks_get_own_channels_and_respect_the_in_flight_limit() {
    for (algorithm, per_chunk) in [(Algorithm::Ring, 1), (Algorithm::DoubleBinaryTree, 2)] {
        for in_flight in [0, 1, 2] {
            let mut p = plan(Collective::AllReduce, 4, 400, Layout::Flat(algorithm));
            p.chunks = 4;
            p.chunks_in_flight = in_flight;
            for prog in compile(&p).unwrap() {
                // Chunk of a step = its channel / per_chunk (every step here is a message).
                let chunk_of: Vec<u32> = prog
                    .steps
                    .iter()
                    .map(|s| s.kind.channel().map_or(0, |(_, ch)| ch / per_chunk))
                    .collect();
                assert_eq!(chunk_of.iter().max(), Some(&3), "{algorithm}");
                let anc = ancestors(&prog);
                for (i, &ci) in chunk_of.iter().enumerate() {
                    for (j, &cj) in chunk_of.iter().enumerate() {
                        let gated = in_flight > 0 && ci > cj && (ci - cj) % in_flight as u32 == 0;
                        let ordered = anc[i].contains(&j);
                        if gated {
                            assert!(ordered, "{algorithm} L={in_flight}: step {j} of chunk {cj} must precede step {i} of chunk {ci}");
                        }
                        if in_flight == 0 && ci != cj {
                            assert!(
                                !ordered,
                                "{algorithm}: chunks {cj} and {ci} must be independent"
                            );
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn programs_with_channels_roundtrip_through_json() {
    let mut p = plan(
        Collective::AllReduce,
        5,
        37,
        Layout::Flat(Algorithm::DoubleBinaryTree),
    );
    p.chunks = 2;
    let programs = compile(&p).unwrap();
    assert!(programs
        .iter()
        .flat_map(|p| &p.steps)
        .any(|s| s.kind.channel().is_some_and(|(_, ch)| ch == 3)));
    let json = serde_json::to_string(&programs).unwrap();
    let back: Vec<Program> = serde_json::from_str(&json).unwrap();
    assert_eq!(back, programs);
}

#[test]
fn far_more_chunks_than_elements_is_bounded() {
    let mut p = plan(
        Collective::AllReduce,
        4096,
        3,
        Layout::Flat(Algorithm::Ring),
    );
    // As many chunks as channel numbers allow: the step budget stops it.
    p.chunks = MAX_CHANNELS as usize;
    assert!(matches!(
        compile(&p),
        Err(AlgorithmError::TooManySteps { .. })
    ));
    // More chunks than messages can name channels for: refused before any step is built.
    p.chunks = 1 << 20;
    assert_eq!(
        compile(&p),
        Err(AlgorithmError::TooManyChunks {
            chunks: 1 << 20,
            max: MAX_CHANNELS as usize
        })
    );
    // A few more chunks than elements is fine: the empty ones move nothing.
    let mut p = plan(Collective::AllReduce, 3, 2, Layout::Flat(Algorithm::Ring));
    p.chunks = 5;
    check(
        Collective::AllReduce,
        3,
        2,
        0,
        &compile(&p).unwrap(),
        "5 chunks of 2",
    );
}

mod random {
    use super::*;
    use proptest::prelude::*;

    fn layouts() -> impl Strategy<Value = (Collective, usize, Layout)> {
        let flat = (0usize..6, 1usize..=10, 0usize..4).prop_filter_map(
            "halving_doubling scatter/gather needs a power of two",
            |(op, n, a)| {
                let op = Collective::ALL[op];
                let algs = algorithms_for(op);
                let alg = algs[a % algs.len()];
                let pow2_only = alg == Algorithm::HalvingDoubling
                    && matches!(op, Collective::ReduceScatter | Collective::AllGather);
                (!pow2_only || n.is_power_of_two()).then_some((op, n, Layout::Flat(alg)))
            },
        );
        let dims = (
            0usize..3,
            prop::collection::vec((1usize..=3, 0usize..3), 1..=3),
            any::<bool>(),
            any::<bool>(),
        )
            .prop_map(|(op, spec, baseline, themis)| {
                let op = [
                    Collective::AllReduce,
                    Collective::ReduceScatter,
                    Collective::AllGather,
                ][op];
                let scheme = if baseline && op == Collective::AllReduce {
                    Scheme::Baseline
                } else {
                    Scheme::LocalBwAware
                };
                let dims: Vec<DimSpec> = spec
                    .iter()
                    .enumerate()
                    .map(|(d, &(size, a))| {
                        let mut algorithm = [
                            Algorithm::Ring,
                            Algorithm::Direct,
                            Algorithm::HalvingDoubling,
                        ][a];
                        if algorithm == Algorithm::HalvingDoubling
                            && !size.is_power_of_two()
                            && scheme == Scheme::LocalBwAware
                        {
                            algorithm = Algorithm::Ring;
                        }
                        DimSpec {
                            size,
                            algorithm,
                            bandwidth_bps: 1 + d as u64 * 7,
                        }
                    })
                    .collect();
                let n = spec.iter().map(|s| s.0).product();
                let policy = if themis {
                    DimPolicy::Themis
                } else {
                    DimPolicy::Fixed
                };
                (
                    op,
                    n,
                    Layout::Dims {
                        dims,
                        scheme,
                        policy,
                    },
                )
            });
        prop_oneof![flat, dims]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(96))]

        #[test]
        fn any_supported_plan_computes_its_collective(
            (op, n, layout) in layouts(),
            count in 0usize..=60,
            root_pick in 0usize..100,
            chunks in 1usize..=4,
            in_flight in 0usize..=3,
        ) {
            let root = root_pick % n;
            let p = Plan { op, ranks: n, count, root, layout, chunks, chunks_in_flight: in_flight };
            let what = format!("{p:?}");
            let programs = compile(&p).map_err(|e| TestCaseError::fail(format!("{what}: {e}")))?;
            check(op, n, count, root, &programs, &what);
        }
    }
}

#[test]
fn compile_reproduces_the_stand_alone_generators() {
    use fabemu_collectives::algorithms::{
        direct_all_to_all, ring_all_gather, ring_all_reduce, ring_reduce_scatter,
    };
    // With count >= n no block is empty, so the programs are step for step the same.
    for n in 1..=6 {
        for count in [n, 2 * n + 1, 50] {
            let c = |op, a| compile_flat(op, n, count, a);
            assert_eq!(
                c(Collective::AllReduce, Algorithm::Ring),
                ring_all_reduce(n, count).unwrap()
            );
            assert_eq!(
                c(Collective::ReduceScatter, Algorithm::Ring),
                ring_reduce_scatter(n, count).unwrap()
            );
            assert_eq!(
                c(Collective::AllGather, Algorithm::Ring),
                ring_all_gather(n, count).unwrap()
            );
            assert_eq!(
                c(Collective::AllToAll, Algorithm::Direct),
                direct_all_to_all(n, count).unwrap()
            );
        }
    }
}
