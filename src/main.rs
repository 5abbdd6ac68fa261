//! The `fabemu` command line.
//!
//! Exit codes: 0 ok; 2 invalid input (scenario or arguments); 3 the run finished but an
//! invariant failed (a message never finished, data mismatch, a drop in a lossless fabric);
//! 130 stopped by Ctrl-C (the partial report is written); 1 anything else.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use fabemu::frontend::{self, Input, TopoInput};
use fabemu::observe::{self, progress::Watcher, ObserveError, ObserveOptions};
use fabemu::scenario;
use fabemu::{run_observed, RunError, Source};
use fabemu_fabric::engine::Progress;
use fabemu_fabric::units::{ByteSize, Time};

/// Packet-level emulator of ML training-cluster networks.
///
/// With no arguments, runs the embedded quickstart scenario (examples/quickstart.yaml).
#[derive(Parser, Debug)]
#[command(name = "fabemu", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run a scenario file and print a summary (and a JSON report with --json).
    ///
    /// Over MPI ranks (a build with `--features mpi`): `mpirun -np N fabemu run SCENARIO
    /// --json report.json` spreads one run over N processes (each with --threads threads),
    /// whole pods, leaves or torus slices per rank, and rank 0 writes the report of the same
    /// run on one thread, plus an `mpi` section (placement, windows, frames crossing ranks).
    Run(RunArgs),
    /// Show the fabric a scenario (or an ASTRA-sim network file) builds: hosts, switches,
    /// links per dimension or tier, per-host bandwidth, diameter, bisection bandwidth.
    Topo(TopoArgs),
    /// Algorithms outside a run: `algo export --msccl` writes a built-in one as MSCCL XML.
    Algo(fabemu::algo::AlgoArgs),
    /// Runs real programs on the emulated fabric: every host gets a Linux network namespace
    /// (named `fabemu-<pid>-h<rank>`) with one interface, `eth0`, carrying its address;
    /// frames cross the emulated switches in real time. Needs root (CAP_NET_ADMIN). Namespaces
    /// a killed run left behind (prefix `fabemu-`, owner gone) are removed at the start.
    Emulate(EmulateArgs),
    /// Ranks parallel strategies for the scenario's `workload.training.model` on its fabric:
    /// every combination of the values given (--tp 1,2,4 --pp 1,2 ...) whose degrees fit the
    /// hosts and the model, its memory per GPU against the device's, one iteration of each
    /// that fits at flow fidelity on all cores; prints the ranked table.
    Search(SearchArgs),
}

#[derive(clap::Args, Debug)]
struct SearchArgs {
    /// The scenario: the fabric, `workload.training` with a `model`, and `workload.device`.
    scenario: PathBuf,
    /// Tensor-parallel degrees to try, e.g. 1,2,4,8 (default: the scenario's).
    #[arg(long, value_delimiter = ',', value_name = "N,...")]
    tp: Vec<u64>,
    /// Pipeline-parallel degrees to try (default: the scenario's).
    #[arg(long, value_delimiter = ',', value_name = "N,...")]
    pp: Vec<u64>,
    /// Data-parallel degrees to try (default: what the hosts leave, hosts / (tp x pp x ep)).
    #[arg(long, value_delimiter = ',', value_name = "N,...")]
    dp: Vec<u64>,
    /// Micro-batch sizes (sequences) to try (default: the model's).
    #[arg(long, value_delimiter = ',', value_name = "N,...")]
    micro_batch: Vec<u64>,
    /// ZeRO stages to try, 0 to 3 (default: the scenario's).
    #[arg(long, value_delimiter = ',', value_name = "N,...")]
    zero: Vec<u8>,
    /// Recomputation to try: none, selective, full (default: the scenario's).
    #[arg(long, value_delimiter = ',', value_name = "KIND,...", value_parser = fabemu::search::parse_recompute)]
    recompute: Vec<fabemu::scenario::RecomputeYaml>,
    /// Sequence parallelism to try: false, true (default: the scenario's).
    #[arg(long, value_delimiter = ',', value_name = "BOOL,...")]
    sp: Vec<bool>,
    /// Override a scenario field before the search, as with `fabemu run` (repeatable).
    #[arg(long = "set", value_name = "PATH=VALUE")]
    set: Vec<String>,
    /// Runs at once (default: every CPU this process may use).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=256))]
    threads: Option<u64>,
    /// Also write the table as CSV to this file (`-`: stdout, instead of the table).
    #[arg(long, value_name = "FILE")]
    csv: Option<PathBuf>,
    /// Write the best strategy's scenario to this file (to run at packet level).
    #[arg(long, value_name = "FILE")]
    write_best: Option<PathBuf>,
    /// Screen every candidate (its iteration composed from collectives measured once on the
    /// fabric), then run this many of the best in full at flow fidelity.
    #[arg(long, default_value_t = 10, value_name = "K")]
    top: usize,
    /// Print nothing but errors (and show no progress).
    #[arg(long)]
    quiet: bool,
}

