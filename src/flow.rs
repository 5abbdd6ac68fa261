//! Flow fidelity: the same scenario, its messages as fluid flows on their routed paths.
//!
//! The fabric, routes, messages and collective programs are built exactly as for the packet
//! level ([`crate::world`]); the hosts' applications (point-to-point messages and the
//! collective executor) then run over [`fabemu_flow::sim`] instead of NICs and switches. A
//! message takes the path its packets would: the same route tables, the same ECMP choice
//! (the QP's UDP source port, the 5-tuple hash, each switch's salt), so ECMP collisions agree.
//!
//! The result is presented as a finished packet-level world, so that every report, summary
//! and output is the same code at both fidelities: hosts carry their applications and NIC
//! counters derived from the flows (packets, bytes, ACKs the packet level would have sent);
//! switches carry no counters (nothing is queued, marked or dropped at flow fidelity); port
//! counters give the frames and wire bytes each link direction carried and its busy time
//! (wire bytes / bandwidth).

use std::sync::Arc;

use fabemu_fabric::engine::{EngineLayout, EngineStats, PortStats, Progress, RunOutput};
use fabemu_fabric::host::{Host, HostDirectory};
use fabemu_fabric::link::Rate;
use fabemu_fabric::route::{ecmp_index, flow_hash, qp_udp_src_port, switch_salt, RouteTable};
use fabemu_fabric::units::{Bandwidth, Time};
use fabemu_flow::sim::{self, Hop, PathSource, SimConfig};
use fabemu_flow::LinkId;
use fabemu_switch::{Switch, SwitchConfig};
use fabemu_topologies::{Graph, NodeKind, Routes};

use crate::scenario::{self, ScenarioError, Source};
use crate::world::{self, Finished, Node};

/// Paths as the packets take them: every node's route set toward the destination and the
/// ECMP rule of [`fabemu_fabric::route`].
struct GraphPaths<'a> {
    graph: &'a Graph,
    routes: &'a Routes,
    dir: &'a HostDirectory,
    seed: u64,
}

impl GraphPaths<'_> {
    /// Link direction id of `link` leaving `node`: 2 x link for a -> b, + 1 for b -> a.
    fn link_id(&self, node: usize, link: usize) -> LinkId {
        let back = usize::from(self.graph.link(link).a != node);
        LinkId((2 * link + back) as u32)
    }
}

impl PathSource for GraphPaths<'_> {
    fn path(&self, src: u32, dst: u32, out: &mut Vec<Hop>) -> bool {
        let g = self.graph;
        let (Some(a), Some(b)) = (self.dir.get(src), self.dir.get(dst)) else {
            return false;
        };
        let (Some(mut node), Some(target)) = (g.host_at(src as usize), g.host_at(dst as usize))
        else {
            return false;
        };
        let udp = qp_udp_src_port(a.ip, b.ip, dst, self.seed);
        let mut first = true;
        // Routes are loop-free; the bound only guards against a table that is not.
        for _ in 0..g.nodes().len() {
            if node == target {
                return true;
            }
            let hops = self.routes.next_hops(node, target);
            let ports = g.ports(node);
            let pick = match g.node(node).kind {
                // The source NIC: its only port, or the route's ECMP choice (NIC::qp_entry).
                NodeKind::Host if first && ports.len() == 1 => Some(0),
                NodeKind::Host => (!hops.is_empty())
                    .then(|| hops[ecmp_index(hops.len(), flow_hash(a.ip, b.ip, udp, self.seed))]),
                NodeKind::Switch => (!hops.is_empty()).then(|| {
                    let salt = switch_salt(self.seed, node);
                    hops[ecmp_index(hops.len(), flow_hash(a.ip, b.ip, udp, salt))]
                }),
            };
            let Some(p) = pick.and_then(|p| ports.get(p)) else {
                return false;
            };
            let l = g.link(p.link);
            out.push(Hop {
                link: self.link_id(node, p.link),
                bandwidth: Bandwidth(l.bandwidth_bps),
                latency: Time(l.latency_ps),
            });
            node = p.peer;
            first = false;
        }
        false
    }
}

