//! InfiniBand transport headers as RoCEv2 carries them: BTH, and the RETH, AETH and ImmDt
//! extension headers (IBTA vol. 1, ch. 9; RoCEv2 annex A17).
//!
//! Why these views are not `pnet_macros` `#[packet]` structs (which was tried first): the code
//! `#[packet]` generates contains `#[cfg_attr(feature = "clippy", ...)]`, which trips rustc's
//! `unexpected_cfgs` lint (an error under `clippy -D warnings`), and for macro-generated code that
//! lint can only be silenced crate-wide — `#![allow(unexpected_cfgs)]` in `lib.rs`, or in
//! Cargo.toml `[lints.rust] unexpected_cfgs = { level = "warn", check-cfg =
//! ['cfg(feature, values("clippy"))'] }` — not on the module. (`#[packet]` also rejects doc
//! comments on fields, so its fields would have to stay private.) The hand-written views below
//! keep pnet's shape (`new` -> `Option`, `get_*` / `set_*`, `minimum_packet_size`), so call sites
//! read like those of the `pnet_packet` Ethernet/IPv4/UDP views and could switch back.

use super::{read_be, write_be, WireError, AETH_LEN, BTH_LEN, IMMDT_LEN, RETH_LEN};

/// Largest value of a 24-bit field (QPN, PSN, MSN).
const MAX_24: u32 = 0x00FF_FFFF;

/// Byte offsets and bit masks of the headers in this file.
mod field {
    use core::ops::Range;

    /// Base Transport Header (12 bytes).
    pub(super) mod bth {
        use super::Range;
        /// Operation code.
        pub(crate) const OPCODE: usize = 0;
        /// SE (bit 7), MigReq (bit 6), PadCnt (bits 5-4), TVer (bits 3-0).
        pub(crate) const FLAGS: usize = 1;
        pub(crate) const SE: u8 = 0x80;
        pub(crate) const MIG_REQ: u8 = 0x40;
        pub(crate) const PAD_SHIFT: u32 = 4;
        pub(crate) const PAD_MASK: u8 = 0x30;
        pub(crate) const TVER_MASK: u8 = 0x0F;
        /// Partition key.
        pub(crate) const PKEY: Range<usize> = 2..4;
        /// Reserved byte that RoCEv2 uses for FECN (bit 7) and BECN (bit 6); the ICRC masks it.
        pub(crate) const RESV8A: usize = 4;
        pub(crate) const FECN: u8 = 0x80;
        pub(crate) const BECN: u8 = 0x40;
        /// Destination queue pair (24 bits).
        pub(crate) const DEST_QP: Range<usize> = 5..8;
        /// AckReq (bit 7) and 7 reserved bits.
        pub(crate) const ACK_REQ_BYTE: usize = 8;
        pub(crate) const ACK_REQ: u8 = 0x80;
        /// Packet sequence number (24 bits).
        pub(crate) const PSN: Range<usize> = 9..12;
    }

    /// RDMA Extended Transport Header (16 bytes).
    pub(super) mod reth {
        use super::Range;
        /// Remote virtual address.
        pub(crate) const VA: Range<usize> = 0..8;
        /// Remote key.
        pub(crate) const RKEY: Range<usize> = 8..12;
        /// DMA length of the whole message.
        pub(crate) const DMA_LEN: Range<usize> = 12..16;
    }

    /// ACK Extended Transport Header (4 bytes).
    pub(super) mod aeth {
        use super::Range;
        /// Syndrome: ACK / RNR NAK / NAK and a code.
        pub(crate) const SYNDROME: usize = 0;
        /// Message sequence number (24 bits).
        pub(crate) const MSN: Range<usize> = 1..4;
    }

    /// Immediate data (4 bytes).
    pub(super) mod immdt {
        use super::Range;
        /// The immediate value.
        pub(crate) const IMM: Range<usize> = 0..4;
    }
}

pub(crate) use field::bth::RESV8A as BTH_RESV8A;

fn set_bit(byte: &mut u8, mask: u8, on: bool) {
    if on {
        *byte |= mask;
    } else {
        *byte &= !mask;
    }
}