#[derive(clap::Args, Debug)]
struct EmulateArgs {
    /// The scenario (its `workload` is optional: built-in traffic shares the fabric).
    scenario: PathBuf,
    /// Virtual time per wall time: 1 is real time, 0.1 runs the fabric ten times slower than
    /// its figures (so a busy fabric keeps up).
    #[arg(long, default_value_t = 1.0)]
    time_scale: f64,
    /// Bytes each host's queue toward the fabric holds (frames beyond it are dropped).
    #[arg(long, value_name = "SIZE", default_value = "1MiB")]
    host_queue: ByteSize,
    /// MASTER_PORT given to the ranks.
    #[arg(long, default_value_t = 29500)]
    master_port: u16,
    /// A sysctl set in every namespace before the programs start, e.g. net.ipv4.tcp_ecn=1.
    #[arg(long, value_name = "KEY=VALUE")]
    sysctl: Vec<String>,
    /// Writes an MPI hostfile and rsh agent into DIR (mpirun --hostfile DIR/hostfile --mca
    /// plm_rsh_agent DIR/rsh-agent, run inside rank 0's namespace).
    #[arg(long, value_name = "DIR")]
    mpi: Option<PathBuf>,
    /// Changes a scenario field before the run (as `run --set`).
    #[arg(long = "set", value_name = "PATH=VALUE")]
    set: Vec<String>,
    /// Writes the JSON report to PATH (`-`: stdout).
    #[arg(long)]
    json: Option<PathBuf>,
    /// Prints no summary.
    #[arg(long)]
    quiet: bool,
    /// Writes the report, summary, series and plots into DIR.
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// Captures the frames on the host links (real TCP/UDP included) into a pcap or pcapng.
    #[arg(long, value_name = "PATH")]
    pcap: Option<PathBuf>,
    /// The command to start once per host in its namespace, with RANK, WORLD_SIZE,
    /// LOCAL_RANK, MASTER_ADDR, MASTER_PORT and FABEMU_HOST set as torchrun sets them.
    /// Without it, the namespaces stay up until Ctrl-C.
    #[arg(last = true, value_name = "CMD")]
    command: Vec<String>,
}

#[derive(clap::Args, Debug)]
#[command(group(clap::ArgGroup::new("input").required(true).args(["scenario", "astra_sim"])))]
struct TopoArgs {
    /// The scenario (YAML).
    scenario: Option<PathBuf>,
    /// An ASTRA-sim network file instead of a scenario.
    #[arg(long, value_name = "FILE")]
    astra_sim: Option<PathBuf>,
    /// Also write the fabric as a Graphviz graph to this file.
    #[arg(long, value_name = "PATH")]
    dot: Option<PathBuf>,
    /// Also list every link by the names of its ends, as `faults:` addresses them.
    #[arg(long)]
    links: bool,
    /// Override a scenario field, as with `fabemu run` (repeatable).
    #[arg(long = "set", value_name = "PATH=VALUE", conflicts_with = "astra_sim")]
    set: Vec<String>,
}

