//! Turning a scenario into a world — a graph, routes, one actor per node, the wiring — and
//! running it.
//!
//! Hosts are ranked in graph order (rank = host index) and get the conventional addresses
//! of [`HostDirectory::default_addr`]. Each node's forwarding table maps every destination
//! host's address to that node's equal-cost egress ports.

use std::sync::Arc;

use fabemu_collectives::executor::{CollectiveRunner, Job, APP as COLLECTIVES};
use fabemu_fabric::engine::{
    self, Actor, CaptureConfig, Ctx, EngineConfig, EngineError, Event, PortWiring, Progress,
    RunOutput, SampleConfig, Wiring,
};
use fabemu_fabric::host::{
    Application, Completion, Host, HostDirectory, MessageApp, MessageSpec, NicConfig, Transport,
};
use fabemu_fabric::link::{Channel, Rate};
use fabemu_fabric::route::RouteTable;
use fabemu_fabric::transport::{AppId, ClassTable};
use fabemu_fabric::units::{Bandwidth, Time};
use fabemu_switch::tree_egress::TreeEgress;
use fabemu_switch::{Switch, SwitchConfig};
use fabemu_topologies::{
    self as topo, DimKind, DimSpec, FatTreeSpec, Graph, LeafSpineSpec, NodeKind, Routes,
    RoutingOptions, RoutingPolicy, TopologyError,
};
use fabemu_workload::scheduler::APP as TRAINING;

use crate::collective::{self, CollectiveInfo};
use crate::scenario::{DimKindYaml, FieldPath, Mode, Routing, ScenarioError, Source};
use crate::training::{self, TrainingInfo};
use fabemu_workload::scheduler::RankScheduler;

/// What a host runs: its point-to-point messages, its collectives' programs and its rank of a
/// training workload, side by side.
///
/// Timers and messages go to their owner by the [`AppId`] prefix of their token or immediate:
/// collectives' (the collectives crate's), a training rank's (the workload crate's) and the
/// scenario's messages' ([`MESSAGES`]), checked apart at compile time.
/// The training scheduler starts collective jobs on the same runner, and looks at which jobs
/// finished after every event the runner handles.
///
/// Laid out in the order written (`repr(C)`), the training scheduler boxed and first: every
/// collective message asks whether there is one, and with thousands of hosts interleaved that
/// question was a cache miss of its own at the end of the struct; now it shares a line with
/// the start of the collective runner, which the message reads anyway. Aligned to a cache
/// line (`align(64)`) so that the pointer and a ring job's counters (`RingProgress`, 48 bytes)
/// share the first line of every host's application instead of straddling two.
#[repr(C, align(64))]
pub struct HostApp {
    /// This host's rank of a training workload (`workload.chakra`).
    pub training: Option<Box<RankScheduler>>,
    /// Collective jobs.
    pub collectives: CollectiveRunner,
    /// Point-to-point messages.
    pub messages: MessageApp,
}

impl Application for HostApp {
    fn start(&mut self, api: &mut dyn Transport) {
        self.messages.start(api);
        self.collectives.start(api);
        if let Some(t) = self.training.as_mut() {
            t.start(&mut self.collectives, api);
        }
    }

    fn on_timer(&mut self, token: u64, api: &mut dyn Transport) {
        if TRAINING.token_arg(token).is_some() {
            if let Some(t) = self.training.as_mut() {
                t.on_timer(token, &mut self.collectives, api);
            }
        } else if COLLECTIVES.token_arg(token).is_some() {
            self.collectives.on_timer(token, api);
            if let Some(t) = self.training.as_mut() {
                t.after_collectives(&mut self.collectives, api);
            }
        } else {
            self.messages.on_timer(token, api);
        }
    }

    /// The collective executor completes a send when it is posted (NCCL-style staging), so
    /// only point-to-point messages need their acknowledgement.
    fn wants_send_done(&self, tag: u64) -> bool {
        Owner::of_tag(tag) != Owner::Collectives
    }

