//! RoCEv2 and PFC wire formats: the real bytes every fabemu packet carries.
//!
//! Each header kind has two faces, as in smoltcp:
//! - a *view* over a byte buffer whose constructor checks the length once, after which field
//!   reads and writes are cheap and infallible. Ethernet, IPv4 and UDP use `pnet_packet`'s views;
//!   the views of the InfiniBand headers ([`BthPacket`], [`RethPacket`], [`AethPacket`],
//!   [`ImmDtPacket`]) and of the PFC MAC-control body ([`PfcPacket`]), with their `Mutable`
//!   forms, are generated here by `pnet_macros`' `#[packet]` (field accessors are
//!   `get_<field>` / `set_<field>`; see `ib.rs` and `pfc.rs` for the field layouts);
//! - a *repr*: a plain struct of the meaningful fields with `parse` (which validates lengths,
//!   checksums and the header chain) and `emit` ([`RoceRepr`], [`BthRepr`], [`RethRepr`],
//!   [`AethRepr`], [`PfcPauseRepr`]).
//!
//! A RoCEv2 frame is Ethernet II / IPv4 / UDP (destination port 4791) / BTH / extension headers
//! the opcode implies / payload / ICRC. The hot path (switch forwarding, ECN marking) never needs
//! a full parse: [`frame_kind`], [`ipv4_dst`], [`ecn`], [`set_ecn`] and friends read or patch the
//! few bytes they need directly.
//!
//! Nothing here panics on any input: parsers return [`WireError`] and the cheap readers return
//! `None` (or [`FrameKind::Other`]); a proptest feeds them random bytes.
//!
//! Byte offsets live in this file's `field` module of named ranges (where each layer starts, and
//! the few IPv4/UDP bytes patched directly), never as bare indices in logic; the layouts of the
//! headers defined here are the `#[packet]` structs in `ib.rs` and `pfc.rs`.

mod ib;
mod icrc;
pub mod int;
mod peek;
mod pfc;
mod roce;
mod rx;
mod template;
mod ttl;

pub use ib::{
    AethPacket, AethRepr, BthPacket, BthRepr, ImmDtPacket, MutableAethPacket, MutableBthPacket,
    MutableImmDtPacket, MutableRethPacket, RethPacket, RethRepr,
};
pub use icrc::{check_icrc, icrc, icrc_padded, padded_trailer};
pub use peek::{
    bth_opcode, bth_view, dscp, ecn, frame_kind, ip_flow, ipv4_dst, ipv4_src, peek_forward,
    peek_roce_flow, set_ecn, udp_src_port, ForwardPeek, FrameKind, RoceFlow,
};
pub use pfc::{pause_quanta_to_ps, MutablePfcPacket, PfcPacket, PfcPauseRepr};
pub use roce::{RoceRepr, CNP_DSCP};
pub use rx::RoceRx;
pub use template::{CommonShape, HeaderTemplate, PacketFields, Sender};
pub use ttl::decrement_ttl;

/// UDP destination port that marks a datagram as RoCEv2 (IANA-assigned).
pub const ROCEV2_UDP_PORT: u16 = 4791;
/// Ethernet II header: destination, source, ethertype (no VLAN tag, no FCS).
pub const ETH_HEADER_LEN: usize = 14;
/// IPv4 header without options (IHL 5), the only form fabemu emits or accepts.
pub const IPV4_HEADER_LEN: usize = 20;
/// UDP header.
pub const UDP_HEADER_LEN: usize = 8;
/// InfiniBand Base Transport Header.
pub const BTH_LEN: usize = 12;
/// RDMA Extended Transport Header (virtual address, R_Key, DMA length).
pub const RETH_LEN: usize = 16;
/// ACK Extended Transport Header (syndrome, MSN).
pub const AETH_LEN: usize = 4;
/// Immediate data extended header.
pub const IMMDT_LEN: usize = 4;
/// Invariant CRC trailer of every RoCEv2 packet.
pub const ICRC_LEN: usize = 4;
/// Most pad bytes a RoCEv2 payload takes (BTH PadCnt is 2 bits).
pub const MAX_PAD_LEN: usize = 3;