/// `--fidelity` values.
#[derive(clap::ValueEnum, Clone, Copy, Debug)]
enum FidelityArg {
    /// Every packet through NICs and switches.
    Packet,
    /// Messages as fluid flows.
    Flow,
}

/// `--mpi-placement` values.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum PlacementArg {
    /// Whole groups of the fabric per rank (pods, leaves with their hosts, torus slices).
    Groups,
    /// The engine's partition plan cut into blocks of partitions (neighbours tend to share a
    /// rank); what fabrics without groups get.
    Engine,
}

#[derive(clap::Args, Debug)]
struct RunArgs {
    /// The scenario (YAML).
    scenario: PathBuf,
    /// Worker threads; changes speed only, never results. At most the CPUs this process may
    /// use (affinity mask, cgroup quota): more are reduced to those, with a warning.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=256))]
    threads: u64,
    /// Override the scenario's seed.
    #[arg(long)]
    seed: Option<u64>,
    /// Override the scenario's fidelity: `packet` (every frame) or `flow` (messages as
    /// max-min fair flows, for cluster scale).
    #[arg(long, value_name = "packet|flow")]
    fidelity: Option<FidelityArg>,
    /// Override a scenario field, with a YAML value: `--set nic.cc=dcqcn`, `--set
    /// workload.collectives[0].size=64MiB` (repeatable; applied in order, before validation).
    #[arg(long = "set", value_name = "PATH=VALUE")]
    set: Vec<String>,
    /// Write the JSON report to this file (`-` for stdout, instead of the summary).
    #[arg(long)]
    json: Option<PathBuf>,
    /// Print nothing but errors (and show no progress).
    #[arg(long)]
    quiet: bool,
    /// Write report.json, summary.txt, time series (CSV) and plots (PNG, SVG) into this
    /// directory (created if missing).
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// Write the frames seen on the captured ports to this file (Wireshark, tshark): pcapng
    /// when it ends in .pcapng (each frame's port and direction, picosecond times), else a
    /// classic pcap.
    #[arg(long, value_name = "PATH")]
    pcap: Option<PathBuf>,
    /// Ports to capture: comma-separated host or switch names (all their ports) or NAME:PORT;
    /// default every host's NIC ports. Without --pcap, writes DIR/capture.pcap (needs --out).
    #[arg(long, value_name = "NAMES")]
    capture: Option<String>,
    /// Interval of the time series, e.g. 1us (default: a power of ten giving 200 to 2000
    /// points over the run).
    #[arg(long, value_name = "TIME")]
    sample_interval: Option<Time>,
    /// Capture at most this many frames (the first ones).
    #[arg(long, value_name = "N", default_value_t = 1_000_000)]
    pcap_max_packets: u64,
    /// Capture at most this many bytes (the first frames), e.g. 256MiB.
    #[arg(long, value_name = "SIZE", default_value = "256MiB")]
    pcap_max_bytes: ByteSize,
    /// Spread the run over the MPI ranks of the job (implied under `mpirun -np N`, N > 1, or
    /// any N in a build with MPI support): `mpirun -np 4 fabemu run SCENARIO` gives the
    /// report of `--threads 1` (plus an `mpi` section), each rank running whole groups of the
    /// fabric (fat-tree pods, leaves with their hosts, slices of a torus's last dimension) on
    /// `--threads` threads. Needs a build with `--features mpi`; --out, --pcap and
    /// --sample-interval write the files of `--threads 1`. See docs/MPI.md.
    #[arg(long)]
    mpi: bool,
    /// Over MPI ranks, which actors share a rank (the report's `mpi.placement`).
    #[arg(long, value_enum, value_name = "HOW", default_value = "groups")]
    mpi_placement: PlacementArg,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // Logs go to stderr, off unless RUST_LOG asks (e.g. RUST_LOG=fabemu=info).
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        // Colour codes only for a terminal: in a file or a pipe they are noise.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .try_init();
    match std::panic::catch_unwind(|| real_main(cli)) {
        Ok(code) => code,
        Err(_) => {
            eprintln!("fabemu: internal error (a bug; please report it with the scenario)");
            ExitCode::from(1)
        }
    }
}

