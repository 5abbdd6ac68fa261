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
//!
//! ## Where the flow level cannot be trusted
//!
//! Flows never fill a buffer, but the senders they stand for would: without congestion control
//! every NIC sends at its line rate, and a link that more arrives at than it carries queues the
//! rest in its switch's buffer. The run estimates that queue on every link direction a switch
//! transmits on ([`fabemu_flow::backlog`]) and compares its peak with the buffer's threshold for
//! the inputs that fed it: PFC's pause threshold on a lossless fabric (the packet level would
//! pause the upstream ports, and flows behind them would wait), the lossy dynamic threshold
//! otherwise (the packet level would drop and retransmit). Each excess is a [`FlowLimit`]: the
//! run warns and the report lists them (`flow_limits`).
//!
//! On switches with PFC the max-min model models the pauses ([`fabemu_flow::pfc`]): each port
//! with PFC gets its XOFF threshold (the same dynamic threshold) and XON offset, a port whose
//! lossless queue reaches XOFF pauses the links feeding it, and the flows behind the pause are
//! held to the pace of the flows it is paused for. The port's [`FlowLimit`] then says that the
//! pause was modelled, and how long it lasted, instead of that the figures are too early.

use std::sync::Arc;

use fabemu_fabric::engine::{EngineLayout, EngineStats, PortStats, Progress, RunOutput};
use fabemu_fabric::host::{Host, HostDirectory};
use fabemu_fabric::link::Rate;
use fabemu_fabric::route::{ecmp_choice, flow_hash, qp_udp_src_port, switch_salt, RouteTable};
use fabemu_fabric::units::{Bandwidth, Time};
use fabemu_flow::sim::{self, Hop, PathSource, SimConfig};
use fabemu_flow::LinkId;
use fabemu_switch::{Switch, SwitchConfig};
use fabemu_topologies::{Graph, NodeKind, Routes};

use fabemu_flow::{BacklogPeak, DynamicThreshold, PauseThreshold, PauseTotal};
use fabemu_switch::buffer::BufferConfig;
use serde::Serialize;

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
            // The ECMP salt: the NIC hashes with the run's seed, a switch with its own.
            let salt = match g.node(node).kind {
                NodeKind::Host => self.seed,
                NodeKind::Switch => switch_salt(self.seed, node),
            };
            let pick = if g.node(node).kind == NodeKind::Host && first && ports.len() == 1 {
                // The source NIC's only port (NIC::qp_create).
                Some(0)
            } else {
                ecmp_choice(hops.len(), || flow_hash(a.ip, b.ip, udp, salt)).map(|i| hops[i])
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

/// A link direction where the flow model's assumption failed: senders without congestion
/// control would have queued more there than its switch's buffer lets them.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FlowLimit {
    /// The switch port: `switch -> peer`.
    pub port: String,
    /// What the packet level would do: `pause` (PFC) or `drop`.
    pub consequence: &'static str,
    /// The estimated peak queue, wire bytes.
    pub queue_bytes: u64,
    /// The buffer's threshold for the inputs that fed it then, bytes.
    pub threshold_bytes: u64,
    /// When the queue peaked, picoseconds.
    pub at_ps: u64,
    /// Input ports feeding it then.
    pub inputs: u32,
    /// Their arrival rate then, bits per second, against the port's `bandwidth_bps`.
    pub arrival_bps: f64,
    /// The port's bandwidth.
    pub bandwidth_bps: u64,
    /// How the flow level modelled the port's pauses, where it did (PFC, `flow_model:
    /// max_min`); absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub modelled: Option<ModelledPause>,
}

/// A port whose PFC pauses the flow level modelled ([`fabemu_flow::pfc`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct ModelledPause {
    /// Times it paused its inputs.
    pub pauses: u32,
    /// When it first did, picoseconds.
    pub first_ps: u64,
    /// Time it held them paused, picoseconds.
    pub paused_ps: u64,
}

impl std::fmt::Display for FlowLimit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.modelled.is_some() {
            return write!(
                f,
                "port {} would queue {} without PFC, above its {:.2} MiB pause threshold: {}",
                self.port,
                self.peak(),
                self.threshold_bytes as f64 / 1048576.0,
                self.consequence_text(),
            );
        }
        write!(
            f,
            "flow fidelity assumes no queue beyond the buffer, but port {} would queue {}, above \
             its {:.2} MiB threshold: {}, and the flow-level times there are too early",
            self.port,
            self.peak(),
            self.threshold_bytes as f64 / 1048576.0,
            self.consequence_text(),
        )
    }
}

/// A kind of port: the switch's and the peer's names without their numbers, what the packet
/// level would do there, and whether the flow level modelled it.
type PortKind<'a> = (String, String, &'a str, bool);

