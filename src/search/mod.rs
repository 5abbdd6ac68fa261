//! `fabemu search`: which parallel strategy trains a transformer fastest on a fabric.
//!
//! The scenario gives the fabric, the model (`workload.training.model`), the device and the
//! settings the search does not vary. The user names the dimensions to vary (tensor, pipeline
//! and data parallelism, micro-batch size, ZeRO stage, recomputation, sequence parallelism);
//! every combination is a candidate. A candidate is dropped when it cannot be built (the
//! degrees do not multiply to the hosts, a degree does not divide the heads, layers or batch:
//! [`Transformer::derive`]'s checks), marked when its memory per GPU
//! ([`fabemu_workload::memory`], the stage that needs most) exceeds the device's, and
//! otherwise screened (`screen`: its iteration composed from collectives measured once on the
//! fabric); the `top` best of the screening then run one iteration each at flow fidelity. Both
//! passes spread the candidates over worker threads (each is deterministic and
//! single-threaded, so the table does not depend on their number).
//!
//! A candidate is the scenario's own YAML with the dimensions' fields set (as `--set` sets
//! them), so the best one can be written out and run as it is, at packet level too.

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use fabemu_workload::memory::{self, MemoryInputs};
use fabemu_workload::model::Schedule;
use fabemu_workload::transformer::{Device, Parallel, Recompute, Transformer, Zero};
use serde_yaml::Value;

use crate::frontend::{self, Input};

mod screen;
use crate::scenario::{
    overrides, Fidelity, FieldPath, Override, RecomputeYaml, ScenarioError, ScheduleYaml, Source,
    TrainingYaml,
};

/// The values each dimension takes; an empty list keeps the scenario's value (and for `dp`,
/// takes what the hosts leave: hosts / (tp x pp x ep)).
#[derive(Clone, Debug, Default)]
pub struct Space {
    /// Tensor-parallel degrees.
    pub tp: Vec<u64>,
    /// Pipeline-parallel degrees.
    pub pp: Vec<u64>,
    /// Data-parallel degrees.
    pub dp: Vec<u64>,
    /// Micro-batch sizes (sequences).
    pub micro_batch: Vec<u64>,
    /// ZeRO stages.
    pub zero: Vec<u8>,
    /// Recomputation: `none`, `selective`, `full`.
    pub recompute: Vec<RecomputeYaml>,
    /// Sequence parallelism off and/or on (on only with tp > 1).
    pub sp: Vec<bool>,
}

/// One strategy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Strategy {
    /// Tensor-parallel degree.
    pub tp: u64,
    /// Pipeline-parallel degree.
    pub pp: u64,
    /// Data-parallel degree.
    pub dp: u64,
    /// Micro-batch size.
    pub micro_batch: u64,
    /// ZeRO stage.
    pub zero: u8,
    /// Recomputation.
    pub recompute: RecomputeYaml,
    /// Sequence parallelism.
    pub sp: bool,
}

impl Strategy {
    /// The scenario fields this strategy sets, as `--set` takes them.
    pub fn overrides(&self) -> Vec<String> {
        let w = "workload.training";
        vec![
            format!("{w}.tp={}", self.tp),
            format!("{w}.pp={}", self.pp),
            format!("{w}.dp={}", self.dp),
            format!("{w}.model.micro_batch={}", self.micro_batch),
            format!("{w}.zero={}", self.zero),
            format!("{w}.recompute={}", recompute_name(self.recompute)),
            format!("{w}.sp={}", self.sp),
        ]
    }
}

fn recompute_name(r: RecomputeYaml) -> &'static str {
    match r {
        RecomputeYaml::None => "none",
        RecomputeYaml::Selective => "selective",
        RecomputeYaml::Full => "full",
    }
}

/// What running a candidate gave.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    /// One iteration at flow fidelity.
    Ran(Metrics),
    /// Screened only (not among the `top` run in full): the composed estimate.
    Screened(Metrics),
    /// Not run: its memory per GPU exceeds the device's.
    DoesNotFit,
    /// The run failed (the message says why).
    Failed(String),
}