fn topo(args: TopoArgs) -> ExitCode {
    let input = match (&args.astra_sim, &args.scenario) {
        (Some(file), _) => TopoInput::AstraSim(file),
        (None, Some(path)) => TopoInput::Scenario(Input::File(path), &args.set),
        (None, None) => TopoInput::Scenario(Input::Quickstart, &args.set),
    };
    let t = match frontend::topology(input) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    for w in &t.warnings {
        eprintln!("warning: {w}");
    }
    print!("{}", t.summary);
    if args.links {
        print!("{}", t.links_text());
    }
    if let Some(path) = &args.dot {
        if let Err(e) = std::fs::write(path, t.dot()) {
            eprintln!("error: cannot write {}: {e}", path.display());
            return ExitCode::from(1);
        }
    }
    ExitCode::SUCCESS
}

/// Warns about the keys of an ASTRA-sim network file that are ignored (a misspelt key is one).
fn warn_astra(a: Option<&scenario::AstraFile>) {
    for w in a.iter().flat_map(|a| &a.warnings) {
        eprintln!("warning: {w}");
    }
}

fn real_main(cli: Cli) -> ExitCode {
    let args = match cli.command {
        Some(Command::Topo(t)) => return topo(t),
        Some(Command::Algo(a)) => return fabemu::algo::main(a),
        Some(Command::Emulate(e)) => return emulate(e),
        Some(Command::Search(s)) => return search(s),
        Some(Command::Run(a)) => a,
        None => RunArgs {
            scenario: PathBuf::from(frontend::QUICKSTART_NAME),
            threads: 1,
            seed: None,
            fidelity: None,
            set: Vec::new(),
            json: None,
            quiet: false,
            out: None,
            pcap: None,
            capture: None,
            sample_interval: None,
            pcap_max_packets: 1_000_000,
            pcap_max_bytes: ByteSize(256 << 20),
            mpi: false,
            mpi_placement: PlacementArg::Groups,
        },
    };
    let code = run(&args).unwrap_or_else(|code| code);
    // After the outputs: see `mpi_run::finalize`.
    fabemu::mpi_run::finalize();
    code
}

/// `fabemu run`: the exit code, `Err` when a step ended it early.
fn run(args: &RunArgs) -> Result<ExitCode, ExitCode> {
    let opts = observe_options(args)?;
    let src = load_scenario(args)?;
    let Some(observed) = run_scenario(args, &src, &opts)? else {
        // Another rank than 0: rank 0 writes everything.
        return Ok(ExitCode::SUCCESS);
    };
    warn_about_run(args, &observed);
    if write_all_outputs(args, &opts, &observed)? {
        return Ok(ExitCode::from(1));
    }
    Ok(run_exit_code(&observed))
}

/// The outputs `run` was asked for, checked before the run, which can take long: a typo in an
/// output path must not cost its results.
fn observe_options(args: &RunArgs) -> Result<ObserveOptions, ExitCode> {
    if args.capture.is_some() && args.pcap.is_none() && args.out.is_none() {
        eprintln!("error: --capture needs --pcap PATH or --out DIR to write the capture to");
        return Err(ExitCode::from(2));
    }
    if args.sample_interval.is_some_and(|t| t == Time::ZERO) {
        eprintln!("error: --sample-interval must be longer than 0");
        return Err(ExitCode::from(2));
    }
    let opts = ObserveOptions {
        out_dir: args.out.clone(),
        pcap: args.pcap.clone(),
        capture: args.capture.clone(),
        sample_interval: args.sample_interval,
        pcap_max_packets: args.pcap_max_packets,
        pcap_max_bytes: args.pcap_max_bytes.bytes(),
    };
    // Under mpirun only rank 0 writes, and only it probes the paths (the ranks would race on
    // the probe files).
    let writes = fabemu::mpi_run::launched_rank().is_none_or(|(rank, _)| rank == 0);
    if writes {
        if let Err(e) = observe::check_output_paths(&opts, args.json.as_deref()) {
            eprintln!("error: {e}");
            return Err(ExitCode::from(2));
        }
    }
    Ok(opts)
}

