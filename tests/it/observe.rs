//! Observation end to end: pcap decoded by tshark (RoCEv2, ECN, CNP, PFC, IPv4 checksums),
//! latency percentiles against closed forms, the time series of a saturated link, the `--out`
//! layout, and thread-count invariance of everything written.
//!
//! The tests that decode captures need tshark (`.ci/run` installs Debian's package when it is
//! missing); without it they print why and pass, except under CI (`CI=true`), where they fail.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: a failure is a panic

use crate::common;

use std::path::Path;
use std::process::Command;

use common::{
    fabemu, has_tshark, message_wire_bytes, temp_path, temp_scenario, TempPath, ETH_OVERHEAD,
    PS_PER_BYTE_100G,
};
use fabemu::observe::{pcap, ObserveOptions};
use fabemu::{load_str, run_observed};
use fabemu_fabric::engine::{CaptureDirection, CapturedFrame};
use fabemu_fabric::units::Time;
use fabemu_fabric::wire::{self, Ecn, PfcPauseRepr, RoceRepr};

/// One flow over an idle direct 100 Gb/s link: every packet's latency is its serialization plus
/// the link latency, nothing queues.
const ONE_FLOW: &str = "
name: one-flow
mode: data
nic: {mtu: 1KiB}
hosts: [a, b]
links:
  - {a: a, b: b, bandwidth: 100Gbps, latency: 1us}
workload:
  messages:
    - {src: a, dst: b, size: 2000KiB}
";
const MTU: u64 = 1024;
const SIZE: u64 = 2000 * 1024;
const LAT_PS: u64 = 1_000_000;

/// A loaded leaf-spine (ECMP, queues at the leaves) for invariance checks.
const LEAF_SPINE: &str = "
name: ls
mode: data
nic: {mtu: 4KiB}
topology:
  leaf_spine: {leaves: 2, spines: 2, hosts_per_leaf: 2, host_bandwidth: 100Gbps,
               host_latency: 500ns, fabric_bandwidth: 100Gbps, fabric_latency: 1us}
workload:
  all_to_all: {size: 64KiB}
";

/// A directory `name` that does not exist yet, in a fresh temporary directory deleted when the
/// result is dropped.
fn out_dir(name: &str) -> TempPath {
    temp_path("observe", name)
}

