//! Engine throughput in packet-hops per second (one frame crossing one link = one hop), in
//! timing mode, on the 64-host loaded leaf-spine of `benches/fabric64.yaml`, for 1 and 2
//! threads. Criterion reports "elements/s" = packet-hops per second.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: a failure is a panic

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use fabemu::{load_str, run_source};

const SCENARIO: &str = include_str!("fabric64.yaml");

fn engine(c: &mut Criterion) {
    let src = match load_str(SCENARIO, "benches/fabric64.yaml") {
        Ok(s) => s,
        Err(e) => panic!("{e}"),
    };
    let hops = match run_source(&src, 1, None) {
        Ok(r) => r.totals.packet_hops,
        Err(e) => panic!("{e}"),
    };
    let mut g = c.benchmark_group("engine_fabric64");
    g.sample_size(10);
    g.throughput(Throughput::Elements(hops));
    for threads in [1usize, 2] {
        g.bench_function(format!("threads_{threads}"), |b| {
            b.iter(|| match run_source(&src, threads, None) {
                Ok(r) => assert_eq!(r.totals.packet_hops, hops),
                Err(e) => panic!("{e}"),
            })
        });
    }
    g.finish();
}

criterion_group!(benches, engine);
criterion_main!(benches);
