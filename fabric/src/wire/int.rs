//! In-band network telemetry (INT) for HPCC: per switch hop, what the egress port looked like
//! when the frame left, written into the frame as real bytes.
//!
//! **Where.** Right after the transport headers the opcode implies (BTH, then RETH / AETH /
//! ImmDt), before the payload: IPv4 and UDP lengths cover it and the ICRC is computed over it
//! (a switch that appends a hop recomputes the ICRC in data mode), so a standard dissector
//! (Wireshark's `infiniband`) sees well-formed RoCEv2 whose payload starts with these bytes.
//! The region is present when the header is longer than the opcode's standard stack: a NIC
//! running HPCC sends data with an empty stack (2 bytes), switches with INT on append one
//! record per hop to data frames (never to ACKs), and the receiver copies the stack into its
//! ACK after the AETH. The pad to 4 bytes at the end of the payload (BTH PadCnt) counts the
//! message bytes only: a switch's record changes the stack's length by 10 bytes, and leaving
//! the stack out of what is padded spares every switch rewriting the pad and PadCnt.
//!
//! **Layout** (big-endian), 2 + 10 n bytes:
//!
//! | bytes | field |
//! |---|---|
//! | 0 | hop records that follow (n <= [`INT_MAX_HOPS`]) |
//! | 1 | reserved, 0 |
//! | per hop, 2..4 | link bandwidth in units of 100 Mb/s |
//! | 4..6 | egress queue length in units of 128 bytes (saturating at 8 MiB) |
//! | 6..9 | egress timestamp, ns, modulo 2^24 (wraps every 16.8 ms) |
//! | 9..12 | bytes transmitted by the port, in units of 64 bytes, modulo 2^24 (wraps every 1 GiB) |
//!
//! The same four fields as HPCC's 8-byte record (B, TS, txBytes, qLen; Li et al. 2019,
//! section 5), two bytes wider so bandwidth is a number rather than a 4-bit code and the queue
//! is finer. Senders difference consecutive records modulo 2^24 ([`IntHop::ts_delta_ns`],
//! [`IntHop::tx_delta_bytes`]), valid while the records are less than one wrap apart.

use pnet_packet::ipv4::{self, Ipv4Packet, MutableIpv4Packet};

use super::{field, opcode, AETH_LEN, CNP_RESERVED_LEN, IMMDT_LEN, RETH_LEN};
use crate::packet::{Packet, Payload};

/// The INT stack's own header: hop count and a reserved byte.
pub const INT_HEADER_LEN: usize = 2;
/// One hop's record.
pub const INT_HOP_LEN: usize = 10;
/// Most hops recorded (HPCC's five: host-ToR-agg-core-agg-ToR-host has five switches).
pub const INT_MAX_HOPS: usize = 5;
/// Largest INT stack.
pub const INT_MAX_LEN: usize = INT_HEADER_LEN + INT_MAX_HOPS * INT_HOP_LEN;

const MASK24: u32 = 0x00FF_FFFF;

/// One hop's telemetry as a switch writes it (already in the record's units).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IntHop {
    /// Link bandwidth, units of 100 Mb/s.
    pub bandwidth: u16,
    /// Egress queue length, units of 128 bytes.
    pub qlen: u16,
    /// Egress time, ns modulo 2^24.
    pub ts: u32,
    /// Bytes the port transmitted, units of 64 bytes modulo 2^24.
    pub tx: u32,
}

