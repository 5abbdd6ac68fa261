//! The integration tests as one binary: each module was a test file of its own, so the suite
//! now links the crate once instead of once per file. Run one file's tests with its module
//! name: `cargo test --release --test it malformed::`.
//!
//! Binaries of their own, beside this directory: tests/fuzz.rs bounds the peak memory of its
//! whole process, which other tests in the same process would raise; tests/emulate.rs,
//! emulate_os.rs and emulate_pace.rs measure real-time pacing against the wall clock, which
//! the simulations of the other modules, run on the same test threads, would disturb.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: a failure is a panic

#[path = "../common/mod.rs"]
mod common;

mod bounds;
mod cc;
mod classes;
mod cli;
mod collectives;
mod determinism;
mod doc_links;
mod examples;
mod faults;
mod faults_relay;
mod flow;
mod lossless;
mod malformed;
mod mpi;
mod mpi_output;
mod msccl;
mod nic;
mod observe;
mod python;
mod recovery;
mod scenario_doc;
mod scheduling;
mod search;
mod synth;
mod threads;
mod timing;
mod topologies;
mod training;
mod transformer;
