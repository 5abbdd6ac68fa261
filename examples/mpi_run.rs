//! A scenario's packet-level run spread over MPI ranks, printed so that it can be compared with
//! the same run on threads, and timed.
//!
//! ```text
//! cargo build --release --features mpi --example mpi_run
//! target/release/examples/mpi_run SCENARIO local THREADS > one.txt
//! mpirun -np 2 target/release/examples/mpi_run SCENARIO mpi THREADS > two.txt
//! cmp one.txt two.txt
//! ```
//!
//! A fourth argument, `engine`, places actors on ranks by the engine's own plan instead of the
//! fabric's groups (pods, leaves with their hosts, slices of the last dimension: see
//! `fabemu::placement`), to compare the two.
//!
//! Printed (by rank 0): the engine's counters; every port's transmit counters; and, per actor,
//! a fingerprint of what the report reads of it — a host's counters and the messages it
//! received and had acknowledged, a switch's counters and per-port statistics — made on the rank
//! that ran the actor and gathered to rank 0 (see [`Fingerprint`]). The layout (partitions,
//! windows, frames crossing ranks, and per window the events and frames crossing) and the run's
//! wall time go to stderr.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // example code: a failure is a panic

use std::time::Instant;

use fabemu::world::{self, Node};
use fabemu_fabric::engine::codec::{Reader, Writer};
use fabemu_fabric::engine::mpi::{self as engine_mpi, ActorState};
use fabemu_fabric::engine::{self, Actor, Ctx, EngineConfig, EngineError, Event, RunOutput};

/// A world's actor with, on rank 0, the fingerprint of its final state when it ran on another
/// rank.
struct Tracked {
    node: Node,
    gathered: Option<String>,
}

impl Actor for Tracked {
    fn start(&mut self, ctx: &mut Ctx<'_>) {
        self.node.start(ctx);
    }
    #[inline]
    fn handle(&mut self, event: Event, ctx: &mut Ctx<'_>) {
        self.node.handle(event, ctx);
    }
    fn sample(&self, out: &mut Vec<u64>) {
        self.node.sample(out);
    }
    fn holds_frames(&self) -> bool {
        self.node.holds_frames()
    }
}

/// What the report reads of an actor, as text.
fn fingerprint(node: &Node) -> String {
    let json = |v: &dyn erased::Json| v.text();
    match node {
        Node::Host(h) => {
            let acked: Vec<_> = h
                .app
                .messages
                .sends
                .iter()
                .map(|s| (s.spec.tag, s.acked_at))
                .collect();
            let received: Vec<_> = h
                .app
                .messages
                .received
                .iter()
                .map(|r| (r.src, r.imm, r.delivered_at, r.data_ok))
                .collect();
            format!(
                "host {} received {received:?} acked {acked:?}",
                json(&h.nic.stats)
            )
        }
        Node::Switch(s) => format!(
            "switch {} dropped {} queued {} ports {}",
            json(&s.stats()),
            s.dropped_packets(),
            s.queued_packets(),
            json(&s.port_stats())
        ),
    }
}

/// Serialisation to JSON text behind one object-safe method.
mod erased {
    pub trait Json {
        fn text(&self) -> String;
    }
    impl<T: serde::Serialize> Json for T {
        fn text(&self) -> String {
            serde_json::to_string(self).unwrap_or_else(|e| format!("<{e}>"))
        }
    }
}

/// Gathers fingerprints, not actors.
struct Fingerprint;

impl ActorState<Tracked> for Fingerprint {
    fn save(&self, a: &Tracked, out: &mut Writer) {
        out.bytes(fingerprint(&a.node).as_bytes());
    }
    fn restore(&self, a: &mut Tracked, input: &mut Reader<'_>) -> Result<(), EngineError> {
        a.gathered = Some(String::from_utf8_lossy(input.bytes()?).into_owned());
        Ok(())
    }
}

