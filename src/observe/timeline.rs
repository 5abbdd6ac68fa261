//! Collective timelines: per rank, when each transfer into it ran.
//!
//! A receive step's bar spans from the moment its sender posted the matching send (the k-th
//! send on that `(peer, channel)` matches the k-th receive, as the program IR defines) to the
//! moment the data was written or reduced into the receiver's buffer: the network time of that
//! step, queueing included. Local copies and zero-length waits are not drawn.

use std::collections::BTreeMap;

use fabemu_collectives::StepKind;
use fabemu_fabric::units::Time;

use crate::observe::plot::RankSteps;
use crate::report::facts::ActorFacts;
use crate::world::{Finished, Node};

/// Most ranks drawn in one timeline (rows stay readable).
pub const MAX_RANKS: usize = 32;
/// Most collectives drawn (the first ones of the workload).
pub const MAX_COLLECTIVES: usize = 4;

/// Per drawn collective: its title and its rows. The programs are read from `fin`'s hosts (as
/// built, the same in every process), when each step completed from `facts` (`facts[actor
/// id]`, the actors' final state).
pub fn timelines(fin: &Finished, facts: &[ActorFacts]) -> Vec<(String, Vec<RankSteps>)> {
    let jobs: Vec<_> = facts
        .iter()
        .filter_map(ActorFacts::host)
        .map(|h| &h.jobs)
        .collect();
    let runners: Vec<_> = fin
        .output
        .actors
        .iter()
        .filter_map(|a| match a {
            Node::Host(h) => Some(&h.app.collectives),
            Node::Switch(_) => None,
        })
        .collect();
    let mut out = Vec::new();
    for (j, info) in fin.collectives.iter().enumerate().take(MAX_COLLECTIVES) {
        // Post time of every send: (src rank, dst rank, channel) -> times in list order.
        let mut posted: BTreeMap<(usize, usize, u32), Vec<Time>> = BTreeMap::new();
        let mut done_at: Vec<BTreeMap<u32, Time>> = Vec::with_capacity(info.hosts.len());
        for (r, &h) in info.hosts.iter().enumerate() {
            let Some(run) = runners.get(h) else {
                done_at.push(BTreeMap::new());
                continue;
            };
            let times: BTreeMap<u32, Time> = jobs
                .get(h)
                .and_then(|records| records.get(j))
                .map(|x| x.steps.iter().copied().collect())
                .unwrap_or_default();
            // Ranks without step times (a streamed job's middle ranks) have nothing to show.
            let steps = if times.is_empty() {
                0
            } else {
                run.step_count(j)
            };
            for i in 0..steps {
                if let Some(StepKind::Send { peer, channel, .. }) = run.step_kind(j, i) {
                    if let Some(&t) = times.get(&(i as u32)) {
                        posted.entry((r, peer, channel)).or_default().push(t);
                    }
                }
            }
            done_at.push(times);
        }
        let mut rows = Vec::new();
        for (r, &h) in info.hosts.iter().enumerate().take(MAX_RANKS) {
            let Some(run) = runners.get(h) else {
                continue;
            };
            let mut seen: BTreeMap<(usize, u32), usize> = BTreeMap::new();
            let mut bars = Vec::new();
            for i in 0..run.step_count(j) {
                if let Some(StepKind::Recv { peer, channel, .. }) = run.step_kind(j, i) {
                    let k = seen.entry((peer, channel)).or_insert(0);
                    let start = posted.get(&(peer, r, channel)).and_then(|v| v.get(*k));
                    *k += 1;
                    if let (Some(&a), Some(&b)) = (start, done_at[r].get(&(i as u32))) {
                        if b > a {
                            bars.push((format!("from {peer}"), a.ps(), b.ps()));
                        }
                    }
                }
            }
            rows.push((r as u32, bars));
        }
        let title = format!(
            "{} {} ({}), {} ranks{}",
            info.op.key(),
            fabemu_fabric::units::ByteSize(info.size_bytes),
            info.algorithm,
            info.ranks,
            if info.ranks > MAX_RANKS {
                format!(", first {MAX_RANKS} shown")
            } else {
                String::new()
            }
        );
        out.push((title, rows));
    }
    out
}
