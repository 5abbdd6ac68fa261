//! Malformed scenarios: every file under `tests/malformed/` must make `fabemu run` fail
//! cleanly — exit code 2, one `error: FILE:LINE:COL: field `PATH`: MESSAGE` line on stderr
//! that names the problem, and never a panic.
//!
//! The table [`CASES`] says, for each file, which fragments the message must contain and on
//! which line of the file the error must be reported (when the error has a position). A file
//! in the directory without an entry in the table fails the test, and so does an entry
//! without a file.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: a failure is a panic

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// What the error for one malformed file must say.
struct Case {
    /// File name under `tests/malformed/`.
    file: &'static str,
    /// The 1-based line the error must point at, or `None` when the error must have no
    /// position (the file cannot be read, or the problem is the document as a whole).
    line: Option<usize>,
    /// Fragments stderr must contain (field path, key words of the message).
    expect: &'static [&'static str],
}

const fn case(file: &'static str, line: Option<usize>, expect: &'static [&'static str]) -> Case {
    Case { file, line, expect }
}

const CASES: &[Case] = &[
    // --- Not a YAML mapping at all.
    case(
        "invalid_yaml_syntax.yaml",
        Some(3),
        &["did not find expected ',' or ']'", "flow sequence"],
    ),
    case(
        "empty_file.yaml",
        None,
        &["the scenario is empty", "workload"],
    ),
    case(
        "top_level_list.yaml",
        Some(2),
        &["invalid type: sequence", "mapping of scenario fields"],
    ),
    case(
        "multiple_documents.yaml",
        Some(6),
        &["more than one document", "a second one starts here"],
    ),
    case("tab_indentation.yaml", Some(4), &["indented with a tab"]),
    case("duplicate_key.yaml", Some(5), &["duplicate field `hosts`"]),
    case(
        "non_utf8.yaml",
        None,
        &["cannot read the scenario", "UTF-8"],
    ),
    case(
        "binary_garbage.yaml",
        None,
        &["cannot read the scenario", "UTF-8"],
    ),
    case(
        "deep_nesting.yaml",
        Some(2),
        &["nested more than 128 levels deep"],
    ),
    // --- Fields: unknown, missing, wrong type.
    case(
        "unknown_top_level_field.yaml",
        Some(2),
        &["unknown field `sed`", "`seed`"],
    ),
    case(
        "unknown_field_in_link.yaml",
        Some(7),
        &["field `links[0]`", "unknown field `delay`", "`latency`"],
    ),
    case(
        "workload_unknown_field.yaml",
        Some(8),
        &[
            "field `workload`",
            "unknown field `alltoall`",
            "`all_to_all`",
        ],
    ),
    case(
        "missing_workload.yaml",
        Some(2),
        &["missing field `workload`"],
    ),
    case(
        "message_missing_size.yaml",
        Some(7),
        &["field `workload.messages[0]`", "missing field `size`"],
    ),
    case(
        "no_hosts.yaml",
        Some(2),
        &["field `hosts`", "no hosts", "topology"],
    ),
    case(
        "seed_not_a_number.yaml",
        Some(2),
        &["field `seed`", "invalid type", "\"abc\"", "u64"],
    ),
    case(
        "hosts_not_a_list.yaml",
        Some(2),
        &["field `hosts`", "invalid type", "expected a sequence"],
    ),
    case(
        "workload_is_a_list.yaml",
        Some(6),
        &[
            "field `workload`",
            "invalid type: sequence",
            "expected a mapping",
        ],
    ),
    case(
        "star_negative_hosts.yaml",
        Some(4),
        &["field `topology.star.hosts`", "`-3`", "usize"],
    ),
    case(
        "unknown_mode.yaml",
        Some(2),
        &[
            "field `mode`",
            "unknown variant `fast`",
            "`data` or `timing`",
        ],
    ),
    // --- Quantities and their units.
    case(
        "bare_number_bandwidth.yaml",
        Some(6),
        &["field `links[0].bandwidth`", "`100` has no unit", "Gbps"],
    ),
    case(
        "bare_number_latency.yaml",
        Some(7),
        &["field `links[0].latency`", "`500` has no unit", "ns"],
    ),
    case(
        "unknown_unit.yaml",
        Some(7),
        &[
            "field `links[0].latency`",
            "unknown unit `furlongs`",
            "ps, ns, us, ms, s",
        ],
    ),
    case(
        "negative_latency.yaml",
        Some(7),
        &["field `links[0].latency`", "`-1us`", "non-negative"],
    ),
    case(
        "negative_bare_latency.yaml",
        Some(7),
        &["field `links[0].latency`", "`-5` is negative"],
    ),
    case(
        "fractional_picoseconds.yaml",
        Some(7),
        &[
            "field `links[0].latency`",
            "`0.5ps`",
            "whole number of picoseconds",
        ],
    ),
    case(
        "latency_overflow.yaml",
        Some(7),
        &["field `links[0].latency`", "`100000000s` is too large"],
    ),
    case(
        "zero_bandwidth.yaml",
        Some(7),
        &["field `links[1].bandwidth`", "greater than zero"],
    ),
    case(
        "until_zero.yaml",
        Some(2),
        &["field `until`", "greater than zero"],
    ),
    // --- NIC and switch settings.
    case(
        "mtu_out_of_range.yaml",
        Some(3),
        &["field `nic.mtu`", "16384 bytes", "outside 64B..8KiB"],
    ),
    case(
        "ack_every_zero.yaml",
        Some(4),
        &["field `nic.ack_every`", "outside 1..1048576"],
    ),
    case("rto_zero.yaml", Some(3), &["field `nic.rto`", "below 1us"]),
    case(
        "dscp_64.yaml",
        Some(3),
        &["field `nic.dscp`", "64", "6-bit DSCP"],
    ),
    case(
        "qp_rate_zero.yaml",
        Some(3),
        &["field `nic.qp_rate`", "greater than zero"],
    ),
    case(
        "switch_buffer_too_small.yaml",
        Some(6),
        &[
            "field `switches[0].buffer.total`",
            "cannot hold one",
            "frame",
        ],
    ),
    // --- The explicit fabric.
    case(
        "unknown_node_in_link.yaml",
        Some(7),
        &["field `links[1].b`", "unknown node `s9`"],
    ),
    case(
        "duplicate_node_name.yaml",
        Some(5),
        &["field `switches[1].name`", "`h1` already exists"],
    ),
    case(
        "duplicate_host_name.yaml",
        Some(2),
        &["field `hosts[2]`", "`h0` already exists"],
    ),
    case(
        "self_loop_link.yaml",
        Some(8),
        &["field `links[2]`", "from `s0` to itself"],
    ),
    case(
        "disconnected_destination.yaml",
        Some(2),
        &[
            "field `hosts[2]`",
            "cannot be reached",
            "`h2` has no link at all",
        ],
    ),
    // --- Generated fabrics.
    case(
        "topology_with_hosts.yaml",
        Some(2),
        &["field `hosts`", "cannot be combined with `topology`"],
    ),
    case(
        "topology_two_kinds.yaml",
        Some(3),
        &["field `topology`", "exactly one of", "found 2"],
    ),
    case(
        "topology_no_kind.yaml",
        Some(2),
        &["field `topology`", "exactly one of", "found 0"],
    ),
    case(
        "leaf_spine_zero_leaves.yaml",
        Some(4),
        &["field `topology.leaf_spine.leaves`", "at least 1"],
    ),
    case(
        "leaf_spine_zero_fabric_bandwidth.yaml",
        Some(9),
        &[
            "field `topology.leaf_spine.fabric_bandwidth`",
            "greater than zero",
        ],
    ),
    case(
        "leaf_spine_too_large.yaml",
        Some(4),
        &["field `topology.leaf_spine`", "too large"],
    ),
    case(
        "ring_one_host.yaml",
        Some(4),
        &["field `topology.ring.hosts`", "1 host;", "at least 2"],
    ),
    case(
        "star_zero_hosts.yaml",
        Some(4),
        &["field `topology.star.hosts`", "0 hosts;", "at least 1"],
    ),
    case(
        "torus_dimension_of_one.yaml",
        Some(4),
        &["field `topology.torus.dims[1]`", "size 1", "at least 2"],
    ),
    case(
        "multi_dim_size_one.yaml",
        Some(6),
        &[
            "field `topology.multi_dim.dimensions[1].size`",
            "at least 2",
        ],
    ),
    case(
        "multi_dim_unknown_kind.yaml",
        Some(5),
        &[
            "dimensions[0].kind",
            "unknown variant `mesh`",
            "fully_connected",
        ],
    ),
    case(
        "multi_dim_missing_unit.yaml",
        Some(5),
        &["dimensions[0].bandwidth", "`100` has no unit"],
    ),
    case(
        "fat_tree_odd_k.yaml",
        Some(4),
        &["field `topology.fat_tree.k`", "k = 5", "even"],
    ),
    case(
        "astra_sim_missing_file.yaml",
        Some(3),
        &[
            "field `topology.astra_sim`",
            "no ASTRA-sim network file",
            "no-such-network.yaml",
        ],
    ),
    case(
        "dimension_order_on_clos.yaml",
        Some(2),
        &[
            "field `routing`",
            "needs a fabric with dimensions",
            "leaf-spine",
        ],
    ),
    case(
        "scheduler_wfq_weights.yaml",
        Some(7),
        &[
            "field `switch_scheduler.weights`",
            "2 entries for 3 children",
        ],
    ),
    case(
        "scheduler_unknown_kind.yaml",
        Some(6),
        &[
            "field `switches[0].scheduler.scheduling`",
            "unknown variant `fair`",
        ],
    ),
    case(
        "shaper_bytes_unknown.yaml",
        Some(7),
        &[
            "field `switch_scheduler.children[0].shaping.bytes`",
            "unknown variant `payload`",
            "`frame` or `wire`",
        ],
    ),
    case(
        "shaper_bytes_on_stop_and_go.yaml",
        Some(8),
        &[
            "field `switch_scheduler.children[0].shaping.bytes`",
            "`stop_and_go` shaping takes no `bytes`",
        ],
    ),
    case(
        "star_too_many_hosts.yaml",
        Some(4),
        &["field `topology.star`", "too large", "at most 65536"],
    ),
    case(
        "data_mode_too_much_payload.yaml",
        Some(2),
        &["field `mode`", "use `mode: timing`", "limit 4GiB"],
    ),
    // --- Routing.
    case(
        "explicit_routing_without_routes.yaml",
        Some(8),
        &["field `routing`", "needs a `routes` list"],
    ),
    case(
        "routes_with_shortest_path.yaml",
        Some(10),
        &["field `routes`", "`shortest_path`", "routing: explicit"],
    ),
    case(
        "explicit_route_via_non_neighbour.yaml",
        Some(12),
        &[
            "field `routes[0].via[0]`",
            "`s1` is not a neighbour of `h0`",
        ],
    ),
    case(
        "explicit_routes_loop.yaml",
        Some(12),
        &["field `routes`", "loop", "s1 -> s0 -> s1"],
    ),
    case(
        "explicit_routes_missing.yaml",
        Some(12),
        &["field `routes`", "`s1`", "no route to `h1`"],
    ),
    case(
        "route_unknown_node.yaml",
        Some(11),
        &["field `routes[1].at`", "unknown node `s5`"],
    ),
    case(
        "route_to_switch.yaml",
        Some(10),
        &["field `routes[0].dst`", "`s0` is a switch"],
    ),
    // --- The workload.
    case(
        "message_to_unknown_host.yaml",
        Some(11),
        &["field `workload.messages[1].dst`", "unknown host `h7`"],
    ),
    case(
        "message_to_switch.yaml",
        Some(10),
        &["field `workload.messages[0].dst`", "`s0` is a switch"],
    ),
    case(
        "message_to_self.yaml",
        Some(10),
        &["field `workload.messages[0].dst`", "sends to itself"],
    ),
    case(
        "message_too_large.yaml",
        Some(12),
        &[
            "field `workload.messages[0].size`",
            "4GiB",
            "largest RDMA WRITE",
        ],
    ),
    case(
        "all_to_all_too_large.yaml",
        Some(9),
        &[
            "field `workload.all_to_all.size`",
            "8GiB",
            "largest RDMA WRITE",
        ],
    ),
    // --- Congestion control.
    case(
        "dcqcn_g_out_of_range.yaml",
        Some(6),
        &["nic.cc.dcqcn", "g = 1.5 is outside (0, 1]"],
    ),
    case(
        "cc_unknown.yaml",
        Some(5),
        &[
            "nic.cc",
            "unknown variant `cubic`",
            "`none`, `dcqcn`, `dctcp`, `timely`, `swift`, `hpcc`",
        ],
    ),
    // --- Collectives.
    case(
        "collective_per_dim_on_clos.yaml",
        Some(7),
        &[
            "workload.collectives[0].algorithm",
            "needs a fabric with dimensions",
            "leaf-spine",
        ],
    ),
    case(
        "collective_size_not_multiple.yaml",
        Some(8),
        &[
            "workload.collectives[0].size",
            "1023B",
            "int32 element size (4B)",
        ],
    ),
    case(
        "collective_unknown_algorithm.yaml",
        Some(7),
        &[
            "workload.collectives[0].algorithm",
            "unknown variant `butterfly`",
            "halving_doubling",
        ],
    ),
    case(
        "collective_root_out_of_range.yaml",
        Some(9),
        &[
            "workload.collectives[0].root",
            "root 4 is not a rank",
            "4 ranks",
        ],
    ),
    case(
        "collective_sweep_factor_one.yaml",
        Some(7),
        &[
            "workload.collectives[0].sizes",
            "factor 1 must be at least 2",
        ],
    ),
    case(
        "collective_no_size.yaml",
        Some(6),
        &["workload.collectives[0].size", "needs `size`"],
    ),
    case(
        "collective_reduce_bandwidth_zero.yaml",
        Some(8),
        &[
            "workload.collectives[0].reduce_bandwidth",
            "greater than zero",
        ],
    ),
    case(
        "collective_hosts_unknown.yaml",
        Some(8),
        &["workload.collectives[0].hosts[1]", "`h9` is not a host"],
    ),
    case(
        "collective_hosts_dup.yaml",
        Some(8),
        &["workload.collectives[0].hosts[2]", "`h1` is listed twice"],
    ),
    // --- Hostile inputs: sizes, counts and files that would take minutes or gigabytes.
    case(
        "all_reduce_2_63_bytes.yaml",
        Some(7),
        &[
            "field `workload.collectives[0].size`",
            "larger than 1024GiB, the largest collective",
        ],
    ),
    case(
        "all_to_all_2_62_bytes.yaml",
        Some(7),
        &[
            "field `workload.collectives[0].size`",
            "larger than 1024GiB, the largest collective",
        ],
    ),
    case(
        "flap_period_2ps.yaml",
        Some(8),
        &[
            "field `faults[0].period`",
            "more than 100000",
            "lengthen the period",
        ],
    ),
    case(
        "flap_for_a_million_seconds.yaml",
        Some(9),
        &[
            "field `faults[0].period`",
            "200000000002 times",
            "shorten `until`",
        ],
    ),
    case("yaml_tag.yaml", Some(2), &["YAML tags", "remove the tag"]),
    case(
        "alias_bomb.yaml",
        Some(7),
        &[
            "aliases (`*name`) expand the document past",
            "fewer aliases",
        ],
    ),
    case(
        "dcqcn_rate_ai_0bps.yaml",
        Some(8),
        &["field `nic.cc.dcqcn.rate_ai`", "greater than zero"],
    ),
    case(
        "dcqcn_rate_history_0.yaml",
        Some(8),
        &["field `nic.cc.dcqcn.rate_history`", "greater than zero"],
    ),
    case(
        "dcqcn_cnp_interval_0s.yaml",
        Some(8),
        &["field `nic.cc.dcqcn.cnp_interval`", "greater than zero"],
    ),
    case(
        "dcqcn_rate_timer_1ps.yaml",
        Some(8),
        &["field `nic.cc.dcqcn.rate_timer`", "shorter than 1us"],
    ),
    case(
        "astra_sim_endless_file.yaml",
        Some(3),
        &[
            "field `topology.astra_sim`",
            "no ASTRA-sim network file at /dev/zero",
        ],
    ),
    case(
        "msccl_endless_file.yaml",
        Some(6),
        &[
            "field `workload.collectives[0].algorithm.msccl`",
            "larger than 64MiB",
            "not a regular file",
        ],
    ),
    case(
        "comm_groups_endless_file.yaml",
        Some(7),
        &[
            "field `workload.chakra.comm_groups`",
            "larger than 16MiB",
            "not a regular file",
        ],
    ),
    // --- ASTRA-sim system files.
    case(
        "system_astra_sim_missing_file.yaml",
        Some(7),
        &[
            "field `system.astra_sim`",
            "no ASTRA-sim system file at",
            "no-such-system.json",
        ],
    ),
    case(
        "system_without_a_trace.yaml",
        Some(7),
        &["field `system.astra_sim`", "this workload has no trace"],
    ),
];

fn corpus_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests")
        .join("malformed")
}

