//! Cost of the max-min filling, from scratch and incrementally.
//!
//! - `full/<flows>`: [`FlowNetwork::recompute_all`] of `flows` flows over random 6-link paths
//!   (weights 1.0625 forward-like) on 4096 link directions, plus one shared link so that all flows
//!   form a single component (the worst case for incremental recomputation). 1024 flows is a
//!   collective step on a 1024-host fabric; 1048576 flows is a 1024-host all-to-all posted at
//!   once (about 0.5 GB of memory).
//! - `cycle/<flows>`: one finish plus one start in such a component of `flows` flows, as a
//!   simulation does it: `next_finish`, `advance` (one flow finishes), `start` a replacement,
//!   and the refresh of the next `next_finish`.
//!
//! Paths and sizes come from an inline xorshift so every run sees the same graph.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: a failure is a panic

use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion};
use fabemu_fabric::units::Time;
use fabemu_flow::{FlowNetwork, LinkId};

const LINKS: u32 = 4096;
const HOPS: usize = 6;

struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
}

/// A random path: link 0 (shared by all) and `HOPS - 1` random others.
fn path(rng: &mut XorShift) -> Vec<(LinkId, f64)> {
    let mut p = vec![(LinkId(0), 1.0625)];
    for _ in 1..HOPS {
        p.push((LinkId(1 + (rng.next() % (LINKS as u64 - 1)) as u32), 1.0625));
    }
    p
}

/// A network of `flows` flows; capacities vary so that different links bind. Link 0 is wide
/// enough never to bind: it only joins everything into one component.
fn network(flows: usize, rng: &mut XorShift) -> FlowNetwork {
    let caps = (0..LINKS)
        .map(|l| {
            if l == 0 {
                1e18
            } else {
                [1.25e10, 2.5e10, 5e10][l as usize % 3]
            }
        })
        .collect();
    let mut net = match FlowNetwork::new(caps) {
        Ok(n) => n,
        Err(e) => panic!("{e}"),
    };
    for i in 0..flows {
        let bytes = 1_000_000 + rng.next() % 1_000_000_000;
        if let Err(e) = net.start(Time::ZERO, &path(rng), bytes, None, i as u64) {
            panic!("{e}");
        }
    }
    net
}

fn full(c: &mut Criterion) {
    let mut g = c.benchmark_group("full");
    g.sample_size(10);
    for flows in [1024usize, 131_072, 1_048_576] {
        let mut rng = XorShift(0x9E37_79B9_7F4A_7C15);
        let mut net = network(flows, &mut rng);
        g.bench_with_input(BenchmarkId::from_parameter(flows), &flows, |b, _| {
            b.iter(|| {
                net.recompute_all();
                black_box(net.active())
            })
        });
    }
    g.finish();
}

fn cycle(c: &mut Criterion) {
    let mut g = c.benchmark_group("cycle");
    g.sample_size(10);
    for flows in [1024usize, 131_072] {
        let mut rng = XorShift(0x2545_F491_4F6C_DD1D);
        let mut net = network(flows, &mut rng);
        let mut done = Vec::new();
        g.bench_with_input(BenchmarkId::from_parameter(flows), &flows, |b, _| {
            b.iter(|| {
                let t = net.next_finish().unwrap_or(Time::NEVER);
                done.clear();
                net.advance(t, &mut done);
                for &(_, token) in &done {
                    let bytes = 1_000_000 + rng.next() % 1_000_000_000;
                    let p = path(&mut rng);
                    if let Err(e) = net.start(net.now(), &p, bytes, None, token) {
                        panic!("{e}");
                    }
                }
                black_box(net.next_finish())
            })
        });
    }
    g.finish();
}

criterion_group!(benches, full, cycle);
criterion_main!(benches);
