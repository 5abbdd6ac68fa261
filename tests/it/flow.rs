//! Flow fidelity against the packet level: the same scenario run at both fidelities in the
//! test, compared.
//!
//! Where every bottleneck is shared by flows that all cross it and nothing else (collectives on
//! symmetric fabrics, an incast), max-min fair rates are exactly what FIFO queues give, and the
//! flow model (wire bytes per message, ACK bytes on the reverse path, the last packet's
//! store-and-forward per hop, latencies) reproduces the packet level's closed forms: the
//! tolerance is 1% (measured on these 8 MiB collectives: at most 0.05%; smaller messages differ
//! more, up to 1.0% for a 256 KiB ring All-Reduce, since the fluid model has no packets).
//!
//! Where flows cross several bottlenecks (a permutation on an oversubscribed fat-tree), FIFO
//! queues without congestion control share a link in proportion to the rates flows arrive
//! with, not max-min; single messages then differ under max-min (measured below), while the
//! makespan and the mean stay close. `flow_model: queues` models the FIFO queues and meets the
//! per-message bar there.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: a failure is a panic

use crate::common;

use common::{fabemu, run_yaml, temp_scenario};
use fabemu::Report;

/// The scenario at both fidelities: (packet, flow).
fn both(yaml: &str) -> (Report, Report) {
    let packet = run_yaml(yaml, 1);
    let flow = run_yaml(&format!("fidelity: flow\n{yaml}"), 1);
    assert!(packet.invariants.ok, "{:?}", packet.invariants.violations);
    assert!(flow.invariants.ok, "{:?}", flow.invariants.violations);
    (packet, flow)
}

fn collective_time(r: &Report, i: usize) -> u64 {
    let c = &r.collectives[i];
    match (c.start_ps, c.end_ps) {
        (Some(s), Some(e)) => e - s,
        _ => panic!("collective {i} did not finish: {c:?}"),
    }
}

fn rel(a: u64, b: u64) -> f64 {
    (a as f64 - b as f64).abs() / b as f64
}

fn assert_collectives_agree(yaml: &str, tol: f64) {
    let (p, f) = both(yaml);
    assert_eq!(p.collectives.len(), f.collectives.len());
    for i in 0..p.collectives.len() {
        let (tp, tf) = (collective_time(&p, i), collective_time(&f, i));
        let e = rel(tf, tp);
        assert!(
            e <= tol,
            "collective {i} ({} {}): packet {tp} ps, flow {tf} ps, off by {:.3}%",
            p.collectives[i].op,
            p.collectives[i].algorithm,
            e * 100.0
        );
    }
}

#[test]
fn collectives_on_a_switch_agree_within_one_percent() {
    assert_collectives_agree(
        "topology:
  star: {hosts: 8, bandwidth: 100Gbps, latency: 1us}
workload:
  collectives:
    - {op: all_reduce, algorithm: ring, size: 8MiB}
    - {op: all_reduce, algorithm: direct, size: 8MiB}
    - {op: all_reduce, algorithm: halving_doubling, size: 8MiB}
    - {op: all_to_all, algorithm: direct, size: 8MiB}
",
        0.01,
    );
}

#[test]
fn ring_all_reduce_on_a_ring_agrees_within_one_percent() {
    assert_collectives_agree(
        "topology:
  ring: {hosts: 8, bandwidth: 100Gbps, latency: 1us}
workload:
  collectives:
    - {op: all_reduce, algorithm: ring, size: 8MiB}
",
        0.01,
    );
}

#[test]
fn hierarchical_all_reduce_on_two_dimensions_agrees_within_one_percent() {
    assert_collectives_agree(
        "topology:
  multi_dim:
    dimensions:
      - {kind: ring, size: 4, bandwidth: 200Gbps, latency: 500ns}
      - {kind: switch, size: 4, bandwidth: 100Gbps, latency: 1us}
workload:
  collectives:
    - {op: all_reduce, algorithm: [ring, direct], size: 8MiB}
    - {op: all_reduce, algorithm: [ring, ring], size: 8MiB, chunks: 4, policy: themis}
",
        0.01,
    );
}

