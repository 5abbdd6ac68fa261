//! Fuzzing every parser of user input with generated inputs, run by the ordinary test command:
//! the scenario YAML, `--set` overrides, Chakra traces, MSCCL XML and ASTRA-sim network
//! files. Each takes arbitrary input (random bytes or text) and structure-aware input (valid
//! files of the repository with bytes removed, tokens that parsers find hard inserted, or
//! documents built from their grammar with hostile values). The property: no panic, an answer
//! (accepted or refused) within [`CASE_LIMIT`], and the process's peak memory under
//! [`MEMORY_LIMIT_KB`] at the end.
//!
//! proptest rather than cargo-fuzz: cargo-fuzz needs a nightly toolchain, and the machines
//! this project is built and tested on carry only the stable one; these run everywhere with
//! `cargo test`, a fixed number of cases each (and shrink a failure to a small input).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: a failure is a panic

use std::path::Path;
use std::time::{Duration, Instant};

use fabemu::scenario::{load_str, load_str_with, Override};
use fabemu_workload::chakra::{encode_stream, AttributeProto, GlobalMetadata, Node};
use proptest::prelude::*;

/// The longest one input may take to be accepted or refused (an optimized build; a debug
/// build is about ten times slower).
const CASE_LIMIT: Duration = Duration::from_secs(if cfg!(debug_assertions) { 10 } else { 1 });

/// Peak resident memory of the whole test process at most (KiB).
const MEMORY_LIMIT_KB: u64 = 500_000;

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: 256,
        // A failure is shrunk and printed; nothing is written into the source tree.
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// Runs `f`, checks it took at most [`CASE_LIMIT`], and that the process's peak memory stays
/// bounded.
fn bounded<T>(what: &str, f: impl FnOnce() -> T) -> T {
    let t = Instant::now();
    let r = f();
    let took = t.elapsed();
    assert!(took <= CASE_LIMIT, "{what} took {took:?}");
    if let Some(kb) = peak_kb() {
        assert!(kb <= MEMORY_LIMIT_KB, "{what}: peak memory {kb} KiB");
    }
    r
}

/// The process's peak resident set (VmHWM) in KiB, where /proc has it.
fn peak_kb() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    s.lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))?
        .trim()
        .trim_end_matches(" kB")
        .trim()
        .parse()
        .ok()
}

/// Tokens that parsers find hard: YAML structure, anchors, tags, huge and odd numbers and
/// units, XML structure.
const TOKENS: &[&str] = &[
    "[",
    "]",
    "{",
    "}",
    ": ",
    "- ",
    "&a ",
    "*a",
    "!t ",
    "\t",
    "~",
    "'",
    "\"",
    "#",
    "---\n",
    "\n",
    "-1",
    "0",
    "1e999",
    "18446744073709551616",
    "9223372036854775808B",
    "0ps",
    "1ps",
    "1e12s",
    "NaN",
    ".inf",
    "0bps",
    "4097B",
    "<",
    ">",
    "/>",
    "=\"",
    "&amp;",
    "<!--",
    "\u{0}",
    "é",
];

/// A generated ASTRA-sim dimension: kind, NPUs, bandwidth and latency as written.
type Dim = (&'static str, i64, String, String);

fn mutate(base: &[u8], edits: &[(usize, usize, usize)]) -> Vec<u8> {
    let mut v = base.to_vec();
    for &(at, del, tok) in edits {
        let at = at % (v.len() + 1);
        let end = (at + del % 16).min(v.len());
        let t = TOKENS[tok % TOKENS.len()].as_bytes();
        v.splice(at..end, t.iter().copied());
    }
    v
}

/// Up to 8 edits: (where, how many bytes to remove, which token to insert).
fn edits() -> impl Strategy<Value = Vec<(usize, usize, usize)>> {
    prop::collection::vec((any::<usize>(), any::<usize>(), any::<usize>()), 1..8)
}

fn repo(path: &str) -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(path)).unwrap()
}

/// The examples that a mutation starts from (small ones: each is parsed and validated).
fn example(i: usize) -> String {
    let names = [
        "examples/quickstart.yaml",
        "examples/star.yaml",
        "examples/leaf_spine.yaml",
        "examples/dcqcn.yaml",
        "examples/training.yaml",
        "examples/msccl.yaml",
        "examples/hierarchical.yaml",
        "examples/astra_sim.yaml",
    ];
    repo(names[i % names.len()])
}

