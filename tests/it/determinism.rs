//! Same scenario and seed: identical results for any thread count. The JSON report outside its
//! `"host"` object must be byte-identical with 1, 2 and 4 threads, in a run with cross traffic,
//! ECMP, queueing and losses (so retransmission timing is covered too).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: a failure is a panic

use crate::common;

use common::*;

const SCENARIO: &str = "\
name: determinism
seed: 7
mode: data
nic: {mtu: 1KiB, rto: 20us}
switch_buffer: {total: 48KiB}
topology:
  leaf_spine:
    leaves: 4
    spines: 2
    hosts_per_leaf: 4
    host_bandwidth: 100Gbps
    host_latency: 500ns
    fabric_bandwidth: 100Gbps
    fabric_latency: 1us
workload:
  all_to_all: {size: 16KiB}
  messages:
    - {src: h0, dst: h15, size: 256KiB, start: 1us}
    - {src: h5, dst: h15, size: 256KiB, start: 1us}
    - {src: h9, dst: h15, size: 256KiB, start: 2us}
    - {src: h12, dst: h3, size: 100000B, start: 3us}
";

fn report_without_host(threads: &str, path: &str) -> String {
    let out = fabemu(&["run", path, "--threads", threads, "--json", "-", "--quiet"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut v: serde_json::Value = match serde_json::from_slice(&out.stdout) {
        Ok(v) => v,
        Err(e) => panic!("bad JSON: {e}"),
    };
    let host = v.as_object_mut().and_then(|o| o.remove("host"));
    let partitions = host
        .as_ref()
        .and_then(|h| h.get("partitions"))
        .and_then(|p| p.as_u64());
    // The parallel path must really be exercised, on as many partitions as the binary may
    // use: it runs at most the CPUs it has (tests/it/threads.rs runs more workers than CPUs).
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get()) as u64;
    let want = threads.parse::<u64>().unwrap_or(1).min(4).min(cpus);
    assert_eq!(partitions, Some(want), "threads {threads}");
    serde_json::to_string_pretty(&v).unwrap_or_default()
}

#[test]
fn identical_reports_for_1_2_and_4_threads() {
    let path = temp_scenario("determinism.yaml", SCENARIO);
    let path = path.to_string_lossy().to_string();
    let one = report_without_host("1", &path);
    let v: serde_json::Value = serde_json::from_str(&one).unwrap_or_default();
    // The scenario must actually stress the fabric.
    assert!(v["totals"]["drops"].as_u64().unwrap_or(0) > 0, "no drops");
    assert!(v["totals"]["retransmitted_packets"].as_u64().unwrap_or(0) > 0);
    assert_eq!(v["totals"]["messages_completed"], v["totals"]["messages"]);
    for threads in ["2", "4"] {
        let other = report_without_host(threads, &path);
        assert!(one == other, "report differs with {threads} threads");
    }
}

#[test]
fn repeated_runs_are_identical_and_seed_matters() {
    let a = run_yaml(SCENARIO, 2);
    let b = run_yaml(SCENARIO, 2);
    let strip = |r: &fabemu::Report| {
        let mut v = serde_json::to_value(r).unwrap_or_default();
        v.as_object_mut().map(|o| o.remove("host"));
        v
    };
    assert_eq!(strip(&a), strip(&b));
    let c = run_yaml(&SCENARIO.replace("seed: 7", "seed: 8"), 2);
    assert_ne!(strip(&a)["messages"], strip(&c)["messages"]);
}
