//! [`PifoTree`]: a tree of PIFOs with scheduling and shaping transactions (Sivaraman et al.,
//! SIGCOMM 2016, §2–3).
//!
//! **Enqueue.** The classifier picks a leaf. The item is stored once (a slot in a slab); the
//! leaf's PIFO receives a reference to the slot, ranked by the leaf's scheduling transaction;
//! then every ancestor's PIFO receives a reference to the child on the path, ranked by the
//! ancestor's transaction. The references in an inner node do not name packets: a reference
//! to child `c` means "take the next element from `c`", and `c` decides which one by its own
//! order — which is how a flow's packets stay in order under a root that reorders classes.
//!
//! **Shaping.** A non-root node with a shaping transaction computes a release time for each
//! element passing up through it; the reference bound for the parent waits in the node's
//! *shaping queue* (ordered by release time, FIFO among equal times) and enters the parent's
//! PIFO — the parent's scheduling transaction running with `now` = the release time — only
//! then, continuing up the path from there. Due releases are applied (in (time, node) order)
//! at the start of every enqueue and dequeue; [`PifoTree::next_release`] tells the switch when
//! to arm a timer.
//!
//! **Dequeue** walks from the root to a leaf, popping the head at each node.
//!
//! **PFC-aware dequeue: masking by partition.** A paused priority must neither be sent nor
//! block the others. Each node's PIFO is kept as a set of *partitions* that together form one
//! exact PIFO: an inner node has one partition per child (holding its references to that
//! child), a leaf one per priority 0..=7. Every element carries the node's arrival number, and
//! a pop takes the smallest (rank, arrival) among the partitions' heads — exactly the head of
//! the single PIFO they form. Under pause, a leaf is *eligible* if a partition of an unpaused
//! priority is non-empty, an inner node if a partition toward an eligible child is non-empty,
//! and the walk considers only eligible partitions: it returns the element an unpaused-only
//! PIFO would, skipping (not removing) paused ones. With nothing paused it is the plain tree.
//! Per-child partitions also keep the reference counts consistent whichever partition is
//! chosen (a reference to `c` can only be popped while `c` holds an element).
//!
//! **Priority inversion** (counted per node): a pop from a node's PIFO of an element whose rank
//! is strictly greater than the smallest rank then waiting in the same node's PIFO (over all
//! partitions; elements still in a shaping queue are not in the PIFO). Exact PIFOs invert only
//! when PFC masking skips a smaller rank; approximate PIFOs (SP-PIFO, AIFO, a coarse
//! [`BucketPifo`](super::BucketPifo) granularity, whose head within a bucket is the earliest
//! arrival) would show theirs here.

use std::fmt;

use fabemu_fabric::units::Time;

use super::classifier::Classifier;
use super::heap::HeapPifo;
use super::transactions::{SchedulingTransaction, ShapingTransaction, TxnCtx};
use super::{BucketConfig, BucketPifo, OverflowPolicy, PacketInfo, Pifo};

/// The number of PFC priorities.
const PRIORITIES: usize = 8;
/// Most children of one node (a partition bitmask is one `u64`).
pub const MAX_CHILDREN: usize = 64;
const NIL: u32 = u32::MAX;

/// A node of a [`PifoTree`]: its index in the order nodes were added, the root being 0.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NodeId(pub u32);

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "node {}", self.0)
    }
}

/// Which PIFO implementation a node uses.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PifoKind {
    /// [`HeapPifo`]: any rank, O(log n).
    #[default]
    Heap,
    /// [`BucketPifo`] with this window: O(1) for ranks within the window of the head. Each
    /// partition (one per child; one per priority in use at a leaf) has its own window of
    /// 8 bytes per bucket, so keep windows modest on wide nodes.
    Bucket(BucketConfig),
}

/// How to build one node: a name (for reports), its transactions, PIFO kind and, for a leaf,
/// its capacity.
pub struct NodeSpec {
    name: String,
    scheduling: Box<dyn SchedulingTransaction>,
    shaping: Option<Box<dyn ShapingTransaction>>,
    kind: PifoKind,
    capacity: Option<(usize, OverflowPolicy)>,
}