impl IntHop {
    /// A record from plain values: bandwidth in bits per second, queue and transmitted bytes,
    /// time in ps (each converted to the record's unit and width).
    pub fn new(bandwidth_bps: u64, qlen_bytes: u64, ts_ps: u64, tx_bytes: u64) -> IntHop {
        IntHop {
            bandwidth: (bandwidth_bps / 100_000_000).clamp(1, u64::from(u16::MAX)) as u16,
            qlen: (qlen_bytes / 128).min(u64::from(u16::MAX)) as u16,
            ts: ((ts_ps / 1000) as u32) & MASK24,
            tx: ((tx_bytes / 64) as u32) & MASK24,
        }
    }
    /// Link bandwidth in bytes per second.
    pub fn bandwidth_bytes_per_s(&self) -> f64 {
        f64::from(self.bandwidth) * 100e6 / 8.0
    }
    /// Queue length in bytes.
    pub fn qlen_bytes(&self) -> f64 {
        f64::from(self.qlen) * 128.0
    }
    /// Nanoseconds from `earlier` to this record (modulo the 24-bit wrap).
    pub fn ts_delta_ns(&self, earlier: &IntHop) -> u32 {
        self.ts.wrapping_sub(earlier.ts) & MASK24
    }
    /// Bytes the port sent from `earlier` to this record (modulo the wrap).
    pub fn tx_delta_bytes(&self, earlier: &IntHop) -> u64 {
        u64::from(self.tx.wrapping_sub(earlier.tx) & MASK24) * 64
    }
    fn emit(&self, out: &mut [u8]) {
        if out.len() < INT_HOP_LEN {
            return;
        }
        out[0..2].copy_from_slice(&self.bandwidth.to_be_bytes());
        out[2..4].copy_from_slice(&self.qlen.to_be_bytes());
        out[4..7].copy_from_slice(&self.ts.to_be_bytes()[1..]);
        out[7..10].copy_from_slice(&self.tx.to_be_bytes()[1..]);
    }
    fn parse(b: &[u8]) -> Option<IntHop> {
        let b: &[u8; INT_HOP_LEN] = b.get(..INT_HOP_LEN)?.try_into().ok()?;
        Some(IntHop {
            bandwidth: u16::from_be_bytes([b[0], b[1]]),
            qlen: u16::from_be_bytes([b[2], b[3]]),
            ts: u32::from_be_bytes([0, b[4], b[5], b[6]]),
            tx: u32::from_be_bytes([0, b[7], b[8], b[9]]),
        })
    }
}

/// A parsed INT stack: up to [`INT_MAX_HOPS`] records, first hop first (no allocation).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IntStack {
    hops: [IntHop; INT_MAX_HOPS],
    len: u8,
}

impl IntStack {
    /// The records, first hop first.
    pub fn hops(&self) -> &[IntHop] {
        &self.hops[..usize::from(self.len)]
    }
    /// Adds a record after the last one; false when the stack is full.
    pub fn push(&mut self, hop: IntHop) -> bool {
        let Some(slot) = self.hops.get_mut(usize::from(self.len)) else {
            return false;
        };
        *slot = hop;
        self.len += 1;
        true
    }
}

/// Where the opcode's standard header stack ends in `frame` (the INT stack's offset), or
/// `None` for frames that are not RoCEv2 with a known opcode.
pub fn int_offset(frame: &[u8]) -> Option<usize> {
    let op = super::bth_opcode(frame)?;
    if !opcode::is_supported(op) {
        return None;
    }
    let mut len = field::BTH_END;
    if opcode::has_reth(op) {
        len += RETH_LEN;
    }
    if opcode::has_aeth(op) {
        len += AETH_LEN;
    }
    if opcode::has_immdt(op) {
        len += IMMDT_LEN;
    }
    if op == opcode::CNP {
        len += CNP_RESERVED_LEN;
    }
    Some(len)
}

/// The INT bytes of a header (stack header and records), if it carries any.
pub fn int_bytes(header: &[u8]) -> Option<&[u8]> {
    let at = int_offset(header)?;
    let b = header.get(at..)?;
    (b.len() >= INT_HEADER_LEN).then_some(b)
}

/// Parses the INT stack of a header; `None` without one or when it is inconsistent (a hop
/// count the bytes do not hold).
pub fn parse_int(header: &[u8]) -> Option<IntStack> {
    parse_int_bytes(int_bytes(header)?)
}

