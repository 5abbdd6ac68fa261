//! Placing actors onto partitions (worker threads) and deriving the lookahead.
//!
//! The lookahead is the smallest latency of any link between two partitions, so a link with
//! zero latency must never be cut: its ends are merged first (union-find). Actors with a single
//! link (hosts under a switch) are merged with their neighbour when enough groups remain, and
//! actors joined by faster links are merged before slower ones (Kruskal order, groups capped at
//! half a partition), so that the links left to cut — which set the lookahead — are the
//! slowest. The remaining
//! groups are laid out in breadth-first order from actor 0 — neighbours stay together, so few
//! links are cut — and the sequence is cut into contiguous runs of about equal weight, where an
//! actor weighs one plus its port count (work grows with the packets it handles, which grows
//! with its ports). When fewer groups than threads exist, fewer partitions are used; a wiring
//! that cannot be split at all runs on one partition rather than hang.

use std::collections::VecDeque;

use super::Wiring;
use crate::units::Time;

/// Where each actor runs, and the resulting lookahead.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    /// Number of partitions (>= 1).
    pub parts: usize,
    /// Partition of every actor.
    pub assignment: Vec<u32>,
    /// Smallest latency of a link between partitions (`Time::NEVER` when none crosses).
    pub lookahead: Time,
}

fn find(parent: &mut [usize], mut x: usize) -> usize {
    while parent[x] != x {
        parent[x] = parent[parent[x]];
        x = parent[x];
    }
    x
}

/// Plans at most `threads` partitions for `wiring`.
pub fn plan(wiring: &Wiring, threads: usize) -> Plan {
    let n = wiring.ports.len();
    let single = Plan {
        parts: 1,
        assignment: vec![0; n],
        lookahead: Time::NEVER,
    };
    if threads <= 1 || n <= 1 {
        return single;
    }
    // Merge ends of zero-latency links: they cannot be cut.
    let mut parent: Vec<usize> = (0..n).collect();
    for (a, ports) in wiring.ports.iter().enumerate() {
        for w in ports {
            if w.channel.latency == Time::ZERO {
                let (ra, rb) = (find(&mut parent, a), find(&mut parent, w.peer as usize));
                if ra != rb {
                    parent[ra.max(rb)] = ra.min(rb);
                }
            }
        }
    }
    // Prefer cutting the slowest links (as SST does): the window, and the work between
    // barriers, grows with the lookahead. Merge across links in order of increasing latency,
    // Kruskal-style, while a group stays under half a partition's share of the weight; links of
    // the largest latency are never merged here, so they remain to be cut.
    let actor_weight = |a: usize| 1 + wiring.ports[a].len() as u64;
    let total_weight: u64 = (0..n).map(actor_weight).sum();
    let cap = (total_weight / (2 * threads as u64)).max(1);
    let mut group_weight: Vec<u64> = vec![0; n];
    for a in 0..n {
        let r = find(&mut parent, a);
        group_weight[r] += actor_weight(a);
    }
    let mut links: Vec<(u64, usize, usize)> = Vec::new();
    for (a, ports) in wiring.ports.iter().enumerate() {
        for w in ports {
            if a < w.peer as usize {
                links.push((w.channel.latency.ps(), a, w.peer as usize));
            }
        }
    }
    links.sort_unstable();
    let slowest = links.last().map_or(0, |l| l.0);
    for &(lat, a, b) in &links {
        if lat >= slowest {
            break;
        }
        let (ra, rb) = (find(&mut parent, a), find(&mut parent, b));
        if ra != rb && group_weight[ra] + group_weight[rb] <= cap {
            let (keep, gone) = (ra.min(rb), ra.max(rb));
            parent[gone] = keep;
            group_weight[keep] += group_weight[gone];
        }
    }
    // Keep an edge actor (one link, e.g. a host under its top-of-rack switch) with its
    // neighbour: it exchanges every frame with it, so cutting there costs the most messages and
    // gains no lookahead. Skipped when it would leave too few groups to balance.
    let mut contracted = parent.clone();
    for (a, ports) in wiring.ports.iter().enumerate() {
        if let [w] = ports.as_slice() {
            let (ra, rb) = (
                find(&mut contracted, a),
                find(&mut contracted, w.peer as usize),
            );
            if ra != rb {
                contracted[ra.max(rb)] = ra.min(rb);
            }
        }
    }
    let groups = (0..n).filter(|&a| find(&mut contracted, a) == a).count();
    if groups >= 2 * threads {
        parent = contracted;
    }
    // Breadth-first order over groups.
    let mut members: Vec<Vec<usize>> = vec![Vec::new(); n];
    for a in 0..n {
        let r = find(&mut parent, a);
        members[r].push(a);
    }
    let mut seen = vec![false; n];
    let mut order: Vec<usize> = Vec::new(); // group roots in visiting order
    for start in 0..n {
        let root = find(&mut parent, start);
        if seen[root] {
            continue;
        }
        seen[root] = true;
        let mut q = VecDeque::from([root]);
        while let Some(g) = q.pop_front() {
            order.push(g);
            for &a in &members[g] {
                for w in &wiring.ports[a] {
                    let r = find(&mut parent, w.peer as usize);
                    if !seen[r] {
                        seen[r] = true;
                        q.push_back(r);
                    }
                }
            }
        }
    }
    let k = threads.min(order.len());
    if k <= 1 {
        return single;
    }
    let weight = |g: usize| -> u64 {
        members[g]
            .iter()
            .map(|&a| 1 + wiring.ports[a].len() as u64)
            .sum()
    };
    let total: u64 = order.iter().map(|&g| weight(g)).sum();
    let mut assignment = vec![0u32; n];
    let mut acc = 0u64;
    let mut used = vec![false; k];
    for &g in &order {
        let w = weight(g);
        // The part whose share contains this group's midpoint.
        let mid = acc * 2 + w;
        let part = ((mid as u128 * k as u128) / (2 * total as u128)).min(k as u128 - 1) as usize;
        used[part] = true;
        for &a in &members[g] {
            assignment[a] = part as u32;
        }
        acc += w;
    }
    // Renumber so that partitions are dense.
    let mut remap = vec![0u32; k];
    let mut parts = 0u32;
    for (p, u) in used.iter().enumerate() {
        if *u {
            remap[p] = parts;
            parts += 1;
        }
    }
    for a in assignment.iter_mut() {
        *a = remap[*a as usize];
    }
    if parts <= 1 {
        return single;
    }
    let mut lookahead = Time::NEVER;
    for (a, ports) in wiring.ports.iter().enumerate() {
        for w in ports {
            if assignment[a] != assignment[w.peer as usize] {
                lookahead = lookahead.min(w.channel.latency);
            }
        }
    }
    Plan {
        parts: parts as usize,
        assignment,
        lookahead,
    }
}