/// A run's figures.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Metrics {
    /// Iteration time, picoseconds.
    pub iteration_ps: u64,
    /// Tokens per second over the cluster.
    pub tokens_per_s: f64,
    /// Executed TFLOP/s per GPU (recomputation counted, as the report's).
    pub tflops_per_gpu: f64,
    /// Model FLOPs utilization: the above over the device's peak (None without a peak).
    pub mfu: Option<f64>,
    /// Communication the compute waited for, mean over the ranks, as a share of the
    /// iteration.
    pub exposed_comm: f64,
}

/// A candidate with its memory and outcome.
#[derive(Clone, Debug)]
pub struct Row {
    /// The strategy.
    pub strategy: Strategy,
    /// Bytes per GPU on the stage that needs the most.
    pub memory: f64,
    /// That stage.
    pub peak_stage: u64,
    /// Whether it fits the device (true when the device's memory is not given).
    pub fits: bool,
    /// The run's outcome.
    pub outcome: Outcome,
    /// The screening estimate (None: not screened, or it failed).
    pub screen: Option<Metrics>,
    /// The scenario's YAML with the strategy's fields set.
    pub text: String,
}

/// A search's result: the rows ranked (fastest first, then failed runs, then those that do
/// not fit, by memory), and the candidates that could not be built, with why.
#[derive(Clone, Debug)]
pub struct SearchResult {
    /// The ranked rows.
    pub rows: Vec<Row>,
    /// Candidates dropped: the strategy and why it cannot be built.
    pub invalid: Vec<(Strategy, String)>,
    /// Hosts of the fabric.
    pub hosts: usize,
    /// The device's memory (0: not given).
    pub device_memory: u64,
    /// Wall-clock time of the runs in full.
    pub wall: Duration,
    /// Wall-clock time of the screening.
    pub screen_wall: Duration,
    /// Collectives and messages measured on the fabric for the screening.
    pub measured: usize,
    /// Candidates screened.
    pub screened: usize,
}

impl SearchResult {
    /// The screening's error against the full runs, over the candidates that have both:
    /// (count, mean and largest |screened - full| / full of the iteration time).
    pub fn screening_error(&self) -> Option<(usize, f64, f64)> {
        let errs: Vec<f64> = self
            .rows
            .iter()
            .filter_map(|r| match (&r.outcome, &r.screen) {
                (Outcome::Ran(m), Some(e)) => Some(
                    (e.iteration_ps as f64 - m.iteration_ps as f64).abs() / m.iteration_ps as f64,
                ),
                _ => None,
            })
            .collect();
        (!errs.is_empty()).then(|| {
            (
                errs.len(),
                errs.iter().sum::<f64>() / errs.len() as f64,
                errs.iter().fold(0.0f64, |a, &b| a.max(b)),
            )
        })
    }
}

impl SearchResult {
    /// The fastest strategy that fits and ran.
    pub fn best(&self) -> Option<&Row> {
        self.rows
            .first()
            .filter(|r| matches!(r.outcome, Outcome::Ran(_) | Outcome::Screened(_)))
    }
}