    fn on_completion(&mut self, c: Completion, api: &mut dyn Transport) {
        let owner = match &c {
            Completion::SendDone { tag, .. } => Owner::of_tag(*tag),
            Completion::Received { imm, .. } => Owner::of_imm(*imm),
        };
        if owner == Owner::Collectives {
            self.collectives.on_completion(c, api);
            if let Some(t) = self.training.as_mut() {
                t.after_collectives(&mut self.collectives, api);
            }
        } else if let (Owner::Training, Some(t)) = (owner, self.training.as_mut()) {
            match c {
                Completion::SendDone { dst, tag } => {
                    t.on_send_done(dst, tag, &mut self.collectives, api)
                }
                Completion::Received { src, imm, len, .. } => {
                    t.on_received(src, imm, len, &mut self.collectives, api)
                }
            }
        } else {
            self.messages.on_completion(c, api);
        }
    }
}

/// The scenario's point-to-point messages: their tags are their immediates, below 2^30 (the
/// workload's message limit).
pub const MESSAGES: AppId = AppId::new(0b00, 2);

const _: () = assert!(
    !MESSAGES.overlaps(COLLECTIVES)
        && !MESSAGES.overlaps(TRAINING)
        && !COLLECTIVES.overlaps(TRAINING),
    "the applications of a host must own apart timer tokens and immediates"
);

/// Which of [`HostApp`]'s applications an immediate or a posted message's tag is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Owner {
    Messages,
    Collectives,
    Training,
}

impl Owner {
    /// Whose an immediate is.
    #[inline]
    fn of_imm(imm: u32) -> Owner {
        if COLLECTIVES.imm_arg(imm).is_some() {
            Owner::Collectives
        } else if TRAINING.imm_arg(imm).is_some() {
            Owner::Training
        } else {
            Owner::Messages
        }
    }

    /// Whose a posted message's tag is: the collectives and a training rank post with their
    /// immediate as the tag; tags of 2^32 and above are scenario messages.
    #[inline]
    fn of_tag(tag: u64) -> Owner {
        match u32::try_from(tag) {
            Ok(imm) => Owner::of_imm(imm),
            Err(_) => Owner::Messages,
        }
    }
}

/// Every host's application (by host index) and what the report reads them back with.
pub(crate) struct Apps {
    /// One per host.
    pub(crate) apps: Vec<HostApp>,
    /// The scenario's messages.
    pub(crate) messages: Vec<MessageSpec>,
    /// The scenario's collectives.
    pub(crate) collectives: Vec<CollectiveInfo>,
    /// The training workload.
    pub(crate) training: Option<TrainingInfo>,
}

/// Builds every host's application: the one place both fidelities get them from.
pub(crate) fn host_apps(src: &Source, g: &Graph) -> Result<Apps, ScenarioError> {
    let s = &src.scenario;
    let messages = build_messages(src, g)?;
    let (collectives, jobs) = collective::build_jobs(src, g)?;
    let mut jobs: Vec<Vec<Arc<Job>>> = jobs
        .into_iter()
        .map(|list| list.into_iter().map(Arc::new).collect())
        .collect();
    let (training, mut scheds) = match training::build(src, g, collectives.len(), &mut jobs)? {
        Some((info, scheds)) => (Some(info), scheds),
        None => (None, Vec::new()),
    };
    let n_hosts = g.host_count();
    let mut per_host: Vec<Vec<MessageSpec>> = vec![Vec::new(); n_hosts];
    for m in &messages {
        per_host[m.src as usize].push(m.clone());
    }
    let data_mode = s.mode == Mode::Data;
    let apps = (0..n_hosts)
        .map(|rank| HostApp {
            messages: MessageApp::new(s.seed, data_mode, std::mem::take(&mut per_host[rank])),
            // Timelines show only the scenario's first collectives: the training jobs after
            // them keep no step times.
            collectives: CollectiveRunner::shared(
                rank as u32,
                jobs.get_mut(rank).map(std::mem::take).unwrap_or_default(),
                collectives
                    .len()
                    .min(crate::observe::timeline::MAX_COLLECTIVES),
            ),
            training: scheds.get_mut(rank).and_then(Option::take).map(Box::new),
        })
        .collect();
    Ok(Apps {
        apps,
        messages,
        collectives,
        training,
    })
}

