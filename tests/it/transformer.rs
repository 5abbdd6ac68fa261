//! Training a transformer described by its hyper-parameters (`workload.training.model`): the
//! iteration against a hand computation from the FLOPs formulas and the network's time for
//! the same collective alone, the exposed communication by kind, the pipeline schedules'
//! bubbles, and errors located at the field.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: a failure is a panic

use crate::common;

use common::{fabemu, run_yaml, temp_scenario};
use fabemu::Report;

const US: u64 = 1_000_000;

fn training(r: &Report) -> &fabemu::training::TrainingReport {
    r.training.as_ref().expect("a training section")
}

/// A star on zero-latency 100 Gb/s links.
fn fast_star(hosts: usize) -> String {
    format!("topology:\n  star: {{hosts: {hosts}, bandwidth: 100Gbps, latency: 0ns}}\n")
}

/// Seconds to picoseconds as the device model rounds a node's time (up).
fn ps(secs: f64) -> u64 {
    (secs * 1e12).ceil() as u64
}

#[test]
fn a_small_model_s_iteration_is_its_flops_plus_its_all_reduces() {
    // tp 2 on 2 hosts, 2 layers of h 1024 (8 heads, FFN 4096), s 512, V 2048, two
    // micro-batches of one sequence, no recomputation; a device of 1e14 FLOP/s and 1000 GB/s.
    // Everything runs on one stream, so an iteration is per micro-batch the compute of the
    // embedding, each layer's attention and MLP, the LM head, forward (F) and backward (2F),
    // plus 8 All-Reduces of s h x 2 B = 1 MiB (2 pieces x 2 layers x 2 passes).
    let yaml = format!(
        "{}workload:\n  device: {{peak_flops: 1e14, memory_bandwidth: 1000GB/s}}\n  training:\n    \
         model: {{layers: 2, hidden: 1024, heads: 8, sequence: 512, vocabulary: 2048, \
         global_batch: 2, micro_batch: 1}}\n    tp: 2\n  collective_algorithms: {{all_reduce: ring}}\n",
        fast_star(2)
    );
    let r = run_yaml(&yaml, 1);
    assert!(r.invariants.ok, "{:?}", r.invariants.violations);
    let t = training(&r);
    let (s, h, f, v, tp) = (512.0, 1024.0, 4096.0, 2048.0, 2.0);
    let peak = 1e14;
    let attn = (2.0 * s * h * 3.0 * h + 4.0 * s * s * h + 2.0 * s * h * h) / tp;
    let mlp = 2.0 * 2.0 * s * h * f / tp;
    let head = 2.0 * s * h * v / tp;
    let emb = ps(s * h * 2.0 / tp / 1e12);
    let forward = emb + 2 * (ps(attn / peak) + ps(mlp / peak)) + ps(head / peak);
    let backward = ps(2.0 * head / peak) + 2 * (ps(2.0 * attn / peak) + ps(2.0 * mlp / peak)) + emb;
    let compute = 2 * (forward + backward);
    assert_eq!(t.per_rank[0].breakdown.compute_ps, compute);
    // The network's part by alpha-beta: a ring All-Reduce on 2 ranks moves 2(n-1)/n x 1 MiB
    // = 1 MiB each way at 100 Gb/s (83.9 us); frame headers add a few percent.
    let ar = (1u64 << 20) as f64 * 8.0 / 100e9;
    let it = t.iteration_time_ps.expect("finished");
    let hand = compute as f64 + 16.0 * ar * 1e12;
    let err = (it as f64 - hand) / hand;
    assert!(
        (0.0..0.03).contains(&err),
        "iteration {it} ps, alpha-beta + compute {hand} ps"
    );
    // And exactly: the same All-Reduce alone in YAML, 16 times.
    let y = run_yaml(
        &format!(
            "{}workload:\n  collectives: [{{op: all_reduce, size: 1MiB, algorithm: ring}}]\n",
            fast_star(2)
        ),
        1,
    );
    let c = &y.collectives[0];
    let one = c.end_ps.expect("finished") - c.start_ps.expect("started");
    let exact = compute + 16 * one;
    assert!(
        (it as f64 - exact as f64).abs() / (exact as f64) < 1e-3,
        "iteration {it} ps, compute + 16 All-Reduces {exact} ps"
    );
    // Exposed communication is all tensor-parallel.
    assert_eq!(t.exposed_by_kind.len(), 1);
    assert_eq!(t.exposed_by_kind[0].kind, "tp");
    assert_eq!(t.exposed_by_kind[0].exposed_ps, t.overall.exposed_comm_ps);
    // Throughput: 1024 tokens per iteration; MFU = model FLOPs / (time x GPUs x peak).
    let m = t.model.as_ref().expect("model metrics");
    assert_eq!(m.tokens_per_iteration, 1024);
    let secs = it as f64 / 1e12;
    let flops = 2.0 * (3.0 * 2.0 * (attn + mlp) + 3.0 * head) * tp;
    assert!((m.model_flops_per_iteration / flops - 1.0).abs() < 1e-9);
    assert!((m.tokens_per_s - 1024.0 / secs).abs() / m.tokens_per_s < 1e-9);
    let mfu = flops / secs / 2.0 / peak;
    assert!(
        (m.mfu.expect("a peak") - mfu).abs() < 1e-9,
        "{:?} vs {mfu}",
        m.mfu
    );
}

