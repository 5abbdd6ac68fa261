//! The per-rank scheduler: runs a rank's operation DAG over its transport and collective
//! executor.
//!
//! A [`RankScheduler`] holds one rank's nodes, each an [`Action`] with the nodes it waits for.
//! A node becomes *ready* when every parent has finished, and then:
//!
//! - `Compute` nodes (computation, memory loads and stores) queue for their compute stream
//!   and run one at a time on it, the ready node that comes first in the trace first (a
//!   deterministic order, as a GPU's default stream runs kernels). A rank has two: the GPU's,
//!   and the CPU's for host operators (Chakra's `is_cpu_op`), so a CPU operator runs beside a
//!   kernel, not after it (ASTRA-sim keeps one CPU and one GPU operator in flight);
//! - a `Collective` starts its job on the rank's [`CollectiveRunner`] at once: collectives
//!   have their own communication streams and run concurrently with compute and with each
//!   other (as ASTRA-sim issues them); the node finishes when the job has finished *on this
//!   rank*;
//! - a `Send` posts its message at once and finishes when every byte was acknowledged; a
//!   `Recv` finishes when a message from its peer with its tag has arrived (messages that
//!   arrive first wait, matched in order by `(peer, tag)`);
//! - a `Delay` takes its time off every stream.
//!
//! The scheduler is a sans-IO state machine like the executor: the host application hands it
//! events (its timers, its messages, and after every collective event a chance to see which
//! jobs finished) and it acts through the [`Transport`]. Point-to-point messages carry the tag's
//! low 30 bits in an immediate of its [`APP`] prefix; its timers are [`APP`] tokens.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;

use bytes::Bytes;
use fabemu_collectives::executor::CollectiveRunner;
use fabemu_fabric::transport::{AppId, Transport};
use fabemu_fabric::units::Time;

/// A training rank's prefix of its host's timer tokens and immediates (`01`): the argument of
/// a token is the node whose timer it is, that of an immediate a message's tag.
pub const APP: AppId = AppId::new(0b01, 2);

/// The tag bits a point-to-point message carries: tags match modulo 2^30.
pub const TAG_MASK: u64 = (1 << APP.imm_arg_bits()) - 1;

/// The compute stream a node occupies.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Stream {
    /// The GPU's: kernels and memory copies.
    Gpu = 0,
    /// The host's: CPU operators.
    Cpu = 1,
}

/// What a node does, resolved to this rank's resources.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Occupies this compute stream for this long.
    Compute(Time, Stream),
    /// Takes this long, on no stream.
    Delay(Time),
    /// Runs job `Some(j)` of the rank's collective runner; `None`: nothing to move (this rank
    /// alone, or no bytes), finishes at once.
    Collective(Option<usize>),
    /// Posts `bytes` to host `dst` with `tag`.
    Send {
        /// Destination host.
        dst: u32,
        /// Tag (matched modulo 2^30).
        tag: u64,
        /// Bytes.
        bytes: u64,
    },
    /// Waits for a message from host `src` with `tag`.
    Recv {
        /// Source host.
        src: u32,
        /// Tag (matched modulo 2^30).
        tag: u64,
        /// Bytes expected.
        bytes: u64,
    },
}

/// One node to schedule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SchedNode {
    /// The trace's node id (for reports).
    pub id: u64,
    /// The trace's node name (for timelines).
    pub name: String,
    /// What it does.
    pub action: Action,
    /// Indices of the nodes it waits for.
    pub deps: Vec<u32>,
}

/// When a node became ready, started and finished (all `None` if it never became ready).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NodeRecord {
    /// All parents finished.
    pub ready: Option<Time>,
    /// It began to run (a compute node may wait for the stream in between).
    pub start: Option<Time>,
    /// It finished.
    pub end: Option<Time>,
}

/// Runs one rank's nodes (see the module doc).
pub struct RankScheduler {
    /// Shared with the report's facts, which outlive the run beside it.
    nodes: Arc<[SchedNode]>,
    pending: Vec<u32>,
    children: Vec<Vec<u32>>,
    records: Vec<NodeRecord>,
    data_mode: bool,
    /// Ready nodes not started yet, by index.
    work: BTreeSet<u32>,
    /// Per stream ([`Stream`] as index): ready compute nodes waiting for it, by index.
    compute_queue: [BTreeSet<u32>; 2],
    /// Per stream: a node runs on it.
    compute_busy: [bool; 2],
    /// The node of each collective job.
    job_node: BTreeMap<usize, u32>,
    /// Ready receives not matched yet, per `(src, tag bits)`, in the order they became ready.
    recv_waiting: BTreeMap<(u32, u64), VecDeque<u32>>,
    /// Messages not matched yet, per `(src, tag bits)`: their lengths.
    arrived: BTreeMap<(u32, u64), VecDeque<u64>>,
    /// Posted sends not acknowledged yet, per `(dst, tag bits)`.
    sends_out: BTreeMap<(u32, u64), VecDeque<u32>>,
    /// Problems met (a message of the wrong length, a send with no route).
    pub errors: Vec<String>,
}

