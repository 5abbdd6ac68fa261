//! `fabemu algo`: algorithms outside a run. `fabemu algo export --msccl` writes a built-in
//! algorithm (flat layout) as MSCCL XML, which `algorithm: {msccl: FILE}` reads back to
//! programs with the same messages (see [`fabemu_collectives::msccl::export`]).
//! `fabemu algo show SCENARIO` prints the schedule synthesized for each `algorithm:
//! synthesized` collective of a scenario (see [`fabemu_collectives::synth`]) and its predicted
//! time, without running it.

use std::path::PathBuf;
use std::process::ExitCode;

use fabemu_collectives::msccl;
use fabemu_collectives::plan::{self, Algorithm, Layout, Plan};
use fabemu_collectives::Collective;

/// `fabemu algo ...`.
#[derive(clap::Args, Debug)]
pub struct AlgoArgs {
    /// What to do.
    #[command(subcommand)]
    pub command: AlgoCommand,
}

/// The `algo` subcommands.
#[derive(clap::Subcommand, Debug)]
pub enum AlgoCommand {
    /// Write a built-in algorithm as MSCCL XML (to stdout, or --output FILE).
    Export(ExportArgs),
    /// Print the synthesized schedules of a scenario's `algorithm: synthesized` collectives
    /// (every transfer, in order) and their predicted times.
    Show(ShowArgs),
}

/// `fabemu algo show`.
#[derive(clap::Args, Debug)]
pub struct ShowArgs {
    /// The scenario file.
    pub scenario: PathBuf,
    /// Only this workload collective (its index in `workload.collectives`, from 0).
    #[arg(long)]
    pub collective: Option<usize>,
    /// Print only the predicted times, not every transfer.
    #[arg(long)]
    pub summary: bool,
}

/// The listing `fabemu algo show` prints for `args`, or a message and the exit code (2 for
/// bad input).
pub fn show_text(args: &ShowArgs) -> Result<String, (String, u8)> {
    use std::fmt::Write as _;
    let src = crate::scenario::load_file(&args.scenario).map_err(|e| (e.to_string(), 2))?;
    let (g, _) = crate::world::fabric(&src).map_err(|e| (e.to_string(), 2))?;
    // Everything a run would check, with located errors.
    crate::collective::build_jobs(&src, &g).map_err(|e| (e.to_string(), 2))?;
    let entries = &src.scenario.workload.collectives;
    if let Some(i) = args.collective.filter(|&i| i >= entries.len()) {
        return Err((
            format!(
                "--collective {i}: the workload has {} collectives",
                entries.len()
            ),
            2,
        ));
    }
    let mut out = String::new();
    for (i, c) in entries.iter().enumerate() {
        if args.collective.is_some_and(|k| k != i)
            || !matches!(
                c.algorithm,
                Some(crate::scenario::AlgorithmYaml::Synthesized)
            )
        {
            continue;
        }
        for (size, s) in crate::collective::synth_schedules(&src, &g, i).map_err(|m| (m, 2))? {
            let t = s.predicted_ps(c.op);
            let bytes = size as f64;
            let algbw = if t > 0 {
                bytes / (t as f64 / 1e12) / 1e9
            } else {
                0.0
            };
            let _ = writeln!(
                out,
                "# collective {i}: {} synthesized, {} ranks, {} B, {} chunk(s) per rank of {} B, {} transfers per phase",
                c.op.key(),
                s.ranks,
                size,
                s.chunks_per_rank,
                s.chunk_bytes,
                s.transfers.len()
            );
            let _ = writeln!(
                out,
                "# predicted time {:.3} us, algbw {:.2} GB/s, busbw {:.2} GB/s (payload only: headers, ACKs and queueing not modelled)",
                t as f64 / 1e6,
                algbw,
                algbw * c.op.bus_factor(s.ranks)
            );
            if !args.summary {
                out.push_str(&s.describe(c.op));
            }
        }
    }
    if out.is_empty() {
        return Err((
            "no collective with `algorithm: synthesized` to show".to_string(),
            2,
        ));
    }
    Ok(out)
}

/// `fabemu algo export`.
#[derive(clap::Args, Debug)]
pub struct ExportArgs {
    /// Write MSCCL XML (the one format so far).
    #[arg(long, required = true)]
    pub msccl: bool,
    /// The collective: all_reduce, reduce_scatter, all_gather or all_to_all.
    #[arg(long, default_value = "all_reduce")]
    pub op: String,
    /// The built-in algorithm, as in a scenario (ring, direct, halving_doubling, ...).
    #[arg(long, default_value = "ring")]
    pub algorithm: String,
    /// Ranks (MSCCL's ngpus).
    #[arg(long)]
    pub ranks: usize,
    /// Pieces the buffer is cut into and pipelined, as a scenario's `chunks`.
    #[arg(long, default_value_t = 1)]
    pub chunks: usize,
    /// Write to this file instead of stdout.
    #[arg(long, short = 'o', value_name = "FILE")]
    pub output: Option<PathBuf>,
}

/// A scenario-style name (`all_reduce`, `ring`) as the enum serde reads it, or a message
/// listing what is accepted.
fn named<T: serde::de::DeserializeOwned>(what: &str, name: &str) -> Result<T, String> {
    serde_json::from_value(serde_json::Value::String(name.to_string()))
        .map_err(|e| format!("--{what} {name}: {e}"))
}

/// The XML for `args`, or a message for the user.
pub fn export_xml(args: &ExportArgs) -> Result<String, String> {
    let op: Collective = named("op", &args.op)?;
    let algorithm: Algorithm = named("algorithm", &args.algorithm)?;
    if args.ranks == 0 || args.ranks > 4096 {
        return Err(format!("--ranks {}: give 1 to 4096 ranks", args.ranks));
    }
    if args.chunks == 0 || args.chunks > 64 {
        return Err(format!("--chunks {}: give 1 to 64 chunks", args.chunks));
    }
    // A size every built-in block and tree piece divides, so the chunk comes out as the
    // algorithm's own unit (the export takes the largest chunk all ranges are made of).
    let count = args.ranks * args.chunks * 2 * plan::TREE_PIECES;
    let p = Plan {
        op,
        ranks: args.ranks,
        count,
        root: 0,
        layout: Layout::Flat(algorithm),
        chunks: args.chunks,
        chunks_in_flight: 0,
    };
    let programs = plan::compile(&p).map_err(|e| e.to_string())?;
    let name = format!(
        "fabemu_{}_{}_{}ranks",
        op.key(),
        algorithm.key(),
        args.ranks
    );
    msccl::export(op, count, &programs, &name).map_err(|e| e.to_string())
}

/// Runs `fabemu algo`: exit 0, or 2 with a message for bad arguments, 1 if the file cannot
/// be written.
pub fn main(args: AlgoArgs) -> ExitCode {
    match args.command {
        AlgoCommand::Show(a) => match show_text(&a) {
            Ok(text) => {
                print!("{text}");
                ExitCode::SUCCESS
            }
            Err((m, code)) => {
                eprintln!("error: {m}");
                ExitCode::from(code)
            }
        },
        AlgoCommand::Export(e) => {
            let xml = match export_xml(&e) {
                Ok(x) => x,
                Err(m) => {
                    eprintln!("error: {m}");
                    return ExitCode::from(2);
                }
            };
            match &e.output {
                Some(path) => {
                    if let Err(err) = std::fs::write(path, xml) {
                        eprintln!("error: cannot write {}: {err}", path.display());
                        return ExitCode::from(1);
                    }
                }
                None => print!("{xml}"),
            }
            ExitCode::SUCCESS
        }
    }
}
