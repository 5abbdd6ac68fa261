//! `fabemu run` under `mpirun`: one packet-level run spread over MPI ranks, with the report
//! of the same run on one thread.
//!
//! Every rank loads the scenario and builds the whole world; the engine
//! (`fabemu_fabric::engine::mpi`, with the `mpi` feature) places whole groups of the fabric on
//! each rank ([`crate::placement`]) and exchanges the frames that cross ranks once per window.
//! At the end each rank takes the facts of the actors it ran ([`crate::report::facts`]),
//! encodes them ([`crate::report::wire`]) and sends them to rank 0, which builds the report
//! from the facts of every actor with the same builder as a run on threads: the JSON is the
//! same but for `host` and the `mpi` section, which says how the ranks shared the run.
//!
//! A packet capture and the time series are gathered by the engine (each rank's partitions
//! record what they transmit and sample their own actors; rank 0 merges them as threads are
//! merged), and the output directory's trace and timelines read the gathered facts, so rank 0
//! writes the same files as `--threads 1`. Flow fidelity is refused (exit 2): one process
//! computes it.

/// This process's rank and the number of ranks when `mpirun` (OpenMPI, MPICH or a PMIx
/// launcher) started it, from the environment those launchers set; `None` otherwise.
pub fn launched_rank() -> Option<(usize, usize)> {
    let var = |names: &[&str]| {
        names
            .iter()
            .find_map(|n| std::env::var(n).ok()?.trim().parse::<usize>().ok())
    };
    let rank = var(&["OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK"])?;
    let size = var(&["OMPI_COMM_WORLD_SIZE", "PMI_SIZE"]).unwrap_or(1);
    Some((rank, size))
}

/// Why a run cannot go over MPI ranks, `None` when it can: only a run at flow fidelity
/// cannot.
pub fn refused(flow: bool) -> Option<String> {
    flow.then(|| {
        "flow fidelity runs in one process: run it without mpirun (`--threads` sets the \
         threads)"
            .into()
    })
}

#[cfg(feature = "mpi")]
pub use self::ranks::run;

/// Ends this process's part in the MPI job (`MPI_Finalize`) after a `run`; nothing without
/// one. Rank 0 calls it once its outputs are written: on Ctrl-C, `mpirun` stops serving its
/// ranks while it waits to kill them (one second by default), so finalizing first would hold
/// the partial report back, for two seconds here, until the ranks are killed.
pub fn finalize() {
    #[cfg(feature = "mpi")]
    drop(
        ranks::UNIVERSE
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take(),
    );
}

#[cfg(feature = "mpi")]
mod ranks {
    use std::sync::{Mutex, PoisonError};
    use std::time::Instant;

    use fabemu_fabric::engine::codec::{Reader, Writer};
    use fabemu_fabric::engine::mpi::{self as engine_mpi, ActorState};
    use fabemu_fabric::engine::{
        Actor, Ctx, EngineConfig, EngineError, Event, Progress, RunOutput,
    };

    use crate::observe::{ObserveOptions, Observed};
    use crate::report::facts::ActorFacts;
    use crate::report::{wire, MpiInfo};
    use crate::world::{self, Finished, Node};
    use crate::{RunError, Source};

    /// MPI, initialized by [`run`] until [`super::finalize`].
    pub(super) static UNIVERSE: Mutex<Option<mpi::environment::Universe>> = Mutex::new(None);

    /// A world's actor and, on rank 0, the facts of its final state when another rank ran it.
    struct Gathered {
        node: Node,
        facts: Option<ActorFacts>,
    }

    impl Actor for Gathered {
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

    /// Carries an actor's facts from its rank to rank 0.
    struct Facts;

    impl ActorState<Gathered> for Facts {
        fn save(&self, a: &Gathered, out: &mut Writer) {
            wire::write(out, &ActorFacts::of(&a.node));
        }
        fn restore(&self, a: &mut Gathered, input: &mut Reader<'_>) -> Result<(), EngineError> {
            a.facts = Some(wire::read(input, &a.node)?);
            Ok(())
        }
    }

