//! A PIFO tree as an egress port's scheduler.
//!
//! The switch hands frames over with their priority and ingress port; this adapter reads what
//! transactions may use from the frame's bytes and its cached metadata ([`PacketInfo`]), once,
//! at enqueue, and keeps each frame with its arrival time, priority, ingress and flow hash, so
//! nothing is parsed again when it leaves:
//!
//! | field | from |
//! |---|---|
//! | `len` | the frame length (headers + payload + ICRC) |
//! | `flow` | a hash of the IPv4 addresses and UDP source port (the RoCEv2 5-tuple) |
//! | `dscp`, `priority` | the IPv4 DSCP; the priority the switch gives at enqueue (its DSCP map: default DSCP >> 3, the class selector, 0..=7) — the same priorities the PFC pause mask uses |
//! | `qp` | the BTH destination QP |
//! | `message_size`, `remaining_bytes` | written by the sending NIC (RDMA message size; bytes left, this packet included) |
//! | `attained_bytes` | `message_size - remaining_bytes` (bytes of the message already sent) |
//! | `deadline`, `slack`, `rank` | the traffic class named by the destination QP number ([`qpn_class`]), looked up in the run's [`ClassTable`] given with [`TreeEgress::with_classes`]; zero for the default class (EDF, LSTF and `rank` then act as FIFO among its packets) |
//! | `arrival` | the time the frame reached the egress queue |
//!
//! **Flows stay in order.** RoCE's reliable connections deliver in PSN order and treat a gap as
//! a loss (go-back-N), so a scheduler must never reorder packets of one flow. Size-based ranks
//! would: within a message the remaining bytes shrink packet by packet (SRPT would send a
//! message's tail before its head), and a QP's next message may be smaller than the one still
//! queued, or carry an earlier deadline or a smaller explicit rank. So while a flow has packets
//! queued, its packets' `remaining_bytes`, `message_size`, `attained_bytes`, `deadline`,
//! `rank` and latest departure (arrival + `slack`) never go below those of its previous packet:
//! ranks computed from them are non-decreasing within the flow, and equal ranks leave in
//! arrival order. pFabric does the same by always sending a flow's earliest packet. When the flow's
//! queue empties, the floor is forgotten.

use fabemu_fabric::host::qpn_class;
use fabemu_fabric::packet::Packet;
use fabemu_fabric::route::flow_hash;
use fabemu_fabric::transport::ClassTable;
use fabemu_fabric::units::Time;
use fabemu_fabric::wire;
use rustc_hash::FxHashMap;

use crate::egress::{Arrival, ClassReport, Dequeued, EgressScheduler};
use crate::pifo::{PacketInfo, PifoTree};
use crate::priority::DscpMap;

/// What a [`TreeEgress`]'s tree holds per frame: the frame and what the switch and the
/// classifier learnt about it at enqueue.
#[derive(Debug)]
pub struct TreeItem {
    packet: Packet,
    at: Time,
    flow: u64,
    ingress: u32,
    priority: u8,
}

impl TreeItem {
    /// The queued frame.
    pub fn packet(&self) -> &Packet {
        &self.packet
    }
}

/// An egress scheduler driven by a PIFO tree.
pub struct TreeEgress {
    tree: PifoTree<TreeItem>,
    flows: FxHashMap<u64, FlowFloor>,
    classes: ClassTable,
}

/// A flow's queued packets and the rank facts its last queued packet carried.
#[derive(Clone, Copy, Debug, Default)]
struct FlowFloor {
    queued: u32,
    remaining: u64,
    size: u64,
    attained: u64,
    deadline: Time,
    /// Arrival + slack: the latest departure LSTF ranks by.
    latest: Time,
    rank: u64,
}

impl TreeEgress {
    /// Wraps a built tree (every packet in the default class).
    pub fn new(tree: PifoTree<TreeItem>) -> TreeEgress {
        TreeEgress {
            tree,
            flows: FxHashMap::default(),
            classes: ClassTable::default(),
        }
    }

    /// The run's traffic classes, whose deadline, slack and rank the transactions see.
    pub fn with_classes(mut self, classes: ClassTable) -> TreeEgress {
        self.classes = classes;
        self
    }

    fn release_flow(&mut self, flow: u64) {
        if let Some(f) = self.flows.get_mut(&flow) {
            f.queued = f.queued.saturating_sub(1);
            if f.queued == 0 {
                self.flows.remove(&flow);
            }
        }
    }