/// An actor of the world: a host running its workload, or a switch.
// Boxed: the actors' vector is then 16 bytes an actor (tag and pointer), which stays cached, and
// an event reads its actor's tag there. Inline (2432 bytes an actor), the tag sat on a line of
// its own that the actor's handler did not otherwise read: an L1 miss per event on fabric64
// (0.65 per packet-hop) and on fat_tree1024 1.43 L1 and 0.36 last-level misses per hop. (Boxing
// had cost ~8% of the engine benchmark early on, when the pointer chase was all it changed.)
pub enum Node {
    /// A host.
    Host(Box<Host<HostApp>>),
    /// A switch.
    Switch(Box<Switch>),
}

impl Actor for Node {
    fn start(&mut self, ctx: &mut Ctx<'_>) {
        match self {
            Node::Host(h) => h.start(ctx),
            Node::Switch(s) => s.start(ctx),
        }
    }
    #[inline]
    fn handle(&mut self, event: Event, ctx: &mut Ctx<'_>) {
        match self {
            Node::Host(h) => h.handle(event, ctx),
            Node::Switch(s) => s.handle(event, ctx),
        }
    }
    /// Queue-depth series: a switch gives the bytes queued per egress port; hosts nothing.
    fn sample(&self, out: &mut Vec<u64>) {
        if let Node::Switch(s) = self {
            s.sample(out);
        }
    }
    /// As the actor inside: switches and hosts both keep frames in the engine's slab.
    fn holds_frames(&self) -> bool {
        match self {
            Node::Host(h) => h.holds_frames(),
            Node::Switch(s) => s.holds_frames(),
        }
    }
}

/// A world ready to run.
pub struct World {
    /// The fabric.
    pub graph: Graph,
    /// One actor per graph node, same order.
    pub actors: Vec<Node>,
    /// Ports and links.
    pub wiring: Wiring,
    /// Injected faults on link directions.
    pub faults: fabemu_fabric::fault::FaultPlan,
    /// Every message of the workload, by tag.
    pub messages: Vec<MessageSpec>,
    /// The workload's collectives.
    pub collectives: Vec<CollectiveInfo>,
    /// Host addresses.
    pub directory: Arc<HostDirectory>,
    /// The training workload, if any.
    pub training: Option<TrainingInfo>,
}

fn topo_err(src: &Source, path: FieldPath, e: TopologyError) -> ScenarioError {
    src.error_at(&path, e.to_string())
}