/// Parses an INT stack from its own bytes (stack header first).
pub fn parse_int_bytes(b: &[u8]) -> Option<IntStack> {
    let n = usize::from(*b.first()?);
    if b.len() < INT_HEADER_LEN || n > INT_MAX_HOPS || b.len() < INT_HEADER_LEN + n * INT_HOP_LEN {
        return None;
    }
    let mut s = IntStack {
        len: n as u8,
        ..IntStack::default()
    };
    for (i, h) in s.hops.iter_mut().take(n).enumerate() {
        *h = IntHop::parse(b.get(INT_HEADER_LEN + i * INT_HOP_LEN..)?)?;
    }
    Some(s)
}

/// Why a switch could not stamp a frame (it then forwards it unchanged).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StampError {
    /// No INT stack, or not a data frame (ACKs carry an echo, never new hops).
    NoStack,
    /// The stack already holds [`INT_MAX_HOPS`] records.
    Full,
    /// The header array has no room (cannot happen for frames fabemu builds).
    NoRoom,
}

/// Appends `hop` to the INT stack of a data frame: the record goes at the end of the header,
/// the hop count, IPv4 total length and checksum and UDP length are updated, and in data mode
/// the ICRC is recomputed (timing-mode ICRCs are zero throughout).
pub fn stamp(pkt: &mut Packet, hop: &IntHop) -> Result<(), StampError> {
    let header = pkt.header();
    let op = super::bth_opcode(header).ok_or(StampError::NoStack)?;
    // RDMA WRITE data frames are the only ones a switch stamps.
    if !opcode::is_write(op) {
        return Err(StampError::NoStack);
    }
    let at = int_offset(header).ok_or(StampError::NoStack)?;
    let n = usize::from(*header.get(at).ok_or(StampError::NoStack)?);
    if n >= INT_MAX_HOPS {
        return Err(StampError::Full);
    }
    if header.len() != at + INT_HEADER_LEN + n * INT_HOP_LEN {
        return Err(StampError::NoStack);
    }
    let end = header.len();
    let h = pkt.grow_header(INT_HOP_LEN).ok_or(StampError::NoRoom)?;
    hop.emit(&mut h[end..]);
    h[at] = (n + 1) as u8;
    // Lengths: IPv4 total and UDP length grow by one record.
    let grow = |b: &mut [u8], i: usize| {
        let v = u16::from_be_bytes([b[i], b[i + 1]]).wrapping_add(INT_HOP_LEN as u16);
        b[i..i + 2].copy_from_slice(&v.to_be_bytes());
    };
    grow(h, field::IPV4 + 2);
    grow(h, field::UDP + 4);
    if let Some(mut ip) = MutableIpv4Packet::new(&mut h[field::IPV4..field::UDP]) {
        let c = ipv4::checksum(&ip.to_immutable());
        ip.set_checksum(c);
    }
    if let Payload::Data(d) = pkt.payload() {
        // The pad stays as it was (it aligns the message bytes, not the stack); the ICRC
        // after it covers it.
        let pad = pkt.trailer().len().saturating_sub(super::ICRC_LEN);
        let (t, n) = super::padded_trailer(pkt.header(), d, pad);
        pkt.set_trailer(&t[..n]).map_err(|_| StampError::NoRoom)?;
    }
    Ok(())
}