/// Runs tshark on `pcap` printing `fields` per frame (tab-separated), IPv4 checksum
/// validation on.
fn tshark(pcap: &Path, filter: Option<&str>, fields: &[&str]) -> Vec<Vec<String>> {
    let mut cmd = Command::new("tshark");
    cmd.args(["-n", "-o", "ip.check_checksum:TRUE", "-r"])
        .arg(pcap)
        .args(["-T", "fields"]);
    if let Some(f) = filter {
        cmd.args(["-Y", f]);
    }
    for f in fields {
        cmd.args(["-e", f]);
    }
    let out = match cmd.output() {
        Ok(o) => o,
        Err(e) => panic!("cannot run tshark ({e}); install it (Debian: apt-get install tshark)"),
    };
    assert!(
        out.status.success(),
        "tshark failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| l.split('\t').map(str::to_string).collect())
        .collect()
}

fn run_cli(args: &[&str]) {
    let out = fabemu(args);
    assert!(
        out.status.success(),
        "fabemu {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn tshark_decodes_a_data_mode_capture_with_good_checksums() {
    if !has_tshark() {
        return;
    }
    let scen = temp_scenario("one-flow.yaml", ONE_FLOW);
    let dir = out_dir("tshark");
    let _ = std::fs::create_dir_all(&dir);
    let pcap = dir.join("a.pcap");
    let (s, p) = (scen.to_string_lossy(), pcap.to_string_lossy());
    run_cli(&["run", &s, "--quiet", "--pcap", &p, "--capture", "a"]);
    let rows = tshark(
        &pcap,
        None,
        &[
            "frame.len",
            "frame.cap_len",
            "ip.checksum.status",
            "infiniband.bth.opcode",
            "infiniband.bth.psn",
            "ip.dsfield.ecn",
        ],
    );
    // Host a's port sees its 2000 data packets leave and the ACKs (one per packet) arrive.
    let n = (SIZE / MTU) as usize;
    let data: Vec<&Vec<String>> = rows.iter().filter(|r| r[3] != "17").collect();
    let acks = rows.iter().filter(|r| r[3] == "17").count();
    assert_eq!(data.len(), n);
    assert_eq!(acks, n);
    // RDMA WRITE First (6), Middle (7) ..., Last with Immediate (9); PSNs 0, 1, 2, ...
    assert_eq!(data[0][3], "6");
    assert!(data[1..n - 1].iter().all(|r| r[3] == "7"));
    assert_eq!(data[n - 1][3], "9");
    for (i, r) in data.iter().enumerate() {
        assert_eq!(r[4], i.to_string(), "PSN of packet {i}");
        assert_eq!(r[5], "2", "data packets leave as ECT(0)");
    }
    // Data mode: whole frames, every IPv4 header checksum good (1 = good, 0 = bad).
    assert!(rows.iter().all(|r| r[0] == r[1]), "a frame was truncated");
    assert!(
        rows.iter().all(|r| r[2] == "1"),
        "bad or unverified checksum"
    );
}

/// A pcapng capture of a host port and every port of its leaf: tshark reads each frame's
/// interface (`NODE:PORT`) and direction, and they agree with the addresses in the frame.
#[test]
fn tshark_reads_each_frames_port_and_direction_from_a_pcapng_capture() {
    if !has_tshark() {
        return;
    }
    let scen = temp_scenario("ls-pcapng.yaml", LEAF_SPINE);
    let dir = out_dir("pcapng");
    let _ = std::fs::create_dir_all(&dir);
    let pcap = dir.join("c.pcapng");
    let (s, p) = (scen.to_string_lossy(), pcap.to_string_lossy());
    run_cli(&["run", &s, "--quiet", "--pcap", &p, "--capture", "h0,leaf0"]);
    assert_eq!(
        std::fs::read(&pcap).unwrap_or_default().get(..4),
        Some(&[0x0a, 0x0d, 0x0d, 0x0a][..]),
        "not a pcapng section header"
    );
    let rows = tshark(
        &pcap,
        None,
        &[
            "frame.interface_name",
            "frame.packet_flags_direction",
            "ip.src",
            "ip.dst",
            "ip.checksum.status",
            "frame.time_epoch",
        ],
    );
    // h0 and h1 are leaf0's hosts (10.0.0.1, 10.0.0.2); leaf0's ports 2 and 3 go to the spines.
    let (h0, h1) = ("10.0.0.1", "10.0.0.2");
    let local = |ip: &str| ip == h0 || ip == h1;
    let mut count = std::collections::BTreeMap::new();
    for r in &rows {
        let (iface, src, dst) = (r[0].as_str(), r[2].as_str(), r[3].as_str());
        // epb_flags bits 0-1: 1 inbound, 2 outbound (tshark prints the flags word in hex).
        let flags = u32::from_str_radix(r[1].trim_start_matches("0x"), 16).unwrap_or(0);
        let out = match flags & 3 {
            1 => false,
            2 => true,
            _ => panic!("frame without a direction: {r:?}"),
        };
        let ok = match (iface, out) {
            ("h0:0", true) | ("leaf0:0", false) => src == h0,
            ("h0:0", false) | ("leaf0:0", true) => dst == h0,
            ("leaf0:1", false) => src == h1,
            ("leaf0:1", true) => dst == h1,
            ("leaf0:2" | "leaf0:3", true) => local(src) && !local(dst),
            ("leaf0:2" | "leaf0:3", false) => local(dst) && !local(src),
            _ => panic!("unexpected interface {iface}"),
        };
        assert!(
            ok,
            "{iface} {} carries {src} -> {dst}",
            if out { "out" } else { "in" }
        );
        assert_eq!(r[4], "1", "bad or unverified IPv4 checksum: {r:?}");
        *count.entry((iface.to_string(), out)).or_insert(0) += 1;
    }
    // Every frame h0 sends arrives at leaf0's port 0 and the other way round (all delivered).
    let n = |i: &str, o: bool| count.get(&(i.to_string(), o)).copied().unwrap_or(0);
    assert!(n("h0:0", true) > 0 && n("h0:0", false) > 0, "{count:?}");
    assert_eq!(n("h0:0", true), n("leaf0:0", false));
    assert_eq!(n("h0:0", false), n("leaf0:0", true));
    // Picosecond timestamps are read as such: h0's first frame (4194 wire bytes: 4 KiB of
    // payload, 74 of headers, ICRC, FCS, preamble, gap) leaves at 0 and its last bit reaches
    // leaf0 after 4194 x 80 ps + 500 ns = 835.52 ns, shown in whole nanoseconds.
    let first_in = rows
        .iter()
        .find(|r| r[0] == "leaf0:0")
        .map(|r| r[5].clone());
    assert_eq!(first_in.as_deref(), Some("0.000000835"));
    // Nothing tshark cannot dissect.
    let malformed = tshark(&pcap, Some("_ws.malformed"), &["frame.number"]);
    assert!(malformed.is_empty(), "malformed frames: {malformed:?}");
}

#[test]
fn timing_mode_capture_keeps_headers_and_the_original_length() {
    if !has_tshark() {
        return;
    }
    let yaml = ONE_FLOW.replace("mode: data", "mode: timing");
    let scen = temp_scenario("one-flow-timing.yaml", &yaml);
    let dir = out_dir("timing");
    let _ = std::fs::create_dir_all(&dir);
    let pcap = dir.join("t.pcap");
    let (s, p) = (scen.to_string_lossy(), pcap.to_string_lossy());
    run_cli(&["run", &s, "--quiet", "--pcap", &p]);
    let rows = tshark(
        &pcap,
        Some("infiniband.bth.opcode == 7"),
        &["frame.len", "frame.cap_len", "ip.checksum.status"],
    );
    // Every host port is tapped by default: each packet leaves a and arrives at b.
    assert_eq!(rows.len(), 2 * ((SIZE / MTU) as usize - 2));
    // Middle packets: 54 header bytes captured of 54 + 1024 + 4 (ICRC).
    assert!(rows
        .iter()
        .all(|r| r[0] == "1082" && r[1] == "54" && r[2] == "1"));
}

fn frame(time_ps: u64, data: Vec<u8>) -> CapturedFrame {
    CapturedFrame {
        time: Time(time_ps),
        actor: 0,
        port: 0,
        direction: CaptureDirection::Out,
        origin: time_ps,
        orig_len: data.len() as u32,
        data,
    }
}

#[test]
fn tshark_decodes_ecn_marks_cnps_and_pfc_pauses() {
    if !has_tshark() {
        return;
    }
    // A real data frame from a run, marked CE the way switches mark it (IPv4 ECN bits and
    // header checksum rewritten); a CNP and a PFC pause built by the wire module.
    let src = match load_str(ONE_FLOW, "<test>") {
        Ok(s) => s,
        Err(e) => panic!("{e}"),
    };
    let dir = out_dir("ecn");
    let _ = std::fs::create_dir_all(&dir);
    let opts = ObserveOptions {
        pcap: Some(dir.join("unused.pcap")),
        capture: Some("a:0".into()),
        pcap_max_packets: 2,
        ..ObserveOptions::default()
    };
    let obs = match run_observed(&src, 1, &opts, None) {
        Ok(o) => o,
        Err(e) => panic!("{e}"),
    };
    let Some(cap) = obs.capture else {
        panic!("no capture")
    };
    assert_eq!(cap.frames.len(), 2, "the cap keeps the first 2 frames");
    assert!(cap.dropped > 0);
    let mut marked = cap.frames[0].data.clone();
    if let Err(e) = wire::set_ecn(&mut marked, Ecn::Ce) {
        panic!("{e}");
    }
    let repr = match RoceRepr::parse(&marked) {
        Ok(r) => r,
        Err(e) => panic!("{e}"),
    };
    let cnp = RoceRepr::cnp(
        repr.dst_mac,
        repr.src_mac,
        repr.dst_ip,
        repr.src_ip,
        repr.udp_src_port,
        repr.bth.dest_qp,
    );
    let mut cnp_bytes = vec![0u8; cnp.frame_len()];
    if let Err(e) = cnp.emit_frame(&[], &mut cnp_bytes) {
        panic!("{e}");
    }
    let mut pfc_bytes = vec![0u8; PfcPauseRepr::buffer_len()];
    if let Err(e) = PfcPauseRepr::xoff(repr.dst_mac, 3, 0xffff).emit(&mut pfc_bytes) {
        panic!("{e}");
    }
    let path = dir.join("marks.pcap");
    let frames = vec![
        frame(1_000, cap.frames[0].data.clone()),
        frame(2_000, marked),
        frame(3_000, cnp_bytes),
        frame(4_000, pfc_bytes),
    ];
    if let Err(e) = pcap::write_file(&path, &frames) {
        panic!("{e}");
    }
    let ecn = tshark(
        &path,
        Some("ip.dsfield.ecn == 3"),
        &["frame.number", "ip.checksum.status"],
    );
    assert_eq!(ecn, vec![vec!["2".to_string(), "1".to_string()]]);
    let cnps = tshark(
        &path,
        Some("infiniband.bth.opcode == 0x81"),
        &["frame.number"],
    );
    assert_eq!(cnps, vec![vec!["3".to_string()]]);
    let pfc = tshark(
        &path,
        Some("macc.opcode == 0x0101"),
        &["frame.number", "macc.cbfc.pause_time.c3"],
    );
    assert_eq!(pfc, vec![vec!["4".to_string(), "65535".to_string()]]);
    // Nanosecond timestamps from virtual time.
    let t = tshark(&path, None, &["frame.time_epoch"]);
    assert_eq!(t[3][0], "0.000000004");
}

#[test]
fn latency_percentiles_match_the_closed_form() {
    let src = match load_str(ONE_FLOW, "<test>") {
        Ok(s) => s,
        Err(e) => panic!("{e}"),
    };
    let r = match fabemu::run_source(&src, 1, None) {
        Ok(r) => r,
        Err(e) => panic!("{e}"),
    };
    let wire = message_wire_bytes(SIZE, MTU);
    let n = wire.len();
    assert_eq!(n, 2000);
    // Each packet is created when the idle port can send it: latency = its serialization + the
    // link latency. 1998 middle packets share one value; the first (RETH, 16 B more) is the
    // largest, the last (ImmDt, 4 B more) the second largest. So p50..p99.9 (rank <= 1998 of
    // 2000) are the middle value and max is the first packet's.
    let lat = |w: u64| w * PS_PER_BYTE_100G + LAT_PS;
    let middle = lat(wire[1]);
    assert_eq!(wire[1], 1024 + 54 + 4 + ETH_OVERHEAD);
    let Some(p) = r.latency.packet_one_way else {
        panic!("no packet latency histogram")
    };
    assert_eq!(p.count, n as u64);
    assert_eq!(p.min_ps, middle);
    assert_eq!(p.max_ps, lat(wire[0]));
    // Quantiles are hdrhistogram values at 3 significant digits: the true value up to 0.1%
    // above it (the highest value of its bucket).
    for q in [p.p50_ps, p.p90_ps, p.p99_ps, p.p999_ps] {
        assert!(
            q >= middle && (q - middle) as f64 <= middle as f64 * 1e-3,
            "{q} vs {middle}"
        );
    }
    // One message: its completion is the whole message's wire time plus the link latency
    // (every packet streams behind the first over the one hop), exact at the extremes.
    let Some(m) = r.latency.message_completion else {
        panic!("no completion histogram")
    };
    let want = wire.iter().sum::<u64>() * PS_PER_BYTE_100G + LAT_PS;
    assert_eq!(r.messages[0].completion_time_ps, Some(want));
    assert_eq!((m.count, m.min_ps, m.max_ps), (1, want, want));
    // The summary shows them.
    let summary = fabemu::report::summary(&r);
    assert!(summary.contains("packet one-way latency:"), "{summary}");
}

fn read_csv(path: &Path) -> (Vec<String>, Vec<Vec<f64>>) {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) => panic!("cannot read {}: {e}", path.display()),
    };
    let mut lines = text.lines();
    let header: Vec<String> = lines
        .next()
        .unwrap_or("")
        .split(',')
        .map(str::to_string)
        .collect();
    let rows = lines
        .map(|l| {
            l.split(',')
                .map(|v| v.parse().unwrap_or(f64::NAN))
                .collect()
        })
        .collect();
    (header, rows)
}

