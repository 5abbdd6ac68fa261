//! A whole RoCEv2 header stack: Ethernet II / IPv4 / UDP (destination 4791) / BTH / the
//! extension headers the opcode implies (/ 16 reserved bytes for a CNP). Ethernet, IPv4 and UDP
//! go through `pnet_packet`'s views; the InfiniBand headers through the `pnet_macros` views in
//! `ib.rs`.

use std::net::Ipv4Addr;

use pnet_packet::ethernet::{EtherType, MutableEthernetPacket};
use pnet_packet::ip::IpNextHeaderProtocol;
use pnet_packet::ipv4::{self, Ipv4Flags, MutableIpv4Packet};
use pnet_packet::udp::MutableUdpPacket;

use super::ib::{
    AethPacket, AethRepr, BthRepr, ImmDtPacket, MutableAethPacket, MutableBthPacket,
    MutableImmDtPacket, MutableRethPacket, RethPacket, RethRepr,
};
use super::{
    field, opcode, Ecn, MacAddr, WireError, AETH_LEN, BTH_LEN, CNP_RESERVED_LEN, ETHERTYPE_IPV4,
    ETH_HEADER_LEN, ICRC_LEN, IMMDT_LEN, IPV4_HEADER_LEN, IP_PROTOCOL_UDP, RETH_LEN,
    ROCEV2_UDP_PORT, UDP_HEADER_LEN,
};

/// DSCP that [`RoceRepr::cnp`] uses: 48 (CS6), the NVIDIA/Mellanox default `cnp_dscp`, so CNPs
/// can ride a high-priority class past the congestion they report.
pub const CNP_DSCP: u8 = 48;
/// TTL of the CNPs [`RoceRepr::cnp`] builds (the Linux default).
const CNP_TTL: u8 = 64;
/// P_Key of CNPs (the default partition, as the RoCEv2 annex requires).
const CNP_PKEY: u16 = 0xFFFF;
/// Largest DSCP (6 bits).
const MAX_DSCP: u8 = 63;
/// IHL of an IPv4 header without options, in 32-bit words.
const IPV4_IHL_NO_OPTIONS: u8 = 5;
/// Flag bit saying more fragments follow.
const IPV4_MORE_FRAGMENTS: u8 = 0b001;

/// Splits the first `len` bytes off `rest` (which keeps the remainder), or `None` if it is
/// shorter.
fn split_off_front<'a>(rest: &mut &'a mut [u8], len: usize) -> Option<&'a mut [u8]> {
    let (front, tail) = std::mem::take(rest).split_at_mut_checked(len)?;
    *rest = tail;
    Some(front)
}

/// The IPv4 header checksum of `header` (RFC 1071: the one's complement of the one's
/// complement sum of its 16-bit words, the checksum word itself skipped), what
/// `pnet_packet::ipv4::checksum` computes, without its slice walking.
#[inline]
pub(crate) fn ipv4_checksum(header: &[u8; IPV4_HEADER_LEN]) -> u16 {
    let skip = field::ipv4::CHECKSUM.start / 2;
    let mut sum: u32 = 0;
    for (w, pair) in header.chunks_exact(2).enumerate() {
        if w != skip {
            sum += u32::from(u16::from_be_bytes([pair[0], pair[1]]));
        }
    }
    fold_checksum(sum)
}

/// Folds a 32-bit one's complement sum to 16 bits and complements it.
#[inline]
pub(crate) fn fold_checksum(mut sum: u32) -> u16 {
    while sum >> 16 != 0 {
        sum = (sum >> 16) + (sum & 0xFFFF);
    }
    !(sum as u16)
}

/// What [`RoceRepr::parse_extensions`] reads after the BTH: RETH, AETH, ImmDt and the payload
/// length.
type Extensions = (Option<RethRepr>, Option<AethRepr>, Option<u32>, usize);

/// One RoCEv2 packet's headers: Ethernet II / IPv4 / UDP(dst 4791) / BTH / \[RETH\] /
/// \[AETH\] / \[ImmDt\] (/ 16 reserved bytes for a CNP).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoceRepr {
    /// Ethernet source.
    pub src_mac: MacAddr,
    /// Ethernet destination.
    pub dst_mac: MacAddr,
    /// IPv4 source.
    pub src_ip: Ipv4Addr,
    /// IPv4 destination.
    pub dst_ip: Ipv4Addr,
    /// DSCP: the high 6 bits of TOS (0..=63); switches map it to a priority class.
    pub dscp: u8,
    /// ECN codepoint: the low 2 bits of TOS.
    pub ecn: Ecn,
    /// IPv4 time to live.
    pub ttl: u8,
    /// IPv4 identification.
    pub ip_id: u16,
    /// UDP source port: per-QP entropy that ECMP hashes on.
    pub udp_src_port: u16,
    /// Base Transport Header.
    pub bth: BthRepr,
    /// RDMA extended header: present exactly when [`opcode::has_reth`].
    pub reth: Option<RethRepr>,
    /// ACK extended header: present exactly when [`opcode::has_aeth`].
    pub aeth: Option<AethRepr>,
    /// Immediate data: present exactly when [`opcode::has_immdt`].
    pub immdt: Option<u32>,
    /// Payload bytes after the headers (0 for ACK/NAK/CNP); the `bth.pad_count` zero bytes
    /// that align it to 4 (see [`super::pad_len`]) follow it, before the ICRC, and are not
    /// counted here.
    pub payload_len: usize,
}

/// Bytes before the payload of a frame with opcode `op` and the extension headers present (a
/// CNP's 16 reserved bytes count as header): shared by [`RoceRepr::header_len`] and the header
/// templates.
pub(crate) fn stack_len(op: u8, reth: bool, aeth: bool, immdt: bool) -> usize {
    let mut len = field::BTH_END;
    if reth {
        len += RETH_LEN;
    }
    if aeth {
        len += AETH_LEN;
    }
    if immdt {
        len += IMMDT_LEN;
    }
    if op == opcode::CNP {
        len += CNP_RESERVED_LEN;
    }
    len
}