fn check_24(field: &'static str, value: u32) -> Result<(), WireError> {
    if value > MAX_24 {
        return Err(WireError::FieldOutOfRange {
            field,
            value: value.into(),
            max: MAX_24.into(),
        });
    }
    Ok(())
}

header_view!(
    /// A view of an InfiniBand Base Transport Header (12 bytes).
    BthPacket,
    MutableBthPacket,
    BTH_LEN
);

impl<T: AsRef<[u8]>> BthPacket<T> {
    /// Operation code (see [`super::opcode`]).
    pub fn get_opcode(&self) -> u8 {
        self.header()[field::bth::OPCODE]
    }
    /// Solicited event.
    pub fn get_solicited(&self) -> bool {
        self.header()[field::bth::FLAGS] & field::bth::SE != 0
    }
    /// Migration request.
    pub fn get_mig_req(&self) -> bool {
        self.header()[field::bth::FLAGS] & field::bth::MIG_REQ != 0
    }
    /// Pad count: bytes of padding at the end of the payload (0..=3).
    pub fn get_pad_count(&self) -> u8 {
        (self.header()[field::bth::FLAGS] & field::bth::PAD_MASK) >> field::bth::PAD_SHIFT
    }
    /// Transport header version (0).
    pub fn get_tver(&self) -> u8 {
        self.header()[field::bth::FLAGS] & field::bth::TVER_MASK
    }
    /// Partition key.
    pub fn get_pkey(&self) -> u16 {
        read_be(&self.header()[field::bth::PKEY]) as u16
    }
    /// Forward explicit congestion notification.
    pub fn get_fecn(&self) -> bool {
        self.header()[field::bth::RESV8A] & field::bth::FECN != 0
    }
    /// Backward explicit congestion notification (set in CNPs).
    pub fn get_becn(&self) -> bool {
        self.header()[field::bth::RESV8A] & field::bth::BECN != 0
    }
    /// Destination queue pair number (24 bits).
    pub fn get_dest_qp(&self) -> u32 {
        read_be(&self.header()[field::bth::DEST_QP]) as u32
    }
    /// Acknowledge request.
    pub fn get_ack_req(&self) -> bool {
        self.header()[field::bth::ACK_REQ_BYTE] & field::bth::ACK_REQ != 0
    }
    /// Packet sequence number (24 bits).
    pub fn get_psn(&self) -> u32 {
        read_be(&self.header()[field::bth::PSN]) as u32
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> BthPacket<T> {
    /// Sets the operation code.
    pub fn set_opcode(&mut self, value: u8) {
        self.header_mut()[field::bth::OPCODE] = value;
    }
    /// Sets the solicited-event bit.
    pub fn set_solicited(&mut self, value: bool) {
        set_bit(
            &mut self.header_mut()[field::bth::FLAGS],
            field::bth::SE,
            value,
        );
    }
    /// Sets the migration-request bit.
    pub fn set_mig_req(&mut self, value: bool) {
        set_bit(
            &mut self.header_mut()[field::bth::FLAGS],
            field::bth::MIG_REQ,
            value,
        );
    }
    /// Sets the pad count (low 2 bits of `value`).
    pub fn set_pad_count(&mut self, value: u8) {
        let b = &mut self.header_mut()[field::bth::FLAGS];
        *b = (*b & !field::bth::PAD_MASK)
            | ((value << field::bth::PAD_SHIFT) & field::bth::PAD_MASK);
    }
    /// Sets the transport header version (low 4 bits of `value`).
    pub fn set_tver(&mut self, value: u8) {
        let b = &mut self.header_mut()[field::bth::FLAGS];
        *b = (*b & !field::bth::TVER_MASK) | (value & field::bth::TVER_MASK);
    }
    /// Sets the partition key.
    pub fn set_pkey(&mut self, value: u16) {
        write_be(&mut self.header_mut()[field::bth::PKEY], value.into());
    }
    /// Sets FECN.
    pub fn set_fecn(&mut self, value: bool) {
        set_bit(
            &mut self.header_mut()[field::bth::RESV8A],
            field::bth::FECN,
            value,
        );
    }
    /// Sets BECN.
    pub fn set_becn(&mut self, value: bool) {
        set_bit(
            &mut self.header_mut()[field::bth::RESV8A],
            field::bth::BECN,
            value,
        );
    }
    /// Sets the destination QP (low 24 bits of `value`).
    pub fn set_dest_qp(&mut self, value: u32) {
        write_be(&mut self.header_mut()[field::bth::DEST_QP], value.into());
    }
    /// Sets the acknowledge-request bit.
    pub fn set_ack_req(&mut self, value: bool) {
        let byte = &mut self.header_mut()[field::bth::ACK_REQ_BYTE];
        set_bit(byte, field::bth::ACK_REQ, value);
    }
    /// Sets the PSN (low 24 bits of `value`).
    pub fn set_psn(&mut self, value: u32) {
        write_be(&mut self.header_mut()[field::bth::PSN], value.into());
    }
}

header_view!(
    /// A view of an RDMA Extended Transport Header (16 bytes).
    RethPacket,
    MutableRethPacket,
    RETH_LEN
);

impl<T: AsRef<[u8]>> RethPacket<T> {
    /// Remote virtual address.
    pub fn get_va(&self) -> u64 {
        read_be(&self.header()[field::reth::VA])
    }
    /// Remote key.
    pub fn get_rkey(&self) -> u32 {
        read_be(&self.header()[field::reth::RKEY]) as u32
    }
    /// DMA length (of the whole message).
    pub fn get_dma_len(&self) -> u32 {
        read_be(&self.header()[field::reth::DMA_LEN]) as u32
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> RethPacket<T> {
    /// Sets the remote virtual address.
    pub fn set_va(&mut self, value: u64) {
        write_be(&mut self.header_mut()[field::reth::VA], value);
    }
    /// Sets the remote key.
    pub fn set_rkey(&mut self, value: u32) {
        write_be(&mut self.header_mut()[field::reth::RKEY], value.into());
    }
    /// Sets the DMA length.
    pub fn set_dma_len(&mut self, value: u32) {
        write_be(&mut self.header_mut()[field::reth::DMA_LEN], value.into());
    }
}

header_view!(
    /// A view of an ACK Extended Transport Header (4 bytes).
    AethPacket,
    MutableAethPacket,
    AETH_LEN
);

impl<T: AsRef<[u8]>> AethPacket<T> {
    /// Syndrome (ACK, RNR NAK or NAK, and a code).
    pub fn get_syndrome(&self) -> u8 {
        self.header()[field::aeth::SYNDROME]
    }
    /// Message sequence number (24 bits).
    pub fn get_msn(&self) -> u32 {
        read_be(&self.header()[field::aeth::MSN]) as u32
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> AethPacket<T> {
    /// Sets the syndrome.
    pub fn set_syndrome(&mut self, value: u8) {
        self.header_mut()[field::aeth::SYNDROME] = value;
    }
    /// Sets the MSN (low 24 bits of `value`).
    pub fn set_msn(&mut self, value: u32) {
        write_be(&mut self.header_mut()[field::aeth::MSN], value.into());
    }
}

header_view!(
    /// A view of an immediate-data extended header (4 bytes).
    ImmDtPacket,
    MutableImmDtPacket,
    IMMDT_LEN
);

impl<T: AsRef<[u8]>> ImmDtPacket<T> {
    /// The immediate value, as the bytes read big-endian.
    pub fn get_imm(&self) -> u32 {
        read_be(&self.header()[field::immdt::IMM]) as u32
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> ImmDtPacket<T> {
    /// Sets the immediate value (written big-endian).
    pub fn set_imm(&mut self, value: u32) {
        write_be(&mut self.header_mut()[field::immdt::IMM], value.into());
    }
}

/// The fields of a Base Transport Header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BthRepr {
    /// Operation code (see [`super::opcode`]).
    pub opcode: u8,
    /// Solicited event.
    pub solicited: bool,
    /// Migration request.
    pub mig_req: bool,
    /// Pad bytes at the end of the payload (0..=3).
    pub pad_count: u8,
    /// Transport header version (0..=15; IBTA uses 0).
    pub tver: u8,
    /// Partition key (0xFFFF is the default full-member partition).
    pub pkey: u16,
    /// Forward explicit congestion notification.
    pub fecn: bool,
    /// Backward explicit congestion notification.
    pub becn: bool,
    /// Destination queue pair (24 bits).
    pub dest_qp: u32,
    /// Acknowledge request.
    pub ack_req: bool,
    /// Packet sequence number (24 bits).
    pub psn: u32,
}

impl BthRepr {
    /// Bytes [`BthRepr::emit`] writes.
    pub const fn buffer_len() -> usize {
        BTH_LEN
    }

    /// Reads the fields (the reserved bits are ignored, as receivers must).
    pub fn parse<T: AsRef<[u8]>>(packet: &BthPacket<T>) -> BthRepr {
        BthRepr {
            opcode: packet.get_opcode(),
            solicited: packet.get_solicited(),
            mig_req: packet.get_mig_req(),
            pad_count: packet.get_pad_count(),
            tver: packet.get_tver(),
            pkey: packet.get_pkey(),
            fecn: packet.get_fecn(),
            becn: packet.get_becn(),
            dest_qp: packet.get_dest_qp(),
            ack_req: packet.get_ack_req(),
            psn: packet.get_psn(),
        }
    }

    /// Checks every field fits its wire width.
    pub fn check(&self) -> Result<(), WireError> {
        check_24("BTH destination QP", self.dest_qp)?;
        check_24("BTH PSN", self.psn)?;
        if self.pad_count > 3 {
            return Err(WireError::FieldOutOfRange {
                field: "BTH pad count",
                value: self.pad_count.into(),
                max: 3,
            });
        }
        if self.tver > 15 {
            return Err(WireError::FieldOutOfRange {
                field: "BTH transport version",
                value: self.tver.into(),
                max: 15,
            });
        }
        Ok(())
    }

    /// Writes all 12 bytes (reserved bits zero), after [`BthRepr::check`].
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(
        &self,
        packet: &mut BthPacket<T>,
    ) -> Result<(), WireError> {
        self.check()?;
        packet.header_mut().fill(0);
        packet.set_opcode(self.opcode);
        packet.set_solicited(self.solicited);
        packet.set_mig_req(self.mig_req);
        packet.set_pad_count(self.pad_count);
        packet.set_tver(self.tver);
        packet.set_pkey(self.pkey);
        packet.set_fecn(self.fecn);
        packet.set_becn(self.becn);
        packet.set_dest_qp(self.dest_qp);
        packet.set_ack_req(self.ack_req);
        packet.set_psn(self.psn);
        Ok(())
    }
}

/// The fields of an RDMA Extended Transport Header: where a WRITE (or READ) lands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RethRepr {
    /// Remote virtual address.
    pub va: u64,
    /// Remote key.
    pub rkey: u32,
    /// Length of the whole message in bytes.
    pub dma_len: u32,
}

impl RethRepr {
    /// Bytes [`RethRepr::emit`] writes.
    pub const fn buffer_len() -> usize {
        RETH_LEN
    }

    /// Reads the fields.
    pub fn parse<T: AsRef<[u8]>>(packet: &RethPacket<T>) -> RethRepr {
        RethRepr {
            va: packet.get_va(),
            rkey: packet.get_rkey(),
            dma_len: packet.get_dma_len(),
        }
    }

    /// Writes all 16 bytes.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut RethPacket<T>) {
        packet.set_va(self.va);
        packet.set_rkey(self.rkey);
        packet.set_dma_len(self.dma_len);
    }
}

/// The fields of an ACK Extended Transport Header: an ACK or NAK.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AethRepr {
    /// Bits 7-5 say ACK (000), RNR NAK (001) or NAK (011); bits 4-0 carry a credit count, timer
    /// or NAK code.
    pub syndrome: u8,
    /// Message sequence number (24 bits).
    pub msn: u32,
}

impl AethRepr {
    /// Syndrome of a plain ACK (credit field 0, as fabemu does not model end-to-end credits).
    pub const SYNDROME_ACK: u8 = 0x00;
    /// Syndrome of a NAK for a PSN sequence error (an out-of-order packet: go back N).
    pub const SYNDROME_NAK_PSN_SEQUENCE_ERROR: u8 = 0x60;
    /// The syndrome's top three bits, which say what kind of AETH this is.
    const KIND_MASK: u8 = 0xE0;
    const KIND_ACK: u8 = 0x00;
    const KIND_RNR_NAK: u8 = 0x20;
    const KIND_NAK: u8 = 0x60;

    /// Bytes [`AethRepr::emit`] writes.
    pub const fn buffer_len() -> usize {
        AETH_LEN
    }

    /// An ACK of messages up to `msn`.
    pub fn ack(msn: u32) -> Self {
        AethRepr {
            syndrome: Self::SYNDROME_ACK,
            msn,
        }
    }

    /// A NAK saying a packet arrived out of sequence (syndrome 0x60).
    pub fn nak_psn_sequence_error(msn: u32) -> Self {
        AethRepr {
            syndrome: Self::SYNDROME_NAK_PSN_SEQUENCE_ERROR,
            msn,
        }
    }

    /// Whether this is an ACK (syndrome `000xxxxx`).
    pub fn is_ack(&self) -> bool {
        self.syndrome & Self::KIND_MASK == Self::KIND_ACK
    }

    /// Whether this is a NAK (syndrome `011xxxxx`; the low bits give the reason).
    pub fn is_nak(&self) -> bool {
        self.syndrome & Self::KIND_MASK == Self::KIND_NAK
    }

    /// Whether this is a receiver-not-ready NAK (syndrome `001xxxxx`).
    pub fn is_rnr_nak(&self) -> bool {
        self.syndrome & Self::KIND_MASK == Self::KIND_RNR_NAK
    }

    /// Reads the fields.
    pub fn parse<T: AsRef<[u8]>>(packet: &AethPacket<T>) -> AethRepr {
        AethRepr {
            syndrome: packet.get_syndrome(),
            msn: packet.get_msn(),
        }
    }

    /// Writes all 4 bytes; the MSN must fit 24 bits.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(
        &self,
        packet: &mut AethPacket<T>,
    ) -> Result<(), WireError> {
        check_24("AETH MSN", self.msn)?;
        packet.set_syndrome(self.syndrome);
        packet.set_msn(self.msn);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bth_known_bytes() {
        // An RC WRITE ONLY as a ConnectX NIC would send it, laid out from the IBTA BTH diagram.
        let bytes: [u8; 12] = [
            0x0A, // opcode: RC RDMA WRITE ONLY
            0x40, // SE 0, MigReq 1, PadCnt 0, TVer 0
            0xFF, 0xFF, // P_Key 0xFFFF
            0x80, // FECN 1, BECN 0, reserved 0
            0x00, 0x01, 0x18, // destination QP 0x000118
            0x80, // AckReq 1, reserved 0
            0x12, 0x34, 0x56, // PSN 0x123456
        ];
        let view = BthPacket::new(&bytes[..]).unwrap();
        let repr = BthRepr::parse(&view);
        let expected = BthRepr {
            opcode: 0x0A,
            mig_req: true,
            pkey: 0xFFFF,
            fecn: true,
            dest_qp: 0x118,
            ack_req: true,
            psn: 0x12_3456,
            ..BthRepr::default()
        };
        assert_eq!(repr, expected);
        let mut out = [0xAAu8; 12];
        repr.emit(&mut MutableBthPacket::new(&mut out[..]).unwrap())
            .unwrap();
        assert_eq!(out, bytes);
    }

    #[test]
    fn bth_every_bit_round_trips() {
        let repr = BthRepr {
            opcode: 0x81,
            solicited: true,
            mig_req: true,
            pad_count: 3,
            tver: 0xF,
            pkey: 0x8001,
            fecn: true,
            becn: true,
            dest_qp: MAX_24,
            ack_req: true,
            psn: MAX_24,
        };
        let mut out = [0u8; BTH_LEN];
        repr.emit(&mut MutableBthPacket::new(&mut out[..]).unwrap())
            .unwrap();
        // Reserved bits stay zero even when every field is all ones.
        assert_eq!(
            out,
            [0x81, 0xFF, 0x80, 0x01, 0xC0, 0xFF, 0xFF, 0xFF, 0x80, 0xFF, 0xFF, 0xFF]
        );
        assert_eq!(BthRepr::parse(&BthPacket::new(&out[..]).unwrap()), repr);
    }

    #[test]
    fn bth_rejects_out_of_range_fields() {
        let mut out = [0u8; BTH_LEN];
        let mut view = MutableBthPacket::new(&mut out[..]).unwrap();
        for bad in [
            BthRepr {
                dest_qp: MAX_24 + 1,
                ..BthRepr::default()
            },
            BthRepr {
                psn: 1 << 24,
                ..BthRepr::default()
            },
            BthRepr {
                pad_count: 4,
                ..BthRepr::default()
            },
            BthRepr {
                tver: 16,
                ..BthRepr::default()
            },
        ] {
            assert!(matches!(
                bad.emit(&mut view),
                Err(WireError::FieldOutOfRange { .. })
            ));
        }
    }

    #[test]
    fn views_reject_short_buffers() {
        assert!(BthPacket::new(&[0u8; BTH_LEN - 1][..]).is_none());
        assert!(RethPacket::new(&[0u8; RETH_LEN - 1][..]).is_none());
        assert!(AethPacket::new(&[0u8; AETH_LEN - 1][..]).is_none());
        assert!(ImmDtPacket::new(&[0u8; IMMDT_LEN - 1][..]).is_none());
        assert_eq!(BthPacket::<&[u8]>::minimum_packet_size(), BTH_LEN);
    }

    #[test]
    fn reth_aeth_immdt_known_bytes() {
        let reth: [u8; 16] = [
            0x00, 0x00, 0x7F, 0x12, 0x34, 0x56, 0x78, 0x9A, // VA 0x7F12_3456_789A
            0xDE, 0xAD, 0xBE, 0xEF, // R_Key
            0x00, 0x10, 0x00, 0x00, // DMA length 1 MiB
        ];
        let r = RethRepr::parse(&RethPacket::new(&reth[..]).unwrap());
        assert_eq!(
            r,
            RethRepr {
                va: 0x7F12_3456_789A,
                rkey: 0xDEAD_BEEF,
                dma_len: 1 << 20
            }
        );
        let mut out = [0u8; 16];
        r.emit(&mut MutableRethPacket::new(&mut out[..]).unwrap());
        assert_eq!(out, reth);

        let aeth: [u8; 4] = [0x60, 0x00, 0x00, 0x2A]; // NAK PSN sequence error, MSN 42
        let a = AethRepr::parse(&AethPacket::new(&aeth[..]).unwrap());
        assert_eq!(a, AethRepr::nak_psn_sequence_error(42));
        assert!(a.is_nak() && !a.is_ack() && !a.is_rnr_nak());
        let mut out = [0u8; 4];
        a.emit(&mut MutableAethPacket::new(&mut out[..]).unwrap())
            .unwrap();
        assert_eq!(out, aeth);
        assert!(AethRepr::ack(7).is_ack() && !AethRepr::ack(7).is_nak());
        assert!(AethRepr {
            syndrome: 0x1F,
            msn: 0
        }
        .is_ack());
        assert!(AethRepr {
            syndrome: 0x21,
            msn: 0
        }
        .is_rnr_nak());
        let too_big = AethRepr::ack(1 << 24);
        assert!(too_big
            .emit(&mut MutableAethPacket::new(&mut out[..]).unwrap())
            .is_err());

        let imm: [u8; 4] = [0x01, 0x02, 0x03, 0x04];
        let view = ImmDtPacket::new(&imm[..]).unwrap();
        assert_eq!(view.get_imm(), 0x0102_0304);
        let mut out = [0u8; 4];
        MutableImmDtPacket::new(&mut out[..])
            .unwrap()
            .set_imm(0x0102_0304);
        assert_eq!(out, imm);
    }

    #[test]
    fn payload_is_what_follows_the_header() {
        let bytes = [0u8; BTH_LEN + 3];
        assert_eq!(BthPacket::new(&bytes[..]).unwrap().payload().len(), 3);
    }
}
