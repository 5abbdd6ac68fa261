//! Hosts: an NPU's RoCE NIC with its queue pairs, and the application that drives it.
//!
//! [`Host`] is the actor. Its [`Nic`] keeps one RC queue pair per peer host, segments
//! posted messages into MTU packets with real RoCEv2 headers, acknowledges what it receives
//! (coalescing configurable), and recovers losses with go-back-N on a NAK or a retransmission
//! timeout. Each QP has a rate limiter, set by `qp_rate` and driven by DCQCN when `cc` turns it
//! on ([`dcqcn`]); per port, PFC frames go first, then control packets (ACK/NAK/CNP), then QPs
//! take turns round-robin. The NIC honours PFC pause frames per priority and can generate them
//! from a receive buffer drained at the host's rate ([`pfc`]). A host with several ports
//! forwards frames not addressed to it (host-to-host fabrics such as rings).
//!
//! The layer above the NIC is an [`Application`]: it posts sends and sees completions through
//! an [`AppApi`] (its [`Transport`]), and can arm its own timers. [`MessageApp`] is the point-to-point workload.

mod app;
pub mod dcqcn;
pub mod pfc;
pub(crate) mod qp;
#[cfg(test)]
mod tests;

use std::collections::VecDeque;
use std::net::Ipv4Addr;
use std::sync::Arc;

use bytes::Bytes;
use rustc_hash::FxHashMap;
use serde::{Deserialize, Serialize};

use crate::engine::{Actor, Ctx, Event, TransmitError};
use crate::packet::{Packet, Payload};
use crate::route::{flow_hash, qp_udp_src_port, RouteTable};
use crate::units::{Bandwidth, ByteSize, Time};
use crate::wire::{
    self, opcode, AethRepr, BthRepr, Ecn, FrameKind, MacAddr, PfcPauseRepr, RethRepr, RoceRepr,
};

pub use self::app::{
    message_bytes, message_bytes_match, MessageApp, MessageSpec, RecvRecord, SendRecord,
};
pub use self::dcqcn::{CongestionControl, DcqcnConfig, DcqcnConfigError, RateHistory};
use self::dcqcn::{Np, Rp};
pub use self::pfc::{NicPfcConfig, NicPfcConfigError};
use self::pfc::{PortPause, RxBuffer, CLASSES};
use self::qp::{Qp, RxAction};
pub use crate::transport::{Application, Completion, Transport};

/// First QP number used; host `i`'s QP toward peer `p` has number `QPN_BASE + p`.
pub const QPN_BASE: u32 = 0x100;

/// A host's addresses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HostAddr {
    /// IPv4 address written into its packets.
    pub ip: Ipv4Addr,
    /// MAC address.
    pub mac: MacAddr,
}

/// Every host's addresses, by host index, and the reverse map.
#[derive(Clone, Debug, Default)]
pub struct HostDirectory {
    hosts: Vec<HostAddr>,
    by_ip: FxHashMap<u32, u32>,
}

impl HostDirectory {
    /// Builds the directory; host `i` is `hosts[i]`.
    pub fn new(hosts: Vec<HostAddr>) -> HostDirectory {
        let by_ip = hosts
            .iter()
            .enumerate()
            .map(|(i, h)| (u32::from(h.ip), i as u32))
            .collect();
        HostDirectory { hosts, by_ip }
    }
    /// Addresses of host `i`.
    pub fn get(&self, i: u32) -> Option<&HostAddr> {
        self.hosts.get(i as usize)
    }
    /// The host with address `ip`.
    pub fn index_of(&self, ip: Ipv4Addr) -> Option<u32> {
        self.by_ip.get(&u32::from(ip)).copied()
    }
    /// Number of hosts.
    pub fn len(&self) -> usize {
        self.hosts.len()
    }
    /// True when there are no hosts.
    pub fn is_empty(&self) -> bool {
        self.hosts.is_empty()
    }
    /// The conventional address of host `i`: 10.x.y.z with the index in the low 24 bits plus
    /// one (so no host is 10.0.0.0), and a locally administered MAC 02:00:xx:xx:xx:xx.
    pub fn default_addr(i: u32) -> HostAddr {
        let v = 0x0A00_0000 | ((i + 1) & 0x00FF_FFFF);
        let b = (i + 1).to_be_bytes();
        HostAddr {
            ip: Ipv4Addr::from(v),
            mac: [0x02, 0x00, b[0], b[1], b[2], b[3]],
        }
    }
}

/// NIC transport settings (the scenario's `nic:` section).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct NicConfig {
    /// Payload bytes per packet (the RoCE path MTU). Accepted: 64B..8KiB; RoCE uses 256B, 512B,
    /// 1KiB, 2KiB or 4KiB.
    pub mtu: ByteSize,
    /// Acknowledge after this many in-order packets (and always on a message's last packet).
    pub ack_every: u32,
    /// Retransmission timeout: with packets unacknowledged this long, go back to the oldest.
    /// Repeated timeouts back off exponentially (rto, 2 rto, 4 rto, ...) until a response
    /// arrives.
    pub rto: Time,
    /// DSCP of data packets.
    pub dscp: u8,
    /// DSCP of ACK/NAK packets.
    pub control_dscp: u8,
    /// Send data packets as ECN-capable (ECT(0)), so switches mark CE instead of dropping. With
    /// `cc` on, data packets are always ECT(0).
    pub ecn_capable: bool,
    /// Initial per-QP rate limit; absent means the line rate of the QP's port.
    pub qp_rate: Option<Bandwidth>,
    /// Per port, the buffer for frames relayed for other hosts (rings, tori); a relayed frame
    /// that does not fit is dropped and counted.
    pub relay_buffer: ByteSize,
    /// Retransmission timeouts in a row (without progress) after which a QP gives up and
    /// enters the error state, as RC's retry count does (InfiniBand allows at most 7).
    pub retry_limit: u32,
    /// Congestion control: `none` (default) or `{dcqcn: {...}}` (see [`CongestionControl`]).
    pub cc: CongestionControl,
    /// PFC generation by the NIC from a host-side receive buffer (see [`NicPfcConfig`]);
    /// absent (default) = never. Received pause frames are honoured either way.
    pub pfc: Option<NicPfcConfig>,
    /// Set by the world in data mode (not a scenario field): frames carry real bytes, so
    /// control frames (ACK, NAK, CNP) get a real ICRC too; in timing mode every ICRC is zero.
    #[serde(skip)]
    pub data_mode: bool,
}