/// The checks of the fields that vary per frame before the BTH's own (supported opcode,
/// extension headers matching it, DSCP width), in the order [`RoceRepr::check`] makes them:
/// shared with the header templates, so that both refuse the same frames with the same error.
pub(crate) fn check_opcode_fields(
    op: u8,
    reth: bool,
    aeth: bool,
    immdt: bool,
    dscp: u8,
) -> Result<(), WireError> {
    if !opcode::is_supported(op) {
        return Err(WireError::UnsupportedOpcode(op));
    }
    let mismatch = |what| Err(WireError::ExtensionMismatch { opcode: op, what });
    if reth != opcode::has_reth(op) {
        return mismatch(if reth {
            "RETH present but the opcode has none"
        } else {
            "RETH missing"
        });
    }
    if aeth != opcode::has_aeth(op) {
        return mismatch(if aeth {
            "AETH present but the opcode has none"
        } else {
            "AETH missing"
        });
    }
    if immdt != opcode::has_immdt(op) {
        return mismatch(if immdt {
            "ImmDt present but the opcode has none"
        } else {
            "ImmDt missing"
        });
    }
    if dscp > MAX_DSCP {
        return Err(WireError::FieldOutOfRange {
            field: "DSCP",
            value: dscp.into(),
            max: MAX_DSCP.into(),
        });
    }
    Ok(())
}

/// The IPv4 total length of a frame of `header_len` header bytes and `payload_len` payload
/// (its pad included): everything after the Ethernet header, ICRC included, if it fits 16 bits.
pub(crate) fn ip_total_len(header_len: usize, payload_len: usize) -> Result<u16, WireError> {
    let len = header_len + payload_len + ICRC_LEN - ETH_HEADER_LEN;
    u16::try_from(len).map_err(|_| WireError::FieldOutOfRange {
        field: "IPv4 total length (payload too long)",
        value: len as u64,
        max: u16::MAX.into(),
    })
}

impl RoceRepr {
    /// All bytes before the payload (a CNP's 16 reserved bytes count as header).
    pub fn header_len(&self) -> usize {
        stack_len(
            self.bth.opcode,
            self.reth.is_some(),
            self.aeth.is_some(),
            self.immdt.is_some(),
        )
    }

    /// The frame without FCS: headers, payload, pad and ICRC.
    pub fn frame_len(&self) -> usize {
        self.header_len() + self.payload_len + usize::from(self.bth.pad_count) + ICRC_LEN
    }

    /// Sets `bth.pad_count` to the pad that `payload_len` needs ([`super::pad_len`]), as a
    /// sender does; returns the repr.
    pub fn padded(mut self) -> RoceRepr {
        self.bth.pad_count = super::pad_len(self.payload_len) as u8;
        self
    }

    /// Checks the fields fit their wire widths and the extension headers match the opcode.
    pub fn check(&self) -> Result<(), WireError> {
        check_opcode_fields(
            self.bth.opcode,
            self.reth.is_some(),
            self.aeth.is_some(),
            self.immdt.is_some(),
            self.dscp,
        )?;
        self.bth.check()?;
        self.ip_total_len()?;
        Ok(())
    }

    /// The IPv4 total length: everything after the Ethernet header, pad and ICRC included.
    fn ip_total_len(&self) -> Result<u16, WireError> {
        ip_total_len(
            self.header_len(),
            self.payload_len + usize::from(self.bth.pad_count),
        )
    }

    /// Writes [`header_len`](Self::header_len) bytes into `buf[..]`: IPv4 total length and UDP
    /// length count payload + ICRC; IPv4 header checksum valid; DF set; protocol 17; UDP checksum
    /// 0 (allowed for RoCEv2, whose integrity check is the ICRC). Errors if `buf` is too short or
    /// a field is out of range (see [`RoceRepr::check`]). Returns the bytes written.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize, WireError> {
        self.check()?;
        let header_len = self.header_len();
        let got = buf.len();
        // Lengths are checked once here; the view constructors below cannot fail after it.
        let short = || WireError::BufferTooShort {
            need: header_len,
            got,
        };
        let buf = buf.get_mut(..header_len).ok_or_else(short)?;
        let ip_total = self.ip_total_len()?;

        let (eth_bytes, rest) = buf.split_at_mut(field::IPV4);
        let mut eth = MutableEthernetPacket::new(eth_bytes).ok_or_else(short)?;
        eth.set_destination(self.dst_mac.into());
        eth.set_source(self.src_mac.into());
        eth.set_ethertype(EtherType(ETHERTYPE_IPV4));

        let (ip_bytes, rest) = rest.split_at_mut(IPV4_HEADER_LEN);
        let mut ip = MutableIpv4Packet::new(ip_bytes).ok_or_else(short)?;
        ip.set_version(4);
        ip.set_header_length(IPV4_IHL_NO_OPTIONS);
        ip.set_dscp(self.dscp);
        ip.set_ecn(self.ecn.bits());
        ip.set_total_length(ip_total);
        ip.set_identification(self.ip_id);
        ip.set_flags(Ipv4Flags::DontFragment);
        ip.set_fragment_offset(0);
        ip.set_ttl(self.ttl);
        ip.set_next_level_protocol(IpNextHeaderProtocol(IP_PROTOCOL_UDP));
        ip.set_source(self.src_ip.octets().into());
        ip.set_destination(self.dst_ip.octets().into());
        ip.set_checksum(0);
        let checksum = ipv4::checksum(&ip.to_immutable());
        ip.set_checksum(checksum);

        let (udp_bytes, rest) = rest.split_at_mut(UDP_HEADER_LEN);
        let mut udp = MutableUdpPacket::new(udp_bytes).ok_or_else(short)?;
        udp.set_source(self.udp_src_port);
        udp.set_destination(ROCEV2_UDP_PORT);
        udp.set_length(ip_total - IPV4_HEADER_LEN as u16);
        udp.set_checksum(0);

