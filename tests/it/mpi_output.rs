//! What a run over MPI ranks writes besides its report: the packet capture (pcap and pcapng),
//! the time series and everything under `--out`, against the same run with `--threads 1`.
//!
//! Byte for byte, file by file, at 2 and 4 ranks: the capture merged in the same order (and,
//! with a cap reached, the same first frames), the series CSVs, the plots (PNG and SVG are
//! drawn from the same numbers, deterministically), the training trace and the collective
//! timelines. Two files hold what the run cannot share with a one-thread run: `report.json`,
//! compared without `host` and `mpi` (as `tests/it/mpi.rs` compares `--json`), and
//! `summary.txt`, compared without its `Run:` line (wall time, threads, partitions). Built and
//! started as `tests/it/mpi.rs` does; skipped, with the reason, where OpenMPI is missing.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: a failure is a panic

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::common::temp_dir;
use crate::mpi::{fabemu_mpi, finish, mpirun, ROOT};

/// Every file under `dir` (not recursive), by name.
fn files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| {
            let e = e.expect("a directory entry");
            let name = e.file_name().to_string_lossy().into_owned();
            (name, std::fs::read(e.path()).expect("readable"))
        })
        .collect()
}

/// `bytes` as the comparison sees them: `report.json` without `host` and `mpi`, `summary.txt`
/// without its `Run:` line, any other file as it is.
fn comparable(name: &str, bytes: &[u8]) -> Vec<u8> {
    match name {
        "report.json" => {
            let mut v: serde_json::Value = serde_json::from_slice(bytes).expect("a JSON report");
            let o = v.as_object_mut().expect("an object");
            o.remove("host");
            o.remove("mpi");
            serde_json::to_vec(&v).expect("json")
        }
        "summary.txt" => String::from_utf8_lossy(bytes)
            .lines()
            .filter(|l| !l.starts_with("Run:"))
            .collect::<Vec<_>>()
            .join("\n")
            .into_bytes(),
        _ => bytes.to_vec(),
    }
}

/// Runs `fabemu run SCENARIO --out DIR ARGS` with `--threads 1`, then under `mpirun -np 2`
/// and `-np 4`, each with a directory of its own (`{out}` in `args` is replaced by it); checks
/// that every run wrote the same files and gives them (of the one-thread run). `None` where
/// OpenMPI is missing.
fn same_files_over_ranks(scenario: &Path, args: &[&str]) -> Option<BTreeMap<String, Vec<u8>>> {
    let fabemu = fabemu_mpi()?;
    let tmp = temp_dir("mpi-output");
    let s = scenario.to_string_lossy();
    let run = |np: Option<usize>| {
        let dir = tmp
            .dir()
            .join(np.map_or("one".into(), |n| format!("np{n}")));
        // `--pcap` writes into an existing directory (`--out` creates its own).
        std::fs::create_dir_all(&dir).expect("creates the directory");
        let d = dir.to_string_lossy().into_owned();
        let args: Vec<String> = args.iter().map(|a| a.replace("{out}", &d)).collect();
        let mut a: Vec<&str> = vec!["run", &s, "--quiet", "--out", &d];
        a.extend(args.iter().map(String::as_str));
        let cmd = match np {
            None => {
                let mut c = Command::new(fabemu);
                c.args(&a).args(["--threads", "1"]);
                c
            }
            Some(n) => mpirun(n, fabemu, &a),
        };
        let (out, _) = finish(cmd, Duration::from_secs(600));
        assert!(
            out.status.success(),
            "{np:?} ranks: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        files(&dir)
    };
    let one = run(None);
    for np in [2, 4] {
        let over = run(Some(np));
        let names = |f: &BTreeMap<String, Vec<u8>>| f.keys().cloned().collect::<Vec<_>>();
        assert_eq!(names(&over), names(&one), "np {np}: the files written");
        for (name, bytes) in &one {
            assert!(
                comparable(name, bytes) == comparable(name, &over[name]),
                "np {np}: {name} differs from the one-thread run's"
            );
        }
    }
    Some(one)
}

/// The PFC incast: a pcapng of both switches' ports and the receiver's (interfaces,
/// directions, picosecond times), the series of queues that PFC fills, the plots.
#[test]
fn a_pfc_incast_writes_the_files_of_one_thread_over_ranks() {
    let s = Path::new(ROOT).join("examples/lossless.yaml");
    let Some(f) = same_files_over_ranks(
        &s,
        &["--pcap", "{out}/incast.pcapng", "--capture", "s1,s2,r"],
    ) else {
        return;
    };
    for name in [
        "incast.pcapng",
        "link_utilization.csv",
        "dimension_utilization.csv",
        "queue_depth.csv",
        "link_utilization.png",
        "queue_depth.svg",
        "report.json",
        "summary.txt",
    ] {
        assert!(f.contains_key(name), "{name} missing");
    }
    assert!(f["incast.pcapng"].len() > 1_000_000, "a small capture");
    // PFC fills the receiver's queue at s2: the series see it.
    let depth = String::from_utf8_lossy(&f["queue_depth.csv"]).into_owned();
    let peak = depth
        .lines()
        .skip(1)
        .flat_map(|l| l.split(',').skip(1))
        .filter_map(|x| x.parse::<f64>().ok())
        .fold(0.0, f64::max);
    assert!(peak > 100_000.0, "queues never filled: {peak}");
}

/// fabric64 with a capture cap that the run exceeds: the first frames of the whole run, in
/// the same order, whichever rank saw them; series at a given interval.
#[test]
fn fabric64_writes_the_files_of_one_thread_over_ranks() {
    let s = Path::new(ROOT).join("benches/fabric64.yaml");
    let Some(f) = same_files_over_ranks(
        &s,
        &[
            "--capture",
            "h0,leaf3,spine5:2,h63",
            "--pcap-max-packets",
            "20000",
            "--sample-interval",
            "1us",
        ],
    ) else {
        return;
    };
    // A classic pcap: a 24-byte header, then per record 16 bytes and the captured bytes.
    let pcap = &f["capture.pcap"];
    let mut at = 24;
    let mut frames = 0;
    while at + 16 <= pcap.len() {
        let caplen = u32::from_le_bytes(pcap[at + 8..at + 12].try_into().unwrap()) as usize;
        at += 16 + caplen;
        frames += 1;
    }
    assert_eq!((frames, at), (20_000, pcap.len()), "the cap");
    let rows = String::from_utf8_lossy(&f["link_utilization.csv"])
        .lines()
        .count();
    assert!(rows > 1000, "{rows} rows at 1 us");
}

/// A training iteration: its Perfetto trace and breakdown, read from the facts rank 0 gathers.
#[test]
fn a_training_iteration_writes_its_trace_over_ranks() {
    let s = Path::new(ROOT).join("examples/training.yaml");
    let Some(f) = same_files_over_ranks(&s, &[]) else {
        return;
    };
    assert!(f.contains_key("trace.json") && f.contains_key("breakdown.png"));
}

/// Collectives: their timelines, from the step times rank 0 gathers.
#[test]
fn collective_timelines_are_the_same_over_ranks() {
    let s = Path::new(ROOT).join("examples/quickstart.yaml");
    let Some(f) = same_files_over_ranks(&s, &[]) else {
        return;
    };
    assert!(f.contains_key("timeline_0.png"), "{:?}", f.keys());
}
