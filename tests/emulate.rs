//! `fabemu emulate` end to end: real programs (Python socket programs from
//! `examples/emulate/`) in network namespaces, their frames carried by the emulated fabric in
//! real time.
//!
//! These need root (namespaces, TAP devices). Under CI (`CI=true`) they always run; elsewhere
//! they skip, saying why, when the process is not root. They measure real time: bounds are
//! what holds on a loaded 2-core machine, and the tests in this file run one at a time.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: a failure is a panic

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// One emulation at a time: they share the machine's two cores and real time.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// True when the tests can run; panics under CI when they cannot (they must run there).
fn can_emulate() -> bool {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let is_root = status
        .lines()
        .find(|l| l.starts_with("Uid:"))
        .and_then(|l| l.split_whitespace().nth(1))
        == Some("0");
    if is_root {
        return true;
    }
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "emulation tests must run under CI, which runs as root"
    );
    eprintln!("skipped: fabemu emulate needs root (network namespaces and TAP devices)");
    false
}

fn fabemu() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_fabemu"));
    c.current_dir(root());
    c
}

/// The namespaces fabemu process `pid` made that still exist.
fn namespaces_of(pid: u32) -> Vec<String> {
    let out = Command::new("ip").args(["netns", "list"]).output().unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| {
            n.strip_prefix("fabemu-")
                .and_then(|r| r.split(['-', '.']).next())
                .is_some_and(|p| p == pid.to_string())
        })
        .map(str::to_string)
        .collect()
}