/// Builds the fabric graph the scenario describes.
fn build_graph(src: &Source) -> Result<Graph, ScenarioError> {
    let s = &src.scenario;
    let root = FieldPath::root();
    if let Some(t) = &s.topology {
        let tp = root.key("topology");
        let g = if let Some(u) = &t.star {
            topo::star(u.hosts, u.bandwidth.bps(), u.latency.ps())
                .map_err(|e| topo_err(src, tp.key("star"), e))?
        } else if let Some(u) = &t.ring {
            topo::ring(u.hosts, u.bandwidth.bps(), u.latency.ps())
                .map_err(|e| topo_err(src, tp.key("ring"), e))?
        } else if let Some(l) = &t.leaf_spine {
            topo::leaf_spine(LeafSpineSpec {
                leaves: l.leaves,
                spines: l.spines,
                hosts_per_leaf: l.hosts_per_leaf,
                host_bw_bps: l.host_bandwidth.bps(),
                host_latency_ps: l.host_latency.ps(),
                fabric_bw_bps: l.fabric_bandwidth.bps(),
                fabric_latency_ps: l.fabric_latency.ps(),
            })
            .map_err(|e| topo_err(src, tp.key("leaf_spine"), e))?
        } else if let Some(f) = &t.fat_tree {
            topo::fat_tree(FatTreeSpec {
                k: f.k,
                oversubscription: f.oversubscription,
                host_bw_bps: f.host_bandwidth.bps(),
                host_latency_ps: f.host_latency.ps(),
                edge_agg_bw_bps: f.fabric_bandwidth.bps(),
                edge_agg_latency_ps: f.fabric_latency.ps(),
                agg_core_bw_bps: f.core_bandwidth.unwrap_or(f.fabric_bandwidth).bps(),
                agg_core_latency_ps: f.core_latency.unwrap_or(f.fabric_latency).ps(),
            })
            .map_err(|e| topo_err(src, tp.key("fat_tree"), e))?
        } else if let Some(tor) = &t.torus {
            topo::torus(&tor.dims, tor.bandwidth.bps(), tor.latency.ps())
                .map_err(|e| topo_err(src, tp.key("torus"), e))?
        } else if let Some(m) = &t.multi_dim {
            let dims: Vec<DimSpec> = m
                .dimensions
                .iter()
                .map(|d| DimSpec {
                    kind: match d.kind {
                        DimKindYaml::Ring => DimKind::Ring,
                        DimKindYaml::FullyConnected => DimKind::FullyConnected,
                        DimKindYaml::Switch => DimKind::Switch,
                    },
                    size: d.size,
                    bandwidth_bps: d.bandwidth.bps(),
                    latency_ps: d.latency.ps(),
                })
                .collect();
            topo::multi_dim(&dims).map_err(|e| topo_err(src, tp.key("multi_dim"), e))?
        } else if let Some(a) = &src.astra {
            a.network
                .build()
                .map_err(|e| topo_err(src, tp.key("astra_sim"), e))?
        } else {
            return Err(src.error_at(&tp, "no topology kind given"));
        };
        return Ok(g);
    }
    let mut g = Graph::new();
    for (i, h) in s.hosts.iter().enumerate() {
        g.add_host(h.as_str())
            .map_err(|e| topo_err(src, root.key("hosts").index(i), e))?;
    }
    for (i, sw) in s.switches.iter().enumerate() {
        g.add_switch(sw.name.as_str())
            .map_err(|e| topo_err(src, root.key("switches").index(i).key("name"), e))?;
    }
    for (i, l) in s.links.iter().enumerate() {
        let lp = root.key("links").index(i);
        let end = |f: &str, name: &str| {
            g.find(name).ok_or_else(|| {
                src.error_at(
                    &lp.key(f),
                    format!("unknown node `{name}`: not among `hosts` or `switches`"),
                )
            })
        };
        let (a, b) = (end("a", &l.a)?, end("b", &l.b)?);
        g.add_link(a, b, l.bandwidth.bps(), l.latency.ps())
            .map_err(|e| topo_err(src, lp.clone(), e))?;
    }
    Ok(g)
}