impl NodeSpec {
    /// A node called `name` ranking with `scheduling`, unshaped, on a [`HeapPifo`], unbounded.
    pub fn new(name: impl Into<String>, scheduling: impl SchedulingTransaction + 'static) -> Self {
        Self::boxed(name, Box::new(scheduling))
    }
    /// [`NodeSpec::new`] with an already boxed transaction (e.g. built from configuration).
    pub fn boxed(name: impl Into<String>, scheduling: Box<dyn SchedulingTransaction>) -> Self {
        NodeSpec {
            name: name.into(),
            scheduling,
            shaping: None,
            kind: PifoKind::Heap,
            capacity: None,
        }
    }
    /// Adds a shaping transaction (not allowed at the root, which has no parent).
    pub fn shaping(self, shaping: impl ShapingTransaction + 'static) -> Self {
        self.shaping_boxed(Box::new(shaping))
    }
    /// [`NodeSpec::shaping`] with an already boxed transaction.
    pub fn shaping_boxed(mut self, shaping: Box<dyn ShapingTransaction>) -> Self {
        self.shaping = Some(shaping);
        self
    }
    /// Chooses the PIFO implementation.
    pub fn pifo(mut self, kind: PifoKind) -> Self {
        self.kind = kind;
        self
    }
    /// Bounds a leaf to `capacity` packets with `policy` (leaves only: an inner node holds one
    /// reference per element below it and needs no bound of its own).
    pub fn capacity(mut self, capacity: usize, policy: OverflowPolicy) -> Self {
        self.capacity = Some((capacity, policy));
        self
    }
}

impl fmt::Debug for NodeSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NodeSpec")
            .field("name", &self.name)
            .field("shaped", &self.shaping.is_some())
            .field("kind", &self.kind)
            .field("capacity", &self.capacity)
            .finish_non_exhaustive()
    }
}

/// A tree that cannot be built.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TreeError {
    /// A parent that was never added.
    #[error("{0} does not exist")]
    UnknownNode(NodeId),
    /// More children than a node supports.
    #[error("{node} would have more than {max} children")]
    TooManyChildren {
        /// The parent.
        node: NodeId,
        /// The limit.
        max: usize,
    },
    /// A shaping transaction on the root (it has no parent to release to).
    #[error("the root cannot have a shaping transaction")]
    ShapingAtRoot,
    /// A capacity on a node with children.
    #[error("{0} has children; only leaves take a capacity")]
    CapacityOnInnerNode(NodeId),
}

/// Why an item was not (or not alone) queued. Every variant gives an item back.
#[derive(Debug, thiserror::Error)]
pub enum EnqueueError<T> {
    /// The classifier chose no leaf.
    #[error("the classifier chose no leaf")]
    NoLeaf(T),
    /// The classifier chose a node that does not exist or has children.
    #[error("the classifier chose {0}, which is not a leaf")]
    NotALeaf(NodeId, T),
    /// The packet's priority is not a PFC priority.
    #[error("priority {priority} is not a PFC priority (0..=7)")]
    BadPriority {
        /// The priority.
        priority: u8,
        /// The item, not queued.
        item: T,
    },
    /// The leaf was full and the arriving item was refused.
    #[error("{leaf} full: arriving packet dropped")]
    Dropped {
        /// The leaf.
        leaf: NodeId,
        /// The arriving item, not queued.
        item: T,
    },
    /// The leaf was full ([`OverflowPolicy::EvictLargest`]): the arriving item was queued and
    /// this one, the leaf's last to leave, was pushed out.
    #[error("{leaf} full: a queued packet was evicted")]
    Evicted {
        /// The leaf.
        leaf: NodeId,
        /// The evicted item.
        item: T,
    },
}

impl<T> EnqueueError<T> {
    /// The item given back.
    pub fn into_item(self) -> T {
        match self {
            EnqueueError::NoLeaf(item)
            | EnqueueError::NotALeaf(_, item)
            | EnqueueError::BadPriority { item, .. }
            | EnqueueError::Dropped { item, .. }
            | EnqueueError::Evicted { item, .. } => item,
        }
    }
}