#[test]
fn a_saturated_link_reports_full_utilization_while_busy() {
    let scen = temp_scenario("one-flow-ts.yaml", ONE_FLOW);
    let dir = out_dir("series");
    let (s, d) = (scen.to_string_lossy(), dir.to_string_lossy());
    run_cli(&[
        "run",
        &s,
        "--quiet",
        "--out",
        &d,
        "--sample-interval",
        "1us",
    ]);
    let (header, rows) = read_csv(&dir.join("link_utilization.csv"));
    let col = match header.iter().position(|h| h == "a->b") {
        Some(c) => c,
        None => panic!("no a->b column in {header:?}"),
    };
    // The sender's port serializes back to back from 0 to the wire time of the message.
    let busy_end = message_wire_bytes(SIZE, MTU).iter().sum::<u64>() * PS_PER_BYTE_100G;
    let full: Vec<&Vec<f64>> = rows
        .iter()
        .filter(|r| r[0] as u64 + 1_000_000 <= busy_end)
        .collect();
    assert!(full.len() >= 160, "only {} busy buckets", full.len());
    // Utilization is computed exactly from serialization intervals and the NIC never idles
    // between packets, so every fully busy bucket is 1.0; the bound is 1%.
    for r in &full {
        assert!(
            r[col] >= 0.99 && r[col] <= 1.0 + 1e-9,
            "bucket at {}: {}",
            r[0],
            r[col]
        );
    }
    // After the message the link is idle.
    let after: Vec<&Vec<f64>> = rows
        .iter()
        .filter(|r| r[0] as u64 >= busy_end + 1_000_000)
        .collect();
    assert!(!after.is_empty() && after.iter().all(|r| r[col] == 0.0));
    // The time axis steps by the interval.
    assert_eq!(rows[1][0] - rows[0][0], 1e6);
}

