//! Invariant checks that need more than a counter: finding the cycle of paused ports behind a
//! PFC deadlock, so that the violation names it.

use fabemu_topologies::Graph;

use super::facts::ActorFacts;

/// The cycle of paused ports when a PFC deadlock stopped the run: switch A points at switch B
/// when one of A's egress ports toward B is paused and holds frames. Returns the first cycle
/// found (in node order) as `A port p -> B port q -> ... -> A (priority 3)`.
pub(super) fn deadlock_cycle(g: &Graph, facts: &[ActorFacts]) -> Option<String> {
    let n = facts.len();
    // blocked[a] = (port, peer, priorities) of a's egress ports paused with frames queued.
    let mut blocked: Vec<Vec<(usize, usize, u8)>> = vec![Vec::new(); n];
    for (a, actor) in facts.iter().enumerate() {
        let ActorFacts::Switch(sw) = actor else {
            continue;
        };
        for b in &sw.blocked {
            if let Some(info) = g.ports(a).get(b.port) {
                blocked[a].push((b.port, info.peer, b.priorities));
            }
        }
    }
    // Depth-first search for a cycle in the "waits for" graph.
    let mut state = vec![0u8; n]; // 0 new, 1 on the path, 2 done
    let mut path: Vec<(usize, usize, u8)> = Vec::new(); // (node, port taken, priorities)
    for start in 0..n {
        if state[start] != 0 || blocked[start].is_empty() {
            continue;
        }
        // Iterative DFS: stack of (node, next edge index).
        let mut stack = vec![(start, 0usize)];
        state[start] = 1;
        while let Some(&mut (v, ref mut i)) = stack.last_mut() {
            if let Some(&(port, w, prios)) = blocked[v].get(*i) {
                *i += 1;
                path.truncate(stack.len() - 1);
                path.push((v, port, prios));
                if state[w] == 1 {
                    let from = path.iter().position(|&(x, _, _)| x == w)?;
                    let cyc = &path[from..];
                    let mut text = cyc
                        .iter()
                        .map(|&(x, port, _)| format!("{} port {port}", g.node(x).name))
                        .collect::<Vec<_>>()
                        .join(" -> ");
                    let prios = cyc.iter().fold(0u8, |acc, &(_, _, p)| acc | p);
                    let list = (0..8)
                        .filter(|p| prios & (1 << p) != 0)
                        .map(|p| p.to_string())
                        .collect::<Vec<_>>()
                        .join(", ");
                    text.push_str(&format!(
                        " -> {} (each port paused by the next switch with frames queued; \
                         priority {list})",
                        g.node(w).name
                    ));
                    return Some(text);
                }
                if state[w] == 0 && !blocked[w].is_empty() {
                    state[w] = 1;
                    stack.push((w, 0));
                }
            } else {
                state[v] = 2;
                stack.pop();
            }
        }
    }
    None
}