/// The scenario `run` was given, with its overrides, seed and fidelity; its warnings printed.
fn load_scenario(args: &RunArgs) -> Result<Source, ExitCode> {
    let input = if args.scenario.as_os_str() == frontend::QUICKSTART_NAME {
        Input::Quickstart
    } else {
        Input::File(&args.scenario)
    };
    let fidelity = args.fidelity.map(|f| match f {
        FidelityArg::Packet => scenario::Fidelity::Packet,
        FidelityArg::Flow => scenario::Fidelity::Flow,
    });
    let src: Source = match frontend::load(input, &args.set, args.seed, fidelity) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {e}");
            return Err(ExitCode::from(2));
        }
    };
    warn_astra(src.astra.as_ref());
    for w in src.system.iter().flat_map(|s| &s.warnings) {
        eprintln!("warning: {w}");
    }
    Ok(src)
}

/// Runs the scenario, in this process or over MPI ranks, with progress shown and Ctrl-C
/// caught: the observed run (`None` on ranks other than 0).
fn run_scenario(
    args: &RunArgs,
    src: &Source,
    opts: &ObserveOptions,
) -> Result<Option<fabemu::observe::Observed>, ExitCode> {
    let (threads, warning) = frontend::usable_threads(args.threads as usize);
    if let Some(w) = warning {
        eprintln!("warning: {w}");
    }
    let progress = std::sync::Arc::new(Progress::default());
    let launched = fabemu::mpi_run::launched_rank();
    stop_on_ctrl_c(&progress, launched.is_none_or(|(rank, _)| rank == 0));
    // The end is known only when the scenario sets `until` (not a default).
    let end = src.scenario.until;
    let over_mpi = args.mpi || launched.is_some_and(|(_, size)| size > 1) || mpi_build(launched);
    if over_mpi {
        if let Some(why) =
            fabemu::mpi_run::refused(src.scenario.fidelity == scenario::Fidelity::Flow)
        {
            eprintln!("error: {why}");
            return Err(ExitCode::from(2));
        }
    }
    // Under mpirun only rank 0 shows progress (and writes the outputs).
    let quiet = args.quiet || launched.is_some_and(|(rank, _)| rank > 0);
    let watcher = Watcher::start(progress.clone(), end, quiet);
    let result = if over_mpi {
        let by_groups = args.mpi_placement == PlacementArg::Groups;
        run_over_ranks(src, threads, opts, by_groups, &progress)
    } else {
        run_observed(src, threads, opts, Some(&progress)).map(Some)
    };
    drop(watcher);
    match result {
        Ok(r) => Ok(r),
        Err(RunError::Scenario(e)) => {
            eprintln!("error: {e}");
            Err(ExitCode::from(2))
        }
        Err(RunError::Observe(e @ ObserveError::BadOption(_))) => {
            eprintln!("error: {e}");
            Err(ExitCode::from(2))
        }
        Err(e) => {
            eprintln!("error: {e}");
            Err(ExitCode::from(1))
        }
    }
}

/// Warns of a coarser sampling than asked and of the flow model's limits.
fn warn_about_run(args: &RunArgs, observed: &fabemu::observe::Observed) {
    if let (Some(asked), Some(s)) = (args.sample_interval, &observed.samples) {
        if s.interval != asked {
            eprintln!(
                "warning: --sample-interval {asked} would need more than {} rows over this \
                 run (or {} values per table on this fabric): the series are sampled every {} \
                 instead",
                observe::MAX_BUCKETS,
                observe::MAX_CELLS,
                s.interval
            );
        }
    }
    for w in fabemu::flow::warnings(&observed.report.flow_limits) {
        eprintln!("warning: {w}");
    }
}