/// After the last ACK the run goes on until the sender's idle retransmission timer fires
/// (about 1 ms later): the series end with the traffic, at the resolution it needs, not there.
#[test]
fn series_end_when_the_traffic_ends_not_when_idle_timers_fire() {
    let scen = temp_scenario("one-flow-end.yaml", ONE_FLOW);
    let dir = out_dir("series-end");
    let (s, d) = (scen.to_string_lossy(), dir.to_string_lossy());
    run_cli(&["run", &s, "--quiet", "--out", &d]);
    let json = std::fs::read_to_string(dir.join("report.json")).unwrap_or_default();
    let r: serde_json::Value = serde_json::from_str(&json).unwrap();
    let done = r["totals"]["completion_time_ps"].as_u64().unwrap();
    let end = r["totals"]["simulated_time_ps"].as_u64().unwrap();
    assert!(
        end > 3 * done,
        "the run should outlast its traffic: {end} vs {done}"
    );
    let (_, rows) = read_csv(&dir.join("link_utilization.csv"));
    let step = (rows[1][0] - rows[0][0]) as u64;
    // The traffic (179 us, the last ACK's arrival) sets the interval: 100 ns gives 1790
    // buckets, within the 200..2000 the adaptive interval promises; the series stop one
    // interval after the bucket holding the end.
    assert_eq!(step, 100_000);
    let last = rows.last().map_or(0, |r| r[0] as u64);
    assert!(
        last <= done + step && last + 2 * step > done,
        "last row at {last} ps, traffic ended at {done} ps"
    );
}

