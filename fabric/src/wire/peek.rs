//! Cheap hot-path reads on a frame's first bytes, without a full parse: what a switch needs to
//! classify, route, hash and ECN-mark a frame. They return `None` (or [`FrameKind::Other`]) when
//! the frame is not what is asked, and never panic. IPv4 options are skipped by IHL here even
//! though [`super::RoceRepr`] rejects them, so forwarding stays correct for any IPv4 frame.

use std::net::Ipv4Addr;

use pnet_packet::ipv4::{self, MutableIpv4Packet};

use super::ib::BthPacket;
use super::{
    field, Ecn, PfcPauseRepr, WireError, ETHERTYPE_IPV4, ETHERTYPE_MAC_CONTROL, ETH_HEADER_LEN,
    IPV4_HEADER_LEN, IP_PROTOCOL_UDP, ROCEV2_UDP_PORT, UDP_HEADER_LEN,
};

/// Flag bit saying more fragments follow.
const IPV4_MORE_FRAGMENTS: u8 = 0b001;

/// What a frame is, as far as the fabric cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameKind {
    /// IPv4 / UDP to port 4791 (the rest is not validated; see [`super::RoceRepr::parse`]).
    RoceV2,
    /// A PFC pause frame that [`PfcPauseRepr::parse`] accepts.
    PfcPause,
    /// Anything else.
    Other,
}

#[inline]
fn ethertype(frame: &[u8]) -> Option<u16> {
    let b: &[u8; 2] = frame.get(field::eth::ETHERTYPE)?.first_chunk()?;
    Some(u16::from_be_bytes(*b))
}

/// The IPv4 header (its first 20 bytes) of an IPv4 frame with version 4.
///
/// Read directly at the `field` offsets: the switch peeks at every frame three times (flow,
/// TTL, DSCP), and `pnet_packet`'s out-of-line view accessors cost more than the reads. The
/// conditions are those of the views (the tests compare the two on random frames).
#[inline]
fn ipv4(frame: &[u8]) -> Option<&[u8; IPV4_HEADER_LEN]> {
    if ethertype(frame)? != ETHERTYPE_IPV4 {
        return None;
    }
    let ip: &[u8; IPV4_HEADER_LEN] = frame.get(field::IPV4..)?.first_chunk()?;
    (ip[field::ipv4::VER_IHL] >> 4 == 4).then_some(ip)
}

/// A big-endian `u16` of `bytes` at `r` (in range: callers index fixed-size headers).
#[inline]
fn be16<const N: usize>(bytes: &[u8; N], r: std::ops::Range<usize>) -> u16 {
    u16::from_be_bytes([bytes[r.start], bytes[r.start + 1]])
}

/// An IPv4 address of `ip` at `r`.
#[inline]
fn addr(ip: &[u8; IPV4_HEADER_LEN], r: std::ops::Range<usize>) -> Ipv4Addr {
    let a = r.start;
    Ipv4Addr::new(ip[a], ip[a + 1], ip[a + 2], ip[a + 3])
}

/// The UDP header of an unfragmented IPv4/UDP frame, and where it starts.
#[inline]
fn udp(frame: &[u8]) -> Option<(usize, &[u8; UDP_HEADER_LEN])> {
    let ip = ipv4(frame)?;
    let flags_frag = be16(ip, field::ipv4::FLAGS_FRAG);
    let unfragmented =
        (flags_frag >> 13) as u8 & IPV4_MORE_FRAGMENTS == 0 && flags_frag & 0x1FFF == 0;
    if ip[field::ipv4::PROTOCOL] != IP_PROTOCOL_UDP || !unfragmented {
        return None;
    }
    let ihl = usize::from(ip[field::ipv4::VER_IHL] & 0x0F) * 4;
    if ihl < IPV4_HEADER_LEN {
        return None;
    }
    let start = ETH_HEADER_LEN + ihl;
    Some((start, frame.get(start..)?.first_chunk()?))
}

/// The BTH of a RoCEv2 frame, as a view (for the PSN, QP and flags without a full parse).
pub fn bth_view(frame: &[u8]) -> Option<BthPacket<'_>> {
    let (start, udp) = udp(frame)?;
    if be16(udp, field::udp::DST_PORT) != ROCEV2_UDP_PORT {
        return None;
    }
    BthPacket::new(frame.get(start + UDP_HEADER_LEN..)?)
}

