//! Tests of tree descriptions: parsing, validation paths, classification and building.

use super::*;
use crate::pifo::EnqueueError;

fn parse(yaml: &str) -> TreeConfig {
    match serde_yaml::from_str(yaml) {
        Ok(c) => c,
        Err(e) => panic!("bad test YAML: {e}\n{yaml}"),
    }
}

fn tree(yaml: &str) -> PifoTree<u64> {
    match parse(yaml).build() {
        Ok(t) => t,
        Err(e) => panic!("{e}\n{yaml}"),
    }
}

fn id(t: &PifoTree<u64>, name: &str) -> NodeId {
    t.all_stats()
        .find(|(_, n, _)| *n == name)
        .map(|(id, _, _)| id)
        .unwrap_or_else(|| panic!("no node {name}"))
}

fn pkt(len: u32) -> PacketInfo {
    PacketInfo {
        len,
        ..PacketInfo::default()
    }
}

/// The validation error of `yaml`.
fn error(yaml: &str) -> ConfigError {
    let cfg = parse(yaml);
    let e = cfg.validate().expect_err("should not validate");
    // build() reports the same error.
    assert_eq!(cfg.build::<u64>().err(), Some(e.clone()));
    e
}

#[test]
fn the_module_doc_example_builds() {
    let src = include_str!("mod.rs");
    let yaml: String = src
        .lines()
        .skip_while(|l| *l != "//! ```yaml")
        .skip(1)
        .take_while(|l| *l != "//! ```")
        .map(|l| format!("{}\n", l.strip_prefix("//! ").unwrap_or("")))
        .collect();
    assert!(yaml.contains("name: port"));
    let cfg = parse(&yaml);
    let mut t = tree(&yaml);
    let names: Vec<&str> = t.all_stats().map(|(_, n, _)| n).collect();
    assert_eq!(
        names,
        ["port", "control", "tenants", "gold", "bronze", "bulk"]
    );
    let c = cfg.classifier().unwrap();
    assert_eq!(c.default_leaf(), Some(id(&t, "bronze")));
    let cases = [
        (
            PacketInfo {
                dscp: 48,
                ..pkt(64)
            },
            "control",
        ),
        (
            PacketInfo {
                priority: 3,
                ..pkt(4096)
            },
            "gold",
        ),
        (
            PacketInfo {
                priority: 3,
                ..pkt(512)
            },
            "bronze",
        ),
        (
            PacketInfo {
                qp: 258,
                ..pkt(512)
            },
            "bulk",
        ),
        (pkt(100), "bronze"),
    ];
    for (info, leaf) in cases {
        assert_eq!(c.leaf_for(&info), Some(id(&t, leaf)), "{info:?}");
        t.enqueue(Time::ZERO, info, 0).unwrap();
    }
    // Serialization round-trips.
    let again: TreeConfig = parse(&serde_yaml::to_string(&cfg).unwrap());
    assert_eq!(again, cfg);
}

/// Dequeues `n` packets from an always-backlogged tree whose items are their class
/// (0..infos.len()); each dequeued packet is replaced by one of its class.
fn saturate(t: &mut PifoTree<u64>, infos: &[PacketInfo], n: usize) -> Vec<u64> {
    let mut now = Time::ZERO;
    for (c, &info) in infos.iter().enumerate() {
        for _ in 0..50 {
            t.enqueue(now, info, c as u64).unwrap();
        }
    }
    let mut served = vec![0u64; infos.len()];
    for _ in 0..n {
        let c = t.dequeue(now, 0).unwrap();
        served[c as usize] += 1;
        now = now.add(Time::from_ns(80)); // 1000 B at 100 Gb/s
        t.enqueue(now, infos[c as usize], c).unwrap();
    }
    served
}