/// A small Mixtral-like model with every kind of parallelism on 16 hosts.
fn every_kind(extra: &str) -> String {
    format!(
        "topology:\n  leaf_spine: {{leaves: 4, spines: 2, hosts_per_leaf: 4, host_bandwidth: 100Gbps, \
         host_latency: 500ns, fabric_bandwidth: 200Gbps, fabric_latency: 1us}}\nworkload:\n  \
         device: {{preset: h100, efficiency: 0.5}}\n  training:\n    model: {{preset: mixtral-8x7b, \
         layers: 4, hidden: 512, ffn_hidden: 1024, heads: 8, kv_heads: 2, sequence: 256, \
         vocabulary: 1024, global_batch: 16}}\n    dp: 2\n    tp: 2\n    pp: 2\n    ep: 2\n{extra}"
    )
}

#[test]
fn exposed_communication_by_kind_adds_up_to_the_exposed_total() {
    for extra in [
        "",
        "    sp: true\n    zero: 1\n",
        "    zero: 3\n    recompute: full\n",
    ] {
        let r = run_yaml(&every_kind(extra), 1);
        assert!(r.invariants.ok, "{extra}: {:?}", r.invariants.violations);
        let t = training(&r);
        assert!(t.iteration_time_ps.is_some(), "{extra}: {:?}", t.waiting);
        let sum: u64 = t.exposed_by_kind.iter().map(|k| k.exposed_ps).sum();
        assert_eq!(sum, t.overall.exposed_comm_ps, "{extra}");
        for rank in &t.per_rank {
            let sum: u64 = rank.exposed_by_kind.iter().map(|k| k.exposed_ps).sum();
            assert_eq!(
                sum, rank.breakdown.exposed_comm_ps,
                "{extra} rank {}",
                rank.rank
            );
        }
        let kinds: Vec<&str> = t.exposed_by_kind.iter().map(|k| k.kind).collect();
        assert_eq!(kinds, ["tp", "ep", "pp", "dp"], "{extra}");
        // The kinds of collectives the settings call for.
        let ops: Vec<&str> = t.collective_kinds.iter().map(|k| k.op).collect();
        let want: &[&str] = match extra {
            "" => &["all_reduce", "all_to_all"],
            e if e.contains("sp") => &["all_gather", "all_to_all", "reduce_scatter"],
            _ => &["all_gather", "all_reduce", "all_to_all", "reduce_scatter"],
        };
        assert_eq!(ops, want, "{extra}");
    }
}

