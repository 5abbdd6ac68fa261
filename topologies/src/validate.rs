//! Checking routes a user wrote by hand.
//!
//! Routes are acceptable when, for every destination host, a packet from any other host reaches
//! the destination whichever next hop it takes at each step. That holds exactly when the next
//! hops toward a destination, restricted to the nodes a source host can reach, form a graph
//! with no cycle in which every node but the destination has a way out. One depth-first search
//! per destination (shared by all sources, iterative so long paths cannot overflow the stack)
//! checks both in O(hosts × (nodes + route entries)).

use crate::error::TopologyError;
use crate::graph::{Graph, NodeId};
use crate::routes::Routes;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Mark {
    Unseen,
    /// On the current search path: reaching it again closes a loop.
    OnPath,
    /// Every way on from here was found to reach the destination.
    Done,
}

/// Checks that `routes` fit `g` and deliver every host's traffic to every other host without
/// loops, whichever equal-cost next hop is taken.
///
/// # Errors
/// [`TopologyError::RoutesGraphMismatch`] if the routes were made for another graph,
/// [`TopologyError::MissingRoute`] naming where traffic gets stuck,
/// [`TopologyError::RoutingLoop`] naming the loop.
pub fn validate_routes(g: &Graph, routes: &Routes) -> Result<(), TopologyError> {
    if !routes.fits(g) {
        return Err(TopologyError::RoutesGraphMismatch);
    }
    let mut mark = vec![Mark::Unseen; g.nodes().len()];
    // (node, index of the next next-hop to try)
    let mut stack: Vec<(NodeId, usize)> = Vec::new();

    for dst in g.hosts() {
        mark.fill(Mark::Unseen);
        mark[dst] = Mark::Done;
        for src in g.hosts() {
            if mark[src] != Mark::Unseen {
                continue;
            }
            mark[src] = Mark::OnPath;
            stack.push((src, 0));
            while let Some(top) = stack.last_mut() {
                let (v, i) = *top;
                let hops = routes.next_hops(v, dst);
                if hops.is_empty() {
                    return Err(TopologyError::MissingRoute {
                        at: routes.name(v).to_owned(),
                        dst: routes.name(dst).to_owned(),
                        from: routes.name(src).to_owned(),
                    });
                }
                let Some(&port) = hops.get(i) else {
                    mark[v] = Mark::Done;
                    stack.pop();
                    continue;
                };
                top.1 += 1;
                // `fits` guarantees the port exists; report rather than panic should that ever change.
                let Some(w) = routes.peer(v, port) else {
                    return Err(TopologyError::NoSuchPort {
                        node: routes.name(v).to_owned(),
                        port,
                        ports: routes.port_count(v),
                    });
                };
                match mark[w] {
                    Mark::Done => {}
                    Mark::Unseen => {
                        mark[w] = Mark::OnPath;
                        stack.push((w, 0));
                    }
                    Mark::OnPath => {
                        let from = stack.iter().position(|&(n, _)| n == w).unwrap_or(0);
                        let cycle = stack[from..]
                            .iter()
                            .map(|&(n, _)| n)
                            .chain([w])
                            .map(|n| routes.name(n).to_owned())
                            .collect();
                        return Err(TopologyError::RoutingLoop {
                            dst: routes.name(dst).to_owned(),
                            cycle,
                        });
                    }
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{shortest_paths, RoutingOptions};

    /// Square of switches s0..s3 (s0-s1-s2-s3-s0), host h0 on s0 and h1 on s2.
    fn square() -> Graph {
        let mut g = Graph::new();
        let h0 = g.add_host("h0").unwrap();
        let h1 = g.add_host("h1").unwrap();
        let s: Vec<_> = (0..4)
            .map(|i| g.add_switch(format!("s{i}")).unwrap())
            .collect();
        for i in 0..4 {
            g.add_link(s[i], s[(i + 1) % 4], 1, 1).unwrap();
        }
        g.add_link(h0, s[0], 1, 1).unwrap();
        g.add_link(h1, s[2], 1, 1).unwrap();
        g
    }

    /// Hand routes: one way round the square each direction. Port numbering:
    /// s0: [s1, s3, h0]; s1: [s0, s2]; s2: [s1, s3, h1]; s3: [s2, s0]; hosts: [their switch].
    fn hand_routes(g: &Graph) -> Routes {
        let mut r = Routes::empty(g).unwrap();
        let (h0, h1) = (0, 1);
        let (s0, s1, s2, s3) = (2, 3, 4, 5);
        r.set(h0, h1, &[0]).unwrap();
        r.set(s0, h1, &[0]).unwrap(); // -> s1
        r.set(s1, h1, &[1]).unwrap(); // -> s2
        r.set(s2, h1, &[2]).unwrap(); // -> h1
        r.set(h1, h0, &[0]).unwrap();
        r.set(s2, h0, &[1]).unwrap(); // -> s3
        r.set(s3, h0, &[1]).unwrap(); // -> s0
        r.set(s0, h0, &[2]).unwrap(); // -> h0
        r
    }

    #[test]
    fn computed_and_sound_hand_routes_pass() {
        let g = square();
        let r = shortest_paths(&g, &RoutingOptions::default()).unwrap();
        assert_eq!(validate_routes(&g, &r), Ok(()));
        // Both ways round the square are equal cost.
        assert_eq!(r.next_hops(2, 1), &[0, 1]);
        assert_eq!(validate_routes(&g, &hand_routes(&g)), Ok(()));
    }

    #[test]
    fn a_loop_is_named() {
        let g = square();
        let mut r = hand_routes(&g);
        r.set(4, 1, &[0, 2]).unwrap(); // s2 may also go back to s1, which sends to s2
        let err = validate_routes(&g, &r).unwrap_err();
        assert_eq!(
            err,
            TopologyError::RoutingLoop {
                dst: "h1".into(),
                cycle: vec!["s1".into(), "s2".into(), "s1".into()]
            }
        );
        assert_eq!(
            err.to_string(),
            "routes toward host `h1` loop: s1 -> s2 -> s1"
        );
    }

    #[test]
    fn a_missing_route_is_named() {
        let g = square();
        let mut r = hand_routes(&g);
        r.set(3, 1, &[]).unwrap(); // s1 forgets h1
        assert_eq!(
            validate_routes(&g, &r),
            Err(TopologyError::MissingRoute {
                at: "s1".into(),
                dst: "h1".into(),
                from: "h0".into()
            })
        );
        let mut r = hand_routes(&g);
        r.set(1, 0, &[]).unwrap(); // h1 has no way out at all
        assert_eq!(
            validate_routes(&g, &r),
            Err(TopologyError::MissingRoute {
                at: "h1".into(),
                dst: "h0".into(),
                from: "h1".into()
            })
        );
    }

    #[test]
    fn routes_of_another_graph_are_refused() {
        let g = square();
        let r = hand_routes(&g);
        let mut bigger = g.clone();
        bigger.add_host("h2").unwrap();
        assert_eq!(
            validate_routes(&bigger, &r),
            Err(TopologyError::RoutesGraphMismatch)
        );
    }
}