/// Why a search could not start.
#[derive(Debug, thiserror::Error)]
pub enum SearchError {
    /// The scenario (or an override) is invalid.
    #[error("{0}")]
    Scenario(#[from] ScenarioError),
    /// Nothing to search.
    #[error("{0}")]
    Empty(String),
}

/// The model, parallel settings and device a loaded scenario describes.
struct Setup {
    transformer: Transformer,
    parallel: Parallel,
    device: Option<Device>,
}

/// Reads `workload.training` (which must have a `model`) and `workload.device`.
fn setup(src: &Source) -> Result<Setup, ScenarioError> {
    let at = FieldPath::root().key("workload").key("training");
    let Some(tr) = src.scenario.workload.training.as_ref() else {
        return Err(src.error_at(
            &FieldPath::root().key("workload"),
            "`fabemu search` needs `workload.training` with a `model`",
        ));
    };
    let Some(model) = tr.model.as_ref() else {
        return Err(src.error_at(
            &at,
            "`fabemu search` needs a `model` (a preset or hyper-parameters) to derive each \
             strategy's work and memory",
        ));
    };
    let transformer = model
        .transformer()
        .map_err(|(f, m)| src.error_at(&at.key("model").key(f), m))?;
    let device = match &src.scenario.workload.device {
        Some(d) => Some(d.resolved().map_err(|(f, m)| {
            src.error_at(&FieldPath::root().key("workload").key("device").key(f), m)
        })?),
        None => None,
    };
    Ok(Setup {
        transformer,
        parallel: parallel_of(tr),
        device,
    })
}

/// The parallel settings of `workload.training` (checked when the scenario is run).
fn parallel_of(tr: &TrainingYaml) -> Parallel {
    Parallel {
        dp: tr.dp as u64,
        tp: tr.tp as u64,
        pp: tr.pp as u64,
        ep: tr.ep as u64,
        sp: tr.sp,
        schedule: match tr.schedule {
            ScheduleYaml::OneFOneB => Schedule::OneFOneB,
            ScheduleYaml::Interleaved => Schedule::Interleaved(tr.virtual_stages.unwrap_or(2)),
            ScheduleYaml::GPipe => Schedule::GPipe,
        },
        recompute: recompute_of(tr.recompute),
        zero: zero_of(tr.zero),
    }
}

fn recompute_of(r: RecomputeYaml) -> Recompute {
    match r {
        RecomputeYaml::None => Recompute::None,
        RecomputeYaml::Selective => Recompute::Selective,
        RecomputeYaml::Full => Recompute::Full,
    }
}

/// A ZeRO stage (3 and above: 3; the search refuses more before).
fn zero_of(z: u8) -> Zero {
    match z {
        0 => Zero::Off,
        1 => Zero::Stage1,
        2 => Zero::Stage2,
        _ => Zero::Stage3,
    }
}

/// Memory per GPU of the stage that needs most: (stage, bytes).
pub fn peak_memory(t: &Transformer, p: &Parallel, micro_batches: u64) -> (u64, f64) {
    let (stage, m) = memory::peak(&MemoryInputs::new(t, p), p.schedule, micro_batches);
    (stage, m.total())
}

/// The scenario `file` as YAML with `set` applied, `model: NAME` written as `{preset: NAME}`
/// so that its fields can be set.
fn base_doc(text: &str, file: &str, set: &[String]) -> Result<Value, ScenarioError> {
    let mut doc: Value = serde_yaml::from_str(text).map_err(|e| ScenarioError {
        file: file.to_string(),
        line: e.location().map(|l| l.line()),
        column: e.location().map(|l| l.column()),
        field: String::new(),
        message: e.to_string(),
    })?;
    for s in set {
        overrides::apply(&mut doc, &Override::parse(s)?)?;
    }
    if let Some(model) = doc
        .get_mut("workload")
        .and_then(|w| w.get_mut("training"))
        .and_then(|t| t.get_mut("model"))
    {
        if let Value::String(name) = model {
            let mut m = serde_yaml::Mapping::new();
            m.insert(Value::String("preset".into()), Value::String(name.clone()));
            *model = Value::Mapping(m);
        }
    }
    Ok(doc)
}

/// The candidates of `space` over the scenario's values.
fn candidates(
    space: &Space,
    base: &Parallel,
    t: &Transformer,
    zero: u8,
    hosts: u64,
) -> Vec<Strategy> {
    let or = |v: &Vec<u64>, d: u64| if v.is_empty() { vec![d] } else { v.clone() };
    let recompute_base = match base.recompute {
        Recompute::None => RecomputeYaml::None,
        Recompute::Selective => RecomputeYaml::Selective,
        Recompute::Full => RecomputeYaml::Full,
    };
    let mut out = Vec::new();
    for &tp in &or(&space.tp, base.tp) {
        for &pp in &or(&space.pp, base.pp) {
            let dps = if space.dp.is_empty() {
                let per = tp.saturating_mul(pp).saturating_mul(base.ep.max(1)).max(1);
                vec![if hosts % per == 0 { hosts / per } else { 0 }]
            } else {
                space.dp.clone()
            };
            for &dp in &dps {
                for &micro_batch in &or(&space.micro_batch, t.micro_batch) {
                    for &z in if space.zero.is_empty() {
                        std::slice::from_ref(&zero)
                    } else {
                        &space.zero
                    } {
                        for &recompute in if space.recompute.is_empty() {
                            std::slice::from_ref(&recompute_base)
                        } else {
                            &space.recompute
                        } {
                            for &sp in if space.sp.is_empty() {
                                std::slice::from_ref(&base.sp)
                            } else {
                                &space.sp
                            } {
                                out.push(Strategy {
                                    tp,
                                    pp,
                                    dp,
                                    micro_batch,
                                    zero: z,
                                    recompute,
                                    sp,
                                });
                            }
                        }
                    }
                }
            }
        }
    }
    out
}

/// Runs the search over `space` for the scenario in `path` (with `set` applied) on `threads`
/// workers: every candidate that fits is screened, and the `top` best of the screening run
/// in full at flow fidelity; `tick` is called after each screening and each run (for a
/// progress bar), `total` once with their number.
pub fn search(
    path: &Path,
    set: &[String],
    space: &Space,
    threads: usize,
    top: usize,
    total: &(dyn Fn(usize) + Sync),
    tick: &(dyn Fn() + Sync),
) -> Result<SearchResult, SearchError> {
    let file = path.display().to_string();
    let src = frontend::load(Input::File(path), set, None, None)?;
    let base = setup(&src)?;
    let hosts = crate::world::fabric(&src)?.0.host_count();
    let tr_zero = src
        .scenario
        .workload
        .training
        .as_ref()
        .map_or(0, |t| t.zero);
    let doc = base_doc(&src.text, &file, set)?;
    let device_memory = base.device.map_or(0, |d| d.memory);
    let mut invalid = Vec::new();
    let mut rows: Vec<Row> = Vec::new();
    for s in candidates(
        space,
        &base.parallel,
        &base.transformer,
        tr_zero,
        hosts as u64,
    ) {
        let mut t = base.transformer.clone();
        t.micro_batch = s.micro_batch;
        let p = Parallel {
            tp: s.tp,
            pp: s.pp,
            dp: s.dp,
            sp: s.sp,
            zero: zero_of(s.zero),
            recompute: recompute_of(s.recompute),
            ..base.parallel
        };
        let ranks =
            s.dp.saturating_mul(s.tp)
                .saturating_mul(s.pp)
                .saturating_mul(p.ep);
        if s.dp == 0 || ranks != hosts as u64 {
            invalid.push((
                s,
                format!(
                    "tp x pp x ep = {} does not divide the {hosts} hosts",
                    s.tp * s.pp * p.ep
                ),
            ));
            continue;
        }
        if s.zero > 3 {
            invalid.push((s, format!("ZeRO stage {}: 0 to 3", s.zero)));
            continue;
        }
        let derived = match t.derive(&p) {
            Ok(d) => d,
            Err((_, m)) => {
                invalid.push((s, m));
                continue;
            }
        };
        let (peak_stage, memory) = peak_memory(&t, &p, derived.micro_batches);
        let fits = device_memory == 0 || memory <= device_memory as f64;
        let mut d = doc.clone();
        for o in s.overrides() {
            overrides::apply(&mut d, &Override::parse(&o)?)?;
        }
        let text = serde_yaml::to_string(&d).map_err(|e| SearchError::Empty(e.to_string()))?;
        rows.push(Row {
            strategy: s,
            memory,
            peak_stage,
            fits,
            outcome: Outcome::DoesNotFit,
            screen: None,
            text,
        });
    }
    if rows.is_empty() {
        return Err(SearchError::Empty(format!(
            "no strategy can be built on {hosts} hosts ({} tried; the first: {})",
            invalid.len(),
            invalid
                .first()
                .map_or(String::new(), |(s, why)| format!("{}: {why}", label(s)))
        )));
    }
    let todo: Vec<usize> = (0..rows.len()).filter(|&i| rows[i].fits).collect();
    let full_runs = top.min(todo.len());
    total(todo.len() + full_runs);
    // Screening: every candidate that fits, composed from measured communication.
    let t0 = Instant::now();
    let screener = screen::Screener::new(&src, &doc, &file)?;
    let screened = in_parallel(&todo, threads, |i| {
        let r = screener.screen(&rows[i].text);
        tick();
        r
    });
    let screen_wall = t0.elapsed();
    for (i, r) in screened {
        match r {
            Ok(m) => {
                rows[i].screen = Some(m);
                rows[i].outcome = Outcome::Screened(m);
            }
            Err(e) => rows[i].outcome = Outcome::Failed(format!("screening: {e}")),
        }
    }
    // The best of the screening, run in full (a failed screening is run too, after them).
    let mut order = todo.clone();
    order.sort_by(|&a, &b| {
        let key = |i: usize| rows[i].screen.map_or(f64::INFINITY, |m| -m.tokens_per_s);
        key(a).total_cmp(&key(b)).then(a.cmp(&b))
    });
    order.truncate(full_runs);
    // Each full run holds its world: bound how many run at once by the fabric's size.
    let workers = threads.min(full_run_workers(hosts));
    let t1 = Instant::now();
    let ran = in_parallel(&order, workers, |i| {
        let r = run_one(&rows[i].text, &file);
        tick();
        r
    });
    let wall = t1.elapsed();
    for (i, outcome) in ran {
        rows[i].outcome = outcome;
    }
    rank(&mut rows);
    Ok(SearchResult {
        rows,
        invalid,
        hosts,
        device_memory,
        wall,
        screen_wall,
        measured: screener.measured(),
        screened: todo.len(),
    })
}

/// Memory a full run may hold at once over all workers.
const FULL_RUN_MEMORY: u64 = 16 << 30;
/// A full run's memory per host, about (the 1024-host benchmark's runs held up to 8 GiB).
const FULL_RUN_MEMORY_PER_HOST: u64 = 8 << 20;

/// How many full runs on `hosts` hosts may run at once.
fn full_run_workers(hosts: usize) -> usize {
    let per_run = (hosts as u64)
        .saturating_mul(FULL_RUN_MEMORY_PER_HOST)
        .max(1);
    usize::try_from(FULL_RUN_MEMORY / per_run)
        .unwrap_or(usize::MAX)
        .max(1)
}

/// `f` over `items` on `threads` workers: (item, result) in any order.
fn in_parallel<T: Send>(
    items: &[usize],
    threads: usize,
    f: impl Fn(usize) -> T + Sync,
) -> Vec<(usize, T)> {
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<(usize, T)>> = Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for _ in 0..threads.max(1).min(items.len().max(1)) {
            scope.spawn(|| loop {
                let k = next.fetch_add(1, Ordering::Relaxed);
                let Some(&i) = items.get(k) else { break };
                let r = f(i);
                if let Ok(mut v) = results.lock() {
                    v.push((i, r));
                }
            });
        }
    });
    results.into_inner().unwrap_or_default()
}