#[test]
fn interleaving_shrinks_the_bubble_by_the_virtual_stages_and_gpipe_keeps_it() {
    // pp 4, 8 layers of forward 100 us and backward 200 us, 8 micro-batches, empty messages
    // on a fast star: a stage computes 8 x 2 x 300 us = 4800 us; 1F1B and GPipe add the
    // bubble (p - 1) x 600 us = 1800 us, interleaving over 2 virtual stages half of it.
    for (schedule, bubble) in [
        ("1f1b", 1800.0),
        ("gpipe", 1800.0),
        ("interleaved, virtual_stages: 2", 900.0),
        ("interleaved, virtual_stages: 4", 450.0),
    ] {
        let r = run_yaml(
            &format!(
                "{}workload:\n  training: {{pp: 4, layers: 16, forward: 50us, backward: 100us, \
                 micro_batches: 8, schedule: {schedule}}}\n",
                fast_star(4)
            ),
            1,
        );
        assert!(r.invariants.ok, "{:?}", r.invariants.violations);
        let t = training(&r);
        let it = t.iteration_time_ps.expect("finished") as f64;
        let want = (4800.0 + bubble) * US as f64;
        assert!(
            (it - want).abs() / want < 1e-3,
            "{schedule}: iteration {it} ps, want {want}"
        );
        assert_eq!(t.overall.compute_ps, 4 * 4800 * US, "{schedule}");
    }
}

