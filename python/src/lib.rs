//! `fabemu._native`: the Python package's bridge to the library the command line calls.
//!
//! Everything here converts: Python arguments into [`fabemu::frontend`] calls, results into
//! plain Python values (the report as its JSON text, so Python sees exactly what `fabemu run
//! --json` writes), and errors into exceptions. The pure-Python layer (`python/fabemu/`) builds
//! the typed objects and DataFrames on top.
//!
//! A run goes on in a thread of its own while the calling thread waits without the GIL: every
//! `TICK` it takes the GIL back briefly to let Python see Ctrl-C (which asks the engine to
//! stop, as the command line's handler does) and to call the progress callback.

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::time::Duration;

use fabemu::frontend::{self, Input, TopoInput};
use fabemu::observe::{self, ObserveError, ObserveOptions};
use fabemu::scenario::Fidelity;
use fabemu::{RunError, ScenarioError as RsScenarioError};
use fabemu_fabric::engine::Progress;
use fabemu_topologies::summary::Bisection;
use pyo3::exceptions::{PyKeyboardInterrupt, PyOSError, PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

/// How often the waiting thread looks at Ctrl-C and reports progress.
const TICK: Duration = Duration::from_millis(100);

pyo3::create_exception!(
    _native,
    ScenarioError,
    PyValueError,
    "A scenario (or an override of it) is invalid. `str(e)` is the command line's message: \
     file, line and column, field, what is wrong. The parts are attributes: `file`, `line`, \
     `column` (1-based, or None), `field` (e.g. `links[3].bandwidth`, or empty) and `message`."
);

/// The Python exception for a scenario error, with its parts as attributes.
fn scenario_error(py: Python<'_>, e: &RsScenarioError) -> PyErr {
    let err = ScenarioError::new_err(e.to_string());
    let v = err.value(py);
    let set = || -> PyResult<()> {
        v.setattr("file", &e.file)?;
        v.setattr("line", e.line)?;
        v.setattr("column", e.column)?;
        v.setattr("field", &e.field)?;
        v.setattr("message", &e.message)
    };
    if let Err(failed) = set() {
        return failed;
    }
    err
}

/// The exception a failed run raises: the command line's exit code 2 cases as `ScenarioError`
/// or `ValueError`, a file that cannot be written as `OSError`, the rest as `RuntimeError`.
fn run_error(py: Python<'_>, e: RunError) -> PyErr {
    match e {
        RunError::Scenario(s) => scenario_error(py, &s),
        RunError::Observe(ObserveError::BadOption(m)) => PyValueError::new_err(m),
        RunError::Observe(o) => PyOSError::new_err(o.to_string()),
        RunError::Engine(e) => PyRuntimeError::new_err(e.to_string()),
    }
}

/// The scenario argument: a file, or YAML text named `name`.
fn input<'a>(path: &'a Option<PathBuf>, text: &'a Option<String>, name: &'a str) -> Input<'a> {
    match (path, text) {
        (Some(p), _) => Input::File(p),
        (None, Some(t)) => Input::Text { text: t, name },
        (None, None) => Input::Quickstart,
    }
}

fn parse_fidelity(f: Option<&str>) -> PyResult<Option<Fidelity>> {
    match f {
        None => Ok(None),
        Some("packet") => Ok(Some(Fidelity::Packet)),
        Some("flow") => Ok(Some(Fidelity::Flow)),
        Some(other) => Err(PyValueError::new_err(format!(
            "fidelity {other:?}: give \"packet\" or \"flow\""
        ))),
    }
}

/// Loads and checks a scenario without running it; returns the warnings the command line
/// would print (ignored keys of an ASTRA-sim network file).
#[pyfunction]
#[pyo3(signature = (path, text, name, set, seed=None, fidelity=None))]
fn check(
    py: Python<'_>,
    path: Option<PathBuf>,
    text: Option<String>,
    name: &str,
    set: Vec<String>,
    seed: Option<u64>,
    fidelity: Option<&str>,
) -> PyResult<Vec<String>> {
    let fidelity = parse_fidelity(fidelity)?;
    let src = frontend::load(input(&path, &text, name), &set, seed, fidelity)
        .map_err(|e| scenario_error(py, &e))?;
    Ok(src.astra.map(|a| a.warnings).unwrap_or_default())
}