fn print(out: &RunOutput<Tracked>) {
    let s = &out.stats;
    println!(
        "events {} hops {} end {} limit {} halted {:?} cancelled {}",
        s.events, s.packet_hops, s.end_time, s.stopped_at_limit, s.halted_at, out.cancelled
    );
    println!("faults {:?}", out.faults);
    for (id, (a, ports)) in out.actors.iter().zip(&out.port_stats).enumerate() {
        let p: Vec<String> = ports
            .iter()
            .map(|p| format!("{}/{}/{}", p.tx_packets, p.tx_wire_bytes, p.busy.ps()))
            .collect();
        let f = a.gathered.clone().unwrap_or_else(|| fingerprint(&a.node));
        println!("actor {id} ports {} {f}", p.join(" "));
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (Some(path), Some(mode)) = (args.first(), args.get(1)) else {
        eprintln!("usage: mpi_run SCENARIO local|mpi [THREADS] [groups|engine]");
        std::process::exit(2);
    };
    let by_groups = args.get(3).is_none_or(|p| p != "engine");
    let threads: usize = args.get(2).and_then(|t| t.parse().ok()).unwrap_or(1);
    let src = match fabemu::load_file(std::path::Path::new(path)) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(2);
        }
    };
    let w = match world::build(&src) {
        Ok(w) => w,
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(2);
        }
    };
    let groups = if by_groups {
        fabemu::placement::rank_groups(&w.graph)
    } else {
        None
    };
    let cfg = EngineConfig {
        threads,
        until: src.scenario.until(),
        overhead: src.scenario.ethernet,
        capture: None,
        sample: None,
        faults: w.faults,
    };
    let actors: Vec<Tracked> = w
        .actors
        .into_iter()
        .map(|node| Tracked {
            node,
            gathered: None,
        })
        .collect();
    let t0 = Instant::now();
    match mode.as_str() {
        "local" => match engine::run(actors, &w.wiring, &cfg, None) {
            Ok(out) => {
                let wall = t0.elapsed().as_secs_f64();
                print(&out);
                eprintln!(
                    "threads {threads} partitions {} lookahead_ps {} windows {} events {} \
                     ({:.1} per window) end_ps {} wall_s {wall:.3}",
                    out.layout.partitions,
                    out.layout.lookahead.ps(),
                    out.layout.windows,
                    out.stats.events,
                    out.stats.events as f64 / out.layout.windows.max(1) as f64,
                    out.stats.end_time.ps(),
                );
            }
            Err(e) => {
                eprintln!("{e}");
                std::process::exit(3);
            }
        },
        "mpi" => {
            // Ranks wait for each other at every window: by default OpenMPI spins meanwhile, which
            // on shared cores takes the time the rank being waited for needs (40x slower at np 2 on
            // a loaded 2-core machine). Yield instead, unless told otherwise.
            if std::env::var_os("OMPI_MCA_mpi_yield_when_idle").is_none() {
                std::env::set_var("OMPI_MCA_mpi_yield_when_idle", "1");
            }
            let Some((universe, _)) = mpi::initialize_with_threading(mpi::Threading::Funneled)
            else {
                eprintln!("MPI was initialized already");
                std::process::exit(3);
            };
            let comm = universe.world();
            let groups = groups.as_deref();
            match engine_mpi::run(actors, &w.wiring, &cfg, None, &comm, &Fingerprint, groups) {
                Ok(o) => {
                    let wall = t0.elapsed().as_secs_f64();
                    if let Some(out) = o.output {
                        print(&out);
                        let r = &o.ranks;
                        let per = |x: u64| x as f64 / out.layout.windows.max(1) as f64;
                        eprintln!(
                            "ranks {} threads {threads} placement {} partitions {} lookahead_ps \
                             {} windows {} events {} ({:.1} per window) frames_crossing {} \
                             ({:.2} per window) end_ps {} wall_s {wall:.3}",
                            r.ranks,
                            if r.grouped { "groups" } else { "engine" },
                            out.layout.partitions,
                            r.lookahead_ps,
                            out.layout.windows,
                            out.stats.events,
                            per(out.stats.events),
                            r.frames_crossing,
                            per(r.frames_crossing),
                            out.stats.end_time.ps(),
                        );
                    }
                }
                Err(e) => {
                    eprintln!("{e}");
                    std::process::exit(3);
                }
            }
        }
        _ => {
            eprintln!("usage: mpi_run SCENARIO local|mpi [THREADS]");
            std::process::exit(2);
        }
    }
}