    /// Runs `src` over the ranks of the MPI job this process belongs to, `threads` threads
    /// per rank, with the capture and time series `opts` asks for, whole groups of the fabric
    /// per rank if `by_groups` (else the engine's plan cut into blocks). Rank 0 gets the run
    /// observed as [`crate::run_observed`] gives it (the report with its `mpi` section, and
    /// the gathered facts of every actor: the world's actors that other ranks ran are as
    /// built, so only the facts may be read of their final state), the other ranks `None`. A
    /// rank whose run fails ends all ranks with a message naming it.
    pub fn run(
        src: &Source,
        threads: usize,
        opts: &ObserveOptions,
        by_groups: bool,
        progress: Option<&Progress>,
    ) -> Result<Option<Observed>, RunError> {
        // Ranks wait for each other at every window: by default OpenMPI spins meanwhile,
        // which on shared cores takes the time the awaited rank needs. Yield instead, unless
        // told otherwise.
        if std::env::var_os("OMPI_MCA_mpi_yield_when_idle").is_none() {
            std::env::set_var("OMPI_MCA_mpi_yield_when_idle", "1");
        }
        let Some((universe, _)) = mpi::initialize_with_threading(mpi::Threading::Funneled) else {
            return Err(EngineError::Failure("MPI was initialized already".into()).into());
        };
        let comm = universe.world();
        // Finalized by [`super::finalize`] once the outputs are written, not on return.
        *UNIVERSE.lock().unwrap_or_else(PoisonError::into_inner) = Some(universe);
        let w = world::build(src)?;
        let groups = by_groups
            .then(|| crate::placement::rank_groups(&w.graph))
            .flatten();
        let cfg = EngineConfig {
            threads,
            until: src.scenario.until(),
            overhead: src.scenario.ethernet,
            capture: opts.capture_config(&w.graph)?,
            sample: opts.sample_config(w.graph.links().len()),
            faults: w.faults,
        };
        let actors = w
            .actors
            .into_iter()
            .map(|node| Gathered { node, facts: None })
            .collect();
        let t0 = Instant::now();
        let o = engine_mpi::run(
            actors,
            &w.wiring,
            &cfg,
            progress,
            &comm,
            &Facts,
            groups.as_deref(),
        )?;
        let wall = t0.elapsed();
        let Some(mut out) = o.output else {
            return Ok(None);
        };
        let mut facts = Vec::with_capacity(out.actors.len());
        let mut nodes = Vec::with_capacity(out.actors.len());
        for a in out.actors {
            // Rank 0's own actors ran here: their facts are taken now.
            facts.push(a.facts.unwrap_or_else(|| ActorFacts::of(&a.node)));
            nodes.push(a.node);
        }
        let capture = out.capture.take();
        let samples = out.samples.take();
        let fin = Finished {
            graph: w.graph,
            messages: w.messages,
            collectives: w.collectives,
            training: w.training,
            flow_limits: Vec::new(),
            output: RunOutput {
                actors: nodes,
                port_stats: out.port_stats,
                stats: out.stats,
                layout: out.layout,
                capture: None,
                samples: None,
                cancelled: out.cancelled,
                faults: out.faults,
            },
        };
        let mut report = crate::report::build_from(src, &fin, &facts, threads, wall);
        let r = &o.ranks;
        let per_window = |x: u64| x as f64 / fin.output.layout.windows.max(1) as f64;
        report.mpi = Some(MpiInfo {
            ranks: r.ranks,
            threads_per_rank: threads,
            placement: if r.grouped { "groups" } else { "engine" },
            partitions: fin.output.layout.partitions,
            lookahead_ps: r.lookahead_ps,
            windows: fin.output.layout.windows,
            frames_crossing_ranks: r.frames_crossing,
            frames_crossing_ranks_per_window: per_window(r.frames_crossing),
            events_per_window: per_window(fin.output.stats.events),
        });
        Ok(Some(Observed {
            report,
            finished: fin,
            capture,
            samples,
            facts: Some(facts),
        }))
    }
}
