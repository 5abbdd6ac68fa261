//! The `fabemu` command line.
//!
//! Exit codes: 0 ok; 2 invalid input (scenario or arguments); 3 the run finished but an
//! invariant failed (a message never finished, data mismatch, a drop in a lossless fabric);
//! 1 anything else.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use fabemu::scenario::{self, QUICKSTART};
use fabemu::{run_source, RunError, Source};

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
    Run(RunArgs),
    /// Show the fabric a scenario (or an ASTRA-sim network file) builds: hosts, switches,
    /// links per dimension or tier, per-host bandwidth, diameter, bisection bandwidth.
    Topo(TopoArgs),
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
}

#[derive(clap::Args, Debug)]
struct RunArgs {
    /// The scenario (YAML).
    scenario: PathBuf,
    /// Worker threads; changes speed only, never results.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=256))]
    threads: u64,
    /// Override the scenario's seed.
    #[arg(long)]
    seed: Option<u64>,
    /// Write the JSON report to this file (`-` for stdout, instead of the summary).
    #[arg(long)]
    json: Option<PathBuf>,
    /// Print nothing but errors.
    #[arg(long)]
    quiet: bool,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // Logs go to stderr, off unless RUST_LOG asks (e.g. RUST_LOG=fabemu=info).
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
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
    let built = match (&args.astra_sim, &args.scenario) {
        (Some(file), _) => scenario::load_astra_file(file).and_then(|a| {
            let in_file = |e: fabemu_topologies::TopologyError| fabemu::ScenarioError {
                file: a.path.clone(),
                line: None,
                column: None,
                field: String::new(),
                message: e.to_string(),
            };
            let g = a.network.build().map_err(in_file)?;
            let r = fabemu_topologies::routes_for(&g).map_err(in_file)?;
            Ok((g, r))
        }),
        (None, Some(path)) => scenario::load_file(path).and_then(|src| fabemu::world::fabric(&src)),
        (None, None) => scenario::load_str(QUICKSTART, "<embedded quickstart>")
            .and_then(|src| fabemu::world::fabric(&src)),
    };
    let (g, routes) = match built {
        Ok(x) => x,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    match fabemu_topologies::summary::summarize(&g, &routes) {
        Ok(summary) => print!("{summary}"),
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    }
    if let Some(path) = &args.dot {
        if let Err(e) = std::fs::write(path, fabemu_topologies::summary::to_dot(&g)) {
            eprintln!("error: cannot write {}: {e}", path.display());
            return ExitCode::from(1);
        }
    }
    ExitCode::SUCCESS
}

fn real_main(cli: Cli) -> ExitCode {
    let args = match cli.command {
        Some(Command::Topo(t)) => return topo(t),
        Some(Command::Run(a)) => a,
        None => RunArgs {
            scenario: PathBuf::from("<embedded quickstart>"),
            threads: 1,
            seed: None,
            json: None,
            quiet: false,
        },
    };
    let loaded = if args.scenario.as_os_str() == "<embedded quickstart>" {
        scenario::load_str(QUICKSTART, "<embedded quickstart>")
    } else {
        scenario::load_file(&args.scenario)
    };
    let mut src: Source = match loaded {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    if let Some(seed) = args.seed {
        src.scenario.seed = seed;
    }
    let report = match run_source(&src, args.threads as usize, None) {
        Ok(r) => r,
        Err(RunError::Scenario(e)) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(1);
        }
    };
    let json_on_stdout = args.json.as_deref().is_some_and(|p| p.as_os_str() == "-");
    if !args.quiet && !json_on_stdout {
        print!("{}", fabemu::report::summary(&report));
    }
    if let Some(path) = &args.json {
        let json = match serde_json::to_string_pretty(&report) {
            Ok(j) => j,
            Err(e) => {
                eprintln!("error: cannot encode the report: {e}");
                return ExitCode::from(1);
            }
        };
        let written = if path.as_os_str() == "-" {
            writeln!(std::io::stdout(), "{json}")
        } else {
            std::fs::write(path, json + "\n")
        };
        if let Err(e) = written {
            eprintln!("error: cannot write {}: {e}", path.display());
            return ExitCode::from(1);
        }
    }
    if report.invariants.ok {
        ExitCode::SUCCESS
    } else {
        for v in &report.invariants.violations {
            eprintln!("invariant violated: {v}");
        }
        ExitCode::from(3)
    }
}
