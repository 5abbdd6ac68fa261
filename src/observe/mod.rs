//! Seeing inside a run: the packets (pcap), latency histograms, time series (CSV), plots and
//! progress — for any scenario.
//!
//! The engine gathers the raw material while it runs (its capture tap and its sampling hook,
//! see `fabemu_fabric::engine`); this module chooses what to gather from the command line
//! ([`ObserveOptions`]), maps names to the engine's actor and port numbers ([`select`]), and
//! turns what came back into files under `--out DIR` ([`write_outputs`]):
//!
//! | file | what |
//! |---|---|
//! | `report.json`, `summary.txt` | the JSON report and the summary, as `--json` and stdout give them |
//! | `link_utilization.csv` | per directed link, busy share of each interval |
//! | `dimension_utilization.csv` | per link class (dimension or tier), the same over its links |
//! | `queue_depth.csv` | per switch egress queue, bytes queued at each interval boundary |
//! | `*.png`, `*.svg` | plots of the above (and the collective timeline) |
//! | `trace.json`, `breakdown.png`, `breakdown.svg` | a training workload's timeline (Perfetto) and its iteration breakdown per rank |
//! | `capture.pcap` | the captured frames, when `--capture` asks and `--pcap` does not name a path |
//!
//! A `--pcap` path ending in `.pcapng` gets a pcapng file ([`pcapng`]: one interface per
//! captured port, the direction of every frame, picosecond timestamps); any other a classic
//! pcap ([`pcap`]).

pub mod breakdown;
pub mod histograms;
pub mod pcap;
pub mod pcapng;
pub mod plot;
pub mod progress;
pub mod select;
pub mod series;
pub mod timeline;

use std::path::{Path, PathBuf};

use fabemu_fabric::engine::{Capture, CaptureConfig, SampleConfig, Samples};
use fabemu_fabric::units::Time;

use crate::report::facts::{self, ActorFacts};
use crate::report::Report;
use crate::world::Finished;

/// Sampling interval the series start from when none is given; it grows tenfold as often as
/// needed to stay within [`DEFAULT_MAX_BUCKETS`] buckets (so 200 to 2000 of them, each a power
/// of ten picoseconds long).
pub const DEFAULT_SAMPLE_INTERVAL: Time = Time(1_000);
/// Bucket limit of the default, adaptive interval.
pub const DEFAULT_MAX_BUCKETS: usize = 2_000;
/// Bucket limit of a given `--sample-interval`: past it the interval grows tenfold as the
/// default one does (with a warning), so a 1 ps interval cannot fill memory.
pub const MAX_BUCKETS: usize = 20_000;
/// Values per series table (rows times columns) at most: on a large fabric the bucket limit
/// is lowered to keep each CSV under it (the interval grows tenfold as needed), so the tables
/// are written within a second whatever the interval asked, also after Ctrl-C.
pub const MAX_CELLS: usize = 4_000_000;

/// What to observe beyond the report.
#[derive(Clone, Debug)]
pub struct ObserveOptions {
    /// Directory for report, summary, CSVs, plots (and the pcap unless `pcap` names one).
    pub out_dir: Option<PathBuf>,
    /// Where to write the capture.
    pub pcap: Option<PathBuf>,
    /// What to capture: comma-separated host or switch names (all their ports) or `name:port`;
    /// `None` = every host's NIC ports.
    pub capture: Option<String>,
    /// Fixed sampling interval; `None` = adaptive ([`DEFAULT_SAMPLE_INTERVAL`]).
    pub sample_interval: Option<Time>,
    /// Cap on captured frames.
    pub pcap_max_packets: u64,
    /// Cap on captured bytes.
    pub pcap_max_bytes: u64,
}

impl Default for ObserveOptions {
    fn default() -> Self {
        let caps = CaptureConfig::default();
        ObserveOptions {
            out_dir: None,
            pcap: None,
            capture: None,
            sample_interval: None,
            pcap_max_packets: caps.max_packets,
            pcap_max_bytes: caps.max_bytes,
        }
    }
}

impl ObserveOptions {
    /// Where the capture goes (`None`: no capture).
    pub fn pcap_path(&self) -> Option<PathBuf> {
        match (&self.pcap, &self.out_dir, &self.capture) {
            (Some(p), _, _) => Some(p.clone()),
            (None, Some(d), Some(_)) => Some(d.join("capture.pcap")),
            _ => None,
        }
    }