/// A NIC setting out of range (see [`NicConfig::validate`]).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum NicConfigError {
    /// A DCQCN parameter.
    #[error(transparent)]
    Dcqcn(#[from] DcqcnConfigError),
    /// A PFC generation parameter.
    #[error(transparent)]
    Pfc(#[from] NicPfcConfigError),
}

impl NicConfig {
    /// Checks the congestion-control and PFC settings (the scenario checks the others).
    pub fn validate(&self) -> Result<(), NicConfigError> {
        if let Some(d) = self.cc.dcqcn() {
            d.validate()?;
        }
        if let Some(p) = &self.pfc {
            p.validate()?;
        }
        Ok(())
    }
}

impl Default for NicConfig {
    fn default() -> Self {
        NicConfig {
            mtu: ByteSize(4096),
            ack_every: 1,
            rto: Time::from_us(1000),
            dscp: 26,
            control_dscp: 48,
            ecn_capable: true,
            qp_rate: None,
            retry_limit: 7,
            relay_buffer: ByteSize(32 << 20),
            cc: CongestionControl::None,
            pfc: None,
            data_mode: false,
        }
    }
}

/// What a host's NIC counted.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct HostStats {
    /// Data packets transmitted, first transmissions and retransmissions.
    pub data_packets_sent: u64,
    /// Data payload bytes transmitted, including retransmissions.
    pub data_bytes_sent: u64,
    /// Data packets retransmitted (go-back-N).
    pub retransmitted_packets: u64,
    /// Payload bytes retransmitted.
    pub retransmitted_bytes: u64,
    /// Retransmission timeouts that fired.
    pub timeouts: u64,
    /// NAKs sent by this host's receive side.
    pub naks_sent: u64,
    /// NAKs received by this host's send side.
    pub naks_received: u64,
    /// ACKs sent.
    pub acks_sent: u64,
    /// ACKs received.
    pub acks_received: u64,
    /// Data packets received in order.
    pub data_packets_received: u64,
    /// Data packets dropped for arriving out of order (after a loss).
    pub out_of_order_dropped: u64,
    /// Duplicate data packets (already received).
    pub duplicates_received: u64,
    /// CNPs received (acted on when `cc` is DCQCN).
    pub cnps_received: u64,
    /// CNPs sent by the notification point (CE-marked data arrived).
    pub cnps_sent: u64,
    /// CE-marked data packets received (looked at only when `cc` is DCQCN).
    pub ce_received: u64,
    /// Rate cuts by the reaction point (one per CNP acted on).
    pub rate_decreases: u64,
    /// PFC frames received (XOFF and XON).
    pub pause_frames_received: u64,
    /// Sum over ports and priority classes of the time transmission was paused by PFC, in ps.
    pub paused_time_ps: u64,
    /// PFC frames sent (XOFF and XON) by the receive buffer.
    pub pause_frames_sent: u64,
    /// Of those, XON frames (quanta 0: resume).
    pub xon_frames_sent: u64,
    /// Data frames dropped because the receive buffer (`pfc.rx_buffer`) was full.
    pub rx_buffer_dropped: u64,
    /// Frames forwarded for other hosts.
    pub forwarded: u64,
    /// Frames to relay dropped because the port's relay buffer was full.
    pub relay_dropped: u64,
    /// Frames dropped because they were malformed, unroutable or from an unknown host.
    pub dropped_invalid: u64,
    /// Messages whose received length differed from the announced one.
    pub length_mismatches: u64,
    /// QPs that exhausted their retries (`retry_limit` timeouts in a row) and stopped.
    pub qps_failed: u64,
    /// Sum of the one-way latency (NIC to NIC) of data packets received in order, in ps; divide
    /// by `data_packets_received` for the mean.
    pub latency_sum_ps: u64,
    /// One-way latency of the same packets (percentiles in the report).
    pub latency: crate::histogram::LatencyHistogram,
}

/// The packet-level [`Transport`]: the application's handle on its NIC and time while it
/// reacts.
pub struct AppApi<'n, 'c, 'e> {
    nic: &'n mut Nic,
    ctx: &'c mut Ctx<'e>,
}

impl Transport for AppApi<'_, '_, '_> {
    fn now(&self) -> Time {
        self.ctx.now()
    }
    fn host(&self) -> u32 {
        self.nic.index
    }
    fn post_send(&mut self, dst: u32, tag: u64, len: u64, data: Option<Bytes>) -> bool {
        self.nic.post_send(dst, tag, len, data, self.ctx)
    }
    fn set_timer(&mut self, at: Time, token: u64) {
        self.ctx.set_timer(at, token << TOKEN_KIND_BITS | TOKEN_APP);
    }
}

const TOKEN_KIND_BITS: u32 = 2;
const TOKEN_APP: u64 = 0;
const TOKEN_PACE: u64 = 1;
const TOKEN_RTO: u64 = 2;
/// NIC-internal timers; the next `NIC_SUB_BITS` bits say which, the rest is the argument.
const TOKEN_NIC: u64 = 3;
const NIC_SUB_BITS: u32 = 2;
/// DCQCN rate-increase timer of a QP (argument: QP index).
const NIC_RATE: u64 = 0;
/// A PFC pause may have run out on a port (argument: port).
const NIC_RESUME: u64 = 1;
/// The receive buffer's head frame is drained (no argument).
const NIC_DRAIN: u64 = 2;

fn nic_token(sub: u64, arg: u64) -> u64 {
    ((arg << NIC_SUB_BITS | sub) << TOKEN_KIND_BITS) | TOKEN_NIC
}