#[test]
fn incast_on_a_star_agrees_within_one_percent() {
    let mut yaml = String::from(
        "topology:\n  star: {hosts: 9, bandwidth: 100Gbps, latency: 1us}\nworkload:\n  messages:\n",
    );
    for i in 1..9 {
        yaml += &format!("    - {{src: h{i}, dst: h0, size: 2MiB}}\n");
    }
    let (p, f) = both(&yaml);
    for (a, b) in p.messages.iter().zip(&f.messages) {
        let (Some(tp), Some(tf)) = (a.completion_time_ps, b.completion_time_ps) else {
            panic!("message {} did not complete", a.tag);
        };
        assert!(
            rel(tf, tp) <= 0.01,
            "message {}: packet {tp}, flow {tf}",
            a.tag
        );
    }
    // 8 x 2 MiB through one 100 Gb/s port: the makespan is the wire bytes at line rate.
    assert!(rel(f.totals.completion_time_ps, p.totals.completion_time_ps) <= 0.01);
}

/// ACK capacity held on links of many flows (see "Held releases" in flow/src/network.rs): h0's
/// downlink carries a 69:1 incast (69 flows, more than the 64 above which a link holds what
/// finished flows reserved) and the ACKs of h0's fan-out of short messages. The fan-out finishes
/// after ~380 us; the incast runs to ~5.9 ms on that link without their ACKs. Held until the
/// incast's own flows change, the ACK capacity made the incast 1.93% late against the packet
/// level; given back when the link's last reserving flow leaves, it agrees to 1e-6. The switch
/// buffer is large so that the packet level drops nothing (the flow model has no drops).
#[test]
fn incast_beside_a_fan_out_on_links_of_many_flows_agrees_within_one_percent() {
    let mut yaml = String::from(
        "switch_buffer: {total: 512MiB}\ntopology:\n  star: {hosts: 70, bandwidth: 100Gbps, latency: 1us}\nworkload:\n  messages:\n",
    );
    for i in 1..70 {
        yaml += &format!("    - {{src: h{i}, dst: h0, size: 1MiB}}\n");
    }
    for i in 1..70 {
        yaml += &format!("    - {{src: h0, dst: h{i}, size: 64KiB}}\n");
    }
    let (p, f) = both(&yaml);
    assert_eq!(p.totals.drops, 0);
    let last = |r: &Report, into_h0: bool| -> u64 {
        r.messages
            .iter()
            .filter(|m| (m.dst == "h0") == into_h0)
            .map(|m| m.completion_time_ps.unwrap_or(u64::MAX))
            .max()
            .unwrap_or(u64::MAX)
    };
    for into_h0 in [true, false] {
        let (tp, tf) = (last(&p, into_h0), last(&f, into_h0));
        assert!(
            rel(tf, tp) <= 0.01,
            "into h0 {into_h0}: packet {tp} ps, flow {tf} ps"
        );
    }
}

/// A random permutation (fixed by hand here) of 64 hosts on a k = 4 fat-tree with 4:1
/// oversubscription at the edge: 8 hosts share 2 uplinks, ECMP spreads flows unevenly.
fn permutation_scenario() -> String {
    const PERM: [u32; 64] = [
        10, 20, 12, 31, 50, 55, 19, 56, 43, 45, 0, 21, 1, 16, 8, 22, 11, 54, 53, 42, 24, 29, 18,
        33, 30, 28, 49, 61, 44, 40, 17, 48, 38, 59, 62, 39, 14, 7, 36, 51, 46, 35, 47, 15, 57, 26,
        27, 5, 2, 13, 32, 58, 37, 23, 6, 34, 52, 4, 3, 63, 25, 9, 60, 41,
    ];
    let mut y = String::from(
        "topology:
  fat_tree: {k: 4, oversubscription: 4, host_bandwidth: 100Gbps, host_latency: 500ns,
             fabric_bandwidth: 100Gbps, fabric_latency: 1us}
workload:
  messages:
",
    );
    for (i, d) in PERM.iter().enumerate() {
        y += &format!("    - {{src: h{i}, dst: h{d}, size: 4MiB}}\n");
    }
    y
}