#[test]
fn out_dir_has_the_documented_layout() {
    let scen = temp_scenario("ls-out.yaml", LEAF_SPINE);
    let dir = out_dir("layout");
    let (s, d) = (scen.to_string_lossy(), dir.to_string_lossy());
    run_cli(&["run", &s, "--quiet", "--out", &d, "--capture", "leaf0"]);
    for f in [
        "report.json",
        "summary.txt",
        "link_utilization.csv",
        "dimension_utilization.csv",
        "queue_depth.csv",
        "link_utilization.png",
        "link_utilization.svg",
        "capture.pcap",
    ] {
        assert!(dir.join(f).exists(), "{f} missing");
    }
    let png = std::fs::read(dir.join("link_utilization.png")).unwrap_or_default();
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"));
    let json = std::fs::read_to_string(dir.join("report.json")).unwrap_or_default();
    assert!(json.contains("\"packet_one_way\""));
    // Default interval: a power of ten giving 200 to 2000 rows.
    let (_, rows) = read_csv(&dir.join("dimension_utilization.csv"));
    assert!((200..=2000).contains(&rows.len()), "{} rows", rows.len());
    let step = (rows[1][0] - rows[0][0]) as u64;
    assert!(step
        .to_string()
        .trim_start_matches('1')
        .chars()
        .all(|c| c == '0'));
}

#[test]
fn capture_and_series_are_identical_for_any_thread_count() {
    let scen = temp_scenario("ls-threads.yaml", LEAF_SPINE);
    let s = scen.to_string_lossy().to_string();
    let mut outputs = Vec::new();
    for threads in ["1", "3"] {
        let dir = out_dir(&format!("threads{threads}"));
        let d = dir.to_string_lossy().to_string();
        let capture = "h0,spine0:1,leaf1";
        run_cli(&[
            "run",
            &s,
            "--quiet",
            "--threads",
            threads,
            "--out",
            &d,
            "--capture",
            capture,
        ]);
        // The same capture as pcapng (interfaces, directions, picoseconds) to a file of its own.
        let _ = std::fs::create_dir_all(&dir);
        let ng = dir.join("c.pcapng").to_string_lossy().to_string();
        run_cli(&[
            "run",
            &s,
            "--quiet",
            "--threads",
            threads,
            "--pcap",
            &ng,
            "--capture",
            capture,
        ]);
        let read = |f: &str| std::fs::read(dir.join(f)).unwrap_or_default();
        outputs.push([
            read("capture.pcap"),
            read("c.pcapng"),
            read("link_utilization.csv"),
            read("dimension_utilization.csv"),
        ]);
    }
    assert!(outputs[0][0].len() > 24, "empty capture");
    assert!(outputs[0][1].len() > 1000, "empty pcapng capture");
    assert!(
        outputs[0] == outputs[1],
        "outputs differ between 1 and 3 threads"
    );
}

