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
//! would add state per QP that every frame touches, and cache misses with it.
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

use super::ib::MAX_24;
use super::{
    field, opcode, AethRepr, Ecn, MacAddr, RethRepr, RoceRepr, WireError, AETH_LEN, ETH_HEADER_LEN,
    ICRC_LEN, IMMDT_LEN, IPV4_HEADER_LEN, MAX_PAD_LEN, RETH_LEN,
};

/// Largest DSCP (6 bits).
const MAX_DSCP: u8 = 63;

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
    /// Bytes between the headers and the pad (the payload, and HPCC's telemetry stack).
    pub payload_len: usize,
    /// Zero bytes after them, before the ICRC (BTH PadCnt, 0..=3): [`super::pad_len`] of the
    /// message bytes the frame carries.
    pub pad: u8,
}

/// A sender's prebuilt Ethernet / IPv4 / UDP / BTH bytes (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeaderTemplate {
    bytes: [u8; field::BTH_END],
    /// One's complement sum (unfolded) of the IPv4 header's 16-bit words with the per-frame
    /// fields (TOS, total length, identification, checksum, destination) zero.
    fixed_sum: u32,
}

/// A sender's own fields when its frames come from a template shared by every sender of a
/// run (see [`HeaderTemplate::emit_common_from`]): its source MAC and IPv4 address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sender {
    /// Source MAC address.
    pub mac: MacAddr,
    /// Source IPv4 address.
    pub ip: Ipv4Addr,
}

impl Sender {
    /// The IPv4 checksum's share of the source address (its two 16-bit words).
    #[inline(always)]
    fn sum(&self) -> u32 {
        let ip = u32::from(self.ip);
        (ip >> 16) + (ip & 0xFFFF)
    }

    /// Writes the source addresses into a frame's header (a no-op on a buffer too short).
    #[inline(always)]
    fn patch(&self, out: &mut [u8]) {
        if let Some(h) = out.first_chunk_mut::<{ field::BTH_END }>() {
            h[field::eth::SRC].copy_from_slice(&self.mac);
            h[field::IPV4 + field::ipv4::SRC.start..field::IPV4 + field::ipv4::SRC.end]
                .copy_from_slice(&self.ip.octets());
        }
    }
}