/// Pad bytes after a payload of `payload` bytes: InfiniBand aligns the payload to 4 bytes
/// with zeros that the BTH's PadCnt counts and the ICRC covers (as Linux rxe sends them), so
/// the ICRC starts on a 4-byte boundary; the receiver's payload length excludes them.
#[inline(always)]
pub const fn pad_len(payload: usize) -> usize {
    payload.wrapping_neg() & 3
}
/// Reserved bytes after the BTH of a CNP.
pub const CNP_RESERVED_LEN: usize = 16;
/// A PFC pause frame without FCS, padded to the Ethernet minimum (64 bytes with FCS).
pub const PFC_FRAME_LEN: usize = 60;
/// Exactly the largest header stack fabemu emits (Eth+IP+UDP+BTH+RETH+ImmDt = 74, plus HPCC's
/// in-band telemetry of up to five hops, [`int::INT_MAX_LEN`] = 52; PFC 60). A `Packet` keeps
/// the first 74 inline and moves longer headers (telemetry) to a boxed array, so it stays at
/// 128 bytes for every run (a test in `packet.rs` holds it there).
pub const MAX_HEADER_LEN: usize = 74 + int::INT_MAX_LEN;

/// Frame bytes (without FCS) of one data packet of an RDMA WRITE with immediate, as a NIC
/// sends it: Ethernet, IPv4, UDP and BTH headers, a RETH on the message's first packet, the
/// immediate on its last, `payload` bytes, their pad to 4 bytes ([`pad_len`]) and the ICRC.
/// The flow-level fidelity counts messages in these bytes so its capacities agree with the
/// packets'.
pub const fn write_frame_len(payload: usize, first: bool, last: bool) -> usize {
    field::BTH_END
        + if first { RETH_LEN } else { 0 }
        + if last { IMMDT_LEN } else { 0 }
        + payload
        + pad_len(payload)
        + ICRC_LEN
}

/// Frame bytes (without FCS) of an ACK or NAK: headers, BTH, AETH and ICRC.
pub const ACK_FRAME_LEN: usize = field::BTH_END + AETH_LEN + ICRC_LEN;

/// An Ethernet MAC address, most significant byte first.
pub type MacAddr = [u8; 6];

/// Destination of PFC frames: the reserved MAC-control multicast address (802.1Qbb / 802.3x).
pub const PFC_DST_MAC: MacAddr = [0x01, 0x80, 0xC2, 0x00, 0x00, 0x01];
/// Ethertype of IPv4.
pub const ETHERTYPE_IPV4: u16 = 0x0800;
/// Ethertype of MAC control frames (802.3x pause, 802.1Qbb PFC).
pub const ETHERTYPE_MAC_CONTROL: u16 = 0x8808;
/// MAC-control opcode of a priority-based (per-class) pause frame.
pub const PFC_OPCODE: u16 = 0x0101;

/// IP protocol number of UDP.
const IP_PROTOCOL_UDP: u8 = 17;

// Header bytes live in a fixed inline array of MAX_HEADER_LEN: every stack must fit.
const _: () = assert!(field::BTH_END + RETH_LEN + IMMDT_LEN <= MAX_HEADER_LEN);
const _: () = assert!(field::BTH_END + CNP_RESERVED_LEN <= MAX_HEADER_LEN);
const _: () = assert!(PFC_FRAME_LEN <= MAX_HEADER_LEN);

/// Where each layer starts in a frame (IPv4 without options), and the bytes that are read or
/// patched directly rather than through `pnet_packet`'s views: ICRC masking, and the per-frame
/// paths (`RoceRepr::parse`, the header templates, the switch's peeks), where pnet's
/// out-of-line accessors cost more than the work itself.
pub(crate) mod field {
    use super::{BTH_LEN, ETH_HEADER_LEN, IPV4_HEADER_LEN, UDP_HEADER_LEN};

    /// Offsets inside the Ethernet II header.
    pub(crate) mod eth {
        use core::ops::Range;
        /// Destination MAC address.
        pub(crate) const DST: Range<usize> = 0..6;
        /// Source MAC address.
        pub(crate) const SRC: Range<usize> = 6..12;
        /// Ethertype.
        pub(crate) const ETHERTYPE: Range<usize> = 12..14;
    }