/// Routes for the graph: by the fabric's kind, shortest paths, dimension order, or the
/// explicit list.
fn build_routes(src: &Source, g: &Graph) -> Result<Routes, ScenarioError> {
    let s = &src.scenario;
    let root = FieldPath::root();
    let policy = match s.routing.policy {
        Routing::Auto => Some(RoutingPolicy::for_graph(g)),
        Routing::ShortestPath => Some(RoutingPolicy::ShortestPath(RoutingOptions {
            // Host-to-host fabrics (rings, tori) need hosts to forward.
            transit_hosts: g.hosts().any(|h| g.ports(h).len() > 1),
        })),
        Routing::DimensionOrder => {
            if g.dimensions().is_none() {
                return Err(src.error_at(
                    &root.key("routing"),
                    format!(
                        "dimension-order routing needs a fabric with dimensions (torus, multi_dim, astra_sim, star, ring), not `{}`",
                        g.fabric().name()
                    ),
                ));
            }
            Some(RoutingPolicy::DimensionOrder)
        }
        Routing::Explicit => None,
    };
    match policy {
        Some(policy) => {
            topo::compute_routes(g, policy).map_err(|e| match e {
                TopologyError::Unreachable { src: a, dst: b, .. } => {
                    // Point at the host that is cut off: the listed name if there is a list.
                    let cut = if g.ports(g.find(&b).unwrap_or(0)).is_empty() { &b } else { &a };
                    let path = s
                        .hosts
                        .iter()
                        .position(|h| h == cut)
                        .map_or(root.key("links"), |i| root.key("hosts").index(i));
                    src.error_at(
                        &path,
                        format!(
                            "host `{b}` cannot be reached from host `{a}`: no path over the links{}",
                            if g.ports(g.find(cut).unwrap_or(0)).is_empty() {
                                format!(" (`{cut}` has no link at all)")
                            } else {
                                String::new()
                            }
                        ),
                    )
                }
                e => topo_err(src, root.key("links"), e),
            })
        }
        None => {
            let mut r = Routes::empty(g).map_err(|e| topo_err(src, root.key("routes"), e))?;
            for (i, rs) in s.routes.iter().enumerate() {
                let rp = root.key("routes").index(i);
                let find = |f: &str, name: &str| {
                    g.find(name)
                        .ok_or_else(|| src.error_at(&rp.key(f), format!("unknown node `{name}`")))
                };
                let at = find("at", &rs.at)?;
                let dst = find("dst", &rs.dst)?;
                if g.node(dst).kind != NodeKind::Host {
                    return Err(src.error_at(
                        &rp.key("dst"),
                        format!("`{}` is a switch; routes lead to hosts", rs.dst),
                    ));
                }
                let mut ports = Vec::new();
                for (j, v) in rs.via.iter().enumerate() {
                    let peer = find("via", v).map_err(|mut e| {
                        e.field = rp.key("via").index(j).to_string();
                        e
                    })?;
                    let before = ports.len();
                    ports.extend(
                        g.ports(at)
                            .iter()
                            .enumerate()
                            .filter(|(_, p)| p.peer == peer)
                            .map(|(k, _)| k),
                    );
                    if ports.len() == before {
                        return Err(src.error_at(
                            &rp.key("via").index(j),
                            format!("`{v}` is not a neighbour of `{}`", rs.at),
                        ));
                    }
                }
                r.set(at, dst, &ports)
                    .map_err(|e| topo_err(src, rp.clone(), e))?;
            }
            topo::validate_routes(g, &r).map_err(|e| topo_err(src, root.key("routes"), e))?;
            Ok(r)
        }
    }
}

/// Every host's addresses, by rank.
pub(crate) fn directory(src: &Source, g: &Graph) -> Result<Arc<HostDirectory>, ScenarioError> {
    let n_hosts = g.host_count();
    let mut addrs = Vec::with_capacity(n_hosts);
    for rank in 0..n_hosts {
        let ip = g
            .host_address(rank)
            .map_err(|e| topo_err(src, FieldPath::root().key("topology"), e))?;
        let mut a = HostDirectory::default_addr(rank as u32);
        a.ip = ip.into();
        addrs.push(a);
    }
    Ok(Arc::new(HostDirectory::new(addrs)))
}

