//! The command line as a user meets it, through the binary: output paths checked before the
//! run, `--set` overrides, how times and rates print, warnings.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: a failure is a panic

use crate::common;

use std::process::Output;

use common::{fabemu, temp_scenario, TempPath};

/// A small, fast run: one 64 KiB message over one link.
const TINY: &str = "
name: tiny
hosts: [a, b]
links:
  - {a: a, b: b, bandwidth: 100Gbps, latency: 1us}
workload:
  messages:
    - {src: a, dst: b, size: 64KiB}
";

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// A fresh, empty temporary directory for one test, deleted when dropped.
fn temp_dir(name: &str) -> TempPath {
    common::temp_dir(&format!("cli-{name}"))
}

#[test]
fn unwritable_output_paths_fail_before_the_run() {
    let s = temp_scenario("cli-paths.yaml", TINY);
    let s = s.to_string_lossy();
    let dir = temp_dir("paths");
    let a_file = dir.join("plain-file");
    std::fs::write(&a_file, "x").unwrap_or_else(|e| panic!("{e}"));
    let a_file = a_file.to_string_lossy().into_owned();
    let under_file = format!("{a_file}/x.json");
    let a_dir = dir.to_string_lossy().into_owned();
    let cases: [(&str, &str); 6] = [
        ("--json", "/nonexistent/fabemu/x.json"),
        ("--json", &a_dir),
        ("--pcap", "/nonexistent/fabemu/a.pcap"),
        ("--pcap", &under_file),
        ("--out", &a_file),
        ("--out", &under_file),
    ];
    for (flag, path) in cases {
        let out = fabemu(&["run", &s, flag, path]);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{flag} {path}: {err}");
        assert!(
            err.starts_with("error: cannot write "),
            "{flag} {path}: {err}"
        );
        assert!(err.contains(path), "{flag} {path}: {err}");
        // Checked before the run: no summary was printed.
        assert!(
            stdout(&out).is_empty(),
            "{flag} {path} ran: {}",
            stdout(&out)
        );
    }
}