/// Counters of one node.
///
/// "Through" counts credit every node on the path of a dequeued packet, so an inner node's
/// figures are its subtree's: shares of a hierarchical scheduler read directly off them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeStats {
    /// Elements pushed into this node's PIFO (packets at a leaf, references above; a reference
    /// held by shaping counts when released).
    pub enqueued: u64,
    /// Packets dequeued through this node.
    pub dequeued_packets: u64,
    /// Frame bytes dequeued through this node.
    pub dequeued_bytes: u64,
    /// Sum over packets dequeued through this node of (dequeue time - enqueue time), ps.
    pub queueing_delay_sum_ps: u64,
    /// Packets refused by this leaf (full).
    pub dropped_packets: u64,
    /// Bytes of packets refused by this leaf.
    pub dropped_bytes: u64,
    /// Packets evicted from this leaf ([`OverflowPolicy::EvictLargest`]).
    pub evicted_packets: u64,
    /// Elements this node's shaping transaction held back (release time in the future).
    pub shaped: u64,
    /// Pops from this node's PIFO of an element with a rank strictly greater than the smallest
    /// rank then waiting in it (see the docs of the private `pifo::tree` module, in the source).
    pub priority_inversions: u64,
}

/// A node's PIFO element: the node-wide arrival number (to merge partitions exactly) and, at a
/// leaf, the item's slot.
#[derive(Clone, Copy, Debug)]
struct Elem {
    seq: u64,
    slot: u32,
}

enum Part {
    Heap(HeapPifo<Elem>),
    Bucket(BucketPifo<Elem>),
}

impl Part {
    fn new(kind: PifoKind) -> Part {
        match kind {
            PifoKind::Heap => Part::Heap(HeapPifo::unbounded()),
            PifoKind::Bucket(cfg) => Part::Bucket(BucketPifo::with_config(
                usize::MAX,
                OverflowPolicy::DropArriving,
                cfg,
            )),
        }
    }
    #[inline]
    fn pifo(&mut self) -> &mut dyn Pifo<Elem> {
        match self {
            Part::Heap(p) => p,
            Part::Bucket(p) => p,
        }
    }
    #[inline]
    fn head(&self) -> Option<(u64, u64)> {
        match self {
            Part::Heap(p) => p.peek(),
            Part::Bucket(p) => p.peek(),
        }
        .map(|(r, e)| (r, e.seq))
    }
    #[inline]
    fn last(&self) -> Option<(u64, u64)> {
        match self {
            Part::Heap(p) => p.peek_largest(),
            Part::Bucket(p) => p.peek_largest(),
        }
        .map(|(r, e)| (r, e.seq))
    }
}

struct Node {
    name: String,
    parent: u32,
    /// Position among the parent's children.
    pos: u32,
    children: Vec<u32>,
    sched: Box<dyn SchedulingTransaction>,
    shaping: Option<Box<dyn ShapingTransaction>>,
    /// Shaping queue: references bound for the parent, by release time (ps).
    shaped: HeapPifo<PacketInfo>,
    kind: PifoKind,
    /// Inner node: one per child. Leaf: one per priority, made on first use.
    parts: Vec<Option<Part>>,
    /// Bit i: partition i non-empty.
    nonempty: u64,
    len: usize,
    seq: u64,
    capacity: usize,
    policy: OverflowPolicy,
    stats: NodeStats,
}

impl Node {
    fn is_leaf(&self) -> bool {
        self.children.is_empty()
    }

    /// Pushes into partition `i` (making it if needed).
    fn push(&mut self, i: usize, rank: u64, slot: u32) {
        let elem = Elem {
            seq: self.seq,
            slot,
        };
        self.seq += 1;
        let kind = self.kind;
        if let Some(p) = self.parts.get_mut(i) {
            // Partitions are unbounded; the tree bounds its total below u32::MAX, under any
            // partition's own limit, so this push cannot be refused.
            let _ = p
                .get_or_insert_with(|| Part::new(kind))
                .pifo()
                .push(rank, elem);
            self.nonempty |= 1 << i;
            self.len += 1;
            self.stats.enqueued += 1;
        }
    }

