//! What a receiving NIC reads of a RoCEv2 frame, and a one-pass read of it for the two shapes
//! nearly every frame has.
//!
//! [`RoceRepr::parse`] builds the whole header stack (both MAC addresses, identification, UDP
//! source port, P_Key and the BTH's other flags), and the NIC ran [`super::frame_kind`] and
//! [`super::ipv4_dst`] before it, each validating the same first bytes again: ~330
//! instructions per frame received on benches/fabric64.yaml, a quarter of the NIC's cost per
//! frame. [`RoceRx`] holds only what the receive path uses, and [`RoceRx::common`] reads it
//! from a frame that is an ACK or a data frame without extension headers, making every check
//! of [`RoceRepr::parse`] on the fixed offsets (the IPv4 checksum too: a frame that arrives with
//! a wrong one is refused as before) in one pass. Any other frame, and any frame a check
//! refuses, gets `None` and takes the general path ([`RoceRx::parse`]), so both give the same
//! fields for every frame they accept (a proptest compares them on mutated and cut frames).
//!
//! [`RoceRx::common_intact`] is the same read without the IPv4 checksum, which the NIC uses:
//! in the emulator a frame's bytes change after its last writer set the checksum only when a
//! fault flips them, and that sets the frame's corruption flag (its FCS check), on which the
//! NIC discards it before reading it. Recomputing the sum on every frame could never refuse
//! one; captures keep the real checksums (tshark checks them in tests/it/observe.rs).

use std::net::Ipv4Addr;

use super::{
    field, opcode, AethRepr, Ecn, RoceRepr, WireError, AETH_LEN, ETHERTYPE_IPV4, ETH_HEADER_LEN,
    ICRC_LEN, IPV4_HEADER_LEN, IP_PROTOCOL_UDP, ROCEV2_UDP_PORT,
};

/// The fields of a RoCEv2 frame that the receiving NIC acts on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RoceRx {
    /// IPv4 source (the sending host).
    pub src_ip: Ipv4Addr,
    /// IPv4 destination (this host, or one to relay to).
    pub dst_ip: Ipv4Addr,
    /// ECN codepoint (a CE mark is what the notification point looks for).
    pub ecn: Ecn,
    /// IPv4 time to live (hops taken, for congestion controls that count them).
    pub ttl: u8,
    /// BTH opcode.
    pub opcode: u8,
    /// BTH AckReq.
    pub ack_req: bool,
    /// BTH BECN (an echoed CE mark).
    pub becn: bool,
    /// BTH destination QP (24 bits).
    pub dest_qp: u32,
    /// BTH PSN (24 bits).
    pub psn: u32,
    /// The AETH, for the opcodes that carry one.
    pub aeth: Option<AethRepr>,
    /// The RETH's DMA length, for the opcodes that carry one.
    pub dma_len: Option<u32>,
    /// Immediate data, for the opcodes that carry it.
    pub immdt: Option<u32>,
}

impl From<&RoceRepr> for RoceRx {
    fn from(r: &RoceRepr) -> RoceRx {
        RoceRx {
            src_ip: r.src_ip,
            dst_ip: r.dst_ip,
            ecn: r.ecn,
            ttl: r.ttl,
            opcode: r.bth.opcode,
            ack_req: r.bth.ack_req,
            becn: r.bth.becn,
            dest_qp: r.bth.dest_qp,
            psn: r.bth.psn,
            aeth: r.aeth,
            dma_len: r.reth.map(|r| r.dma_len),
            immdt: r.immdt,
        }
    }
}

impl RoceRx {
    /// Parses `frame`'s headers as [`RoceRepr::parse`] does (the same frames refused, with the
    /// same errors), keeping what the receiver uses; the common shapes in one pass.
    #[inline]
    pub fn parse(frame: &[u8]) -> Result<RoceRx, WireError> {
        match Self::common(frame) {
            Some(rx) => Ok(rx),
            None => Self::general(frame),
        }
    }

    /// [`RoceRx::parse`] through the full parse (the rare shapes), out of line.
    #[cold]
    #[inline(never)]
    fn general(frame: &[u8]) -> Result<RoceRx, WireError> {
        RoceRepr::parse(frame).map(|r| RoceRx::from(&r))
    }