/// Sorts rows: run in full (most tokens/s first), screened only (the same), failed, does not
/// fit (least memory first); ties keep the enumeration order.
fn rank(rows: &mut [Row]) {
    let key = |r: &Row| match &r.outcome {
        Outcome::Ran(m) => (0, -m.tokens_per_s),
        Outcome::Screened(m) => (1, -m.tokens_per_s),
        Outcome::Failed(_) => (2, 0.0),
        Outcome::DoesNotFit => (3, r.memory),
    };
    rows.sort_by(|a, b| {
        let (ka, kb) = (key(a), key(b));
        ka.0.cmp(&kb.0).then(ka.1.total_cmp(&kb.1))
    });
}

/// One candidate at flow fidelity.
fn run_one(text: &str, file: &str) -> Outcome {
    let src = match frontend::load(
        Input::Text { text, name: file },
        &[],
        None,
        Some(Fidelity::Flow),
    ) {
        Ok(s) => s,
        Err(e) => return Outcome::Failed(e.to_string()),
    };
    let report = match crate::run_source(&src, 1, None) {
        Ok(r) => r,
        Err(e) => return Outcome::Failed(e.to_string()),
    };
    let Some(tr) = report.training.as_ref() else {
        return Outcome::Failed("the run has no training section".into());
    };
    let (Some(iteration_ps), Some(m)) = (tr.mean_iteration_ps.filter(|&p| p > 0), &tr.model) else {
        return Outcome::Failed("the iteration did not finish".into());
    };
    Outcome::Ran(Metrics {
        iteration_ps,
        tokens_per_s: m.tokens_per_s,
        tflops_per_gpu: m.tflops_per_gpu,
        mfu: m.mfu,
        exposed_comm: tr.overall.exposed_comm_ps as f64
            / tr.ranks.max(1) as f64
            / iteration_ps as f64,
    })
}

