//! Which ports to capture, by name: the engine numbers actors and ports, users name hosts and
//! switches.

use fabemu_fabric::engine::ActorId;
use fabemu_topologies::{Graph, NodeKind};

/// Resolves `spec` — comma-separated host or switch names (every port of each) or `name:port`
/// (one port, 0-based in the order `fabemu topo` lists links) — to sorted, distinct
/// (actor, port) pairs. `None` (or an empty list) means every port of every host.
pub fn resolve(g: &Graph, spec: Option<&str>) -> Result<Vec<(ActorId, usize)>, String> {
    let mut out = Vec::new();
    let items: Vec<&str> = spec
        .unwrap_or("")
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect();
    if items.is_empty() {
        for (id, n) in g.nodes().iter().enumerate() {
            if n.kind == NodeKind::Host {
                out.extend((0..g.ports(id).len()).map(|p| (id as ActorId, p)));
            }
        }
        return Ok(out);
    }
    for item in items {
        let (name, port) = match item.rsplit_once(':') {
            Some((n, p)) => {
                let port: usize = p.parse().map_err(|_| {
                    format!("--capture: `{item}`: `{p}` is not a port number (0, 1, ...)")
                })?;
                (n, Some(port))
            }
            None => (item, None),
        };
        let id = g.find(name).ok_or_else(|| {
            format!("--capture: no host or switch named `{name}` in this scenario")
        })?;
        let n_ports = g.ports(id).len();
        match port {
            Some(p) if p >= n_ports => {
                return Err(format!(
                    "--capture: `{name}` has {n_ports} port(s) (0..{}), not port {p}",
                    n_ports.saturating_sub(1)
                ))
            }
            Some(p) => out.push((id as ActorId, p)),
            None => out.extend((0..n_ports).map(|p| (id as ActorId, p))),
        }
    }
    out.sort_unstable();
    out.dedup();
    Ok(out)
}

/// The pcapng interfaces of `ports` (as [`resolve`] gives them), in that order: named
/// `NODE:PORT` as `--capture` takes them, described as the link the port is on.
pub fn interfaces(g: &Graph, ports: &[(ActorId, usize)]) -> Vec<super::pcapng::Interface> {
    ports
        .iter()
        .map(|&(actor, port)| {
            let node = &g.node(actor as usize).name;
            let description = match g.ports(actor as usize).get(port) {
                Some(p) => format!("{node} port {port} to {}", g.node(p.peer).name),
                None => format!("{node} port {port}"),
            };
            super::pcapng::Interface {
                actor,
                port,
                name: format!("{node}:{port}"),
                description,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_ports_and_default() {
        let g = match fabemu_topologies::star(3, 100_000_000_000, 1_000_000) {
            Ok(g) => g,
            Err(e) => panic!("{e}"),
        };
        let sw = (0..g.nodes().len())
            .find(|&i| g.node(i).kind == NodeKind::Switch)
            .unwrap_or(0);
        let sw_name = g.node(sw).name.clone();
        let all = resolve(&g, None).unwrap_or_default();
        assert_eq!(all.len(), 3, "one NIC port per host");
        let one = resolve(&g, Some(&format!("{sw_name}:1"))).unwrap_or_default();
        assert_eq!(one, vec![(sw as ActorId, 1)]);
        let sw_all = resolve(&g, Some(&sw_name)).unwrap_or_default();
        assert_eq!(sw_all.len(), 3);
        assert!(resolve(&g, Some("nope")).is_err());
        assert!(resolve(&g, Some(&format!("{sw_name}:9"))).is_err());
    }
}
