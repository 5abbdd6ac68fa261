//! A scheduling algorithm written in Rust and used in a scenario.
//!
//! fabemu's switches schedule with PIFO trees (Sivaraman et al., SIGCOMM 2016). A scheduling
//! transaction computes a rank when a packet is enqueued; the PIFO sends the smallest rank
//! first. Here: **shortest remaining message first, with aging** — SRPT starves a long message
//! under a stream of short ones, so each packet's rank is its message's remaining bytes minus a
//! credit for the time it has waited, in bytes at the line rate (1 ps of waiting = 1/80 byte
//! at 100 Gb/s). The transaction is installed on every switch port of
//! `examples/custom_scheduler.yaml` (an 8:1 incast of mixed message sizes), then the run is
//! compared with the same scenario under plain FIFO.
//!
//!     cargo run --release --example custom_scheduler
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: a failure is a panic

use std::process::ExitCode;

use fabemu::world::{self, Node};
use fabemu::{load_file, report};
use fabemu_switch::pifo::classifier::Fixed;
use fabemu_switch::pifo::{NodeSpec, PacketInfo, PifoTreeBuilder, SchedulingTransaction, TxnCtx};
use fabemu_switch::tree_egress::TreeEgress;

/// Shortest remaining message first, aged: rank = remaining bytes - waited time at line rate.
struct AgedSrpt {
    /// Picoseconds of waiting that earn one byte of credit (80 at 100 Gb/s).
    ps_per_byte: u64,
}

impl SchedulingTransaction for AgedSrpt {
    fn rank(&mut self, info: &PacketInfo, _ctx: &TxnCtx) -> u64 {
        // A packet's rank is fixed at enqueue; aging uses its arrival time as the base so a
        // packet that arrived earlier gets a smaller rank for the same remaining size.
        let age_credit = info.arrival.ps() / self.ps_per_byte.max(1);
        info.remaining_bytes.saturating_add(age_credit)
    }
}

fn mean_completion_us(r: &fabemu::Report) -> f64 {
    let cts: Vec<u64> = r
        .messages
        .iter()
        .filter_map(|m| m.completion_time_ps)
        .collect();
    cts.iter().sum::<u64>() as f64 / cts.len().max(1) as f64 / 1e6
}

fn main() -> ExitCode {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/examples/custom_scheduler.yaml"
    );
    let src = match load_file(std::path::Path::new(path)) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let mut results = Vec::new();
    for custom in [false, true] {
        let mut w = match world::build(&src) {
            Ok(w) => w,
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::from(2);
            }
        };
        if custom {
            for (id, actor) in w.actors.iter_mut().enumerate() {
                if let Node::Switch(sw) = actor {
                    for port in 0..w.graph.ports(id).len() {
                        // One leaf: the whole port is one PIFO ranked by our transaction.
                        let tree = PifoTreeBuilder::new(NodeSpec::new(
                            "aged-srpt",
                            AgedSrpt { ps_per_byte: 80 },
                        ))
                        .build::<fabemu_switch::tree_egress::TreeItem>(Fixed(
                            fabemu_switch::pifo::NodeId(0),
                        ));
                        match tree {
                            Ok(t) => sw.set_scheduler(port, Box::new(TreeEgress::new(t))),
                            Err(e) => {
                                eprintln!("error: {e}");
                                return ExitCode::from(1);
                            }
                        }
                    }
                }
            }
        }
        let t0 = std::time::Instant::now();
        match world::run(w, &src, 1, None) {
            Ok(fin) => {
                let r = report::build(&src, &fin, 1, t0.elapsed());
                if !r.invariants.ok {
                    eprintln!("invariants failed: {:?}", r.invariants.violations);
                    return ExitCode::from(3);
                }
                results.push((if custom { "aged SRPT" } else { "FIFO" }, r));
            }
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::from(1);
            }
        }
    }
    for (name, r) in &results {
        println!(
            "{name:>10}: mean completion {:8.2} us over {} messages",
            mean_completion_us(r),
            r.messages.len()
        );
    }
    ExitCode::SUCCESS
}