    /// The fields of `frame` if it is an ACK or a data frame without extension headers that
    /// [`RoceRepr::parse`] accepts; `None` for every other frame (which that parse may still
    /// accept). A frame this accepts is one [`super::frame_kind`] calls RoCEv2 and whose
    /// [`super::ipv4_dst`] is `dst_ip`.
    #[inline]
    pub fn common(frame: &[u8]) -> Option<RoceRx> {
        Self::common_with::<true>(frame)
    }

    /// [`RoceRx::common`] of a frame known intact, without recomputing its IPv4 checksum: for
    /// a receiver that learns from the frame's FCS check (the emulator's corruption flag,
    /// [`crate::packet::Packet::is_corrupted`]) whether any bit of it changed since the last
    /// writer set the checksum (a sending NIC's template, a switch's incremental update) and
    /// discards it first if so. It accepts what `common` accepts, and a frame whose checksum
    /// alone is wrong; ~15 instructions of each frame received on benches/fabric64.yaml.
    /// Always inlined: out of line, its result went through memory and the call saved
    /// registers, per frame a NIC receives.
    #[inline(always)]
    pub fn common_intact(frame: &[u8]) -> Option<RoceRx> {
        Self::common_with::<false>(frame)
    }

    /// [`RoceRx::common`], the IPv4 checksum verified when `CHECKSUM`.
    #[inline(always)]
    fn common_with<const CHECKSUM: bool>(frame: &[u8]) -> Option<RoceRx> {
        use field::{bth as b, ipv4 as i, udp as u};
        const IP: usize = field::IPV4;
        const UDP: usize = field::UDP;
        const BTH: usize = field::BTH;
        let h: &[u8; field::BTH_END] = frame.first_chunk()?;
        let be16 = |at: usize| u16::from_be_bytes([h[at], h[at + 1]]);
        let be32 = |at: usize| u32::from_be_bytes([h[at], h[at + 1], h[at + 2], h[at + 3]]);
        let ip_total = usize::from(be16(IP + i::TOTAL_LEN.start));
        // Version 4 with IHL 5 in one byte; neither "more fragments" nor an offset (DF and the
        // reserved bit are allowed, as in the full parse).
        if be16(field::eth::ETHERTYPE.start) != ETHERTYPE_IPV4
            || h[IP + i::VER_IHL] != 0x45
            || be16(IP + i::FLAGS_FRAG.start) & 0x3FFF != 0
            || h[IP + i::PROTOCOL] != IP_PROTOCOL_UDP
            || be16(UDP + u::DST_PORT.start) != ROCEV2_UDP_PORT
            || usize::from(be16(UDP + u::LENGTH.start)) + IPV4_HEADER_LEN != ip_total
            || (CHECKSUM && !ipv4_checksum_ok(h))
        {
            return None;
        }
        let op = h[BTH + b::OPCODE];
        let (aeth, header_len) = if op == opcode::ACK {
            let a: &[u8; AETH_LEN] = frame.get(field::BTH_END..)?.first_chunk()?;
            let aeth = AethRepr {
                syndrome: a[0],
                msn: u32::from_be_bytes([0, a[1], a[2], a[3]]),
            };
            (Some(aeth), field::BTH_END + AETH_LEN)
        } else if opcode::is_supported(op)
            && !opcode::has_reth(op)
            && !opcode::has_aeth(op)
            && !opcode::has_immdt(op)
            && op != opcode::CNP
        {
            (None, field::BTH_END)
        } else {
            return None;
        };
        // The payload length the full parse computes (less the pad) must not be negative.
        let pad = usize::from((h[BTH + b::FLAGS] >> 4) & 0x03);
        if ip_total + ETH_HEADER_LEN < header_len + pad + ICRC_LEN {
            return None;
        }
        let tos = h[IP + i::TOS];
        Some(RoceRx {
            src_ip: Ipv4Addr::from(be32(IP + i::SRC.start)),
            dst_ip: Ipv4Addr::from(be32(IP + i::DST.start)),
            ecn: Ecn::from_bits(tos),
            ttl: h[IP + i::TTL],
            opcode: op,
            ack_req: h[BTH + b::ACK_REQ] & 0x80 != 0,
            becn: h[BTH + b::FECN_BECN] & 0x40 != 0,
            dest_qp: be32(BTH + b::FECN_BECN) & 0x00FF_FFFF,
            psn: be32(BTH + b::ACK_REQ) & 0x00FF_FFFF,
            aeth,
            dma_len: None,
            immdt: None,
        })
    }
}