    /// The engine's capture settings for a run of the fabric `graph` (`None`: no capture), the
    /// ports named by `--capture` resolved.
    pub fn capture_config(
        &self,
        graph: &fabemu_topologies::Graph,
    ) -> Result<Option<CaptureConfig>, ObserveError> {
        if self.pcap_path().is_none() {
            return Ok(None);
        }
        Ok(Some(CaptureConfig {
            ports: select::resolve(graph, self.capture.as_deref())
                .map_err(ObserveError::BadOption)?,
            max_packets: self.pcap_max_packets,
            max_bytes: self.pcap_max_bytes,
        }))
    }

    /// The engine's sampling settings (only with an output directory) for a fabric of
    /// `links` links: every table has at most two columns per link (one per direction, or per
    /// switch port), so its rows are limited to keep it within [`MAX_CELLS`] values.
    pub fn sample_config(&self, links: usize) -> Option<SampleConfig> {
        self.out_dir.as_ref()?;
        let (interval, limit) = match self.sample_interval {
            Some(i) => (i, MAX_BUCKETS),
            None => (DEFAULT_SAMPLE_INTERVAL, DEFAULT_MAX_BUCKETS),
        };
        let by_cells = MAX_CELLS / links.saturating_mul(2).max(1);
        Some(SampleConfig {
            interval,
            max_buckets: Some(limit.min(by_cells)),
        })
    }
}

/// Why observing failed.
#[derive(Debug, thiserror::Error)]
pub enum ObserveError {
    /// A command-line choice is invalid (exit code 2).
    #[error("{0}")]
    BadOption(String),
    /// A file could not be written (exit code 1).
    #[error("cannot write {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A plot could not be drawn (exit code 1).
    #[error("cannot draw {path}: {message}")]
    Plot {
        /// The file.
        path: PathBuf,
        /// Why.
        message: String,
    },
}

pub(crate) fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> ObserveError + '_ {
    move |source| ObserveError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Checks, before a run, that every file the run will write can be written: `--out DIR` is a
/// directory or can be created (its nearest existing ancestor is a writable directory), and
/// `--pcap PATH` and `json` (the `--json` file; not `-`) are files in an existing, writable
/// directory and not directories themselves. Nothing is left behind: probe files are removed
/// and no directory is created. A run takes long; finding a typo in an output path after it
/// would lose its results.
pub fn check_output_paths(opts: &ObserveOptions, json: Option<&Path>) -> Result<(), ObserveError> {
    if let Some(dir) = &opts.out_dir {
        check_dir(dir)?;
    }
    let files = [opts.pcap.as_deref(), json.filter(|p| p.as_os_str() != "-")];
    for path in files.into_iter().flatten() {
        check_file(path)?;
    }
    Ok(())
}

fn bad(path: &Path, why: impl std::fmt::Display) -> ObserveError {
    ObserveError::BadOption(format!("cannot write {}: {why}", path.display()))
}

/// `dir` exists as a writable directory, or its nearest existing ancestor is one.
fn check_dir(dir: &Path) -> Result<(), ObserveError> {
    let mut at = dir;
    loop {
        match std::fs::metadata(at) {
            Ok(m) if m.is_dir() => return probe_dir(at).map_err(|e| bad(dir, e)),
            Ok(_) if at == dir => return Err(bad(dir, "it exists and is not a directory")),
            Ok(_) => {
                return Err(bad(
                    dir,
                    format_args!("{} is not a directory", at.display()),
                ))
            }
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(bad(dir, e)),
            Err(_) => {}
        }
        match at.parent() {
            Some(p) if !p.as_os_str().is_empty() => at = p,
            // A relative path whose first component is missing: it is created in the working
            // directory.
            _ => return probe_dir(Path::new(".")).map_err(|e| bad(dir, e)),
        }
    }
}

/// Creates and removes a file in `dir`: the only portable test that files can be made there.
fn probe_dir(dir: &Path) -> std::io::Result<()> {
    let probe = dir.join(format!(".fabemu-write-test-{}", std::process::id()));
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&probe)?;
    std::fs::remove_file(&probe)
}