impl RankScheduler {
    /// A scheduler for `nodes` (dependencies must be acyclic and in range: the trace checks
    /// that); `data_mode` sends real (zero) bytes, as the transport then requires.
    pub fn new(nodes: Vec<SchedNode>, data_mode: bool) -> RankScheduler {
        let n = nodes.len();
        let mut children = vec![Vec::new(); n];
        let mut pending = vec![0u32; n];
        let mut job_node = BTreeMap::new();
        for (i, x) in nodes.iter().enumerate() {
            for &d in &x.deps {
                if let Some(c) = children.get_mut(d as usize) {
                    c.push(i as u32);
                    pending[i] += 1;
                }
            }
            if let Action::Collective(Some(j)) = x.action {
                job_node.insert(j, i as u32);
            }
        }
        RankScheduler {
            records: vec![NodeRecord::default(); n],
            nodes: nodes.into(),
            pending,
            children,
            data_mode,
            work: BTreeSet::new(),
            compute_queue: [BTreeSet::new(), BTreeSet::new()],
            compute_busy: [false; 2],
            job_node,
            recv_waiting: BTreeMap::new(),
            arrived: BTreeMap::new(),
            sends_out: BTreeMap::new(),
            errors: Vec::new(),
        }
    }

    /// The nodes.
    pub fn nodes(&self) -> &[SchedNode] {
        &self.nodes
    }

    /// The nodes, shared (a large model's ranks hold millions of them; a copy would double
    /// them).
    pub fn shared_nodes(&self) -> Arc<[SchedNode]> {
        self.nodes.clone()
    }

    /// What happened to each node, by index.
    pub fn records(&self) -> &[NodeRecord] {
        &self.records
    }

    /// Messages that arrived and no receive took: `(src host, tag bits, bytes)`.
    pub fn unmatched_messages(&self) -> Vec<(u32, u64, u64)> {
        self.arrived
            .iter()
            .flat_map(|(&(src, tag), q)| q.iter().map(move |&len| (src, tag, len)))
            .collect()
    }

    /// Ids of the send nodes to `dst` with `tag` (modulo 2^30), in the order posted.
    pub fn sends_to(&self, dst: u32, tag: u64) -> Vec<u64> {
        sends_to(&self.nodes, &self.records, dst, tag)
    }

    /// Starts the nodes without parents.
    pub fn start(&mut self, coll: &mut CollectiveRunner, api: &mut dyn Transport) {
        let now = api.now();
        for i in 0..self.nodes.len() {
            if self.pending[i] == 0 {
                self.records[i].ready = Some(now);
                self.work.insert(i as u32);
            }
        }
        self.drive(coll, api);
    }

    /// One of the scheduler's timers fired.
    pub fn on_timer(&mut self, token: u64, coll: &mut CollectiveRunner, api: &mut dyn Transport) {
        let Some(i) = APP.token_arg(token).map(|i| i as usize) else {
            return;
        };
        let Some(node) = self.nodes.get(i) else {
            return;
        };
        if let Action::Compute(_, s) = node.action {
            self.compute_busy[s as usize] = false;
        }
        self.complete(i as u32, api.now());
        self.drive(coll, api);
    }

    /// A point-to-point message of the workload arrived from `src`.
    pub fn on_received(
        &mut self,
        src: u32,
        imm: u32,
        len: u64,
        coll: &mut CollectiveRunner,
        api: &mut dyn Transport,
    ) {
        let key = (src, u64::from(imm) & TAG_MASK);
        match self
            .recv_waiting
            .get_mut(&key)
            .and_then(VecDeque::pop_front)
        {
            Some(r) => {
                self.check_len(r, len);
                self.complete(r, api.now());
                self.drive(coll, api);
            }
            None => self.arrived.entry(key).or_default().push_back(len),
        }
    }

    /// A workload message to `dst` was acknowledged.
    pub fn on_send_done(
        &mut self,
        dst: u32,
        tag: u64,
        coll: &mut CollectiveRunner,
        api: &mut dyn Transport,
    ) {
        let key = (dst, tag & TAG_MASK);
        if let Some(s) = self.sends_out.get_mut(&key).and_then(VecDeque::pop_front) {
            self.complete(s, api.now());
            self.drive(coll, api);
        }
    }

    /// Called after the collective runner handled an event: finishes the nodes whose jobs
    /// finished.
    pub fn after_collectives(&mut self, coll: &mut CollectiveRunner, api: &mut dyn Transport) {
        self.drive(coll, api);
    }

    fn check_len(&mut self, r: u32, len: u64) {
        if let Action::Recv { src, tag, bytes } = self.nodes[r as usize].action {
            if bytes != len {
                self.errors.push(format!(
                    "node {}: receive from host {src} tag {tag} expects {bytes} bytes, the \
                     message has {len}",
                    self.nodes[r as usize].id
                ));
            }
        }
    }

