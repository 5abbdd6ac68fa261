//! IEEE 802.1Qbb priority-based flow control: a MAC-control frame (ethertype 0x8808, opcode
//! 0x0101) to 01:80:C2:00:00:01 carrying a class-enable vector and eight pause timers, one per
//! priority class. A timer is in quanta of 512 bit times at the link speed; 0 with the class
//! enabled means "resume" (XON).
//!
//! The body view is hand-written rather than a `pnet_macros` `#[packet]` for the reason given in
//! `ib.rs`.

use pnet_packet::ethernet::{EtherType, EthernetPacket, MutableEthernetPacket};

use super::{
    read_be, write_be, MacAddr, WireError, ETHERTYPE_MAC_CONTROL, ETH_HEADER_LEN, PFC_DST_MAC,
    PFC_FRAME_LEN, PFC_OPCODE,
};
use crate::units::PS_PER_S;

/// Priority classes a PFC frame addresses.
const CLASSES: usize = 8;
/// Bit times in one pause quantum.
const BITS_PER_QUANTUM: u128 = 512;

/// Byte offsets inside the MAC-control body (after the Ethernet header).
mod field {
    use core::ops::Range;
    /// MAC-control opcode.
    pub(super) const OPCODE: Range<usize> = 0..2;
    /// Class-enable vector: upper byte reserved (zero), bit `i` of the lower byte enables class
    /// `i`'s timer.
    pub(super) const CLASS_ENABLE: Range<usize> = 2..4;
    /// Eight 16-bit pause timers, class 0 first.
    pub(super) const TIMES: Range<usize> = 4..20;
    /// Bytes per timer.
    pub(super) const TIME_LEN: usize = 2;
}

/// Meaningful bytes of the MAC-control body; the rest of the frame is zero padding.
const PFC_BODY_LEN: usize = field::TIMES.end;

header_view!(
    /// A view of a PFC MAC-control body (20 bytes, after the Ethernet header).
    PfcPacket,
    MutablePfcPacket,
    PFC_BODY_LEN
);

impl<T: AsRef<[u8]>> PfcPacket<T> {
    /// MAC-control opcode (0x0101 for PFC).
    pub fn get_opcode(&self) -> u16 {
        read_be(&self.header()[field::OPCODE]) as u16
    }
    /// Class-enable vector (upper 8 bits reserved).
    pub fn get_class_enable_vector(&self) -> u16 {
        read_be(&self.header()[field::CLASS_ENABLE]) as u16
    }
    /// The eight pause timers, class 0 first.
    pub fn get_pause_times(&self) -> [u16; 8] {
        let mut times = [0u16; CLASSES];
        let bytes = self.header()[field::TIMES].chunks_exact(field::TIME_LEN);
        for (t, b) in times.iter_mut().zip(bytes) {
            *t = read_be(b) as u16;
        }
        times
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> PfcPacket<T> {
    /// Sets the MAC-control opcode.
    pub fn set_opcode(&mut self, value: u16) {
        write_be(&mut self.header_mut()[field::OPCODE], value.into());
    }
    /// Sets the class-enable vector.
    pub fn set_class_enable_vector(&mut self, value: u16) {
        write_be(&mut self.header_mut()[field::CLASS_ENABLE], value.into());
    }
    /// Sets the eight pause timers, class 0 first.
    pub fn set_pause_times(&mut self, times: [u16; 8]) {
        let bytes = self.header_mut()[field::TIMES].chunks_exact_mut(field::TIME_LEN);
        for (b, t) in bytes.zip(times) {
            write_be(b, t.into());
        }
    }
}

/// IEEE 802.1Qbb priority flow control (MAC control opcode 0x0101).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PfcPauseRepr {
    /// The pausing port's MAC.
    pub src_mac: MacAddr,
    /// Bit `i` set: `quanta[i]` applies to priority class `i`.
    pub class_enable: u8,
    /// Pause time per class in quanta (512 bit times); 0 on an enabled class resumes it.
    pub quanta: [u16; 8],
}

impl PfcPauseRepr {
    /// Pauses (XOFF) one priority `class` (0..=7; higher bits ignored) for `quanta`.
    pub fn xoff(src_mac: MacAddr, class: u8, quanta: u16) -> Self {
        let class = class & 7;
        let mut times = [0u16; CLASSES];
        times[usize::from(class)] = quanta;
        PfcPauseRepr {
            src_mac,
            class_enable: 1 << class,
            quanta: times,
        }
    }

