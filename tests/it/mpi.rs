//! Runs spread over MPI ranks (the `mpi` feature) against the same runs on threads.
//!
//! The default build has no MPI, so these tests build what they run themselves (`fabemu` and
//! the engine's `mpi_mesh` example with `--features mpi`) and start it with `mpirun
//! --allow-run-as-root --oversubscribe -np N` (more ranks than this machine's cores is fine:
//! correct, not fast). Without OpenMPI they install it with apt when run under CI (`CI=true`)
//! and are skipped with the reason printed elsewhere.
//!
//! Checked: the same results at 1, 2 and 4 ranks as on one thread for an engine mesh (every
//! actor's final state, the engine's counters) and the same JSON report from `fabemu run` for
//! scenarios: the fabric64 benchmark (placed by the fabric's groups and by the engine's plan,
//! the groups crossing ranks less), a PFC incast, a leaf-spine in data mode with lossy and
//! failing links, and a training iteration; that a rank which fails or is killed ends every
//! rank within 5 s, with a message naming it; and that Ctrl-C on `mpirun` ends the run within
//! 5 s with rank 0's partial report written.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: a failure is a panic

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use common::temp_dir;

pub(crate) const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// What the MPI tests need on the system (OpenMPI, and libclang for rsmpi's bindings).
const PACKAGES: [&str; 4] = [
    "openmpi-bin",
    "libopenmpi-dev",
    "libclang-dev",
    "pkg-config",
];

fn have_mpi() -> bool {
    let ok = |cmd: &str, arg: &str| {
        Command::new(cmd)
            .arg(arg)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    ok("mpirun", "--version") && ok("mpicc", "--showme:version")
}

/// True when OpenMPI is there (installed with apt under CI); false, with the reason printed,
/// when it is missing and this is not CI.
fn mpi_ready() -> bool {
    static READY: OnceLock<bool> = OnceLock::new();
    *READY.get_or_init(|| {
        if have_mpi() {
            return true;
        }
        if std::env::var("CI").as_deref() != Ok("true") {
            eprintln!(
                "skipped: no OpenMPI (mpirun, mpicc); install {} to run the MPI tests",
                PACKAGES.join(" ")
            );
            return false;
        }
        let apt = |args: &[&str]| {
            let s = Command::new("apt-get")
                .args(args)
                .env("DEBIAN_FRONTEND", "noninteractive")
                .status();
            assert!(s.is_ok_and(|s| s.success()), "apt-get {args:?} failed");
        };
        apt(&["update"]);
        let mut install = vec!["install", "-y"];
        install.extend(PACKAGES);
        apt(&install);
        true
    })
}

/// `cargo build --release ARGS`, failing the test if it fails.
fn cargo_build(args: &[&str]) {
    let out = Command::new(env!("CARGO"))
        .current_dir(ROOT)
        .args(["build", "--release"])
        .args(args)
        .output()
        .expect("cargo runs");
    assert!(
        out.status.success(),
        "building {args:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The engine's `mpi_mesh` example, built once; `None` as for [`mpi_ready`].
fn mesh() -> Option<&'static Path> {
    static BUILT: OnceLock<Option<PathBuf>> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            if !mpi_ready() {
                return None;
            }
            cargo_build(&[
                "-p",
                "fabemu-fabric",
                "--features",
                "mpi",
                "--example",
                "mpi_mesh",
            ]);
            Some(Path::new(ROOT).join("target/release/examples/mpi_mesh"))
        })
        .as_deref()
}