    /// The partition to pop among those allowed by `allowed`, and the smallest rank of all.
    #[inline]
    fn choose(&self, allowed: u64) -> (Option<usize>, Option<u64>) {
        let mut best: Option<(u64, u64, usize)> = None;
        let mut min_rank: Option<u64> = None;
        let mut m = self.nonempty;
        while m != 0 {
            let i = m.trailing_zeros() as usize;
            m &= m - 1;
            let Some((rank, seq)) = self.parts[i].as_ref().and_then(Part::head) else {
                continue;
            };
            min_rank = Some(min_rank.map_or(rank, |r| r.min(rank)));
            if allowed & (1 << i) != 0 && best.is_none_or(|(r, s, _)| (rank, seq) < (r, s)) {
                best = Some((rank, seq, i));
            }
        }
        (best.map(|b| b.2), min_rank)
    }

    /// Pops the head of partition `i`.
    fn pop(&mut self, i: usize, min_rank: Option<u64>, now: Time) -> Option<Elem> {
        let part = self.parts.get_mut(i)?.as_mut()?.pifo();
        let (rank, elem) = part.pop()?;
        if part.is_empty() {
            self.nonempty &= !(1 << i);
        }
        self.len -= 1;
        if min_rank.is_some_and(|m| m < rank) {
            self.stats.priority_inversions += 1;
        }
        self.sched.on_dequeue(rank, now);
        Some(elem)
    }
}

struct Held<T> {
    item: T,
    len: u32,
    enqueued: Time,
}

/// Builds a [`PifoTree`] node by node, parents before children.
pub struct PifoTreeBuilder {
    nodes: Vec<(u32, NodeSpec, Vec<u32>)>,
}

impl fmt::Debug for PifoTreeBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.nodes.iter().map(|(p, s, _)| (p, s)))
            .finish()
    }
}

impl PifoTreeBuilder {
    /// A tree whose root is `root` ([`NodeId`] 0).
    pub fn new(root: NodeSpec) -> Self {
        PifoTreeBuilder {
            nodes: vec![(NIL, root, Vec::new())],
        }
    }

    /// The root's id.
    pub fn root(&self) -> NodeId {
        NodeId(0)
    }

    /// Adds a child of `parent`; children are numbered (for [`TxnCtx::child`] and
    /// [`ClassBy::Child`](super::transactions::ClassBy::Child)) in the order they are added.
    pub fn add(&mut self, parent: NodeId, spec: NodeSpec) -> Result<NodeId, TreeError> {
        let id = self.nodes.len() as u32;
        let p = self
            .nodes
            .get_mut(parent.0 as usize)
            .ok_or(TreeError::UnknownNode(parent))?;
        if p.2.len() >= MAX_CHILDREN {
            return Err(TreeError::TooManyChildren {
                node: parent,
                max: MAX_CHILDREN,
            });
        }
        p.2.push(id);
        self.nodes.push((parent.0, spec, Vec::new()));
        Ok(NodeId(id))
    }

    /// The tree, with `classifier` choosing leaves.
    pub fn build<T>(self, classifier: impl Classifier + 'static) -> Result<PifoTree<T>, TreeError> {
        self.build_boxed(Box::new(classifier))
    }