/// Per-port transmit state of a NIC.
#[derive(Debug, Default)]
struct NicPort {
    /// PFC frames this NIC generates: sent before anything else and never paused.
    mac_control: VecDeque<Packet>,
    /// ACK/NAK/CNP frames, sent before data.
    control: VecDeque<Packet>,
    /// PFC pause state of this port's transmit side.
    pause: PortPause,
    /// Frames relayed for other hosts, bounded by `relay_buffer`.
    transit: VecDeque<Packet>,
    transit_bytes: u64,
    /// Whether relayed frames go next when local data also waits (the two alternate).
    transit_turn: bool,
    /// QPs (by index) with data to send, in round-robin order.
    active: VecDeque<u32>,
    /// Pacing timer pending at this time (to avoid arming duplicates).
    pace_timer_at: Option<Time>,
}

/// A RoCE NIC: queue pairs, per-port scheduling, frame building and parsing.
pub struct Nic {
    index: u32,
    addr: HostAddr,
    dir: Arc<HostDirectory>,
    routes: Arc<RouteTable>,
    cfg: NicConfig,
    seed: u64,
    /// Queue pairs, created on first use; `qp_index` maps a peer host to its QP.
    qps: Vec<Qp>,
    qp_index: FxHashMap<u32, u32>,
    ports: Vec<NicPort>,
    done_scratch: Vec<u64>,
    completions: VecDeque<Completion>,
    /// DCQCN state per QP (same index as `qps`); empty when `cc` is none.
    qp_cc: Vec<QpCc>,
    /// The receive buffer toward the host when the NIC generates PFC.
    rx: RxBuffer,
    /// Counters.
    pub stats: HostStats,
}

/// DCQCN state of one QP: its notification point (receive side) and reaction point (send side).
#[derive(Debug)]
struct QpCc {
    np: Np,
    rp: Rp,
}

/// One QP's congestion-control state, for reports.
#[derive(Clone, Copy, Debug)]
pub struct QpRateReport<'a> {
    /// The peer host.
    pub peer: u32,
    /// The DCQCN rate in force, `None` at line rate.
    pub rate: Option<Bandwidth>,
    /// Rate changes over time.
    pub history: &'a RateHistory,
}

