//! PIFO operation cost: nanoseconds per push + pop pair in steady state.
//!
//! Each PIFO is filled to N elements (1K and 64K); an iteration pushes one element and pops one,
//! so N stays constant. Two rank patterns:
//! - `uniform`: ranks uniform in [0, 2^16) (a fixed range; the bucket PIFO's window covers it);
//! - `sliding`: rank = the last popped rank + uniform [0, 2^12) (ranks that move forward like
//!   virtual times, deadlines or release times), on the bucket PIFO's default 4096-bucket window.
//!
//! Ranks come from an inline xorshift so the generator costs a few instructions.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: a failure is a panic

use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion};
use fabemu_switch::pifo::{BucketConfig, BucketPifo, HeapPifo, OverflowPolicy, Pifo};

struct XorShift(u64);

impl XorShift {
    #[inline]
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
}

#[derive(Clone, Copy)]
enum Pattern {
    Uniform,
    Sliding,
}

fn steady<P: Pifo<u64>>(mut p: P, n: usize, pattern: Pattern, b: &mut criterion::Bencher<'_>) {
    let mut rng = XorShift(0x9E37_79B9_7F4A_7C15);
    let mut head = 0u64;
    let rank = |rng: &mut XorShift, head: u64| match pattern {
        Pattern::Uniform => rng.next() & 0xFFFF,
        Pattern::Sliding => head + (rng.next() & 0xFFF),
    };
    for _ in 0..n {
        let r = rank(&mut rng, head);
        if p.push(r, r).is_err() {
            panic!("bench PIFO overflowed");
        }
    }
    b.iter(|| {
        let r = rank(&mut rng, head);
        let _ = black_box(p.push(r, r));
        if let Some((r, _)) = black_box(p.pop()) {
            head = r;
        }
    });
}

fn pifo_ops(c: &mut Criterion) {
    let mut g = c.benchmark_group("pifo_push_pop");
    for n in [1usize << 10, 1 << 16] {
        for (pattern, pname) in [(Pattern::Uniform, "uniform"), (Pattern::Sliding, "sliding")] {
            let cap = n + 1;
            g.bench_with_input(BenchmarkId::new(format!("heap/{pname}"), n), &n, |b, &n| {
                steady(
                    HeapPifo::new(cap, OverflowPolicy::DropArriving),
                    n,
                    pattern,
                    b,
                )
            });
            let cfg = match pattern {
                Pattern::Uniform => BucketConfig {
                    window_log2: 16,
                    granularity_log2: 0,
                },
                Pattern::Sliding => BucketConfig::default(),
            };
            g.bench_with_input(
                BenchmarkId::new(format!("bucket/{pname}"), n),
                &n,
                |b, &n| {
                    steady(
                        BucketPifo::with_config(cap, OverflowPolicy::DropArriving, cfg),
                        n,
                        pattern,
                        b,
                    )
                },
            );
        }
    }
    g.finish();
}

criterion_group!(benches, pifo_ops);
criterion_main!(benches);