fn run(args: &[&str]) -> Output {
    let out = fabemu().args(args).output().unwrap();
    eprintln!(
        "stdout:\n{}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// The number after `key ` in the output.
fn figure(text: &str, key: &str) -> Option<f64> {
    let at = text.find(key)? + key.len();
    text[at..].split_whitespace().next()?.parse().ok()
}

/// 2 x (two 500 us links + two serializations of a 64-byte datagram: 106 frame bytes + 24 of
/// Ethernet overhead at 1 Gb/s = 1.04 us each), in microseconds.
const PING_PHYSICS_US: f64 = 2.0 * (1000.0 + 2.0 * 1.04);

/// `udp_pingpong.py`'s median and least round trip (us) on `two_hosts.yaml`, its environment
/// set to `env`.
fn ping_pong(env: &[&str]) -> (f64, f64) {
    ping_pong_on("examples/emulate/two_hosts.yaml", PING_PHYSICS_US, env)
}

/// `udp_pingpong.py`'s median and least round trip (us) on `scenario`, whose round trip
/// takes `physics` us.
fn ping_pong_on(scenario: &str, physics: f64, env: &[&str]) -> (f64, f64) {
    let (median, min, _) = ping_pong_report(&[scenario], physics, env);
    (median, min)
}

/// [`ping_pong_on`] with `scenario` and its options given as `fabemu emulate` arguments, and
/// the JSON report.
fn ping_pong_report(
    scenario: &[&str],
    physics: f64,
    env: &[&str],
) -> (f64, f64, serde_json::Value) {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("r.json");
    let mut args = vec!["emulate"];
    args.extend(scenario);
    args.extend(["--quiet", "--json", json.to_str().unwrap(), "--", "env"]);
    args.extend(env);
    args.extend(["python3", "examples/emulate/udp_pingpong.py"]);
    let out = run(&args);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    let median = figure(&text, "rtt_median_us").unwrap();
    let min = figure(&text, "min_us").unwrap();
    assert!(
        min >= physics * 0.999,
        "{min} us below the links' {physics} us"
    );
    let report = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    (median, min, report)
}

/// The sum over the report's `emulation.hosts` of field `key`.
fn host_sum(report: &serde_json::Value, key: &str) -> u64 {
    report["emulation"]["hosts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h[key].as_u64().unwrap())
        .sum()
}

#[test]
fn a_udp_round_trip_takes_the_links_time() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    if !can_emulate() {
        return;
    }
    // Programs sleeping in recvfrom, 10 ms between pings: each round trip pays two wake-ups
    // of the programs and one of fabemu's loop (tens of microseconds each on a virtual
    // machine, milliseconds now and then on a loaded one); the fabric's share is the physics.
    let (median, _) = ping_pong(&["PINGS=50"]);
    assert!(
        median <= PING_PHYSICS_US * 1.5,
        "median {median} us against {PING_PHYSICS_US} us"
    );
    // Programs that busy-poll, back to back, as latency benchmarks do: when no process loses
    // its core, a round trip is the physics plus the kernel's own path. Measured on a 2-core
    // machine at load averages 14-16: least of 300 within +1.7% to +3.5%. The median is not
    // held to the same bound: with other work on both cores most round trips meet a process
    // that has lost its core (medians 2.0 to 2.5 times the physics seen; docs/EMULATE.md).
    let (_, min) = ping_pong(&["PINGS=300", "PING_SPIN=1"]);
    assert!(
        min <= PING_PHYSICS_US * 1.05,
        "least round trip {min} us against {PING_PHYSICS_US} us"
    );
}

#[test]
fn two_hosts_back_to_back_need_no_switch() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    if !can_emulate() {
        return;
    }
    // One 1 ms cable: 2 x (1 ms + one serialization of 1.04 us).
    let physics = 2.0 * (1000.0 + 1.04);
    let (median, _) = ping_pong_on("examples/emulate/back_to_back.yaml", physics, &["PINGS=50"]);
    assert!(
        median <= physics * 1.5,
        "median {median} us against {physics} us"
    );
}

#[test]
fn a_ring_all_reduce_of_real_processes_sums_exactly() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    if !can_emulate() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("r.json");
    let out = run(&[
        "emulate",
        "examples/emulate/leaf_spine4.yaml",
        "--quiet",
        "--json",
        json.to_str().unwrap(),
        "--",
        "python3",
        "examples/emulate/ring_allreduce.py",
    ]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    for rank in 0..4 {
        let line = format!("[rank {rank}] allreduce rank {rank}: 65536 elements");
        assert!(text.contains(&line), "{line} missing");
    }
    assert_eq!(text.matches(", wrong 0").count(), 4);
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let hosts = report["emulation"]["hosts"].as_array().unwrap();
    assert_eq!(hosts.len(), 4);
    // Every frame a program sent arrived: nothing is lost on an uncongested fabric.
    let sum = |k: &str| hosts.iter().map(|h| h[k].as_u64().unwrap()).sum::<u64>();
    assert_eq!(sum("frames_in"), sum("frames_out"));
    assert_eq!(sum("dropped_queue_full") + sum("dropped_unsupported"), 0);
    // Each rank moved at least its 2 (n-1)/n share of 512 KiB of data through the fabric.
    for h in hosts {
        assert!(h["bytes_in"].as_u64().unwrap() >= 2 * 3 * 65536 * 8 / 4);
    }
}

#[test]
fn a_round_trip_across_k_relaying_hosts_takes_k_plus_one_hops_each_way() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    if !can_emulate() {
        return;
    }
    // Rank k+1 pings rank 0 across a ring of 2 (k + 1) hosts (`ring4.yaml`, 1 Gb/s, 500 us
    // links, grown to six hosts for k = 2): the opposite host, k relaying hosts away either
    // way. Each way is k + 1 serializations (1.04 us: 106 frame bytes + 24 of overhead) and
    // latencies, store and forward at each relay. Programs busy-poll, as in
    // `a_udp_round_trip_takes_the_links_time`: the least of 200 round trips is the physics
    // plus the kernel's path (+1.7% seen for k = 1 at load 13), held within 5%.
    for k in [1u64, 2] {
        let hosts = (2 * (k + 1)).to_string();
        let ring = format!("topology.ring.hosts={hosts}");
        let from = format!("PING_FROM={}", k + 1);
        let physics = 2.0 * (k + 1) as f64 * (500.0 + 1.04);
        let (_, min, report) = ping_pong_report(
            &["examples/emulate/ring4.yaml", "--set", &ring],
            physics,
            &["PINGS=200", "PING_SPIN=1", &from],
        );
        assert!(
            min <= physics * 1.05,
            "k = {k}: least round trip {min} us against {physics} us"
        );
        // Every frame crossed k relays, none entered a namespace but its destination's.
        let (sent, got) = (
            host_sum(&report, "frames_in"),
            host_sum(&report, "frames_out"),
        );
        assert_eq!(sent, got);
        assert!(sent >= 400, "{sent}");
        assert_eq!(host_sum(&report, "frames_relayed"), k * sent, "k = {k}");
        assert_eq!(host_sum(&report, "relay_dropped"), 0);
        assert_eq!(host_sum(&report, "dropped_not_for_host"), 0);
    }
}