impl Nic {
    /// Per QP (in creation order), the DCQCN rate and its history; empty when `cc` is none.
    pub fn qp_rates(&self) -> impl Iterator<Item = QpRateReport<'_>> {
        self.qps
            .iter()
            .zip(&self.qp_cc)
            .map(|(qp, cc)| QpRateReport {
                peer: qp.peer,
                rate: cc.rp.rate().map(dcqcn::to_bandwidth),
                history: &cc.rp.history,
            })
    }

    /// Whether `port` may not send frames of priority `class` at `now` (PFC).
    pub fn is_paused(&self, port: usize, class: u8, now: Time) -> bool {
        self.ports
            .get(port)
            .is_some_and(|p| p.pause.is_paused(class, now))
    }

    /// Bytes waiting in the receive buffer toward the host (PFC generation).
    pub fn rx_buffered(&self) -> u64 {
        self.rx.bytes
    }

    /// The NIC's settings.
    pub fn config(&self) -> &NicConfig {
        &self.cfg
    }

    /// The index of the QP toward `peer`, created on first use.
    fn qp_entry(&mut self, peer: u32) -> Option<usize> {
        if let Some(&i) = self.qp_index.get(&peer) {
            return Some(i as usize);
        }
        {
            let paddr = self.dir.get(peer)?;
            let udp = qp_udp_src_port(self.addr.ip, paddr.ip, peer, self.seed);
            let h = flow_hash(self.addr.ip, paddr.ip, udp, self.seed);
            let port = if self.ports.len() == 1 {
                0
            } else {
                self.routes.select(paddr.ip, h)?
            };
            let jitter_seed =
                crate::route::mix(self.seed ^ u64::from(self.index) << 32 ^ u64::from(peer));
            self.qps.push(Qp::new(peer, port, udp, jitter_seed));
            if let Some(d) = self.cfg.cc.dcqcn() {
                self.qp_cc.push(QpCc {
                    np: Np::default(),
                    rp: Rp::new(d),
                });
            }
            self.qp_index.insert(peer, (self.qps.len() - 1) as u32);
        }
        Some(self.qps.len() - 1)
    }

    fn post_send(
        &mut self,
        dst: u32,
        tag: u64,
        len: u64,
        data: Option<Bytes>,
        ctx: &mut Ctx<'_>,
    ) -> bool {
        let mtu = self.cfg.mtu.bytes().max(1);
        let Some(i) = self.qp_entry(dst) else {
            return false;
        };
        let qp = &mut self.qps[i];
        qp.post(tag, len, data, mtu);
        let port = qp.port;
        self.activate(i);
        self.pump(port, ctx);
        true
    }

    /// Puts QP `i` into its port's round-robin list if it has data and is not there yet.
    fn activate(&mut self, i: usize) {
        if let Some(qp) = self.qps.get_mut(i) {
            if qp.has_data() && !qp.active {
                qp.active = true;
                self.ports[qp.port].active.push_back(i as u32);
            }
        }
    }

    /// Sends the next frame on `port` if it is idle: PFC frames first, then control, then
    /// round-robin data; frames of a paused priority wait.
    fn pump(&mut self, port: usize, ctx: &mut Ctx<'_>) {
        if !ctx.port_idle(port) {
            return;
        }
        let now = ctx.now();
        let Some(np) = self.ports.get_mut(port) else {
            return;
        };
        if let Some(pkt) = np.mac_control.pop_front() {
            self.send(port, pkt, ctx);
            return;
        }
        if !np.pause.is_paused(self.cfg.control_dscp >> 3, now) {
            if let Some(pkt) = np.control.pop_front() {
                self.send(port, pkt, ctx);
                return;
            }
        }
        // Relayed frames and the host's own data take turns, so neither starves the other.
        if self.ports[port].transit_turn && self.send_transit(port, ctx) {
            return;
        }
        if self.send_local(port, ctx) {
            self.ports[port].transit_turn = true;
            return;
        }
        self.send_transit(port, ctx);
    }

    /// Sends the oldest relayed frame on `port`, if any.
    fn send_transit(&mut self, port: usize, ctx: &mut Ctx<'_>) -> bool {
        let now = ctx.now();
        let np = &mut self.ports[port];
        np.transit_turn = false;
        let pkt = if np.pause.any_paused(now) {
            // The oldest frame of a priority that may go; paused ones keep their place.
            let pause = np.pause;
            np.transit
                .iter()
                .position(|p| !pause.is_paused(frame_class(p), now))
                .and_then(|i| np.transit.remove(i))
        } else {
            np.transit.pop_front()
        };
        let Some(pkt) = pkt else {
            return false;
        };
        np.transit_bytes = np.transit_bytes.saturating_sub(pkt.frame_len() as u64);
        self.send(port, pkt, ctx);
        true
    }

    /// Sends the next data packet of the port's QPs, round-robin; false when none may go now
    /// (a pacing timer is armed when a rate limiter holds them back).
    fn send_local(&mut self, port: usize, ctx: &mut Ctx<'_>) -> bool {
        let now = ctx.now();
        if self.ports[port].pause.is_paused(self.cfg.dscp >> 3, now) {
            // The resume timer pumps the port again.
            return false;
        }
        let mut earliest = Time::NEVER;
        for _ in 0..self.ports[port].active.len() {
            let Some(i) = self.ports[port].active.pop_front() else {
                break;
            };
            let Some(qp) = self.qps.get_mut(i as usize) else {
                continue;
            };
            if !qp.has_data() {
                qp.active = false;
                continue;
            }
            if qp.next_send_time > now {
                earliest = earliest.min(qp.next_send_time);
                self.ports[port].active.push_back(i);
                continue;
            }
            self.send_data(i as usize, port, ctx);
            return true;
        }
        if earliest != Time::NEVER {
            let np = &mut self.ports[port];
            if np.pace_timer_at.is_none_or(|t| t > earliest) {
                np.pace_timer_at = Some(earliest);
                ctx.set_timer(earliest, (port as u64) << TOKEN_KIND_BITS | TOKEN_PACE);
            }
        }
        false
    }

    fn send(&mut self, port: usize, pkt: Packet, ctx: &mut Ctx<'_>) {
        match ctx.transmit(port, pkt) {
            Ok(()) => {}
            Err(TransmitError::Busy) | Err(TransmitError::NoSuchPort) => {
                self.stats.dropped_invalid += 1;
            }
        }
    }

    fn send_data(&mut self, i: usize, port: usize, ctx: &mut Ctx<'_>) {
        let now = ctx.now();
        let mtu = self.cfg.mtu.bytes().max(1);
        let line = ctx.channel(port).map(|c| c.rate.bandwidth());
        let Some(qp) = self.qps.get_mut(i) else {
            return;
        };
        let Some(paddr) = self.dir.get(qp.peer).copied() else {
            return;
        };
        let was_outstanding = qp.outstanding();
        let Some(seg) = qp.next_segment(mtu) else {
            qp.active = false;
            return;
        };
        let repr = RoceRepr {
            src_mac: self.addr.mac,
            dst_mac: paddr.mac,
            src_ip: self.addr.ip,
            dst_ip: paddr.ip,
            dscp: self.cfg.dscp,
            ecn: if self.cfg.ecn_capable || self.cfg.cc.dcqcn().is_some() {
                Ecn::Ect0
            } else {
                Ecn::NotEct
            },
            ttl: 64,
            ip_id: seg.psn as u16,
            udp_src_port: qp.udp_src_port,
            bth: BthRepr {
                opcode: seg.opcode,
                pkey: 0xFFFF,
                dest_qp: QPN_BASE + self.index,
                ack_req: seg.ack_req,
                psn: (seg.psn & qp::PSN_MASK) as u32,
                ..BthRepr::default()
            },
            reth: seg.dma_len.map(|len| RethRepr {
                va: 0,
                rkey: 0,
                dma_len: len,
            }),
            aeth: None,
            immdt: seg.imm,
            payload_len: seg.payload_len as usize,
        };
        let payload = match seg.data {
            Some(d) => Payload::Data(d),
            None => Payload::Timing(seg.payload_len),
        };
        let Some(mut pkt) = build(&repr, payload) else {
            self.stats.dropped_invalid += 1;
            return;
        };
        pkt.meta.created_at = now;
        // What size-based schedulers (SJF, SRPT) read; messages are below 4 GiB (RETH).
        pkt.meta.message_len = seg.msg_len as u32;
        pkt.meta.message_remaining = seg.msg_remaining as u32;
        self.stats.data_packets_sent += 1;
        self.stats.data_bytes_sent += seg.payload_len as u64;
        if seg.retransmission {
            self.stats.retransmitted_packets += 1;
            self.stats.retransmitted_bytes += seg.payload_len as u64;
        }
        // Rate limiter: the next packet may start once this one would have finished at the
        // QP's rate (at line rate this never binds: the port itself is busy that long).
        // DCQCN's rate, when below line rate, caps the configured one.
        let cc = self.qp_cc.get_mut(i);
        let cc_rate = cc
            .as_ref()
            .and_then(|c| c.rp.rate())
            .map(dcqcn::to_bandwidth);
        let rate = match (self.cfg.qp_rate.or(line), cc_rate) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        if let (Some(rate), Some(line)) = (rate, line) {
            if rate < line {
                let wire = ctx.wire_bytes(pkt.frame_len());
                qp.next_send_time = now.max(qp.next_send_time) + rate.serialization_time(wire);
            }
        }
        if let (Some(d), Some(cc), Some(line)) = (self.cfg.cc.dcqcn(), cc, line) {
            cc.rp
                .on_sent(d, line.bps() as f64, pkt.frame_len() as u64, now);
        }
        if qp.has_data() {
            self.ports[port].active.push_back(i as u32);
        } else {
            qp.active = false;
        }
        // The transport timer (as InfiniBand RC defines it) starts when a request goes out with nothing
        // outstanding and restarts on every ACK that makes progress; sending more does not
        // restart it. Armed lazily: one pending timer event per QP at a time.
        if !seg.retransmission {
            qp.on_first_send(seg.psn, now);
        }
        if !was_outstanding {
            let rto = qp.base_rto(self.cfg.rto);
            qp.rto_deadline = now + qp.jittered(rto);
        }
        if !qp.rto_armed {
            qp.rto_armed = true;
            ctx.set_timer(qp.rto_deadline, (i as u64) << TOKEN_KIND_BITS | TOKEN_RTO);
        }
        self.send(port, pkt, ctx);
    }

    fn on_rto(&mut self, i: usize, ctx: &mut Ctx<'_>) {
        let now = ctx.now();
        let Some(qp) = self.qps.get_mut(i) else {
            return;
        };
        qp.rto_armed = false;
        if !qp.outstanding() {
            return;
        }
        if now < qp.rto_deadline {
            qp.rto_armed = true;
            ctx.set_timer(qp.rto_deadline, (i as u64) << TOKEN_KIND_BITS | TOKEN_RTO);
            return;
        }
        qp.retries += 1;
        self.stats.timeouts += 1;
        if qp.retries > self.cfg.retry_limit {
            // RC's error state: the QP's unfinished messages never complete, and the run
            // reports them; a peer that cannot be reached no longer keeps the run going.
            qp.failed = true;
            self.stats.qps_failed += 1;
            return;
        }
        qp.on_timeout();
        // Back off exponentially while timeouts repeat (the retry count is reset by any
        // response): synchronized go-back-N retransmissions would otherwise refill the same
        // overflowing buffer every `rto`.
        let backed_off = Time(
            qp.base_rto(self.cfg.rto)
                .ps()
                .saturating_mul(1 << qp.retries.min(16)),
        );
        qp.rto_deadline = now + qp.jittered(backed_off);
        qp.rto_armed = true;
        ctx.set_timer(qp.rto_deadline, (i as u64) << TOKEN_KIND_BITS | TOKEN_RTO);
        let port = qp.port;
        self.activate(i);
        self.pump(port, ctx);
    }

    /// Where a control frame (ACK, NAK, CNP) for `peer` goes: its address, and the port and
    /// UDP source port of the QP toward it (control frames follow their QP's path).
    fn control_route(&self, peer: u32) -> Option<(HostAddr, usize, u16)> {
        let paddr = self.dir.get(peer).copied()?;
        let qp = self.qps.get(*self.qp_index.get(&peer)? as usize)?;
        Some((paddr, qp.port, qp.udp_src_port))
    }

    /// Queues a control frame for `peer` (ACK/NAK) on the QP's port.
    fn send_control(&mut self, peer: u32, aeth: AethRepr, psn: u32, ctx: &mut Ctx<'_>) {
        let Some((paddr, port, udp)) = self.control_route(peer) else {
            return;
        };
        let repr = RoceRepr {
            src_mac: self.addr.mac,
            dst_mac: paddr.mac,
            src_ip: self.addr.ip,
            dst_ip: paddr.ip,
            dscp: self.cfg.control_dscp,
            ecn: Ecn::NotEct,
            ttl: 64,
            ip_id: psn as u16,
            udp_src_port: udp,
            bth: BthRepr {
                opcode: opcode::ACK,
                pkey: 0xFFFF,
                dest_qp: QPN_BASE + self.index,
                psn,
                ..BthRepr::default()
            },
            reth: None,
            aeth: Some(aeth),
            immdt: None,
            payload_len: 0,
        };
        self.queue_control(port, &repr, ctx);
    }

    /// Builds a header-only control frame and queues it on `port`'s control queue.
    fn queue_control(&mut self, port: usize, repr: &RoceRepr, ctx: &mut Ctx<'_>) {
        let payload = if self.cfg.data_mode {
            Payload::Data(Bytes::new())
        } else {
            Payload::Timing(0)
        };
        let Some(mut pkt) = build(repr, payload) else {
            self.stats.dropped_invalid += 1;
            return;
        };
        pkt.meta.created_at = ctx.now();
        let Some(np) = self.ports.get_mut(port) else {
            self.stats.dropped_invalid += 1;
            return;
        };
        np.control.push_back(pkt);
        self.pump(port, ctx);
    }

    /// Notification point: a CNP to `peer`'s QP toward this host (its number is
    /// `QPN_BASE + self.index`, as in ACKs), on the control priority, not ECN-capable.
    fn send_cnp(&mut self, peer: u32, ctx: &mut Ctx<'_>) {
        let Some((paddr, port, udp)) = self.control_route(peer) else {
            return;
        };
        let mut repr = RoceRepr::cnp(
            self.addr.mac,
            paddr.mac,
            self.addr.ip,
            paddr.ip,
            udp,
            QPN_BASE + self.index,
        );
        repr.dscp = self.cfg.control_dscp;
        self.stats.cnps_sent += 1;
        self.queue_control(port, &repr, ctx);
    }

    /// Reaction point: a CNP from `src` cuts the rate of the QP toward it.
    fn on_cnp(&mut self, src: u32, ctx: &mut Ctx<'_>) {
        self.stats.cnps_received += 1;
        let Some(d) = self.cfg.cc.dcqcn() else {
            return;
        };
        let Some(&i) = self.qp_index.get(&src) else {
            return;
        };
        let i = i as usize;
        let (Some(qp), Some(cc)) = (self.qps.get(i), self.qp_cc.get_mut(i)) else {
            return;
        };
        let Some(line) = ctx
            .channel(qp.port)
            .map(|c| c.rate.bandwidth().bps() as f64)
        else {
            return;
        };
        cc.rp.on_cnp(d, line, ctx.now());
        self.stats.rate_decreases += 1;
        if !cc.rp.timer_armed {
            cc.rp.timer_armed = true;
            ctx.set_timer(cc.rp.timer_deadline, nic_token(NIC_RATE, i as u64));
        }
    }

    /// DCQCN's rate-increase timer of QP `i` fired (possibly stale: the deadline moves on
    /// every CNP, and one pending event per QP follows it).
    fn on_rate_timer(&mut self, i: usize, ctx: &mut Ctx<'_>) {
        let Some(d) = self.cfg.cc.dcqcn() else {
            return;
        };
        let (Some(qp), Some(cc)) = (self.qps.get(i), self.qp_cc.get_mut(i)) else {
            return;
        };
        cc.rp.timer_armed = false;
        if !cc.rp.limited() {
            return;
        }
        let now = ctx.now();
        if now >= cc.rp.timer_deadline {
            let Some(line) = ctx
                .channel(qp.port)
                .map(|c| c.rate.bandwidth().bps() as f64)
            else {
                return;
            };
            if !cc.rp.on_timer(d, line, now) {
                return;
            }
        }
        cc.rp.timer_armed = true;
        ctx.set_timer(cc.rp.timer_deadline, nic_token(NIC_RATE, i as u64));
    }

    /// A PFC frame arrived on `port`: pause (or resume) the classes it enables.
    fn on_pause(&mut self, port: usize, pkt: &Packet, ctx: &mut Ctx<'_>) {
        let Ok(repr) = PfcPauseRepr::parse(pkt.header()) else {
            self.stats.dropped_invalid += 1;
            return;
        };
        let Some(bps) = ctx.channel(port).map(|c| c.rate.bandwidth().bps()) else {
            return;
        };
        let now = ctx.now();
        let Some(np) = self.ports.get_mut(port) else {
            return;
        };
        let mut resume = now;
        for class in 0..CLASSES as u8 {
            if repr.class_enable & (1 << class) == 0 {
                continue;
            }
            let quanta = repr.quanta[usize::from(class)];
            let dur = Time(wire::pause_quanta_to_ps(quanta, bps));
            let (added, removed) = np.pause.apply(class, dur, now);
            let st = &mut self.stats;
            st.paused_time_ps = st
                .paused_time_ps
                .saturating_add(added)
                .saturating_sub(removed);
            resume = resume.max(now + dur);
        }
        if resume > now && resume != Time::NEVER {
            ctx.set_timer(resume, nic_token(NIC_RESUME, port as u64));
        }
        // An XON (or a shortened pause) may let frames go at once.
        self.pump(port, ctx);
    }

    /// Queues a PFC frame of this NIC on `port`, ahead of everything else.
    fn send_pfc(&mut self, port: usize, repr: PfcPauseRepr, ctx: &mut Ctx<'_>) {
        let Ok(mut pkt) = Packet::with_header_len(wire::PFC_FRAME_LEN, Payload::Timing(0)) else {
            return;
        };
        if repr.emit(pkt.header_mut()).is_err() {
            return;
        }
        pkt.meta.created_at = ctx.now();
        let Some(np) = self.ports.get_mut(port) else {
            return;
        };
        np.mac_control.push_back(pkt);
        self.stats.pause_frames_sent += 1;
        if repr.quanta.iter().all(|&q| q == 0) {
            self.stats.xon_frames_sent += 1;
        }
        self.pump(port, ctx);
    }

    /// A data frame for this host enters the receive buffer (PFC generation on).
    fn rx_enqueue(&mut self, cfg: NicPfcConfig, port: usize, pkt: Packet, ctx: &mut Ctx<'_>) {
        let len = pkt.frame_len() as u64;
        if self.rx.bytes + len > cfg.rx_buffer.bytes() {
            self.stats.rx_buffer_dropped += 1;
            return;
        }
        let class = frame_class(&pkt);
        self.rx.bytes += len;
        self.rx.frames.push_back(pkt);
        if !self.rx.draining {
            self.rx.draining = true;
            let at = ctx.now() + cfg.rx_rate.serialization_time(len);
            ctx.set_timer(at, nic_token(NIC_DRAIN, 0));
        }
        if self.rx.bytes > cfg.xoff.bytes() {
            self.xoff(cfg, port, class, ctx);
        }
    }

    /// Sends an XOFF for `class` on `port` unless one is in force and not yet half over.
    fn xoff(&mut self, cfg: NicPfcConfig, port: usize, class: u8, ctx: &mut Ctx<'_>) {
        let now = ctx.now();
        let bps = ctx.channel(port).map_or(0, |c| c.rate.bandwidth().bps());
        let half = Time(wire::pause_quanta_to_ps(cfg.pause_quanta, bps) / 2);
        let Some(slot) = self
            .rx
            .xoff_sent
            .get_mut(port)
            .and_then(|p| p.get_mut(usize::from(class & 7)))
        else {
            return;
        };
        if slot.is_some_and(|t| now < t + half) {
            return;
        }
        *slot = Some(now);
        let repr = PfcPauseRepr::xoff(self.addr.mac, class, cfg.pause_quanta);
        self.send_pfc(port, repr, ctx);
    }

    /// The receive buffer's head frame reached the host: hand it to the transport, start the
    /// next one, and send XON (or refresh XOFF) by the new fill level.
    fn on_drain(&mut self, ctx: &mut Ctx<'_>) {
        let Some(cfg) = self.cfg.pfc else {
            return;
        };
        self.rx.draining = false;
        let Some(head) = self.rx.frames.pop_front() else {
            return;
        };
        self.rx.bytes = self.rx.bytes.saturating_sub(head.frame_len() as u64);
        if let Some(next) = self.rx.frames.front() {
            self.rx.draining = true;
            let len = next.frame_len() as u64;
            ctx.set_timer(
                ctx.now() + cfg.rx_rate.serialization_time(len),
                nic_token(NIC_DRAIN, 0),
            );
        }
        let below_xon = self.rx.bytes < cfg.xon.bytes();
        for port in 0..self.rx.xoff_sent.len() {
            for class in 0..CLASSES as u8 {
                if self.rx.xoff_sent[port][usize::from(class)].is_none() {
                    continue;
                }
                if below_xon {
                    self.rx.xoff_sent[port][usize::from(class)] = None;
                    let repr = PfcPauseRepr::xon(self.addr.mac, class);
                    self.send_pfc(port, repr, ctx);
                } else {
                    // Still above XON: keep the partner paused.
                    self.xoff(cfg, port, class, ctx);
                }
            }
        }
        let Ok(repr) = RoceRepr::parse(head.header()) else {
            self.stats.dropped_invalid += 1;
            return;
        };
        let Some(src) = self.dir.index_of(repr.src_ip) else {
            self.stats.dropped_invalid += 1;
            return;
        };
        self.on_data_frame(src, &repr, head, ctx);
    }

    /// Handles a frame that arrived on `port`.
    fn receive(&mut self, port: usize, pkt: Packet, ctx: &mut Ctx<'_>) {
        match wire::frame_kind(pkt.header()) {
            FrameKind::RoceV2 => {}
            FrameKind::PfcPause => {
                self.stats.pause_frames_received += 1;
                self.on_pause(port, &pkt, ctx);
                return;
            }
            FrameKind::Other => {
                self.stats.dropped_invalid += 1;
                return;
            }
        }
        let Some(dst) = wire::ipv4_dst(pkt.header()) else {
            self.stats.dropped_invalid += 1;
            return;
        };
        if dst != self.addr.ip {
            self.forward(port, dst, pkt, ctx);
            return;
        }
        let Ok(repr) = RoceRepr::parse(pkt.header()) else {
            self.stats.dropped_invalid += 1;
            return;
        };
        let Some(src) = self.dir.index_of(repr.src_ip) else {
            self.stats.dropped_invalid += 1;
            return;
        };
        match repr.bth.opcode {
            opcode::ACK => self.on_ack_frame(src, &repr, ctx),
            opcode::CNP => self.on_cnp(src, ctx),
            op if is_write(op) => self.on_data_arrival(port, src, &repr, pkt, ctx),
            _ => self.stats.dropped_invalid += 1,
        }
    }

    fn on_ack_frame(&mut self, src: u32, repr: &RoceRepr, ctx: &mut Ctx<'_>) {
        let Some(aeth) = repr.aeth else {
            self.stats.dropped_invalid += 1;
            return;
        };
        let Some(&i) = self.qp_index.get(&src) else {
            self.stats.dropped_invalid += 1;
            return;
        };
        let i = i as usize;
        let qp = &mut self.qps[i];
        let mut done = std::mem::take(&mut self.done_scratch);
        let now = ctx.now();
        // Any response shows the peer alive: the retry count restarts (as RC's does).
        qp.retries = 0;
        if aeth.is_nak() {
            self.stats.naks_received += 1;
            if qp.on_nak(repr.bth.psn, &mut done).is_some() {
                let rto = qp.base_rto(self.cfg.rto);
                qp.rto_deadline = now + qp.jittered(rto);
            }
        } else {
            self.stats.acks_received += 1;
            if qp.on_ack(repr.bth.psn, &mut done) {
                qp.on_acked(now);
                let rto = qp.base_rto(self.cfg.rto);
                qp.rto_deadline = now + qp.jittered(rto);
            }
        }
        let port = qp.port;
        for tag in done.drain(..) {
            self.completions
                .push_back(Completion::SendDone { dst: src, tag });
        }
        self.done_scratch = done;
        self.activate(i);
        self.pump(port, ctx);
    }

    /// A data frame for this host arrived: the notification point looks at its ECN mark, then
    /// the transport takes it now, or after the receive buffer when the NIC generates PFC.
    fn on_data_arrival(
        &mut self,
        port: usize,
        src: u32,
        repr: &RoceRepr,
        pkt: Packet,
        ctx: &mut Ctx<'_>,
    ) {
        if let (Some(interval), Ecn::Ce) = (self.cfg.cc.dcqcn().map(|d| d.cnp_interval), repr.ecn) {
            self.stats.ce_received += 1;
            if let Some(i) = self.qp_entry(src) {
                let now = ctx.now();
                if self
                    .qp_cc
                    .get_mut(i)
                    .is_some_and(|c| c.np.on_ce(now, interval))
                {
                    self.send_cnp(src, ctx);
                }
            }
        }
        if let Some(cfg) = self.cfg.pfc {
            self.rx_enqueue(cfg, port, pkt, ctx);
            return;
        }
        self.on_data_frame(src, repr, pkt, ctx);
    }

    fn on_data_frame(&mut self, src: u32, repr: &RoceRepr, pkt: Packet, ctx: &mut Ctx<'_>) {
        let ack_every = self.cfg.ack_every;
        let Some(i) = self.qp_entry(src) else {
            self.stats.dropped_invalid += 1;
            return;
        };
        let qp = &mut self.qps[i];
        let data = match pkt.payload() {
            Payload::Data(b) => Some(b),
            Payload::Timing(_) => None,
        };
        let mut received = None;
        let action = qp.on_data(
            repr.bth.psn,
            repr.bth.opcode,
            repr.bth.ack_req,
            repr.reth.map(|r| r.dma_len),
            repr.immdt,
            data,
            pkt.payload().len(),
            ack_every,
            &mut received,
        );
        let (ack_psn, exp_psn, msn) = (qp.ack_psn(), qp.expected_psn(), qp.msn);
        match action {
            RxAction::Accepted { ack } => {
                self.stats.data_packets_received += 1;
                let latency = ctx.now().saturating_sub(pkt.meta.created_at).ps();
                self.stats.latency_sum_ps += latency;
                self.stats.latency.record(latency);
                if ack {
                    self.stats.acks_sent += 1;
                    self.send_control(src, AethRepr::ack(msn), ack_psn, ctx);
                }
            }
            RxAction::Nak => {
                self.stats.out_of_order_dropped += 1;
                self.stats.naks_sent += 1;
                self.send_control(src, AethRepr::nak_psn_sequence_error(msn), exp_psn, ctx);
            }
            RxAction::DropOutOfOrder => self.stats.out_of_order_dropped += 1,
            RxAction::Duplicate => {
                self.stats.duplicates_received += 1;
                self.stats.acks_sent += 1;
                self.send_control(src, AethRepr::ack(msn), ack_psn, ctx);
            }
        }
        if let Some(r) = received {
            if r.len != r.dma_len {
                self.stats.length_mismatches += 1;
            }
            self.completions.push_back(Completion::Received {
                src,
                imm: r.imm,
                len: r.len,
                data: r.data,
            });
        }
    }

    fn forward(&mut self, in_port: usize, dst: Ipv4Addr, pkt: Packet, ctx: &mut Ctx<'_>) {
        // Hosts relay at the link layer, as an NPU's built-in switch does, and leave the TTL
        // alone: rings and tori have paths far longer than 64 hops, and their routes are
        // checked loop-free when they are built. Switches, which are IP routers, decrement it.
        let h = match (
            wire::ipv4_src(pkt.header()),
            wire::udp_src_port(pkt.header()),
        ) {
            (Some(s), Some(p)) => flow_hash(s, dst, p, self.seed),
            _ => 0,
        };
        match self.routes.select(dst, h) {
            Some(out) if out != in_port || self.ports.len() == 1 => {
                let np = &mut self.ports[out];
                let len = pkt.frame_len() as u64;
                if np.transit_bytes + len > self.cfg.relay_buffer.bytes() {
                    self.stats.relay_dropped += 1;
                    return;
                }
                np.transit_bytes += len;
                np.transit.push_back(pkt);
                self.stats.forwarded += 1;
                self.pump(out, ctx);
            }
            _ => self.stats.dropped_invalid += 1,
        }
    }
}