        let mut rest = rest;
        let bytes = split_off_front(&mut rest, BTH_LEN).ok_or_else(short)?;
        self.bth
            .emit(&mut MutableBthPacket::new(bytes).ok_or_else(short)?)?;
        // Extension headers in IBTA order: RETH, AETH, ImmDt; then a CNP's reserved bytes.
        if let Some(reth) = &self.reth {
            let bytes = split_off_front(&mut rest, RETH_LEN).ok_or_else(short)?;
            reth.emit(&mut MutableRethPacket::new(bytes).ok_or_else(short)?);
        }
        if let Some(aeth) = &self.aeth {
            let bytes = split_off_front(&mut rest, AETH_LEN).ok_or_else(short)?;
            aeth.emit(&mut MutableAethPacket::new(bytes).ok_or_else(short)?)?;
        }
        if let Some(imm) = self.immdt {
            let bytes = split_off_front(&mut rest, IMMDT_LEN).ok_or_else(short)?;
            MutableImmDtPacket::new(bytes)
                .ok_or_else(short)?
                .set_imm(imm);
        }
        // Whatever is left is the CNP's reserved block (empty for other opcodes).
        rest.fill(0);
        Ok(header_len)
    }

    /// Emits the whole frame: headers, `payload` (which must be `payload_len` bytes), the
    /// `bth.pad_count` zero bytes of pad and the ICRC over all of them. Returns
    /// [`frame_len`](Self::frame_len).
    pub fn emit_frame(&self, payload: &[u8], buf: &mut [u8]) -> Result<usize, WireError> {
        if payload.len() != self.payload_len {
            return Err(WireError::BadLength(
                "payload slice length differs from payload_len",
            ));
        }
        let frame_len = self.frame_len();
        let got = buf.len();
        let buf = buf.get_mut(..frame_len).ok_or(WireError::BufferTooShort {
            need: frame_len,
            got,
        })?;
        let header_len = self.emit(buf)?;
        let (header, rest) = buf.split_at_mut(header_len);
        let (body, trailer) = rest.split_at_mut(self.payload_len);
        body.copy_from_slice(payload);
        let (t, n) = super::padded_trailer(header, body, usize::from(self.bth.pad_count));
        trailer.copy_from_slice(&t[..n]);
        Ok(frame_len)
    }

    /// Parses the headers at the start of `frame` (which must contain at least the header bytes;
    /// the payload may or may not follow). Validates the ethertype, IPv4 version / IHL (5) /
    /// checksum / no fragmentation, protocol, UDP destination port and length, and that the
    /// opcode is supported and its extension headers fit; `payload_len` comes from the IPv4
    /// total length less the headers, the BTH's PadCnt bytes of pad and the ICRC. The ICRC is
    /// not checked (see [`super::check_icrc`]).
    ///
    /// Every receiving NIC parses every frame, so the fields are read at their `field` offsets
    /// from one fixed-size copy of the first 54 bytes (no per-field length checks, no calls into
    /// `pnet_packet`'s out-of-line accessors, which were most of this function's cost).
    /// The checks and errors, and their order, are those of the `pnet_packet` views this
    /// replaced (kept in the tests, which compare the two on random and mutated frames).
    pub fn parse(frame: &[u8]) -> Result<RoceRepr, WireError> {
        // Valid frames always hold the whole fixed stack; a shorter one is copied into zeros
        // and refused at the first layer it does not cover.
        match frame.first_chunk() {
            Some(h) => Self::parse_stack(h, frame),
            None => {
                let mut h = [0; field::BTH_END];
                h[..frame.len()].copy_from_slice(frame);
                Self::parse_stack(&h, frame)
            }
        }
    }

    /// [`RoceRepr::parse`] of `frame` whose first bytes (zero-padded when it is shorter) are `h`.
    #[inline]
    fn parse_stack(h: &[u8; field::BTH_END], frame: &[u8]) -> Result<RoceRepr, WireError> {
        use field::{bth as b, eth as e, ipv4 as i, udp as u};
        let got = frame.len();
        let truncated = |layer, need| WireError::Truncated { layer, need, got };
        let be16 = |r: std::ops::Range<usize>| u16::from_be_bytes([h[r.start], h[r.start + 1]]);
        let be24 = |at: usize| u32::from_be_bytes([0, h[at], h[at + 1], h[at + 2]]);

        if got < ETH_HEADER_LEN {
            return Err(truncated("Ethernet", ETH_HEADER_LEN));
        }
        let ethertype = be16(e::ETHERTYPE);
        if ethertype != ETHERTYPE_IPV4 {
            return Err(WireError::UnexpectedEthertype {
                expected: ETHERTYPE_IPV4,
                found: ethertype,
            });
        }

        if got < field::UDP {
            return Err(truncated("IPv4", field::UDP));
        }
        let ip = field::IPV4;
        let version = h[ip + i::VER_IHL] >> 4;
        if version != 4 {
            return Err(WireError::BadIpVersion(version));
        }
        let ihl = h[ip + i::VER_IHL] & 0x0F;
        if ihl != IPV4_IHL_NO_OPTIONS {
            return Err(WireError::UnsupportedIpv4HeaderLength { ihl });
        }
        let ip_header = h[field::IPV4..]
            .first_chunk()
            .ok_or(truncated("IPv4", field::UDP))?;
        let expected = ipv4_checksum(ip_header);
        let found = be16(ip + i::CHECKSUM.start..ip + i::CHECKSUM.end);
        if found != expected {
            return Err(WireError::BadIpv4Checksum { expected, found });
        }
        let flags_frag = be16(ip + i::FLAGS_FRAG.start..ip + i::FLAGS_FRAG.end);
        let flags = (flags_frag >> 13) as u8;
        if flags & IPV4_MORE_FRAGMENTS != 0 || flags_frag & 0x1FFF != 0 {
            return Err(WireError::Ipv4Fragment);
        }
        let protocol = h[ip + i::PROTOCOL];
        if protocol != IP_PROTOCOL_UDP {
            return Err(WireError::NotUdp(protocol));
        }
        let ip_total = usize::from(be16(ip + i::TOTAL_LEN.start..ip + i::TOTAL_LEN.end));

        if got < field::BTH {
            return Err(truncated("UDP", field::BTH));
        }
        let udp = field::UDP;
        let dst_port = be16(udp + u::DST_PORT.start..udp + u::DST_PORT.end);
        if dst_port != ROCEV2_UDP_PORT {
            return Err(WireError::NotRoceV2Port(dst_port));
        }
        let udp_len = be16(udp + u::LENGTH.start..udp + u::LENGTH.end);
        if usize::from(udp_len) + IPV4_HEADER_LEN != ip_total {
            return Err(WireError::BadLength(
                "UDP length differs from IPv4 total length - 20",
            ));
        }

        if got < field::BTH_END {
            return Err(truncated("BTH", field::BTH_END));
        }
        let t = field::BTH;
        let flags = h[t + b::FLAGS];
        let bth = BthRepr {
            opcode: h[t + b::OPCODE],
            solicited: flags & 0x80 != 0,
            mig_req: flags & 0x40 != 0,
            pad_count: (flags >> 4) & 0x03,
            tver: flags & 0x0F,
            pkey: be16(t + b::PKEY.start..t + b::PKEY.end),
            fecn: h[t + b::FECN_BECN] & 0x80 != 0,
            becn: h[t + b::FECN_BECN] & 0x40 != 0,
            dest_qp: be24(t + b::DEST_QP.start),
            ack_req: h[t + b::ACK_REQ] & 0x80 != 0,
            psn: be24(t + b::PSN.start),
        };
        let op = bth.opcode;
        if !opcode::is_supported(op) {
            return Err(WireError::UnsupportedOpcode(op));
        }
        let pad = usize::from(bth.pad_count);

        // The two shapes nearly every frame has, read at fixed offsets: no extension header
        // (a data frame past a message's first) and a lone AETH (an ACK). The rest (RETH and
        // ImmDt once per message, CNPs, READs) go through the views. Through the views for
        // all, this part cost ~67 instructions per frame received on benches/fabric64.yaml.
        let (reth, aeth, immdt, payload_len) = match op {
            opcode::ACK => {
                let need = field::BTH_END + AETH_LEN;
                let Some(a) = frame.get(field::BTH_END..need) else {
                    return Err(truncated("AETH", need));
                };
                let aeth = AethRepr {
                    syndrome: a[0],
                    msn: u32::from_be_bytes([0, a[1], a[2], a[3]]),
                };
                (
                    None,
                    Some(aeth),
                    None,
                    Self::payload_len(ip_total, need, pad)?,
                )
            }
            _ if !opcode::has_reth(op)
                && !opcode::has_aeth(op)
                && !opcode::has_immdt(op)
                && op != opcode::CNP =>
            {
                (
                    None,
                    None,
                    None,
                    Self::payload_len(ip_total, field::BTH_END, pad)?,
                )
            }
            _ => Self::parse_extensions(frame, op, ip_total, pad)?,
        };

        let mac = |r: std::ops::Range<usize>| {
            let mut m = [0; 6];
            m.copy_from_slice(&h[r]);
            m
        };
        let addr = |at: usize| Ipv4Addr::new(h[at], h[at + 1], h[at + 2], h[at + 3]);
        let tos = h[ip + i::TOS];
        Ok(RoceRepr {
            src_mac: mac(e::SRC),
            dst_mac: mac(e::DST),
            src_ip: addr(ip + i::SRC.start),
            dst_ip: addr(ip + i::DST.start),
            dscp: tos >> 2,
            ecn: Ecn::from_bits(tos),
            ttl: h[ip + i::TTL],
            ip_id: be16(ip + i::IDENT.start..ip + i::IDENT.end),
            udp_src_port: be16(udp + u::SRC_PORT.start..udp + u::SRC_PORT.end),
            bth,
            reth,
            aeth,
            immdt,
            payload_len,
        })
    }

    /// The extension headers after the BTH that opcode `op` carries (RETH, AETH, ImmDt, a
    /// CNP's reserved bytes), read through their views, and the payload length that
    /// `ip_total` (the IPv4 total length) leaves: the part of parsing that both
    /// [`RoceRepr::parse`] and the view-based reference parser of the tests share.
    fn parse_extensions(
        frame: &[u8],
        op: u8,
        ip_total: usize,
        pad: usize,
    ) -> Result<Extensions, WireError> {
        let got = frame.len();
        let truncated = |layer, need| WireError::Truncated { layer, need, got };
        let mut offset = field::BTH_END;
        let reth = if opcode::has_reth(op) {
            let need = offset + RETH_LEN;
            let bytes = frame.get(offset..).ok_or(truncated("RETH", need))?;
            let view = RethPacket::new(bytes).ok_or(truncated("RETH", need))?;
            offset = need;
            Some(RethRepr::parse(&view))
        } else {
            None
        };
        let aeth = if opcode::has_aeth(op) {
            let need = offset + AETH_LEN;
            let bytes = frame.get(offset..).ok_or(truncated("AETH", need))?;
            let view = AethPacket::new(bytes).ok_or(truncated("AETH", need))?;
            offset = need;
            Some(AethRepr::parse(&view))
        } else {
            None
        };
        let immdt = if opcode::has_immdt(op) {
            let need = offset + IMMDT_LEN;
            let bytes = frame.get(offset..).ok_or(truncated("ImmDt", need))?;
            let view = ImmDtPacket::new(bytes).ok_or(truncated("ImmDt", need))?;
            offset = need;
            Some(view.get_imm())
        } else {
            None
        };
        if op == opcode::CNP {
            offset += CNP_RESERVED_LEN;
            if got < offset {
                return Err(truncated("CNP reserved", offset));
            }
        }
        Ok((reth, aeth, immdt, Self::payload_len(ip_total, offset, pad)?))
    }

    /// The payload length that IPv4 total length `ip_total` leaves after `header_len` bytes of
    /// headers, `pad` bytes of pad and the ICRC.
    #[inline]
    fn payload_len(ip_total: usize, header_len: usize, pad: usize) -> Result<usize, WireError> {
        (ip_total + ETH_HEADER_LEN)
            .checked_sub(header_len + pad + ICRC_LEN)
            .ok_or(WireError::BadLength(
                "IPv4 total length shorter than the headers plus pad and ICRC",
            ))
    }

    /// A CNP telling the sender of `dest_qp` to slow down: BTH opcode 0x81, BECN set, P_Key
    /// 0xFFFF, PSN 0, 16 reserved zero bytes; DSCP [`CNP_DSCP`], ECN not-ECT (CNPs must not be
    /// marked), TTL 64, IP ID 0. Change fields afterwards for other policies.
    pub fn cnp(
        src_mac: MacAddr,
        dst_mac: MacAddr,
        src_ip: Ipv4Addr,
        dst_ip: Ipv4Addr,
        udp_src_port: u16,
        dest_qp: u32,
    ) -> RoceRepr {
        RoceRepr {
            src_mac,
            dst_mac,
            src_ip,
            dst_ip,
            dscp: CNP_DSCP,
            ecn: Ecn::NotEct,
            ttl: CNP_TTL,
            ip_id: 0,
            udp_src_port,
            bth: BthRepr {
                opcode: opcode::CNP,
                pkey: CNP_PKEY,
                becn: true,
                dest_qp,
                ..BthRepr::default()
            },
            reth: None,
            aeth: None,
            immdt: None,
            payload_len: 0,
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::wire::{check_icrc, MAX_HEADER_LEN};

    /// RFC 1071 Internet checksum, written independently of pnet: the one's-complement sum of
    /// the header's 16-bit words (checksum included) is 0xFFFF when the checksum is right.
    pub(crate) fn rfc1071_ok(header: &[u8]) -> bool {
        let mut sum: u32 = header
            .chunks(2)
            .map(|w| u32::from(w[0]) << 8 | u32::from(*w.get(1).unwrap_or(&0)))
            .sum();
        while sum > 0xFFFF {
            sum = (sum & 0xFFFF) + (sum >> 16);
        }
        sum == 0xFFFF
    }

    fn base(op: u8, payload_len: usize) -> RoceRepr {
        RoceRepr {
            src_mac: [0x02, 0, 0, 0, 0, 0x01],
            dst_mac: [0x02, 0, 0, 0, 0, 0x02],
            src_ip: Ipv4Addr::new(10, 0, 0, 1),
            dst_ip: Ipv4Addr::new(10, 0, 1, 2),
            dscp: 26,
            ecn: Ecn::Ect0,
            ttl: 64,
            ip_id: 0x1234,
            udp_src_port: 0xC0DE,
            bth: BthRepr {
                opcode: op,
                pkey: 0xFFFF,
                dest_qp: 0x00AB_CDEF,
                psn: 0x00FF_FFFE,
                ack_req: true,
                ..BthRepr::default()
            },
            reth: None,
            aeth: None,
            immdt: None,
            payload_len,
        }
    }

    const RETH: RethRepr = RethRepr {
        va: 0x0000_7F00_DEAD_0000,
        rkey: 0x1357_9BDF,
        dma_len: 1 << 20,
    };

    pub(crate) fn sample_write_only_imm() -> RoceRepr {
        RoceRepr {
            reth: Some(RETH),
            immdt: Some(0xCAFE_F00D),
            ..base(opcode::WRITE_ONLY_IMM, 4096)
        }
    }

    /// Sample `which` (modulo their number) with `payload` bytes if it carries any, emitted
    /// into a buffer 64 bytes longer than the largest header; returns it and its header length.
    pub(crate) fn sample_frame(
        which: usize,
        payload: usize,
    ) -> (RoceRepr, [u8; MAX_HEADER_LEN + 64], usize) {
        let all = samples();
        let mut repr = all[which % all.len()].clone();
        repr.payload_len = if repr.payload_len == 0 { 0 } else { payload };
        let repr = repr.padded();
        let mut buf = [0u8; MAX_HEADER_LEN + 64];
        let n = repr.emit(&mut buf).unwrap();
        (repr, buf, n)
    }

    /// Overwrites `buf` at `edits`, then, with `fix`, sets the IPv4 checksum right again (so
    /// that a parse reaches the checks behind it).
    pub(crate) fn mutate(buf: &mut [u8], edits: &[(usize, u8)], fix: bool) {
        for &(at, v) in edits {
            buf[at] = v;
        }
        if fix {
            let mut ip = MutableIpv4Packet::new(&mut buf[field::IPV4..field::UDP]).unwrap();
            ip.set_checksum(0);
            let c = ipv4::checksum(&ip.to_immutable());
            ip.set_checksum(c);
        }
    }

    /// One representative of every header kind fabemu sends.
    pub(crate) fn samples() -> Vec<RoceRepr> {
        use opcode::*;
        let with_reth = |op, len| RoceRepr {
            reth: Some(RETH),
            ..base(op, len)
        };
        let with_imm = |op, len| RoceRepr {
            immdt: Some(0x0102_0304),
            ..base(op, len)
        };
        let with_aeth = |op, aeth| RoceRepr {
            aeth: Some(aeth),
            ..base(op, 0)
        };
        let all = vec![
            with_reth(WRITE_FIRST, 4096),
            base(WRITE_MIDDLE, 4096),
            base(WRITE_LAST, 1000),
            with_imm(WRITE_LAST_IMM, 1000),
            with_reth(WRITE_ONLY, 64),
            sample_write_only_imm(),
            base(SEND_FIRST, 4096),
            base(SEND_MIDDLE, 4096),
            base(SEND_LAST, 12),
            base(SEND_ONLY, 0),
            with_imm(SEND_ONLY_IMM, 8),
            with_reth(READ_REQUEST, 0),
            with_aeth(READ_RESPONSE_ONLY, AethRepr::ack(3)),
            base(READ_RESPONSE_MIDDLE, 4096),
            with_aeth(ACK, AethRepr::ack(0x00_1234)),
            with_aeth(ACK, AethRepr::nak_psn_sequence_error(0xFF_FFFF)),
            RoceRepr::cnp(
                [0x02, 0, 0, 0, 0, 0x02],
                [0x02, 0, 0, 0, 0, 0x01],
                Ipv4Addr::new(10, 0, 1, 2),
                Ipv4Addr::new(10, 0, 0, 1),
                0xC0DE,
                0x00AB_CDEF,
            ),
            // Payloads that are not a multiple of 4 (SEND_LAST's 12 is): pad 3, 2 and 1.
            base(WRITE_LAST, 1001),
            with_imm(SEND_ONLY_IMM, 6),
            with_reth(WRITE_ONLY, 3),
        ];
        all.into_iter().map(RoceRepr::padded).collect()
    }

    #[test]
    fn round_trip_every_header_kind() {
        for repr in samples() {
            let mut buf = [0xEEu8; MAX_HEADER_LEN];
            let n = repr.emit(&mut buf).unwrap();
            assert_eq!(n, repr.header_len(), "{repr:?}");
            let frame = &buf[..n];
            // Header-only frames parse (timing mode elides the payload).
            assert_eq!(RoceRepr::parse(frame).unwrap(), repr);
            assert!(rfc1071_ok(&frame[field::IPV4..field::UDP]));
            // IPv4 total length and UDP length count payload and ICRC.
            let ip_total = u16::from_be_bytes([frame[16], frame[17]]) as usize;
            let udp_len = u16::from_be_bytes([frame[38], frame[39]]) as usize;
            assert_eq!(ip_total + ETH_HEADER_LEN, repr.frame_len());
            assert_eq!(udp_len + IPV4_HEADER_LEN, ip_total);
            assert_eq!(frame[20] & 0x40, 0x40, "DF set");
        }
    }

    #[test]
    fn header_lengths() {
        let by_op = |op: u8| {
            samples()
                .into_iter()
                .find(|r| r.bth.opcode == op)
                .unwrap()
                .header_len()
        };
        assert_eq!(by_op(opcode::WRITE_ONLY_IMM), 74);
        assert_eq!(by_op(opcode::WRITE_FIRST), 70);
        assert_eq!(by_op(opcode::WRITE_MIDDLE), 54);
        assert_eq!(by_op(opcode::ACK), 58);
        assert_eq!(by_op(opcode::CNP), 70);
        assert_eq!(sample_write_only_imm().frame_len(), 74 + 4096 + 4);
    }

    #[test]
    fn full_frames_round_trip_with_valid_icrc() {
        for repr in samples() {
            let payload: Vec<u8> = (0..repr.payload_len).map(|i| i as u8).collect();
            let mut buf = vec![0u8; repr.frame_len()];
            let n = repr.emit_frame(&payload, &mut buf).unwrap();
            assert_eq!(n, repr.frame_len());
            assert_eq!(RoceRepr::parse(&buf).unwrap(), repr);
            check_icrc(&buf).unwrap();
        }
    }

    /// A CNP captured from an NVIDIA ConnectX-4 Lx (published in scapy's RoCE regression tests):
    /// real hardware bytes, including its ICRC.
    const CONNECTX4_CNP: [u8; 74] = [
        // Ethernet: destination, source, ethertype IPv4
        0xe4, 0x1d, 0x2d, 0xab, 0x2b, 0xc2, //
        0x7c, 0xfe, 0x90, 0x64, 0x3b, 0x32, //
        0x08, 0x00, //
        // IPv4: version 4 / IHL 5; TOS 0xc2 = DSCP 48, ECN 10 (ECT(0)); total length 60
        0x45, 0xc2, 0x00, 0x3c, //
        // identification 0x718c; flags DF, fragment offset 0
        0x71, 0x8c, 0x40, 0x00, //
        // TTL 64; protocol 17 (UDP); header checksum 0x9161
        0x40, 0x11, 0x91, 0x61, //
        // source 10.0.17.1, destination 10.0.18.1
        0x0a, 0x00, 0x11, 0x01, 0x0a, 0x00, 0x12, 0x01, //
        // UDP: source port 0, destination 4791, length 40, checksum 0
        0x00, 0x00, 0x12, 0xb7, 0x00, 0x28, 0x00, 0x00, //
        // BTH: opcode 0x81 (CNP); SE/M/PadCnt/TVer 0; P_Key 0xffff
        0x81, 0x00, 0xff, 0xff, //
        // FECN 0 / BECN 1; destination QP 0x000118
        0x40, 0x00, 0x01, 0x18, //
        // AckReq 0; PSN 0
        0x00, 0x00, 0x00, 0x00, //
        // 16 reserved bytes
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, //
        // ICRC
        0x82, 0xfd, 0x00, 0x2a,
    ];

    #[test]
    fn connectx4_cnp_parses_and_reemits_identically() {
        let repr = RoceRepr::parse(&CONNECTX4_CNP).unwrap();
        let expected = RoceRepr {
            ip_id: 0x718c,
            ecn: Ecn::Ect0,
            ..RoceRepr::cnp(
                [0x7c, 0xfe, 0x90, 0x64, 0x3b, 0x32],
                [0xe4, 0x1d, 0x2d, 0xab, 0x2b, 0xc2],
                Ipv4Addr::new(10, 0, 17, 1),
                Ipv4Addr::new(10, 0, 18, 1),
                0,
                0x118,
            )
        };
        assert_eq!(repr, expected);
        let mut buf = [0u8; 74];
        assert_eq!(repr.emit_frame(&[], &mut buf), Ok(74));
        assert_eq!(buf, CONNECTX4_CNP);
        check_icrc(&CONNECTX4_CNP).unwrap();
    }

    #[test]
    fn cnp_matches_hand_written_bytes() {
        // RoceRepr::cnp from 10.0.1.2 (02:00:00:00:00:02) to 10.0.0.1 (02:00:00:00:00:01),
        // UDP source port 0xC0DE, QP 0xABCDEF, written out from the RoCEv2 annex (A17.9.3).
        let expected: [u8; 70] = [
            // Ethernet: destination, source, ethertype IPv4
            0x02, 0x00, 0x00, 0x00, 0x00, 0x01, //
            0x02, 0x00, 0x00, 0x00, 0x00, 0x02, //
            0x08, 0x00, //
            // IPv4: version 4 / IHL 5; TOS 0xc0 = DSCP 48, ECN 00; total length 60 (20+8+12+16+4)
            0x45, 0xc0, 0x00, 0x3c, //
            // identification 0; flags DF; fragment offset 0
            0x00, 0x00, 0x40, 0x00, //
            // TTL 64, protocol 17, header checksum (RFC 1071 by hand: ~0xdb10 = 0x24ef)
            0x40, 0x11, 0x24, 0xef, //
            // source 10.0.1.2, destination 10.0.0.1
            0x0a, 0x00, 0x01, 0x02, 0x0a, 0x00, 0x00, 0x01, //
            // UDP: source port 0xc0de, destination 4791 (0x12b7), length 40, checksum 0
            0xc0, 0xde, 0x12, 0xb7, 0x00, 0x28, 0x00, 0x00, //
            // BTH: opcode 0x81; SE 0 M 0 PadCnt 0 TVer 0; P_Key 0xffff
            0x81, 0x00, 0xff, 0xff, //
            // FECN 0, BECN 1 (0x40); destination QP 0xabcdef
            0x40, 0xab, 0xcd, 0xef, //
            // AckReq 0; PSN 0
            0x00, 0x00, 0x00, 0x00, //
            // 16 reserved bytes
            0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
        ];
        let cnp = samples()
            .into_iter()
            .find(|r| r.bth.opcode == opcode::CNP)
            .unwrap();
        let mut buf = [0u8; MAX_HEADER_LEN];
        let n = cnp.emit(&mut buf).unwrap();
        assert_eq!(&buf[..n], &expected[..]);
        assert_eq!(RoceRepr::parse(&expected).unwrap(), cnp);
    }

    #[test]
    fn emit_rejects_bad_reprs() {
        let mut buf = [0u8; MAX_HEADER_LEN];
        let ok = sample_write_only_imm();
        let cases = [
            RoceRepr {
                reth: None,
                ..ok.clone()
            },
            RoceRepr {
                immdt: None,
                ..ok.clone()
            },
            RoceRepr {
                aeth: Some(AethRepr::ack(0)),
                ..ok.clone()
            },
            RoceRepr {
                bth: BthRepr {
                    opcode: 0x64,
                    ..ok.bth
                },
                ..ok.clone()
            },
            RoceRepr {
                dscp: 64,
                ..ok.clone()
            },
            RoceRepr {
                bth: BthRepr {
                    dest_qp: 1 << 24,
                    ..ok.bth
                },
                ..ok.clone()
            },
            RoceRepr {
                bth: BthRepr {
                    psn: 1 << 24,
                    ..ok.bth
                },
                ..ok.clone()
            },
            RoceRepr {
                payload_len: 65_536,
                ..ok.clone()
            },
        ];
        for bad in cases {
            assert!(bad.emit(&mut buf).is_err(), "{bad:?}");
        }
        let ack = RoceRepr {
            aeth: Some(AethRepr::ack(1 << 24)),
            ..base(opcode::ACK, 0)
        };
        assert!(matches!(
            ack.emit(&mut buf),
            Err(WireError::FieldOutOfRange { .. })
        ));
        assert_eq!(
            ok.emit(&mut buf[..73]),
            Err(WireError::BufferTooShort { need: 74, got: 73 })
        );
        assert!(ok.emit_frame(&[0; 3], &mut [0; 8000]).is_err());
        assert!(ok.emit_frame(&[0; 4096], &mut [0; 4000]).is_err());
    }

    #[test]
    fn parse_rejects_every_truncation() {
        for repr in samples() {
            let mut buf = [0u8; MAX_HEADER_LEN];
            let n = repr.emit(&mut buf).unwrap();
            for cut in 0..n {
                let err = RoceRepr::parse(&buf[..cut]).unwrap_err();
                assert!(matches!(err, WireError::Truncated { .. }), "{cut}: {err}");
            }
        }
    }

    #[test]
    fn parse_rejects_malformed_headers() {
        let repr = sample_write_only_imm();
        let mut good = [0u8; MAX_HEADER_LEN];
        let n = repr.emit(&mut good).unwrap();
        let good = &good[..n];
        // Patch a header field (and optionally fix the IPv4 checksum), then parse.
        let patched = |at: usize, value: u8, fix_checksum: bool| {
            let mut f = good.to_vec();
            mutate(&mut f, &[(at, value)], fix_checksum);
            RoceRepr::parse(&f).unwrap_err()
        };
        assert!(matches!(
            patched(12, 0x86, false),
            WireError::UnexpectedEthertype { .. }
        ));
        assert_eq!(patched(14, 0x65, true), WireError::BadIpVersion(6));
        assert!(matches!(
            patched(14, 0x46, true),
            WireError::UnsupportedIpv4HeaderLength { ihl: 6 }
        ));
        assert!(matches!(
            patched(22, 63, false),
            WireError::BadIpv4Checksum { .. }
        ));
        assert_eq!(patched(20, 0x20, true), WireError::Ipv4Fragment);
        assert_eq!(patched(21, 0x01, true), WireError::Ipv4Fragment);
        assert_eq!(patched(23, 6, true), WireError::NotUdp(6));
        assert_eq!(patched(37, 0xb8, false), WireError::NotRoceV2Port(4792));
        assert!(matches!(patched(39, 0, false), WireError::BadLength(_)));
        assert_eq!(patched(42, 0x12, false), WireError::UnsupportedOpcode(0x12));
        // IPv4 total length too small for the headers (UDP length adjusted to match).
        let mut f = good.to_vec();
        f[16..18].copy_from_slice(&40u16.to_be_bytes());
        f[38..40].copy_from_slice(&20u16.to_be_bytes());
        mutate(&mut f, &[], true);
        assert!(matches!(RoceRepr::parse(&f), Err(WireError::BadLength(_))));
    }

    use crate::wire::BthPacket;
    use pnet_packet::ethernet::EthernetPacket;
    use pnet_packet::ipv4::Ipv4Packet;
    use pnet_packet::udp::UdpPacket;

    /// The parser [`RoceRepr::parse`] replaced, through `pnet_packet`'s Ethernet, IPv4, UDP and
    /// BTH views: the reference its direct reads are checked against.
    pub(crate) fn parse_with_views(frame: &[u8]) -> Result<RoceRepr, WireError> {
        let got = frame.len();
        let truncated = |layer, need| WireError::Truncated { layer, need, got };

        let eth = EthernetPacket::new(frame).ok_or(truncated("Ethernet", ETH_HEADER_LEN))?;
        let ethertype = eth.get_ethertype().0;
        if ethertype != ETHERTYPE_IPV4 {
            return Err(WireError::UnexpectedEthertype {
                expected: ETHERTYPE_IPV4,
                found: ethertype,
            });
        }

        let ip_bytes = frame
            .get(field::IPV4..field::UDP)
            .ok_or(truncated("IPv4", field::UDP))?;
        let ip = Ipv4Packet::new(ip_bytes).ok_or(truncated("IPv4", field::UDP))?;
        if ip.get_version() != 4 {
            return Err(WireError::BadIpVersion(ip.get_version()));
        }
        if ip.get_header_length() != IPV4_IHL_NO_OPTIONS {
            return Err(WireError::UnsupportedIpv4HeaderLength {
                ihl: ip.get_header_length(),
            });
        }
        let expected = ipv4::checksum(&ip);
        if ip.get_checksum() != expected {
            return Err(WireError::BadIpv4Checksum {
                expected,
                found: ip.get_checksum(),
            });
        }
        if ip.get_flags() & IPV4_MORE_FRAGMENTS != 0 || ip.get_fragment_offset() != 0 {
            return Err(WireError::Ipv4Fragment);
        }
        let protocol = ip.get_next_level_protocol().0;
        if protocol != IP_PROTOCOL_UDP {
            return Err(WireError::NotUdp(protocol));
        }
        let ip_total = usize::from(ip.get_total_length());

        let udp_bytes = frame
            .get(field::UDP..field::BTH)
            .ok_or(truncated("UDP", field::BTH))?;
        let udp = UdpPacket::new(udp_bytes).ok_or(truncated("UDP", field::BTH))?;
        if udp.get_destination() != ROCEV2_UDP_PORT {
            return Err(WireError::NotRoceV2Port(udp.get_destination()));
        }
        if usize::from(udp.get_length()) + IPV4_HEADER_LEN != ip_total {
            return Err(WireError::BadLength(
                "UDP length differs from IPv4 total length - 20",
            ));
        }

        let bth_bytes = frame
            .get(field::BTH..)
            .ok_or(truncated("BTH", field::BTH_END))?;
        let bth_view = BthPacket::new(bth_bytes).ok_or(truncated("BTH", field::BTH_END))?;
        let bth = BthRepr::parse(&bth_view);
        let op = bth.opcode;
        if !opcode::is_supported(op) {
            return Err(WireError::UnsupportedOpcode(op));
        }
        let pad = usize::from(bth.pad_count);

        let (reth, aeth, immdt, payload_len) =
            RoceRepr::parse_extensions(frame, op, ip_total, pad)?;

        Ok(RoceRepr {
            src_mac: eth.get_source().into(),
            dst_mac: eth.get_destination().into(),
            src_ip: Ipv4Addr::from(ip.get_source().octets()),
            dst_ip: Ipv4Addr::from(ip.get_destination().octets()),
            dscp: ip.get_dscp(),
            ecn: Ecn::from_bits(ip.get_ecn()),
            ttl: ip.get_ttl(),
            ip_id: ip.get_identification(),
            udp_src_port: udp.get_source(),
            bth,
            reth,
            aeth,
            immdt,
            payload_len,
        })
    }

    proptest::proptest! {
        /// The direct-read parser agrees with the view-based one (same repr or same error) on
        /// every header kind, cut anywhere and with up to three bytes overwritten anywhere in
        /// the first 80 (the IPv4 checksum fixed up or not, to reach the checks behind it).
        #[test]
        fn parse_agrees_with_the_views(
            which in 0usize..32,
            payload in 0usize..5000,
            cut in 0usize..140,
            edits in proptest::collection::vec((0usize..80, proptest::prelude::any::<u8>()), 0..4),
            fix in proptest::prelude::any::<bool>(),
        ) {
            let (_, mut buf, n) = sample_frame(which, payload);
            mutate(&mut buf, &edits, fix);
            let frame = &buf[..cut.min(n + 64)];
            proptest::prop_assert_eq!(RoceRepr::parse(frame), parse_with_views(frame));
        }

        /// Random bytes too (mostly refused early, by either).
        #[test]
        fn parse_agrees_with_the_views_on_noise(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..100)) {
            proptest::prop_assert_eq!(RoceRepr::parse(&bytes), parse_with_views(&bytes));
        }
    }

    #[test]
    fn ipv4_checksum_matches_pnet() {
        for repr in samples() {
            let mut buf = [0u8; MAX_HEADER_LEN];
            repr.emit(&mut buf).unwrap();
            let ip = Ipv4Packet::new(&buf[field::IPV4..field::UDP]).unwrap();
            let mut h = [0; IPV4_HEADER_LEN];
            h.copy_from_slice(&buf[field::IPV4..field::UDP]);
            assert_eq!(ipv4_checksum(&h), ipv4::checksum(&ip));
        }
    }
}