    /// [`PifoTreeBuilder::build`] with an already boxed classifier.
    pub fn build_boxed<T>(self, classifier: Box<dyn Classifier>) -> Result<PifoTree<T>, TreeError> {
        if self.nodes[0].1.shaping.is_some() {
            return Err(TreeError::ShapingAtRoot);
        }
        let mut nodes = Vec::with_capacity(self.nodes.len());
        let mut positions = vec![0u32; self.nodes.len()];
        for (_, _, children) in &self.nodes {
            for (pos, &c) in children.iter().enumerate() {
                positions[c as usize] = pos as u32;
            }
        }
        for (i, (parent, spec, children)) in self.nodes.into_iter().enumerate() {
            let leaf = children.is_empty();
            if !leaf && spec.capacity.is_some() {
                return Err(TreeError::CapacityOnInnerNode(NodeId(i as u32)));
            }
            let (capacity, policy) = spec
                .capacity
                .unwrap_or((usize::MAX, OverflowPolicy::DropArriving));
            let parts = if leaf {
                (0..PRIORITIES).map(|_| None).collect()
            } else {
                children
                    .iter()
                    .map(|_| Some(Part::new(spec.kind)))
                    .collect()
            };
            nodes.push(Node {
                name: spec.name,
                parent,
                pos: positions[i],
                children,
                sched: spec.scheduling,
                shaping: spec.shaping,
                shaped: HeapPifo::unbounded(),
                kind: spec.kind,
                parts,
                nonempty: 0,
                len: 0,
                seq: 0,
                capacity,
                policy,
                stats: NodeStats::default(),
            });
        }
        let shaped_nodes = (0..nodes.len() as u32)
            .filter(|&i| nodes[i as usize].shaping.is_some())
            .collect();
        let n = nodes.len();
        Ok(PifoTree {
            nodes,
            classifier,
            items: Vec::new(),
            free: Vec::new(),
            len: 0,
            shaped_nodes,
            eligible: vec![false; n],
            path: Vec::with_capacity(n),
        })
    }
}

/// A PIFO tree over items of type `T` (the switch queues `Packet`s): see the docs of the private
/// `pifo::tree` module (in the source) for enqueue, shaping, PFC-aware dequeue and the counters.
///
/// Storage (item slab, node PIFOs, scratch space) is reused, so once the tree has reached its
/// working size, enqueue and dequeue allocate nothing (transactions keyed by flow may, for a
/// flow's first packet).
pub struct PifoTree<T> {
    nodes: Vec<Node>,
    classifier: Box<dyn Classifier>,
    items: Vec<Option<Held<T>>>,
    free: Vec<u32>,
    len: usize,
    shaped_nodes: Vec<u32>,
    /// Scratch: eligibility per node under the current pause mask.
    eligible: Vec<bool>,
    /// Scratch: the nodes of the current dequeue's path.
    path: Vec<u32>,
}

impl<T> fmt::Debug for PifoTree<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PifoTree")
            .field(
                "nodes",
                &self.nodes.iter().map(|n| &n.name).collect::<Vec<_>>(),
            )
            .field("len", &self.len)
            .finish_non_exhaustive()
    }
}

impl<T> PifoTree<T> {
    /// Queues `item` at time `now` (the tree sets `info.now`). Releases due shaped elements
    /// first, so transactions always see time move forward.
    ///
    /// On a full leaf with [`OverflowPolicy::EvictLargest`] the leaf's scheduling transaction
    /// has run for the arriving item (its rank decides), and the arriving item takes over the
    /// evicted one's references in the ancestors (their count stays one per element; the
    /// ancestors' transactions do not run).
    pub fn enqueue(&mut self, now: Time, info: PacketInfo, item: T) -> Result<(), EnqueueError<T>> {
        self.release_due(now);
        let mut info = info;
        info.now = now;
        let Some(leaf) = self.classifier.classify(&info) else {
            return Err(EnqueueError::NoLeaf(item));
        };
        let li = leaf.0 as usize;
        if self.nodes.get(li).is_none_or(|n| !n.is_leaf()) {
            return Err(EnqueueError::NotALeaf(leaf, item));
        }
        let class = usize::from(info.priority);
        if class >= PRIORITIES {
            return Err(EnqueueError::BadPriority {
                priority: info.priority,
                item,
            });
        }
        let node = &mut self.nodes[li];
        let full = node.len >= node.capacity || self.len >= NIL as usize - 1;
        if full && node.policy == OverflowPolicy::DropArriving {
            node.stats.dropped_packets += 1;
            node.stats.dropped_bytes += u64::from(info.len);
            return Err(EnqueueError::Dropped { leaf, item });
        }
        let rank = node.sched.rank(&info, &TxnCtx { child: None });
        if full {
            return self.evict_for(leaf, class, rank, &info, item, now);
        }
        let slot = self.store(item, info.len, now);
        self.nodes[li].push(class, rank, slot);
        self.climb(li, info, None, true);
        Ok(())
    }

