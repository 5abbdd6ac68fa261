//! A PIFO tree as an egress port's scheduler.
//!
//! The switch hands frames over; this adapter reads what transactions may use from the frame's
//! bytes and its cached metadata ([`PacketInfo`]) and keeps each frame with its arrival time:
//!
//! | field | from |
//! |---|---|
//! | `len` | the frame length (headers + payload + ICRC) |
//! | `flow` | a hash of the IPv4 addresses and UDP source port (the RoCEv2 5-tuple) |
//! | `dscp`, `priority` | the IPv4 DSCP; priority = DSCP >> 3 (the class selector, 0..=7) |
//! | `qp` | the BTH destination QP |
//! | `message_size`, `remaining_bytes` | written by the sending NIC (RDMA message size; bytes left, this packet included) |
//! | `attained_bytes` | `message_size - remaining_bytes` (bytes of the message already sent) |
//! | `deadline`, `slack` | not supplied by any workload yet: zero, so EDF and LSTF act as FIFO |
//! | `arrival` | the time the frame reached the egress queue |

use fabemu_fabric::packet::Packet;
use fabemu_fabric::route::flow_hash;
use fabemu_fabric::units::Time;
use fabemu_fabric::wire;

use crate::egress::{ClassReport, Dequeued, EgressScheduler};
use crate::pifo::{PacketInfo, PifoTree};

/// An egress scheduler driven by a PIFO tree.
pub struct TreeEgress {
    tree: PifoTree<(Packet, Time)>,
}

impl TreeEgress {
    /// Wraps a built tree.
    pub fn new(tree: PifoTree<(Packet, Time)>) -> TreeEgress {
        TreeEgress { tree }
    }

    /// The tree (for its counters).
    pub fn tree(&self) -> &PifoTree<(Packet, Time)> {
        &self.tree
    }
}

/// What a PIFO tree's transactions see of `pkt`, arriving at `now`.
pub fn packet_info(pkt: &Packet, now: Time) -> PacketInfo {
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
        priority: dscp >> 3,
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
        let info = packet_info(&packet, now);
        match self.tree.enqueue(now, info, (packet, now)) {
            Ok(()) => None,
            // Refused, evicted, or no leaf for it: the switch frees and counts it.
            Err(e) => Some(e.into_item().0),
        }
    }

    fn dequeue(&mut self, now: Time, paused: u8) -> Option<Dequeued> {
        self.tree
            .dequeue(now, paused)
            .map(|(packet, enqueued_at)| Dequeued {
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
}