/// Where each actor runs over `ranks` processes of `threads` threads each when the caller knows
/// which actors belong together (`groups[actor]`: a pod of a fat-tree, a leaf and its hosts,
/// a slice of a torus): whole groups, in group order, are dealt to ranks in contiguous runs of
/// about equal weight (one plus the ports, as [`plan`]), and a rank's groups to its threads
/// likewise. Returns the plan and the rank of each partition; `None` when the groups cannot be
/// used — fewer groups than ranks, a group number out of range, or a zero-latency link between
/// two partitions (it would leave no lookahead) — so the caller falls back to [`plan`].
pub fn plan_grouped(
    wiring: &Wiring,
    groups: &[u32],
    ranks: usize,
    threads: usize,
) -> Option<(Plan, Vec<usize>)> {
    let n = wiring.ports.len();
    if groups.len() != n || ranks == 0 {
        return None;
    }
    let n_groups = groups.iter().max().map_or(0, |&g| g as usize + 1);
    let mut weight = vec![0u64; n_groups];
    for (a, &g) in groups.iter().enumerate() {
        weight[g as usize] += 1 + wiring.ports[a].len() as u64;
    }
    let present: Vec<usize> = (0..n_groups).filter(|&g| weight[g] > 0).collect();
    if present.len() < ranks {
        return None;
    }
    // The share (of `k`) whose span of `total` contains the midpoint of [acc, acc + w).
    let share = |acc: u64, w: u64, total: u64, k: usize| -> usize {
        let mid = acc * 2 + w;
        ((mid as u128 * k as u128) / (2 * total.max(1) as u128)).min(k as u128 - 1) as usize
    };
    let total: u64 = weight.iter().sum();
    let mut rank_of = vec![0usize; n_groups];
    let mut acc = 0;
    for &g in &present {
        rank_of[g] = share(acc, weight[g], total, ranks);
        acc += weight[g];
    }
    // Within each rank, the same over its threads; partitions numbered rank by rank.
    let threads = threads.max(1);
    let mut part_of = vec![0usize; n_groups];
    for r in 0..ranks {
        let mine: Vec<usize> = present
            .iter()
            .copied()
            .filter(|&g| rank_of[g] == r)
            .collect();
        let t = threads.min(mine.len()).max(1);
        let total: u64 = mine.iter().map(|&g| weight[g]).sum();
        let mut acc = 0;
        for &g in &mine {
            part_of[g] = r * threads + share(acc, weight[g], total, t);
            acc += weight[g];
        }
    }
    // Dense partition numbers, in rank order (so each rank's partitions are contiguous).
    let mut dense = vec![u32::MAX; ranks * threads];
    let mut owner = Vec::new();
    for &g in &present {
        let p = part_of[g];
        if dense[p] == u32::MAX {
            dense[p] = 0;
        }
    }
    for (p, d) in dense.iter_mut().enumerate() {
        if *d == 0 {
            *d = owner.len() as u32;
            owner.push(p / threads);
        }
    }
    let assignment: Vec<u32> = groups.iter().map(|&g| dense[part_of[g as usize]]).collect();
    let mut lookahead = Time::NEVER;
    for (a, ports) in wiring.ports.iter().enumerate() {
        for w in ports {
            if assignment[a] != assignment[w.peer as usize] {
                if w.channel.latency == Time::ZERO {
                    return None;
                }
                lookahead = lookahead.min(w.channel.latency);
            }
        }
    }
    Some((
        Plan {
            parts: owner.len(),
            assignment,
            lookahead,
        },
        owner,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::PortWiring;
    use crate::link::{Channel, Rate};
    use crate::units::Bandwidth;

    fn chain(lat: &[u64]) -> Wiring {
        // actors 0..=len in a line; link i joins i and i+1.
        let n = lat.len() + 1;
        let mut ports = vec![Vec::new(); n];
        for (i, &l) in lat.iter().enumerate() {
            let ch = Channel {
                rate: Rate::new(Bandwidth::from_gbps(100)),
                latency: Time(l),
            };
            let pa = ports[i].len();
            let pb = ports[i + 1].len();
            ports[i].push(PortWiring {
                peer: (i + 1) as u32,
                peer_port: pb,
                channel: ch,
            });
            ports[i + 1].push(PortWiring {
                peer: i as u32,
                peer_port: pa,
                channel: ch,
            });
        }
        Wiring { ports }
    }

    #[test]
    fn splits_a_chain_in_two() {
        let p = plan(&chain(&[10, 10, 10]), 2);
        assert_eq!(p.parts, 2);
        assert_eq!(p.lookahead, Time(10));
    }

    #[test]
    fn never_cuts_zero_latency_links() {
        let p = plan(&chain(&[0, 0, 0]), 4);
        assert_eq!(p.parts, 1);
        let p = plan(&chain(&[0, 5, 0]), 4);
        assert_eq!(p.parts, 2);
        assert_eq!(p.lookahead, Time(5));
        assert_eq!(p.assignment[0], p.assignment[1]);
        assert_eq!(p.assignment[2], p.assignment[3]);
    }

    #[test]
    fn cuts_the_slowest_links() {
        // 8 actors in a line: fast 10 ps links except one 1000 ps link in the middle.
        let p = plan(&chain(&[10, 10, 10, 1000, 10, 10, 10]), 2);
        assert_eq!(p.parts, 2);
        assert_eq!(p.lookahead, Time(1000));
    }

    #[test]
    fn one_thread_is_one_partition() {
        let p = plan(&chain(&[1, 1]), 1);
        assert_eq!(p.parts, 1);
        assert_eq!(p.lookahead, Time::NEVER);
    }

    #[test]
    fn groups_stay_whole_and_ranks_get_contiguous_partitions() {
        // 8 actors in a line, 4 groups of 2.
        let w = chain(&[10, 20, 10, 20, 10, 20, 10]);
        let groups = [0, 0, 1, 1, 2, 2, 3, 3];
        let (p, owner) = plan_grouped(&w, &groups, 2, 1).unwrap();
        assert_eq!(p.parts, 2);
        assert_eq!(owner, vec![0, 1]);
        assert_eq!(p.assignment, vec![0, 0, 0, 0, 1, 1, 1, 1]);
        assert_eq!(p.lookahead, Time(20));
        let (p, owner) = plan_grouped(&w, &groups, 2, 2).unwrap();
        assert_eq!(p.parts, 4);
        assert_eq!(owner, vec![0, 0, 1, 1]);
        assert_eq!(p.assignment, vec![0, 0, 1, 1, 2, 2, 3, 3]);
        // Fewer groups than ranks, or a zero-latency link cut: not usable.
        assert!(plan_grouped(&w, &groups, 5, 1).is_none());
        let z = chain(&[10, 0, 10]);
        assert!(plan_grouped(&z, &[0, 0, 1, 1], 2, 1).is_none());
    }
}