/// Runs a scenario. Returns a dict: `json` (the report as `fabemu run --json` writes it),
/// `summary` (the text the command line prints), `warnings` (list of str), `keyboard_interrupt`
/// (Ctrl-C came during the run: the report is partial when it says `interrupted`).
/// `callback(sim_time_ps, events, end_ps)` is called every `TICK`; `end_ps` is None when the
/// scenario sets no `until`.
#[pyfunction]
#[pyo3(signature = (path, text, name, set, seed=None, fidelity=None, threads=1, out=None, pcap=None, callback=None))]
#[allow(clippy::too_many_arguments)]
fn run(
    py: Python<'_>,
    path: Option<PathBuf>,
    text: Option<String>,
    name: &str,
    set: Vec<String>,
    seed: Option<u64>,
    fidelity: Option<&str>,
    threads: usize,
    out: Option<PathBuf>,
    pcap: Option<PathBuf>,
    callback: Option<Py<PyAny>>,
) -> PyResult<Py<PyDict>> {
    let fidelity = parse_fidelity(fidelity)?;
    let src = frontend::load(input(&path, &text, name), &set, seed, fidelity)
        .map_err(|e| scenario_error(py, &e))?;
    let mut warnings: Vec<String> = src
        .astra
        .as_ref()
        .map(|a| a.warnings.clone())
        .unwrap_or_default();
    let (threads, w) = frontend::usable_threads(threads);
    warnings.extend(w);
    let opts = ObserveOptions {
        out_dir: out,
        pcap,
        ..ObserveOptions::default()
    };
    observe::check_output_paths(&opts, None).map_err(|e| run_error(py, RunError::Observe(e)))?;

    let progress = Progress::default();
    // The end is known only when the scenario sets `until` (not its default), as on the
    // command line.
    let end_ps = src.scenario.until.map(|t| t.ps());
    let (tx, rx) = mpsc::channel();
    // Waited on without the GIL, which asks for a `Sync` closure.
    let rx = std::sync::Mutex::new(rx);
    let mut keyboard_interrupt = false;
    let mut pending: Option<PyErr> = None;
    let result = std::thread::scope(|s| {
        let spawned = std::thread::Builder::new()
            .name("fabemu-run".into())
            .spawn_scoped(s, || {
                let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    fabemu::run_observed(&src, threads, &opts, Some(&progress))
                }));
                // The receiver waits for this; it is gone only if the waiting thread failed.
                let _ = tx.send(r);
            });
        let handle = match spawned {
            Ok(h) => h,
            Err(e) => {
                return Err(PyRuntimeError::new_err(format!(
                    "cannot start the run's thread: {e}"
                )))
            }
        };
        // Joined explicitly (the scope alone waits only for the closure): when this returns,
        // the thread is gone.
        let joined = |r: PyResult<Result<observe::Observed, RunError>>| {
            let _ = py.detach(|| handle.join());
            r
        };
        loop {
            let got = py.detach(|| match rx.lock() {
                Ok(rx) => rx.recv_timeout(TICK),
                Err(_) => Err(mpsc::RecvTimeoutError::Disconnected),
            });
            let done = match got {
                Ok(Ok(r)) => Some(Ok(r)),
                Ok(Err(_)) => Some(Err(PyRuntimeError::new_err(
                    "fabemu: internal error (a bug; please report it with the scenario)",
                ))),
                Err(mpsc::RecvTimeoutError::Disconnected) => Some(Err(PyRuntimeError::new_err(
                    "the run's thread ended without a result",
                ))),
                Err(mpsc::RecvTimeoutError::Timeout) => None,
            };
            if let Some(done) = done {
                return joined(done);
            }
            // The engine stops at its next window boundary; this thread waits for it, so no
            // worker thread outlives the call.
            if let Err(e) = py.check_signals() {
                progress.cancel.store(true, Ordering::Relaxed);
                if e.is_instance_of::<PyKeyboardInterrupt>(py) {
                    keyboard_interrupt = true;
                } else {
                    pending.get_or_insert(e);
                }
            }
            if let (Some(cb), None) = (&callback, &pending) {
                let sim = progress.sim_time_ps.load(Ordering::Relaxed);
                let events = progress.events.load(Ordering::Relaxed);
                if let Err(e) = cb.call1(py, (sim, events, end_ps)) {
                    progress.cancel.store(true, Ordering::Relaxed);
                    pending = Some(e);
                }
            }
        }
    })?;
    if let Some(e) = pending {
        return Err(e);
    }
    let observed = result.map_err(|e| run_error(py, e))?;
    let summary = fabemu::report::summary(&observed.report);
    if opts.out_dir.is_some() || opts.pcap.is_some() {
        // Every output that could be written is; the first failure is raised.
        if let Some(e) = observe::write_outputs(&observed, &opts, &summary)
            .into_iter()
            .next()
        {
            return Err(run_error(py, RunError::Observe(e)));
        }
    }
    if let Some(c) = observed.capture.as_ref().filter(|c| c.dropped > 0) {
        warnings.push(format!(
            "capture cap reached: {} of {} frames written",
            c.frames.len(),
            c.seen
        ));
    }
    let json = serde_json::to_string(&observed.report)
        .map_err(|e| PyRuntimeError::new_err(format!("cannot encode the report: {e}")))?;
    let d = PyDict::new(py);
    d.set_item("json", json)?;
    d.set_item("summary", summary)?;
    d.set_item("warnings", warnings)?;
    d.set_item("keyboard_interrupt", keyboard_interrupt)?;
    Ok(d.unbind())
}

