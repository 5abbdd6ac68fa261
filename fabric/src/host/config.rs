//! A host's identity and settings: addresses, the directory of every host, the NIC's
//! configuration (the scenario's `nic:` section) and the counters it keeps.

use std::net::Ipv4Addr;

use rustc_hash::FxHashMap;
use serde::{Deserialize, Serialize};

use crate::units::{Bandwidth, ByteSize, Time};
use crate::wire::MacAddr;

use super::{
    CcConfigError, ClassTable, CongestionControl, DcqcnConfigError, NicPfcConfig, NicPfcConfigError,
};

/// A host's addresses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HostAddr {
    /// IPv4 address written into its packets.
    pub ip: Ipv4Addr,
    /// MAC address.
    pub mac: MacAddr,
}

impl HostAddr {
    /// This host as the sender of frames built from a shared header template.
    #[inline(always)]
    pub fn sender(&self) -> crate::wire::Sender {
        crate::wire::Sender {
            mac: self.mac,
            ip: self.ip,
        }
    }
}

/// Every host's addresses, by host index, and the reverse map.
#[derive(Clone, Debug, Default)]
pub struct HostDirectory {
    hosts: Vec<HostAddr>,
    /// The reverse map, built only when the addresses are not the conventional ones.
    by_ip: FxHashMap<u32, u32>,
    /// Every host `i` has [`HostDirectory::default_addr`]`(i)`'s IPv4 address (the world's
    /// own numbering): the index is the address's low 24 bits minus one. A NIC looks up the
    /// source of every frame it receives, and arithmetic is cheaper than the hash map.
    conventional: bool,
}

impl HostDirectory {
    /// Builds the directory; host `i` is `hosts[i]`.
    pub fn new(hosts: Vec<HostAddr>) -> HostDirectory {
        let conventional = hosts.len() < 0x00FF_FFFF
            && hosts
                .iter()
                .enumerate()
                .all(|(i, h)| h.ip == HostDirectory::default_addr(i as u32).ip);
        let by_ip = if conventional {
            FxHashMap::default()
        } else {
            hosts
                .iter()
                .enumerate()
                .map(|(i, h)| (u32::from(h.ip), i as u32))
                .collect()
        };
        HostDirectory {
            hosts,
            by_ip,
            conventional,
        }
    }
    /// Addresses of host `i`.
    pub fn get(&self, i: u32) -> Option<&HostAddr> {
        self.hosts.get(i as usize)
    }
    /// The host with address `ip`. The conventional plan's arithmetic always inlined (every
    /// frame received asks), the map's lookup out of line.
    #[inline(always)]
    pub fn index_of(&self, ip: Ipv4Addr) -> Option<u32> {
        let v = u32::from(ip);
        if self.conventional {
            // 10.0.0.0 wraps to u32::MAX, beyond any index.
            let i = (v & 0x00FF_FFFF).wrapping_sub(1);
            return (v >> 24 == 10 && (i as usize) < self.hosts.len()).then_some(i);
        }
        self.index_in_map(v)
    }