/// Loads a scenario text as the command line does, from the examples' folder (so relative
/// files resolve).
fn load(text: &str) {
    let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/fuzz.yaml");
    let _ = load_str(text, &file.display().to_string());
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn scenario_yaml_of_random_text(text in "\\PC{0,400}") {
        bounded("scenario", || load(&text));
    }

    #[test]
    fn scenario_yaml_of_mutated_examples(i in any::<usize>(), e in edits()) {
        let text = mutate(example(i).as_bytes(), &e);
        let text = String::from_utf8_lossy(&text);
        bounded("scenario", || load(&text));
    }

    #[test]
    fn overrides_of_random_text(set in "\\PC{0,200}") {
        let base = repo("examples/quickstart.yaml");
        bounded("--set", || {
            if let Ok(o) = Override::parse(&set) {
                let _ = load_str_with(&base, "quickstart.yaml", vec![o]);
            }
        });
    }

    #[test]
    fn overrides_of_field_paths_and_hostile_values(
        path in prop::collection::vec(
            prop_oneof![
                Just("workload".to_string()), Just("nic".to_string()), Just("cc".to_string()),
                Just("topology".to_string()), Just("star".to_string()), Just("hosts".to_string()),
                Just("faults".to_string()), Just("messages".to_string()),
                Just("collectives".to_string()), Just("size".to_string()),
                Just("until".to_string()), Just("seed".to_string()),
                Just("switch_buffer".to_string()), Just("dcqcn".to_string()),
                (0usize..1_000_000).prop_map(|i| format!("[{i}]")),
                "[a-z_]{1,12}",
            ],
            1..8,
        ),
        value in prop_oneof![
            (0usize..TOKENS.len()).prop_map(|t| TOKENS[t].to_string()),
            "\\PC{0,40}",
            Just("{dcqcn: {rate_ai: 0bps}}".to_string()),
            Just("[{link: [h0, switch0], down: true, period: 1ps}]".to_string()),
        ],
    ) {
        let base = repo("examples/quickstart.yaml");
        let set = format!("{}={value}", path.join(".").replace(".[", "["));
        bounded("--set", || {
            if let Ok(o) = Override::parse(&set) {
                let _ = load_str_with(&base, "quickstart.yaml", vec![o]);
            }
        });
    }

    #[test]
    fn chakra_of_random_bytes(bytes in prop::collection::vec(any::<u8>(), 0..2000)) {
        bounded("chakra", || {
            let _ = fabemu_workload::RankTrace::decode(&bytes, "fuzz.0.et");
        });
    }

    #[test]
    fn chakra_of_generated_nodes(
        nodes in prop::collection::vec(
            (
                0u64..64,
                -1i32..12,
                prop::collection::vec(0u64..80, 0..6),
                prop::collection::vec(
                    (
                        prop_oneof![
                            Just("comm_type"), Just("comm_size"), Just("comm_src"),
                            Just("comm_dst"), Just("comm_tag"), Just("is_cpu_op"),
                            Just("num_ops"), Just("tensor_size"), Just("pg_name"),
                        ],
                        prop_oneof![any::<i64>(), -2i64..12, Just(4097), Just(0)],
                    ),
                    0..5,
                ),
                any::<u64>(),
            ),
            0..40,
        ),
        cut in any::<usize>(),
    ) {
        let nodes: Vec<Node> = nodes
            .into_iter()
            .map(|(id, ty, deps, attrs, dur)| Node {
                id,
                name: format!("n{id}"),
                r#type: ty,
                data_deps: deps,
                duration_micros: dur,
                attr: attrs
                    .into_iter()
                    .map(|(k, v)| AttributeProto::int(k, v))
                    .collect(),
                ..Node::default()
            })
            .collect();
        let meta = GlobalMetadata { version: "0.0.4".into(), attr: Vec::new() };
        let bytes = encode_stream(&meta, &nodes);
        bounded("chakra", || {
            let _ = fabemu_workload::RankTrace::decode(&bytes, "fuzz.0.et");
            // And the stream cut anywhere.
            let _ = fabemu_workload::RankTrace::decode(
                &bytes[..cut % (bytes.len() + 1)],
                "fuzz.0.et",
            );
        });
    }

    #[test]
    fn msccl_of_random_text(text in "\\PC{0,400}") {
        bounded("msccl", || {
            let _ = fabemu_collectives::msccl::Msccl::parse(&text);
        });
    }

    #[test]
    fn msccl_of_a_mutated_algorithm(e in edits(), ranks in 1usize..9, count in 0usize..4096) {
        let text = mutate(repo("examples/msccl/fused_ring_allreduce_4.xml").as_bytes(), &e);
        let text = String::from_utf8_lossy(&text);
        bounded("msccl", || {
            if let Ok(m) = fabemu_collectives::msccl::Msccl::parse(&text) {
                let _ = m.compile(fabemu_collectives::Collective::AllReduce, ranks, count);
            }
        });
    }

    #[test]
    fn astra_sim_network_of_random_text(text in "\\PC{0,300}") {
        bounded("astra-sim", || {
            let _ = fabemu_topologies::astra_sim::parse(&text);
        });
    }

    #[test]
    fn astra_sim_network_of_generated_files(
        dims in prop::collection::vec(
            (
                prop_oneof![
                    Just("Ring"), Just("FullyConnected"), Just("Switch"), Just("ring"),
                    Just("Torus"), Just("\"\""),
                ],
                prop_oneof![0i64..10, any::<i64>()],
                prop_oneof![Just("400.0".to_string()), Just("-1".to_string()),
                    Just("0".to_string()), Just("1e999".to_string()), "[0-9.e]{1,8}"],
                prop_oneof![Just("936.25".to_string()), Just("-5".to_string()),
                    Just("NaN".to_string()), "[0-9.e]{1,8}"],
            ),
            0..5,
        ),
        drop in 0usize..5,
    ) {
        let list = |f: &dyn Fn(&Dim) -> String| {
            let mut v: Vec<String> = dims.iter().map(f).collect();
            if drop < v.len() && drop % 2 == 1 {
                v.remove(drop);
            }
            format!("[{}]", v.join(", "))
        };
        let text = format!(
            "topology: {}\nnpus_count: {}\nbandwidth: {}\nlatency: {}\n",
            list(&|d| d.0.to_string()),
            list(&|d| d.1.to_string()),
            list(&|d| d.2.clone()),
            list(&|d| d.3.clone()),
        );
        bounded("astra-sim", || {
            if let Ok(n) = fabemu_topologies::astra_sim::parse(&text) {
                // Building allocates per NPU: only fabrics of a sensible size.
                if n.npus().is_some_and(|p| p <= 4096) {
                    let _ = n.build();
                }
            }
        });
    }
}