/// Classifies a frame: RoCEv2, PFC pause, or other.
#[inline]
pub fn frame_kind(frame: &[u8]) -> FrameKind {
    match ethertype(frame) {
        Some(ETHERTYPE_IPV4) => match udp(frame) {
            Some((_, udp)) if be16(udp, field::udp::DST_PORT) == ROCEV2_UDP_PORT => {
                FrameKind::RoceV2
            }
            _ => FrameKind::Other,
        },
        // Pause frames are rare; the full parse (34 bytes, no allocation) is cheap enough.
        Some(ETHERTYPE_MAC_CONTROL) if PfcPauseRepr::parse(frame).is_ok() => FrameKind::PfcPause,
        _ => FrameKind::Other,
    }
}

/// What forwarding needs from a RoCEv2 frame, read in one pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RoceFlow {
    /// IPv4 source address.
    pub src: Ipv4Addr,
    /// IPv4 destination address.
    pub dst: Ipv4Addr,
    /// UDP source port (the flow's ECMP entropy).
    pub udp_src_port: u16,
    /// DSCP (what a switch maps to a priority), read in the same pass.
    pub dscp: u8,
}

/// Classifies a frame and, for RoCEv2, returns its flow in the same pass — the switch's per-frame
/// read (one validation of the headers instead of one per field).
#[inline]
pub fn peek_roce_flow(frame: &[u8]) -> (FrameKind, Option<RoceFlow>) {
    match ethertype(frame) {
        Some(ETHERTYPE_IPV4) => {
            let Some(ip) = ipv4(frame) else {
                return (FrameKind::Other, None);
            };
            match udp(frame) {
                Some((_, udp)) if be16(udp, field::udp::DST_PORT) == ROCEV2_UDP_PORT => (
                    FrameKind::RoceV2,
                    Some(RoceFlow {
                        src: addr(ip, field::ipv4::SRC),
                        dst: addr(ip, field::ipv4::DST),
                        udp_src_port: be16(udp, field::udp::SRC_PORT),
                        dscp: ip[field::ipv4::TOS] >> 2,
                    }),
                ),
                _ => (FrameKind::Other, None),
            }
        }
        _ => (frame_kind(frame), None),
    }
}

/// The flow of an IPv4 frame that is not RoCEv2 (TCP, UDP, ICMP or any other protocol, as a
/// real program sends it): the addresses, the DSCP, and in `udp_src_port` the ECMP entropy of
/// its 5-tuple (protocol and both ports folded into 16 bits; the ports only when the frame is
/// unfragmented TCP or UDP, so every fragment of a datagram takes one path). `None` for
/// anything but a well-formed IPv4 header.
pub fn ip_flow(frame: &[u8]) -> Option<RoceFlow> {
    const TCP: u8 = 6;
    let ip = ipv4(frame)?;
    let ihl = usize::from(ip[field::ipv4::VER_IHL] & 0x0F) * 4;
    if ihl < IPV4_HEADER_LEN {
        return None;
    }
    let proto = ip[field::ipv4::PROTOCOL];
    let flags_frag = be16(ip, field::ipv4::FLAGS_FRAG);
    let unfragmented =
        (flags_frag >> 13) as u8 & IPV4_MORE_FRAGMENTS == 0 && flags_frag & 0x1FFF == 0;
    let ports = match frame.get(ETH_HEADER_LEN + ihl..) {
        Some(l4) if unfragmented && (proto == TCP || proto == IP_PROTOCOL_UDP) => {
            l4.first_chunk::<4>().map_or(0, |p| {
                u16::from_be_bytes([p[0], p[1]]) ^ u16::from_be_bytes([p[2], p[3]]).rotate_left(8)
            })
        }
        _ => 0,
    };
    Some(RoceFlow {
        src: addr(ip, field::ipv4::SRC),
        dst: addr(ip, field::ipv4::DST),
        udp_src_port: ports ^ u16::from(proto).rotate_left(4),
        dscp: ip[field::ipv4::TOS] >> 2,
    })
}