/// The priority class of a frame: DSCP >> 3 (class 0 for frames without an IPv4 header).
fn frame_class(pkt: &Packet) -> u8 {
    wire::dscp(pkt.header()).map_or(0, |d| d >> 3)
}

fn is_write(op: u8) -> bool {
    matches!(
        op,
        opcode::WRITE_FIRST
            | opcode::WRITE_MIDDLE
            | opcode::WRITE_LAST
            | opcode::WRITE_LAST_IMM
            | opcode::WRITE_ONLY
            | opcode::WRITE_ONLY_IMM
    )
}

/// Emits `repr` into a new packet with `payload` and the ICRC (computed over real bytes in data
/// mode; zero in timing mode, where the payload bytes do not exist).
fn build(repr: &RoceRepr, payload: Payload) -> Option<Packet> {
    let mut pkt = Packet::with_header_len(repr.header_len(), payload).ok()?;
    repr.emit(pkt.header_mut()).ok()?;
    let icrc = match pkt.payload() {
        Payload::Data(d) => wire::icrc(pkt.header(), d),
        Payload::Timing(_) => [0; 4],
    };
    pkt.set_trailer(&icrc).ok()?;
    Some(pkt)
}

/// A host: a NIC plus the application above it.
pub struct Host<A> {
    /// The NIC.
    pub nic: Nic,
    /// The application.
    pub app: A,
}

