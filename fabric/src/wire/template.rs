//! Header templates: the Ethernet / IPv4 / UDP / BTH bytes that every frame of one sender
//! shares, emitted once through [`RoceRepr::emit`], so that a frame costs a copy of 54 bytes
//! and a few patched fields instead of a full emit (`pnet_packet`'s setters and a checksum
//! walk: ~420 instructions per frame on benches/fabric64.yaml, two thirds of building it).
//!
//! The template holds the sender's fields (source MAC and IPv4 address, TTL, P_Key, and the
//! constants: ethertype, IPv4 version, DF, protocol, UDP destination port). A frame's
//! [`PacketFields`] supply the rest: the peer's MAC and address, DSCP/ECN, the QP's UDP source
//! port and destination QP, and the per-frame opcode, PSN, flags, identification, lengths and
//! extension headers. One template per sender rather than per queue pair: per-QP templates
//! (the peer's fields prebuilt too) cut a few more instructions but added 58 bytes of state per
//! QP that every frame touches (4032 QPs on fabric64: +10% misses of a 1 MiB cache).
//!
//! The template keeps the one's complement sum of the IPv4 words it fixes, so the checksum is
//! a few additions and a fold (RFC 1071 sums are order-free: this is the very checksum a full
//! emit computes). [`HeaderTemplate::emit`] writes exactly the bytes [`RoceRepr::emit`] writes
//! for the same fields, and refuses exactly what it refuses (a proptest below compares them);
//! frames, pcaps and tshark decodes are unchanged.

use super::ib::check_24;
use super::ib::{MutableAethPacket, MutableImmDtPacket, MutableRethPacket};
use super::roce::{check_opcode_fields, fold_checksum, ip_total_len, stack_len};
use std::net::Ipv4Addr;

use super::{
    field, opcode, AethRepr, Ecn, MacAddr, RethRepr, RoceRepr, WireError, AETH_LEN, IMMDT_LEN,
    IPV4_HEADER_LEN, RETH_LEN,
};

/// A frame's fields beyond its sender's (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PacketFields {
    /// Ethernet destination.
    pub dst_mac: MacAddr,
    /// IPv4 destination.
    pub dst_ip: Ipv4Addr,
    /// DSCP (0..=63).
    pub dscp: u8,
    /// ECN codepoint.
    pub ecn: Ecn,
    /// UDP source port (the QP's ECMP entropy).
    pub udp_src_port: u16,
    /// BTH destination QP (24 bits).
    pub dest_qp: u32,
    /// BTH opcode.
    pub opcode: u8,
    /// BTH PSN (24 bits).
    pub psn: u32,
    /// BTH AckReq.
    pub ack_req: bool,
    /// BTH BECN.
    pub becn: bool,
    /// IPv4 identification.
    pub ip_id: u16,
    /// RDMA extended header: must be present exactly when [`opcode::has_reth`].
    pub reth: Option<RethRepr>,
    /// ACK extended header: must be present exactly when [`opcode::has_aeth`].
    pub aeth: Option<AethRepr>,
    /// Immediate data: must be present exactly when [`opcode::has_immdt`].
    pub immdt: Option<u32>,
    /// Bytes between the headers and the ICRC.
    pub payload_len: usize,
}

/// A sender's prebuilt Ethernet / IPv4 / UDP / BTH bytes (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeaderTemplate {
    bytes: [u8; field::BTH_END],
    /// One's complement sum (unfolded) of the IPv4 header's 16-bit words with the per-frame
    /// fields (TOS, total length, identification, checksum, destination) zero.
    fixed_sum: u32,
}

impl HeaderTemplate {
    /// The template of `repr`'s sender fields (source MAC and address, TTL, and the BTH's
    /// P_Key, SE, MigReq, PadCnt, TVer and FECN); its other fields are ignored. Errors when those
    /// cannot be emitted (a pad count or transport version out of range).
    pub fn new(repr: &RoceRepr) -> Result<HeaderTemplate, WireError> {
        let base = RoceRepr {
            dst_mac: [0; 6],
            dst_ip: Ipv4Addr::UNSPECIFIED,
            dscp: 0,
            ecn: Ecn::NotEct,
            ip_id: 0,
            udp_src_port: 0,
            bth: super::BthRepr {
                opcode: opcode::SEND_MIDDLE,
                dest_qp: 0,
                psn: 0,
                ack_req: false,
                becn: false,
                ..repr.bth
            },
            reth: None,
            aeth: None,
            immdt: None,
            payload_len: 0,
            ..repr.clone()
        };
        let mut bytes = [0; field::BTH_END];
        base.emit(&mut bytes)?;
        // Zero what a frame sets, so the sum below leaves it out.
        let ip = field::IPV4;
        for r in [
            field::ipv4::TOTAL_LEN,
            field::ipv4::CHECKSUM,
            field::ipv4::IDENT,
        ] {
            bytes[ip + r.start..ip + r.end].fill(0);
        }
        let sum = (field::IPV4..field::UDP)
            .step_by(2)
            .map(|w| u32::from(u16::from_be_bytes([bytes[w], bytes[w + 1]])))
            .sum();
        Ok(HeaderTemplate {
            bytes,
            fixed_sum: sum,
        })
    }