fn run(path: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_fabemu"))
        .arg("run")
        .arg(path)
        .output()
        .unwrap_or_else(|e| panic!("cannot start fabemu: {e}"))
}

/// Checks the output of `fabemu run path`; returns what is wrong with it, if anything.
fn check(path: &Path, line: Option<usize>, expect: &[&str], out: &Output) -> Vec<String> {
    let mut bad = Vec::new();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let file = path.display().to_string();
    if out.status.code() != Some(2) {
        bad.push(format!("exit status {:?}, expected code 2", out.status));
    }
    if stderr.contains("panicked") {
        bad.push("stderr mentions a panic".into());
    }
    let prefix = format!("error: {file}");
    match stderr.strip_prefix(&prefix) {
        None => bad.push(format!("stderr does not start with `{prefix}`")),
        Some(rest) => match (position(rest), line) {
            (Some((l, _)), Some(want)) if l == want => {}
            (None, None) if rest.starts_with(": ") => {}
            (Some((l, c)), want) => bad.push(format!(
                "error at line {l} column {c}, expected line {want:?}"
            )),
            (None, want) => bad.push(format!(
                "no `:LINE:COL: ` or `: ` after the file name, expected line {want:?}"
            )),
        },
    }
    if stderr.lines().count() != 1 {
        bad.push(format!(
            "stderr has {} lines, expected one",
            stderr.lines().count()
        ));
    }
    for frag in expect {
        if !stderr.contains(frag) {
            bad.push(format!("stderr lacks `{frag}`"));
        }
    }
    if !out.stdout.is_empty() {
        bad.push("stdout is not empty".into());
    }
    bad
}