/// What a switch reads from an arriving frame and does to it before forwarding: its kind, the
/// flow of a RoCEv2 frame, and the result of decrementing a RoCEv2 frame's TTL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForwardPeek {
    /// The frame's kind, as [`frame_kind`] says.
    pub kind: FrameKind,
    /// The flow of a RoCEv2 frame, as [`peek_roce_flow`] reads it (`None` for other kinds).
    pub flow: Option<RoceFlow>,
    /// For a RoCEv2 frame, what [`super::decrement_ttl`] returned on it (the new TTL, 0 when
    /// the frame must be dropped); `Ok(0)` and the frame untouched for other kinds.
    pub ttl: Result<u8, WireError>,
}

/// [`peek_roce_flow`] and, for a RoCEv2 frame, [`super::decrement_ttl`], in one pass: the
/// switch's whole per-frame read and rewrite.
///
/// The common shape (IPv4 without options, unfragmented, UDP to 4791) is read and its TTL
/// rewritten from one fixed-size borrow of the first 38 bytes, each condition tested once;
/// any other frame goes through the two general functions, so every frame gets the same
/// kind, flow and bytes from either path (a test compares them on random and mutated frames).
/// The TTL is decremented whatever the switch later decides: a frame it then drops (no route)
/// is never seen again, so its bytes do not matter.
#[inline]
pub fn peek_forward(frame: &mut [u8]) -> ForwardPeek {
    use field::{ipv4 as i, udp as u};
    const IP: usize = field::IPV4;
    const UDP: usize = ETH_HEADER_LEN + IPV4_HEADER_LEN;
    if let Some(h) = frame.first_chunk_mut::<{ UDP + UDP_HEADER_LEN }>() {
        let b16 =
            |h: &[u8; UDP + UDP_HEADER_LEN], at: usize| u16::from_be_bytes([h[at], h[at + 1]]);
        // Version 4 and IHL 5 in one byte; neither "more fragments" nor an offset (the flags'
        // other two bits are allowed, as in `udp`).
        let flags_frag = b16(h, IP + i::FLAGS_FRAG.start);
        if b16(h, field::eth::ETHERTYPE.start) == ETHERTYPE_IPV4
            && h[IP + i::VER_IHL] == 0x45
            && flags_frag & 0x3FFF == 0
            && h[IP + i::PROTOCOL] == IP_PROTOCOL_UDP
            && b16(h, UDP + u::DST_PORT.start) == ROCEV2_UDP_PORT
        {
            let at = |h: &[u8; UDP + UDP_HEADER_LEN], a: usize| {
                Ipv4Addr::new(h[a], h[a + 1], h[a + 2], h[a + 3])
            };
            let flow = RoceFlow {
                src: at(h, IP + i::SRC.start),
                dst: at(h, IP + i::DST.start),
                udp_src_port: b16(h, UDP + u::SRC_PORT.start),
                dscp: h[IP + i::TOS] >> 2,
            };
            let ttl = super::ttl::decrement_in_header(h);
            return ForwardPeek {
                kind: FrameKind::RoceV2,
                flow: Some(flow),
                ttl: Ok(ttl),
            };
        }
    }
    let (kind, flow) = peek_roce_flow(frame);
    let ttl = match kind {
        FrameKind::RoceV2 => super::decrement_ttl(frame),
        _ => Ok(0),
    };
    ForwardPeek { kind, flow, ttl }
}

/// IPv4 destination address of an IPv4 frame.
#[inline]
pub fn ipv4_dst(frame: &[u8]) -> Option<Ipv4Addr> {
    ipv4(frame).map(|ip| addr(ip, field::ipv4::DST))
}

/// IPv4 source address of an IPv4 frame.
#[inline]
pub fn ipv4_src(frame: &[u8]) -> Option<Ipv4Addr> {
    ipv4(frame).map(|ip| addr(ip, field::ipv4::SRC))
}

/// UDP source port of an IPv4/UDP frame (the ECMP entropy of RoCEv2).
#[inline]
pub fn udp_src_port(frame: &[u8]) -> Option<u16> {
    udp(frame).map(|(_, udp)| be16(udp, field::udp::SRC_PORT))
}