    /// Header bytes of a frame with `f`'s opcode (the fixed stack plus its extension headers).
    pub fn header_len(f: &PacketFields) -> usize {
        stack_len(
            f.opcode,
            f.reth.is_some(),
            f.aeth.is_some(),
            f.immdt.is_some(),
        )
    }

    /// Writes the header of the frame with fields `f` into `buf` (what [`RoceRepr::emit`] would
    /// write for the template's repr with `f`'s fields); returns the header length.
    pub fn emit(&self, f: &PacketFields, buf: &mut [u8]) -> Result<usize, WireError> {
        let op = f.opcode;
        // The checks of `RoceRepr::check`, in its order, for the fields that vary.
        check_opcode_fields(
            op,
            f.reth.is_some(),
            f.aeth.is_some(),
            f.immdt.is_some(),
            f.dscp,
        )?;
        check_24("BTH destination QP", f.dest_qp)?;
        check_24("BTH PSN", f.psn)?;
        let header_len = Self::header_len(f);
        let ip_total = ip_total_len(header_len, f.payload_len)?;
        let got = buf.len();
        let short = WireError::BufferTooShort {
            need: header_len,
            got,
        };
        let Some(buf) = buf.get_mut(..header_len) else {
            return Err(short);
        };
        let (out, mut rest) = buf.split_at_mut(field::BTH_END);
        // Patched in a fixed-size copy (constant offsets, no bounds checks), then written once.
        let mut h = self.bytes;
        h[field::eth::DST].copy_from_slice(&f.dst_mac);
        let ip = field::IPV4;
        let tos = f.dscp << 2 | f.ecn.bits();
        let dst = f.dst_ip.octets();
        h[ip + field::ipv4::TOS] = tos;
        h[ip + field::ipv4::TOTAL_LEN.start..ip + field::ipv4::TOTAL_LEN.end]
            .copy_from_slice(&ip_total.to_be_bytes());
        h[ip + field::ipv4::IDENT.start..ip + field::ipv4::IDENT.end]
            .copy_from_slice(&f.ip_id.to_be_bytes());
        h[ip + field::ipv4::DST.start..ip + field::ipv4::DST.end].copy_from_slice(&dst);
        // TOS is the low byte of the first word; the template's is zero.
        let sum = self.fixed_sum
            + u32::from(tos)
            + u32::from(ip_total)
            + u32::from(f.ip_id)
            + u32::from(u16::from_be_bytes([dst[0], dst[1]]))
            + u32::from(u16::from_be_bytes([dst[2], dst[3]]));
        h[ip + field::ipv4::CHECKSUM.start..ip + field::ipv4::CHECKSUM.end]
            .copy_from_slice(&fold_checksum(sum).to_be_bytes());
        let udp = field::UDP;
        h[udp + field::udp::SRC_PORT.start..udp + field::udp::SRC_PORT.end]
            .copy_from_slice(&f.udp_src_port.to_be_bytes());
        h[udp + field::udp::LENGTH.start..udp + field::udp::LENGTH.end]
            .copy_from_slice(&(ip_total - IPV4_HEADER_LEN as u16).to_be_bytes());

        let bth = field::BTH;
        h[bth + field::bth::OPCODE] = op;
        let qp = f.dest_qp.to_be_bytes();
        h[bth + field::bth::DEST_QP.start..bth + field::bth::DEST_QP.end].copy_from_slice(&qp[1..]);
        let fb = &mut h[bth + field::bth::FECN_BECN];
        *fb = (*fb & !0x40) | if f.becn { 0x40 } else { 0 };
        h[bth + field::bth::ACK_REQ] = if f.ack_req { 0x80 } else { 0 };
        let psn = f.psn.to_be_bytes();
        h[bth + field::bth::PSN.start..bth + field::bth::PSN.end].copy_from_slice(&psn[1..]);
        out.copy_from_slice(&h);

        // Extension headers in IBTA order through their views, as `RoceRepr::emit` writes them.
        if let Some(reth) = &f.reth {
            let (bytes, tail) = std::mem::take(&mut rest).split_at_mut(RETH_LEN);
            rest = tail;
            if let Some(mut v) = MutableRethPacket::new(bytes) {
                reth.emit(&mut v);
            }
        }
        if let Some(aeth) = &f.aeth {
            let (bytes, tail) = std::mem::take(&mut rest).split_at_mut(AETH_LEN);
            rest = tail;
            if let Some(mut v) = MutableAethPacket::new(bytes) {
                aeth.emit(&mut v)?;
            }
        }
        if let Some(imm) = f.immdt {
            let (bytes, tail) = std::mem::take(&mut rest).split_at_mut(IMMDT_LEN);
            rest = tail;
            if let Some(mut v) = MutableImmDtPacket::new(bytes) {
                v.set_imm(imm);
            }
        }
        // A CNP's reserved block (empty for other opcodes).
        rest.fill(0);
        Ok(header_len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::ib::MAX_24;
    use crate::wire::{BthRepr, MAX_HEADER_LEN};
    use proptest::prelude::*;

    /// A sender: its fields, random; the rest left at values the frame overrides.
    fn arb_sender() -> impl Strategy<Value = RoceRepr> {
        (
            any::<[u8; 6]>(),
            any::<u32>(),
            any::<u8>(),
            any::<u16>(),
            any::<(bool, bool, bool)>(),
            0u8..4,
            0u8..16,
        )
            .prop_map(
                |(src_mac, s, ttl, pkey, (solicited, mig_req, fecn), pad_count, tver)| RoceRepr {
                    src_mac,
                    dst_mac: [0xEE; 6],
                    src_ip: Ipv4Addr::from(s),
                    dst_ip: Ipv4Addr::BROADCAST,
                    dscp: 7,
                    ecn: Ecn::Ce,
                    ttl,
                    ip_id: 9,
                    udp_src_port: 9,
                    bth: BthRepr {
                        pkey,
                        solicited,
                        mig_req,
                        fecn,
                        pad_count,
                        tver,
                        dest_qp: 9,
                        ..BthRepr::default()
                    },
                    reth: None,
                    aeth: None,
                    immdt: None,
                    payload_len: 0,
                },
            )
    }

    fn arb_fields() -> impl Strategy<Value = PacketFields> {
        (
            (
                any::<[u8; 6]>(),
                any::<u32>(),
                prop_oneof![0u8..64, any::<u8>()],
                0u8..4,
                any::<u16>(),
                prop_oneof![0u32..=MAX_24, any::<u32>()],
            ),
            prop_oneof![0u8..=0x11, Just(opcode::CNP), any::<u8>()],
            prop_oneof![0u32..=MAX_24, any::<u32>()],
            any::<(bool, bool)>(),
            any::<u16>(),
            any::<(bool, bool, bool, bool)>(),
            (
                any::<u64>(),
                any::<u32>(),
                any::<u32>(),
                any::<u8>(),
                any::<u32>(),
            ),
            prop_oneof![0usize..5000, 65_000usize..70_000],
        )
            .prop_map(
                |(
                    (dst_mac, d, dscp, ecn, udp_src_port, dest_qp),
                    op,
                    psn,
                    (ack_req, becn),
                    ip_id,
                    (exact, r, a, i),
                    (va, rkey, dma, syn, msn),
                    len,
                )| {
                    // Mostly the extension headers the opcode wants; sometimes any.
                    let (r, a, i) = if exact {
                        (
                            opcode::has_reth(op),
                            opcode::has_aeth(op),
                            opcode::has_immdt(op),
                        )
                    } else {
                        (r, a, i)
                    };
                    PacketFields {
                        dst_mac,
                        dst_ip: Ipv4Addr::from(d),
                        dscp,
                        ecn: Ecn::from_bits(ecn),
                        udp_src_port,
                        dest_qp,
                        opcode: op,
                        psn,
                        ack_req,
                        becn,
                        ip_id,
                        reth: r.then_some(RethRepr {
                            va,
                            rkey,
                            dma_len: dma,
                        }),
                        aeth: a.then_some(AethRepr { syndrome: syn, msn }),
                        immdt: i.then_some(rkey ^ dma),
                        payload_len: len,
                    }
                },
            )
    }

    proptest! {
        /// A template's frame is byte for byte the full emit's, and both refuse the same.
        #[test]
        fn emit_equals_the_full_emit(sender in arb_sender(), f in arb_fields(), room in 40usize..MAX_HEADER_LEN) {
            let t = HeaderTemplate::new(&sender).unwrap();
            let full = RoceRepr {
                dst_mac: f.dst_mac,
                dst_ip: f.dst_ip,
                dscp: f.dscp,
                ecn: f.ecn,
                ip_id: f.ip_id,
                udp_src_port: f.udp_src_port,
                bth: BthRepr {
                    opcode: f.opcode,
                    dest_qp: f.dest_qp,
                    psn: f.psn,
                    ack_req: f.ack_req,
                    becn: f.becn,
                    ..sender.bth
                },
                reth: f.reth,
                aeth: f.aeth,
                immdt: f.immdt,
                payload_len: f.payload_len,
                ..sender.clone()
            };
            let mut a = [0xAAu8; MAX_HEADER_LEN];
            let mut b = [0x55u8; MAX_HEADER_LEN];
            let ra = t.emit(&f, &mut a[..room]);
            let rb = full.emit(&mut b[..room]);
            prop_assert_eq!(&ra, &rb);
            if let Ok(n) = ra {
                prop_assert_eq!(&a[..n], &b[..n]);
                prop_assert_eq!(RoceRepr::parse(&a[..n]), Ok(full));
            }
        }
    }

    #[test]
    fn new_refuses_what_emit_refuses() {
        let mut bad = RoceRepr::cnp(
            [0; 6],
            [0; 6],
            Ipv4Addr::LOCALHOST,
            Ipv4Addr::LOCALHOST,
            1,
            2,
        );
        bad.bth.pad_count = 4;
        assert!(HeaderTemplate::new(&bad).is_err());
    }
}