#[test]
fn a_ring_all_reduce_across_hosts_that_relay_sums_exactly() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    if !can_emulate() {
        return;
    }
    // Four hosts in a ring of direct links (`ring4.yaml`); the All-Reduce's ring visits them
    // as 0, 2, 1, 3, so its steps 0 -> 2 and 1 -> 3 cross a host that relays them (either way
    // round, by the hash of each TCP connection's 5-tuple).
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("r.json");
    let out = run(&[
        "emulate",
        "examples/emulate/ring4.yaml",
        "--quiet",
        "--json",
        json.to_str().unwrap(),
        "--",
        "env",
        "ALLREDUCE_ORDER=0,2,1,3",
        "python3",
        "examples/emulate/ring_allreduce.py",
    ]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    for rank in 0..4 {
        let line = format!("[rank {rank}] allreduce rank {rank}: 65536 elements");
        assert!(text.contains(&line), "{line} missing");
    }
    assert_eq!(text.matches(", wrong 0").count(), 4);
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(
        host_sum(&report, "frames_in"),
        host_sum(&report, "frames_out")
    );
    // Two of the ring's four steps are two links long: at least their 2 x 2 (n-1)/n shares
    // of 512 KiB crossed a relaying host.
    assert!(host_sum(&report, "bytes_relayed") >= 2 * 2 * 3 * 65536 * 8 / 4);
    assert_eq!(host_sum(&report, "relay_dropped"), 0);
    assert_eq!(host_sum(&report, "dropped_not_for_host"), 0);
}

/// The Python that has torch: `FABEMU_TORCH_PYTHON` (e.g. a virtualenv's `bin/python`), else
/// `python3`; none when it cannot import torch.
fn python_with_torch() -> Option<String> {
    let py = std::env::var("FABEMU_TORCH_PYTHON").unwrap_or_else(|_| "python3".into());
    let ok = Command::new(&py)
        .args([
            "-c",
            "import torch.distributed as d; assert d.is_gloo_available()",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    ok.then_some(py)
}

/// The documented torch.distributed example. CI does not install torch (a large download for
/// one test), so there, as anywhere torch is missing, this test skips and says so; run it with
/// `FABEMU_TORCH_PYTHON=/path/to/venv/bin/python` where torch is installed.
#[test]
fn a_torch_gloo_all_reduce_sums_across_the_fabric() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    if !can_emulate() {
        return;
    }
    let Some(py) = python_with_torch() else {
        eprintln!("skipped: no torch (set FABEMU_TORCH_PYTHON to a Python that has it)");
        return;
    };
    let out = run(&[
        "emulate",
        "examples/emulate/leaf_spine4.yaml",
        "--quiet",
        "--set",
        "until=120s",
        "--",
        &py,
        "examples/emulate/torch_allreduce.py",
    ]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    for rank in 0..4 {
        let line = format!("[rank {rank}] torch all_reduce rank {rank}: 4194304 bytes in");
        assert!(text.contains(&line), "{line} missing");
    }
    assert_eq!(text.matches("correct True").count(), 4);
}

#[test]
fn a_tcp_transfer_never_beats_the_link() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    if !can_emulate() {
        return;
    }
    let out = fabemu()
        .args([
            "emulate",
            "examples/emulate/two_hosts.yaml",
            "--quiet",
            "--",
            "python3",
            "examples/emulate/tcp_transfer.py",
        ])
        .env("TRANSFER_BYTES", "5000000")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    eprintln!("{text}{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success());
    assert!(text.contains("received 5000000 bytes"));
    // At MTU 4096 a full segment carries 4096 - 52 (IP, TCP with timestamps) of 4134 wire
    // bytes: 97.8% of 1 Gb/s is the most TCP can get.
    let goodput = figure(&text, "goodput_bps").unwrap();
    let ceiling = 1e9 * (4096.0 - 52.0) / (4096.0 + 14.0 + 24.0);
    assert!(goodput <= ceiling * 1.01, "{goodput} above {ceiling}");
    // A 5 MB transfer is mostly slow start; docs/EMULATE.md gives the 50 MB figure.
    assert!(goodput > 0.05 * ceiling, "{goodput}");
}

#[test]
fn ctrl_c_ends_the_programs_and_removes_the_namespaces() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    if !can_emulate() {
        return;
    }
    let (mut child, pid) = sleeping_emulation();
    let t = Instant::now();
    assert!(Command::new("kill")
        .args(["-INT", &pid.to_string()])
        .status()
        .unwrap()
        .success());
    let status = child.wait().unwrap();
    assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
    assert_eq!(status.code(), Some(130));
    assert!(namespaces_of(pid).is_empty());
    // The ranks' `sleep` ended with them.
    let left = Command::new("pgrep").args(["-f", "^sleep 60$"]).output();
    if let Ok(o) = left {
        assert!(
            o.stdout.is_empty(),
            "{}",
            String::from_utf8_lossy(&o.stdout)
        );
    }
}

#[test]
fn the_next_run_removes_what_a_killed_run_left() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    if !can_emulate() {
        return;
    }
    let (mut child, pid) = sleeping_emulation();
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(namespaces_of(pid).len(), 2, "SIGKILL leaves them");
    let out = run(&[
        "emulate",
        "examples/emulate/two_hosts.yaml",
        "--quiet",
        "--",
        "true",
    ]);
    assert!(out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("removed namespace fabemu-{pid}-h0")),
        "{err}"
    );
    assert!(namespaces_of(pid).is_empty());
}