/// The workload's messages, numbered by tag, with the hosts' ranks.
pub(crate) fn build_messages(src: &Source, g: &Graph) -> Result<Vec<MessageSpec>, ScenarioError> {
    let s = &src.scenario;
    let wp = FieldPath::root().key("workload");
    let mut out = Vec::new();
    let classes = crate::classes::Classes::of(src, g)?;
    let host_rank = |p: FieldPath, name: &str| -> Result<u32, ScenarioError> {
        let id = g
            .find(name)
            .ok_or_else(|| src.error_at(&p, format!("unknown host `{name}`")))?;
        g.host_index(id)
            .map(|i| i as u32)
            .ok_or_else(|| src.error_at(&p, format!("`{name}` is a switch, not a host")))
    };
    for (i, m) in s.workload.messages.iter().enumerate() {
        let mp = wp.key("messages").index(i);
        let a = host_rank(mp.key("src"), &m.src)?;
        let b = host_rank(mp.key("dst"), &m.dst)?;
        if a == b {
            return Err(src.error_at(
                &mp.key("dst"),
                format!("`{}` sends to itself; a message needs two hosts", m.src),
            ));
        }
        out.push(MessageSpec {
            tag: out.len() as u64,
            src: a,
            dst: b,
            len: m.size.bytes(),
            start: m.start,
            class: classes.messages.get(i).copied().unwrap_or(0),
        });
    }
    if let Some(a2a) = &s.workload.all_to_all {
        let n = g.host_count() as u32;
        // Shifted order: in round k host i sends to i+k, so no receiver is hit by all at once.
        for k in 1..n {
            for i in 0..n {
                out.push(MessageSpec {
                    tag: out.len() as u64,
                    src: i,
                    dst: (i + k) % n,
                    len: a2a.size.bytes(),
                    start: a2a.start,
                    class: 0,
                });
            }
        }
    }
    Ok(out)
}

/// The fabric a checked scenario describes, and its routes (what `fabemu topo` shows).
pub fn fabric(src: &Source) -> Result<(Graph, Routes), ScenarioError> {
    let g = build_graph(src)?;
    // The engine numbers a node's ports in 16 bits.
    if let Some(n) = (0..g.nodes().len()).find(|&n| g.ports(n).len() > u16::MAX as usize) {
        return Err(src.error_at(
            &FieldPath::root().key("links"),
            format!(
                "`{}` has {} links; a node may have at most {}",
                g.node(n).name,
                g.ports(n).len(),
                u16::MAX
            ),
        ));
    }
    let routes = build_routes(src, &g)?;
    Ok((g, routes))
}

/// Builds the world for a checked scenario.
pub fn build(src: &Source) -> Result<World, ScenarioError> {
    let (g, routes) = fabric(src)?;
    let Apps {
        apps,
        messages,
        collectives,
        training,
    } = host_apps(src, &g)?;
    let mut apps = apps.into_iter();
    let directory = directory(src, &g)?;
    let classes = crate::classes::Classes::of(src, &g)?.table;
    let crate::faults::Setup {
        plan: faults,
        mut reroutes,
    } = crate::faults::setup(src, &g, &routes, &directory)?;
    // Each fault entry's first window, for the NICs' measurements of it.
    let fault_windows: Vec<(Time, Time)> = crate::faults::resolve(src, &g)?
        .iter()
        .map(|r| (r.window.from, r.window.until))
        .collect();
    let parts = NodeParts {
        src,
        directory: &directory,
        classes: &classes,
        fault_windows: &fault_windows,
    };
    let mut actors = Vec::with_capacity(g.nodes().len());
    let mut wiring = Wiring::default();
    // A host with one port sends everything out of it: every such host whose routes lead to
    // every other host through port 0 shares this one table (built on first use) instead of
    // holding its own, O(hosts) each and O(hosts²) over the fabric. Its own
    // address is in the shared table too, harmlessly: a host never forwards frames for itself.
    let mut single_port_table: Option<Arc<RouteTable>> = None;
    for (id, node) in g.nodes().iter().enumerate() {
        let (shared_table, table) =
            node_route_table(&g, &routes, &directory, id, &mut single_port_table);
        wiring.ports.push(port_wiring(&g, id));
        let reroute = reroutes.get_mut(id);
        let actor = match node.kind {
            NodeKind::Host => {
                // Hosts come in rank order in the graph's node order.
                let app = apps
                    .next()
                    .ok_or_else(|| src.error_at(&FieldPath::root(), "host count changed"))?;
                let table = shared_table.unwrap_or_else(|| Arc::new(table));
                parts.host(&g, id, table, app, reroute)?
            }
            NodeKind::Switch => parts.switch(&g, id, table, reroute)?,
        };
        actors.push(actor);
    }
    Ok(World {
        graph: g,
        actors,
        wiring,
        faults,
        messages,
        collectives,
        directory,
        training,
    })
}