    /// [`OverflowPolicy::EvictLargest`] on a full leaf.
    fn evict_for(
        &mut self,
        leaf: NodeId,
        class: usize,
        rank: u64,
        info: &PacketInfo,
        item: T,
        now: Time,
    ) -> Result<(), EnqueueError<T>> {
        let li = leaf.0 as usize;
        let node = &mut self.nodes[li];
        let mut last: Option<(u64, u64, usize)> = None;
        let mut m = node.nonempty;
        while m != 0 {
            let i = m.trailing_zeros() as usize;
            m &= m - 1;
            if let Some((r, s)) = node.parts[i].as_ref().and_then(Part::last) {
                if last.is_none_or(|(lr, ls, _)| (r, s) > (lr, ls)) {
                    last = Some((r, s, i));
                }
            }
        }
        let victim = match last {
            Some((lr, _, i)) if rank < lr => i,
            _ => {
                node.stats.dropped_packets += 1;
                node.stats.dropped_bytes += u64::from(info.len);
                return Err(EnqueueError::Dropped { leaf, item });
            }
        };
        let out = node.parts[victim]
            .as_mut()
            .and_then(|p| p.pifo().pop_largest());
        let Some((_, e)) = out else {
            return Err(EnqueueError::Dropped { leaf, item });
        };
        if node.parts[victim]
            .as_ref()
            .is_some_and(|p| p.head().is_none())
        {
            node.nonempty &= !(1 << victim);
        }
        node.len -= 1;
        node.stats.evicted_packets += 1;
        let evicted = self.take(e.slot);
        let slot = self.store(item, info.len, now);
        self.nodes[li].push(class, rank, slot);
        match evicted {
            Some(h) => Err(EnqueueError::Evicted { leaf, item: h.item }),
            None => Ok(()),
        }
    }

    fn store(&mut self, item: T, len: u32, now: Time) -> u32 {
        let held = Some(Held {
            item,
            len,
            enqueued: now,
        });
        self.len += 1;
        match self.free.pop() {
            Some(s) => {
                self.items[s as usize] = held;
                s
            }
            None => {
                self.items.push(held);
                (self.items.len() - 1) as u32
            }
        }
    }

    fn take(&mut self, slot: u32) -> Option<Held<T>> {
        let h = self.items.get_mut(slot as usize)?.take()?;
        self.free.push(slot);
        self.len -= 1;
        Some(h)
    }

    /// Carries an element up from node `from`: through `from`'s shaping (unless `shape` is
    /// false: the element was just released by it), then into each ancestor's PIFO, stopping
    /// at a shaping node that holds it back. `came_from` is the child of `from` it came from.
    fn climb(&mut self, from: usize, info: PacketInfo, came_from: Option<usize>, shape: bool) {
        let mut n = from;
        let mut came_from = came_from;
        let mut shape = shape;
        loop {
            let parent = self.nodes[n].parent;
            if parent == NIL {
                return;
            }
            let node = &mut self.nodes[n];
            if shape {
                if let Some(sh) = node.shaping.as_mut() {
                    let t = sh.release_time(&info, &TxnCtx { child: came_from });
                    if t > info.now {
                        node.stats.shaped += 1;
                        let _ = node.shaped.push(t.ps(), info);
                        return;
                    }
                }
            }
            shape = true;
            let pos = node.pos as usize;
            let p = &mut self.nodes[parent as usize];
            let rank = p.sched.rank(&info, &TxnCtx { child: Some(pos) });
            p.push(pos, rank, NIL);
            came_from = Some(pos);
            n = parent as usize;
        }
    }

    /// Applies every shaping release due at or before `now`, in (release time, node) order.
    pub fn release_due(&mut self, now: Time) {
        loop {
            let mut next: Option<(u64, usize)> = None;
            for &i in &self.shaped_nodes {
                if let Some(t) = self.nodes[i as usize].shaped.peek_rank() {
                    if next.is_none_or(|(nt, _)| t < nt) {
                        next = Some((t, i as usize));
                    }
                }
            }
            let Some((t, i)) = next else { return };
            if t > now.ps() {
                return;
            }
            let Some((_, mut info)) = self.nodes[i].shaped.pop() else {
                return;
            };
            info.now = Time(t);
            self.climb(i, info, None, false);
        }
    }