/// `fabemu` built with the `mpi` feature, copied aside (as `target/release/examples/fabemu-mpi`)
/// and the default build put back in `target/release/fabemu` for the other tests; `None` as
/// for [`mpi_ready`].
///
/// The default build is put back by keeping a copy of it from before and renaming that copy
/// into place, not by building it again: the feature switch makes Cargo recompile every
/// workspace crate, a second whole-program build that took about two minutes of both cores in
/// the middle of the suite. A rename, not a write: other tests may be running the file.
pub(crate) fn fabemu_mpi() -> Option<&'static Path> {
    static BUILT: OnceLock<Option<PathBuf>> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            if !mpi_ready() {
                return None;
            }
            let release = Path::new(ROOT).join("target/release");
            let (bin, examples) = (release.join("fabemu"), release.join("examples"));
            std::fs::create_dir_all(&examples).expect("examples directory");
            let kept = examples.join("fabemu-default");
            let have_default = std::fs::copy(&bin, &kept).is_ok();
            cargo_build(&["--bin", "fabemu", "--features", "mpi"]);
            let aside = examples.join("fabemu-mpi");
            std::fs::copy(&bin, &aside).expect("copies fabemu");
            if have_default {
                std::fs::rename(&kept, &bin).expect("puts the default fabemu back");
            } else {
                cargo_build(&["--bin", "fabemu"]);
            }
            Some(aside)
        })
        .as_deref()
}

/// Runs `cmd` to its end, failing the test if that takes more than `limit` (a hang check). The
/// output is read while the child runs (a full pipe would stop it).
pub(crate) fn finish(mut cmd: Command, limit: Duration) -> (Output, Duration) {
    let t0 = Instant::now();
    let child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starts");
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(limit) {
        Ok(out) => (out.expect("output"), t0.elapsed()),
        Err(_) => {
            let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
            panic!("{cmd:?} still running after {limit:?}");
        }
    }
}

pub(crate) fn mpirun(np: usize, program: &Path, args: &[&str]) -> Command {
    let mut c = Command::new("mpirun");
    c.args(["--allow-run-as-root", "--oversubscribe", "-np"])
        .arg(np.to_string())
        .arg(program)
        .args(args);
    c
}