    /// [`HostDirectory::index_of`] for addresses outside the conventional plan.
    #[inline(never)]
    fn index_in_map(&self, v: u32) -> Option<u32> {
        self.by_ip.get(&v).copied()
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
// In declaration order (`repr(C)`): the scalars every frame reads (MTU, ACK spacing, RTO,
// DSCPs, ECN, QP rate) share the first line instead of being scattered by size. The NIC
// copies them (and flags for `cc`, `pfc`, `classes`, `verify_icrc`) next to its other hot
// fields, so a frame reads this struct only for what is rare (see `Nic`'s layout).
#[repr(C)]
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
    /// `cc` DCQCN or DCTCP, data packets are always ECT(0).
    pub ecn_capable: bool,
    /// Initial per-QP rate limit; absent means the line rate of the QP's port.
    pub qp_rate: Option<Bandwidth>,
    /// Per port, the buffer for frames relayed for other hosts (rings, tori); a relayed frame
    /// that does not fit is dropped and counted.
    pub relay_buffer: ByteSize,
    /// Retransmission timeouts in a row (without progress) after which a QP gives up and
    /// enters the error state, as RC's retry count does (InfiniBand allows at most 7).
    pub retry_limit: u32,
    /// Packets a QP may have unacknowledged right after a retransmission timeout; the window
    /// then grows back per acknowledged packet (doubling per round trip up to half the
    /// window at the loss, then one packet per round trip). A NAK halves the window instead.
    /// A QP that never lost a packet has no window (only `rto`'s go-back-N and the rate
    /// limiters bound it), so loss-free runs are untouched. At least 1.
    pub restart_window: u32,
    /// Congestion control: `none` (default), `dcqcn`, `dctcp`, `timely`, `swift`, or a one-key
    /// map with parameters such as `{dcqcn: {...}}` (see [`CongestionControl`]).
    pub cc: CongestionControl,
    /// PFC generation by the NIC from a host-side receive buffer (see [`NicPfcConfig`]);
    /// absent (default) = never. Received pause frames are honoured either way.
    pub pfc: Option<NicPfcConfig>,
    /// Set by the world in data mode (not a scenario field): frames carry real bytes, so
    /// control frames (ACK, NAK, CNP) get a real ICRC too; in timing mode every ICRC is zero.
    #[serde(skip)]
    pub data_mode: bool,
    /// Set by the world (not a scenario field): the run's traffic classes, which the NIC opens
    /// QPs of its own for (see [`ClassTable`]).
    #[serde(skip)]
    pub classes: ClassTable,
    /// Set by the world when some fault flips bits (not a scenario field): in data mode the
    /// NIC then recomputes the ICRC of every frame with payload addressed to it and discards a
    /// mismatch. Off otherwise, so a run without bit errors pays no CRC per received frame.
    #[serde(skip)]
    pub verify_icrc: bool,
}

/// A NIC setting out of range (see [`NicConfig::validate`]).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum NicConfigError {
    /// A DCQCN parameter.
    #[error(transparent)]
    Dcqcn(#[from] DcqcnConfigError),
    /// A parameter of another congestion-control scheme.
    #[error(transparent)]
    Cc(#[from] CcConfigError),
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
        self.cc.validate_scheme()?;
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
            restart_window: 1,
            relay_buffer: ByteSize(32 << 20),
            cc: CongestionControl::None,
            pfc: None,
            data_mode: false,
            classes: ClassTable::default(),
            verify_icrc: false,
        }
    }
}

/// What a host's NIC counted.
///
/// `repr(C)`: the counters in the order declared (the report's), so that the two every data
/// frame sent bumps come first and share a line with what the send reads of the [`super::Nic`]
/// (with Rust's own layout the latency histogram came first and pushed them onto the next
/// line), and the counters of frames received follow on the next.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[repr(C)]
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
    /// CE-marked data packets received (looked at only when `cc` is DCQCN or DCTCP).
    pub ce_received: u64,
    /// Cuts by the reaction point: one per CNP acted on (DCQCN), or per ACK that lowered a
    /// rate or window (the other schemes).
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
    /// Frames damaged by bit errors and discarded: by the ICRC check (data mode, payload
    /// addressed here) or the MAC's FCS check; absent when none.
    #[serde(skip_serializing_if = "is_zero")]
    pub corrupted_discarded: u64,
    /// Frames this host would have relayed but had no route for after a failover (a fault
    /// cut every path to their destination); absent when none.
    #[serde(skip_serializing_if = "is_zero")]
    pub blackholed: u64,
    /// Of those, the ones the ICRC check caught (the recomputed ICRC differed from the
    /// frame's); absent when none.
    #[serde(skip_serializing_if = "is_zero")]
    pub icrc_errors: u64,
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

fn is_zero(n: &u64) -> bool {
    *n == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The arithmetic lookup of conventional addresses answers as the map does for other
    /// directories: every host's own address, and nothing for 10.0.0.0, addresses past the
    /// last host or outside 10/8.
    #[test]
    fn index_of_agrees_for_conventional_and_other_addresses() {
        let conv = HostDirectory::new((0..5).map(HostDirectory::default_addr).collect());
        let mut other: Vec<HostAddr> = (0..5).map(HostDirectory::default_addr).collect();
        other[3].ip = Ipv4Addr::new(192, 168, 0, 7);
        let other = HostDirectory::new(other);
        for (dir, moved) in [(&conv, None), (&other, Some(3))] {
            for i in 0..5u32 {
                let ip = dir.get(i).map(|a| a.ip);
                assert_eq!(ip.and_then(|ip| dir.index_of(ip)), Some(i));
            }
            for ip in [
                Ipv4Addr::new(10, 0, 0, 0),
                Ipv4Addr::new(10, 0, 0, 6),
                Ipv4Addr::new(11, 0, 0, 1),
                Ipv4Addr::new(255, 255, 255, 255),
            ] {
                assert_eq!(dir.index_of(ip), None, "{ip}");
            }
            // The moved host's conventional address names no host.
            if let Some(m) = moved {
                assert_eq!(dir.index_of(HostDirectory::default_addr(m).ip), None);
            }
        }
    }
}