/// Writes the summary, the files asked for and the JSON report: true when one failed. A run
/// stopped by Ctrl-C still writes everything it can: the partial results are often what the
/// user wanted to look at.
fn write_all_outputs(
    args: &RunArgs,
    opts: &ObserveOptions,
    observed: &fabemu::observe::Observed,
) -> Result<bool, ExitCode> {
    let report = &observed.report;
    let summary = fabemu::report::summary(report);
    // Every output is tried: one that fails is named, the others are still written.
    let mut failed = false;
    for e in observe::write_outputs(observed, opts, &summary) {
        eprintln!("error: {e}");
        failed = true;
    }
    if let Some(c) = observed.capture.as_ref().filter(|c| c.dropped > 0) {
        eprintln!(
            "warning: capture cap reached: {} of {} frames written (--pcap-max-packets, --pcap-max-bytes)",
            c.frames.len(),
            c.seen
        );
    }
    let json_on_stdout = args.json.as_deref().is_some_and(|p| p.as_os_str() == "-");
    if !args.quiet && !json_on_stdout {
        print!("{summary}");
    }
    if let Some(path) = &args.json {
        let json = match serde_json::to_string_pretty(report) {
            Ok(j) => j,
            Err(e) => {
                eprintln!("error: cannot encode the report: {e}");
                return Err(ExitCode::from(1));
            }
        };
        let written = if path.as_os_str() == "-" {
            writeln!(std::io::stdout(), "{json}").map_err(|e| e.to_string())
        } else {
            observe::write_whole(path, |p| {
                std::fs::write(p, json + "\n").map_err(|source| ObserveError::Io {
                    path: path.clone(),
                    source,
                })
            })
            .map_err(|e| e.to_string())
        };
        if let Err(e) = written {
            eprintln!("error: cannot write the JSON report: {e}");
            failed = true;
        }
    }
    Ok(failed)
}

/// The exit code of a run whose outputs were written: 130 when Ctrl-C stopped it, 3 when an
/// invariant was violated (each named), else success.
fn run_exit_code(observed: &fabemu::observe::Observed) -> ExitCode {
    let report = &observed.report;
    if report.interrupted {
        eprintln!(
            "interrupted at simulated time {}: the report covers the run up to there",
            observed.finished.output.stats.end_time
        );
        ExitCode::from(130)
    } else if report.invariants.ok {
        ExitCode::SUCCESS
    } else {
        for v in &report.invariants.violations {
            eprintln!("invariant violated: {v}");
        }
        ExitCode::from(3)
    }
}

/// True in a build with MPI support started by `mpirun` (even with one rank): the run then goes
/// over MPI ranks.
fn mpi_build(launched: Option<(usize, usize)>) -> bool {
    cfg!(feature = "mpi") && launched.is_some()
}

/// The run over the MPI ranks of the job this process belongs to: rank 0 gets the observed
/// run, the others `None`.
#[cfg(feature = "mpi")]
fn run_over_ranks(
    src: &Source,
    threads: usize,
    opts: &ObserveOptions,
    by_groups: bool,
    progress: &Progress,
) -> Result<Option<fabemu::observe::Observed>, RunError> {
    fabemu::mpi_run::run(src, threads, opts, by_groups, Some(progress))
}

/// Without MPI support, a run under `mpirun` with more than one rank (or `--mpi`) is refused.
#[cfg(not(feature = "mpi"))]
fn run_over_ranks(
    _: &Source,
    _: usize,
    _: &ObserveOptions,
    _: bool,
    _: &Progress,
) -> Result<Option<fabemu::observe::Observed>, RunError> {
    Err(RunError::Observe(ObserveError::BadOption(
        "this fabemu was built without MPI support: build it with `cargo build --release \
         --features mpi` (needs OpenMPI) to run over MPI ranks"
            .into(),
    )))
}