    /// Resumes (XON) one priority `class` (0..=7; higher bits ignored): enabled with time 0.
    pub fn xon(src_mac: MacAddr, class: u8) -> Self {
        Self::xoff(src_mac, class, 0)
    }

    /// The bytes [`PfcPauseRepr::emit`] writes.
    pub const fn buffer_len() -> usize {
        PFC_FRAME_LEN
    }

    /// Writes the whole frame, [`PFC_FRAME_LEN`] bytes, zero padded (no FCS).
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize, WireError> {
        let got = buf.len();
        let short = || WireError::BufferTooShort {
            need: PFC_FRAME_LEN,
            got,
        };
        let frame = buf.get_mut(..PFC_FRAME_LEN).ok_or_else(short)?;
        frame.fill(0);
        let (eth_bytes, body) = frame.split_at_mut(ETH_HEADER_LEN);
        let mut eth = MutableEthernetPacket::new(eth_bytes).ok_or_else(short)?;
        eth.set_destination(PFC_DST_MAC.into());
        eth.set_source(self.src_mac.into());
        eth.set_ethertype(EtherType(ETHERTYPE_MAC_CONTROL));
        let mut pfc = MutablePfcPacket::new(body).ok_or_else(short)?;
        pfc.set_opcode(PFC_OPCODE);
        pfc.set_class_enable_vector(self.class_enable.into());
        pfc.set_pause_times(self.quanta);
        Ok(PFC_FRAME_LEN)
    }

