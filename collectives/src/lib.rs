//! # fabemu-collectives
//!
//! Collective operations as fabemu runs them: an algorithm (ring, direct, ...) is compiled into
//! one small **program per rank**, a DAG of send / receive(-reduce) / copy steps over chunks of
//! the rank's buffer. Hosts will execute these programs on their queue pairs; before that, the
//! reference interpreter runs them in memory to prove that an algorithm computes the right thing
//! independently of the network.
//!
//! - [`op`]: the collectives and their nccl-tests bus-bandwidth factors.
//! - [`metrics`]: nccl-tests algorithm and bus bandwidth.
//! - [`chunk`]: element ranges of a buffer and the even split of a buffer into chunks.
//! - [`program`]: the program IR (the seam for custom algorithms), a builder that derives
//!   dependencies from data hazards, and [`program::validate`].
//! - [`algorithms`]: the original stand-alone generators (ring Reduce-Scatter / All-Gather /
//!   All-Reduce, direct All-To-All) and [`AlgorithmError`].
//! - [`msccl`]: MSCCL XML algorithms read into programs (checked by running them in memory),
//!   and built-in programs written out as MSCCL XML.
//! - [`synth`]: TACOS-style synthesized All-Gather / Reduce-Scatter / All-Reduce for any
//!   fabric (a greedy matching of chunks to links over time).
//! - [`interpret`]: the reference interpreter [`interpret::run_local`].
//! - [`executor`]: runs the programs on the hosts' NICs ([`executor::CollectiveRunner`]).
//! - [`data`]: element types, reduction operators, the known inputs and the `#wrong` check.
//! - [`plan`]: the one entry point, [`plan::compile`] of a [`plan::Plan`]; built from private
//!   modules: `phases` (ring / direct / halving-doubling / tree phases over a group of ranks),
//!   `all_to_all` (direct and ring) and `hierarchical` (multi-dimensional schemes, Themis
//!   ordering), each documenting its algorithms, over `emit` (all ranks' builders, step
//!   budget, chunk gating) and `segs` (non-contiguous blocks).
#![warn(missing_docs, unreachable_pub)]

pub mod algorithms;
mod all_to_all;
pub mod chunk;
pub mod data;
mod emit;
pub mod executor;
mod hazards;
mod hierarchical;
pub mod interpret;
pub mod metrics;
pub mod msccl;
pub mod op;
mod phases;
pub mod plan;
pub mod program;
mod segs;
pub mod synth;

pub use algorithms::AlgorithmError;
pub use chunk::ChunkRange;
pub use data::{DataType, ReduceOp};
pub use executor::{CollectiveRunner, ExecError, Job, JobRecord, JobStart};
pub use interpret::{run_local, RunError};
pub use op::Collective;
pub use plan::{
    algorithms_for, compile, stream, Algorithm, DimPolicy, DimSpec, Layout, Plan, Scheme,
    MAX_TOTAL_STEPS,
};
pub use program::{
    validate, Program, ProgramBuilder, Step, StepGen, StepId, StepKind, ValidationError,
};