#[test]
fn permutation_on_an_oversubscribed_fat_tree_takes_the_same_paths_and_time() {
    let (p, f) = both(&permutation_scenario());
    // Same ECMP choices: every link direction carried exactly the same wire bytes.
    for (a, b) in p.links.iter().zip(&f.links) {
        for (x, y) in [(&a.a_to_b, &b.a_to_b), (&a.b_to_a, &b.b_to_a)] {
            let d = x.tx_wire_bytes.abs_diff(y.tx_wire_bytes);
            assert!(
                d <= 64,
                "{} - {}: packet {} B, flow {} B",
                a.a,
                a.b,
                x.tx_wire_bytes,
                y.tx_wire_bytes
            );
        }
    }
    let ct = |r: &Report| -> Vec<u64> {
        r.messages
            .iter()
            .map(|m| m.completion_time_ps.unwrap_or(u64::MAX))
            .collect()
    };
    let (cp, cf) = (ct(&p), ct(&f));
    let mean = |v: &[u64]| v.iter().map(|&x| x as f64).sum::<f64>() / v.len() as f64;
    let (mp, mf) = (mean(&cp), mean(&cf));
    // Measured here (0ed244f): makespan 1.757 ms vs 1.759 ms (+0.13%); mean 1.222 ms vs
    // 1.233 ms (+0.85%); single messages from -21% to +65% (an earlier reservation model gave
    // a mean of +5.3% and -37%..+86%). Over five other random permutations of the same fabric
    // (measured with that earlier model): makespan within 0.5%, mean +7.8% to +11.2%, single
    // messages 0.47x to 3.9x. FIFO
    // queues without congestion control share a link by the rates flows arrive with and keep
    // the bytes of flows held up downstream in their buffers (which later drain at full
    // rate); max-min fair flows do neither. The aims of 5% for the mean and 15% per message
    // are beyond max-min; `flow_model: queues` meets them (the next test); these bounds hold
    // what max-min does give.
    let makespan = rel(f.totals.completion_time_ps, p.totals.completion_time_ps);
    assert!(makespan <= 0.01, "makespan off by {:.2}%", makespan * 100.0);
    let mean_err = (mf - mp).abs() / mp;
    assert!(
        mean_err <= 0.12,
        "mean completion off by {:.2}%",
        mean_err * 100.0
    );
    // Messages that share no bottleneck with a flow crossing another agree closely.
    let close = cp
        .iter()
        .zip(&cf)
        .filter(|(a, b)| rel(**b, **a) <= 0.01)
        .count();
    assert!(close >= 8, "only {close} messages agree within 1%");
}

#[test]
fn fifo_queue_model_matches_every_message_of_the_permutation() {
    let yaml = permutation_scenario();
    let p = run_yaml(&yaml, 1);
    let q = run_yaml(&format!("fidelity: flow\nflow_model: queues\n{yaml}"), 1);
    assert!(q.invariants.ok, "{:?}", q.invariants.violations);
    // The same paths: every link direction carried the same wire bytes (data and ACKs).
    for (a, b) in p.links.iter().zip(&q.links) {
        for (x, y) in [(&a.a_to_b, &b.a_to_b), (&a.b_to_a, &b.b_to_a)] {
            let d = x.tx_wire_bytes.abs_diff(y.tx_wire_bytes);
            assert!(
                d <= 64,
                "{} - {}: {} vs {}",
                a.a,
                a.b,
                x.tx_wire_bytes,
                y.tx_wire_bytes
            );
        }
    }
    // The aim: every message within 15%, the mean within 5%. Measured: every message
    // within 1.7% (fluid FIFO service has no packet granularity and no propagation delay
    // between hops), the mean 0.64% early; max-min on the same run: -21%..+65%, mean +0.85%.
    // Three more random permutations (seeds 11, 22, 33): every message within 3.1%, the mean
    // 0.6%..0.8% early (max-min: -50%..+104%, mean +1.0%..+2.8%).
    let (mut sp, mut sq) = (0.0, 0.0);
    for (a, b) in p.messages.iter().zip(&q.messages) {
        let (tp, tq) = (
            a.completion_time_ps.unwrap() as f64,
            b.completion_time_ps.unwrap() as f64,
        );
        let e = (tq - tp).abs() / tp;
        assert!(
            e <= 0.03,
            "{} -> {}: packet {tp} ps, queues {tq} ps",
            a.src,
            a.dst
        );
        sp += tp;
        sq += tq;
    }
    let mean_err = (sq - sp).abs() / sp;
    assert!(mean_err <= 0.01, "mean off by {:.2}%", mean_err * 100.0);
}