#[test]
fn bad_capture_names_are_input_errors() {
    let scen = temp_scenario("one-flow-bad.yaml", ONE_FLOW);
    let s = scen.to_string_lossy();
    let out = fabemu(&["run", &s, "--pcap", "/dev/null", "--capture", "nosuch"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no host or switch named `nosuch`"));
    let out = fabemu(&["run", &s, "--capture", "a"]);
    assert_eq!(
        out.status.code(),
        Some(2),
        "--capture without a destination"
    );
}

/// Two senders under one switch write back to back to one receiver, PFC off and a big
/// buffer: the switch's port toward the receiver gets 200 Gb/s in and sends 100 Gb/s out, so
/// its queue grows by 12.5 bytes per ns (one 4178-byte wire frame every 334 ns) from when the
/// first frames of both senders have arrived until the senders are done.
#[test]
fn queue_depth_of_a_two_to_one_incast_grows_at_the_closed_form_rate() {
    let yaml = "mode: timing\nnic: {mtu: 4KiB}\nswitch_buffer: {total: 32MiB}\n\
                topology:\n  star: {hosts: 3, bandwidth: 100Gbps, latency: 1us}\n\
                workload:\n  messages:\n    - {src: h1, dst: h0, size: 2MiB}\n    - {src: h2, dst: h0, size: 2MiB}\n";
    let scen = temp_scenario("incast-queue.yaml", yaml);
    let dir = out_dir("queue");
    let (s, d) = (scen.to_string_lossy(), dir.to_string_lossy());
    run_cli(&[
        "run",
        &s,
        "--quiet",
        "--out",
        &d,
        "--sample-interval",
        "10us",
    ]);
    let (header, rows) = read_csv(&dir.join("queue_depth.csv"));
    let col = match header.iter().position(|h| h == "switch0->h0") {
        Some(c) => c,
        None => panic!("no switch0->h0 column in {header:?}"),
    };
    // Between 20 us and 140 us (the senders need 2 MiB x 4178/4096 / 12.5 GB/s = 171 us), one
    // net frame joins the queue per wire-frame time (4178 B x 80 ps = 334.24 ns), and the
    // queue counts frame bytes (4154: no FCS, preamble or gap): 10 us / 334.24 ns x 4154 B =
    // 124,283 B per row, within one frame (a sample falls between two arrivals).
    let per_row = 10_000_000.0 / (4178.0 * 80.0) * 4154.0;
    let window: Vec<&Vec<f64>> = rows
        .iter()
        .filter(|r| (20e6..=140e6).contains(&r[0]))
        .collect();
    assert!(window.len() >= 12, "{} rows", window.len());
    for w in window.windows(2) {
        let rise = w[1][col] - w[0][col];
        assert!(
            (rise - per_row).abs() <= 4154.0,
            "at {} ps the queue rose by {rise} B, closed form {per_row}",
            w[1][0]
        );
    }
    // After everything has drained the queue is empty.
    let last = rows.last().map_or(f64::NAN, |r| r[col]);
    assert_eq!(last, 0.0);
}

/// A real run with PFC, ECN and DCQCN, captured at the hosts: CE-marked data arrives at the
/// receiver (the switch marked it), the receiver sends CNPs, and the switch pauses the
/// senders with 802.1Qbb frames that tshark decodes.
#[test]
fn tshark_decodes_marks_cnps_and_pauses_from_a_real_run() {
    if !has_tshark() {
        return;
    }
    let mut yaml = String::from(
        "mode: timing\nnic: {mtu: 4KiB, cc: dcqcn}\nswitch_buffer:\n  total: 1MiB\n  pfc: {enabled: true}\n  ecn: {kmin: 5KB, kmax: 50KB, pmax: 0.1}\n\
         topology:\n  star: {hosts: 5, bandwidth: 100Gbps, latency: 1us}\nworkload:\n  messages:\n",
    );
    for i in 1..5 {
        yaml += &format!("    - {{src: h{i}, dst: h0, size: 1MiB}}\n");
    }
    let scen = temp_scenario("lossless-capture.yaml", &yaml);
    let dir = out_dir("lossless-capture");
    let _ = std::fs::create_dir_all(&dir);
    let pcap = dir.join("l.pcap");
    let (s, p) = (scen.to_string_lossy(), pcap.to_string_lossy());
    run_cli(&["run", &s, "--quiet", "--pcap", &p]);
    let ce = tshark(
        &pcap,
        Some("ip.dsfield.ecn == 3 && ip.dst == 10.0.0.1"),
        &["frame.number"],
    );
    assert!(!ce.is_empty(), "no CE-marked frame reached h0");
    let cnps = tshark(
        &pcap,
        Some("infiniband.bth.opcode == 0x81"),
        &["ip.src", "ip.dst", "ip.dsfield.ecn"],
    );
    assert!(!cnps.is_empty(), "no CNP");
    // CNPs go from the receiver back to senders, and are not ECN-capable.
    assert!(cnps
        .iter()
        .all(|r| r[0] == "10.0.0.1" && r[1] != "10.0.0.1" && r[2] == "0"));
    let pauses = tshark(
        &pcap,
        Some("macc.opcode == 0x0101"),
        &["macc.cbfc.pause_time.c3"],
    );
    assert!(!pauses.is_empty(), "no PFC frame");
    assert!(pauses.iter().any(|r| r[0] == "65535"), "{pauses:?}");
}

/// The frames of a classic pcap file (24-byte file header, 16-byte record headers).
fn pcap_frames(path: &Path) -> Vec<Vec<u8>> {
    let bytes = std::fs::read(path).unwrap_or_default();
    let mut out = Vec::new();
    let mut at = 24;
    while at + 16 <= bytes.len() {
        let mut len = [0u8; 4];
        len.copy_from_slice(&bytes[at + 8..at + 12]);
        let n = u32::from_le_bytes(len) as usize;
        at += 16;
        if at + n > bytes.len() {
            break;
        }
        out.push(bytes[at..at + n].to_vec());
        at += n;
    }
    out
}

#[test]
fn every_roce_frame_of_a_data_mode_run_carries_a_correct_icrc() {
    // Lossy (drops, so NAKs), ECN-marked with DCQCN (so CNPs), data mode: every RoCE frame
    // type a NIC sends crosses the captured ports.
    let mut yaml = String::from(
        "mode: data\nnic: {mtu: 4KiB, cc: dcqcn, rto: 50us}\nswitch_buffer:\n  total: 128KiB\n  ecn: {kmin: 5KB, kmax: 50KB, pmax: 0.2}\n\
         topology:\n  star: {hosts: 5, bandwidth: 100Gbps, latency: 1us}\nworkload:\n  messages:\n",
    );
    for i in 1..5 {
        yaml += &format!("    - {{src: h{i}, dst: h0, size: 1MiB}}\n");
    }
    let scen = temp_scenario("icrc-capture.yaml", &yaml);
    let dir = out_dir("icrc-capture");
    let _ = std::fs::create_dir_all(&dir);
    let pcap = dir.join("i.pcap");
    let (s, p) = (scen.to_string_lossy(), pcap.to_string_lossy());
    run_cli(&["run", &s, "--quiet", "--pcap", &p]);
    let (mut data, mut acks, mut naks, mut cnps) = (0, 0, 0, 0);
    for f in pcap_frames(&pcap) {
        // RoCEv2: IPv4 (ethertype 0x0800) carrying UDP to port 4791.
        if f.len() < 58 || f[12..14] != [0x08, 0x00] || f[36..38] != [0x12, 0xB7] {
            continue;
        }
        if let Err(e) = wire::check_icrc(&f) {
            panic!("bad ICRC on a frame with opcode {:#x}: {e}", f[42]);
        }
        match f[42] {
            0x11 if f[54] >> 5 == 3 => naks += 1,
            0x11 => acks += 1,
            0x81 => cnps += 1,
            _ => data += 1,
        }
    }
    assert!(data > 0 && acks > 0, "data {data}, acks {acks}");
    assert!(naks > 0, "no NAK captured");
    assert!(cnps > 0, "no CNP captured");
}

/// Runs this test binary's `test` alone with no tshark on PATH and `CI` set to `ci`.
fn run_without_tshark(test: &str, ci: &str) -> std::process::Output {
    Command::new(std::env::current_exe().expect("test binary"))
        .args(["--exact", test, "--nocapture", "--test-threads", "1"])
        .env("PATH", "")
        .env("CI", ci)
        .output()
        .expect("test binary runs")
}

#[test]
fn without_tshark_capture_tests_skip_outside_ci_and_fail_under_ci() {
    let test = "observe::tshark_decodes_ecn_marks_cnps_and_pfc_pauses";
    let out = run_without_tshark(test, "");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "outside CI: {err}");
    assert!(err.contains("skipped: tshark is not installed"), "{err}");
    let out = run_without_tshark(test, "true");
    let text = String::from_utf8_lossy(&out.stdout) + String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "under CI: {text}");
    assert!(
        text.contains("under CI the capture tests must run"),
        "{text}"
    );
}

