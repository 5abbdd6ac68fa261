//! The RoCEv2 invariant CRC (ICRC), computed as Linux rxe does (`rxe_icrc.c`).
//!
//! InfiniBand defines the ICRC as a CRC-32 over the packet from the LRH on, with the fields a
//! router or switch may change (the "variant" fields) replaced by ones, so that it survives
//! forwarding end to end. RoCEv2 has no LRH: the spec substitutes 8 bytes of ones, which rxe folds
//! into the seed `0xdebb20e3`. The variant fields of IPv4/UDP/BTH are: IPv4 TOS (DSCP and ECN,
//! so ECN marking keeps the ICRC valid), TTL and header checksum; the UDP checksum; the BTH
//! reserved byte holding FECN/BECN. The CRC is the standard reflected CRC-32 (Ethernet's), sent
//! least significant byte first.

use pnet_packet::ethernet::EthernetPacket;
use pnet_packet::ipv4::Ipv4Packet;

use super::ib::BTH_RESV8A;
use super::{field, WireError, ETHERTYPE_IPV4, ETH_HEADER_LEN, ICRC_LEN, MAX_PAD_LEN};

/// CRC state after the 8 bytes of ones standing for the LRH, in the kernel's raw (non-inverted)
/// convention: `crc32_le(0xffffffff, [0xff; 8])`.
const ICRC_SEED: u32 = 0xDEBB_20E3;

/// Bytes from the start of IPv4 to the end of the BTH: the part with variant fields.
const MASKED_LEN: usize = field::BTH_END - field::IPV4;

/// ICRC as Linux rxe computes it (CRC-32 seeded per the spec over the IP/UDP/BTH headers with the
/// variant fields masked to ones — IPv4 TOS, TTL, header checksum; UDP checksum; BTH reserved
/// byte — then the remaining headers and payload; result inverted), returned as the 4 bytes to
/// append to the frame. `header` starts at the Ethernet header (the function skips it) and is
/// assumed to carry IPv4 without options; how the bytes are split between `header` and `payload`
/// does not matter.
pub fn icrc(header: &[u8], payload: &[u8]) -> [u8; 4] {
    icrc_padded(header, payload, 0)
}

/// [`icrc`] of a frame whose `payload` is followed by `pad` zero bytes (the pad to 4 bytes
/// that the BTH's PadCnt counts: the ICRC covers it). `pad` beyond [`MAX_PAD_LEN`] counts as
/// that many.
pub fn icrc_padded(header: &[u8], payload: &[u8], pad: usize) -> [u8; 4] {
    let covered = header.get(field::IPV4..).unwrap_or(&[]);
    let n = covered.len().min(MASKED_LEN);
    let mut masked = [0u8; MASKED_LEN];
    masked[..n].copy_from_slice(&covered[..n]);
    let ip = 0;
    let udp = field::UDP - field::IPV4;
    let bth = field::BTH - field::IPV4;
    masked[ip + field::ipv4::TOS] = 0xFF;
    masked[ip + field::ipv4::TTL] = 0xFF;
    masked[ip + field::ipv4::CHECKSUM.start..ip + field::ipv4::CHECKSUM.end].fill(0xFF);
    masked[udp + field::udp::CHECKSUM.start..udp + field::udp::CHECKSUM.end].fill(0xFF);
    masked[bth + BTH_RESV8A] = 0xFF;

    // crc32fast keeps the inverted (finalized) state, so seeding it with !ICRC_SEED continues
    // the kernel's raw CRC, and its final inversion is rxe's `~crc`.
    let mut hasher = crc32fast::Hasher::new_with_initial(!ICRC_SEED);
    hasher.update(&masked[..n]);
    hasher.update(&covered[n..]);
    hasher.update(payload);
    hasher.update(&[0; MAX_PAD_LEN][..pad.min(MAX_PAD_LEN)]);
    hasher.finalize().to_le_bytes()
}

/// The trailer of a RoCEv2 frame: `pad` zero bytes (at most [`MAX_PAD_LEN`]) and the ICRC of
/// `header`, `payload` and that pad; returns the array and how many of its bytes are the
/// trailer. An array, so building a frame allocates nothing.
pub fn padded_trailer(
    header: &[u8],
    payload: &[u8],
    pad: usize,
) -> ([u8; MAX_PAD_LEN + ICRC_LEN], usize) {
    let pad = pad.min(MAX_PAD_LEN);
    let mut t = [0; MAX_PAD_LEN + ICRC_LEN];
    t[pad..pad + ICRC_LEN].copy_from_slice(&icrc_padded(header, payload, pad));
    (t, pad + ICRC_LEN)
}