/// Node `id`'s route table: the one shared by single-port hosts whose routes all leave by port
/// 0 (then with an empty own table), or its own.
fn node_route_table(
    g: &Graph,
    routes: &Routes,
    directory: &HostDirectory,
    id: usize,
    single_port_table: &mut Option<Arc<RouteTable>>,
) -> (Option<Arc<RouteTable>>, RouteTable) {
    let ports = g.ports(id);
    let shared = g.node(id).kind == NodeKind::Host
        && ports.len() == 1
        && g.hosts()
            .all(|dst| dst == id || routes.next_hops(id, dst) == [0]);
    if shared {
        let t = Arc::clone(single_port_table.get_or_insert_with(|| {
            let mut t = RouteTable::new();
            for rank in 0..g.host_count() {
                if let Some(addr) = directory.get(rank as u32) {
                    t.insert(addr.ip, &[0]);
                }
            }
            Arc::new(t)
        }));
        (Some(t), RouteTable::new())
    } else {
        let mut table = RouteTable::new();
        for dst in g.hosts() {
            let hops = routes.next_hops(id, dst);
            if !hops.is_empty() {
                let rank = g.host_index(dst).unwrap_or(0) as u32;
                if let Some(addr) = directory.get(rank) {
                    table.insert(addr.ip, hops);
                }
            }
        }
        (None, table)
    }
}

/// Node `id`'s ports: the peer each leads to and its link's channel.
fn port_wiring(g: &Graph, id: usize) -> Vec<PortWiring> {
    g.ports(id)
        .iter()
        .map(|p| {
            let l = g.link(p.link);
            PortWiring {
                peer: p.peer as u32,
                peer_port: p.peer_port,
                channel: Channel {
                    rate: Rate::new(Bandwidth(l.bandwidth_bps)),
                    latency: Time(l.latency_ps),
                },
            }
        })
        .collect()
}

/// What every host and switch is built from besides its own node.
struct NodeParts<'a> {
    src: &'a Source,
    directory: &'a Arc<HostDirectory>,
    classes: &'a ClassTable,
    /// Each fault entry's first window.
    fault_windows: &'a [(Time, Time)],
}