#[test]
fn fifo_queue_model_agrees_on_a_ring_all_reduce_over_a_fat_tree() {
    // Nothing is overloaded: FIFO queues pass everything through and agree with max-min.
    let yaml = "topology:
  fat_tree: {k: 4, host_bandwidth: 100Gbps, host_latency: 1us,
             fabric_bandwidth: 100Gbps, fabric_latency: 1us}
workload:
  collectives:
    - {op: all_reduce, algorithm: ring, size: 16MiB}
";
    let p = run_yaml(yaml, 1);
    let q = run_yaml(&format!("fidelity: flow\nflow_model: queues\n{yaml}"), 1);
    assert!(q.invariants.ok, "{:?}", q.invariants.violations);
    let e = rel(collective_time(&q, 0), collective_time(&p, 0));
    // Measured 0.01%; the same 1% as every agreement test here.
    assert!(e <= 0.01, "off by {:.3}%", e * 100.0);
}

#[test]
fn json_is_identical_for_any_thread_count() {
    let yaml = temp_scenario(
        "flow_threads.yaml",
        &format!("fidelity: flow\n{}", permutation_scenario()),
    );
    let path = yaml.to_string_lossy().into_owned();
    let mut outs = Vec::new();
    for t in ["1", "2", "4"] {
        let json = yaml.with_extension(format!("{t}.json"));
        let o = fabemu(&[
            "run",
            &path,
            "--threads",
            t,
            "--quiet",
            "--json",
            &json.to_string_lossy(),
        ]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let text = std::fs::read_to_string(&json).unwrap_or_default();
        let mut v: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
        if let Some(m) = v.as_object_mut() {
            m.remove("host");
        }
        outs.push(v);
    }
    assert_eq!(outs[0]["scenario"]["fidelity"], "flow");
    assert_eq!(outs[0], outs[1]);
    assert_eq!(outs[0], outs[2]);
}

#[test]
fn what_flows_do_not_model_is_refused_with_a_located_error() {
    let base = "topology:\n  star: {hosts: 4, bandwidth: 100Gbps, latency: 1us}\nworkload:\n  all_to_all: {size: 1MiB}\n";
    let cases: [(&str, &str); 7] = [
        ("mode: data\n", "mode"),
        ("lossless: true\n", "lossless"),
        ("nic: {cc: dcqcn}\n", "nic.cc"),
        ("nic: {pfc: {}}\n", "nic.pfc"),
        (
            "switch_buffer: {total: 32MiB, ecn: {kmin: 10KiB, kmax: 100KiB, pmax: 0.1}}\n",
            "switch_buffer.ecn",
        ),
        (
            "switch_buffer: {total: 32MiB, per_queue: 1MiB}\n",
            "switch_buffer.per_queue",
        ),
        (
            "switch_scheduler: {name: root, scheduling: fifo}\n",
            "switch_scheduler",
        ),
    ];
    for (i, (extra, field)) in cases.iter().enumerate() {
        // In the file ...
        let path = temp_scenario(
            &format!("refuse{i}.yaml"),
            &format!("fidelity: flow\n{extra}{base}"),
        );
        let p = path.to_string_lossy().into_owned();
        let o = fabemu(&["run", &p]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{extra}: {err}");
        assert!(
            err.contains(&format!("{p}:2:")),
            "{extra}: no file and line in {err}"
        );
        assert!(
            err.contains(&format!("field `{field}")),
            "{extra}: no field in {err}"
        );
        assert!(err.contains("fidelity: packet"), "{extra}: {err}");
        // ... and from the command line.
        let path = temp_scenario(&format!("refuse_cli{i}.yaml"), &format!("{extra}{base}"));
        let p = path.to_string_lossy().into_owned();
        let o = fabemu(&["run", &p, "--fidelity", "flow"]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{extra}: {err}");
        assert!(
            err.contains(&format!("{p}:1:")),
            "{extra}: no file and line in {err}"
        );
    }
}

/// Where senders without congestion control would overrun a buffer, the flow level says so.
/// `examples/lossless.yaml`: a 4:1 incast on r's port at s2 behind a PFC fabric. The packet
/// level pauses s1's port toward s2 and the victim v (which shares only that trunk) gets about
/// a quarter of its rate. The max-min model models the pause (see
/// `pfc_holds_the_victim_of_a_paused_trunk_as_the_packet_level_does`), and its warning says so;
/// the queue model does not, and its warning says that s2's port to r would queue beyond the
/// pause threshold (four 100 Gb/s senders over a 400 Gb/s trunk into 100 Gb/s: about 300 Gb/s
/// too much, against 16 MiB x 1/8 / (1 + 1/8) = 1.78 MiB) and the figures are too early. Both
/// record it in the report. A collective whose flows meet at equal rates raises nothing.
#[test]
fn the_flow_level_warns_where_pfc_would_pause() {
    for (model, modelled) in [("max_min", true), ("queues", false)] {
        let json = std::env::temp_dir().join(format!(
            "fabemu_flow_limits_{model}_{}.json",
            std::process::id()
        ));
        let o = fabemu(&[
            "run",
            "examples/lossless.yaml",
            "--fidelity",
            "flow",
            "--set",
            &format!("flow_model={model}"),
            "--quiet",
            "--json",
            &json.to_string_lossy(),
        ]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(o.status.success(), "{err}");
        let text = if modelled {
            "the flow level models the pause"
        } else {
            "PFC would pause"
        };
        assert!(
            err.contains("warning:") && err.contains("port s2 -> r") && err.contains(text),
            "{model}: {err}"
        );
        let text = std::fs::read_to_string(&json).unwrap();
        let _ = std::fs::remove_file(&json);
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        let limits = v["flow_limits"]
            .as_array()
            .expect("flow_limits in the report");
        let r = limits
            .iter()
            .find(|l| l["port"] == "s2 -> r")
            .unwrap_or_else(|| panic!("{limits:?}"));
        assert_eq!(r["consequence"], "pause");
        let (q, t) = (
            r["queue_bytes"].as_u64().unwrap(),
            r["threshold_bytes"].as_u64().unwrap(),
        );
        // One input (the trunk): 16 MiB x (1/8) / (1 + 1/8).
        assert_eq!(t, (16u64 << 20) / 9);
        // The queue is bounded by the incast's wire bytes (4 x 8 MiB and the headers) and is
        // far above the threshold: the incast moves 32 MiB with three quarters of it in excess.
        assert!(q > 16 << 20 && q < 34 << 20, "{r}");
        let arrival = r["arrival_bps"].as_f64().unwrap();
        assert!((arrival - 400e9).abs() < 1e9, "{r}");
        let m = &r["modelled"];
        assert_eq!(m.is_object(), modelled, "{model}: {r}");
        if modelled {
            // The queue reaches XOFF when 300 Gb/s of excess has filled 1.78 MiB: 49.7 us;
            // the pause lasts until the incast ends (2.74 ms).
            let first = m["first_ps"].as_u64().unwrap();
            let paused = m["paused_ps"].as_u64().unwrap();
            assert!((49_000_000..51_000_000).contains(&first), "{r}");
            assert!(first + paused > 2_700_000_000, "{r}");
        }
    }

    // Equal flows on a switch: no port receives more than it sends.
    let (_, f) = both(
        "topology:\n  star: {hosts: 8, bandwidth: 100Gbps, latency: 1us}\nworkload:\n  collectives:\n    - {op: all_reduce, algorithm: ring, size: 4MiB}\n",
    );
    assert!(f.flow_limits.is_empty(), "{:?}", f.flow_limits);
}

/// The victim of PFC's head-of-line blocking at flow fidelity (`flow/src/pfc.rs`):
/// `examples/lossless.yaml`, a 4:1 incast a1..a4 -> r under s2 and a victim v -> w that shares
/// only the 400 Gb/s s1 -> s2 trunk with it. The packet level pauses the trunk and, behind it,
/// the senders' links, and v finishes at 2.590 ms instead of 0.69 ms; max-min alone gave it
/// its full rate (0.688 ms, 73% early). Measured: v 2.5924 ms against 2.5902 (+0.09%), the
/// incast 2.7415 against 2.7405..2.7415. With a1 also writing to w, a1's NIC is paused too
/// and its second queue pair waits behind its first: v +4.6%, a1 -> w +8.0% (max-min alone:
/// -34%, -51%); the incast's flows, which max-min shares equally at r while the packet level
/// gives a1's less (its NIC is shared), are off by up to 14% with or without the model.
#[test]
fn pfc_holds_the_victim_of_a_paused_trunk_as_the_packet_level_does() {
    let yaml = std::fs::read_to_string("examples/lossless.yaml").unwrap();
    let second = yaml.replace(
        "    - {src: v, dst: w, size: 8MiB}",
        "    - {src: v, dst: w, size: 8MiB}\n    - {src: a1, dst: w, size: 8MiB}",
    );
    assert_ne!(yaml, second);
    for (scenario, tolerances) in [
        (&yaml, &[0.01, 0.01, 0.01, 0.01, 0.02][..]),
        (&second, &[1.0, 1.0, 1.0, 1.0, 0.1, 0.1][..]),
    ] {
        let (p, f) = both(scenario);
        assert_eq!(p.messages.len(), tolerances.len());
        for ((a, b), tol) in p.messages.iter().zip(&f.messages).zip(tolerances) {
            let (Some(tp), Some(tf)) = (a.completion_time_ps, b.completion_time_ps) else {
                panic!("message {} did not complete", a.tag);
            };
            assert!(
                rel(tf, tp) <= *tol,
                "{} -> {}: packet {tp} ps, flow {tf} ps, off by {:.2}%",
                a.src,
                a.dst,
                rel(tf, tp) * 100.0
            );
        }
        let r = f.flow_limits.iter().find(|l| l.port == "s2 -> r").unwrap();
        assert!(r.modelled.is_some_and(|m| m.pauses == 1), "{r:?}");
    }
}

/// A PFC fabric where every port takes turns pausing: an all-to-all of 128 KiB on a 4:1
/// oversubscribed fat-tree of 64 hosts (`examples/cc_compare_alltoall.yaml` without ECN), all
/// 64 switch-to-switch ports paused at times. The holds do not stall the fabric: the makespan
/// stays within 1% of the packet level (measured 2.7739 against 2.7732 ms; max-min alone
/// 2.7796).
#[test]
fn pfc_on_a_fabric_of_paused_ports_keeps_the_makespan() {
    let yaml = std::fs::read_to_string("examples/cc_compare_alltoall.yaml").unwrap();
    let yaml: String = yaml
        .lines()
        .filter(|l| !l.contains("ecn:"))
        .map(|l| format!("{l}\n"))
        .collect();
    let (p, f) = both(&yaml);
    let (tp, tf) = (p.totals.completion_time_ps, f.totals.completion_time_ps);
    assert!(rel(tf, tp) <= 0.01, "packet {tp} ps, flow {tf} ps");
    assert!(f.flow_limits.iter().all(|l| l.modelled.is_some()));
    assert_eq!(f.flow_limits.len(), 64);
}

/// With PFC on but no port paused, the flow level is what it is without PFC, to the bit.
#[test]
fn pfc_where_nothing_pauses_changes_nothing() {
    let base = "topology:\n  star: {hosts: 8, bandwidth: 100Gbps, latency: 1us}\nworkload:\n  collectives:\n    - {op: all_reduce, algorithm: ring, size: 4MiB}\n";
    let pfc = format!(
        "switch_buffer: {{total: 16MiB, alpha: 0.125, pfc: {{enabled: true, priorities: [3]}}}}\n{base}"
    );
    let a = run_yaml(&format!("fidelity: flow\n{base}"), 1);
    let b = run_yaml(&format!("fidelity: flow\n{pfc}"), 1);
    assert!(b.flow_limits.is_empty(), "{:?}", b.flow_limits);
    assert_eq!(collective_time(&a, 0), collective_time(&b, 0));
    assert_eq!(a.messages.len(), b.messages.len());
}
