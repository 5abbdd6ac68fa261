//! Helpers shared by the integration tests: every-path hop checks and a flow hash.

#![allow(dead_code)]

use std::collections::BTreeSet;

use fabemu_topologies::{Graph, NodeId, NodeKind, Routes};

/// How many nodes of `kind` `g` has.
pub fn count(g: &Graph, kind: NodeKind) -> usize {
    g.nodes().iter().filter(|n| n.kind == kind).count()
}

/// Follows *every* choice of next hop at once: the set of nodes a packet can be at after each
/// step. All paths reach `dst` in exactly `expected` steps iff the set never holds `dst` early,
/// never holds a node without a route, and is exactly `{dst}` after `expected` steps. (A loop
/// would keep some path away from `dst` forever.)
pub fn assert_every_path_takes(g: &Graph, r: &Routes, src: NodeId, dst: NodeId, expected: u32) {
    let name = |n: NodeId| g.node(n).name.as_str();
    let mut frontier = BTreeSet::from([src]);
    for step in 0..expected {
        let mut next = BTreeSet::new();
        for &v in &frontier {
            assert_ne!(
                v,
                dst,
                "{} -> {}: arrived after only {step} hops",
                name(src),
                name(dst)
            );
            let hops = r.next_hops(v, dst);
            assert!(
                !hops.is_empty(),
                "{} -> {}: stuck at {}",
                name(src),
                name(dst),
                name(v)
            );
            assert!(
                hops.windows(2).all(|w| w[0] < w[1]),
                "next hops not sorted: {hops:?}"
            );
            for &p in hops {
                next.insert(g.ports(v)[p].peer);
            }
        }
        frontier = next;
    }
    assert_eq!(
        frontier,
        BTreeSet::from([dst]),
        "{} -> {}",
        name(src),
        name(dst)
    );
    assert!(r.next_hops(dst, dst).is_empty());
}

/// Every ordered pair of hosts (and each host to itself) against `expected(src_rank, dst_rank)`.
pub fn assert_all_pairs(g: &Graph, r: &Routes, expected: impl Fn(usize, usize) -> u32) {
    for (i, src) in g.hosts().enumerate() {
        for (j, dst) in g.hosts().enumerate() {
            let want = expected(i, j);
            assert_eq!(r.hops(src, dst), Some(want), "hops h{i} -> h{j}");
            assert_every_path_takes(g, r, src, dst, want);
        }
    }
}

/// SplitMix64's finalizer (what the emulator mixes flow hashes with).
pub fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The emulator's flow hash: addresses, UDP source port and a (per-switch) seed.
pub fn flow_hash(src: [u8; 4], dst: [u8; 4], udp_src_port: u16, seed: u64) -> u64 {
    let x = u64::from(u32::from_be_bytes(src)) << 32 | u64::from(u32::from_be_bytes(dst));
    mix(mix(x ^ seed) ^ u64::from(udp_src_port))
}