    fn complete(&mut self, i: u32, now: Time) {
        let rec = &mut self.records[i as usize];
        if rec.end.is_some() {
            return;
        }
        rec.start.get_or_insert(now);
        rec.end = Some(now);
        for k in 0..self.children[i as usize].len() {
            let c = self.children[i as usize][k] as usize;
            self.pending[c] -= 1;
            if self.pending[c] == 0 {
                self.records[c].ready = Some(now);
                self.work.insert(c as u32);
            }
        }
    }

    /// Starts ready nodes and collects finished jobs until nothing changes.
    fn drive(&mut self, coll: &mut CollectiveRunner, api: &mut dyn Transport) {
        loop {
            for j in coll.take_finished() {
                if let Some(&i) = self.job_node.get(&j) {
                    self.complete(i, api.now());
                }
            }
            let Some(i) = self.work.pop_first() else {
                for s in 0..self.compute_busy.len() {
                    if !self.compute_busy[s] {
                        if let Some(c) = self.compute_queue[s].pop_first() {
                            self.run_compute(c, api);
                        }
                    }
                }
                if self.work.is_empty() {
                    return;
                }
                continue;
            };
            self.begin(i, coll, api);
        }
    }

    fn run_compute(&mut self, i: u32, api: &mut dyn Transport) {
        let Action::Compute(d, s) = self.nodes[i as usize].action else {
            return;
        };
        let now = api.now();
        self.compute_busy[s as usize] = true;
        self.records[i as usize].start = Some(now);
        api.set_timer(now.add(d), APP.token(u64::from(i)));
    }

    fn begin(&mut self, i: u32, coll: &mut CollectiveRunner, api: &mut dyn Transport) {
        let now = api.now();
        match self.nodes[i as usize].action {
            Action::Compute(_, s) => {
                self.compute_queue[s as usize].insert(i);
            }
            Action::Delay(d) => {
                self.records[i as usize].start = Some(now);
                api.set_timer(now.add(d), APP.token(u64::from(i)));
            }
            Action::Collective(None) => self.complete(i, now),
            Action::Collective(Some(j)) => {
                self.records[i as usize].start = Some(now);
                coll.start_job(j, api);
            }
            Action::Send { dst, tag, bytes } => {
                self.records[i as usize].start = Some(now);
                let imm = APP.imm((tag & TAG_MASK) as u32);
                let data = self
                    .data_mode
                    .then(|| Bytes::from(vec![0u8; bytes as usize]));
                if api.post_send(dst, u64::from(imm), bytes, data) {
                    self.sends_out
                        .entry((dst, tag & TAG_MASK))
                        .or_default()
                        .push_back(i);
                } else {
                    self.errors.push(format!(
                        "node {}: no route to host {dst}",
                        self.nodes[i as usize].id
                    ));
                }
            }
            Action::Recv { src, tag, .. } => {
                self.records[i as usize].start = Some(now);
                let key = (src, tag & TAG_MASK);
                match self.arrived.get_mut(&key).and_then(VecDeque::pop_front) {
                    Some(len) => {
                        self.check_len(i, len);
                        self.complete(i, now);
                    }
                    None => self.recv_waiting.entry(key).or_default().push_back(i),
                }
            }
        }
    }

    /// Nodes that never finished, with what each waits for.
    pub fn waiting(&self) -> Vec<(u64, String)> {
        waiting(&self.nodes, &self.records)
    }

    /// Nodes that never finished (blocked ones included).
    pub fn unfinished(&self) -> usize {
        self.records.iter().filter(|r| r.end.is_none()).count()
    }
}

/// Of a rank's `nodes` and their `records`: ids of the send nodes to `dst` with `tag` (modulo
/// 2^30), in the order posted.
pub fn sends_to(nodes: &[SchedNode], records: &[NodeRecord], dst: u32, tag: u64) -> Vec<u64> {
    let mut v: Vec<(Time, u64)> = nodes
        .iter()
        .zip(records)
        .filter_map(|(n, r)| match n.action {
            Action::Send { dst: d, tag: t, .. } if d == dst && t & TAG_MASK == tag => {
                r.start.map(|s| (s, n.id))
            }
            _ => None,
        })
        .collect();
    v.sort();
    v.into_iter().map(|(_, id)| id).collect()
}

/// Of a rank's `nodes` and their `records`: nodes that never finished, with what each waits
/// for.
pub fn waiting(nodes: &[SchedNode], records: &[NodeRecord]) -> Vec<(u64, String)> {
    let mut out = Vec::new();
    for (n, r) in nodes.iter().zip(records) {
        if r.end.is_some() {
            continue;
        }
        let why = match (&n.action, r.ready, r.start) {
            // Only the frontier: a node whose parents never finished is blocked by them.
            (_, None, _) => continue,
            (Action::Recv { src, tag, .. }, _, _) => {
                format!("receive from host {src} tag {tag}: no message came")
            }
            (Action::Send { dst, tag, .. }, _, _) => {
                format!("send to host {dst} tag {tag}: not acknowledged")
            }
            (Action::Collective(_), _, _) => "collective not finished".to_string(),
            (Action::Compute(..), _, None) => "compute waiting for the stream".to_string(),
            (Action::Compute(..) | Action::Delay(_), _, _) => "running".to_string(),
        };
        out.push((n.id, why));
    }
    out
}