impl<A: Application> Host<A> {
    /// A host with index `index` (its place in `dir`), its routes (used when it has several
    /// ports or forwards), NIC settings and the run's seed.
    pub fn new(
        index: u32,
        dir: Arc<HostDirectory>,
        routes: Arc<RouteTable>,
        ports: usize,
        cfg: NicConfig,
        seed: u64,
        app: A,
    ) -> Option<Host<A>> {
        let addr = *dir.get(index)?;
        Some(Host {
            nic: Nic {
                index,
                addr,
                dir,
                routes,
                cfg,
                seed,
                qps: Vec::new(),
                qp_index: FxHashMap::default(),
                ports: (0..ports.max(1)).map(|_| NicPort::default()).collect(),
                done_scratch: Vec::new(),
                completions: VecDeque::new(),
                qp_cc: Vec::new(),
                rx: RxBuffer {
                    xoff_sent: vec![[None; CLASSES]; ports.max(1)],
                    ..RxBuffer::default()
                },
                // Coarse (1%, 1 ns): one per host, touched per packet; the 3-digit form's
                // larger count array cost ~10% of the engine benchmark in cache misses.
                stats: HostStats {
                    latency: crate::histogram::LatencyHistogram::coarse(),
                    ..HostStats::default()
                },
            },
            app,
        })
    }