#[test]
fn wfq_three_to_one_shares() {
    for pifo in [
        "heap",
        "bucket\nbucket: {window_log2: 16, granularity_log2: 16}",
    ] {
        let yaml = format!(
            "
name: root
scheduling: wfq
weights: [3, 1]
pifo: {pifo}
children:
  - name: gold
    match: {{priority: [1]}}
  - name: bronze
"
        );
        let mut t = tree(&yaml);
        let infos = [
            PacketInfo {
                priority: 1,
                ..pkt(1000)
            },
            pkt(1000),
        ];
        let served = saturate(&mut t, &infos, 40_000);
        let share = served[0] as f64 / served.iter().sum::<u64>() as f64;
        assert!(
            (share - 0.75).abs() <= 0.02 * 0.75,
            "gold share {share} ({served:?})"
        );
        assert_eq!(t.stats(id(&t, "gold")).unwrap().dequeued_packets, served[0]);
    }
    // Decimal weights work the same.
    let mut t = tree(
        "
name: root
scheduling: wfq
weights: [0.75, 0.25]
children: [{name: a, match: {dscp: [10]}}, {name: b}]
",
    );
    let infos = [
        PacketInfo {
            dscp: 10,
            ..pkt(1000)
        },
        pkt(1000),
    ];
    let served = saturate(&mut t, &infos, 40_000);
    let share = served[0] as f64 / served.iter().sum::<u64>() as f64;
    assert!((share - 0.75).abs() <= 0.015, "share {share}");
}

#[test]
fn strict_priority_by_child_serves_the_first_child_first() {
    let mut t = tree(
        "
name: root
scheduling: strict_priority
children:
  - name: high
    match: {dscp: [46]}
  - name: low
",
    );
    let infos = [
        PacketInfo {
            dscp: 46,
            ..pkt(1000)
        },
        pkt(1000),
    ];
    let served = saturate(&mut t, &infos, 5_000);
    assert_eq!(served, [5_000, 0]);
    let high = t.node_len(id(&t, "high"));
    let rest: Vec<u64> = std::iter::from_fn(|| t.dequeue(Time::ZERO, 0)).collect();
    assert!(rest[..high].iter().all(|&c| c == 0));
    assert!(rest[high..].iter().all(|&c| c == 1));
    assert_eq!(rest.len(), high + 50);
}

#[test]
fn strict_priority_at_a_leaf_serves_high_priority_and_dscp_first() {
    let mut t = tree("{name: q, scheduling: strict_priority, by: priority}");
    for (i, p) in [1u8, 5, 3, 7, 0].into_iter().enumerate() {
        let info = PacketInfo {
            priority: p,
            ..pkt(100)
        };
        t.enqueue(Time::ZERO, info, i as u64).unwrap();
    }
    let order: Vec<u64> = std::iter::from_fn(|| t.dequeue(Time::ZERO, 0)).collect();
    assert_eq!(order, [3, 1, 2, 0, 4]); // priorities 7, 5, 3, 1, 0
    let mut t = tree("{name: q, scheduling: strict_priority, by: dscp}");
    for (i, d) in [0u8, 46, 26].into_iter().enumerate() {
        let info = PacketInfo {
            dscp: d,
            ..pkt(100)
        };
        t.enqueue(Time::ZERO, info, i as u64).unwrap();
    }
    let order: Vec<u64> = std::iter::from_fn(|| t.dequeue(Time::ZERO, 0)).collect();
    assert_eq!(order, [1, 2, 0]); // DSCP 46, 26, 0
}

#[test]
fn match_routes_to_the_first_matching_leaf_then_the_default() {
    let yaml = "
name: root
scheduling: round_robin
children:
  - name: voice
    match: {dscp: [46], priority: [5, 6]}
  - name: inner
    scheduling: wfq
    weights: [1, 1]
    children:
      - name: small
        match: {size_at_most: 1KiB}
      - name: rdma
        match: {qp: [257, 300]}
  - name: big
    match: {size_at_least: 4KiB, size_at_most: 9000B}
  - name: other
";
    let mut t = tree(yaml);
    let cases = [
        (
            PacketInfo {
                dscp: 46,
                priority: 5,
                ..pkt(200)
            },
            "voice",
        ),
        // dscp holds, priority does not: the next leaf that matches.
        (
            PacketInfo {
                dscp: 46,
                priority: 3,
                ..pkt(200)
            },
            "small",
        ),
        (pkt(1024), "small"),
        (
            PacketInfo {
                qp: 300,
                ..pkt(1025)
            },
            "rdma",
        ),
        (
            PacketInfo {
                qp: 301,
                ..pkt(1025)
            },
            "other",
        ),
        (pkt(4096), "big"),
        (pkt(9000), "big"),
        (pkt(9001), "other"),
    ];
    for (info, leaf) in cases {
        let before = t.node_len(id(&t, leaf));
        t.enqueue(Time::ZERO, info, 0).unwrap();
        assert_eq!(t.node_len(id(&t, leaf)), before + 1, "{info:?} to {leaf}");
    }
    assert_eq!(t.len(), cases.len());

    // Without a default leaf an unmatched packet is refused.
    let mut t = tree(
        "
name: root
children: [{name: a, match: {priority: [1]}}, {name: b, match: {priority: [2]}}]
",
    );
    t.enqueue(
        Time::ZERO,
        PacketInfo {
            priority: 2,
            ..pkt(64)
        },
        7,
    )
    .unwrap();
    assert!(matches!(
        t.enqueue(Time::ZERO, pkt(64), 8),
        Err(EnqueueError::NoLeaf(8))
    ));
}

