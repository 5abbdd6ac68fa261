//! What every front end does around a run, so the command line and the Python package behave
//! alike: loading a scenario with its `--set` overrides and the seed and fidelity chosen
//! outside the file, fitting the thread count to the CPUs, and describing a fabric (`fabemu
//! topo`).
//!
//! Each front end only turns its own arguments into these calls and their results into its
//! own output (text and exit codes, or Python objects and exceptions).

use std::path::Path;

use fabemu_fabric::units::{Bandwidth, Time};
use fabemu_topologies::summary::TopologySummary;
use fabemu_topologies::{Graph, Routes, TopologyError};

use crate::scenario::{self, AstraFile, Fidelity, ScenarioError, Source, QUICKSTART};

/// Where a scenario comes from.
#[derive(Clone, Copy, Debug)]
pub enum Input<'a> {
    /// The embedded quickstart scenario (`examples/quickstart.yaml`).
    Quickstart,
    /// A YAML file; paths in it are relative to its folder.
    File(&'a Path),
    /// YAML text; `name` stands for it in messages, and paths in it are relative to `name`'s
    /// folder (the working directory when `name` is `<...>`).
    Text {
        /// The YAML.
        text: &'a str,
        /// Its name in messages.
        name: &'a str,
    },
}

/// The name the embedded quickstart scenario has in messages.
pub const QUICKSTART_NAME: &str = "<embedded quickstart>";

/// Loads and checks a scenario with `set` overrides (`PATH=VALUE`, applied in order before
/// validation), then the `seed` and `fidelity` chosen outside the file. Every error is located
/// as the command line reports it.
pub fn load(
    input: Input<'_>,
    set: &[String],
    seed: Option<u64>,
    fidelity: Option<Fidelity>,
) -> Result<Source, ScenarioError> {
    let overrides = set
        .iter()
        .map(|s| scenario::Override::parse(s))
        .collect::<Result<Vec<_>, _>>()?;
    let mut src = match input {
        Input::Quickstart => scenario::load_str_with(QUICKSTART, QUICKSTART_NAME, overrides)?,
        Input::File(path) => scenario::load_file_with(path, overrides)?,
        Input::Text { text, name } => scenario::load_str_with(text, name, overrides)?,
    };
    if let Some(seed) = seed {
        src.scenario.seed = seed;
    }
    if let Some(f) = fidelity {
        src.scenario.fidelity = f;
        if f == Fidelity::Flow && !src.scenario.faults.is_empty() {
            return Err(ScenarioError {
                file: "--fidelity flow".into(),
                line: None,
                column: None,
                field: String::new(),
                message: "the scenario's `faults` need packet fidelity (flows have no frames \
                          to lose)"
                    .into(),
            });
        }
    }
    Ok(src)
}

/// The worker threads to run: `asked`, or the CPUs this process may use when it asked for more
/// (`available_parallelism` honours the affinity mask and the cgroup quota), with a warning
/// saying so. More threads than CPUs would only take turns; results do not depend on the count,
/// so nothing is lost.
pub fn usable_threads(asked: usize) -> (usize, Option<String>) {
    let have = std::thread::available_parallelism().map_or(1, |n| n.get());
    if asked > have {
        let s = |n: usize| if n == 1 { "" } else { "s" };
        let warning = format!(
            "--threads {asked} asked for, but this process may use {have} CPU{} (affinity \
             mask or CPU quota): running {have} thread{}",
            s(have),
            s(have)
        );
        (have, Some(warning))
    } else {
        (asked.max(1), None)
    }
}

/// What `fabemu topo` describes.
#[derive(Clone, Copy, Debug)]
pub enum TopoInput<'a> {
    /// A scenario with `--set` overrides.
    Scenario(Input<'a>, &'a [String]),
    /// An ASTRA-sim network file.
    AstraSim(&'a Path),
}

/// Why a fabric could not be described.
#[derive(Debug, thiserror::Error)]
pub enum TopoError {
    /// The scenario (or network file) is invalid.
    #[error("{0}")]
    Scenario(#[from] ScenarioError),
    /// The fabric cannot be summarized (its routes do not connect every pair of hosts).
    #[error("{0}")]
    Topology(#[from] TopologyError),
}

/// A fabric as built from a scenario or an ASTRA-sim network file, and its summary.
pub struct Topology {
    /// The fabric.
    pub graph: Graph,
    /// Its routes.
    pub routes: Routes,
    /// Hosts, switches, links per class, per-host bandwidth, diameter, bisection.
    pub summary: TopologySummary,
    /// The keys of the ASTRA-sim network file that are ignored, one sentence each.
    pub warnings: Vec<String>,
}

impl Topology {
    /// Every link by the names of its ends (as `faults:` addresses them), its bandwidth and
    /// latency.
    pub fn links(&self) -> impl Iterator<Item = (&str, &str, Bandwidth, Time)> + '_ {
        self.graph.links().iter().map(|l| {
            (
                self.graph.node(l.a).name.as_str(),
                self.graph.node(l.b).name.as_str(),
                Bandwidth(l.bandwidth_bps),
                Time(l.latency_ps),
            )
        })
    }

    /// The listing `fabemu topo --links` prints after the summary.
    pub fn links_text(&self) -> String {
        let mut out = String::from("links (as `faults: [{link: [a, b], ...}]` names them):\n");
        for (a, b, bw, lat) in self.links() {
            out.push_str(&format!("  [{a}, {b}]  {bw}  {lat}\n"));
        }
        out
    }

    /// The fabric as a Graphviz graph.
    pub fn dot(&self) -> String {
        fabemu_topologies::summary::to_dot(&self.graph)
    }
}

/// Builds and summarizes the fabric `input` describes, without running anything.
pub fn topology(input: TopoInput<'_>) -> Result<Topology, TopoError> {
    let warnings = |a: Option<&AstraFile>| a.map(|a| a.warnings.clone()).unwrap_or_default();
    let (graph, routes, warnings) = match input {
        TopoInput::AstraSim(file) => {
            let a = scenario::load_astra_file(file)?;
            let in_file = |e: TopologyError| ScenarioError {
                file: a.path.clone(),
                line: None,
                column: None,
                field: String::new(),
                message: e.to_string(),
            };
            let g = a.network.build().map_err(in_file)?;
            let r = fabemu_topologies::routes_for(&g).map_err(in_file)?;
            (g, r, warnings(Some(&a)))
        }
        TopoInput::Scenario(input, set) => {
            let src = load(input, set, None, None)?;
            let (g, r) = crate::world::fabric(&src)?;
            (g, r, warnings(src.astra.as_ref()))
        }
    };
    let summary = fabemu_topologies::summary::summarize(&graph, &routes)?;
    Ok(Topology {
        graph,
        routes,
        summary,
        warnings,
    })
}