/// Makes Ctrl-C (SIGINT) stop the run cleanly: the first asks the engine to stop
/// (all workers stop at the same window boundary, the partial report is written, exit 130); a
/// second one removes the outputs being written and exits at once. Without a handler the process would die without writing anything.
/// In a build with MPI support SIGTERM does the same (`mpirun` sends it to the ranks on
/// Ctrl-C; a cancel on any rank stops all at the same window, and rank 0 writes the report);
/// `tell` is false on the ranks other than 0, which say nothing.
fn stop_on_ctrl_c(progress: &std::sync::Arc<Progress>, tell: bool) {
    let progress = progress.clone();
    let presses = std::sync::atomic::AtomicU32::new(0);
    let installed = ctrlc::set_handler(move || {
        if presses.fetch_add(1, std::sync::atomic::Ordering::Relaxed) == 0 {
            progress
                .cancel
                .store(true, std::sync::atomic::Ordering::Relaxed);
            if tell {
                eprintln!("\nstopping: writing the partial report (Ctrl-C again to quit at once)");
            }
        } else {
            // Nothing half written may stay behind looking finished.
            observe::remove_partial();
            std::process::exit(130);
        }
    });
    if let Err(e) = installed {
        tracing::warn!("Ctrl-C will end the run without a report: {e}");
    }
}