#[test]
fn capacity_overflow_and_shaping_are_applied() {
    let mut t = tree(
        "
name: root
children:
  - name: q
    scheduling: sjf
    capacity: 2
    overflow: evict_largest
    shaping: {kind: token_bucket, rate: 8Gbps, burst: 0B}
",
    );
    let q = id(&t, "q");
    for (i, size) in [300u64, 100, 200].into_iter().enumerate() {
        let info = PacketInfo {
            message_size: size,
            ..pkt(1000)
        };
        let r = t.enqueue(Time::ZERO, info, i as u64);
        if i == 2 {
            // The largest (message 300) is evicted for the arriving 200.
            assert!(matches!(r, Err(EnqueueError::Evicted { item: 0, .. })));
        }
    }
    assert_eq!(t.stats(q).unwrap().evicted_packets, 1);
    // 8 Gb/s with no burst: 1000 B is released after 1 us.
    assert_eq!(t.dequeue(Time::ZERO, 0), None);
    assert_eq!(t.next_release(Time::ZERO), Some(Time::from_us(1)));
    assert!(t.stats(q).unwrap().shaped > 0);
}

#[test]
fn every_scheduling_kind_builds() {
    let yaml = "
name: root
scheduling: min_rate
rates: [1Gbps, 2Gbps]
burst: 9KiB
children:
  - {name: a, scheduling: lstf, match: {priority: [0]}}
  - {name: b, scheduling: srpt, match: {priority: [1]}}
  - {name: c, scheduling: las, match: {priority: [2]}}
  - {name: d, scheduling: las, by: flow, match: {priority: [3]}}
  - {name: e, scheduling: edf, match: {priority: [4]}}
  - {name: f, scheduling: stop_and_go, frame: 1us, match: {priority: [5]}}
  - {name: g, scheduling: round_robin, by: qp, match: {priority: [6]}}
  - name: h
    scheduling: wfq
    by: priority
    weights: [1, 2.5]
    shaping: {kind: stop_and_go, frame: 2us}
    children:
      - {name: h0, scheduling: fifo, match: {qp: [1]}}
      - {name: h1, scheduling: wfq, by: flow}
";
    let mut t = tree(yaml);
    assert_eq!(t.leaves().count(), 9);
    for p in 0..8u8 {
        let info = PacketInfo {
            priority: p,
            ..pkt(500)
        };
        t.enqueue(Time::ZERO, info, u64::from(p)).unwrap();
    }
    let mut now = Time::ZERO;
    let mut n = 0;
    while !t.is_empty() {
        if t.dequeue(now, 0).is_some() {
            n += 1;
        } else {
            now = t.next_release(now).unwrap();
        }
    }
    assert_eq!(n, 8);
}