/// Checks the ICRC at the end of a full RoCEv2 frame (where the IPv4 total length says the
/// datagram ends; Ethernet padding after it is ignored).
pub fn check_icrc(frame: &[u8]) -> Result<(), WireError> {
    let got = frame.len();
    let eth = EthernetPacket::new(frame).ok_or(WireError::Truncated {
        layer: "Ethernet",
        need: ETH_HEADER_LEN,
        got,
    })?;
    if eth.get_ethertype().0 != ETHERTYPE_IPV4 {
        return Err(WireError::UnexpectedEthertype {
            expected: ETHERTYPE_IPV4,
            found: eth.get_ethertype().0,
        });
    }
    let ip = frame
        .get(field::IPV4..)
        .and_then(Ipv4Packet::new)
        .ok_or(WireError::Truncated {
            layer: "IPv4",
            need: field::UDP,
            got,
        })?;
    let end = ETH_HEADER_LEN + usize::from(ip.get_total_length());
    if end < field::BTH_END + ICRC_LEN {
        return Err(WireError::BadLength(
            "IPv4 total length too short for a BTH and ICRC",
        ));
    }
    let datagram = frame.get(..end).ok_or(WireError::Truncated {
        layer: "payload and ICRC",
        need: end,
        got,
    })?;
    let (covered, trailer) = datagram.split_at(end - ICRC_LEN);
    let expected = icrc(covered, &[]);
    let mut found = [0u8; ICRC_LEN];
    found.copy_from_slice(trailer);
    if found != expected {
        return Err(WireError::BadIcrc { expected, found });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seed_is_crc_of_eight_ones() {
        // The seed rxe uses is the raw CRC after a masked 8-byte LRH: standard CRC-32 of
        // [0xff; 8] is its complement.
        assert_eq!(crc32fast::hash(&[0xFF; 8]), !ICRC_SEED);
    }

    #[test]
    fn split_between_header_and_payload_does_not_matter() {
        let bytes: Vec<u8> = (0..120u8).collect();
        let whole = icrc(&bytes, &[]);
        // Any cut after the BTH (where the masked part ends).
        for cut in [field::BTH_END, 60, 119, 120] {
            let (h, p) = bytes.split_at(cut);
            assert_eq!(icrc(h, p), whole, "cut at {cut}");
        }
    }

    #[test]
    fn variant_fields_do_not_change_the_icrc() {
        let bytes: Vec<u8> = (0..80u8).collect();
        let base = icrc(&bytes, b"payload");
        let variant = [
            field::IPV4 + field::ipv4::TOS,
            field::IPV4 + field::ipv4::TTL,
            field::IPV4 + field::ipv4::CHECKSUM.start,
            field::IPV4 + field::ipv4::CHECKSUM.start + 1,
            field::UDP + field::udp::CHECKSUM.start,
            field::UDP + field::udp::CHECKSUM.start + 1,
            field::BTH + BTH_RESV8A,
        ];
        for at in 0..bytes.len() {
            let mut changed = bytes.clone();
            changed[at] ^= 0x5A;
            let same = icrc(&changed, b"payload") == base;
            // Ethernet is not covered at all.
            let expected = at < ETH_HEADER_LEN || variant.contains(&at);
            assert_eq!(same, expected, "byte {at}");
        }
    }

    #[test]
    fn check_icrc_detects_corruption_and_truncation() {
        // A minimal CNP-sized datagram: ethertype IPv4, IHL 5, total length 60.
        let mut cnp = [0u8; 74];
        cnp[12] = 0x08;
        cnp[14] = 0x45;
        cnp[17] = 60;
        let trailer = icrc(&cnp[..70], &[]);
        cnp[70..].copy_from_slice(&trailer);
        assert_eq!(check_icrc(&cnp), Ok(()));
        let mut bad = cnp;
        bad[60] ^= 1;
        assert!(matches!(check_icrc(&bad), Err(WireError::BadIcrc { .. })));
        assert!(matches!(
            check_icrc(&cnp[..73]),
            Err(WireError::Truncated { .. })
        ));
        // Ethernet padding after the datagram is ignored.
        let mut padded = cnp.to_vec();
        padded.extend_from_slice(&[0; 6]);
        assert_eq!(check_icrc(&padded), Ok(()));
    }
}
