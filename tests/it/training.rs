//! Training iterations from Chakra traces: ASTRA-sim's traces read as they are, and traces
//! written here through the crate's encoder whose iteration time follows by hand from the
//! times of their compute nodes and of the communication alone.
//!
//! Every expectation is exact to the picosecond. The network's part is measured by running
//! the same communication alone (the same collective written in YAML, the same message as a
//! scenario message): the executor, algorithm library and fabric are the same, and on an idle
//! symmetric star a collective or message takes the same time whenever it starts and in
//! whichever direction it goes, so compute before it only shifts it.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: a failure is a panic

use crate::common;

use std::path::{Path, PathBuf};

use common::{fabemu, run_yaml, temp_dir, temp_path, temp_scenario, TempPath};
use fabemu::Report;
use fabemu_workload::chakra::{
    encode_stream, AttrValue, AttributeProto, GlobalMetadata, Node, NodeType,
};

const US: u64 = 1_000_000;

fn fixtures() -> PathBuf {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/fixtures/astra-sim");
    assert!(
        p.is_dir(),
        "this test reads ASTRA-sim's traces from ../shared/fixtures/astra-sim (beside the \
         checkout); the folder is missing"
    );
    p
}

fn comp(id: u64, us: u64, deps: &[u64]) -> Node {
    Node {
        id,
        name: format!("comp{id}"),
        r#type: NodeType::CompNode as i32,
        data_deps: deps.to_vec(),
        duration_micros: us,
        ..Node::default()
    }
}

/// A collective node; `comm_type` 0 is All-Reduce.
fn coll(id: u64, comm_type: i64, bytes: i64, deps: &[u64]) -> Node {
    Node {
        id,
        name: format!("coll{id}"),
        r#type: NodeType::CommCollNode as i32,
        ctrl_deps: deps.to_vec(),
        attr: vec![
            AttributeProto::int("comm_type", comm_type),
            AttributeProto::int("comm_size", bytes),
        ],
        ..Node::default()
    }
}

fn p2p(id: u64, send: bool, peer: i64, bytes: i64, tag: i64, deps: &[u64]) -> Node {
    Node {
        id,
        name: format!("p2p{id}"),
        r#type: if send {
            NodeType::CommSendNode
        } else {
            NodeType::CommRecvNode
        } as i32,
        data_deps: deps.to_vec(),
        attr: vec![
            AttributeProto::int(if send { "comm_dst" } else { "comm_src" }, peer),
            AttributeProto::int("comm_size", bytes),
            AttributeProto::int("comm_tag", tag),
        ],
        ..Node::default()
    }
}

/// Writes one trace per rank under a fresh folder; returns the prefix, which deletes the folder
/// when dropped.
fn write_traces(name: &str, ranks: &[Vec<Node>]) -> TempPath {
    let prefix = temp_path("train", name);
    let dir = prefix.dir();
    let meta = GlobalMetadata {
        version: "0.0.4".into(),
        attr: Vec::new(),
    };
    for (r, nodes) in ranks.iter().enumerate() {
        let path = dir.join(format!("{name}.{r}.et"));
        std::fs::write(&path, encode_stream(&meta, nodes)).expect("write a trace");
    }
    prefix
}

fn star(n: usize) -> String {
    format!("topology:\n  star: {{hosts: {n}, bandwidth: 100Gbps, latency: 1us}}\n")
}

fn chakra_yaml(n: usize, prefix: &Path) -> String {
    format!("{}workload:\n  chakra: {}\n", star(n), prefix.display())
}

fn training(r: &Report) -> &fabemu::training::TrainingReport {
    r.training.as_ref().expect("a training section")
}

/// (start, end) of collective `i` of the YAML workload.
fn yaml_collective(r: &Report, i: usize) -> (u64, u64) {
    let c = &r.collectives[i];
    (c.start_ps.expect("started"), c.end_ps.expect("finished"))
}

#[test]
fn each_astra_sim_microbenchmark_takes_the_time_of_the_same_collective_in_yaml() {
    let root = fixtures().join("workload/microbenchmarks");
    for kind in ["all_reduce", "all_gather", "reduce_scatter", "all_to_all"] {
        for n in [4usize, 8] {
            let prefix = root.join(format!("{kind}/{n}npus_1MB/{kind}"));
            let t = run_yaml(&chakra_yaml(n, &prefix), 1);
            let y = run_yaml(
                &format!(
                    "{}workload:\n  collectives: [{{op: {kind}, size: 1MiB}}]\n",
                    star(n)
                ),
                1,
            );
            let tr = training(&t);
            assert!(t.invariants.ok, "{kind} {n}: {:?}", t.invariants.violations);
            let c = &tr.collectives[0];
            let (s, e) = yaml_collective(&y, 0);
            assert_eq!(tr.collectives.len(), 1, "{kind} {n}");
            assert_eq!(
                (c.start_ps, c.end_ps),
                (Some(s), Some(e)),
                "{kind} on {n} ranks"
            );
            assert_eq!(tr.iteration_time_ps, Some(e), "{kind} on {n} ranks");
            assert_eq!(c.size_bytes, 1 << 20);
        }
    }
}

#[test]
fn astra_sim_custom_ring_traces_run_as_sends_receives_and_reductions() {
    // The custom ring All-Reduce traces spell the ring out: 7 receive -> 7 us reduction
    // steps per rank among 14 sends and receives of 128 KiB.
    let prefix =
        fixtures().join("custom_collectives/custom_ring_allreduce_8npus_1MB/custom_allreduce");
    let r = run_yaml(&chakra_yaml(8, &prefix), 1);
    assert!(r.invariants.ok, "{:?}", r.invariants.violations);
    let t = training(&r);
    assert!(t.waiting.is_empty());
    for rank in &t.per_rank {
        assert_eq!(rank.nodes, 35);
        assert_eq!(rank.breakdown.compute_ps, 7 * 7 * US);
    }
    assert!(t.iteration_time_ps.expect("finished") > 7 * 7 * US);
}