/// `path` can be opened for writing (an existing file is not truncated here) or created.
fn check_file(path: &Path) -> Result<(), ObserveError> {
    match std::fs::metadata(path) {
        Ok(m) if m.is_dir() => return Err(bad(path, "it is a directory")),
        Ok(m) => {
            let mut f = std::fs::OpenOptions::new()
                .append(true)
                .open(path)
                .map_err(|e| bad(path, e))?;
            // A device (`/dev/full`) opens but may refuse every byte: one is written to find
            // out (not to a terminal, where it would show, nor to a regular file, which it
            // would change).
            use std::os::unix::fs::FileTypeExt;
            if m.file_type().is_char_device() && !std::io::IsTerminal::is_terminal(&f) {
                std::io::Write::write_all(&mut f, b"\n").map_err(|e| bad(path, e))?;
            }
            return Ok(());
        }
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(bad(path, e)),
        Err(_) => {}
    }
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    match std::fs::metadata(parent) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => {
            return Err(bad(
                path,
                format_args!("{} is not a directory", parent.display()),
            ))
        }
        Err(_) => {
            return Err(bad(
                path,
                format_args!("the directory {} does not exist", parent.display()),
            ))
        }
    }
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .and_then(|mut f| std::io::Write::write_all(&mut f, b"\n"));
    // Removed whether the byte went in or not (a full disk).
    let removed = std::fs::remove_file(path);
    written.map_err(|e| bad(path, e))?;
    removed.map_err(|e| bad(path, e))
}

/// A run with everything that was observed.
pub struct Observed {
    /// The report.
    pub report: Report,
    /// The finished world (graph, actors, counters).
    pub finished: Finished,
    /// Captured frames, if asked.
    pub capture: Option<Capture>,
    /// Time series, if asked.
    pub samples: Option<Samples>,
    /// The facts of every actor when they were gathered from other processes (a run over MPI
    /// ranks: `finished` holds the actors other ranks ran as built); `None`: they are read
    /// from `finished`'s actors.
    pub facts: Option<Vec<ActorFacts>>,
}

/// Files and folders being written under temporary names, for [`remove_partial`].
static PARTIAL: std::sync::Mutex<Vec<PathBuf>> = std::sync::Mutex::new(Vec::new());

fn partial(path: &Path, add: bool) {
    if let Ok(mut v) = PARTIAL.lock() {
        if add {
            v.push(path.to_path_buf());
        } else {
            v.retain(|p| p != path);
        }
    }
}