/// ECN codepoint of an IPv4 frame.
#[inline]
pub fn ecn(frame: &[u8]) -> Option<Ecn> {
    ipv4(frame).map(|ip| Ecn::from_bits(ip[field::ipv4::TOS]))
}

/// DSCP of an IPv4 frame.
#[inline]
pub fn dscp(frame: &[u8]) -> Option<u8> {
    ipv4(frame).map(|ip| ip[field::ipv4::TOS] >> 2)
}

/// BTH opcode of a RoCEv2 frame.
pub fn bth_opcode(frame: &[u8]) -> Option<u8> {
    bth_view(frame).map(|bth| bth.get_opcode())
}

/// Rewrites the ECN bits of the IPv4 header in place and fixes the header checksum (switches
/// mark CE this way). The checksum is recomputed over the whole header, so a header that arrived
/// with a wrong checksum leaves with a right one; fabemu never corrupts headers. Whether a
/// codepoint may be changed (RFC 3168: only ECT packets are marked) is the caller's decision.
pub fn set_ecn(frame: &mut [u8], ecn: Ecn) -> Result<(), WireError> {
    let got = frame.len();
    let truncated = |layer, need| WireError::Truncated { layer, need, got };
    let found = ethertype(frame).ok_or(truncated("Ethernet", ETH_HEADER_LEN))?;
    if found != ETHERTYPE_IPV4 {
        return Err(WireError::UnexpectedEthertype {
            expected: ETHERTYPE_IPV4,
            found,
        });
    }
    let ip_bytes = frame
        .get_mut(field::IPV4..)
        .ok_or(truncated("IPv4", field::UDP))?;
    let mut ip = MutableIpv4Packet::new(ip_bytes).ok_or(truncated("IPv4", field::UDP))?;
    if ip.get_version() != 4 {
        return Err(WireError::BadIpVersion(ip.get_version()));
    }
    let ihl = ip.get_header_length();
    if usize::from(ihl) * 4 < IPV4_HEADER_LEN {
        return Err(WireError::UnsupportedIpv4HeaderLength { ihl });
    }
    let need = ETH_HEADER_LEN + usize::from(ihl) * 4;
    if got < need {
        return Err(truncated("IPv4 options", need));
    }
    ip.set_ecn(ecn.bits());
    // pnet's checksum covers IHL * 4 bytes (all present, checked above).
    let checksum = ipv4::checksum(&ip.to_immutable());
    ip.set_checksum(checksum);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::roce::tests::{rfc1071_ok, sample_write_only_imm};
    use crate::wire::{opcode, RoceRepr, MAX_HEADER_LEN, PFC_FRAME_LEN};

    fn frame() -> Vec<u8> {
        let mut buf = [0u8; MAX_HEADER_LEN];
        let n = sample_write_only_imm().emit(&mut buf).unwrap();
        buf[..n].to_vec()
    }

    #[test]
    fn reads_a_roce_frame() {
        let f = frame();
        let repr = sample_write_only_imm();
        assert_eq!(frame_kind(&f), FrameKind::RoceV2);
        assert_eq!(ipv4_dst(&f), Some(repr.dst_ip));
        assert_eq!(ipv4_src(&f), Some(repr.src_ip));
        assert_eq!(udp_src_port(&f), Some(repr.udp_src_port));
        assert_eq!(ecn(&f), Some(Ecn::Ect0));
        assert_eq!(dscp(&f), Some(26));
        assert_eq!(bth_opcode(&f), Some(opcode::WRITE_ONLY_IMM));
        assert_eq!(bth_view(&f).map(|b| b.get_psn()), Some(repr.bth.psn));
    }

    #[test]
    fn set_ecn_marks_and_keeps_checksum_valid() {
        let mut f = frame();
        for mark in [Ecn::Ce, Ecn::NotEct, Ecn::Ect1, Ecn::Ect0, Ecn::Ce] {
            set_ecn(&mut f, mark).unwrap();
            assert_eq!(ecn(&f), Some(mark));
            assert_eq!(dscp(&f), Some(26), "DSCP untouched");
            assert!(rfc1071_ok(&f[field::IPV4..field::UDP]));
            let parsed = RoceRepr::parse(&f).unwrap();
            assert_eq!(
                parsed,
                RoceRepr {
                    ecn: mark,
                    ..sample_write_only_imm()
                }
            );
        }
        // Only the TOS byte and the checksum changed.
        let orig = frame();
        let changed: Vec<usize> = (0..f.len()).filter(|&i| f[i] != orig[i]).collect();
        assert!(changed.contains(&15), "{changed:?}");
        assert!(
            changed.iter().all(|i| [15, 24, 25].contains(i)),
            "{changed:?}"
        );
    }

    #[test]
    fn set_ecn_rejects_non_ipv4_and_truncated() {
        let mut pfc = [0u8; PFC_FRAME_LEN];
        PfcPauseRepr::xon([2, 0, 0, 0, 0, 1], 3)
            .emit(&mut pfc)
            .unwrap();
        assert!(matches!(
            set_ecn(&mut pfc, Ecn::Ce),
            Err(WireError::UnexpectedEthertype { .. })
        ));
        let f = frame();
        for cut in 0..field::UDP {
            let mut short = f[..cut].to_vec();
            assert!(matches!(
                set_ecn(&mut short, Ecn::Ce),
                Err(WireError::Truncated { .. })
            ));
            assert_eq!(short, f[..cut], "untouched on error");
        }
    }

    #[test]
    fn classifies_other_frames() {
        let mut pfc = [0u8; PFC_FRAME_LEN];
        PfcPauseRepr::xoff([2, 0, 0, 0, 0, 1], 3, 100)
            .emit(&mut pfc)
            .unwrap();
        assert_eq!(frame_kind(&pfc), FrameKind::PfcPause);
        assert_eq!(ipv4_dst(&pfc), None);
        assert_eq!(bth_opcode(&pfc), None);

        let mut not_roce = frame();
        not_roce[37] = 0x35; // UDP destination 4661
        assert_eq!(frame_kind(&not_roce), FrameKind::Other);
        assert_eq!(bth_opcode(&not_roce), None);
        assert_eq!(udp_src_port(&not_roce), Some(0xC0DE));

        let mut tcp = frame();
        tcp[23] = 6;
        assert_eq!(frame_kind(&tcp), FrameKind::Other);
        assert_eq!(udp_src_port(&tcp), None);
        assert!(ipv4_dst(&tcp).is_some());

        assert_eq!(frame_kind(&[]), FrameKind::Other);
        assert_eq!(frame_kind(&frame()[..field::BTH - 1]), FrameKind::Other);
        assert_eq!(ecn(&frame()[..field::UDP - 1]), None);
        assert_eq!(bth_opcode(&frame()[..field::BTH_END - 1]), None);
    }

    /// The view-based readers the direct reads replaced: the reference they are checked
    /// against.
    mod views {
        use super::super::{ETHERTYPE_IPV4, IPV4_MORE_FRAGMENTS};
        use crate::wire::{field, IPV4_HEADER_LEN, IP_PROTOCOL_UDP, ROCEV2_UDP_PORT};
        use pnet_packet::ethernet::EthernetPacket;
        use pnet_packet::ipv4::Ipv4Packet;
        use pnet_packet::udp::UdpPacket;
        use std::net::Ipv4Addr;

        fn ipv4(frame: &[u8]) -> Option<Ipv4Packet<'_>> {
            if EthernetPacket::new(frame)?.get_ethertype().0 != ETHERTYPE_IPV4 {
                return None;
            }
            let ip = Ipv4Packet::new(frame.get(field::IPV4..)?)?;
            (ip.get_version() == 4).then_some(ip)
        }

        fn udp(frame: &[u8]) -> Option<UdpPacket<'_>> {
            let ip = ipv4(frame)?;
            let unfragmented =
                ip.get_flags() & IPV4_MORE_FRAGMENTS == 0 && ip.get_fragment_offset() == 0;
            if ip.get_next_level_protocol().0 != IP_PROTOCOL_UDP || !unfragmented {
                return None;
            }
            let ihl = usize::from(ip.get_header_length()) * 4;
            if ihl < IPV4_HEADER_LEN {
                return None;
            }
            UdpPacket::new(frame.get(field::IPV4 + ihl..)?)
        }

        /// (RoCEv2?, src, dst, UDP source port, DSCP, ECN bits) as the views read them.
        #[allow(clippy::type_complexity)]
        pub(super) fn read(
            frame: &[u8],
        ) -> (bool, Option<(Ipv4Addr, Ipv4Addr, u8, u8)>, Option<u16>) {
            let ip = ipv4(frame).map(|ip| {
                (
                    Ipv4Addr::from(ip.get_source().octets()),
                    Ipv4Addr::from(ip.get_destination().octets()),
                    ip.get_dscp(),
                    ip.get_ecn(),
                )
            });
            let udp = udp(frame);
            let roce = udp
                .as_ref()
                .is_some_and(|u| u.get_destination() == ROCEV2_UDP_PORT);
            (roce, ip, udp.map(|u| u.get_source()))
        }
    }

    /// The general path of [`peek_forward`]: what it must agree with.
    fn forward_general(f: &mut [u8]) -> ForwardPeek {
        let (kind, flow) = peek_roce_flow(f);
        let ttl = match kind {
            FrameKind::RoceV2 => crate::wire::decrement_ttl(f),
            _ => Ok(0),
        };
        ForwardPeek { kind, flow, ttl }
    }

    #[test]
    fn peek_forward_takes_the_fixed_path_and_decrements() {
        let mut f = frame();
        let before = f.clone();
        let got = peek_forward(&mut f);
        let mut g = before.clone();
        assert_eq!(got, forward_general(&mut g));
        assert_eq!(f, g);
        assert_eq!(got.ttl, Ok(before[22] - 1));
        assert!(rfc1071_ok(&f[field::IPV4..field::UDP]));
    }

    /// The test frame with `edits` (offset, byte) applied, cut to `cut` bytes.
    fn edited(edits: Vec<(usize, u8)>, cut: usize) -> Vec<u8> {
        let mut f = frame();
        for (at, v) in edits {
            f[at] = v;
        }
        f.truncate(cut);
        f
    }

    proptest::proptest! {
        /// The one-pass read and rewrite gives the kind, flow, TTL and bytes of the general
        /// functions, on frames with up to four of the first 60 bytes overwritten (ethertype,
        /// version, IHL, flags, protocol, ports, TTL) and cut anywhere.
        #[test]
        fn peek_forward_agrees_with_the_general_path(
            edits in proptest::collection::vec((0usize..60, proptest::prelude::any::<u8>()), 0..5),
            cut in 0usize..80,
        ) {
            let mut f = edited(edits, cut);
            let mut g = f.clone();
            proptest::prop_assert_eq!(peek_forward(&mut f), forward_general(&mut g));
            proptest::prop_assert_eq!(f, g);
        }
    }

    proptest::proptest! {
        /// The direct reads agree with the views on frames with up to four bytes of the first
        /// 60 overwritten (ethertype, version, IHL, flags, protocol, ports) and cut anywhere.
        #[test]
        fn reads_agree_with_the_views(
            edits in proptest::collection::vec((0usize..60, proptest::prelude::any::<u8>()), 0..5),
            cut in 0usize..80,
        ) {
            let f = edited(edits, cut);
            let (roce, ip, udp) = views::read(&f);
            proptest::prop_assert_eq!(frame_kind(&f) == FrameKind::RoceV2, roce);
            let (kind, flow) = peek_roce_flow(&f);
            proptest::prop_assert_eq!(kind == FrameKind::RoceV2, roce);
            proptest::prop_assert_eq!(flow.is_some(), roce);
            if let (Some(flow), Some((src, dst, dscp, _)), Some(port)) = (flow, ip, udp) {
                proptest::prop_assert_eq!(
                    (flow.src, flow.dst, flow.udp_src_port, flow.dscp),
                    (src, dst, port, dscp)
                );
            }
            proptest::prop_assert_eq!(ipv4_src(&f), ip.map(|i| i.0));
            proptest::prop_assert_eq!(ipv4_dst(&f), ip.map(|i| i.1));
            proptest::prop_assert_eq!(dscp(&f), ip.map(|i| i.2));
            proptest::prop_assert_eq!(ecn(&f), ip.map(|i| Ecn::from_bits(i.3)));
            proptest::prop_assert_eq!(udp_src_port(&f), udp);
        }
    }
}
