//! A PIFO tree as an egress port's scheduler.
//!
//! The switch hands frames over; this adapter reads what transactions may use from the frame's
//! bytes and its cached metadata ([`PacketInfo`]) and keeps each frame with its arrival time:
//!
//! | field | from |
//! |---|---|
//! | `len` | the frame length (headers + payload + ICRC) |
//! | `flow` | a hash of the IPv4 addresses and UDP source port (the RoCEv2 5-tuple) |
//! | `dscp`, `priority` | the IPv4 DSCP; priority from the switch's DSCP map (default DSCP >> 3, the class selector, 0..=7) — the same priorities the PFC pause mask uses |
//! | `qp` | the BTH destination QP |
//! | `message_size`, `remaining_bytes` | written by the sending NIC (RDMA message size; bytes left, this packet included) |
//! | `attained_bytes` | `message_size - remaining_bytes` (bytes of the message already sent) |
//! | `deadline`, `slack` | not supplied by any workload yet: zero, so EDF and LSTF act as FIFO |
//! | `arrival` | the time the frame reached the egress queue |
//!
//! **Flows stay in order.** RoCE's reliable connections deliver in PSN order and treat a gap as
//! a loss (go-back-N), so a scheduler must never reorder packets of one flow. Size-based ranks
//! would: within a message the remaining bytes shrink packet by packet (SRPT would send a
//! message's tail before its head), and a QP's next message may be smaller than the one still
//! queued. So while a flow has packets queued, its packets' `remaining_bytes`,
//! `message_size` and `attained_bytes` never go below those of its previous packet: ranks
//! computed from them are non-decreasing within the flow, and equal ranks leave in arrival
//! order. pFabric does the same by always sending a flow's earliest packet. When the flow's
//! queue empties, the floor is forgotten.

use fabemu_fabric::packet::Packet;
use fabemu_fabric::route::flow_hash;
use fabemu_fabric::units::Time;
use fabemu_fabric::wire;
use rustc_hash::FxHashMap;

use crate::egress::{ClassReport, Dequeued, EgressScheduler};
use crate::pifo::{PacketInfo, PifoTree};
use crate::priority::DscpMap;

/// An egress scheduler driven by a PIFO tree.
pub struct TreeEgress {
    tree: PifoTree<(Packet, Time)>,
    flows: FxHashMap<u64, FlowFloor>,
    map: DscpMap,
}

/// A flow's queued packets and the size facts its last queued packet carried.
#[derive(Clone, Copy, Debug, Default)]
struct FlowFloor {
    queued: u32,
    remaining: u64,
    size: u64,
    attained: u64,
}

impl TreeEgress {
    /// Wraps a built tree.
    pub fn new(tree: PifoTree<(Packet, Time)>) -> TreeEgress {
        TreeEgress {
            tree,
            flows: FxHashMap::default(),
            map: DscpMap::default(),
        }
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
    pub fn tree(&self) -> &PifoTree<(Packet, Time)> {
        &self.tree
    }
}

/// What a PIFO tree's transactions see of `pkt`, arriving at `now` (priority = DSCP >> 3).
pub fn packet_info(pkt: &Packet, now: Time) -> PacketInfo {
    packet_info_mapped(pkt, now, &DscpMap::CLASS_SELECTOR)
}

/// [`packet_info`] with the priority taken from `map`.
pub fn packet_info_mapped(pkt: &Packet, now: Time, map: &DscpMap) -> PacketInfo {
    let h = pkt.header();
    let flow = match wire::peek_roce_flow(h) {
        (_, Some(f)) => flow_hash(f.src, f.dst, f.udp_src_port, 0),
        _ => 0,
    };
    let dscp = wire::dscp(h).unwrap_or(0);
    let qp = wire::bth_view(h).map_or(0, |b| b.get_dest_qp());
    let size = pkt.meta.message_len as u64;
    let remaining = pkt.meta.message_remaining as u64;
    PacketInfo {
        len: pkt.frame_len() as u32,
        flow,
        priority: map.priority(dscp),
        dscp,
        qp,
        message_size: size,
        remaining_bytes: remaining,
        attained_bytes: size.saturating_sub(remaining),
        deadline: Time::ZERO,
        slack: Time::ZERO,
        arrival: now,
        now,
    }
}

impl EgressScheduler for TreeEgress {
    fn enqueue(&mut self, packet: Packet, now: Time) -> Option<Packet> {
        let mut info = packet_info_mapped(&packet, now, &self.map);
        let f = self.flows.entry(info.flow).or_default();
        if f.queued > 0 {
            info.remaining_bytes = info.remaining_bytes.max(f.remaining);
            info.message_size = info.message_size.max(f.size);
            info.attained_bytes = info.attained_bytes.max(f.attained);
        }
        f.queued += 1;
        f.remaining = info.remaining_bytes;
        f.size = info.message_size;
        f.attained = info.attained_bytes;
        match self.tree.enqueue(now, info, (packet, now)) {
            Ok(()) => None,
            // Refused, evicted, or no leaf for it: the switch frees and counts it.
            Err(e) => {
                let dropped = e.into_item().0;
                let flow = packet_info(&dropped, now).flow;
                self.release_flow(flow);
                Some(dropped)
            }
        }
    }

    fn dequeue(&mut self, now: Time, paused: u8) -> Option<Dequeued> {
        let (packet, enqueued_at) = self.tree.dequeue(now, paused)?;
        let flow = packet_info(&packet, now).flow;
        self.release_flow(flow);
        Some(Dequeued {
            packet,
            enqueued_at,
        })
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

    fn set_priority_map(&mut self, map: &DscpMap) {
        self.map = *map;
    }
}