/// Removes every output still being written (a second Ctrl-C calls it before exiting), so an
/// interrupted write leaves no truncated file that looks finished.
pub fn remove_partial() {
    // Bounded retries: a writer may hold the list for a moment (`try_lock`: from a signal
    // handler thread, never wait on a writer), or add a file to a staging folder between
    // `remove_dir_all`'s listing and its removal of the folder. Once a folder is gone nothing
    // can be written into it any more.
    for _ in 0..500 {
        if let Ok(v) = PARTIAL.try_lock() {
            let mut left = false;
            for p in v.iter() {
                let _ = std::fs::remove_dir_all(p).or_else(|_| std::fs::remove_file(p));
                left |= std::fs::symlink_metadata(p).is_ok();
            }
            if !left {
                return;
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

/// The temporary name `path` is written under: a hidden sibling.
fn partial_name(path: &Path) -> PathBuf {
    let name = path
        .file_name()
        .map_or_else(|| "output".into(), |n| n.to_string_lossy().into_owned());
    path.with_file_name(format!(".{name}.partial-{}", std::process::id()))
}

/// Writes the file `path` with `write`: through a temporary sibling renamed into place once
/// complete, so no reader ever sees half of it; a device or a pipe (`/dev/stdout`) directly.
pub fn write_whole(
    path: &Path,
    write: impl FnOnce(&Path) -> Result<(), ObserveError>,
) -> Result<(), ObserveError> {
    if std::fs::metadata(path).is_ok_and(|m| !m.is_file()) {
        return write(path);
    }
    let tmp = partial_name(path);
    partial(&tmp, true);
    let r = write(&tmp).and_then(|()| std::fs::rename(&tmp, path).map_err(io_err(path)));
    if r.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    partial(&tmp, false);
    r
}

/// Writes the pcap (if captured) and, with an output directory, the report, the summary, the
/// CSVs and the plots. `summary` is the text the summary file gets. The directory's files are
/// written into a hidden folder inside it and moved into place when each is complete; a file
/// that fails is left out and the others are still written. Returns every failure.
pub fn write_outputs(obs: &Observed, opts: &ObserveOptions, summary: &str) -> Vec<ObserveError> {
    let mut errors = Vec::new();
    let stage = match &opts.out_dir {
        Some(dir) => {
            let stage = dir.join(format!(".fabemu-partial-{}", std::process::id()));
            // Listed before it exists: a second Ctrl-C in between still removes it.
            partial(&stage, true);
            match std::fs::create_dir_all(&stage) {
                Ok(()) => Some((dir, stage)),
                Err(e) => {
                    partial(&stage, false);
                    errors.push(io_err(dir)(e));
                    None
                }
            }
        }
        None => None,
    };
    if let (Some(path), Some(c)) = (opts.pcap_path(), &obs.capture) {
        // In the output directory, with the others; elsewhere, on its own.
        let staged = match (&stage, &opts.pcap) {
            (Some((_, st)), None) => path.file_name().map(|n| st.join(n)),
            _ => None,
        };
        let write = |p: &Path| {
            if pcapng::is_pcapng(p) || pcapng::is_pcapng(&path) {
                let g = &obs.finished.graph;
                let ports =
                    select::resolve(g, opts.capture.as_deref()).map_err(ObserveError::BadOption)?;
                pcapng::write_file(p, &select::interfaces(g, &ports), &c.frames)
            } else {
                pcap::write_file(p, &c.frames)
            }
        };
        let r = match &staged {
            Some(p) => write(p),
            None => write_whole(&path, write),
        };
        if let Err(e) = r {
            errors.push(e);
        }
    }
    if let Some((dir, stage)) = stage {
        let first = errors.len();
        write_dir(obs, summary, &stage, &mut errors);
        // Leave out what failed (it may be half written), keep the rest.
        for e in &errors[first..] {
            let failed = match e {
                ObserveError::Io { path, .. } | ObserveError::Plot { path, .. } => path,
                ObserveError::BadOption(_) => continue,
            };
            let _ = std::fs::remove_file(failed);
        }
        match std::fs::read_dir(&stage) {
            Ok(entries) => {
                for entry in entries.flatten() {
                    let to = dir.join(entry.file_name());
                    if let Err(e) = std::fs::rename(entry.path(), &to) {
                        errors.push(io_err(&to)(e));
                    }
                }
            }
            Err(e) => errors.push(io_err(&stage)(e)),
        }
        let _ = std::fs::remove_dir_all(&stage);
        partial(&stage, false);
    }
    errors
}

/// Writes the output directory's files into `dir`, each failure into `errors`.
fn write_dir(obs: &Observed, summary: &str, dir: &Path, errors: &mut Vec<ObserveError>) {
    let mut step = |r: Result<(), ObserveError>| {
        if let Err(e) = r {
            errors.push(e);
        }
    };
    step((|| {
        let p = dir.join("report.json");
        let json = serde_json::to_string_pretty(&obs.report).map_err(|e| ObserveError::Io {
            path: p.clone(),
            source: e.into(),
        })?;
        std::fs::write(&p, json + "\n").map_err(io_err(&p))
    })());
    let p = dir.join("summary.txt");
    step(std::fs::write(&p, summary).map_err(io_err(&p)));
    // The trace and the timelines read the actors' final state.
    let taken;
    let facts: &[ActorFacts] = match &obs.facts {
        Some(f) => f,
        None if obs.finished.training.is_some() || !obs.finished.collectives.is_empty() => {
            taken = facts::of_all(&obs.finished.output.actors);
            &taken
        }
        None => &[],
    };
    if let Some(trace) = crate::training::perfetto_trace(&obs.finished, facts) {
        let p = dir.join("trace.json");
        step(std::fs::write(&p, trace).map_err(io_err(&p)));
    }
    if let Some(t) = &obs.report.training {
        step(breakdown::breakdown_chart(&dir.join("breakdown"), t));
    }
    let shade = fault_windows(&obs.report);
    if let Some(s) = &obs.samples {
        let g = &obs.finished.graph;
        let links = series::link_utilization(g, s);
        let dims = series::dimension_utilization(g, s);
        let queues = series::queue_depth(g, s);
        step(series::write_csv(&dir.join("link_utilization.csv"), &links));
        step(series::write_csv(
            &dir.join("dimension_utilization.csv"),
            &dims,
        ));
        step(series::write_csv(&dir.join("queue_depth.csv"), &queues));
        // One class of links (an explicit fabric, a star): its average is one flat line that
        // hides where the load is; the busiest links say it.
        let (title, series, keep) = if dims.columns.len() > 1 {
            ("Link utilization per dimension", &dims, usize::MAX)
        } else {
            ("Link utilization, busiest links", &links, 8)
        };
        step(plot::line_chart(
            &dir.join("link_utilization"),
            &plot::LineChart {
                title: title.into(),
                y_label: "utilization".into(),
                y_unit: plot::YUnit::Share,
                series,
                y_max: Some(1.0),
                keep,
                shade: &shade,
            },
        ));
        if !queues.columns.is_empty() {
            step(plot::line_chart(
                &dir.join("queue_depth"),
                &plot::LineChart {
                    title: "Queue depth, busiest queues".into(),
                    y_label: "queued".into(),
                    y_unit: plot::YUnit::Bytes,
                    series: &queues,
                    y_max: None,
                    keep: 8,
                    shade: &shade,
                },
            ));
        }
    }
    // DCQCN: every cut queue pair's rate, one row per change (long format, for any plotter).
    let cut: Vec<_> = obs
        .report
        .nics
        .iter()
        .flat_map(|n| n.qp_rates.iter().map(move |q| (n, q)))
        .collect();
    if !cut.is_empty() {
        step((|| {
            let p = dir.join("qp_rates.csv");
            let mut w = csv::Writer::from_path(&p).map_err(series::csv_err(&p))?;
            w.write_record(["time_ps", "qp", "rate_bps"])
                .map_err(series::csv_err(&p))?;
            for (n, q) in cut {
                let qp = format!("{}->{}", n.name, q.peer);
                for [t, b] in &q.samples {
                    w.write_record([t.to_string(), qp.clone(), b.to_string()])
                        .map_err(series::csv_err(&p))?;
                }
            }
            w.flush().map_err(io_err(&p))
        })());
    }
    if obs.report.nics.iter().any(|n| !n.qp_rates.is_empty()) {
        let rates = series::qp_rates(&obs.report, 8, obs.report.totals.completion_time_ps);
        step(plot::line_chart(
            &dir.join("qp_rates"),
            &plot::LineChart {
                title: "DCQCN: rate of cut queue pairs (the first 8)".into(),
                y_label: "rate".into(),
                y_unit: plot::YUnit::BitsPerSecond,
                series: &rates,
                y_max: None,
                keep: usize::MAX,
                shade: &shade,
            },
        ));
    }
    for (j, (title, rows)) in timeline::timelines(&obs.finished, facts).iter().enumerate() {
        if rows.iter().any(|(_, bars)| !bars.is_empty()) {
            step(plot::collective_timeline(
                &dir.join(format!("timeline_{j}")),
                title,
                rows,
            ));
        }
    }
}

/// The windows in which faults were active, `[start, end)` in ps, up to the end of the traffic:
/// every repetition of a periodic entry; an entry without `until` lasts to the end.
fn fault_windows(report: &Report) -> Vec<(u64, u64)> {
    // The series end with the traffic; so do the bands.
    let end = match report.totals.completion_time_ps {
        0 => report.totals.simulated_time_ps,
        t => t,
    };
    let mut out = Vec::new();
    let Some(f) = &report.faults else {
        return out;
    };
    for e in &f.entries {
        let len = e.until_ps.map(|u| u.saturating_sub(e.from_ps));
        match (e.period_ps, len) {
            (Some(p), Some(len)) if p > 0 => {
                let mut a = e.from_ps;
                // Bounded: a plot needs no more bands than it has pixels.
                while a < end && out.len() < 4096 {
                    out.push((a, a + len));
                    a += p;
                }
            }
            (_, Some(len)) => out.push((e.from_ps, e.from_ps + len)),
            (_, None) => out.push((e.from_ps, end.max(e.from_ps))),
        }
    }
    out
}