    /// First byte of the IPv4 header.
    pub(crate) const IPV4: usize = ETH_HEADER_LEN;
    /// First byte of the UDP header.
    pub(crate) const UDP: usize = IPV4 + IPV4_HEADER_LEN;
    /// First byte of the BTH.
    pub(crate) const BTH: usize = UDP + UDP_HEADER_LEN;
    /// First byte after the BTH (extension headers, or payload).
    pub(crate) const BTH_END: usize = BTH + BTH_LEN;

    /// Offsets inside the IPv4 header.
    pub(crate) mod ipv4 {
        use core::ops::Range;
        /// Version (high nibble) and IHL in 32-bit words (low nibble).
        pub(crate) const VER_IHL: usize = 0;
        /// Type of service: DSCP (6 bits) and ECN (2 bits).
        pub(crate) const TOS: usize = 1;
        /// Total length: everything after the Ethernet header.
        pub(crate) const TOTAL_LEN: Range<usize> = 2..4;
        /// Identification.
        pub(crate) const IDENT: Range<usize> = 4..6;
        /// Flags (top 3 bits) and fragment offset (13 bits).
        pub(crate) const FLAGS_FRAG: Range<usize> = 6..8;
        /// Time to live.
        pub(crate) const TTL: usize = 8;
        /// Protocol of the payload.
        pub(crate) const PROTOCOL: usize = 9;
        /// Header checksum.
        pub(crate) const CHECKSUM: Range<usize> = 10..12;
        /// Source address.
        pub(crate) const SRC: Range<usize> = 12..16;
        /// Destination address.
        pub(crate) const DST: Range<usize> = 16..20;
    }

    /// Offsets inside the UDP header.
    pub(crate) mod udp {
        use core::ops::Range;
        /// Source port.
        pub(crate) const SRC_PORT: Range<usize> = 0..2;
        /// Destination port.
        pub(crate) const DST_PORT: Range<usize> = 2..4;
        /// Length: UDP header and payload.
        pub(crate) const LENGTH: Range<usize> = 4..6;
        /// UDP checksum.
        pub(crate) const CHECKSUM: Range<usize> = 6..8;
    }

    /// Offsets inside the BTH (bit layout as in `ib.rs`'s `#[packet] Bth`).
    pub(crate) mod bth {
        use core::ops::Range;
        /// Opcode.
        pub(crate) const OPCODE: usize = 0;
        /// SE (bit 7), MigReq (bit 6), PadCnt (bits 5-4), TVer (bits 3-0).
        pub(crate) const FLAGS: usize = 1;
        /// Partition key.
        pub(crate) const PKEY: Range<usize> = 2..4;
        /// FECN (bit 7), BECN (bit 6), 6 reserved bits.
        pub(crate) const FECN_BECN: usize = 4;
        /// Destination QP (24 bits).
        pub(crate) const DEST_QP: Range<usize> = 5..8;
        /// AckReq (bit 7), 7 reserved bits.
        pub(crate) const ACK_REQ: usize = 8;
        /// PSN (24 bits).
        pub(crate) const PSN: Range<usize> = 9..12;
    }
}