impl HeaderTemplate {
    /// The template of `repr`'s sender fields (source MAC and address, TTL, and the BTH's
    /// P_Key, SE, MigReq, TVer and FECN); its other fields (PadCnt too: a frame's pad is its
    /// own) are ignored. Errors when those cannot be emitted (a transport version out of range).
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
                pad_count: 0,
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
        self.emit_inner(0, f, buf)
    }

    /// [`HeaderTemplate::emit`] of a template shared by senders (see
    /// [`HeaderTemplate::emit_common_from`]) for the sender `src`: the same bytes as the
    /// emit of the template made with `src`'s addresses.
    pub fn emit_from(
        &self,
        src: &Sender,
        f: &PacketFields,
        buf: &mut [u8],
    ) -> Result<usize, WireError> {
        let n = self.emit_inner(src.sum(), f, buf)?;
        src.patch(buf);
        Ok(n)
    }

    /// [`HeaderTemplate::emit`] with `extra` added to the IPv4 checksum's sum (a shared
    /// template's sender address words).
    #[inline]
    fn emit_inner(&self, extra: u32, f: &PacketFields, buf: &mut [u8]) -> Result<usize, WireError> {
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
        if usize::from(f.pad) > MAX_PAD_LEN {
            return Err(WireError::FieldOutOfRange {
                field: "BTH pad count",
                value: f.pad.into(),
                max: MAX_PAD_LEN as u64,
            });
        }
        let header_len = Self::header_len(f);
        let ip_total = ip_total_len(header_len, f.payload_len + usize::from(f.pad))?;
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
            + extra
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
        // The template's PadCnt is zero.
        h[bth + field::bth::FLAGS] |= f.pad << 4;
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

impl HeaderTemplate {
    /// [`HeaderTemplate::emit`] of the two shapes nearly every frame has, an ACK (a lone AETH)
    /// and a data frame without extension headers, into the first bytes of `out`: the same
    /// bytes, written straight into the frame's storage from the template's words, with the
    /// per-shape checks folded into one test. `None` (nothing written that matters) for any
    /// other shape, for fields out of range and for a short `out`: the caller then takes
    /// [`HeaderTemplate::emit`], which refuses them with its error. Returns the header length.
    ///
    /// What it saves over `emit` (~150 instructions per frame built on benches/fabric64.yaml):
    /// the extension headers' views and the CNP's fill, the copy of the patched template through
    /// a local array, and the checks of `RoceRepr::check` one field at a time.
    #[inline(always)]
    pub fn emit_common(&self, f: &PacketFields, out: &mut [u8]) -> Option<usize> {
        self.emit_common_inner(0, f, out)
    }

    /// [`HeaderTemplate::emit_common`] of a template shared by every sender of a run, made
    /// with the source MAC and IPv4 address zero, for the sender `src`: the same bytes as the
    /// template made with `src`'s addresses gives. A sender then keeps no template of its own
    /// (60 bytes, a cache line of every NIC that each frame built read on
    /// benches/fat_tree1024.yaml, where 1024 NICs do not stay in cache): the shared one stays
    /// cached, and the addresses cost two stores and two additions per frame.
    #[inline(always)]
    pub fn emit_common_from(
        &self,
        src: &Sender,
        f: &PacketFields,
        out: &mut [u8],
    ) -> Option<usize> {
        let n = self.emit_common_inner(src.sum(), f, out)?;
        src.patch(out);
        Some(n)
    }

    /// [`HeaderTemplate::emit_common`] with `extra` added to the IPv4 checksum's sum.
    #[inline(always)]
    fn emit_common_inner(&self, extra: u32, f: &PacketFields, out: &mut [u8]) -> Option<usize> {
        let shape = Self::common_shape(f)?;
        self.write_common(extra, f, shape, out)?;
        Some(shape.header_len)
    }

    /// The checks of [`HeaderTemplate::emit_common`], without writing: the frame's header and
    /// IPv4 total lengths if `f` has one of the two common shapes with its fields in range,
    /// `None` otherwise. With [`HeaderTemplate::write_common_from`], a caller learns the
    /// header's length before it has the storage to write it into (a packet made first, its
    /// header then written in place, not copied twice more on its way).
    #[inline(always)]
    pub fn common_shape(f: &PacketFields) -> Option<CommonShape> {
        let op = f.opcode;
        let header_len = match f.aeth {
            Some(a) if op == opcode::ACK && a.msn <= MAX_24 => field::BTH_END + AETH_LEN,
            None if opcode::is_supported(op)
                && !opcode::has_reth(op)
                && !opcode::has_aeth(op)
                && !opcode::has_immdt(op)
                && op != opcode::CNP =>
            {
                field::BTH_END
            }
            _ => return None,
        };
        if f.reth.is_some()
            || f.immdt.is_some()
            || f.dscp > MAX_DSCP
            || f.dest_qp > MAX_24
            || f.psn > MAX_24
            || usize::from(f.pad) > MAX_PAD_LEN
        {
            return None;
        }
        let ip_total = u16::try_from(
            header_len + f.payload_len + usize::from(f.pad) + ICRC_LEN - ETH_HEADER_LEN,
        )
        .ok()?;
        Some(CommonShape {
            header_len,
            ip_total,
        })
    }

    /// [`HeaderTemplate::emit_common_from`] of a frame whose `shape` was found for `f` by
    /// [`HeaderTemplate::common_shape`]: writes the header into the first
    /// `shape.header_len()` bytes of `out` (nothing, if `out` is shorter).
    #[inline(always)]
    pub fn write_common_from(
        &self,
        src: &Sender,
        f: &PacketFields,
        shape: CommonShape,
        out: &mut [u8],
    ) {
        if self.write_common(src.sum(), f, shape, out).is_some() {
            src.patch(out);
        }
    }

    /// [`HeaderTemplate::write_common_from`] with `extra` added to the IPv4 checksum's sum.
    #[inline(always)]
    fn write_common(
        &self,
        extra: u32,
        f: &PacketFields,
        shape: CommonShape,
        out: &mut [u8],
    ) -> Option<()> {
        use field::{bth as b, ipv4 as i, udp as u};
        const IP: usize = field::IPV4;
        const UDP: usize = field::UDP;
        const BTH: usize = field::BTH;
        let CommonShape {
            header_len,
            ip_total,
        } = shape;
        let (h, aeth) = out
            .get_mut(..header_len)?
            .split_first_chunk_mut::<{ field::BTH_END }>()?;
        h.copy_from_slice(&self.bytes);
        h[field::eth::DST].copy_from_slice(&f.dst_mac);
        let tos = f.dscp << 2 | f.ecn.bits();
        let dst = u32::from(f.dst_ip);
        h[IP + i::TOS] = tos;
        h[IP + i::TOTAL_LEN.start..IP + i::TOTAL_LEN.end].copy_from_slice(&ip_total.to_be_bytes());
        h[IP + i::IDENT.start..IP + i::IDENT.end].copy_from_slice(&f.ip_id.to_be_bytes());
        h[IP + i::DST.start..IP + i::DST.end].copy_from_slice(&dst.to_be_bytes());
        // TOS is the low byte of the first word; the template's is zero.
        let sum = self.fixed_sum
            + extra
            + u32::from(tos)
            + u32::from(ip_total)
            + u32::from(f.ip_id)
            + (dst >> 16)
            + (dst & 0xFFFF);
        h[IP + i::CHECKSUM.start..IP + i::CHECKSUM.end]
            .copy_from_slice(&fold_checksum(sum).to_be_bytes());
        h[UDP + u::SRC_PORT.start..UDP + u::SRC_PORT.end]
            .copy_from_slice(&f.udp_src_port.to_be_bytes());
        h[UDP + u::LENGTH.start..UDP + u::LENGTH.end]
            .copy_from_slice(&(ip_total - IPV4_HEADER_LEN as u16).to_be_bytes());
        h[BTH + b::OPCODE] = f.opcode;
        // The template's PadCnt is zero.
        h[BTH + b::FLAGS] |= f.pad << 4;
        // FECN/BECN byte and destination QP in one word: the template's FECN kept, BECN set.
        let fb = u32::from(h[BTH + b::FECN_BECN] & !0x40) | if f.becn { 0x40 } else { 0 };
        h[BTH + b::FECN_BECN..BTH + b::DEST_QP.end]
            .copy_from_slice(&(fb << 24 | f.dest_qp).to_be_bytes());
        // AckReq byte (its reserved bits zero) and PSN in one word.
        let ack_req = if f.ack_req { 0x8000_0000 } else { 0 };
        h[BTH + b::ACK_REQ..BTH + b::PSN.end].copy_from_slice(&(ack_req | f.psn).to_be_bytes());
        if let (Some(a), Some(w)) = (f.aeth, aeth.first_chunk_mut::<AETH_LEN>()) {
            *w = (u32::from(a.syndrome) << 24 | a.msn).to_be_bytes();
        }
        Some(())
    }
}

/// What [`HeaderTemplate::common_shape`] found of a frame: its header's length and its IPv4
/// total length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CommonShape {
    header_len: usize,
    ip_total: u16,
}