    /// True when every QP has nothing posted, in flight or unacknowledged.
    pub fn quiescent(&self) -> bool {
        self.nic.qps.iter().all(Qp::idle)
    }

    fn deliver_completions(&mut self, ctx: &mut Ctx<'_>) {
        while let Some(c) = self.nic.completions.pop_front() {
            let mut api = AppApi {
                nic: &mut self.nic,
                ctx,
            };
            self.app.on_completion(c, &mut api);
        }
    }
}

impl<A: Application> Actor for Host<A> {
    fn start(&mut self, ctx: &mut Ctx<'_>) {
        let mut api = AppApi {
            nic: &mut self.nic,
            ctx,
        };
        self.app.start(&mut api);
        self.deliver_completions(ctx);
    }

    fn handle(&mut self, event: Event, ctx: &mut Ctx<'_>) {
        match event {
            Event::Packet { port, packet } => self.nic.receive(port, packet, ctx),
            Event::TxDone { port } => self.nic.pump(port, ctx),
            Event::Timer { token } => {
                let arg = token >> TOKEN_KIND_BITS;
                match token & ((1 << TOKEN_KIND_BITS) - 1) {
                    TOKEN_APP => {
                        let mut api = AppApi {
                            nic: &mut self.nic,
                            ctx,
                        };
                        self.app.on_timer(arg, &mut api);
                    }
                    TOKEN_PACE => {
                        let port = arg as usize;
                        if let Some(p) = self.nic.ports.get_mut(port) {
                            p.pace_timer_at = None;
                            self.nic.pump(port, ctx);
                        }
                    }
                    TOKEN_RTO => self.nic.on_rto(arg as usize, ctx),
                    _ => {
                        let sub = arg & ((1 << NIC_SUB_BITS) - 1);
                        let arg = arg >> NIC_SUB_BITS;
                        match sub {
                            NIC_RATE => self.nic.on_rate_timer(arg as usize, ctx),
                            NIC_RESUME if (arg as usize) < self.nic.ports.len() => {
                                self.nic.pump(arg as usize, ctx);
                            }
                            NIC_DRAIN => self.nic.on_drain(ctx),
                            _ => {}
                        }
                    }
                }
            }
        }
        self.deliver_completions(ctx);
    }
}