/// Why a frame could not be parsed or a header could not be emitted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// The frame ends before the header being read does.
    #[error("frame truncated in the {layer} header: need {need} bytes, got {got}")]
    Truncated {
        /// Which header was being read.
        layer: &'static str,
        /// Bytes needed from the start of the frame.
        need: usize,
        /// Bytes available.
        got: usize,
    },
    /// The output buffer cannot hold what is to be written.
    #[error("buffer too short to emit: need {need} bytes, got {got}")]
    BufferTooShort {
        /// Bytes needed.
        need: usize,
        /// Bytes available.
        got: usize,
    },
    /// The Ethernet ethertype is not the one this parser handles.
    #[error("unexpected ethertype {found:#06x} (expected {expected:#06x})")]
    UnexpectedEthertype {
        /// The ethertype the parser handles.
        expected: u16,
        /// The ethertype in the frame.
        found: u16,
    },
    /// The IPv4 version nibble is not 4.
    #[error("IP version {0} is not 4")]
    BadIpVersion(u8),
    /// The IPv4 header has options (or an impossible IHL); fabemu only handles 20-byte headers.
    #[error("IPv4 header length {ihl} words is not supported (only 5: no options)")]
    UnsupportedIpv4HeaderLength {
        /// The IHL field, in 32-bit words.
        ihl: u8,
    },
    /// The IPv4 header checksum does not verify.
    #[error("IPv4 header checksum {found:#06x} is wrong (expected {expected:#06x})")]
    BadIpv4Checksum {
        /// The checksum computed over the header.
        expected: u16,
        /// The checksum in the frame.
        found: u16,
    },
    /// The datagram is an IPv4 fragment; RoCEv2 is never fragmented.
    #[error(
        "IPv4 fragment (more-fragments flag or a non-zero offset); RoCEv2 is never fragmented"
    )]
    Ipv4Fragment,
    /// The IPv4 payload is not UDP.
    #[error("IP protocol {0} is not UDP (17)")]
    NotUdp(u8),
    /// The UDP destination port is not 4791.
    #[error("UDP destination port {0} is not RoCEv2 (4791)")]
    NotRoceV2Port(u16),
    /// Length fields disagree with each other or with the headers they cover.
    #[error("inconsistent length: {0}")]
    BadLength(&'static str),
    /// The BTH opcode is one fabemu does not model (so its extension headers are unknown).
    #[error("unsupported BTH opcode {0:#04x}")]
    UnsupportedOpcode(u8),
    /// The extension headers present do not match what the opcode requires.
    #[error("extension headers do not match opcode {opcode:#04x}: {what}")]
    ExtensionMismatch {
        /// The BTH opcode.
        opcode: u8,
        /// What is missing or superfluous.
        what: &'static str,
    },
    /// A field value does not fit its wire width.
    #[error("{field} = {value} does not fit (max {max})")]
    FieldOutOfRange {
        /// The field.
        field: &'static str,
        /// The value given.
        value: u64,
        /// The largest value the field can carry.
        max: u64,
    },
    /// A MAC-control frame whose opcode is not PFC (0x0101).
    #[error("MAC-control opcode {0:#06x} is not PFC (0x0101)")]
    NotPfc(u16),
    /// A PFC frame not sent to 01:80:C2:00:00:01.
    #[error("PFC frame sent to {0:02x?} instead of 01:80:c2:00:00:01")]
    BadPfcDestination(MacAddr),
    /// The ICRC trailer does not match the frame.
    #[error("ICRC {found:02x?} is wrong (expected {expected:02x?})")]
    BadIcrc {
        /// The ICRC computed over the frame.
        expected: [u8; 4],
        /// The ICRC in the frame.
        found: [u8; 4],
    },
}

/// InfiniBand BTH opcodes fabemu uses (Reliable Connected transport, plus the RoCEv2 CNP), and
/// which extension headers each implies (IBTA vol. 1, table 38 "header layout").
pub mod opcode {
    /// RC SEND first.
    pub const SEND_FIRST: u8 = 0x00;
    /// RC SEND middle.
    pub const SEND_MIDDLE: u8 = 0x01;
    /// RC SEND last.
    pub const SEND_LAST: u8 = 0x02;
    /// RC SEND last with immediate.
    pub const SEND_LAST_IMM: u8 = 0x03;
    /// RC SEND only.
    pub const SEND_ONLY: u8 = 0x04;
    /// RC SEND only with immediate.
    pub const SEND_ONLY_IMM: u8 = 0x05;
    /// RC RDMA WRITE first (carries RETH).
    pub const WRITE_FIRST: u8 = 0x06;
    /// RC RDMA WRITE middle.
    pub const WRITE_MIDDLE: u8 = 0x07;
    /// RC RDMA WRITE last.
    pub const WRITE_LAST: u8 = 0x08;
    /// RC RDMA WRITE last with immediate.
    pub const WRITE_LAST_IMM: u8 = 0x09;
    /// RC RDMA WRITE only (carries RETH).
    pub const WRITE_ONLY: u8 = 0x0A;
    /// RC RDMA WRITE only with immediate (carries RETH and ImmDt).
    pub const WRITE_ONLY_IMM: u8 = 0x0B;
    /// RC RDMA READ request (carries RETH).
    pub const READ_REQUEST: u8 = 0x0C;
    /// RC RDMA READ response first (carries AETH).
    pub const READ_RESPONSE_FIRST: u8 = 0x0D;
    /// RC RDMA READ response middle.
    pub const READ_RESPONSE_MIDDLE: u8 = 0x0E;
    /// RC RDMA READ response last (carries AETH).
    pub const READ_RESPONSE_LAST: u8 = 0x0F;
    /// RC RDMA READ response only (carries AETH).
    pub const READ_RESPONSE_ONLY: u8 = 0x10;
    /// RC ACKNOWLEDGE: an ACK or NAK, carrying AETH.
    pub const ACK: u8 = 0x11;
    /// RoCEv2 Congestion Notification Packet (16 reserved bytes after the BTH).
    pub const CNP: u8 = 0x81;