fn stdout_of(cmd: Command) -> String {
    let (out, _) = finish(cmd, Duration::from_secs(600));
    assert!(
        out.status.success(),
        "failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `program local 1 args..` against `mpirun -np N program mpi THREADS args..` for N = 1, 2,
/// 4 (1 thread each) and N = 2 with 2 threads each: every line the same.
fn same_over_ranks(program: &Path, before: &[&str], after: &[&str]) {
    let args = |mode: &str, threads: &str| -> Vec<String> {
        before
            .iter()
            .chain(&[mode, threads])
            .chain(after)
            .map(|s| s.to_string())
            .collect()
    };
    let mut local = Command::new(program);
    local.args(args("local", "1"));
    let one = stdout_of(local);
    assert!(one.lines().count() > 2, "{one}");
    for (np, threads) in [(1, "1"), (2, "1"), (4, "1"), (2, "2")] {
        let a = args("mpi", threads);
        let a: Vec<&str> = a.iter().map(String::as_str).collect();
        let over = stdout_of(mpirun(np, program, &a));
        if over != one {
            let diff = one
                .lines()
                .zip(over.lines())
                .find(|(a, b)| a != b)
                .map_or_else(|| "(line count)".to_string(), |(a, b)| format!("{a}\n{b}"));
            panic!("np {np} x {threads} threads differs from one thread, first at:\n{diff}");
        }
    }
}

#[test]
fn engine_mesh_is_the_same_over_ranks() {
    let Some(mesh) = mesh() else { return };
    same_over_ranks(mesh, &[], &[]);
    // Stopped by a limit in the middle of the traffic.
    same_over_ranks(mesh, &[], &["40000000"]);
}

/// A leaf-spine in data mode with a link down for 40 us and two lossy links.
const FAULTED: &str = "mode: data\nseed: 3\nnic: {rto: 50us}\n\
        topology:\n  leaf_spine: {leaves: 4, spines: 2, hosts_per_leaf: 4, host_bandwidth: 100Gbps, host_latency: 500ns, fabric_bandwidth: 100Gbps, fabric_latency: 1us}\n\
        workload:\n  all_to_all: {size: 64KiB}\n\
        faults:\n  - {link: [leaf0, spine0], down: true, from: 20us, until: 60us}\n  - {link: [leaf1, spine1], loss: 0.01}\n  - {link: [h5, leaf1], loss: 0.01}\n";

#[test]
fn a_failing_rank_ends_every_rank_with_its_name() {
    let Some(mesh) = mesh() else { return };
    let mut c = mpirun(2, mesh, &["mpi", "1"]);
    c.env("MESH_BOMB_PS", "20000000").env("RUST_BACKTRACE", "0");
    let (out, took) = finish(c, Duration::from_secs(60));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("fabemu: MPI rank"), "{err}");
    assert!(err.contains("exploded as asked"), "{err}");
    // Start-up included; the abort itself takes well under a second.
    assert!(took < Duration::from_secs(5), "{took:?}");
}

#[test]
fn a_killed_rank_ends_every_rank_with_its_name() {
    let Some(mesh) = mesh() else { return };
    let pids = temp_dir("mpi-pids");
    let mut c = mpirun(2, mesh, &["mpi", "1"]);
    c.env("MESH_FOREVER", "1").env("MESH_PID_DIR", pids.dir());
    c.stdout(Stdio::null()).stderr(Stdio::piped());
    let mut child = c.spawn().expect("starts");
    let pid_of_1 = pids.dir().join("rank1");
    let t0 = Instant::now();
    let pid = loop {
        if let Ok(p) = std::fs::read_to_string(&pid_of_1) {
            if !p.is_empty() {
                break p;
            }
        }
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "rank 1 never started"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    // Let the ranks exchange a few windows, then kill rank 1.
    std::thread::sleep(Duration::from_millis(300));
    let killed = Instant::now();
    let k = Command::new("kill").args(["-9", pid.trim()]).status();
    assert!(k.is_ok_and(|s| s.success()));
    loop {
        if child.try_wait().expect("waits").is_some() {
            break;
        }
        if killed.elapsed() > Duration::from_secs(30) {
            let _ = child.kill();
            panic!("the other rank still runs 30 s after rank 1 was killed");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let took = killed.elapsed();
    let out = child.wait_with_output().expect("output");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("rank 1"), "{err}");
    assert!(took < Duration::from_secs(5), "{took:?}");
}

/// The JSON report of `fabemu run ARGS --json -` (its exit code too), with `host` and, when
/// `ranks` is set, the `mpi` section taken out (checked to name `ranks` ranks, and returned).
fn report_over(
    cmd: Command,
    ranks: Option<u64>,
) -> (serde_json::Value, Option<i32>, Option<serde_json::Value>) {
    let (out, _) = finish(cmd, Duration::from_secs(600));
    let text = String::from_utf8_lossy(&out.stdout);
    let mut v: serde_json::Value = serde_json::from_str(&text).unwrap_or_else(|e| {
        panic!(
            "no JSON report ({e}): {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    let o = v.as_object_mut().expect("an object");
    assert!(o.remove("host").is_some());
    let mpi = o.remove("mpi");
    match ranks {
        None => assert!(mpi.is_none(), "an mpi section on threads"),
        Some(n) => {
            let m = mpi.as_ref().expect("an mpi section");
            assert_eq!(m["ranks"], n);
            let windows = m["windows"].as_u64().expect("windows");
            let crossing = m["frames_crossing_ranks"]
                .as_u64()
                .expect("frames crossing");
            assert!(windows > 0, "{m}");
            // One rank sends nothing to another; more ranks on these fabrics always do.
            assert_eq!(crossing == 0, n == 1, "{m}");
        }
    }
    (v, out.status.code(), mpi)
}

/// `fabemu run SCENARIO --threads 1` against `mpirun -np N fabemu run SCENARIO EXTRA..` for
/// N = 1, 2, 4 (and 2 ranks of 2 threads): the same JSON report but for `host` and `mpi`, the
/// same exit code; the `mpi` sections, in that order.
fn run_same_over_ranks(scenario: &Path, extra: &[&str]) -> Vec<serde_json::Value> {
    let Some(fabemu) = fabemu_mpi() else {
        return Vec::new();
    };
    let s = scenario.to_string_lossy();
    let mut one = Command::new(fabemu);
    one.args(["run", &s, "--threads", "1", "--quiet", "--json", "-"]);
    let (one, code, _) = report_over(one, None);
    let mut sections = Vec::new();
    for (np, threads) in [(1, "1"), (2, "1"), (4, "1"), (2, "2")] {
        let mut args = vec!["run", &s, "--threads", threads, "--quiet", "--json", "-"];
        args.extend(extra);
        let (over, c, mpi) = report_over(mpirun(np, fabemu, &args), Some(np as u64));
        assert_eq!(c, code, "np {np} x {threads} threads: exit code");
        if over != one {
            let a = serde_json::to_string_pretty(&one).expect("json");
            let b = serde_json::to_string_pretty(&over).expect("json");
            let diff = a
                .lines()
                .zip(b.lines())
                .find(|(x, y)| x != y)
                .map_or_else(|| "(line count)".to_string(), |(x, y)| format!("{x}\n{y}"));
            panic!("np {np} x {threads} threads: the report differs, first at:\n{diff}");
        }
        sections.extend(mpi);
    }
    sections
}

#[test]
fn fabemu_run_over_ranks_reports_fabric64_as_one_thread() {
    run_same_over_ranks(&Path::new(ROOT).join("benches/fabric64.yaml"), &[]);
}

/// The engine's plan cut into blocks (what fabrics without groups get) gives the same report.
#[test]
fn fabemu_run_over_ranks_placed_by_the_engine_reports_fabric64_as_one_thread() {
    let p = Path::new(ROOT).join("benches/fabric64.yaml");
    for m in run_same_over_ranks(&p, &["--mpi-placement", "engine"]) {
        assert_eq!(m["placement"], "engine", "{m}");
    }
}

/// The leaf groups keep a leaf's host links inside its rank: at 2 ranks on fabric64 only
/// leaf-spine links cross, so fewer frames cross ranks than with the engine's plan cut into
/// blocks, and the report is the same.
#[test]
fn placing_by_leaf_groups_crosses_ranks_less() {
    let Some(fabemu) = fabemu_mpi() else { return };
    let p = Path::new(ROOT).join("benches/fabric64.yaml");
    let p = p.to_string_lossy();
    let run = |placement: &str| {
        let args = [
            "run",
            &p,
            "--quiet",
            "--json",
            "-",
            "--mpi-placement",
            placement,
        ];
        let (report, code, mpi) = report_over(mpirun(2, fabemu, &args), Some(2));
        assert_eq!(code, Some(0));
        let m = mpi.expect("an mpi section");
        assert_eq!(m["placement"], placement, "{m}");
        let per_window = m["frames_crossing_ranks_per_window"]
            .as_f64()
            .expect("frames per window");
        (report, per_window)
    };
    let (by_groups, g) = run("groups");
    let (by_engine, e) = run("engine");
    assert_eq!(by_groups, by_engine);
    assert!(g > 0.0 && g < e, "groups {g} engine {e} frames per window");
}

#[test]
fn fabemu_run_over_ranks_reports_a_pfc_incast_as_one_thread() {
    run_same_over_ranks(&Path::new(ROOT).join("examples/lossless.yaml"), &[]);
}

#[test]
fn fabemu_run_over_ranks_reports_a_faulted_leaf_spine_as_one_thread() {
    let dir = temp_dir("mpi-run");
    run_same_over_ranks(&dir.write_beside("faulted.yaml", FAULTED), &[]);
}

#[test]
fn fabemu_run_over_ranks_reports_a_training_iteration_as_one_thread() {
    run_same_over_ranks(&Path::new(ROOT).join("examples/training.yaml"), &[]);
}

/// Flow fidelity (one process computes it) is refused over ranks, naming it, and writes nothing.
#[test]
fn fabemu_run_over_ranks_refuses_what_it_cannot_report() {
    let Some(fabemu) = fabemu_mpi() else { return };
    let s = Path::new(ROOT).join("examples/lossless.yaml");
    let s = s.to_string_lossy();
    let dir = temp_dir("mpi-refused");
    let out_dir = dir.dir().join("out");
    let o = out_dir.to_string_lossy();
    let a = ["run", &s, "--quiet", "--fidelity", "flow", "--out", &o];
    let (out, _) = finish(mpirun(2, fabemu, &a), Duration::from_secs(120));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("flow fidelity"), "{err}");
    assert!(!out_dir.exists());
}

/// An all-to-all of 1 GiB messages on 16 hosts: 15 GiB out of every host at 100 Gb/s, 1.29 s
/// at line rate and minutes of wall time, far from done when it is stopped.
const LONG: &str = "seed: 1\nnic: {mtu: 4KiB}\n\
        topology:\n  leaf_spine: {leaves: 4, spines: 2, hosts_per_leaf: 4, host_bandwidth: 100Gbps, host_latency: 1us, fabric_bandwidth: 100Gbps, fabric_latency: 1us}\n\
        workload:\n  all_to_all: {size: 1GiB}\n";

/// Ctrl-C on `mpirun` (SIGINT to it alone: the ranks are in process groups of their own):
/// `mpirun` sends the ranks SIGTERM one second later and SIGKILL a second after that. Every
/// rank stops at the same window, rank 0 writes the partial report (saying that it was
/// interrupted, and when) before the SIGKILL, and `mpirun` exits within 5 s, unsuccessfully.
#[test]
fn ctrl_c_on_mpirun_stops_every_rank_with_a_partial_report() {
    let Some(fabemu) = fabemu_mpi() else { return };
    let dir = temp_dir("mpi-ctrl-c");
    let s = dir.write_beside("long.yaml", LONG);
    let json = dir.dir().join("report.json");
    let err = dir.dir().join("stderr.txt");
    let args = [
        "run",
        &s.to_string_lossy(),
        "--quiet",
        "--json",
        &json.to_string_lossy(),
    ];
    let mut c = mpirun(2, fabemu, &args);
    c.stdout(Stdio::null())
        .stderr(std::fs::File::create(&err).expect("stderr file"));
    let mut child = c.spawn().expect("starts");
    std::thread::sleep(Duration::from_secs(2));
    assert!(
        child.try_wait().expect("waits").is_none(),
        "the run ended before Ctrl-C"
    );
    let stopped = Instant::now();
    let k = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status();
    assert!(k.is_ok_and(|s| s.success()));
    let status = loop {
        if let Some(s) = child.try_wait().expect("waits") {
            break s;
        }
        if stopped.elapsed() > Duration::from_secs(30) {
            let _ = child.kill();
            panic!("mpirun still runs 30 s after Ctrl-C");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let took = stopped.elapsed();
    let err = std::fs::read_to_string(&err).unwrap_or_default();
    assert!(took < Duration::from_secs(5), "{took:?}: {err}");
    // `mpirun` aborting the job on a signal exits 1, whatever the ranks did.
    assert_eq!(status.code(), Some(1), "{err}");
    let text = std::fs::read_to_string(&json)
        .unwrap_or_else(|e| panic!("no partial report ({e}) after {took:?}: {err}"));
    let v: serde_json::Value = serde_json::from_str(&text).expect("a whole JSON report");
    assert_eq!(v["interrupted"], true, "{}", v["totals"]);
    assert_eq!(v["mpi"]["ranks"], 2);
    let reached = v["totals"]["simulated_time_ps"]
        .as_u64()
        .expect("time reached");
    let windows = v["mpi"]["windows"].as_u64().expect("windows");
    // Stopped well before the 10 s `until` (and the messages' 1.29 s at line rate).
    assert!(reached > 0 && reached < 1_290_000_000_000, "{reached} ps");
    assert!(windows > 0, "{}", v["mpi"]);
    // Partial: some messages may have finished on a fast machine, never all of them.
    let done = v["totals"]["messages_completed"]
        .as_u64()
        .unwrap_or(u64::MAX);
    let all = v["totals"]["messages"].as_u64().unwrap_or(0);
    assert!(all > 0 && done < all, "{done} of {all} messages completed");
    assert!(
        err.contains("interrupted at simulated time"),
        "rank 0's message: {err}"
    );
}