#[test]
fn validation_errors_name_the_field() {
    let cases: &[(&str, &str, &str)] = &[
            (
                "{name: r, scheduling: wfq, weights: [3, 1, 1], children: [{name: a}, {name: b, match: {dscp: [1]}}]}",
                "weights",
                "3 entries for 2 children",
            ),
            (
                "{name: r, scheduling: wfq, children: [{name: a}]}",
                "weights",
                "needs `weights`",
            ),
            (
                "{name: r, scheduling: wfq, weights: [1, 0], children: [{name: a}, {name: b, match: {dscp: [1]}}]}",
                "weights[1]",
                "positive",
            ),
            (
                "{name: r, scheduling: wfq, weights: [1, -2], children: [{name: a}, {name: b, match: {dscp: [1]}}]}",
                "weights[1]",
                "positive",
            ),
            (
                "{name: r, scheduling: wfq, by: flow, weights: [1]}",
                "weights",
                "every flow equally",
            ),
            (
                "{name: r, scheduling: wfq, by: priority, weights: [1, 1, 1, 1, 1, 1, 1, 1, 1]}",
                "weights",
                "8 classes",
            ),
            (
                "{name: r, scheduling: round_robin, weights: [1], children: [{name: a}]}",
                "weights",
                "`round_robin` takes no `weights` (it takes `by`)",
            ),
            (
                "{name: r, frame: 1us}",
                "frame",
                "`fifo` takes no `frame` (it takes no parameters)",
            ),
            (
                "{name: r, scheduling: stop_and_go}",
                "frame",
                "needs `frame`",
            ),
            (
                "{name: r, scheduling: stop_and_go, frame: 0us}",
                "frame",
                "above 0",
            ),
            (
                "{name: r, scheduling: min_rate, burst: 1KiB, children: [{name: a}]}",
                "rates",
                "needs `rates`",
            ),
            (
                "{name: r, scheduling: min_rate, rates: [1Gbps], children: [{name: a}]}",
                "burst",
                "needs `burst`",
            ),
            (
                "{name: r, scheduling: min_rate, rates: [0Gbps], burst: 1KiB, children: [{name: a}]}",
                "rates[0]",
                "above 0",
            ),
            (
                "{name: r, scheduling: min_rate, rates: [1Gbps, 1Gbps], burst: 1KiB, children: [{name: a}]}",
                "rates",
                "at most one per child",
            ),
            (
                "{name: r, scheduling: min_rate, by: flow, rates: [1Gbps], burst: 1KiB, children: [{name: a}]}",
                "by",
                "min_rate by flow",
            ),
            (
                "{name: r, scheduling: strict_priority}",
                "by",
                "at a leaf needs `by`",
            ),
            (
                "{name: r, scheduling: round_robin, by: child}",
                "by",
                "a leaf has no children",
            ),
            (
                "{name: r, scheduling: strict_priority, by: flow}",
                "by",
                "no meaning",
            ),
            (
                "{name: r, scheduling: las, by: qp}",
                "by",
                "may only be `flow`",
            ),
            (
                "{name: r, scheduling: edf, by: flow}",
                "by",
                "`edf` takes no `by`",
            ),
            (
                "{name: r, shaping: {kind: token_bucket, rate: 1Gbps, burst: 1KiB}, children: [{name: a}]}",
                "shaping",
                "root cannot be shaped",
            ),
            (
                "{name: r, children: [{name: a, shaping: {kind: token_bucket, burst: 1KiB}}]}",
                "children[0].shaping.rate",
                "needs `rate`",
            ),
            (
                "{name: r, children: [{name: a, shaping: {kind: token_bucket, rate: 0bps, burst: 1KiB}}]}",
                "children[0].shaping.rate",
                "above 0",
            ),
            (
                "{name: r, children: [{name: a, shaping: {kind: stop_and_go, frame: 1us, rate: 1Gbps}}]}",
                "children[0].shaping.rate",
                "`stop_and_go` shaping takes no `rate` (it takes `frame`)",
            ),
            (
                "{name: r, match: {dscp: [1]}, children: [{name: a}]}",
                "match",
                "only leaves take `match`",
            ),
            (
                "{name: r, capacity: 10, children: [{name: a}]}",
                "capacity",
                "only leaves",
            ),
            (
                "{name: r, children: [{name: a, capacity: 0}]}",
                "children[0].capacity",
                "at least 1",
            ),
            (
                "{name: r, children: [{name: a, overflow: evict_largest}]}",
                "children[0].overflow",
                "needs a `capacity`",
            ),
            (
                "{name: r, children: [{name: a}, {name: b}]}",
                "children[1]",
                "`children[0]` is already the default leaf",
            ),
            (
                "{name: r, children: [{name: a}, {name: r, match: {dscp: [1]}}]}",
                "children[1].name",
                "`r` is already the name of the root",
            ),
            (
                "{name: '', children: [{name: a}]}",
                "name",
                "non-empty",
            ),
            (
                "{name: r, children: [{name: a}, {name: b, match: {}}]}",
                "children[1].match",
                "no conditions",
            ),
            (
                "{name: r, children: [{name: a}, {name: b, match: {dscp: [1, 64]}}]}",
                "children[1].match.dscp[1]",
                "outside 0..=63",
            ),
            (
                "{name: r, children: [{name: a}, {name: b, match: {priority: [8]}}]}",
                "children[1].match.priority[0]",
                "outside 0..=7",
            ),
            (
                "{name: r, children: [{name: a}, {name: b, match: {qp: []}}]}",
                "children[1].match.qp",
                "empty",
            ),
            (
                "{name: r, children: [{name: a}, {name: b, match: {size_at_least: 4KiB, size_at_most: 1KiB}}]}",
                "children[1].match.size_at_least",
                "never match",
            ),
            (
                "{name: r, bucket: {window_log2: 12}}",
                "bucket",
                "uses a heap",
            ),
            (
                "{name: r, pifo: bucket, bucket: {window_log2: 30}}",
                "bucket.window_log2",
                "outside 6..=16",
            ),
            (
                "{name: r, pifo: bucket, bucket: {granularity_log2: 64}}",
                "bucket.granularity_log2",
                "outside 0..=63",
            ),
            (
                "
name: r
scheduling: wfq
weights: [1, 1]
children:
  - name: a
    match: {dscp: [1]}
  - name: b
    children:
      - name: c
        scheduling: stop_and_go
",
                "children[1].children[0].frame",
                "needs `frame`",
            ),
        ];
    for &(yaml, path, msg) in cases {
        let e = error(yaml);
        assert_eq!(e.path, path, "{yaml}\n{e}");
        assert!(e.message.contains(msg), "{yaml}\n{e}\nwant: {msg}");
        assert_eq!(e.to_string(), format!("`{path}`: {}", e.message));
    }
}