#[test]
fn an_astra_sim_system_file_sets_how_trace_collectives_run() {
    // ASTRA-sim's HGX-H100 pair (network and system files, read as they are): the All-Reduce
    // microbenchmark with the system file runs exactly as with the settings it maps onto
    // (ring, 4 chunks, 2 in flight, local_bw_aware), and differently from the defaults
    // (one chunk), so the file is not just parsed.
    let root = fixtures();
    let prefix = root.join("workload/microbenchmarks/all_reduce/8npus_1MB/all_reduce");
    let net = root.join("network/HGX-H100-validated.yml");
    let sys = root.join("system/HGX-H100-validated.json");
    let base = format!(
        "topology:\n  astra_sim: {}\nworkload:\n  chakra: {}\n",
        net.display(),
        prefix.display()
    );
    let with_file = run_yaml(
        &format!("{base}system:\n  astra_sim: {}\n", sys.display()),
        1,
    );
    let by_hand = run_yaml(
        &format!(
            "{base}  collective_algorithms: {{all_reduce: ring, chunks: 4, chunks_in_flight: 2}}\n"
        ),
        1,
    );
    let defaults = run_yaml(&base, 1);
    let it = |r: &Report| training(r).iteration_time_ps.expect("finished");
    assert!(
        with_file.invariants.ok,
        "{:?}",
        with_file.invariants.violations
    );
    assert_eq!(it(&with_file), it(&by_hand));
    assert_ne!(it(&with_file), it(&defaults));
    // The command line says what the file holds that fabemu does not model.
    let scenario = temp_scenario(
        "hgx.yaml",
        &format!("{base}system:\n  astra_sim: {}\n", sys.display()),
    );
    let out = fabemu(&["run", scenario.to_str().unwrap(), "--quiet"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(
        err.contains("`endpoint-delay: 10` is not modelled"),
        "{err}"
    );
    assert!(err.contains("`local-mem-bw` is not read"), "{err}");
    // Every system file of the fixtures is read (the custom one is refused by name).
    for name in ["Ring_4chunks.json", "custom_collective.json"] {
        let scenario = temp_scenario(
            "sys.yaml",
            &format!(
                "{base}system:\n  astra_sim: {}\n",
                root.join("system").join(name).display()
            ),
        );
        let out = fabemu(&["run", scenario.to_str().unwrap(), "--quiet"]);
        let err = String::from_utf8_lossy(&out.stderr);
        if name == "custom_collective.json" {
            assert_eq!(out.status.code(), Some(2), "{err}");
            assert!(err.contains(&format!("{name}:4:")), "{err}");
            assert!(err.contains("all-reduce-implementation-custom"), "{err}");
            assert!(err.contains("{msccl: FILE}"), "{err}");
        } else {
            assert_eq!(out.status.code(), Some(0), "{name}: {err}");
        }
    }
}

#[test]
fn astra_sim_system_values_fabemu_does_not_run_are_refused_where_they_stand() {
    let prefix = fixtures().join("workload/microbenchmarks/all_reduce/4npus_1MB/all_reduce");
    for (json, line, says) in [
        (
            "{\n  \"all-reduce-implementation\": [\"ringg\"]\n}\n",
            2,
            "unknown value `ringg` (did you mean `ring`?)",
        ),
        (
            "{\n  \"preferred-dataset-splits\": 4,\n  \"active-chunks-per-dimensoin\": 2\n}\n",
            3,
            "did you mean `active-chunks-per-dimension`?",
        ),
        (
            "{\n  \"collective-optimization\": \"fast\"\n}\n",
            2,
            "expected one of `localBWAware`, `baseline`",
        ),
        ("{\n  \"preferred-dataset-splits\": 0\n}\n", 2, "at least 1"),
        (
            "{\n  \"endpoint-delay\": -1\n}\n",
            2,
            "expected a whole number",
        ),
        (
            "{\n  \"scheduling-policy\": \"RANDOM\"\n}\n",
            2,
            "`LIFO`, `FIFO`",
        ),
        ("[1, 2]\n", 1, "a JSON object"),
        ("{\"a\": }\n", 1, "not valid JSON"),
    ] {
        let dir = temp_dir("system");
        let sys = dir.write_beside("sys.json", json);
        let scenario = dir.write_beside(
            "s.yaml",
            &format!(
                "{}workload:\n  chakra: {}\nsystem:\n  astra_sim: sys.json\n",
                star(4),
                prefix.display()
            ),
        );
        let out = fabemu(&["run", scenario.to_str().unwrap(), "--quiet"]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{json}: {err}");
        assert!(
            err.starts_with(&format!("error: {}:{line}:", sys.display())),
            "{json}: {err}"
        );
        assert!(err.contains(says), "{json}: {err}");
    }
    // Set twice: in the file and in the scenario.
    let dir = temp_dir("system");
    dir.write_beside("sys.json", "{\"preferred-dataset-splits\": 2}");
    let scenario = dir.write_beside(
        "s.yaml",
        &format!(
            "{}workload:\n  chakra: {}\n  collective_algorithms: {{chunks: 4}}\nsystem:\n  \
             astra_sim: sys.json\n",
            star(4),
            prefix.display()
        ),
    );
    let out = fabemu(&["run", scenario.to_str().unwrap(), "--quiet"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("s.yaml:5:") && err.contains("workload.collective_algorithms.chunks"),
        "{err}"
    );
    assert!(err.contains("give it in one place"), "{err}");
}

/// A compute node Chakra marks as a CPU operator (`is_cpu_op`, a bool as Chakra's
/// converters write it).
fn cpu_comp(id: u64, us: u64, deps: &[u64]) -> Node {
    let mut n = comp(id, us, deps);
    n.attr.push(AttributeProto {
        name: "is_cpu_op".into(),
        value: Some(AttrValue::BoolVal(true)),
        ..AttributeProto::default()
    });
    n
}

#[test]
fn cpu_operators_run_beside_gpu_kernels_on_their_own_stream() {
    // Two independent 100 us compute nodes per rank: one kernel and one CPU operator overlap
    // (100 us, as ASTRA-sim runs them); two of either kind share their stream (200 us); a
    // CPU operator that waits for the kernel runs after it whatever its stream (200 us).
    let cases: [(&str, [Node; 2], u64); 4] = [
        ("gpu_cpu", [comp(1, 100, &[]), cpu_comp(2, 100, &[])], 100),
        ("gpu_gpu", [comp(1, 100, &[]), comp(2, 100, &[])], 200),
        (
            "cpu_cpu",
            [cpu_comp(1, 100, &[]), cpu_comp(2, 100, &[])],
            200,
        ),
        (
            "gpu_then_cpu",
            [comp(1, 100, &[]), cpu_comp(2, 100, &[1])],
            200,
        ),
    ];
    for (name, nodes, us) in cases {
        let prefix = write_traces(name, &[nodes.to_vec(), nodes.to_vec()]);
        let r = run_yaml(&chakra_yaml(2, &prefix), 1);
        assert!(r.invariants.ok, "{name}: {:?}", r.invariants.violations);
        let t = training(&r);
        assert_eq!(t.iteration_time_ps, Some(us * US), "{name}");
        for rank in &t.per_rank {
            // Compute time is the time some stream computes: overlap counts once.
            assert_eq!(rank.breakdown.compute_ps, us * US, "{name}");
            assert_eq!(rank.breakdown.idle_ps, 0, "{name}");
        }
        if name != "gpu_cpu" {
            continue;
        }
        // In the Perfetto trace the CPU operator has a track of its own beside the kernel's.
        let scenario = temp_scenario("cpu-op.yaml", &chakra_yaml(2, &prefix));
        let dir = temp_path("cpu-op", "out");
        let out = fabemu(&[
            "run",
            scenario.to_str().expect("utf-8 path"),
            "--quiet",
            "--out",
            dir.to_str().expect("utf-8 path"),
        ]);
        assert_eq!(out.status.code(), Some(0));
        let text = std::fs::read_to_string(dir.join("trace.json")).expect("trace.json written");
        let v: serde_json::Value = serde_json::from_str(&text).expect("valid JSON");
        let events = v["traceEvents"].as_array().expect("traceEvents");
        let tid_of = |ph: &str, name: &str| {
            events
                .iter()
                .find(|e| {
                    e["ph"] == ph
                        && e["pid"] == 0
                        && (e["name"] == name || e["args"]["name"] == name)
                })
                .map(|e| e["tid"].clone())
        };
        let cpu = tid_of("M", "cpu").expect("a cpu track");
        assert_eq!(tid_of("X", "comp2"), Some(cpu.clone()));
        assert_eq!(tid_of("X", "comp1"), Some(serde_json::json!(0)));
        assert_ne!(cpu, serde_json::json!(0));
    }
}

/// compute A -> All-Reduce -> compute B on `n` ranks.
fn compute_all_reduce_compute(n: usize) {
    let (a, b, size) = (20u64, 30u64, 1i64 << 20);
    let ranks: Vec<Vec<Node>> = (0..n)
        .map(|_| vec![comp(1, a, &[]), coll(2, 0, size, &[1]), comp(3, b, &[2])])
        .collect();
    let prefix = write_traces(&format!("car{n}"), &ranks);
    let t = run_yaml(&chakra_yaml(n, &prefix), 1);
    let y = run_yaml(
        &format!(
            "{}workload:\n  collectives: [{{op: all_reduce, size: 1MiB}}]\n",
            star(n)
        ),
        1,
    );
    let (s, e) = yaml_collective(&y, 0);
    let ar = e - s;
    let tr = training(&t);
    assert!(t.invariants.ok, "{:?}", t.invariants.violations);
    assert_eq!(tr.collectives[0].start_ps, Some(a * US));
    assert_eq!(tr.collectives[0].end_ps, Some(a * US + ar));
    assert_eq!(
        tr.iteration_time_ps,
        Some(a * US + ar + b * US),
        "{n} ranks"
    );
    for r in &tr.per_rank {
        assert_eq!(r.breakdown.compute_ps, (a + b) * US);
        assert_eq!(r.breakdown.hidden_comm_ps, 0);
        // Every rank ends the All-Reduce at its own time; what it waited is exposed, the
        // rest of the iteration (after its last node) idle.
        assert_eq!(
            r.breakdown.compute_ps + r.breakdown.exposed_comm_ps + r.breakdown.idle_ps,
            a * US + ar + b * US
        );
    }
    let k = &tr.collective_kinds[0];
    assert_eq!((k.op, k.count, k.bytes), ("all_reduce", 1, 1 << 20));
    // The critical path is the whole chain on the rank that finished the All-Reduce last.
    let cp = tr.critical_path.as_ref().expect("a critical path");
    assert_eq!((cp.nodes, cp.compute_ps, cp.comm_ps), (3, (a + b) * US, ar));
    assert_eq!(cp.top[0].time_ps, ar.max(b * US));
}

#[test]
fn compute_all_reduce_compute_on_2_ranks_is_the_sum_of_its_parts() {
    compute_all_reduce_compute(2);
}

#[test]
fn compute_all_reduce_compute_on_8_ranks_is_the_sum_of_its_parts() {
    compute_all_reduce_compute(8);
}

#[test]
fn an_all_reduce_beside_a_longer_compute_is_hidden_completely() {
    let n = 4;
    let long = 500u64; // us; the 1 MiB All-Reduce on 4 ranks at 100 Gb/s takes ~145 us
    let ranks: Vec<Vec<Node>> = (0..n)
        .map(|_| vec![comp(1, long, &[]), coll(2, 0, 1 << 20, &[])])
        .collect();
    let prefix = write_traces("hidden", &ranks);
    let t = run_yaml(&chakra_yaml(n, &prefix), 1);
    let y = run_yaml(
        &format!(
            "{}workload:\n  collectives: [{{op: all_reduce, size: 1MiB}}]\n",
            star(n)
        ),
        1,
    );
    let (s, e) = yaml_collective(&y, 0);
    let tr = training(&t);
    assert!(e - s < long * US);
    assert_eq!(tr.iteration_time_ps, Some(long * US));
    assert_eq!(tr.collectives[0].end_ps, Some(e));
    for (rank, r) in tr.per_rank.iter().enumerate() {
        let own_end = tr.collectives[0].rank_finish_ps[rank].expect("finished");
        assert_eq!(r.breakdown.compute_ps, long * US);
        assert_eq!(r.breakdown.exposed_comm_ps, 0);
        assert_eq!(r.breakdown.hidden_comm_ps, own_end);
        assert_eq!(r.breakdown.idle_ps, 0);
    }
    assert_eq!(
        t.training.as_ref().map(|t| t.overall.exposed_comm_ps),
        Some(0)
    );
}

#[test]
fn a_dependency_chain_across_send_and_recv_adds_up() {
    // Rank 0: compute A -> send 64 KiB to rank 1 ... recv the reply -> compute C.
    // Rank 1: recv from rank 0 -> compute B -> send the reply.
    let (a, b, c, size) = (10u64, 40u64, 5u64, 65536i64);
    let ranks = vec![
        vec![
            comp(1, a, &[]),
            p2p(2, true, 1, size, 7, &[1]),
            p2p(3, false, 1, size, 8, &[]),
            comp(4, c, &[3]),
        ],
        vec![
            p2p(1, false, 0, size, 7, &[]),
            comp(2, b, &[1]),
            p2p(3, true, 0, size, 8, &[2]),
        ],
    ];
    let prefix = write_traces("chain", &ranks);
    let t = run_yaml(&chakra_yaml(2, &prefix), 1);
    // The same message alone, posted at A: delivered at D, acknowledged at K.
    let m = run_yaml(
        &format!(
            "{}workload:\n  messages: [{{src: h0, dst: h1, size: 64KiB, start: {a}us}}]\n",
            star(2)
        ),
        1,
    );
    let d = m.messages[0].delivered_ps.expect("delivered");
    let k = m.messages[0].acked_ps.expect("acknowledged");
    let one_way = d - a * US;
    let tr = training(&t);
    assert!(t.invariants.ok, "{:?}", t.invariants.violations);
    // The reply leaves rank 1 at D + B on an idle network (the first message's ACK came
    // back long before), so it arrives one message time later, and rank 1's send finishes
    // when it is acknowledged, as long after posting as the first one was.
    let reply = d + b * US;
    assert!(k < reply);
    let rank1_end = reply + (k - a * US);
    let rank0_end = reply + one_way + c * US;
    assert_eq!(tr.per_rank[1].finish_ps, Some(rank1_end));
    // Rank 1 communicates from the post of the first message (A, not time zero: before, it
    // only waits for rank 0) to its arrival, and while its reply is unacknowledged.
    let b1 = &tr.per_rank[1].breakdown;
    assert_eq!(b1.exposed_comm_ps, one_way + (k - a * US));
    assert_eq!(b1.idle_ps, rank0_end - b * US - b1.exposed_comm_ps);
    assert_eq!(tr.per_rank[0].finish_ps, Some(rank0_end));
    assert_eq!(tr.iteration_time_ps, Some(rank0_end));
}

/// Runs the binary on a chakra scenario over `traces` (as written) and returns its exit code
/// and stderr.
fn run_bad(name: &str, n: usize, files: &[(usize, Vec<u8>)]) -> (Option<i32>, String) {
    let prefix = temp_path("bad", name);
    for (r, bytes) in files {
        std::fs::write(prefix.dir().join(format!("{name}.{r}.et")), bytes).expect("write");
    }
    let scenario = temp_scenario(&format!("bad-{name}.yaml"), &chakra_yaml(n, &prefix));
    let out = fabemu(&["run", scenario.to_str().expect("utf-8 path")]);
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn encoded(nodes: &[Node]) -> Vec<u8> {
    encode_stream(
        &GlobalMetadata {
            version: "0.0.4".into(),
            attr: Vec::new(),
        },
        nodes,
    )
}

#[test]
fn bad_traces_exit_2_naming_the_file_and_the_node() {
    let good = encoded(&[comp(1, 1, &[]), comp(2, 1, &[1])]);
    let mut cut = good.clone();
    cut.truncate(good.len() - 3);
    let mut varint = encoded(&[comp(1, 1, &[])]);
    varint.extend_from_slice(&[0xff; 11]);
    let mut unknown = comp(5, 1, &[]);
    unknown.r#type = 42;
    type Files = Vec<(usize, Vec<u8>)>;
    let cases: Vec<(&str, Files, String)> = vec![
        (
            "truncated",
            vec![(0, good.clone()), (1, cut)],
            "truncated.1.et: truncated at byte".into(),
        ),
        (
            "varint",
            vec![(0, good.clone()), (1, varint)],
            "varint.1.et: bad varint length prefix at byte".into(),
        ),
        (
            "unknown",
            vec![(0, good.clone()), (1, encoded(&[unknown]))],
            "unknown.1.et: node 5: unknown node type 42".into(),
        ),
        (
            "missing",
            vec![
                (0, encoded(&[comp(1, 1, &[]), comp(2, 1, &[9])])),
                (1, good.clone()),
            ],
            "missing.0.et: node 2 depends on node 9, which is not in the trace".into(),
        ),
        (
            "cycle",
            vec![
                (0, good.clone()),
                (
                    1,
                    encoded(&[comp(1, 1, &[3]), comp(2, 1, &[1]), comp(3, 1, &[2])]),
                ),
            ],
            "cycle.1.et: node 1 is on a dependency cycle: 1 -> 3 -> 2 -> 1".into(),
        ),
        (
            "huge",
            vec![
                (0, encoded(&[p2p(3, true, 1, 1 << 33, 0, &[])])),
                (1, encoded(&[p2p(3, false, 0, 1 << 33, 0, &[])])),
            ],
            "huge.0.et: node 3: comm_size 8589934592 B: a message is at most 4294967295 B".into(),
        ),
        (
            "gap",
            vec![(0, good.clone()), (2, good.clone())],
            "gap.1.et: missing: the trace of rank 1".into(),
        ),
        (
            "count",
            vec![(0, good.clone()), (1, good.clone()), (2, good.clone())],
            "count.*.et: 3 trace files (ranks 0..3) for 2 ranks".into(),
        ),
    ];
    for (name, files, want) in cases {
        let (code, err) = run_bad(name, 2, &files);
        assert_eq!(code, Some(2), "{name}: {err}");
        assert!(err.contains(&want), "{name}: expected `{want}` in:\n{err}");
        assert!(err.contains("workload.chakra"), "{name}: {err}");
    }
}

#[test]
fn a_send_without_a_matching_recv_is_a_deadlock_naming_the_waiting_nodes() {
    // Rank 0 sends tag 1, rank 1 waits for tag 2: rank 1's receive never completes and rank
    // 0's message is never taken.
    let files = vec![
        (0, encoded(&[p2p(4, true, 1, 4096, 1, &[])])),
        (
            1,
            encoded(&[p2p(6, false, 0, 4096, 2, &[]), comp(7, 1, &[6])]),
        ),
    ];
    let (code, err) = run_bad("deadlock", 2, &files);
    assert_eq!(code, Some(3), "{err}");
    assert!(err.contains("did not finish (deadlock)"), "{err}");
    assert!(
        err.contains("deadlock.1.et): 2 of 2 nodes never finished; waiting: node 6 (receive from host 0 tag 2: no message came)"),
        "{err}"
    );
    assert!(
        err.contains("a message of 4096 B from rank 0 with tag 1 was never received (no matching recv; sent by node 4)"),
        "{err}"
    );
}

fn mixed_trace(n: usize) -> TempPath {
    // Compute, an All-Reduce overlapping an independent compute, a ring of sends and
    // receives, an All-Gather at the end.
    let ranks: Vec<Vec<Node>> = (0..n as i64)
        .map(|r| {
            let next = (r + 1) % n as i64;
            let prev = (r + n as i64 - 1) % n as i64;
            vec![
                comp(1, 3, &[]),
                coll(2, 0, 256 << 10, &[1]),
                comp(3, 5, &[1]),
                p2p(4, true, next, 32 << 10, 3, &[3]),
                p2p(5, false, prev, 32 << 10, 3, &[3]),
                comp(6, 2, &[2, 5]),
                coll(7, 2, 128 << 10, &[6]),
            ]
        })
        .collect();
    write_traces(&format!("mixed{n}"), &ranks)
}

#[test]
fn json_is_identical_for_1_2_and_4_threads() {
    let prefix = mixed_trace(8);
    let yaml = chakra_yaml(8, &prefix);
    let json = |threads| {
        let mut v = serde_json::to_value(run_yaml(&yaml, threads)).expect("json");
        if let Some(o) = v.as_object_mut() {
            o.remove("host");
        }
        v.to_string()
    };
    let one = json(1);
    assert!(one.contains("\"training\""));
    assert_eq!(one, json(2));
    assert_eq!(one, json(4));
}

#[test]
fn the_same_trace_runs_at_flow_fidelity() {
    let prefix = mixed_trace(4);
    let packet = run_yaml(&chakra_yaml(4, &prefix), 1);
    let flow = run_yaml(&format!("fidelity: flow\n{}", chakra_yaml(4, &prefix)), 1);
    assert!(flow.invariants.ok, "{:?}", flow.invariants.violations);
    let p = training(&packet)
        .iteration_time_ps
        .expect("packet finished") as f64;
    let f = training(&flow).iteration_time_ps.expect("flow finished") as f64;
    // tests/it/flow.rs holds collectives and incasts on a switch to 1% of the packet level
    // (measured 0.05% at 8 MiB, up to 1% at 256 KiB); compute adds the same time at both
    // fidelities.
    assert!((p - f).abs() / p < 0.01, "packet {p} ps, flow {f} ps");
}

#[test]
fn out_dir_gets_a_perfetto_trace_with_a_compute_and_a_comm_track_per_rank() {
    let prefix = mixed_trace(4);
    let scenario = temp_scenario("perfetto.yaml", &chakra_yaml(4, &prefix));
    let dir = temp_path("perfetto", "out");
    let out = fabemu(&[
        "run",
        scenario.to_str().expect("utf-8 path"),
        "--quiet",
        "--out",
        dir.to_str().expect("utf-8 path"),
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(dir.join("trace.json")).expect("trace.json written");
    let v: serde_json::Value = serde_json::from_str(&text).expect("valid JSON");
    let events = v["traceEvents"].as_array().expect("traceEvents");
    for rank in 0..4 {
        let spans: Vec<&serde_json::Value> = events
            .iter()
            .filter(|e| e["ph"] == "X" && e["pid"] == rank)
            .collect();
        // 3 compute nodes on track 0; 2 collectives, a send and a receive on comm tracks.
        assert_eq!(spans.iter().filter(|e| e["tid"] == 0).count(), 3);
        assert_eq!(spans.iter().filter(|e| e["cat"] == "comm").count(), 4);
    }
    // The breakdown plot: a stacked bar per rank, one rectangle per part (and one in the
    // legend, drawn only when a font was found): compute alone, compute with hidden
    // communication, exposed by kind (a Chakra trace's: collective, p2p), idle.
    assert!(dir.join("breakdown.png").is_file());
    let svg = std::fs::read_to_string(dir.join("breakdown.svg")).expect("breakdown.svg written");
    let count = |colour: &str| svg.matches(&format!("fill=\"{colour}\"")).count();
    for colour in ["#1F77B4", "#2CA02C", "#C8C8C8"] {
        let n = count(colour);
        assert!(n == 4 || n == 4 + 1, "{colour}: {n}");
    }
    // Exposed collectives (pink) and messages (olive): each a part of every bar or of none;
    // no built-in model's kinds (tp red).
    let kinds: Vec<usize> = ["#E377C2", "#BCBD22"].iter().map(|c| count(c)).collect();
    assert!(
        kinds.iter().all(|&n| n == 0 || n == 4 || n == 5),
        "{kinds:?}"
    );
    assert!(kinds.iter().any(|&n| n > 0), "{kinds:?}");
    assert_eq!(count("#D62728"), 0);
}

/// Merged `[start, end)` intervals and their total length.
fn union_us(mut iv: Vec<(f64, f64)>) -> f64 {
    iv.sort_by(|a, b| a.0.total_cmp(&b.0));
    let (mut total, mut cur): (f64, Option<(f64, f64)>) = (0.0, None);
    for (a, b) in iv {
        cur = match cur {
            Some((x, y)) if a <= y => Some((x, y.max(b))),
            Some((x, y)) => {
                total += y - x;
                Some((a, b))
            }
            None => Some((a, b)),
        };
    }
    total + cur.map_or(0.0, |(x, y)| y - x)
}

#[test]
fn the_trace_shows_a_pipeline_bubble_as_waiting_as_the_breakdown_counts_it() {
    // 1F1B, 4 stages: stage s waits s forward passes for its first activation. The trace's
    // `comm` slices of a rank must cover exactly its exposed + hidden communication, its
    // compute slices its compute, and the rest of the iteration (its idle time) holds the
    // `wait` slices of receives posted before their sender sent.
    let scenario = temp_scenario(
        "bubble.yaml",
        &format!(
            "{}workload:\n  training: {{pp: 4, layers: 4, forward: 100us, micro_batches: 8, \
             activation_bytes: 1MiB}}\n",
            star(4)
        ),
    );
    let dir = temp_path("bubble", "out");
    let json = temp_path("bubble", "r.json");
    let out = fabemu(&[
        "run",
        scenario.to_str().unwrap(),
        "--quiet",
        "--out",
        dir.to_str().unwrap(),
        "--json",
        json.to_str().unwrap(),
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&*json).unwrap()).unwrap();
    let trace: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("trace.json")).unwrap()).unwrap();
    let events = trace["traceEvents"].as_array().unwrap();
    let t = &report["training"];
    let iteration_us = t["iteration_time_ps"].as_u64().unwrap() as f64 / 1e6;
    let ps = |v: &serde_json::Value| v.as_u64().unwrap() as f64 / 1e6;
    for r in t["per_rank"].as_array().unwrap() {
        let rank = r["rank"].as_u64().unwrap();
        let slices = |cat: &str| -> Vec<(f64, f64)> {
            events
                .iter()
                .filter(|e| e["ph"] == "X" && e["pid"] == rank && e["cat"] == cat)
                .map(|e| {
                    let a = e["ts"].as_f64().unwrap();
                    (a, a + e["dur"].as_f64().unwrap())
                })
                .collect()
        };
        let (comp, comm, wait) = (slices("compute"), slices("comm"), slices("wait"));
        // Within a nanosecond (the trace is in microseconds as floats).
        let close = |a: f64, b: f64, what: &str| {
            assert!(
                (a - b).abs() < 1e-3,
                "rank {rank} {what}: trace {a} us, breakdown {b} us"
            )
        };
        close(union_us(comp.clone()), ps(&r["compute_ps"]), "compute");
        close(
            union_us(comm.clone()),
            ps(&r["exposed_comm_ps"]) + ps(&r["hidden_comm_ps"]),
            "communication",
        );
        let busy = union_us(comp.iter().chain(&comm).copied().collect());
        close(iteration_us - busy, ps(&r["idle_ps"]), "idle");
        if rank > 0 {
            // The bubble before a stage's first compute: a wait for its first activation until
            // the stage before sends it (after `rank` forward passes of 100 us), then its
            // transfer as communication, then compute.
            let first_compute = comp.iter().map(|c| c.0).fold(f64::MAX, f64::min);
            let w = wait.iter().min_by(|a, b| a.0.total_cmp(&b.0)).unwrap();
            assert!(
                w.0 < 1e-3 && w.1 >= rank as f64 * 100.0 && w.1 < first_compute,
                "rank {rank}: first wait {w:?}, first compute at {first_compute} us"
            );
            assert!(
                comm.iter()
                    .any(|c| (c.0 - w.1).abs() < 1e-3 && (c.1 - first_compute).abs() < 1e-3),
                "rank {rank}: no receive from {} to {first_compute} us",
                w.1
            );
        }
    }
}

fn with_attrs(mut n: Node, attrs: &[(&str, i64)]) -> Node {
    n.attr
        .extend(attrs.iter().map(|&(k, v)| AttributeProto::int(k, v)));
    n
}

#[test]
fn compute_without_a_duration_is_timed_by_the_device_roofline() {
    // peak 1e12 FLOP/s at efficiency 0.5, memory 100 GB/s (8e11 bit/s):
    // node 1: 2e9 ops -> 4 ms of compute (its 1 MB would take 10 us): 4 ms;
    // node 2: memory load of 8e8 B -> 8 ms;
    // node 3: 1 op over 2e9 B -> memory-bound, 20 ms. In a chain: 32 ms.
    let ms = 1_000_000_000u64;
    let node = |id: u64, ty: NodeType, deps: &[u64]| Node {
        id,
        name: format!("n{id}"),
        r#type: ty as i32,
        data_deps: deps.to_vec(),
        ..Node::default()
    };
    let rank = vec![
        with_attrs(
            node(1, NodeType::CompNode, &[]),
            &[("num_ops", 2_000_000_000), ("tensor_size", 1_000_000)],
        ),
        with_attrs(
            node(2, NodeType::MemLoadNode, &[1]),
            &[("tensor_size", 800_000_000)],
        ),
        with_attrs(
            node(3, NodeType::CompNode, &[2]),
            &[("num_ops", 1), ("tensor_size", 2_000_000_000)],
        ),
    ];
    let prefix = write_traces("roofline", &[rank.clone(), rank]);
    let yaml = format!(
        "{}  device: {{peak_flops: 1e12, memory_bandwidth: 100GB/s, efficiency: 0.5}}\n",
        chakra_yaml(2, &prefix)
    );
    let t = run_yaml(&yaml, 1);
    let tr = training(&t);
    assert_eq!(tr.iteration_time_ps, Some(32 * ms));
    assert_eq!(tr.overall.compute_ps, 2 * 32 * ms);
    // Without a device model the same trace cannot be timed: a located error.
    let src = fabemu::load_str(&chakra_yaml(2, &prefix), "<test>").expect("loads");
    let e = fabemu::run_source(&src, 1, None).expect_err("refused");
    let msg = e.to_string();
    assert!(
        msg.contains("roofline.0.et: node 1:") && msg.contains("workload.device"),
        "{msg}"
    );
}

#[test]
fn communicator_groups_run_side_by_side_as_the_same_collective_on_those_hosts() {
    // Two groups of 4 on an 8-host star, each All-Reducing 1 MiB: disjoint host links and a
    // non-blocking switch, so each takes exactly the time of the YAML collective on its hosts.
    let ranks: Vec<Vec<Node>> = (0..8)
        .map(|r| {
            let mut c = coll(1, 0, 1 << 20, &[]);
            c.attr.push(AttributeProto::string(
                "pg_name",
                if r < 4 { "10" } else { "20" },
            ));
            vec![c]
        })
        .collect();
    let prefix = write_traces("groups", &ranks);
    let groups = prefix.with_file_name("groups.json");
    std::fs::write(&groups, r#"{"10": [0, 1, 2, 3], "20": [4, 5, 6, 7]}"#).expect("write");
    let yaml = format!(
        "{}workload:\n  chakra: {{traces: {}, comm_groups: {}}}\n",
        star(8),
        prefix.display(),
        groups.display()
    );
    let t = run_yaml(&yaml, 1);
    let y = run_yaml(
        &format!(
            "{}workload:\n  collectives: [{{op: all_reduce, size: 1MiB, hosts: [h4, h5, h6, h7]}}]\n",
            star(8)
        ),
        1,
    );
    let (s, e) = yaml_collective(&y, 0);
    let tr = training(&t);
    assert_eq!(tr.collectives.len(), 2);
    for c in &tr.collectives {
        assert_eq!((c.ranks, c.start_ps, c.end_ps), (4, Some(s), Some(e)));
    }
    let names: Vec<&str> = tr.communicators.iter().map(|g| g.group.as_str()).collect();
    assert_eq!(names, ["10", "20"]);
}

#[test]
fn ranks_that_disagree_on_a_collective_are_refused_naming_the_node() {
    let files = vec![
        (0, encoded(&[coll(3, 0, 4096, &[])])),
        (1, encoded(&[coll(9, 0, 8192, &[])])),
    ];
    let (code, err) = run_bad("disagree", 2, &files);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("disagree.1.et: node 9: collective #0 of rank 1 on group all is all_reduce of 8192 B, rank 0's (node 3) is all_reduce of 4096 B"),
        "{err}"
    );
}

/// The built-in model on a star of `hosts` hosts.
fn model(hosts: usize, training: &str) -> Report {
    run_yaml(
        &format!("{}workload:\n  training: {training}\n", star(hosts)),
        1,
    )
}

#[test]
fn one_f_one_b_with_4_stages_and_8_micro_batches_idles_the_bubble_fraction() {
    // 1F1B on uniform stages with negligible communication (64 B activations, ~3 us a
    // message against 3 ms per micro-batch): every stage computes m (f + b) of an iteration
    // of (m + pp - 1)(f + b), so the idle share is (pp - 1) / (m + pp - 1) = 3/11.
    let r = model(
        4,
        "{pp: 4, layers: 4, forward: 1ms, micro_batches: 8, activation_bytes: 64B}",
    );
    assert!(r.invariants.ok, "{:?}", r.invariants.violations);
    let t = training(&r);
    let it = t.iteration_time_ps.expect("finished") as f64;
    let idle = t.overall.idle_ps as f64 / (4.0 * it);
    let want = 3.0 / 11.0;
    assert!(
        (idle - want).abs() / want < 0.01,
        "bubble {idle}, want {want}"
    );
    assert_eq!(t.overall.compute_ps, 4 * 8 * 3_000 * US);
}

#[test]
fn smaller_gradient_buckets_expose_less_communication() {
    // dp 4, 8 layers of 1 MiB gradients: one 8 MiB All-Reduce after the backward pass, or
    // buckets of 2 MiB and 1 MiB that start while earlier layers still compute.
    let exposed: Vec<u64> = ["8MiB", "2MiB", "1MiB"]
        .iter()
        .map(|b| {
            let r = model(
                4,
                &format!(
                    "{{dp: 4, layers: 8, forward: 50us, backward: 100us, parameter_bytes: 1MiB, bucket: {b}}}"
                ),
            );
            assert!(r.invariants.ok, "{:?}", r.invariants.violations);
            training(&r).overall.exposed_comm_ps
        })
        .collect();
    assert!(
        exposed[0] > exposed[1] && exposed[1] > exposed[2],
        "exposed communication by bucket size: {exposed:?}"
    );
}

#[test]
fn themis_is_not_slower_than_fixed_order_inside_a_training_iteration() {
    // A 2-D fabric whose first dimension is the slow one: the fixed order sends every
    // gradient byte through it first; Themis picks the less loaded dimension per chunk.
    let run = |policy: &str| {
        let r = run_yaml(
            &format!(
                "topology:\n  multi_dim:\n    dimensions:\n      - {{kind: ring, size: 4, bandwidth: 50Gbps, latency: 500ns}}\n      - {{kind: switch, size: 2, bandwidth: 200Gbps, latency: 1us}}\nworkload:\n  training: {{dp: 8, layers: 4, forward: 50us, backward: 100us, parameter_bytes: 4MiB, bucket: 4MiB}}\n  collective_algorithms: {{all_reduce: [ring, ring], policy: {policy}, chunks: 4}}\n"
            ),
            1,
        );
        assert!(r.invariants.ok, "{:?}", r.invariants.violations);
        training(&r).iteration_time_ps.expect("finished")
    };
    let (fixed, themis) = (run("fixed"), run("themis"));
    println!("iteration: fixed {fixed} ps, themis {themis} ps");
    assert!(themis <= fixed, "themis {themis} ps, fixed {fixed} ps");
}

#[test]
fn the_model_with_every_parallelism_is_deterministic_across_threads() {
    for training in [
        "{dp: 2, tp: 2, pp: 2, layers: 4, forward: 100us, micro_batches: 4, activation_bytes: 256KiB, tp_bytes: 256KiB, parameter_bytes: 2MiB, bucket: 2MiB, optimizer: 20us}",
        "{ep: 2, tp: 2, pp: 2, mapping: [ep, pp, tp], layers: 4, forward: 100us, micro_batches: 2, activation_bytes: 64KiB, tp_bytes: 64KiB, moe_bytes: 128KiB, parameter_bytes: 1MiB}",
    ] {
        let yaml = format!("{}workload:\n  training: {training}\n", star(8));
        let json = |threads| {
            let r = run_yaml(&yaml, threads);
            assert!(r.invariants.ok, "{:?}", r.invariants.violations);
            let mut v = serde_json::to_value(r).expect("json");
            if let Some(o) = v.as_object_mut() {
                o.remove("host");
            }
            v.to_string()
        };
        let one = json(1);
        assert_eq!(one, json(2));
        assert_eq!(one, json(4));
    }
}

#[test]
fn a_model_that_does_not_fit_the_fabric_is_refused_at_its_field() {
    let path = temp_scenario(
        "model-mismatch.yaml",
        &format!(
            "{}workload:\n  training: {{dp: 3, layers: 2, forward: 1us}}\n",
            star(4)
        ),
    );
    let out = fabemu(&["run", path.to_str().expect("utf-8 path")]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("field `workload.training.dp`: dp x tp x pp = 3 x 1 x 1 = 3 ranks; the fabric has 4 hosts"),
        "{err}"
    );
}

#[test]
fn several_iterations_are_timed_one_by_one() {
    // On an idle star every iteration repeats the first exactly: the next starts after the
    // optimizer step, with the network empty again.
    let r = model(
        4,
        "{dp: 2, pp: 2, layers: 2, forward: 50us, micro_batches: 2, activation_bytes: 64KiB, parameter_bytes: 1MiB, iterations: 3, optimizer: 10us}",
    );
    assert!(r.invariants.ok, "{:?}", r.invariants.violations);
    let t = training(&r);
    assert_eq!(t.iterations_ps.len(), 3);
    assert!(t.iterations_ps.iter().all(|&x| x == t.iterations_ps[0]));
    assert_eq!(
        Some(t.iterations_ps.iter().sum::<u64>()),
        t.iteration_time_ps
    );
    assert_eq!(t.mean_iteration_ps, Some(t.iterations_ps[0]));
}

#[test]
fn the_training_example_runs() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/training.yaml");
    let src = fabemu::load_file(&path).expect("the example loads");
    let r = fabemu::run_source(&src, 1, None).expect("the example runs");
    assert!(r.invariants.ok, "{:?}", r.invariants.violations);
    let t = training(&r);
    assert_eq!(t.ranks, 16);
    // Each rank computes 8 micro-batches x 2 layers x (200 + 400) us, then its optimizer.
    assert_eq!(t.overall.compute_ps, 16 * (8 * 2 * 600 + 100) * US);
    // The critical path's credits add up to the iteration, across the ranks it visits.
    let cp = t.critical_path.as_ref().expect("a path");
    assert_eq!(
        Some(cp.compute_ps + cp.comm_ps + cp.other_ps),
        t.iteration_time_ps
    );
    assert!(cp.ranks > 1, "{cp:?}");
}

#[test]
fn moe_all_to_all_per_layer_adds_the_collective_s_own_time() {
    // dp 2 x ep 2 on a 4-host star, 2 layers, one micro-batch, nothing else communicating:
    // each layer's compute sits between a dispatch and a combine All-To-All, forward and
    // backward, all in one chain: d0 F c0 d1 F c1 | d1 B c1 d0 B c0. The iteration is the
    // compute plus the All-To-Alls' own times, measured alone in YAML on 2 hosts: one after
    // an idle gap (5 of them: the first and those after compute) and one started the moment
    // the previous finished (3: a dispatch right after a combine, which shares the links with
    // the previous one's last acknowledgements: YAML's second of two back-to-back). Exact:
    // the two expert groups use disjoint host links of the non-blocking star and a 2-rank
    // All-To-All is symmetric (both ranks finish together, so the next starts together).
    let r = model(
        4,
        "{dp: 2, ep: 2, layers: 2, forward: 100us, backward: 200us, moe_bytes: 256KiB}",
    );
    assert!(r.invariants.ok, "{:?}", r.invariants.violations);
    let y = run_yaml(
        &format!(
            "{}workload:\n  collectives: [{{op: all_to_all, size: 256KiB}}, {{op: all_to_all, size: 256KiB}}]\n",
            star(2)
        ),
        1,
    );
    let (s, e) = yaml_collective(&y, 0);
    let a2a = e - s;
    let (s2, e2) = yaml_collective(&y, 1);
    assert_eq!(s2, e, "YAML's second All-To-All starts when the first ends");
    let b2b = e2 - s2;
    let t = training(&r);
    assert_eq!(t.collectives.len(), 16);
    let mut prev_end = None;
    for (i, c) in t.collectives.iter().enumerate() {
        assert_eq!((c.op, c.size_bytes), ("all_to_all", 256 << 10));
        let (cs, ce) = (c.start_ps.unwrap(), c.end_ps.unwrap());
        let want = if i % 8 != 0 && prev_end == Some(cs) {
            b2b
        } else {
            a2a
        };
        assert_eq!(ce - cs, want, "All-To-All {i}");
        prev_end = Some(ce);
    }
    assert_eq!(t.iteration_time_ps, Some(2 * 300 * US + 5 * a2a + 3 * b2b));
    // Expert groups: ep innermost after tp (tp = 1), so neighbouring hosts.
    let hosts: Vec<(&str, &[usize])> = t
        .communicators
        .iter()
        .map(|g| (g.group.as_str(), g.hosts.as_slice()))
        .collect();
    assert_eq!(
        hosts,
        vec![("ep0.0.0", &[0usize, 1][..]), ("ep0.1.0", &[2, 3][..])]
    );
    // ep without moe_bytes is refused where the size belongs.
    let e = fabemu::run_source(
        &fabemu::load_str(
            &format!(
                "{}workload:\n  training: {{layers: 2, forward: 1us, moe_bytes: 1MiB}}\n",
                star(1)
            ),
            "<test>",
        )
        .unwrap(),
        1,
        None,
    )
    .expect_err("refused");
    assert!(e.to_string().contains("workload.training.moe_bytes"), "{e}");
}

#[test]
fn layer_flops_are_timed_by_the_device_model_and_refused_without_one_or_twice() {
    // 1e12 FLOPs at 1e15 x 0.5 FLOP/s: 2 ms forward; backward defaults to twice the FLOPs
    // (4 ms). With forward_memory 8 GB at 1000 GB/s the forward pass is memory-bound: 8 ms,
    // and the default backward moves twice the bytes: 16 ms.
    let device = "  device: {peak_flops: 1e15, memory_bandwidth: 1000GB/s, efficiency: 0.5}\n";
    let yaml = |training: &str| format!("{}workload:\n  training: {training}\n{device}", star(2));
    let ms = 1_000 * US;
    let r = run_yaml(&yaml("{dp: 2, layers: 2, forward_flops: 1e12}"), 1);
    assert_eq!(training(&r).iteration_time_ps, Some(2 * (2 + 4) * ms));
    let r = run_yaml(
        &yaml("{dp: 2, layers: 2, forward_flops: 1e12, forward_memory: 8GB}"),
        1,
    );
    assert_eq!(training(&r).iteration_time_ps, Some(2 * (8 + 16) * ms));
    let r = run_yaml(
        &yaml("{dp: 2, layers: 2, forward_flops: 1e12, backward_flops: 5e11}"),
        1,
    );
    assert_eq!(training(&r).iteration_time_ps, Some(2 * (2 + 1) * ms));
    // Both, neither, and FLOPs without a device: exit 2 at the field, with line and column.
    let cases = [
        (
            format!(
                "{}workload:\n  training: {{layers: 2, forward: 1us, forward_flops: 1e9}}\n{device}",
                star(1)
            ),
            "workload.training.forward_flops",
            "not both",
        ),
        (
            format!("{}workload:\n  training: {{layers: 2}}\n{device}", star(1)),
            "workload.training.forward",
            "`forward_flops`",
        ),
        (
            format!(
                "{}workload:\n  training: {{layers: 2, forward: 1us, backward: 1us, backward_flops: 1e9}}\n{device}",
                star(1)
            ),
            "workload.training.backward_flops",
            "not both",
        ),
        (
            format!(
                "{}workload:\n  training:\n    layers: 2\n    forward_flops: 1e9\n",
                star(1)
            ),
            "workload.training.forward_flops",
            "needs `workload.device`",
        ),
    ];
    for (i, (yaml, field, what)) in cases.iter().enumerate() {
        let path = temp_scenario(&format!("flops-bad-{i}.yaml"), yaml);
        let out = fabemu(&["run", path.to_str().expect("utf-8 path")]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(err.contains(&format!("field `{field}`")), "{err}");
        assert!(err.contains(what), "{err}");
        assert!(err.contains("flops-bad"), "{err}");
    }
}

#[test]
fn the_mapping_option_says_which_hosts_each_group_spans() {
    // 8 hosts, dp 2 x tp 2 x pp 2. Default (tp innermost, then dp, then pp): tp groups are
    // neighbouring hosts, dp groups stride 2, stages stride 4. With [pp, dp, tp]: pp stride 1,
    // dp stride 2, tp stride 4.
    let groups = |mapping: &str| {
        let r = model(
            8,
            &format!(
                "{{dp: 2, tp: 2, pp: 2, layers: 2, forward: 10us, activation_bytes: 4KiB, tp_bytes: 4KiB, parameter_bytes: 64KiB{mapping}}}"
            ),
        );
        assert!(r.invariants.ok, "{:?}", r.invariants.violations);
        training(&r)
            .communicators
            .iter()
            .map(|g| (g.group.clone(), g.hosts.clone()))
            .collect::<std::collections::BTreeMap<_, _>>()
    };
    let g = groups("");
    assert_eq!(g["tp0.0"], vec![0, 1]);
    assert_eq!(g["tp1.1"], vec![6, 7]);
    assert_eq!(g["dp0.1"], vec![1, 3]);
    assert_eq!(g["dp1.0"], vec![4, 6]);
    let g = groups(", mapping: [pp, dp, tp]");
    assert_eq!(g["tp0.0"], vec![0, 4]);
    assert_eq!(g["tp1.1"], vec![3, 7]);
    assert_eq!(g["dp0.1"], vec![4, 6]);
    assert_eq!(g["dp1.0"], vec![1, 3]);
    // Left-out dimensions follow in the default order: [dp] = [dp, tp, ep, pp].
    let g = groups(", mapping: [dp]");
    assert_eq!(g["dp0.0"], vec![0, 1]);
    assert_eq!(g["tp0.0"], vec![0, 2]);
    assert_eq!(g["tp1.0"], vec![4, 6]);
}

#[test]
fn mapping_puts_a_group_on_the_fabric_dimension_it_names() {
    // A 4 x 2 multi-dimensional fabric (dimension 0: rings of 4, dimension 1: switches of
    // 2), dp 4 x tp 2, only the data-parallel gradient All-Reduce: with [dp, tp] each dp
    // group is one ring of dimension 0 and dimension 1 carries nothing; with the default
    // (tp innermost) the dp groups stride 2 and their traffic crosses dimension 1.
    let dim_bytes = |mapping: &str| {
        let r = run_yaml(
            &format!(
                "topology:\n  multi_dim:\n    dimensions:\n      - {{kind: ring, size: 4, bandwidth: 100Gbps, latency: 500ns}}\n      - {{kind: switch, size: 2, bandwidth: 100Gbps, latency: 1us}}\nworkload:\n  training: {{dp: 4, tp: 2, layers: 2, forward: 10us, parameter_bytes: 256KiB{mapping}}}\n"
            ),
            1,
        );
        assert!(r.invariants.ok, "{:?}", r.invariants.violations);
        let t = training(&r);
        assert!(t.iteration_time_ps.is_some());
        let by = |c: &str| {
            r.link_classes
                .iter()
                .find(|x| x.class == c)
                .map_or(0, |x| x.tx_wire_bytes)
        };
        (by("dim0"), by("dim1"), t.communicators[0].hosts.clone())
    };
    let (d0, d1, hosts) = dim_bytes(", mapping: [dp, tp]");
    assert_eq!(hosts, vec![0, 1, 2, 3]);
    assert!(d0 > 0 && d1 == 0, "dim0 {d0} B, dim1 {d1} B");
    let (_, d1, hosts) = dim_bytes("");
    assert_eq!(hosts, vec![0, 2, 4, 6]);
    assert!(d1 > 0, "dim1 {d1} B");
}

#[test]
fn the_critical_path_crosses_ranks_through_collectives_and_receives() {
    // Rank 0 computes 100 us, rank 1 only 10 us, then both All-Reduce and compute 20 us: the
    // All-Reduce could not finish before rank 0 joined, so the path goes from rank 1's (or
    // rank 0's) last compute through the All-Reduce to rank 0's 100 us, not to rank 1's
    // 10 us. Then, in a second run, a send/recv: rank 0 computes 300 us and sends 64 KiB to
    // rank 1, which posts its receive after 5 us and computes 50 us once the message is in:
    // the path crosses from rank 1 to rank 0.
    let coll_ranks = vec![
        vec![
            comp(1, 100, &[]),
            coll(2, 0, 1 << 20, &[1]),
            comp(3, 20, &[2]),
        ],
        vec![
            comp(1, 10, &[]),
            coll(2, 0, 1 << 20, &[1]),
            comp(3, 20, &[2]),
        ],
    ];
    let prefix = write_traces("cp-coll", &coll_ranks);
    let r = run_yaml(&chakra_yaml(2, &prefix), 1);
    let t = training(&r);
    let it = t.iteration_time_ps.expect("finished");
    let cp = t.critical_path.as_ref().expect("a path");
    assert_eq!(cp.nodes, 3, "{cp:?}");
    assert_eq!(cp.compute_ps, 120 * US, "{cp:?}");
    assert_eq!(cp.compute_ps + cp.comm_ps + cp.other_ps, it);
    assert!(
        cp.top
            .iter()
            .any(|p| (p.rank, p.node, p.time_ps) == (0, 1, 100 * US)),
        "{cp:?}"
    );
    let p2p_ranks = vec![
        vec![comp(1, 300, &[]), p2p(2, true, 1, 65536, 7, &[1])],
        vec![
            comp(1, 5, &[]),
            p2p(2, false, 0, 65536, 7, &[1]),
            comp(3, 50, &[2]),
        ],
    ];
    let prefix = write_traces("cp-p2p", &p2p_ranks);
    let r = run_yaml(&chakra_yaml(2, &prefix), 1);
    let t = training(&r);
    let it = t.iteration_time_ps.expect("finished");
    let cp = t.critical_path.as_ref().expect("a path");
    assert_eq!((cp.rank, cp.ranks, cp.nodes), (1, 2, 3), "{cp:?}");
    assert_eq!(cp.compute_ps, 350 * US, "{cp:?}");
    // The receive is credited from the send's post (300 us) to its arrival: the message.
    assert_eq!(cp.comm_ps, it - 350 * US, "{cp:?}");
    assert_eq!(cp.other_ps, 0);
    assert_eq!((cp.top[0].rank, cp.top[0].node), (0, 1));
    assert_eq!(cp.by_name[0].name, "comp#");
}

#[test]
fn more_collectives_than_one_host_may_hold_run_when_their_groups_are_disjoint() {
    // 16 hosts, tp 2 x dp 8, 16 layers, 9 micro-batches: each of the 8 tensor-parallel groups
    // runs 9 x 16 x 2 = 288 All-Reduces, 2304 in all, beyond the 2048 job numbers a host
    // has; disjoint groups share numbers, so each host uses 288 + its gradient buckets.
    let r = model(
        16,
        "{dp: 8, tp: 2, layers: 16, forward: 1us, micro_batches: 9, tp_bytes: 1KiB, parameter_bytes: 4KiB, bucket: 64KiB}",
    );
    assert!(r.invariants.ok, "{:?}", r.invariants.violations);
    let t = training(&r);
    assert!(t.iteration_time_ps.is_some(), "{:?}", t.waiting);
    let tp = t
        .collectives
        .iter()
        .filter(|c| c.ranks == 2 && c.size_bytes == 1024)
        .count();
    assert_eq!(tp, 2304);
    assert!(t.collectives.iter().all(|c| c.end_ps.is_some()));
}

#[test]
fn ring_all_reduces_of_more_than_2_pow_26_steps_in_all_build() {
    // dp 1024 on a star of 1024 hosts, 17 layers of 4 KiB gradients in 4 KiB buckets: 17 ring
    // All-Reduces over 1024 ranks of 4 x 1024 x 1023 steps each, 71 M in all, over the 2^26
    // steps a run may hold as lists (about 4.5 GB). A flat ring's steps are generated as it
    // runs, so the workload builds with none listed.
    let hosts = 1024;
    let yaml = format!(
        "{}workload:\n  training: {{dp: {hosts}, layers: 17, forward: 1us, parameter_bytes: 4KiB, bucket: 4KiB}}\n",
        star(hosts)
    );
    let src = fabemu::load_str(&yaml, "<many steps>").unwrap();
    let world = fabemu::world::build(&src).unwrap();
    let t = world.training.expect("a training workload");
    assert_eq!(t.collectives.len(), 17);
    assert!(t.collectives.iter().all(|c| c.ranks == hosts));
    let steps: u64 = t
        .collectives
        .iter()
        .map(|c| 4 * c.ranks as u64 * (c.ranks as u64 - 1))
        .sum();
    assert!(steps > 1 << 26, "{steps} steps");
}

/// A star of `hosts` hosts on zero-latency 100 Gb/s links: a message of a few bytes takes
/// tens of nanoseconds, so a schedule's time is its compute to well within 0.1%.
fn fast_star(hosts: usize) -> String {
    format!("topology:\n  star: {{hosts: {hosts}, bandwidth: 100Gbps, latency: 0ns}}\n")
}

#[test]
fn pipeline_stages_keep_their_dependencies_without_activation_bytes() {
    // pp 4, one layer per stage, 8 micro-batches, forward 100 us, backward 200 us, and no
    // activation size given: the stages still wait for each other. 1F1B takes
    // (m + p - 1)(f + b) = 11 x 300 us = 3300 us, the first stage idles (p - 1)(f + b).
    // Messages on the critical path (at most 2(m + p - 1) = 22 of them) are empty frames of
    // well under 100 ns each at 100 Gb/s: 2.2 us at most, under the 0.1% allowed.
    let r = run_yaml(
        &format!(
            "{}workload:\n  training: {{pp: 4, layers: 4, forward: 100us, backward: 200us, micro_batches: 8}}\n",
            fast_star(4)
        ),
        1,
    );
    assert!(r.invariants.ok, "{:?}", r.invariants.violations);
    let t = training(&r);
    let it = t.iteration_time_ps.expect("finished") as f64;
    let want = (8.0 + 4.0 - 1.0) * 300.0 * US as f64;
    assert!(
        (it - want).abs() / want < 1e-3,
        "iteration {it} ps, want {want}"
    );
    assert_eq!(t.overall.compute_ps, 4 * 8 * 300 * US);
}

#[test]
fn a_communicator_s_gradient_buckets_run_one_after_another_as_nccl_runs_them() {
    // dp 2, 4 layers of 8 MiB gradients in 8 MiB buckets: the buckets are ready 20 us apart
    // but each All-Reduce takes ~0.7 ms. On one stream per communicator (the default) each
    // runs alone and takes exactly the time of the same All-Reduce run back to back in YAML;
    // with concurrent streams the first shares the links with the three after it.
    let model =
        "{dp: 2, layers: 4, forward: 10us, backward: 20us, parameter_bytes: 8MiB, bucket: 8MiB}";
    let run = |streams: &str| {
        let r = run_yaml(
            &format!(
                "{}workload:\n  training: {model}\n  collective_algorithms: {{streams: {streams}}}\n",
                fast_star(2)
            ),
            1,
        );
        assert!(r.invariants.ok, "{:?}", r.invariants.violations);
        let t = training(&r).clone();
        t.collectives
            .iter()
            .map(|c| c.end_ps.expect("finished") - c.start_ps.expect("started"))
            .collect::<Vec<u64>>()
    };
    let y = run_yaml(
        &format!(
            "{}workload:\n  collectives: [{{op: all_reduce, size: 8MiB}}, {{op: all_reduce, size: 8MiB}}]\n",
            fast_star(2)
        ),
        1,
    );
    let yaml: Vec<u64> = (0..2)
        .map(|i| {
            let (s, e) = yaml_collective(&y, i);
            e - s
        })
        .collect();
    let in_order = run("per_communicator");
    assert_eq!(in_order.len(), 4);
    assert_eq!(in_order[0], yaml[0], "the first bucket runs alone");
    for &d in &in_order[1..] {
        assert_eq!(
            d, yaml[1],
            "later buckets run back to back, as YAML's second"
        );
    }
    // A 2-rank ring All-Reduce moves 2(n-1)/n S = S = 8 MiB per rank: 671 us at 100 Gb/s,
    // plus headers and acknowledgements (under 5%).
    let ideal = (8u64 << 20) as f64 * 8.0 / 100e9 * 1e12;
    let first = in_order[0] as f64;
    assert!(
        first >= ideal && first < ideal * 1.05,
        "{first} ps, ideal {ideal}"
    );
    let concurrent = run("concurrent");
    assert!(
        concurrent[0] as f64 > 1.5 * first,
        "concurrent buckets share the links: first {} ps, alone {first}",
        concurrent[0]
    );
}

#[test]
fn a_layer_s_gradients_split_over_buckets_of_the_bucket_size() {
    // 75 MiB of gradients per layer in 25 MiB buckets: three All-Reduces per layer; 10 MiB
    // per layer in 16 MiB buckets over 2 layers: 16 MiB when the second layer's are ready,
    // then the 4 MiB left.
    for (spec, want) in [
        (
            "{dp: 2, layers: 1, forward: 10us, parameter_bytes: 75MiB, bucket: 25MiB}",
            vec![25u64 << 20; 3],
        ),
        (
            "{dp: 2, layers: 2, forward: 10us, parameter_bytes: 10MiB, bucket: 16MiB}",
            vec![16 << 20, 4 << 20],
        ),
    ] {
        let r = model(2, spec);
        assert!(r.invariants.ok, "{:?}", r.invariants.violations);
        let sizes: Vec<u64> = training(&r)
            .collectives
            .iter()
            .map(|c| c.size_bytes)
            .collect();
        assert_eq!(sizes, want, "{spec}");
    }
}

#[test]
fn model_errors_name_the_field_to_change() {
    for (hosts, spec, field, text) in [
        (
            4,
            "{dp: 4, layers: 2, forward: 1us, iterations: 0}",
            "iterations",
            "must be at least 1",
        ),
        (
            4,
            "{pp: 8, layers: 8, forward: 1us}",
            "pp",
            "dp x tp x pp = 1 x 1 x 8 = 8 ranks",
        ),
        (
            4,
            "{dp: 2, pp: 4, layers: 8, forward: 1us}",
            "pp",
            "= 8 ranks; the fabric has 4 hosts",
        ),
        (
            4,
            "{dp: 2, ep: 3, layers: 2, forward: 1us}",
            "ep",
            "dp x tp x pp x ep = 2 x 1 x 1 x 3",
        ),
        (
            4,
            "{dp: 4, layers: 1000000000000, forward: 1us}",
            "layers",
            "more than 2^24 nodes",
        ),
        (
            4,
            "{dp: 4, layers: 2, forward: 1us, iterations: 1000000000}",
            "iterations",
            "more than 2^24 nodes",
        ),
    ] {
        let path = temp_scenario(
            "model-field.yaml",
            &format!("{}workload:\n  training: {spec}\n", star(hosts)),
        );
        let out = fabemu(&["run", path.to_str().expect("utf-8 path")]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{spec}: {err}");
        let want = format!("field `workload.training.{field}`: ");
        assert!(err.contains(&want) && err.contains(text), "{spec}: {err}");
    }
}

/// A training run without `until` goes to the end of its iteration, as a Megatron-LM run goes
/// until its iterations are done: one rank of 4 layers of 2 s forward and 4 s backward takes
/// 24 s, past the 10 s other scenarios stop at. With `until` the scenario's bound holds (the
/// run stops there and names it), and a run still busy at the one-hour guard stops there and
/// says so.
#[test]
fn a_training_run_without_until_runs_to_its_end_under_a_guard() {
    let r = model(1, "{layers: 4, forward: 2s, backward: 4s}");
    assert!(r.invariants.ok, "{:?}", r.invariants.violations);
    assert_eq!(training(&r).iteration_time_ps, Some(24 * 1_000_000 * US));

    let run = |name: &str, yaml: String| {
        let path = temp_scenario(name, &yaml);
        let o = fabemu(&["run", &path.to_string_lossy(), "--quiet"]);
        (
            o.status.code(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    };
    let (code, err) = run(
        "until_set.yaml",
        format!(
            "{}until: 10s\nworkload:\n  training: {{layers: 4, forward: 2s, backward: 4s}}\n",
            star(1)
        ),
    );
    assert_eq!(code, Some(3), "{err}");
    assert!(
        err.contains("did not finish (the run reached `until` = 10"),
        "{err}"
    );
    let (code, err) = run(
        "until_guard.yaml",
        format!(
            "{}workload:\n  training: {{layers: 1, forward: 7200s, backward: 1s}}\n",
            star(1)
        ),
    );
    assert_eq!(code, Some(3), "{err}");
    assert!(
        err.contains("the bound of a run without `until`, with work pending; set `until`"),
        "{err}"
    );
}