/// Builds and runs a checked scenario at flow fidelity.
pub fn run(src: &Source, progress: Option<&Progress>) -> Result<Finished, ScenarioError> {
    scenario::check_fidelity(src)?;
    let s = &src.scenario;
    let (g, routes) = world::fabric(src)?;
    let world::Apps {
        apps,
        messages,
        collectives,
        training,
    } = world::host_apps(src, &g)?;
    let directory = world::directory(src, &g)?;
    let capacities: Vec<f64> = g
        .links()
        .iter()
        .flat_map(|l| {
            let c = l.bandwidth_bps as f64 / 8.0;
            [c, c]
        })
        .collect();
    let cfg = SimConfig {
        mtu: s.nic.mtu.bytes(),
        ack_every: s.nic.ack_every,
        overhead: s.ethernet,
        qp_rate: s.nic.qp_rate,
        until: s.until,
        model: match s.flow_model {
            scenario::FlowModel::MaxMin => sim::FlowModel::MaxMin,
            scenario::FlowModel::Queues => sim::FlowModel::Queues,
        },
    };
    let paths = GraphPaths {
        graph: &g,
        routes: &routes,
        dir: &directory,
        seed: s.seed,
    };
    let out = sim::run(apps, &paths, capacities, &cfg, progress).map_err(|e| {
        src.error_at(
            &scenario::FieldPath::root(),
            format!("the flow network refused the fabric: {e}"),
        )
    })?;

    // Present the result as a finished world (see the module doc).
    let mut apps = out.apps.into_iter();
    let no_routes = Arc::new(RouteTable::new());
    let mut actors = Vec::with_capacity(g.nodes().len());
    let mut port_stats = Vec::with_capacity(g.nodes().len());
    for (id, node) in g.nodes().iter().enumerate() {
        let ports = g.ports(id);
        port_stats.push(
            ports
                .iter()
                .map(|p| {
                    let l = g.link(p.link);
                    let c = out.links[paths.link_id(id, p.link).0 as usize];
                    PortStats {
                        tx_packets: c.frames,
                        tx_frame_bytes: 0,
                        tx_wire_bytes: c.wire_bytes,
                        busy: Rate::new(Bandwidth(l.bandwidth_bps))
                            .serialization_time(c.wire_bytes),
                    }
                })
                .collect(),
        );
        let actor = match node.kind {
            NodeKind::Host => {
                let rank = g.host_index(id).unwrap_or(0);
                let app = apps.next().ok_or_else(|| {
                    src.error_at(&scenario::FieldPath::root(), "host count changed")
                })?;
                let mut host = Host::new(
                    rank as u32,
                    directory.clone(),
                    no_routes.clone(),
                    ports.len(),
                    s.nic.clone(),
                    s.seed,
                    app,
                )
                .ok_or_else(|| {
                    src.error_at(
                        &scenario::FieldPath::root(),
                        format!("host `{}` has no address", node.name),
                    )
                })?;
                if let Some(c) = out.hosts.get(rank) {
                    let st = &mut host.nic.stats;
                    st.data_packets_sent = c.data_packets_sent;
                    st.data_bytes_sent = c.data_bytes_sent;
                    st.acks_sent = c.acks_sent;
                    st.data_packets_received = c.data_packets_received;
                }
                Node::Host(Box::new(host))
            }
            NodeKind::Switch => Node::Switch(Box::new(Switch::new(
                ports.len(),
                RouteTable::new(),
                &SwitchConfig {
                    buffer: s.switch_buffer,
                },
                switch_salt(s.seed, id),
            ))),
        };
        actors.push(actor);
    }
    Ok(Finished {
        graph: g,
        messages,
        collectives,
        training,
        output: RunOutput {
            actors,
            port_stats,
            stats: EngineStats {
                events: out.stats.events,
                packet_hops: out.stats.packet_hops,
                end_time: out.stats.end_time,
                stopped_at_limit: out.stats.stopped_at_limit,
                halted_at: None,
            },
            layout: EngineLayout {
                partitions: 1,
                lookahead: Time::NEVER,
                windows: 0,
            },
            capture: None,
            samples: None,
            cancelled: out.stats.cancelled,
            faults: Default::default(),
        },
    })
}