    /// Whether fabemu models this opcode (RC SEND/WRITE/READ/ACK and CNP). Atomics and the
    /// UC/UD/RD/XRC transports are not modelled: their extension headers are not parsed.
    pub fn is_supported(op: u8) -> bool {
        op <= ACK || op == CNP
    }

    /// Whether packets with this opcode carry a RETH (first packet of a WRITE, and READ requests).
    pub fn has_reth(op: u8) -> bool {
        matches!(op, WRITE_FIRST | WRITE_ONLY | WRITE_ONLY_IMM | READ_REQUEST)
    }

    /// Whether packets with this opcode carry immediate data (the `*_IMM` opcodes).
    pub fn has_immdt(op: u8) -> bool {
        matches!(
            op,
            SEND_LAST_IMM | SEND_ONLY_IMM | WRITE_LAST_IMM | WRITE_ONLY_IMM
        )
    }

    /// Whether packets with this opcode carry an AETH (ACK/NAK, and READ responses except middle).
    pub fn has_aeth(op: u8) -> bool {
        matches!(
            op,
            ACK | READ_RESPONSE_FIRST | READ_RESPONSE_LAST | READ_RESPONSE_ONLY
        )
    }

    /// RDMA WRITE data frames (first, middle, last, only; with or without immediate).
    pub fn is_write(op: u8) -> bool {
        matches!(
            op,
            WRITE_FIRST | WRITE_MIDDLE | WRITE_LAST | WRITE_LAST_IMM | WRITE_ONLY | WRITE_ONLY_IMM
        )
    }
}

/// The ECN codepoint: the low 2 bits of the IPv4 TOS byte (RFC 3168).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ecn {
    /// `00`: the sender does not support ECN; switches drop instead of marking.
    NotEct,
    /// `01`: ECN-capable transport (1).
    Ect1,
    /// `10`: ECN-capable transport (0), what RoCEv2 NICs send.
    Ect0,
    /// `11`: congestion experienced, set by a switch.
    Ce,
}

impl Ecn {
    /// The two wire bits.
    pub fn bits(self) -> u8 {
        match self {
            Ecn::NotEct => 0b00,
            Ecn::Ect1 => 0b01,
            Ecn::Ect0 => 0b10,
            Ecn::Ce => 0b11,
        }
    }

    /// The codepoint in the low two bits of `bits` (higher bits are ignored, so a whole TOS byte
    /// may be passed).
    pub fn from_bits(bits: u8) -> Ecn {
        match bits & 0b11 {
            0b00 => Ecn::NotEct,
            0b01 => Ecn::Ect1,
            0b10 => Ecn::Ect0,
            _ => Ecn::Ce,
        }
    }

