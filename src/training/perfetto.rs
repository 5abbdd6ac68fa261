//! The iteration as a Chrome / Perfetto trace.

use std::collections::BTreeMap;

use fabemu_workload::scheduler::{Action, Stream};

use super::Schedule;

/// The iteration as a Chrome / Perfetto trace (`trace.json`, opens in ui.perfetto.dev): a
/// process per rank with a `compute` track and as many `comm` tracks as communication
/// overlapped on that rank (each node on the first track free at its start). `None` without
/// a training workload.
///
/// A receive that was ready before its sender posted the message is drawn as two slices on
/// its track: `wait for rank R` (category `wait`) up to the post, then the receive itself
/// (category `comm`) from the post to its end. The breakdown counts the wait as idle and only
/// the second part as communication, so the `comm` slices of a rank cover exactly its exposed
/// and hidden communication, and a pipeline bubble shows as a gap in compute and a `wait`.
///
/// The schedules are read from `facts` (`facts[actor id]`, the actors' final state).
pub fn perfetto_trace(
    fin: &crate::world::Finished,
    facts: &[crate::report::facts::ActorFacts],
) -> Option<String> {
    let info = fin.training.as_ref()?;
    let scheds: Vec<Option<Schedule<'_>>> = facts
        .iter()
        .filter_map(crate::report::facts::ActorFacts::host)
        .map(|h| {
            h.training.as_ref().map(|t| Schedule {
                nodes: &t.nodes,
                records: &t.records,
                // The trace does not show messages no receive took.
                unmatched: &[],
            })
        })
        .collect();
    let us = |ps: u64| ps as f64 / 1e6;
    let posted = super::report::sends_posted(&scheds);
    let rank_of: BTreeMap<usize, usize> = info
        .ranks
        .iter()
        .enumerate()
        .map(|(r, ri)| (ri.host, r))
        .collect();
    let kinds = super::CommKinds::new(info);
    let mut events = Vec::new();
    for (r, ri) in info.ranks.iter().enumerate() {
        let Some(s) = scheds.get(ri.host).copied().flatten() else {
            continue;
        };
        events.push(serde_json::json!({
            "ph": "M", "name": "process_name", "pid": r,
            "args": {"name": format!("rank {r} (host {})", ri.host)}
        }));
        events.push(serde_json::json!({
            "ph": "M", "name": "thread_name", "pid": r, "tid": 0, "args": {"name": "compute"}
        }));
        // Communication lanes: the end time of the last node on each.
        let mut lanes: Vec<u64> = Vec::new();
        let mut comm: Vec<(u64, u64, usize)> = s
            .nodes()
            .iter()
            .zip(s.records())
            .enumerate()
            .filter(|(_, (n, _))| {
                matches!(
                    n.action,
                    Action::Collective(_) | Action::Send { .. } | Action::Recv { .. }
                )
            })
            .filter_map(|(i, (_, rec))| Some((rec.start?.ps(), rec.end?.ps(), i)))
            .collect();
        comm.sort_unstable();
        let mut lane_of = BTreeMap::new();
        for &(a, b, i) in &comm {
            let lane = match lanes.iter().position(|&end| end <= a) {
                Some(l) => l,
                None => {
                    lanes.push(0);
                    events.push(serde_json::json!({
                        "ph": "M", "name": "thread_name", "pid": r, "tid": lanes.len(),
                        "args": {"name": format!("comm {}", lanes.len() - 1)}
                    }));
                    lanes.len() - 1
                }
            };
            lanes[lane] = b;
            lane_of.insert(i, lane + 1);
        }
        // CPU operators run beside the GPU's kernels: a track of their own after the
        // communication lanes, named only when the trace has one.
        let cpu_tid = lanes.len() + 1;
        if s.nodes()
            .iter()
            .any(|n| matches!(n.action, Action::Compute(_, Stream::Cpu)))
        {
            events.push(serde_json::json!({
                "ph": "M", "name": "thread_name", "pid": r, "tid": cpu_tid,
                "args": {"name": "cpu"}
            }));
        }
        let recv_posts = super::report::receive_posts(ri.host, &s, &posted);
        for (i, (n, rec)) in s.nodes().iter().zip(s.records()).enumerate() {
            let (Some(mut a), Some(b)) = (rec.start.map(|t| t.ps()), rec.end.map(|t| t.ps()))
            else {
                continue;
            };
            let (tid, cat) = match n.action {
                Action::Compute(_, Stream::Gpu) => (0, "compute"),
                Action::Compute(_, Stream::Cpu) => (cpu_tid, "compute"),
                Action::Delay(_) => continue,
                _ => (lane_of.get(&i).copied().unwrap_or(1), "comm"),
            };
            let name = if n.name.is_empty() {
                format!("node {}", n.id)
            } else {
                n.name.clone()
            };
            // Waiting for the sender is not communication (see above).
            if let Some(&(post, src, _)) = recv_posts.get(&i).filter(|p| p.0 > a) {
                let post = post.min(b);
                let peer = rank_of
                    .get(&src)
                    .map_or_else(|| format!("host {src}"), |p| format!("rank {p}"));
                events.push(serde_json::json!({
                    "ph": "X", "name": format!("wait for {peer}"), "cat": "wait", "pid": r,
                    "tid": tid, "ts": us(a), "dur": us(post - a),
                    "args": {"node": n.id}
                }));
                a = post;
            }
            // Communication carries its kind (tp, ep, pp, dp, ...) for the breakdown by kind.
            let args = match kinds.of(ri.host, &n.action) {
                Some(k) => serde_json::json!({"node": n.id, "kind": k}),
                None => serde_json::json!({"node": n.id}),
            };
            events.push(serde_json::json!({
                "ph": "X", "name": name, "cat": cat, "pid": r, "tid": tid,
                "ts": us(a), "dur": us(b.saturating_sub(a)),
                "args": args
            }));
        }
    }
    serde_json::to_string(&serde_json::json!({
        "displayTimeUnit": "ns",
        "traceEvents": events,
    }))
    .ok()
}