/// The fabric a scenario (or an ASTRA-sim network file) builds, as `fabemu topo` shows it.
/// Returns a dict: `text` (the summary as printed), the summary's figures, `links` (a list of
/// `(a, b, bandwidth_bps, latency_ps)`), `dot` (Graphviz) and `warnings`.
#[pyfunction]
#[pyo3(signature = (path, text, name, set, astra_sim=None))]
fn topo(
    py: Python<'_>,
    path: Option<PathBuf>,
    text: Option<String>,
    name: &str,
    set: Vec<String>,
    astra_sim: Option<PathBuf>,
) -> PyResult<Py<PyDict>> {
    let what = match &astra_sim {
        Some(file) => TopoInput::AstraSim(file),
        None => TopoInput::Scenario(input(&path, &text, name), &set),
    };
    let t = frontend::topology(what).map_err(|e| match e {
        frontend::TopoError::Scenario(s) => scenario_error(py, &s),
        frontend::TopoError::Topology(t) => PyValueError::new_err(t.to_string()),
    })?;
    let s = &t.summary;
    let d = PyDict::new(py);
    d.set_item("text", s.to_string())?;
    d.set_item("fabric", s.fabric)?;
    d.set_item("dimensions", s.dimensions.clone())?;
    d.set_item("hosts", s.hosts)?;
    d.set_item("switches", s.switches)?;
    d.set_item("link_count", s.links)?;
    d.set_item("per_host_bandwidth_bps", s.per_host_bandwidth_bps)?;
    d.set_item("per_host_bandwidth_max_bps", s.per_host_bandwidth_max_bps)?;
    d.set_item("diameter_hops", s.diameter_hops)?;
    let (lo, hi) = match s.bisection {
        Bisection::Exact(b) => (b, b),
        Bisection::Bounds { at_least, at_most } => (at_least, at_most),
    };
    d.set_item("bisection_bps_at_least", lo)?;
    d.set_item("bisection_bps_at_most", hi)?;
    let classes = PyList::empty(py);
    for c in &s.links_by_class {
        let cd = PyDict::new(py);
        cd.set_item("class", c.class.to_string())?;
        cd.set_item("links", c.links)?;
        cd.set_item("bandwidth_bps", c.bandwidth_bps)?;
        cd.set_item("latency_ps", c.latency_ps)?;
        cd.set_item("per_host_bandwidth_bps", c.per_host_bandwidth_bps)?;
        classes.append(cd)?;
    }
    d.set_item("classes", classes)?;
    let links: Vec<(String, String, u64, u64)> = t
        .links()
        .map(|(a, b, bw, lat)| (a.to_string(), b.to_string(), bw.0, lat.ps()))
        .collect();
    d.set_item("links", links)?;
    d.set_item("links_text", t.links_text())?;
    d.set_item("dot", t.dot())?;
    d.set_item("warnings", t.warnings.clone())?;
    Ok(d.unbind())
}

/// A built-in algorithm as MSCCL XML, as `fabemu algo export --msccl` writes it.
#[pyfunction]
#[pyo3(signature = (op, algorithm, ranks, chunks))]
fn algo_export(op: String, algorithm: String, ranks: usize, chunks: usize) -> PyResult<String> {
    let args = fabemu::algo::ExportArgs {
        msccl: true,
        op,
        algorithm,
        ranks,
        chunks,
        output: None,
    };
    fabemu::algo::export_xml(&args).map_err(PyValueError::new_err)
}

/// The embedded quickstart scenario's YAML.
#[pyfunction]
fn quickstart() -> &'static str {
    fabemu::scenario::QUICKSTART
}

/// The native module.
#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("ScenarioError", m.py().get_type::<ScenarioError>())?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_function(wrap_pyfunction!(check, m)?)?;
    m.add_function(wrap_pyfunction!(run, m)?)?;
    m.add_function(wrap_pyfunction!(topo, m)?)?;
    m.add_function(wrap_pyfunction!(algo_export, m)?)?;
    m.add_function(wrap_pyfunction!(quickstart, m)?)?;
    Ok(())
}