    /// Whether the sender declared itself ECN-capable (ECT(0), ECT(1), or already CE).
    pub fn is_ect(self) -> bool {
        self != Ecn::NotEct
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn ecn_bits_round_trip() {
        for e in [Ecn::NotEct, Ecn::Ect1, Ecn::Ect0, Ecn::Ce] {
            assert_eq!(Ecn::from_bits(e.bits()), e);
        }
        // RFC 3168: 10 is ECT(0), 01 is ECT(1).
        assert_eq!(Ecn::from_bits(0b10), Ecn::Ect0);
        assert_eq!(Ecn::from_bits(0b01), Ecn::Ect1);
        assert_eq!(Ecn::from_bits(0xFF), Ecn::Ce);
    }

    #[test]
    fn opcode_extension_table() {
        use opcode::*;
        for op in [WRITE_FIRST, WRITE_ONLY, WRITE_ONLY_IMM, READ_REQUEST] {
            assert!(has_reth(op), "{op:#x}");
        }
        for op in [
            SEND_FIRST,
            SEND_ONLY,
            WRITE_MIDDLE,
            WRITE_LAST,
            WRITE_LAST_IMM,
            ACK,
            CNP,
        ] {
            assert!(!has_reth(op), "{op:#x}");
        }
        for op in [SEND_LAST_IMM, SEND_ONLY_IMM, WRITE_LAST_IMM, WRITE_ONLY_IMM] {
            assert!(has_immdt(op), "{op:#x}");
        }
        assert!(!has_immdt(WRITE_ONLY) && !has_immdt(SEND_ONLY) && !has_immdt(CNP));
        assert!(has_aeth(ACK) && has_aeth(READ_RESPONSE_ONLY));
        assert!(!has_aeth(READ_RESPONSE_MIDDLE) && !has_aeth(CNP) && !has_aeth(SEND_ONLY));
        assert!(is_supported(CNP) && is_supported(ACK));
        assert!(!is_supported(0x12) && !is_supported(0x24) && !is_supported(0x64));
    }

    /// Writes one frame of every kind to a pcap for a manual decode check with tshark/Wireshark:
    /// `cargo test -p fabemu-fabric wire::tests::write_pcap -- --ignored`, then e.g.
    /// `tshark -r $TMPDIR/fabemu-wire.pcap -T fields -e infiniband.bth.opcode -e macc.opcode`.
    /// The path can be set with `FABEMU_WIRE_PCAP`.
    #[test]
    #[ignore = "writes a file for a manual tshark check"]
    fn write_pcap_for_tshark() {
        use std::net::Ipv4Addr;
        let path = std::env::var_os("FABEMU_WIRE_PCAP")
            .map(std::path::PathBuf::from)
            .unwrap_or_else(|| std::env::temp_dir().join("fabemu-wire.pcap"));
        let a = ([0x02, 0, 0, 0, 0, 0x01], Ipv4Addr::new(10, 0, 0, 1));
        let b = ([0x02, 0, 0, 0, 0, 0x02], Ipv4Addr::new(10, 0, 1, 2));
        let data = |op: u8, psn: u32, len: usize| RoceRepr {
            src_mac: a.0,
            dst_mac: b.0,
            src_ip: a.1,
            dst_ip: b.1,
            dscp: 26,
            ecn: Ecn::Ect0,
            ttl: 64,
            ip_id: psn as u16,
            udp_src_port: 49152 + psn as u16,
            bth: BthRepr {
                opcode: op,
                pkey: 0xFFFF,
                dest_qp: 0x11,
                psn,
                ack_req: op == opcode::WRITE_LAST_IMM || op == opcode::WRITE_ONLY_IMM,
                ..BthRepr::default()
            },
            reth: opcode::has_reth(op).then_some(RethRepr {
                va: 0x7F00_0000_0000,
                rkey: 0x1234,
                dma_len: 3 * 64,
            }),
            aeth: None,
            immdt: opcode::has_immdt(op).then_some(0xCAFE),
            payload_len: len,
        };
        let ack = |aeth: AethRepr, psn: u32| RoceRepr {
            src_mac: b.0,
            dst_mac: a.0,
            src_ip: b.1,
            dst_ip: a.1,
            bth: BthRepr {
                opcode: opcode::ACK,
                ..data(opcode::SEND_ONLY, psn, 0).bth
            },
            aeth: Some(aeth),
            ..data(opcode::SEND_ONLY, psn, 0)
        };
        let reprs = [
            data(opcode::WRITE_FIRST, 100, 64),
            data(opcode::WRITE_MIDDLE, 101, 64),
            data(opcode::WRITE_LAST_IMM, 102, 64),
            data(opcode::WRITE_ONLY, 103, 32),
            data(opcode::WRITE_ONLY_IMM, 104, 32),
            data(opcode::SEND_ONLY, 105, 16),
            ack(AethRepr::ack(5), 105),
            ack(AethRepr::nak_psn_sequence_error(5), 106),
            RoceRepr::cnp(b.0, a.0, b.1, a.1, 49152, 0x11),
        ];
        let mut frames: Vec<Vec<u8>> = Vec::new();
        for r in &reprs {
            let payload: Vec<u8> = (0..r.payload_len).map(|i| i as u8).collect();
            let mut buf = vec![0u8; r.frame_len()];
            r.emit_frame(&payload, &mut buf).unwrap();
            frames.push(buf);
        }
        // A CE-marked copy of the first WRITE, as a switch would forward it.
        let mut marked = frames[0].clone();
        set_ecn(&mut marked, Ecn::Ce).unwrap();
        frames.push(marked);
        for repr in [
            PfcPauseRepr::xoff([0x02, 0, 0, 0, 0, 0xFE], 3, 0xFFFF),
            PfcPauseRepr::xon([0x02, 0, 0, 0, 0, 0xFE], 3),
        ] {
            let mut buf = vec![0u8; PFC_FRAME_LEN];
            repr.emit(&mut buf).unwrap();
            frames.push(buf);
        }
        // pcap: little-endian classic format, microsecond timestamps, linktype 1 (Ethernet).
        let mut out = Vec::new();
        out.extend_from_slice(&0xA1B2_C3D4u32.to_le_bytes());
        out.extend_from_slice(&2u16.to_le_bytes());
        out.extend_from_slice(&4u16.to_le_bytes());
        for word in [0u32, 0, 65_535, 1] {
            out.extend_from_slice(&word.to_le_bytes());
        }
        for (i, f) in frames.iter().enumerate() {
            let len = f.len() as u32;
            for word in [1u32, i as u32, len, len] {
                out.extend_from_slice(&word.to_le_bytes());
            }
            out.extend_from_slice(f);
        }
        std::fs::write(&path, out).unwrap();
        eprintln!("wrote {} frames to {}", frames.len(), path.display());
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4096))]

        /// Every parser and cheap reader returns (never panics) on arbitrary bytes.
        #[test]
        fn parsers_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = RoceRepr::parse(&bytes);
            let _ = PfcPauseRepr::parse(&bytes);
            let _ = check_icrc(&bytes);
            let _ = icrc(&bytes, &bytes);
            let kind = frame_kind(&bytes);
            let _ = (ipv4_dst(&bytes), ipv4_src(&bytes), udp_src_port(&bytes));
            let _ = (ecn(&bytes), dscp(&bytes), bth_opcode(&bytes));
            let mut copy = bytes.clone();
            let _ = set_ecn(&mut copy, Ecn::Ce);
            // A frame classified as PFC always parses as one.
            if kind == FrameKind::PfcPause {
                prop_assert!(PfcPauseRepr::parse(&bytes).is_ok());
            }
        }

        /// The same with a valid RoCEv2 prefix, so the fuzzing reaches the BTH and beyond.
        #[test]
        fn parsers_never_panic_behind_valid_headers(
            tail in proptest::collection::vec(any::<u8>(), 0..120),
            cut in 0usize..200,
        ) {
            let repr = roce::tests::sample_write_only_imm();
            let mut frame = [0u8; MAX_HEADER_LEN];
            let n = repr.emit(&mut frame).unwrap();
            // Keep Eth/IP/UDP and a random BTH and beyond.
            let mut bytes = frame[..field::BTH].to_vec();
            bytes.extend_from_slice(&tail);
            bytes.truncate(cut.min(bytes.len()));
            let _ = RoceRepr::parse(&bytes);
            let _ = check_icrc(&bytes);
            let _ = (frame_kind(&bytes), bth_opcode(&bytes), udp_src_port(&bytes));
            let _ = n;
        }
    }
}