/// An emulation of two hosts whose ranks sleep a minute, once its namespaces are up.
fn sleeping_emulation() -> (std::process::Child, u32) {
    let child = fabemu()
        .args([
            "emulate",
            "examples/emulate/two_hosts.yaml",
            "--quiet",
            "--",
            "sleep",
            "60",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id();
    wait_for(|| namespaces_of(pid).len() == 2);
    (child, pid)
}

fn wait_for(ready: impl Fn() -> bool) {
    let t = Instant::now();
    while !ready() {
        assert!(t.elapsed() < Duration::from_secs(30), "not ready in 30 s");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn an_openmpi_program_runs_across_four_hosts() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    if !can_emulate() {
        return;
    }
    let have = |tool: &str| {
        Command::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            .output()
            .is_ok_and(|o| o.status.success())
    };
    if !have("mpicc") || !have("mpirun") {
        // .ci/run installs OpenMPI; elsewhere it may be missing.
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "OpenMPI (mpicc, mpirun) missing under CI"
        );
        eprintln!("skipped: OpenMPI (mpicc, mpirun) is not installed");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let program = dir.path().join("mpi_allreduce");
    let built = Command::new("mpicc")
        .arg("-O2")
        .arg("-o")
        .arg(&program)
        .arg(root().join("examples/emulate/mpi_allreduce.c"))
        .status()
        .unwrap();
    assert!(built.success());
    let mpi_dir = dir.path().join("mpi");
    std::fs::create_dir(&mpi_dir).unwrap();
    let attempt = || {
        let _ = std::fs::remove_file(mpi_dir.join("done"));
        let out = fabemu()
            .args([
                "emulate",
                "examples/emulate/leaf_spine4.yaml",
                "--quiet",
                "--mpi",
            ])
            .arg(&mpi_dir)
            .args(["--", "sh", "examples/emulate/mpirun.sh"])
            .env("MPI_DIR", &mpi_dir)
            .env("MPI_PROGRAM", &program)
            .output()
            .unwrap();
        eprintln!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        out
    };
    // mpirun's own start-up (its daemons wiring up over TCP) failed once in a dozen runs on a
    // busy machine: one more try, the first one's output printed above.
    let mut out = attempt();
    if !out.status.success() {
        eprintln!("mpirun failed once; trying again");
        out = attempt();
    }
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success());
    // Every MPI rank, started by mpirun's daemons in its own namespace, got the sum.
    for r in 0..4 {
        assert!(
            text.contains(&format!("mpi rank {r} of 4 sum 10")),
            "rank {r}"
        );
    }
}

/// The JSON report of `fabemu emulate ARGS` run at a tenth of real time (the machine then
/// keeps up with a 1 Gb/s fabric even when busy: virtual 1 Gb/s is 100 Mb/s of the programs'
/// real traffic), with its stdout.
fn emulate_json(args: &[&str], env: &[(&str, &str)]) -> (serde_json::Value, String) {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("r.json");
    let out = fabemu()
        .args(["emulate", "--time-scale", "0.1", "--quiet", "--json"])
        .arg(&json)
        .args(args)
        .envs(env.iter().copied())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    eprintln!("{text}{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success());
    let report = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    (report, text)
}

/// The port of `switch0` that carried the most frames (the incast's bottleneck, toward h0).
fn bottleneck(report: &serde_json::Value) -> serde_json::Value {
    report["switches"][0]["ports"]
        .as_array()
        .unwrap()
        .iter()
        .max_by_key(|p| p["dequeued"].as_u64().unwrap())
        .unwrap()
        .clone()
}

#[test]
fn ecn_marking_keeps_a_real_tcp_incast_near_k() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    if !can_emulate() {
        return;
    }
    // Two cubic flows into h0 through one 1 Gb/s port (`incast_ecn.yaml`, K = 30 kB). BBR,
    // a common default, ignores ECN: the senders ask for cubic per socket.
    let env = [
        ("FLOW_CC", "cubic"),
        ("FLOW_MARK", "0"),
        ("FLOW_SECONDS", "3"),
    ];
    let cmd = ["--", "python3", "examples/emulate/two_flows.py"];
    let k = 30_000.0;
    // The queue a frame found, in bytes: its wait at 1 Gb/s.
    let queue = |p: &serde_json::Value, q: &str| p["queueing_delay"][q].as_f64().unwrap() / 8e3;
    let mut on = vec![
        "examples/emulate/incast_ecn.yaml",
        "--sysctl",
        "net.ipv4.tcp_ecn=1",
    ];
    on.extend(cmd);
    let (report, _) = emulate_json(&on, &env);
    let port = bottleneck(&report);
    let marked: u64 = port["priorities"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["ecn_marked"].as_u64().unwrap_or(0))
        .sum();
    assert!(marked > 0, "{port}");
    // Classic ECN halves the window once per round trip: the queue stays at or below K most
    // of the time (8.9 kB median measured), never near the buffer.
    let median = queue(&port, "p50_ps");
    assert!(
        median <= 2.0 * k,
        "median queue {median} B with marking at {k} B"
    );
    // Marking off (K beyond the 1 MiB buffer): the same flows fill the queue.
    let mut off = vec![
        "examples/emulate/incast_ecn.yaml",
        "--set",
        "switch_buffer.ecn={kmin: 2MB, kmax: 2MB, pmax: 1}",
        "--sysctl",
        "net.ipv4.tcp_ecn=1",
    ];
    off.extend(cmd);
    let (report, _) = emulate_json(&off, &env);
    let port = bottleneck(&report);
    let median_off = queue(&port, "p50_ps");
    let max_off = port["max_queue_bytes"].as_f64().unwrap();
    assert!(
        median_off >= 4.0 * k && max_off >= 0.5 * 1048576.0,
        "unmarked: median {median_off} B, max {max_off} B"
    );
}

#[test]
fn strict_priority_gives_the_marked_tcp_flow_the_bottleneck() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    if !can_emulate() {
        return;
    }
    let (_, text) = emulate_json(
        &[
            "examples/emulate/priority.yaml",
            "--",
            "python3",
            "examples/emulate/two_flows.py",
        ],
        &[("FLOW_CC", "cubic"), ("FLOW_SECONDS", "3")],
    );
    // Rank 1 (10.0.0.2) marks DSCP 46; rank 2 (10.0.0.3) does not.
    let rate = |ip: &str| figure(&text, &format!("flow from {ip} goodput_bps")).unwrap();
    let (high, low) = (rate("10.0.0.2"), rate("10.0.0.3"));
    assert!(
        high >= 0.9 * (high + low),
        "marked {high} b/s, unmarked {low} b/s"
    );
}