#[test]
fn too_many_children() {
    let children: Vec<String> = (0..=MAX_CHILDREN)
        .map(|i| format!("{{name: c{i}, match: {{qp: [{i}]}}}}"))
        .collect();
    let yaml = format!("{{name: r, children: [{}]}}", children.join(", "));
    let e = error(&yaml);
    assert_eq!(e.path, "children");
    assert!(e.message.contains("at most 64"), "{e}");
}

#[test]
fn serde_rejects_unknown_fields_and_bad_units() {
    for yaml in [
            "{name: r, weight: [1]}",
            "{name: r, children: [{name: a, capacty: 3}]}",
            "{name: r, children: [{name: a, match: {dscp: [1], port: 3}}]}",
            "{name: r, children: [{name: a, shaping: {kind: token_bucket, rate: 1Gbps, burst: 1KiB, ceil: 2Gbps}}]}",
            "{name: r, pifo: bucket, bucket: {window: 3}}",
        ] {
            let e = serde_yaml::from_str::<TreeConfig>(yaml).expect_err(yaml);
            assert!(e.to_string().contains("unknown field"), "{yaml}: {e}");
        }
    for (yaml, want) in [
        ("{name: r, scheduling: wf2q}", "unknown variant"),
        (
            "{name: r, scheduling: min_rate, burst: 1500}",
            "has no unit",
        ),
        ("{scheduling: fifo}", "missing field `name`"),
    ] {
        let e = serde_yaml::from_str::<TreeConfig>(yaml).expect_err(yaml);
        assert!(e.to_string().contains(want), "{yaml}: {e}");
    }
}

#[test]
fn error_paths_prefix_and_split() {
    let e = ConfigError::new("children[1].match.dscp[2]".into(), "x");
    assert_eq!(
        e.segments(),
        [
            PathSegment::Key("children".into()),
            PathSegment::Index(1),
            PathSegment::Key("match".into()),
            PathSegment::Key("dscp".into()),
            PathSegment::Index(2),
        ]
    );
    let p = e.prefixed("switches[0].scheduler");
    assert_eq!(p.path, "switches[0].scheduler.children[1].match.dscp[2]");
    assert_eq!(p.segments().len(), 8);
    // Hand-made paths never panic.
    for odd in ["a]", "]]", "a[x]", "[", "é]", "a..b"] {
        let _ = ConfigError::new(odd.into(), "x").segments();
    }
    let root = ConfigError::new(String::new(), "x");
    assert!(root.segments().is_empty());
    assert_eq!(root.clone().prefixed("tree").path, "tree");
    assert_eq!(root.prefixed("").path, "");
}