fn search(args: SearchArgs) -> ExitCode {
    use fabemu::search::{self, SearchError, Space};
    let space = Space {
        tp: args.tp.clone(),
        pp: args.pp.clone(),
        dp: args.dp.clone(),
        micro_batch: args.micro_batch.clone(),
        zero: args.zero.clone(),
        recompute: args.recompute.clone(),
        sp: args.sp.clone(),
    };
    let asked = args.threads.map_or_else(
        || std::thread::available_parallelism().map_or(1, |n| n.get()),
        |t| t as usize,
    );
    let (threads, warning) = frontend::usable_threads(asked);
    if let Some(w) = warning {
        eprintln!("warning: {w}");
    }
    let bar = if args.quiet {
        indicatif::ProgressBar::hidden()
    } else {
        indicatif::ProgressBar::with_draw_target(None, indicatif::ProgressDrawTarget::stderr())
    };
    if let Ok(style) = indicatif::ProgressStyle::with_template(
        "{bar:40} {pos}/{len} screenings and runs, {elapsed} (ETA {eta})",
    ) {
        bar.set_style(style);
    }
    let result = search::search(
        &args.scenario,
        &args.set,
        &space,
        threads,
        args.top,
        &|n| bar.set_length(n as u64),
        &|| bar.inc(1),
    );
    bar.finish_and_clear();
    let r = match result {
        Ok(r) => r,
        Err(e @ (SearchError::Scenario(_) | SearchError::Empty(_))) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let csv_on_stdout = args.csv.as_deref().is_some_and(|p| p.as_os_str() == "-");
    if !args.quiet && !csv_on_stdout {
        print!("{}", search::table(&r));
    }
    let mut failed = false;
    if let Some(path) = &args.csv {
        let written = search::csv(&r).and_then(|text| {
            if csv_on_stdout {
                write!(std::io::stdout(), "{text}").map_err(|e| e.to_string())
            } else {
                std::fs::write(path, text).map_err(|e| e.to_string())
            }
        });
        if let Err(e) = written {
            eprintln!("error: cannot write {}: {e}", path.display());
            failed = true;
        }
    }
    if let Some(path) = &args.write_best {
        match search::best_scenario(&r, &args.scenario) {
            Some(text) => {
                if let Err(e) = std::fs::write(path, text) {
                    eprintln!("error: cannot write {}: {e}", path.display());
                    failed = true;
                }
            }
            None => {
                eprintln!(
                    "error: no strategy ran, so none is best: nothing written to {}",
                    path.display()
                );
                failed = true;
            }
        }
    }
    if failed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

fn emulate(args: EmulateArgs) -> ExitCode {
    use fabemu::emulate::run::{emulate, EmulateOptions};
    if !(args.time_scale > 0.0 && args.time_scale.is_finite()) {
        eprintln!("error: --time-scale must be a positive number");
        return ExitCode::from(2);
    }
    let mut sysctls = Vec::new();
    for s in &args.sysctl {
        match s.split_once('=') {
            Some((k, v)) if !k.is_empty() => sysctls.push((k.to_string(), v.to_string())),
            _ => {
                eprintln!("error: --sysctl {s}: expected KEY=VALUE");
                return ExitCode::from(2);
            }
        }
    }
    let opts = ObserveOptions {
        out_dir: args.out.clone(),
        pcap: args.pcap.clone(),
        capture: None,
        sample_interval: None,
        pcap_max_packets: 1_000_000,
        pcap_max_bytes: 256 << 20,
    };
    if let Err(e) = observe::check_output_paths(&opts, args.json.as_deref()) {
        eprintln!("error: {e}");
        return ExitCode::from(2);
    }
    let loaded = args
        .set
        .iter()
        .map(|s| scenario::Override::parse(s))
        .collect::<Result<Vec<_>, _>>()
        .and_then(|o| fabemu::emulate::load_file(&args.scenario, o));
    let src = match loaded {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    // Captured: every host's link (the real traffic enters and leaves there).
    let capture = match opts.pcap_path() {
        Some(_) => match fabemu::world::fabric(&src)
            .map_err(|e| e.to_string())
            .and_then(|(g, _)| observe::select::resolve(&g, None).map_err(|e| e.to_string()))
        {
            Ok(ports) => Some(fabemu_fabric::engine::CaptureConfig {
                ports,
                max_packets: opts.pcap_max_packets,
                max_bytes: opts.pcap_max_bytes,
            }),
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::from(2);
            }
        },
        None => None,
    };
    let eo = EmulateOptions {
        time_scale: args.time_scale,
        host_queue: args.host_queue.bytes(),
        command: args.command.clone(),
        master_port: args.master_port,
        sysctls,
        mpi_dir: args.mpi.clone(),
        capture,
        // An emulated fabric is small (a namespace per host): the bucket limit alone bounds it.
        sample: opts.sample_config(0),
    };
    let outcome = match emulate(&src, &eo) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(e.exit_code());
        }
    };
    for name in &outcome.removed_stale {
        eprintln!("removed namespace {name}, left by a run that was killed");
    }
    let observed = &outcome.observed;
    let summary = fabemu::report::summary(&observed.report);
    let mut failed = false;
    for e in observe::write_outputs(observed, &opts, &summary) {
        eprintln!("error: {e}");
        failed = true;
    }
    if failed {
        return ExitCode::from(1);
    }
    if !args.quiet && args.json.as_deref().is_none_or(|p| p.as_os_str() != "-") {
        print!("{summary}");
    }
    if let Some(path) = &args.json {
        let written = serde_json::to_string_pretty(&observed.report)
            .map_err(|e| e.to_string())
            .and_then(|json| {
                if path.as_os_str() == "-" {
                    writeln!(std::io::stdout(), "{json}").map_err(|e| e.to_string())
                } else {
                    std::fs::write(path, json + "\n").map_err(|e| e.to_string())
                }
            });
        if let Err(e) = written {
            eprintln!("error: cannot write {}: {e}", path.display());
            return ExitCode::from(1);
        }
    }
    if let Some(emu) = &observed.report.emulation {
        if let Some(w) = fabemu::emulate::lateness_warning(emu) {
            eprintln!("warning: {w}");
        }
    }
    if outcome.interrupted {
        return ExitCode::from(130);
    }
    // The first rank that failed decides the exit status.
    for e in &outcome.exits {
        if !e.status.success() {
            let code = e.status.code().map_or(1, |c| u8::try_from(c).unwrap_or(1));
            eprintln!("rank {} exited with {}", e.rank, e.status);
            return ExitCode::from(code.max(1));
        }
    }
    if !observed.report.invariants.ok {
        for v in &observed.report.invariants.violations {
            eprintln!("invariant violated: {v}");
        }
        return ExitCode::from(3);
    }
    ExitCode::SUCCESS
}
