//! # fabemu-workload
//!
//! Training workloads as fabemu runs them: what each rank computes and communicates, as a DAG
//! of operations, scheduled over the rank's transport while the network moves the bytes.
//!
//! - [`chakra`]: Chakra execution traces (MLCommons) on the wire: the protobuf messages with
//!   Chakra's field numbers and the length-delimited stream, decoded and encoded with prost.
//! - [`trace`]: a rank's trace as typed operations ([`trace::Op`]) with checked dependencies,
//!   and the reading of one file per rank; errors name the file and the node.
//! - [`input`]: reading any input file within a stated size (devices and pipes included).
//! - [`scheduler`]: the per-rank state machine ([`scheduler::RankScheduler`]) that starts a
//!   node when its parents have finished: compute on one stream, collectives on the rank's
//!   collective executor, sends and receives matched by peer and tag.
//!
//! - [`memory`]: device memory per GPU (model states under ZeRO, activations after
//!   Korthikanti et al.), so that a strategy that does not fit is known before it runs.
//! - [`model`]: the built-in training model (data, tensor, pipeline and expert parallelism
//!   over identical layers), generated as one trace per rank in the same form.
//! - [`transformer`]: a transformer by its hyper-parameters (or a published model's preset)
//!   and parallel settings, turned into the built-in model's FLOPs and bytes.
//!
//! Turning a trace's operations into actions (compute time from a device model, collectives
//! into jobs of the shared algorithm library, ranks into hosts) is the scenario's business and
//! lives in the root crate.
#![warn(missing_docs, unreachable_pub)]

pub mod chakra;
pub mod estimate;
pub mod input;
pub mod memory;
pub mod model;
pub mod scheduler;
pub mod trace;
pub mod transformer;

pub use scheduler::{Action, NodeRecord, RankScheduler, SchedNode};
pub use trace::{load_traces, ChakraError, CollKind, Op, RankTrace, TraceNode};