    /// The tree (for its counters).
    pub fn tree(&self) -> &PifoTree<TreeItem> {
        &self.tree
    }
}

/// What a PIFO tree's transactions see of `pkt`, arriving at `now` (priority = DSCP >> 3).
pub fn packet_info(pkt: &Packet, now: Time) -> PacketInfo {
    let dscp = wire::dscp(pkt.header()).unwrap_or(0);
    let prio = DscpMap::CLASS_SELECTOR.priority(dscp);
    packet_info_with(pkt, now, prio, &ClassTable::default())
}

/// [`packet_info`] with the priority the switch already knows and the run's classes.
fn packet_info_with(pkt: &Packet, now: Time, priority: u8, classes: &ClassTable) -> PacketInfo {
    let h = pkt.header();
    let flow = match wire::peek_roce_flow(h) {
        (_, Some(f)) => flow_hash(f.src, f.dst, f.udp_src_port, 0),
        _ => 0,
    };
    let dscp = wire::dscp(h).unwrap_or(0);
    let qp = wire::bth_view(h).map_or(0, |b| b.get_dest_qp());
    let class = classes.get(qpn_class(qp));
    let size = u64::from(pkt.meta.message_len);
    let remaining = u64::from(pkt.meta.message_remaining);
    PacketInfo {
        len: pkt.frame_len() as u32,
        flow,
        priority,
        dscp,
        qp,
        message_size: size,
        remaining_bytes: remaining,
        attained_bytes: size.saturating_sub(remaining),
        deadline: class.deadline,
        slack: class.slack,
        rank: class.rank,
        arrival: now,
        now,
    }
}

impl EgressScheduler for TreeEgress {
    fn enqueue(&mut self, packet: Packet, at: Arrival) -> Option<Dequeued> {
        let now = at.now;
        let mut info = packet_info_with(&packet, now, at.priority, &self.classes);
        let f = self.flows.entry(info.flow).or_default();
        let latest = now.add(info.slack);
        if f.queued > 0 {
            info.remaining_bytes = info.remaining_bytes.max(f.remaining);
            info.message_size = info.message_size.max(f.size);
            info.attained_bytes = info.attained_bytes.max(f.attained);
            info.deadline = info.deadline.max(f.deadline);
            info.rank = info.rank.max(f.rank);
            if latest < f.latest {
                info.slack = f.latest.saturating_sub(now);
            }
        }
        f.queued += 1;
        f.remaining = info.remaining_bytes;
        f.size = info.message_size;
        f.attained = info.attained_bytes;
        f.deadline = info.deadline;
        f.rank = info.rank;
        f.latest = now.add(info.slack);
        let item = TreeItem {
            packet,
            at: now,
            flow: info.flow,
            ingress: at.ingress as u32,
            priority: at.priority,
        };
        match self.tree.enqueue(now, info, item) {
            Ok(()) => None,
            // Refused, evicted, or no leaf for it: the switch frees and counts it.
            Err(e) => {
                let dropped = e.into_item();
                self.release_flow(dropped.flow);
                Some(dropped.into())
            }
        }
    }

    fn dequeue(&mut self, now: Time, paused: u8) -> Option<Dequeued> {
        let item = self.tree.dequeue(now, paused)?;
        self.release_flow(item.flow);
        Some(item.into())
    }

    fn next_release(&self, now: Time) -> Option<Time> {
        self.tree.next_release(now)
    }

    fn len(&self) -> usize {
        self.tree.len()
    }

    fn classes(&self) -> Vec<ClassReport> {
        self.tree
            .leaves()
            .filter_map(|leaf| {
                let s = self.tree.stats(leaf)?;
                Some(ClassReport {
                    name: self.tree.name(leaf).unwrap_or("?").to_string(),
                    packets: s.dequeued_packets,
                    bytes: s.dequeued_bytes,
                    queueing_delay_sum_ps: s.queueing_delay_sum_ps,
                    dropped_packets: s.dropped_packets + s.evicted_packets,
                })
            })
            .collect()
    }

    fn priority_inversions(&self) -> u64 {
        self.tree.priority_inversions()
    }
}

impl From<TreeItem> for Dequeued {
    fn from(i: TreeItem) -> Dequeued {
        Dequeued {
            packet: i.packet,
            enqueued_at: i.at,
            priority: i.priority,
            ingress: i.ingress as usize,
        }
    }
}