    /// When shaping next releases an element: the earliest pending release time, or `now`
    /// if one is already due (call [`dequeue`](PifoTree::dequeue)); `None` if nothing is held
    /// back. Arm a timer for it when a dequeue found nothing to send.
    pub fn next_release(&self, now: Time) -> Option<Time> {
        self.shaped_nodes
            .iter()
            .filter_map(|&i| self.nodes[i as usize].shaped.peek_rank())
            .min()
            .map(|t| Time(t).max(now))
    }

    /// The next item to send at `now`, never one of a priority whose bit is set in `paused`
    /// (bit p = PFC priority p paused), and without letting paused priorities block the others.
    pub fn dequeue(&mut self, now: Time, paused: u8) -> Option<T> {
        self.release_due(now);
        if self.len == 0 {
            return None;
        }
        if paused != 0 && !self.mark_eligible(paused) {
            return None;
        }
        self.path.clear();
        let mut n = 0usize;
        let slot = loop {
            let node = &self.nodes[n];
            let allowed = if paused == 0 {
                u64::MAX
            } else if node.is_leaf() {
                u64::from(!paused)
            } else {
                node.children
                    .iter()
                    .enumerate()
                    .filter(|(_, &c)| self.eligible[c as usize])
                    .fold(0u64, |m, (i, _)| m | 1 << i)
            };
            let (choice, min_rank) = node.choose(allowed);
            let i = choice?;
            let elem = self.nodes[n].pop(i, min_rank, now)?;
            self.path.push(n as u32);
            let node = &self.nodes[n];
            if node.is_leaf() {
                break elem.slot;
            }
            n = node.children[i] as usize;
        };
        let held = self.take(slot)?;
        let delay = now.saturating_sub(held.enqueued).ps();
        for &p in &self.path {
            let s = &mut self.nodes[p as usize].stats;
            s.dequeued_packets += 1;
            s.dequeued_bytes += u64::from(held.len);
            s.queueing_delay_sum_ps += delay;
        }
        Some(held.item)
    }

    /// Computes which nodes can serve an element under `paused`; returns the root's answer.
    fn mark_eligible(&mut self, paused: u8) -> bool {
        // Children have larger ids than their parents: one backward pass.
        for i in (0..self.nodes.len()).rev() {
            let node = &self.nodes[i];
            self.eligible[i] = if node.is_leaf() {
                node.nonempty & u64::from(!paused) != 0
            } else {
                node.children
                    .iter()
                    .enumerate()
                    .any(|(k, &c)| node.nonempty & (1 << k) != 0 && self.eligible[c as usize])
            };
        }
        self.eligible[0]
    }

    /// Items held (including those whose way up is held back by shaping).
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when no item is held.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Elements in `node`'s PIFO (packets at a leaf, references above); 0 for an unknown node.
    pub fn node_len(&self, node: NodeId) -> usize {
        self.nodes.get(node.0 as usize).map_or(0, |n| n.len)
    }

    /// `node`'s counters.
    pub fn stats(&self, node: NodeId) -> Option<&NodeStats> {
        self.nodes.get(node.0 as usize).map(|n| &n.stats)
    }

    /// Every node's id, name and counters, root first.
    pub fn all_stats(&self) -> impl Iterator<Item = (NodeId, &str, &NodeStats)> {
        self.nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (NodeId(i as u32), n.name.as_str(), &n.stats))
    }

    /// Total priority inversions over all nodes.
    pub fn priority_inversions(&self) -> u64 {
        self.nodes.iter().map(|n| n.stats.priority_inversions).sum()
    }

    /// The leaves' ids.
    pub fn leaves(&self) -> impl Iterator<Item = NodeId> + '_ {
        (0..self.nodes.len() as u32)
            .filter(|&i| self.nodes[i as usize].is_leaf())
            .map(NodeId)
    }

    /// A node's name.
    pub fn name(&self, node: NodeId) -> Option<&str> {
        self.nodes.get(node.0 as usize).map(|n| n.name.as_str())
    }
}