/// A strategy in a few words.
pub fn label(s: &Strategy) -> String {
    format!(
        "tp {} pp {} dp {} mb {} zero {} recompute {}{}",
        s.tp,
        s.pp,
        s.dp,
        s.micro_batch,
        s.zero,
        recompute_name(s.recompute),
        if s.sp { " sp" } else { "" }
    )
}

const GIB: f64 = (1u64 << 30) as f64;

/// The ranked table, one line per candidate.
pub fn table(r: &SearchResult) -> String {
    let mut out = format!(
        "{:>4} {:>3} {:>3} {:>4} {:>3} {:>4} {:>9} {:>3} {:>9} {:>4} {:>10} {:>12} {:>7} {:>6} {:>8} {:>6}\n",
        "rank", "tp", "pp", "dp", "mb", "zero", "recompute", "sp", "mem GiB", "fit",
        "iter ms", "tokens/s", "TFLOP/s", "MFU", "exposed", "by"
    );
    for (i, row) in r.rows.iter().enumerate() {
        let s = &row.strategy;
        let head = format!(
            "{:>4} {:>3} {:>3} {:>4} {:>3} {:>4} {:>9} {:>3} {:>9.1} {:>4}",
            i + 1,
            s.tp,
            s.pp,
            s.dp,
            s.micro_batch,
            s.zero,
            recompute_name(s.recompute),
            if s.sp { "on" } else { "off" },
            row.memory / GIB,
            if row.fits { "yes" } else { "NO" },
        );
        let figures = |m: &Metrics, by: &str| {
            format!(
                " {:>10.3} {:>12.0} {:>7.1} {:>6} {:>7.1}% {by:>6}",
                m.iteration_ps as f64 * 1e-9,
                m.tokens_per_s,
                m.tflops_per_gpu,
                m.mfu.map_or("-".into(), |u| format!("{:.1}%", u * 100.0)),
                m.exposed_comm * 100.0
            )
        };
        let tail = match &row.outcome {
            Outcome::Ran(m) => figures(m, "flow"),
            Outcome::Screened(m) => figures(m, "screen"),
            Outcome::DoesNotFit => "   does not fit the device: not run".into(),
            Outcome::Failed(e) => format!("   failed: {e}"),
        };
        out.push_str(&head);
        out.push_str(&tail);
        out.push('\n');
    }
    let ran = r
        .rows
        .iter()
        .filter(|x| matches!(x.outcome, Outcome::Ran(_)))
        .count();
    let nofit = r.rows.iter().filter(|x| !x.fits).count();
    out.push_str(&format!(
        "{} candidates screened in {:.1} s ({} collectives and messages measured at flow \
         fidelity)\n",
        r.screened,
        r.screen_wall.as_secs_f64(),
        r.measured
    ));
    if let Some((n, mean, max)) = r.screening_error() {
        out.push_str(&format!(
            "screening error against the full runs, over {n}: mean {:.2}%, max {:.2}% of the \
             iteration\n",
            mean * 100.0,
            max * 100.0
        ));
    }
    out.push_str(&format!(
        "{} strategies on {} hosts: {ran} run in full at flow fidelity in {:.1} s, {nofit} do \
         not fit{}, {} cannot be built\n",
        r.rows.len() + r.invalid.len(),
        r.hosts,
        r.wall.as_secs_f64(),
        if r.device_memory > 0 {
            format!(" {:.1} GiB", r.device_memory as f64 / GIB)
        } else {
            " (no device memory given: all taken to fit)".into()
        },
        r.invalid.len()
    ));
    out
}