/// Checks a frame's IPv4 header checksum (for tests of [`stamp`]).
pub fn ipv4_checksum_ok(frame: &[u8]) -> bool {
    frame
        .get(field::IPV4..field::UDP)
        .and_then(Ipv4Packet::new)
        .is_some_and(|ip| ipv4::checksum(&ip) == ip.get_checksum())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{check_icrc, BthRepr, Ecn, RethRepr, RoceRepr};
    use bytes::Bytes;

    fn data_frame(payload: &[u8]) -> Packet {
        let repr = RoceRepr {
            src_mac: [2, 0, 0, 0, 0, 1],
            dst_mac: [2, 0, 0, 0, 0, 2],
            src_ip: "10.0.0.1".parse().unwrap_or(std::net::Ipv4Addr::LOCALHOST),
            dst_ip: "10.0.0.2".parse().unwrap_or(std::net::Ipv4Addr::LOCALHOST),
            dscp: 26,
            ecn: Ecn::Ect0,
            ttl: 64,
            ip_id: 1,
            udp_src_port: 0xC000,
            bth: BthRepr {
                opcode: opcode::WRITE_FIRST,
                pkey: 0xFFFF,
                dest_qp: 0x101,
                psn: 7,
                ..BthRepr::default()
            },
            reth: Some(RethRepr {
                va: 0,
                rkey: 0,
                dma_len: 8192,
            }),
            aeth: None,
            immdt: None,
            payload_len: payload.len() + INT_HEADER_LEN,
        };
        let len = repr.header_len() + INT_HEADER_LEN;
        let mut pkt =
            Packet::with_header_len(len, Payload::data(Bytes::copy_from_slice(payload))).unwrap();
        repr.emit(pkt.header_mut()).unwrap();
        let icrc = crate::wire::icrc(pkt.header(), payload);
        pkt.set_trailer(&icrc).unwrap();
        pkt
    }

    #[test]
    fn stamped_hops_parse_back_to_what_the_switches_wrote() {
        let mut pkt = data_frame(&[0xAB; 100]);
        assert_eq!(parse_int(pkt.header()).map(|s| s.hops().len()), Some(0));
        let hops = [
            IntHop::new(100_000_000_000, 12_800, 5_000_000, 1 << 20),
            IntHop::new(400_000_000_000, 0, 6_123_000, 64 * 5),
            IntHop::new(25_000_000_000, 10 << 20, 1 << 50, u64::MAX),
        ];
        for h in &hops {
            stamp(&mut pkt, h).unwrap();
        }
        let s = parse_int(pkt.header()).unwrap();
        assert_eq!(s.hops(), &hops);
        // Values as written: 100 Gb/s = 1000 x 100 Mb/s; 12,800 bytes = 100 x 128; 5 us.
        assert_eq!(s.hops()[0].bandwidth, 1000);
        assert_eq!(s.hops()[0].qlen, 100);
        assert_eq!(s.hops()[0].ts, 5000);
        assert_eq!(s.hops()[0].tx, 1 << 14);
        // 10 MiB saturates at 8 MiB - 128.
        assert_eq!(s.hops()[2].qlen, u16::MAX);
        // The frame stays consistent: checksum, lengths, ICRC, and the repr still parses with
        // the stack counted as payload.
        let frame = pkt.to_frame_bytes();
        assert!(ipv4_checksum_ok(&frame));
        assert!(check_icrc(&frame).is_ok());
        let repr = RoceRepr::parse(pkt.header()).unwrap();
        assert_eq!(repr.payload_len, 100 + INT_HEADER_LEN + 3 * INT_HOP_LEN);
        assert_eq!(pkt.frame_len(), frame.len());
    }

    #[test]
    fn a_full_stack_and_frames_without_one_are_left_alone() {
        let mut pkt = data_frame(&[1; 8]);
        for _ in 0..INT_MAX_HOPS {
            stamp(&mut pkt, &IntHop::default()).unwrap();
        }
        assert_eq!(stamp(&mut pkt, &IntHop::default()), Err(StampError::Full));
        let mut plain = Packet::new(&[0u8; 60], Payload::Timing(0), &[]).unwrap();
        assert_eq!(
            stamp(&mut plain, &IntHop::default()),
            Err(StampError::NoStack)
        );
    }

    #[test]
    fn deltas_wrap() {
        let a = IntHop {
            ts: MASK24 - 9,
            tx: MASK24,
            ..IntHop::default()
        };
        let b = IntHop {
            ts: 10,
            tx: 1,
            ..IntHop::default()
        };
        assert_eq!(b.ts_delta_ns(&a), 20);
        assert_eq!(b.tx_delta_bytes(&a), 128);
    }
}