    /// Parses a PFC frame: checks the destination MAC, ethertype and opcode. Needs the 34
    /// meaningful bytes; the padding is neither required nor checked, nor are the reserved upper
    /// bits of the class-enable vector. Timers of disabled classes are returned as they are.
    pub fn parse(frame: &[u8]) -> Result<Self, WireError> {
        let got = frame.len();
        let need = ETH_HEADER_LEN + PFC_BODY_LEN;
        let truncated = |layer| WireError::Truncated { layer, need, got };
        let eth = EthernetPacket::new(frame).ok_or(truncated("Ethernet"))?;
        let ethertype = eth.get_ethertype().0;
        if ethertype != ETHERTYPE_MAC_CONTROL {
            return Err(WireError::UnexpectedEthertype {
                expected: ETHERTYPE_MAC_CONTROL,
                found: ethertype,
            });
        }
        let pfc = frame
            .get(ETH_HEADER_LEN..)
            .and_then(PfcPacket::new)
            .ok_or(truncated("PFC"))?;
        if pfc.get_opcode() != PFC_OPCODE {
            return Err(WireError::NotPfc(pfc.get_opcode()));
        }
        let dst: MacAddr = eth.get_destination().into();
        if dst != PFC_DST_MAC {
            return Err(WireError::BadPfcDestination(dst));
        }
        Ok(PfcPauseRepr {
            src_mac: eth.get_source().into(),
            class_enable: pfc.get_class_enable_vector() as u8,
            quanta: pfc.get_pause_times(),
        })
    }
}

/// Pause duration of `quanta` at `link_bps` bits/s, in picoseconds (one quantum = 512 bit times),
/// rounded up. A zero-speed link never resumes: `u64::MAX`.
pub fn pause_quanta_to_ps(quanta: u16, link_bps: u64) -> u64 {
    if link_bps == 0 {
        return u64::MAX;
    }
    // 65535 * 512 bits * 1e12 overflows u64; u128 does not.
    let num = u128::from(quanta) * BITS_PER_QUANTUM * u128::from(PS_PER_S);
    let ps = num.div_ceil(u128::from(link_bps));
    u64::try_from(ps).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An XOFF for priority 3, maximum time, from 02:00:00:00:00:01, written from 802.1Qbb
    /// (clause 36) and 802.3 annex 31D.
    const PFC_XOFF_C3: [u8; 60] = [
        // Ethernet: destination 01:80:c2:00:00:01 (MAC control), source, ethertype 0x8808
        0x01, 0x80, 0xc2, 0x00, 0x00, 0x01, //
        0x02, 0x00, 0x00, 0x00, 0x00, 0x01, //
        0x88, 0x08, //
        // MAC-control opcode 0x0101 (PFC)
        0x01, 0x01, //
        // class-enable vector: reserved byte 0, then bit 3 = class 3
        0x00, 0x08, //
        // pause timers class 0..7: only class 3 = 0xffff quanta
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xff, 0xff, //
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, //
        // padding to 60 bytes (64 with FCS): 26 zero bytes
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    ];

    #[test]
    fn pfc_matches_hand_written_bytes() {
        let repr = PfcPauseRepr::xoff([0x02, 0, 0, 0, 0, 0x01], 3, 0xFFFF);
        let mut buf = [0xEEu8; 64];
        assert_eq!(repr.emit(&mut buf), Ok(PFC_FRAME_LEN));
        assert_eq!(buf[..PFC_FRAME_LEN], PFC_XOFF_C3);
        assert_eq!(
            buf[PFC_FRAME_LEN..],
            [0xEE; 4],
            "nothing written past 60 bytes"
        );
        assert_eq!(PfcPauseRepr::parse(&PFC_XOFF_C3), Ok(repr));
    }

    #[test]
    fn pfc_round_trips() {
        let reprs = [
            PfcPauseRepr::xon([0x02, 0, 0, 0, 0, 0x09], 0),
            PfcPauseRepr::xoff([0x02, 0, 0, 0, 0, 0x09], 7, 1),
            PfcPauseRepr {
                src_mac: [0xAA; 6],
                class_enable: 0xFF,
                quanta: [1, 2, 3, 4, 5, 6, 7, 0xFFFF],
            },
        ];
        for repr in reprs {
            let mut buf = [0u8; PFC_FRAME_LEN];
            repr.emit(&mut buf).unwrap();
            assert_eq!(PfcPauseRepr::parse(&buf), Ok(repr));
        }
        assert_eq!(PfcPauseRepr::xon([0; 6], 5).class_enable, 0x20);
        assert_eq!(PfcPauseRepr::xon([0; 6], 5).quanta, [0; 8]);
    }

    #[test]
    fn pfc_rejects_bad_frames() {
        let mut buf = [0u8; 59];
        assert_eq!(
            PfcPauseRepr::xon([0; 6], 0).emit(&mut buf),
            Err(WireError::BufferTooShort { need: 60, got: 59 })
        );
        for cut in 0..34 {
            assert!(matches!(
                PfcPauseRepr::parse(&PFC_XOFF_C3[..cut]),
                Err(WireError::Truncated { .. })
            ));
        }
        assert!(PfcPauseRepr::parse(&PFC_XOFF_C3[..34]).is_ok());
        let mut f = PFC_XOFF_C3;
        f[14] = 0x00; // opcode 0x0001: 802.3x global pause
        assert_eq!(PfcPauseRepr::parse(&f), Err(WireError::NotPfc(0x0001)));
        let mut f = PFC_XOFF_C3;
        f[5] = 0x02;
        assert!(matches!(
            PfcPauseRepr::parse(&f),
            Err(WireError::BadPfcDestination(_))
        ));
        let mut f = PFC_XOFF_C3;
        f[13] = 0x00;
        assert!(matches!(
            PfcPauseRepr::parse(&f),
            Err(WireError::UnexpectedEthertype { found: 0x8800, .. })
        ));
    }

    #[test]
    fn quanta_to_picoseconds() {
        // 100 Gb/s: one quantum = 512 bits = 5.12 ns.
        assert_eq!(pause_quanta_to_ps(1, 100_000_000_000), 5_120);
        assert_eq!(pause_quanta_to_ps(0xFFFF, 100_000_000_000), 65_535 * 5_120);
        // 400 Gb/s: 1.28 ns; 25 Gb/s: 20.48 ns.
        assert_eq!(pause_quanta_to_ps(1, 400_000_000_000), 1_280);
        assert_eq!(pause_quanta_to_ps(10, 25_000_000_000), 204_800);
        // 3 bit/s: 512/3 s, rounded up.
        assert_eq!(pause_quanta_to_ps(1, 3), 170_666_666_666_667);
        // 65535 quanta at 1 bit/s overflow u64 in ps: saturate; a 0 b/s link never resumes.
        assert_eq!(pause_quanta_to_ps(0xFFFF, 1), u64::MAX);
        assert_eq!(pause_quanta_to_ps(1, 0), u64::MAX);
        assert_eq!(pause_quanta_to_ps(0, 100_000_000_000), 0);
    }
}