/// The table as CSV: one row per candidate, ranked, then the ones that cannot be built.
pub fn csv(r: &SearchResult) -> Result<String, String> {
    let mut w = ::csv::Writer::from_writer(Vec::new());
    let e = |e: ::csv::Error| e.to_string();
    w.write_record([
        "rank",
        "tp",
        "pp",
        "dp",
        "micro_batch",
        "zero",
        "recompute",
        "sp",
        "memory_bytes",
        "peak_stage",
        "fits",
        "iteration_ps",
        "tokens_per_s",
        "tflops_per_gpu",
        "mfu",
        "exposed_comm",
        "fidelity",
        "screened_iteration_ps",
        "note",
    ])
    .map_err(e)?;
    let strategy = |s: &Strategy| {
        [
            s.tp.to_string(),
            s.pp.to_string(),
            s.dp.to_string(),
            s.micro_batch.to_string(),
            s.zero.to_string(),
            recompute_name(s.recompute).to_string(),
            s.sp.to_string(),
        ]
    };
    for (i, row) in r.rows.iter().enumerate() {
        let mut rec = vec![(i + 1).to_string()];
        rec.extend(strategy(&row.strategy));
        rec.push(format!("{:.0}", row.memory));
        rec.push(row.peak_stage.to_string());
        rec.push(row.fits.to_string());
        let screened = row
            .screen
            .map_or(String::new(), |m| m.iteration_ps.to_string());
        let figures = |m: &Metrics, by: &str| {
            [
                m.iteration_ps.to_string(),
                format!("{:.1}", m.tokens_per_s),
                format!("{:.3}", m.tflops_per_gpu),
                m.mfu.map_or(String::new(), |u| format!("{u:.4}")),
                format!("{:.4}", m.exposed_comm),
                by.to_string(),
                screened.clone(),
                String::new(),
            ]
        };
        match &row.outcome {
            Outcome::Ran(m) => rec.extend(figures(m, "flow")),
            Outcome::Screened(m) => rec.extend(figures(m, "screen")),
            Outcome::DoesNotFit => rec
                .extend(["", "", "", "", "", "", "", "does not fit the device"].map(String::from)),
            Outcome::Failed(why) => {
                rec.extend(["", "", "", "", "", ""].map(String::from));
                rec.push(screened.clone());
                rec.push(format!("failed: {why}"));
            }
        }
        w.write_record(&rec).map_err(e)?;
    }
    for (s, why) in &r.invalid {
        let mut rec = vec![String::new()];
        rec.extend(strategy(s));
        rec.extend(["", "", "", "", "", "", "", "", "", ""].map(String::from));
        rec.push(format!("cannot be built: {why}"));
        w.write_record(&rec).map_err(e)?;
    }
    let bytes = w.into_inner().map_err(|e| e.to_string())?;
    String::from_utf8(bytes).map_err(|e| e.to_string())
}

/// The best strategy's scenario, as YAML to run at packet level.
pub fn best_scenario(r: &SearchResult, from: &Path) -> Option<String> {
    let best = r.best()?;
    let (m, by) = match &best.outcome {
        Outcome::Ran(m) => (m, "at flow fidelity"),
        Outcome::Screened(m) => (m, "screened"),
        _ => return None,
    };
    Some(format!(
        "# Written by `fabemu search` from {}: the fastest of {} strategies,\n# {} \
         ({:.3} ms an iteration {by}, {:.1} GiB per GPU).\n# Run it at packet \
         level: fabemu run THIS_FILE --fidelity packet\n{}",
        from.display(),
        r.rows.len(),
        label(&best.strategy),
        m.iteration_ps as f64 * 1e-9,
        best.memory / GIB,
        best.text
    ))
}

/// Parses a `--recompute` value.
pub fn parse_recompute(s: &str) -> Result<RecomputeYaml, String> {
    match s {
        "none" => Ok(RecomputeYaml::None),
        "selective" => Ok(RecomputeYaml::Selective),
        "full" => Ok(RecomputeYaml::Full),
        _ => Err(format!("{s}: give none, selective or full")),
    }
}