impl CommonShape {
    /// The frame's header length (Ethernet to the AETH, if any).
    #[inline(always)]
    pub fn header_len(&self) -> usize {
        self.header_len
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
            (
                prop_oneof![0usize..5000, 65_000usize..70_000],
                prop_oneof![0u8..4, any::<u8>()],
            ),
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
                    (len, pad),
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
                        pad,
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
                    pad_count: f.pad,
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

    proptest! {
        /// The common shapes' emit writes the general emit's bytes whenever it answers, and
        /// answers for every ACK and extension-less data frame whose fields are in range.
        #[test]
        fn emit_common_equals_emit(sender in arb_sender(), f in arb_fields(), room in 40usize..MAX_HEADER_LEN) {
            let t = HeaderTemplate::new(&sender).unwrap();
            let mut a = [0xAAu8; MAX_HEADER_LEN];
            let mut b = [0x55u8; MAX_HEADER_LEN];
            let rb = t.emit(&f, &mut b[..room]);
            let ra = t.emit_common(&f, &mut a[..room]);
            if let Some(n) = ra {
                prop_assert_eq!(Ok(n), rb.clone());
                prop_assert_eq!(&a[..n], &b[..n]);
            }
            let common = f.reth.is_none() && f.immdt.is_none() && if f.opcode == opcode::ACK {
                f.aeth.is_some()
            } else {
                f.aeth.is_none() && HeaderTemplate::header_len(&f) == field::BTH_END
            };
            if common && rb.is_ok() && room >= field::BTH_END + AETH_LEN {
                prop_assert!(ra.is_some());
            }
        }
    }

    proptest! {
        /// A template shared by senders (source addresses zero) gives each sender the bytes of
        /// its own template, in both emits, and refuses the same.
        #[test]
        fn shared_template_equals_the_senders_own(sender in arb_sender(), f in arb_fields(), room in 40usize..MAX_HEADER_LEN) {
            let own = HeaderTemplate::new(&sender).unwrap();
            let shared = HeaderTemplate::new(&RoceRepr {
                src_mac: [0; 6],
                src_ip: Ipv4Addr::UNSPECIFIED,
                ..sender.clone()
            })
            .unwrap();
            let src = Sender {
                mac: sender.src_mac,
                ip: sender.src_ip,
            };
            let mut a = [0xAAu8; MAX_HEADER_LEN];
            let mut b = [0x55u8; MAX_HEADER_LEN];
            let ra = shared.emit_from(&src, &f, &mut a[..room]);
            let rb = own.emit(&f, &mut b[..room]);
            prop_assert_eq!(&ra, &rb);
            if let Ok(n) = ra {
                prop_assert_eq!(&a[..n], &b[..n]);
            }
            let mut a = [0xAAu8; MAX_HEADER_LEN];
            let mut b = [0x55u8; MAX_HEADER_LEN];
            let ra = shared.emit_common_from(&src, &f, &mut a[..room]);
            let rb = own.emit_common(&f, &mut b[..room]);
            prop_assert_eq!(ra, rb);
            if let Some(n) = ra {
                prop_assert_eq!(&a[..n], &b[..n]);
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
        bad.bth.tver = 16;
        assert!(HeaderTemplate::new(&bad).is_err());
        // A frame's pad is its own: the template's is not kept.
        bad.bth.tver = 0;
        bad.bth.pad_count = 3;
        let t = HeaderTemplate::new(&bad).unwrap();
        assert_eq!(t.bytes[field::BTH + field::bth::FLAGS] & 0x30, 0);
    }
}
