//! Temporary entry point (replaced by the full algorithm set): compiles a plan to programs.
#![allow(missing_docs)]

use serde::{Deserialize, Serialize};

use crate::algorithms::{self, AlgorithmError};
use crate::op::Collective;
use crate::program::Program;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Algorithm {
    Ring,
    Direct,
    HalvingDoubling,
    DoubleBinaryTree,
    Tree,
    Pipeline,
}
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Scheme {
    LocalBwAware,
    Baseline,
}
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DimPolicy {
    Fixed,
    Themis,
}
#[derive(Clone, Debug, PartialEq)]
pub struct DimSpec {
    pub size: usize,
    pub algorithm: Algorithm,
    pub bandwidth_bps: u64,
}
#[derive(Clone, Debug, PartialEq)]
pub enum Layout {
    Flat(Algorithm),
    Dims {
        dims: Vec<DimSpec>,
        scheme: Scheme,
        policy: DimPolicy,
    },
}
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    pub op: Collective,
    pub ranks: usize,
    pub count: usize,
    pub root: usize,
    pub layout: Layout,
    pub chunks: usize,
    pub chunks_in_flight: usize,
}

pub fn compile(plan: &Plan) -> Result<Vec<Program>, AlgorithmError> {
    match (&plan.layout, plan.op) {
        (Layout::Flat(Algorithm::Ring), Collective::AllReduce) => {
            algorithms::ring_all_reduce(plan.ranks, plan.count)
        }
        (Layout::Flat(Algorithm::Ring), Collective::ReduceScatter) => {
            algorithms::ring_reduce_scatter(plan.ranks, plan.count)
        }
        (Layout::Flat(Algorithm::Ring), Collective::AllGather) => {
            algorithms::ring_all_gather(plan.ranks, plan.count)
        }
        (Layout::Flat(Algorithm::Direct), Collective::AllToAll) => {
            algorithms::direct_all_to_all(plan.ranks, plan.count)
        }
        _ => Err(AlgorithmError::NoRanks),
    }
}

pub fn algorithms_for(op: Collective) -> &'static [Algorithm] {
    match op {
        Collective::AllToAll => &[Algorithm::Direct],
        _ => &[Algorithm::Ring],
    }
}
