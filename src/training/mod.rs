//! Training workloads in a scenario: Chakra traces turned into per-host schedulers, and the
//! iteration-time breakdown read back from them.
//!
//! `workload.chakra` names one trace per rank. Each rank's nodes become
//! [`fabemu_workload::Action`]s: compute and memory nodes take their recorded duration or the
//! device model's roofline time (`workload.device`); a point-to-point node names its peer
//! rank, mapped to that rank's host; a collective becomes a job of the collective executor,
//! compiled by the same algorithm library as `workload.collectives`
//! (`crate::collective::compile_one`).
//!
//! Matching collectives across ranks: the ranks of a communicator (the node's `pg_name` group
//! of the `comm_groups` file, or every rank) must issue the same sequence of collectives on
//! it; the k-th collective of a group in trace order on each member is one job. A member with
//! a different operation or size at the same place, or a different number of collectives, is
//! a located error, since the run would otherwise hang.
//!
//! A training collective's message names its job (see [`fabemu_collectives::executor`]): the
//! jobs of `workload.collectives` come first, then the trace's, numbered group by group.
//!
//! The pieces, one idea each:
//! - `build`: the traces (Chakra's, or the built-in model of `workload.training`, which
//!   [`fabemu_workload::model`] generates) turned into per-host schedulers and collective jobs.
//! - `report`: the training section of the report: iteration times and how each rank's
//!   time divides into compute, exposed and hidden communication, and idle.
//! - `critical_path`: the chain of nodes across ranks that set the iteration time.
//! - `summary`: the section's lines in the text summary.
//! - `perfetto`: the iteration as a Chrome / Perfetto trace.

use std::collections::BTreeMap;

use crate::collective::CollectiveInfo;

mod build;
mod critical_path;
mod perfetto;
mod report;
mod summary;

pub(crate) use build::{algorithm_of, build, check_device, model_spec};
pub use critical_path::{CriticalPath, PathGroup, PathStep};
pub use perfetto::perfetto_trace;
pub use report::{
    report, Breakdown, CommKinds, GroupStats, KindExposed, KindStats, ModelMetrics, RankBreakdown,
    Schedule, TrainingReport, KIND_ORDER,
};
pub use summary::summary;

/// A training workload as built: which host runs which trace, and its collectives.
#[derive(Clone, Debug)]
pub struct TrainingInfo {
    /// The traces' prefix as given, or a description of the built-in model.
    pub traces: String,
    /// Per rank: its host and its file.
    pub ranks: Vec<RankInfo>,
    /// The trace's collectives, in the order they were matched (group by group).
    pub collectives: Vec<CollectiveInfo>,
    /// Each collective's job number on its members' runners, after `job_base`: collectives
    /// that share no host share numbers (see `build`).
    pub slots: Vec<usize>,
    /// The group each collective ran on (`all` or the `pg_name`).
    pub groups: Vec<String>,
    /// The job number of the first trace collective.
    pub job_base: usize,
    /// Per rank, the node that ends each iteration (the built-in model's several
    /// iterations); empty: the trace is one iteration.
    pub iteration_ends: Vec<Vec<u32>>,
    /// The hosts of each communicator that ran a collective (`all` or the group's name), in
    /// rank order.
    pub members: BTreeMap<String, Vec<usize>>,
    /// A transformer's figures (`workload.training.model`), for tokens/s, TFLOP/s and MFU.
    pub model: Option<ModelFigures>,
}

/// An iteration of a transformer (`workload.training.model`) in the figures its metrics need.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ModelFigures {
    /// Tokens per iteration over all replicas.
    pub tokens: u64,
    /// The model's FLOPs per iteration (forward and backward, no recomputation).
    pub model_flops: f64,
    /// FLOPs the devices execute per iteration (recomputation included).
    pub hardware_flops: f64,
    /// Parameters of the model.
    pub parameters: f64,
    /// The device's peak FLOP/s (for MFU).
    pub peak_flops: Option<f64>,
    /// Memory per GPU on the stage that needs most: (stage, bytes).
    pub memory: (u64, f64),
    /// The device's memory, when given.
    pub device_memory: Option<u64>,
}

/// One rank of a training workload.
#[derive(Clone, Debug)]
pub struct RankInfo {
    /// Host index.
    pub host: usize,
    /// Its trace file.
    pub file: String,
}