impl NodeParts<'_> {
    /// Host `id`, running `app`, with its NIC's configuration, fault watch and route changes.
    fn host(
        &self,
        g: &Graph,
        id: usize,
        table: Arc<RouteTable>,
        app: HostApp,
        reroute: Option<&mut Vec<(Time, RouteTable)>>,
    ) -> Result<Node, ScenarioError> {
        let s = &self.src.scenario;
        let node = g.node(id);
        let rank = g.host_index(id).unwrap_or(0);
        let mut host = Host::new(
            rank as u32,
            self.directory.clone(),
            table,
            g.ports(id).len(),
            NicConfig {
                data_mode: s.mode == Mode::Data,
                classes: self.classes.clone(),
                verify_icrc: s.mode == Mode::Data && s.faults.iter().any(|f| f.ber.is_some()),
                ..s.nic.clone()
            },
            s.seed,
            app,
        )
        .ok_or_else(|| {
            self.src.error_at(
                &FieldPath::root(),
                format!("host `{}` has no address", node.name),
            )
        })?;
        if !s.faults.is_empty() {
            host.nic.watch_faults(self.fault_windows.to_vec());
        }
        // A multi-port NIC routes around failures too (relaying, and its QPs' ports).
        if let Some(r) = reroute.filter(|r| !r.is_empty()) {
            host.nic.schedule_routes(std::mem::take(r));
        }
        Ok(Node::Host(Box::new(host)))
    }

    /// Switch `id` with its buffer, route changes, INT and egress schedulers.
    fn switch(
        &self,
        g: &Graph,
        id: usize,
        table: RouteTable,
        reroute: Option<&mut Vec<(Time, RouteTable)>>,
    ) -> Result<Node, ScenarioError> {
        let s = &self.src.scenario;
        let node = g.node(id);
        let ports = g.ports(id).len();
        let buffer = s
            .switches
            .iter()
            .find(|sw| sw.name == node.name)
            .and_then(|sw| sw.buffer)
            .unwrap_or(s.switch_buffer);
        let mut sw = Switch::new(
            ports,
            table,
            &SwitchConfig { buffer },
            fabemu_fabric::route::switch_salt(s.seed, id),
        );
        if let Some(r) = reroute {
            sw.schedule_routes(std::mem::take(r));
        }
        if s.nic.cc.wants_int() {
            sw.enable_int();
        }
        let own = s.switches.iter().position(|x| x.name == node.name);
        let tree = own
            .and_then(|i| s.switches[i].scheduler.as_ref())
            .or(s.switch_scheduler.as_ref());
        if let Some(t) = tree {
            for port in 0..ports {
                let built = t
                    .build_for::<fabemu_switch::tree_egress::TreeItem>(s.ethernet)
                    .map_err(|e| {
                        let at = match own {
                            Some(i) if s.switches[i].scheduler.is_some() => {
                                FieldPath::root().key("switches").index(i).key("scheduler")
                            }
                            _ => FieldPath::root().key("switch_scheduler"),
                        };
                        self.src.error_at(&at, e.to_string())
                    })?;
                let egress = TreeEgress::new(built).with_classes(self.classes.clone());
                sw.set_scheduler(port, Box::new(egress));
            }
        }
        Ok(Node::Switch(Box::new(sw)))
    }
}

/// A finished run: the world's static parts and the engine's output.
pub struct Finished {
    /// The fabric.
    pub graph: Graph,
    /// The workload.
    pub messages: Vec<MessageSpec>,
    /// The workload's collectives.
    pub collectives: Vec<CollectiveInfo>,
    /// The training workload, if any.
    pub training: Option<TrainingInfo>,
    /// At flow fidelity, where the flow model's assumption failed (empty at packet level).
    pub flow_limits: Vec<crate::flow::FlowLimit>,
    /// Actors, counters and layout.
    pub output: RunOutput<Node>,
}

/// Runs a world on `threads` threads.
pub fn run(
    world: World,
    src: &Source,
    threads: usize,
    progress: Option<&Progress>,
) -> Result<Finished, EngineError> {
    run_observed(world, src, threads, None, None, progress)
}

/// Runs a world on `threads` threads with the engine's capture tap and sampling (see
/// [`crate::observe`]).
pub fn run_observed(
    world: World,
    src: &Source,
    threads: usize,
    capture: Option<CaptureConfig>,
    sample: Option<SampleConfig>,
    progress: Option<&Progress>,
) -> Result<Finished, EngineError> {
    let cfg = EngineConfig {
        threads,
        until: src.scenario.until(),
        overhead: src.scenario.ethernet,
        capture,
        sample,
        faults: world.faults,
    };
    let output = engine::run(world.actors, &world.wiring, &cfg, progress)?;
    Ok(Finished {
        graph: world.graph,
        messages: world.messages,
        collectives: world.collectives,
        training: world.training,
        flow_limits: Vec::new(),
        output,
    })
}