/// The run's warnings for `limits`: one per kind of port, the ports whose names differ only
/// in their numbers (`edge3 -> h17` and `edge0 -> h2` are `edge -> h`) and that would do the
/// same (pause or drop), so a large fabric's thousands of ports are a few lines. A kind of
/// one port is the port's own warning; a kind of several gives their count, the worst queue
/// (with its port, time and rates) and when the first one peaked. The report's `flow_limits`
/// keeps every port.
pub fn warnings(limits: &[FlowLimit]) -> Vec<String> {
    let kind = |l: &FlowLimit| {
        let stem = |n: &str| n.trim_end_matches(|c: char| c.is_ascii_digit()).to_string();
        let (from, to) = l.port.split_once(" -> ").unwrap_or((&l.port, ""));
        (stem(from), stem(to), l.consequence, l.modelled.is_some())
    };
    // Kinds in the order their first port comes in the report.
    let mut kinds: Vec<(PortKind, Vec<&FlowLimit>)> = Vec::new();
    for l in limits {
        let k = kind(l);
        match kinds.iter_mut().find(|(key, _)| *key == k) {
            Some((_, list)) => list.push(l),
            None => kinds.push((k, vec![l])),
        }
    }
    kinds
        .into_iter()
        .filter_map(|((from, to, _, modelled), list)| {
            let worst = list
                .iter()
                .max_by_key(|l| (l.queue_bytes, std::cmp::Reverse(l.at_ps)))?;
            let first = list.iter().min_by_key(|l| l.at_ps)?;
            Some(if list.len() == 1 {
                worst.to_string()
            } else {
                // A modelled pause says so; elsewhere the figures there are not to be used.
                let (lead, thresholds, tail) = if modelled {
                    ("", "pause thresholds without PFC", "")
                } else {
                    (
                        "flow fidelity assumes no queue beyond the buffer, but ",
                        "thresholds",
                        ", and the flow-level times there are too early",
                    )
                };
                format!(
                    "{lead}{n} ports {from}* -> {to}* would queue above their {thresholds}, the \
                     first at {first:.3} ms ({fp}); the worst, {wp}, {peak} against {thr:.2} \
                     MiB: {what}{tail} (the report's `flow_limits` lists every port)",
                    n = list.len(),
                    first = first.at_ps as f64 * 1e-9,
                    fp = first.port,
                    wp = worst.port,
                    peak = worst.peak(),
                    thr = worst.threshold_bytes as f64 / 1048576.0,
                    what = worst.consequence_text(),
                )
            })
        })
        .collect()
}

impl FlowLimit {
    /// The queue's peak, when, and what fed it, in words (both kinds of warning say it).
    fn peak(&self) -> String {
        format!(
            "about {:.2} MiB at {:.3} ms ({:.1} Gb/s arriving at {:.1} Gb/s over {} input(s))",
            self.queue_bytes as f64 / 1048576.0,
            self.at_ps as f64 * 1e-9,
            self.arrival_bps * 1e-9,
            self.bandwidth_bps as f64 * 1e-9,
            self.inputs,
        )
    }

    /// What the packet level would do there, in words; where the pause was modelled, how.
    fn consequence_text(&self) -> String {
        if let Some(m) = self.modelled {
            return format!(
                "the flow level models the pause (paused {} time(s) from {:.3} ms, {:.3} ms in \
                 all; flows that share a paused link are held to the pace of the flows it is \
                 paused for), an approximation of the packet level's PFC (docs/FLOW.md)",
                m.pauses,
                m.first_ps as f64 * 1e-9,
                m.paused_ps as f64 * 1e-9,
            );
        }
        match self.consequence {
            "pause" => "PFC would pause its inputs",
            _ => "the switch would drop",
        }
        .to_string()
    }
}

/// The queue a switch with buffer `b` lets `n` ingress ports feeding one egress port build
/// before it pauses (lossless) or drops (lossy): each ingress holds its reserved bytes plus its
/// dynamic threshold, `alpha x free shared bytes`, which with `n` of them alone in the pool is
/// `alpha x shared / (1 + n alpha)` each.
fn threshold(b: &BufferConfig, n: u32) -> (f64, &'static str) {
    let (alpha, what) = if b.pfc.enabled {
        (b.alpha, "pause")
    } else {
        (b.lossy_alpha, "drop")
    };
    let mut t = dynamic(b, alpha).bytes(n);
    if let (Some(q), false) = (b.per_queue, b.pfc.enabled) {
        t = t.min(q.bytes() as f64);
    }
    (t, what)
}

/// Buffer `b`'s dynamic threshold with factor `alpha`.
fn dynamic(b: &BufferConfig, alpha: f64) -> DynamicThreshold {
    DynamicThreshold {
        total: b.total.bytes() as f64,
        reserved: b.reserved.bytes() as f64,
        alpha,
    }
}