/// Parses `:LINE:COL: ` at the start of `s`.
fn position(s: &str) -> Option<(usize, usize)> {
    let s = s.strip_prefix(':')?;
    let (l, s) = s.split_once(':')?;
    let (c, s) = s.split_once(':')?;
    if !s.starts_with(' ') {
        return None;
    }
    Some((l.parse().ok()?, c.parse().ok()?))
}

#[test]
fn every_malformed_scenario_is_rejected_with_a_clear_message() {
    let dir = corpus_dir();
    let on_disk: BTreeSet<String> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()))
        .map(|e| {
            e.expect("directory entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    let mut in_table = BTreeSet::new();
    for c in CASES {
        assert!(
            in_table.insert(c.file.to_string()),
            "{} is in the table twice",
            c.file
        );
    }
    let missing: Vec<_> = on_disk.difference(&in_table).collect();
    let stale: Vec<_> = in_table.difference(&on_disk).collect();
    assert!(
        missing.is_empty() && stale.is_empty(),
        "files without an expectation in CASES: {missing:?}; expectations without a file: {stale:?}"
    );
    assert!(
        CASES.len() >= 24,
        "the corpus shrank to {} files",
        CASES.len()
    );

    let mut failures = String::new();
    for c in CASES {
        let path = dir.join(c.file);
        let text = std::fs::read(&path).expect("read a corpus file");
        assert!(
            text.starts_with(b"# "),
            "{}: the first line must be a comment saying what is wrong",
            c.file
        );
        let out = run(&path);
        let bad = check(&path, c.line, c.expect, &out);
        if !bad.is_empty() {
            failures.push_str(&format!(
                "\n{}:\n  - {}\n  exit: {:?}\n  stderr: {}",
                c.file,
                bad.join("\n  - "),
                out.status.code(),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "malformed scenarios not rejected as expected:{failures}"
    );
}

/// Documents with no content (these cannot carry the comment the corpus files start with).
#[test]
fn empty_documents_are_called_empty() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("malformed");
    std::fs::create_dir_all(&dir).expect("create a scratch directory");
    let mut failures = String::new();
    for (name, text) in [
        ("zero_bytes.yaml", ""),
        ("blank_lines.yaml", "\n   \n\n"),
        ("document_marker_only.yaml", "---\n"),
        ("null_document.yaml", "~\n"),
    ] {
        let path = dir.join(name);
        std::fs::write(&path, text).expect("write a scratch scenario");
        let out = run(&path);
        let bad = check(&path, None, &["the scenario is empty", "workload"], &out);
        if !bad.is_empty() {
            failures.push_str(&format!(
                "\n{name}: {}\n  stderr: {}",
                bad.join("; "),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "empty scenarios not rejected as expected:{failures}"
    );
}

/// Paths that cannot be read as a file.
#[test]
fn unreadable_paths_are_rejected() {
    let missing = Path::new(env!("CARGO_TARGET_TMPDIR")).join("malformed-no-such-file.yaml");
    let out = run(&missing);
    let bad = check(&missing, None, &["cannot read the scenario"], &out);
    assert!(bad.is_empty(), "{}: {bad:?}", missing.display());

    let dir = corpus_dir();
    let out = run(&dir);
    let bad = check(&dir, None, &["cannot read the scenario"], &out);
    assert!(bad.is_empty(), "{}: {bad:?}", dir.display());
}
