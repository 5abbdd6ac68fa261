//! The collective sweep: ring All-Reduce from 1 MiB to 256 MiB (factor 2) on 64 ranks under a
//! non-blocking switch, timing mode, each size in a fresh fabric. Prints, per size, the
//! emulated time, nccl-tests' busbw, the wall time and simulated seconds per wall second, then
//! the totals. A plain harness rather than criterion: one sweep takes tens of seconds, and the
//! figure users plan with is exactly this table.
//!
//! `cargo bench --bench collective_sweep` (set `FABEMU_SWEEP_THREADS=2` for two threads).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: a failure is a panic

use std::time::Instant;

use fabemu::{load_str, run_source};

fn main() {
    let threads: usize = std::env::var("FABEMU_SWEEP_THREADS")
        .ok()
        .and_then(|t| t.parse().ok())
        .unwrap_or(1);
    println!(
        "# ring all_reduce, 64 ranks, star of 100 Gb/s links, timing mode, {threads} thread(s)"
    );
    println!(
        "# {:>10} {:>12} {:>8} {:>10} {:>14} {:>14}",
        "size(B)", "time(us)", "busbw", "wall(s)", "sim-s/wall-s", "Mhops/s"
    );
    let (mut sim_total, mut wall_total) = (0.0f64, 0.0f64);
    let mut size: u64 = 1 << 20;
    while size <= 256 << 20 {
        let yaml = format!(
            "mode: timing\ntopology:\n  star: {{hosts: 64, bandwidth: 100Gbps, latency: 500ns}}\n\
             workload:\n  collectives:\n    - {{op: all_reduce, algorithm: ring, size: {size}B}}\n"
        );
        let src = match load_str(&yaml, "<sweep>") {
            Ok(s) => s,
            Err(e) => panic!("{e}"),
        };
        let t0 = Instant::now();
        let report = match run_source(&src, threads, None) {
            Ok(r) => r,
            Err(e) => panic!("{e}"),
        };
        let wall = t0.elapsed().as_secs_f64();
        let c = &report.collectives[0];
        assert!(report.invariants.ok, "{:?}", report.invariants.violations);
        // The collective's own span (the run's last event can be a retransmission timer that
        // fires, harmlessly, after the traffic).
        let sim = c.end_ps.unwrap_or(0) as f64 / 1e12;
        sim_total += sim;
        wall_total += wall;
        println!(
            "  {:>10} {:>12.1} {:>8.2} {:>10.3} {:>14.6} {:>14.2}",
            size,
            c.time_us.unwrap_or(0.0),
            c.busbw_gbps.unwrap_or(0.0),
            wall,
            sim / wall,
            report.totals.packet_hops as f64 / wall / 1e6
        );
        size *= 2;
    }
    println!(
        "# total: {:.3} simulated s in {:.2} wall s = {:.6} simulated s per wall s",
        sim_total,
        wall_total,
        sim_total / wall_total
    );
}