/// The buffer of switch `name`.
fn buffer_of(s: &scenario::Scenario, name: &str) -> BufferConfig {
    s.switches
        .iter()
        .find(|sw| sw.name == name)
        .and_then(|sw| sw.buffer)
        .unwrap_or(s.switch_buffer)
}

/// Per link direction (ids as [`GraphPaths::link_id`]), the pause thresholds of the ports that
/// switches with PFC transmit on.
fn pause_thresholds(s: &scenario::Scenario, g: &Graph) -> Vec<Option<PauseThreshold>> {
    let mut out = vec![None; 2 * g.links().len()];
    for (i, l) in g.links().iter().enumerate() {
        for (dir, from) in [(0, l.a), (1, l.b)] {
            let node = g.node(from);
            if node.kind != NodeKind::Switch {
                continue;
            }
            let b = buffer_of(s, &node.name);
            if b.pfc.enabled {
                out[2 * i + dir] = Some(PauseThreshold {
                    xoff: dynamic(&b, b.alpha),
                    xon_offset: b.pfc.xon_offset_bytes() as f64,
                });
            }
        }
    }
    out
}

/// The link directions whose estimated queue exceeds their switch's threshold, in link order;
/// `pauses` (by link direction, empty when PFC was not modelled) says how the modelled ones
/// paused.
fn limits(src: &Source, g: &Graph, peaks: &[BacklogPeak], pauses: &[PauseTotal]) -> Vec<FlowLimit> {
    let s = &src.scenario;
    let mut out = Vec::new();
    for (i, l) in g.links().iter().enumerate() {
        for (dir, (from, to)) in [(0, (l.a, l.b)), (1, (l.b, l.a))] {
            let Some(p) = peaks.get(2 * i + dir).filter(|p| p.bytes > 0.0) else {
                continue;
            };
            let node = g.node(from);
            if node.kind != NodeKind::Switch {
                continue;
            }
            let buffer = buffer_of(s, &node.name);
            let (t, consequence) = threshold(&buffer, p.inputs);
            if p.bytes > t {
                out.push(FlowLimit {
                    port: format!("{} -> {}", node.name, g.node(to).name),
                    consequence,
                    queue_bytes: p.bytes.round() as u64,
                    threshold_bytes: t.round() as u64,
                    at_ps: p.at.ps(),
                    inputs: p.inputs,
                    arrival_bps: p.arrival * 8.0,
                    bandwidth_bps: l.bandwidth_bps,
                    modelled: pauses.get(2 * i + dir).filter(|m| m.pauses > 0).map(|m| {
                        ModelledPause {
                            pauses: m.pauses,
                            first_ps: m.first.ps(),
                            paused_ps: m.paused_ps,
                        }
                    }),
                });
            }
        }
    }
    out
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
        until: s.until(),
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
    let pause = pause_thresholds(s, &g);
    let out = sim::run_with_pfc(apps, &paths, capacities, &cfg, progress, pause).map_err(|e| {
        src.error_at(
            &scenario::FieldPath::root(),
            format!("the flow network refused the fabric: {e}"),
        )
    })?;

    let flow_limits = limits(src, &g, &out.backlogs, &out.pauses);
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
        flow_limits,
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failure is a panic

    use super::{warnings, FlowLimit};

    fn limit(port: &str, queue_mib: u64, at_ms: u64) -> FlowLimit {
        FlowLimit {
            port: port.to_string(),
            consequence: "drop",
            queue_bytes: queue_mib << 20,
            threshold_bytes: 30 << 20,
            at_ps: at_ms * 1_000_000_000,
            inputs: 2,
            arrival_bps: 800e9,
            bandwidth_bps: 400_000_000_000,
            modelled: None,
        }
    }

    /// Ports whose names differ only in their numbers are one warning with their count, the
    /// worst queue and the first time; a kind of one port keeps its own warning.
    #[test]
    fn ports_of_one_kind_are_one_warning() {
        let limits = [
            limit("edge0 -> h1", 40, 7),
            limit("agg3 -> core1", 50, 2),
            limit("edge5 -> h17", 90, 9),
            limit("edge2 -> h4", 35, 3),
        ];
        let w = warnings(&limits);
        assert_eq!(w.len(), 2, "{w:?}");
        assert_eq!(
            w[0],
            "flow fidelity assumes no queue beyond the buffer, but 3 ports edge* -> h* would \
             queue above their thresholds, the first at 3.000 ms (edge2 -> h4); the worst, \
             edge5 -> h17, about 90.00 MiB at 9.000 ms (800.0 Gb/s arriving at 400.0 Gb/s over \
             2 input(s)) against 30.00 MiB: the switch would drop, and the flow-level times \
             there are too early (the report's `flow_limits` lists every port)"
        );
        assert_eq!(w[1], limits[1].to_string());
        assert!(warnings(&[]).is_empty());
    }
}