/// Whether the IPv4 header of `h` carries the checksum [`super::roce::ipv4_checksum`] computes
/// (what the full parse compares), from five 32-bit words instead of ten 16-bit ones: a sum of
/// 32-bit words folded to 16 bits is the same one's complement sum (2^16 = 1 modulo 2^16 - 1,
/// and only an all-zero header sums to zero either way).
#[inline(always)]
fn ipv4_checksum_ok(h: &[u8; field::BTH_END]) -> bool {
    const IP: usize = field::IPV4;
    let w = |at: usize| u64::from(u32::from_be_bytes([h[at], h[at + 1], h[at + 2], h[at + 3]]));
    // The checksum is the low half of the third word: left out of the sum.
    let found = u16::from_be_bytes([h[IP + 10], h[IP + 11]]);
    let sum = w(IP) + w(IP + 4) + (w(IP + 8) & 0xFFFF_0000) + w(IP + 12) + w(IP + 16);
    // At most 35 bits: two folds reach 32 bits, then the 16-bit fold of the full parse.
    let sum = (sum >> 32) + (sum & 0xFFFF_FFFF);
    let sum = (sum >> 32) + (sum & 0xFFFF_FFFF);
    super::roce::fold_checksum(sum as u32) == found
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::roce::tests::{mutate, sample_frame};

    proptest::proptest! {
        /// The one-pass read gives the general parse's fields for every frame it accepts, and
        /// accepts the common shapes; `parse` agrees with the full parse on every frame (same
        /// fields or same error), cut anywhere and with up to three bytes overwritten anywhere
        /// in the first 80 (the IPv4 checksum fixed up or not).
        #[test]
        fn common_agrees_with_the_full_parse(
            which in 0usize..32,
            payload in 0usize..5000,
            cut in 0usize..140,
            edits in proptest::collection::vec((0usize..80, proptest::prelude::any::<u8>()), 0..4),
            fix in proptest::prelude::any::<bool>(),
        ) {
            let (repr, mut buf, n) = sample_frame(which, payload);
            let common_shape = repr.bth.opcode == opcode::ACK || repr.header_len() == field::BTH_END;
            let pristine = RoceRx::common(&buf[..n]);
            proptest::prop_assert_eq!(pristine.is_some(), common_shape);
            mutate(&mut buf, &edits, fix);
            let frame = &buf[..cut.min(n + 64)];
            let full = RoceRepr::parse(frame);
            proptest::prop_assert_eq!(RoceRx::parse(frame), full.as_ref().map(RoceRx::from).map_err(Clone::clone));
            // Without the checksum: the same answer whenever the checksum is right or
            // `common` accepts.
            let intact = RoceRx::common_intact(frame);
            let checksum_ok = frame.first_chunk::<{ field::BTH_END }>().is_some_and(ipv4_checksum_ok);
            if checksum_ok || RoceRx::common(frame).is_some() {
                proptest::prop_assert_eq!(intact, RoceRx::common(frame));
            }
            if let Some(rx) = RoceRx::common(frame) {
                proptest::prop_assert_eq!(Ok(rx), full.map(|r| RoceRx::from(&r)));
                proptest::prop_assert_eq!(crate::wire::frame_kind(frame), crate::wire::FrameKind::RoceV2);
                proptest::prop_assert_eq!(crate::wire::ipv4_dst(frame), Some(rx.dst_ip));
            }
        }

        /// The 32-bit checksum sum decides as the 16-bit one on any header.
        #[test]
        fn checksum_words_agree(bytes in proptest::prelude::any::<[u8; 20]>(), zero in proptest::prelude::any::<bool>()) {
            let mut h = [0u8; field::BTH_END];
            if !zero {
                h[field::IPV4..field::UDP].copy_from_slice(&bytes);
            }
            let mut ip = [0u8; IPV4_HEADER_LEN];
            ip.copy_from_slice(&h[field::IPV4..field::UDP]);
            let found = u16::from_be_bytes([ip[10], ip[11]]);
            proptest::prop_assert_eq!(ipv4_checksum_ok(&h), crate::wire::roce::ipv4_checksum(&ip) == found);
            // And with the checksum set right.
            let c = crate::wire::roce::ipv4_checksum(&ip);
            h[field::IPV4 + 10..field::IPV4 + 12].copy_from_slice(&c.to_be_bytes());
            proptest::prop_assert!(ipv4_checksum_ok(&h));
        }
    }
}
