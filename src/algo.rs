//! `fabemu algo`: algorithms outside a run. `fabemu algo export --msccl` writes a built-in
//! algorithm (flat layout) as MSCCL XML, which `algorithm: {msccl: FILE}` reads back to
//! programs with the same messages (see [`fabemu_collectives::msccl::export`]).

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
