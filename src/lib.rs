//! # fabemu
//!
//! The root package: scenario files ([`scenario`]), turning them into a world of actors and
//! running it ([`world`]), and the reports ([`report`]). The binary `fabemu` is a thin CLI over
//! [`run_source`].
#![warn(missing_docs, unreachable_pub)]

pub mod collective;
pub mod report;
pub mod scenario;
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
}

/// Builds and runs a checked scenario on `threads` threads and reports on it.
pub fn run_source(
    src: &Source,
    threads: usize,
    progress: Option<&Progress>,
) -> Result<Report, RunError> {
    let world = world::build(src)?;
    tracing::info!(
        scenario = %src.file,
        actors = world.actors.len(),
        links = world.graph.links().len(),
        messages = world.messages.len(),
        "world built"
    );
    let t0 = Instant::now();
    let fin = world::run(world, src, threads, progress)?;
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
    Ok(report::build(src, &fin, threads, wall))
}
