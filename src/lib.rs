//! # fabemu
//!
//! The root package: scenario files ([`scenario`]), turning them into a world of actors and
//! running it ([`world`]), and the reports ([`report`]). The binary `fabemu` is a thin CLI over
//! [`run_source`].
#![warn(missing_docs, unreachable_pub)]

pub mod algo;
mod classes;
pub mod collective;
pub mod emulate;
pub mod faults;
pub mod flow;
pub mod frontend;
pub mod mpi_run;
pub mod observe;
pub mod placement;
pub mod report;
pub mod scenario;
pub mod search;
pub mod training;
pub mod world;

use std::time::Instant;

use fabemu_fabric::engine::{EngineError, Progress};

pub use crate::report::Report;
pub use crate::scenario::{load_file, load_str, ScenarioError, Source};

/// Why a run produced no report.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The scenario is invalid (exit code 2).
    #[error("{0}")]
    Scenario(#[from] ScenarioError),
    /// The engine failed (exit code 1).
    #[error("{0}")]
    Engine(#[from] EngineError),
    /// An observation option is invalid (exit code 2) or its output could not be written (1).
    #[error("{0}")]
    Observe(#[from] observe::ObserveError),
}

/// Builds and runs a checked scenario on `threads` threads and reports on it.
pub fn run_source(
    src: &Source,
    threads: usize,
    progress: Option<&Progress>,
) -> Result<Report, RunError> {
    run_observed(src, threads, &observe::ObserveOptions::default(), progress).map(|o| o.report)
}

/// Like [`run_source`], with the capture and time series `opts` asks for (nothing is written:
/// see [`observe::write_outputs`]).
pub fn run_observed(
    src: &Source,
    threads: usize,
    opts: &observe::ObserveOptions,
    progress: Option<&Progress>,
) -> Result<observe::Observed, RunError> {
    if src.scenario.fidelity == scenario::Fidelity::Flow {
        return run_flow(src, threads, opts, progress);
    }
    let world = world::build(src)?;
    let capture = opts.capture_config(&world.graph)?;
    tracing::info!(
        scenario = %src.file,
        actors = world.actors.len(),
        links = world.graph.links().len(),
        messages = world.messages.len(),
        "world built"
    );
    let t0 = Instant::now();
    let sample = opts.sample_config(world.graph.links().len());
    let mut fin = world::run_observed(world, src, threads, capture, sample, progress)?;
    let wall = t0.elapsed();
    let layout = &fin.output.layout;
    tracing::info!(
        events = fin.output.stats.events,
        partitions = layout.partitions,
        lookahead_ps = layout.lookahead.ps(),
        windows = layout.windows,
        wall_s = wall.as_secs_f64(),
        "run finished"
    );
    let captured = fin.output.capture.take();
    let samples = fin.output.samples.take();
    if let Some(c) = captured.as_ref().filter(|c| c.dropped > 0) {
        tracing::warn!(
            seen = c.seen,
            kept = c.frames.len(),
            "capture cap reached: {} frames not written",
            c.dropped
        );
    }
    Ok(observe::Observed {
        report: report::build(src, &fin, threads, wall),
        finished: fin,
        capture: captured,
        samples,
        facts: None,
    })
}

/// [`run_observed`] at flow fidelity: one thread (the result is the same for any `threads`,
/// which only the report's `host` section records); no capture or time series.
fn run_flow(
    src: &Source,
    threads: usize,
    opts: &observe::ObserveOptions,
    progress: Option<&Progress>,
) -> Result<observe::Observed, RunError> {
    if opts.pcap_path().is_some() || opts.capture.is_some() {
        return Err(observe::ObserveError::BadOption(
            "a packet capture needs packet fidelity (`--fidelity packet`): flow fidelity has no packets"
                .into(),
        )
        .into());
    }
    let t0 = Instant::now();
    let fin = flow::run(src, progress)?;
    let wall = t0.elapsed();
    tracing::info!(
        events = fin.output.stats.events,
        wall_s = wall.as_secs_f64(),
        "flow run finished"
    );
    Ok(observe::Observed {
        report: report::build(src, &fin, threads, wall),
        finished: fin,
        capture: None,
        samples: None,
        facts: None,
    })
}