#[test]
fn bad_model_fields_exit_2_at_the_field() {
    let device = "  device: h100\n";
    for (training, field, text) in [
        (
            "{model: {preset: llama2-70b, kv_heads: 7}, tp: 8}",
            "workload.training.model.kv_heads",
            "7 key-value heads do not divide the 64 heads",
        ),
        (
            "{model: {preset: gpt5}}",
            "workload.training.model.preset",
            "unknown model `gpt5`; known: gpt3-175b, llama2-70b, mixtral-8x7b",
        ),
        (
            "{model: {hidden: 1024, heads: 8, sequence: 512, vocabulary: 1000, global_batch: 8}}",
            "workload.training.model.layers",
            "missing",
        ),
        (
            "{model: {preset: gpt3-175b, layers: 8, global_batch: 8}, tp: 5}",
            "workload.training.tp",
            "tp 5 does not divide the attention heads (96)",
        ),
        (
            "{model: {preset: gpt3-175b, layers: 8, global_batch: 6}, dp: 4}",
            "workload.training.model.global_batch",
            "6 sequences do not split",
        ),
        (
            "{model: llama2-70b, tp: 4, layers: 8}",
            "workload.training.layers",
            "derived from `model`",
        ),
        (
            "{model: {preset: gpt3-175b, layers: 6, global_batch: 8}, pp: 4}",
            "workload.training.pp",
            "6 layers do not split evenly over 4 stages",
        ),
        (
            "{model: {preset: gpt3-175b, layers: 8, global_batch: 8}, dp: 4, sp: true}",
            "workload.training.sp",
            "set `tp` > 1",
        ),
        (
            "{model: {preset: gpt3-175b, layers: 8, global_batch: 8, dtype: fp64}, dp: 4}",
            "workload.training.model.dtype",
            "unknown variant `fp64`",
        ),
        (
            "{model: {preset: gpt3-175b, layers: 8, global_batch: 8}, dp: 4, zero: 4}",
            "workload.training.zero",
            "ZeRO stage 4",
        ),
    ] {
        let path = temp_scenario(
            "model-field.yaml",
            &format!(
                "{}workload:\n  training: {training}\n{device}",
                fast_star(4)
            ),
        );
        let out = fabemu(&["run", path.to_str().expect("utf-8 path")]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{training}: {err}");
        let want = format!("field `{field}`: ");
        assert!(
            err.contains(&want) && err.contains(text),
            "{training}: {err}"
        );
    }
    // A device preset that does not exist, and a model without a device.
    for (yaml, field, text) in [
        (
            "  training: {model: {preset: gpt3-175b, layers: 8, global_batch: 8}, dp: 4}\n  device: b300\n",
            "workload.device.preset",
            "unknown device `b300`; known: a100, h100",
        ),
        (
            "  training: {model: {preset: gpt3-175b, layers: 8, global_batch: 8}, dp: 4}\n",
            "workload.training.model",
            "give `workload.device`",
        ),
    ] {
        let path = temp_scenario(
            "model-device.yaml",
            &format!("{}workload:\n{yaml}", fast_star(4)),
        );
        let out = fabemu(&["run", path.to_str().expect("utf-8 path")]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{yaml}: {err}");
        assert!(
            err.contains(&format!("field `{field}`: ")) && err.contains(text),
            "{yaml}: {err}"
        );
    }
}

#[test]
fn the_gpt_example_reports_throughput_and_exposed_communication_by_kind() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/gpt_training.yaml");
    let r = common::report_json(path, "1");
    let t = &r["training"];
    assert!(t["iteration_time_ps"].as_u64().is_some(), "{t}");
    let m = &t["model"];
    for k in ["tokens_per_s", "tflops_per_gpu", "mfu"] {
        let v = m[k].as_f64().unwrap_or(0.0);
        assert!(v > 0.0, "{k}: {m}");
    }
    assert!(
        m["mfu"].as_f64().unwrap() <= 0.5,
        "MFU above the efficiency: {m}"
    );
    let sum: u64 = t["exposed_by_kind"]
        .as_array()
        .expect("exposed_by_kind")
        .iter()
        .map(|k| k["exposed_ps"].as_u64().unwrap())
        .sum();
    assert_eq!(sum, t["overall"]["exposed_comm_ps"].as_u64().unwrap());
}

#[test]
fn with_expert_parallelism_dense_gradients_go_over_dp_x_ep_and_expert_gradients_over_dp() {
    // dp 2 x ep 2 on 4 hosts, 2 MoE layers (h 256, 4 heads, FFN 512, 4 experts, top-2, GELU,
    // tied embeddings), bf16. A layer's dense weights (attention, router, norms) are on
    // every rank: their gradients, with the embedding's, are reduced over all 4 ranks
    // (`dp0.0`); each rank holds 2 of the 4 experts, whose gradients are reduced over the 2
    // ranks that hold the same experts (`dp0.0.0`, `dp0.0.1`), as Megatron-LM does.
    let yaml = format!(
        "{}workload:\n  device: {{peak_flops: 1e14, memory_bandwidth: 1000GB/s}}\n  training:\n    \
         model: {{layers: 2, hidden: 256, heads: 4, ffn_hidden: 512, experts: 4, top_k: 2, \
         sequence: 128, vocabulary: 1024, global_batch: 4, micro_batch: 1}}\n    dp: 2\n    \
         ep: 2\n",
        fast_star(4)
    );
    let r = run_yaml(&yaml, 1);
    assert!(r.invariants.ok, "{:?}", r.invariants.violations);
    let t = training(&r);
    let (h, f, e, v, layers, dt) = (256u64, 512u64, 4u64, 1024u64, 2u64, 2u64);
    let attention = h * (h + 2 * h) + h * h;
    let experts = 2 * h * f * e;
    let dense_layer = attention + h * e + 2 * h;
    let group = |name: &str| {
        t.communicators
            .iter()
            .find(|g| g.group == name)
            .unwrap_or_else(|| panic!("no group {name}: {:?}", t.communicators))
    };
    let dense = group("dp0.0");
    assert_eq!(dense.ranks, 4);
    assert_eq!(dense.bytes, (layers * dense_layer + v * h) * dt);
    for g in ["dp0.0.0", "dp0.0.1"] {
        let expert = group(g);
        assert_eq!(expert.ranks, 2);
        assert_eq!(expert.bytes, layers * experts / 2 * dt, "{g}");
    }
}