#[test]
fn writable_output_paths_are_left_as_they_were_until_written() {
    let s = temp_scenario("cli-paths-ok.yaml", TINY);
    let s = s.to_string_lossy();
    let dir = temp_dir("paths-ok");
    // A nested --out directory that does not exist yet is created; a --json file is written.
    let out_dir = dir.join("a/b/run");
    let json = dir.join("r.json");
    let out = fabemu(&[
        "run",
        &s,
        "--quiet",
        "--out",
        &out_dir.to_string_lossy(),
        "--json",
        &json.to_string_lossy(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(out_dir.join("report.json").is_file());
    assert!(json.is_file());
    // A bad scenario with a good new path: the path is not left behind as an empty file.
    let bad = temp_scenario("cli-paths-bad.yaml", "workload: {messages: [{src: a}]}\n");
    let json2 = dir.join("never.json");
    let out = fabemu(&[
        "run",
        &bad.to_string_lossy(),
        "--json",
        &json2.to_string_lossy(),
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(!json2.exists());
    // No probe file stays in the directories that were checked.
    let left: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{e}"))
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".fabemu"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn set_overrides_fields_and_shows_in_the_report() {
    let s = temp_scenario("cli-set.yaml", TINY);
    let s = s.to_string_lossy();
    let out = fabemu(&[
        "run",
        &s,
        "--json",
        "-",
        "--set",
        "seed=3",
        "--set",
        "workload.messages[0].size=128KiB",
        "--set",
        "nic={mtu: 1KiB, cc: dcqcn}",
        "--set",
        "workload.messages[1]={src: b, dst: a, size: 1KiB}",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let r: serde_json::Value =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r["scenario"]["seed"], 3);
    assert_eq!(r["messages"][0]["size_bytes"], 128 * 1024);
    assert_eq!(r["messages"][1]["src"], "b");
    // 128 KiB in 1 KiB packets (the MTU override took effect), plus the 1 KiB message.
    assert_eq!(r["totals"]["data_packets_sent"], 129);
    assert_eq!(
        r["scenario"]["overrides"],
        serde_json::json!([
            "seed=3",
            "workload.messages[0].size=128KiB",
            "nic={mtu: 1KiB, cc: dcqcn}",
            "workload.messages[1]={src: b, dst: a, size: 1KiB}"
        ])
    );
    // The summary shows them on one line.
    let out = fabemu(&["run", &s, "--set", "seed=3", "--set", "name=renamed"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.starts_with("fabemu "), "{text}");
    assert!(
        text.lines()
            .any(|l| l == "overrides: --set seed=3 --set name=renamed"),
        "{text}"
    );
    assert!(text.contains("renamed"), "{text}");
}

#[test]
fn set_errors_name_the_override_and_the_field() {
    let s = temp_scenario("cli-set-bad.yaml", TINY);
    let s = s.to_string_lossy();
    // (override, expected stderr): parse errors, type and unit errors, validation errors.
    let cases = [
        (
            "workload.messages[0].size=12",
            "error: --set workload.messages[0].size: field `workload.messages[0].size`: `12` \
             has no unit",
        ),
        (
            "workload.messages[0].dst=nobody",
            "error: --set workload.messages[0].dst: field `workload.messages[0].dst`: unknown \
             host `nobody`",
        ),
        (
            "nic.mtu_size=1KiB",
            "error: --set nic.mtu_size: field `nic`: unknown field `mtu_size`",
        ),
        (
            "seed=x",
            "error: --set seed: field `seed`: invalid type: string \"x\"",
        ),
        (
            "workload.messages[5].size=1KiB",
            "error: --set workload.messages[5].size: field `workload.messages[5]`: there is no \
             entry 5",
        ),
        (
            "workload.messages[1].size=1KiB",
            "error: --set workload.messages[1].size: field `workload.messages[1]`: missing \
             field `src`",
        ),
        ("seed", "error: --set seed: expected PATH=VALUE"),
        (
            "links[0]..a=1",
            "error: --set links[0]..a=1: `links[0]..a` is not a field path",
        ),
    ];
    for (set, want) in cases {
        let out = fabemu(&["run", &s, "--set", set]);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "--set {set}: {err}");
        assert!(err.starts_with(want), "--set {set}:\n{err}\nwanted: {want}");
    }
    // An error in the file is still located in the file when overrides are given.
    let bad = temp_scenario(
        "cli-set-file-bad.yaml",
        &TINY.replace("bandwidth: 100Gbps", "bandwidth: 100"),
    );
    let out = fabemu(&["run", &bad.to_string_lossy(), "--set", "seed=2"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.starts_with(&format!(
            "error: {}:5:29: field `links[0].bandwidth`: `100` has no unit",
            bad.display()
        )),
        "{err}"
    );
    // An override can repair the file.
    let out = fabemu(&[
        "run",
        &bad.to_string_lossy(),
        "--quiet",
        "--set",
        "links[0].bandwidth=100Gbps",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
}

/// The value of `key` in the JSON report on stdout of `out`.
fn json(out: &Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", stderr(out)))
}

#[test]
fn times_keep_their_digits_and_rates_scale_their_unit() {
    // One 1 KiB message posted at 1 s over a 10 Mb/s link: it finishes just after 1 s (a time
    // that once printed as `1.s`), and its goodput is Mb/s-scale (once `0.00 Gb/s`).
    let y = "
hosts: [a, b]
links:
  - {a: a, b: b, bandwidth: 10Mbps, latency: 0ns}
workload:
  messages:
    - {src: a, dst: b, size: 1KiB, start: 1s}
";
    let s = temp_scenario("cli-times.yaml", y);
    let out = fabemu(&["run", &s.to_string_lossy()]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    let line = text
        .lines()
        .find(|l| l.contains("completion time"))
        .unwrap_or_else(|| panic!("{text}"));
    // The message's wire bytes at 10 Mb/s: (1024 + 74 header + 4 ICRC + 24) × 0.8 us =
    // 900.8 us, then the ACK's 86 bytes, 68.8 us: acknowledged at 1.0009696 s, shown (cut,
    // not rounded) to its first significant digit.
    assert!(line.contains("completion time 1.0009s,"), "{line}");
    assert!(!text.contains(".s ") && !text.contains(".s,"), "{text}");
    let msg = text
        .lines()
        .find(|l| l.trim_start().starts_with("0 "))
        .unwrap_or_else(|| panic!("{text}"));
    // 8192 bits in 900.8 us = 9.09 Mb/s.
    assert!(
        msg.contains("900.8us") && msg.ends_with("9.09 Mb/s"),
        "{msg}"
    );
}

#[test]
fn pfc_xoff_and_xon_frames_are_counted_apart() {
    // An 8-to-1 incast under one switch with PFC: the switch pauses the senders and resumes
    // them, so both kinds of frame are sent.
    let mut y = String::from(
        "nic: {mtu: 4KiB}\nswitch_buffer: {total: 2MiB, pfc: {enabled: true}}\ntopology:\n  \
         star: {hosts: 9, bandwidth: 100Gbps, latency: 1us}\nworkload:\n  messages:\n",
    );
    for i in 1..=8 {
        y += &format!("    - {{src: h{i}, dst: h0, size: 1MiB}}\n");
    }
    let s = temp_scenario("cli-pfc.yaml", &y);
    let out = fabemu(&["run", &s.to_string_lossy(), "--json", "-"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let r = json(&out);
    let t = &r["totals"];
    assert!(t.get("pause_frames_sent").is_none(), "{t}");
    let (xoff, xon) = (
        t["xoff_frames_sent"].as_u64().unwrap_or(0),
        t["xon_frames_sent"].as_u64().unwrap_or(0),
    );
    assert!(xoff > 0 && xon > 0, "{t}");
    // Every frame the switches and NICs sent is one or the other.
    let sent = |list: &str, key: &str| -> u64 {
        r[list]
            .as_array()
            .map_or(0, |a| a.iter().filter_map(|x| x[key].as_u64()).sum())
    };
    assert_eq!(
        xoff + xon,
        sent("switches", "pause_frames_sent") + sent("nics", "pause_frames_sent")
    );
    assert_eq!(
        xon,
        sent("switches", "xon_frames_sent") + sent("nics", "xon_frames_sent")
    );
    let summary = stdout(&fabemu(&["run", &s.to_string_lossy()]));
    assert!(
        summary.contains(&format!("{xoff} XOFF and {xon} XON pause frames")),
        "{summary}"
    );
}

#[test]
fn a_run_stopped_with_frames_in_flight_reaches_no_capture_cap() {
    // `until` cuts the message short: frames are on the wire when the run stops.
    let s = temp_scenario(
        "cli-until.yaml",
        &TINY.replace("name: tiny", "name: tiny\nuntil: 2us"),
    );
    let dir = temp_dir("until");
    let pcap = dir.join("a.pcap");
    let out = fabemu(&[
        "run",
        &s.to_string_lossy(),
        "--pcap",
        &pcap.to_string_lossy(),
    ]);
    let err = stderr(&out);
    assert_eq!(
        out.status.code(),
        Some(3),
        "the message is unfinished: {err}"
    );
    assert!(!err.contains("capture cap"), "{err}");
    // With a real cap, the warning is given.
    let out = fabemu(&[
        "run",
        &s.to_string_lossy(),
        "--pcap",
        &pcap.to_string_lossy(),
        "--pcap-max-packets",
        "1",
    ]);
    assert!(
        stderr(&out).contains("capture cap reached: 1 of "),
        "{}",
        stderr(&out)
    );
}

/// A valid one-dimensional ASTRA-sim network file, then `extra`.
fn astra_file(dir: &std::path::Path, name: &str, extra: &str) -> String {
    let p = dir.join(name);
    let text = format!(
        "topology: [ Ring ]\nnpus_count: [ 4 ]\nbandwidth: [ 50.0 ]\nlatency: [ 500.0 ]\n{extra}"
    );
    std::fs::write(&p, text).unwrap_or_else(|e| panic!("{e}"));
    p.to_string_lossy().into_owned()
}

#[test]
fn astra_sim_ignored_keys_are_warned_about_with_a_suggestion() {
    let dir = temp_dir("astra-keys");
    let net = astra_file(&dir, "net.yaml", "Bandwith: [ 1 ]\nnotes: first try\n");
    let scenario = dir.join("s.yaml");
    let text = "topology: {astra_sim: net.yaml}\nworkload: {}\n";
    std::fs::write(&scenario, text).unwrap_or_else(|e| panic!("{e}"));
    let want = [
        format!(
            "warning: {net}:5:11: key `Bandwith` is ignored (ASTRA-sim reads only topology, \
             npus_count, bandwidth and latency); did you mean `bandwidth`?"
        ),
        format!(
            "warning: {net}:6:8: key `notes` is ignored (ASTRA-sim reads only topology, \
             npus_count, bandwidth and latency)"
        ),
    ];
    // By default (no RUST_LOG), from `topo --astra-sim`, `topo SCENARIO` and `run`.
    for args in [
        vec!["topo", "--astra-sim", &net],
        vec!["topo", &scenario.to_str().unwrap_or_default()],
        vec!["run", &scenario.to_str().unwrap_or_default(), "--quiet"],
    ] {
        let out = fabemu(&args);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {err}");
        let lines: Vec<&str> = err.lines().collect();
        assert_eq!(lines, want, "{args:?}");
    }
    // A required key misspelt: it is reported missing, with the likely misspelling.
    let p = dir.join("missing.yaml");
    let text = "topology: [ Ring ]\nnpus_count: [ 4 ]\nbandwidth: [ 50.0 ]\nlatncy: [ 500.0 ]\n";
    std::fs::write(&p, text).unwrap_or_else(|e| panic!("{e}"));
    let out = fabemu(&["topo", "--astra-sim", &p.to_string_lossy()]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        stderr(&out).trim_end(),
        format!(
            "error: {}:4:9: field `latncy`: `latency` is missing; is `latncy` a misspelling of \
             it?",
            p.display()
        )
    );
}

#[test]
fn yaml_library_limits_come_with_a_line_and_plain_words() {
    let dir = temp_dir("yaml-limits");
    // An alias bomb: 10^12 values from a dozen lines.
    let mut bomb = String::from("a: &a [x, x, x, x, x, x, x, x, x, x]\n");
    for i in 1..12 {
        let prev = if i == 1 {
            "a".to_string()
        } else {
            format!("l{}", i - 1)
        };
        bomb += &format!(
            "l{i}: &l{i} [{}]\n",
            vec![format!("*{prev}"); 10].join(", ")
        );
    }
    let deep = format!("x: {}{}\n", "[".repeat(200), "]".repeat(200));
    let astra_ok = "topology: [ Ring ]\nnpus_count: [ 4 ]\nbandwidth: [ 50.0 ]\nlatency: [ 1 ]\n";
    let two = format!("{astra_ok}---\n{astra_ok}");
    // A scenario nests deep only where its fields do: a PIFO tree 100 levels deep (a mapping
    // and a list per level).
    let mut tree = String::from("{name: leaf}");
    for i in 0..100 {
        tree = format!("{{name: n{i}, children: [{tree}]}}");
    }
    let deep_scenario = format!("switch_scheduler: {tree}\nworkload: {{}}\n");
    // (text, command, line, words): each limit in an ASTRA-sim file and in a scenario.
    let cases = [
        (bomb.clone(), "topo", 2, "an \"alias bomb\""),
        (bomb, "run", 2, "an \"alias bomb\""),
        (deep, "topo", 1, "nested more than 128 levels deep"),
        (deep_scenario, "run", 1, "nested more than 128 levels deep"),
        (
            two.clone(),
            "topo",
            5,
            "more than one document: a second one starts here",
        ),
        (
            two,
            "run",
            5,
            "more than one document: a second one starts here",
        ),
    ];
    for (i, (text, cmd, line, words)) in cases.iter().enumerate() {
        let p = dir.join(format!("case{i}.yaml"));
        std::fs::write(&p, text).unwrap_or_else(|e| panic!("{e}"));
        let p = p.to_string_lossy().into_owned();
        let args = match *cmd {
            "topo" => vec!["topo", "--astra-sim", &p],
            _ => vec!["run", &p],
        };
        {
            let out = fabemu(&args);
            let err = stderr(&out);
            assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
            assert!(
                err.starts_with(&format!("error: {p}:{line}:")),
                "{args:?}: {err}"
            );
            assert!(err.contains(words), "{args:?}: {err}");
            assert!(!err.contains("limit exceeded"), "{args:?}: {err}");
        }
    }
}

#[test]
fn logs_carry_no_colour_codes_when_stderr_is_not_a_terminal() {
    let s = temp_scenario("cli-logs.yaml", TINY);
    let out = match std::process::Command::new(env!("CARGO_BIN_EXE_fabemu"))
        .args(["run", &s.to_string_lossy(), "--quiet"])
        .env("RUST_LOG", "fabemu=info")
        .output()
    {
        Ok(o) => o,
        Err(e) => panic!("{e}"),
    };
    let err = stderr(&out);
    assert!(err.contains("world built"), "{err}");
    assert!(!err.contains('\u{1b}'), "{err:?}");
}

#[test]
fn csv_columns_named_after_nodes_with_commas_and_quotes_are_quoted() {
    let y = r#"
hosts: ["a,1", "b \"2\""]
switches: [{name: "s;3"}]
links:
  - {a: "a,1", b: "s;3", bandwidth: 100Gbps, latency: 1us}
  - {a: "b \"2\"", b: "s;3", bandwidth: 100Gbps, latency: 1us}
workload:
  messages:
    - {src: "a,1", dst: "b \"2\"", size: 64KiB}
"#;
    let s = temp_scenario("cli-csv.yaml", y);
    let tmp = temp_dir("csv");
    let dir = tmp.join("out");
    let out = fabemu(&[
        "run",
        &s.to_string_lossy(),
        "--quiet",
        "--out",
        &dir.to_string_lossy(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    for file in ["link_utilization.csv", "queue_depth.csv"] {
        let mut r = csv::Reader::from_path(dir.join(file)).unwrap_or_else(|e| panic!("{e}"));
        let header: Vec<String> = r
            .headers()
            .unwrap_or_else(|e| panic!("{e}"))
            .iter()
            .map(str::to_string)
            .collect();
        // Data goes one way and ACKs the other: every direction carried traffic; only the
        // switch has queues.
        let want: &[&str] = if file == "queue_depth.csv" {
            &["time_ps", "s;3->a,1", "s;3->b \"2\""]
        } else {
            &[
                "time_ps",
                "a,1->s;3",
                "s;3->a,1",
                "b \"2\"->s;3",
                "s;3->b \"2\"",
            ]
        };
        assert_eq!(header, want, "{file}");
        // Every row has as many fields as the header.
        let mut rows = 0;
        for rec in r.records() {
            let rec = rec.unwrap_or_else(|e| panic!("{file}: {e}"));
            assert_eq!(rec.len(), want.len(), "{file}");
            rows += 1;
        }
        assert!(rows > 0, "{file}");
    }
}

#[test]
fn topo_takes_overrides_too() {
    let y = "topology:\n  star: {hosts: 4, bandwidth: 100Gbps, latency: 1us}\nworkload: {}\n";
    let s = temp_scenario("cli-topo-set.yaml", y);
    let out = fabemu(&[
        "topo",
        &s.to_string_lossy(),
        "--set",
        "topology.star.hosts=6",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("hosts: 6, switches: 1, links: 6"),
        "{}",
        stdout(&out)
    );
    let out = fabemu(&[
        "topo",
        &s.to_string_lossy(),
        "--set",
        "topology.star.hosts=0",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).starts_with("error: --set topology.star.hosts: field `topology.star.hosts`"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn explicit_fabrics_plot_their_busiest_links() {
    let s = temp_scenario("cli-busiest.yaml", TINY);
    let tmp = temp_dir("busiest");
    let dir = tmp.join("out");
    let out = fabemu(&[
        "run",
        &s.to_string_lossy(),
        "--quiet",
        "--out",
        &dir.to_string_lossy(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let svg = std::fs::read_to_string(dir.join("link_utilization.svg")).unwrap_or_default();
    assert!(svg.contains("<svg"));
    // Data one way, ACKs the other: a line per direction (named in the legend), not one
    // average of the class. Names need a font (plots have no text without one).
    if fabemu::observe::plot::has_font() {
        assert!(svg.contains("busiest links"), "{svg}");
        assert!(
            svg.contains(">\na-&gt;b\n<") && svg.contains(">\nb-&gt;a\n<"),
            "{svg}"
        );
    }
}

#[test]
fn dcqcn_rates_are_plotted() {
    let tmp = temp_dir("dcqcn-plot");
    let dir = tmp.join("out");
    let ex = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/dcqcn.yaml");
    let out = fabemu(&["run", ex, "--quiet", "--out", &dir.to_string_lossy()]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(dir.join("qp_rates.png").is_file() && dir.join("qp_rates.csv").is_file());
    let svg = std::fs::read_to_string(dir.join("qp_rates.svg")).unwrap_or_default();
    assert!(svg.contains("<polyline"), "{svg}");
    if fabemu::observe::plot::has_font() {
        // The four incast senders' QPs toward r are cut from 100 Gb/s.
        assert!(
            svg.contains("rate (Gb/s)") && svg.contains("a1-&gt;r"),
            "{svg}"
        );
        assert!(svg.contains("simulated time (ms)"), "{svg}");
    }
}