/// Messages whose last packets carry 1, 2 and 3 bytes (and one of 3 bytes alone, a WRITE Only
/// with RETH and immediate), so every pad count appears.
const ODD_SIZES: &str = "
name: odd-sizes
mode: data
nic: {mtu: 1KiB}
hosts: [a, b]
links:
  - {a: a, b: b, bandwidth: 100Gbps, latency: 1us}
workload:
  messages:
    - {src: a, dst: b, size: 2049B}
    - {src: a, dst: b, size: 1026B}
    - {src: a, dst: b, size: 3B}
    - {src: a, dst: b, size: 4096B}
";

/// InfiniBand pads a payload to 4 bytes (BTH PadCnt, the pad inside the ICRC), as Linux rxe
/// sends it: every data frame's payload plus pad is a multiple of 4, the pad bytes are zero,
/// the ICRC covers them, the receiver's payload excludes them (the data checks), and tshark
/// reads the pad count and finds the ICRC right after the pad (it shows an RDMA WRITE's
/// payload with its pad as data), with no malformed or warned frame.
#[test]
fn payloads_are_padded_to_4_bytes_with_the_icrc_over_the_pad() {
    let src = load_str(ODD_SIZES, "<test>").unwrap();
    let dir = out_dir("pad");
    let _ = std::fs::create_dir_all(&dir);
    let file = dir.join("pad.pcap");
    let opts = ObserveOptions {
        pcap: Some(file.clone()),
        capture: Some("a".into()),
        ..ObserveOptions::default()
    };
    let obs = run_observed(&src, 1, &opts, None).unwrap();
    assert!(obs.report.invariants.ok);
    assert_eq!(obs.report.messages.len(), 4);
    assert!(obs.report.messages.iter().all(|m| m.data_ok == Some(true)));
    let cap = obs.capture.expect("a capture");
    // (payload, pad) of every data frame a sent, in order.
    let mut sent = Vec::new();
    let mut icrcs = Vec::new();
    for f in &cap.frames {
        let b = &f.data;
        wire::check_icrc(b).unwrap_or_else(|e| panic!("bad ICRC: {e}"));
        let repr = RoceRepr::parse(b).unwrap();
        if repr.bth.opcode == wire::opcode::ACK {
            assert_eq!(repr.bth.pad_count, 0);
            continue;
        }
        let (n, pad) = (repr.payload_len, usize::from(repr.bth.pad_count));
        assert_eq!((n + pad) % 4, 0, "payload {n} with pad {pad}");
        assert!(pad < 4);
        // The pad is zero bytes between the payload and the ICRC.
        let end = b.len() - wire::ICRC_LEN;
        assert!(b[end - pad..end].iter().all(|&x| x == 0));
        assert_eq!(b.len(), repr.header_len() + n + pad + wire::ICRC_LEN);
        sent.push((n, pad));
        icrcs.push(u32::from_be_bytes(b[end..].try_into().unwrap()));
    }
    assert_eq!(
        sent,
        [
            (1024, 0),
            (1024, 0),
            (1, 3),
            (1024, 0),
            (2, 2),
            (3, 1),
            (1024, 0),
            (1024, 0),
            (1024, 0),
            (1024, 0),
        ]
    );
    // Each frame is captured whole: its length on the wire counts the pad.
    assert!(cap
        .frames
        .iter()
        .all(|f| f.orig_len as usize == f.data.len()));

    // The same frames as tshark reads them, written as the CLI's `--pcap` writes them.
    if !has_tshark() {
        return;
    }
    pcap::write_file(&file, &cap.frames).unwrap();
    let rows = tshark(
        &file,
        Some("infiniband && infiniband.bth.opcode != 17"),
        &[
            "infiniband.bth.padcnt",
            "data.len",
            "infiniband.invariant.crc",
            "frame.len",
        ],
    );
    assert_eq!(rows.len(), sent.len());
    for ((r, (n, pad)), icrc) in rows.iter().zip(&sent).zip(&icrcs) {
        assert_eq!(r[0], pad.to_string(), "{r:?}");
        // tshark's data is the payload and its pad, and the ICRC (checked above) follows.
        assert_eq!(r[1], (n + pad).to_string(), "{r:?}");
        assert_eq!(r[2], format!("0x{icrc:08x}"), "{r:?}");
    }
    let bad = tshark(
        &file,
        Some("_ws.malformed || _ws.expert.severity >= warning"),
        &["frame.number"],
    );
    assert!(bad.is_empty(), "malformed or warned frames: {bad:?}");
}
