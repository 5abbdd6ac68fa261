//! The shipped examples do what their descriptions say, checked on the counters of their JSON
//! reports (issue 17, item 10). The figures in the descriptions are the measured ones; the
//! bounds here are loose enough for any change that keeps the behaviour described.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: a failure is a panic

mod common;

use common::fabemu;

fn report(example: &str) -> serde_json::Value {
    let path = format!("{}/examples/{example}", env!("CARGO_MANIFEST_DIR"));
    let out = fabemu(&["run", &path, "--quiet", "--json", "-"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{example}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{example}: bad JSON: {e}"))
}

fn goodput(r: &serde_json::Value, src: &str) -> f64 {
    r["messages"]
        .as_array()
        .and_then(|m| m.iter().find(|m| m["src"] == src))
        .and_then(|m| m["goodput_gbps"].as_f64())
        .unwrap_or_else(|| panic!("no goodput for {src}"))
}

#[test]
fn lossless_shows_pause_frames_and_head_of_line_blocking() {
    let r = report("lossless.yaml");
    let t = &r["totals"];
    // "s2 sends XOFF pause frames to s1 (about 800 XOFF and 700 XON) ... Nothing is dropped."
    assert!(t["xoff_frames_sent"].as_u64().unwrap_or(0) > 100, "{t}");
    assert!(t["xon_frames_sent"].as_u64().unwrap_or(0) > 100, "{t}");
    assert_eq!(t["drops"], 0);
    assert_eq!(t["lossless_drops"], 0);
    // "v gets ~26 Gb/s though its own path has room": far below its line rate.
    let v = goodput(&r, "v");
    assert!(v < 50.0, "victim {v} Gb/s");
    // "the incast senders share r's link at ~24.5 Gb/s each".
    for a in ["a1", "a2", "a3", "a4"] {
        let g = goodput(&r, a);
        assert!((20.0..=26.0).contains(&g), "{a}: {g} Gb/s");
    }
}

#[test]
fn dcqcn_slows_the_incast_at_its_source_and_frees_the_victim() {
    let r = report("dcqcn.yaml");
    let t = &r["totals"];
    // "slowed at their source by CNPs before r's queue fills, so s2 never has to pause s1".
    assert!(t["cnps_sent"].as_u64().unwrap_or(0) > 0, "{t}");
    assert!(t["ecn_marked"].as_u64().unwrap_or(0) > 0, "{t}");
    assert_eq!(t["xoff_frames_sent"], 0, "{t}");
    assert_eq!(t["drops"], 0);
    // "the victim runs near line rate (~90 Gb/s)".
    let v = goodput(&r, "v");
    assert!(v > 80.0, "victim {v} Gb/s");
    // Every incast sender's queue pair was cut, and its summary is in the JSON.
    for nic in r["nics"].as_array().unwrap() {
        if ["a1", "a2", "a3", "a4"].contains(&nic["name"].as_str().unwrap_or("")) {
            assert!(
                nic["qp_rates"][0]["cuts"].as_u64().unwrap_or(0) > 0,
                "{nic}"
            );
        }
    }
}
