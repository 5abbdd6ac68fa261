//! Routers decrement the IPv4 TTL of every frame they forward; fabemu's switches do too, so a
//! routing loop ends in a counted drop instead of circulating forever.

use super::{field, WireError, ETHERTYPE_IPV4, ETH_HEADER_LEN, IPV4_HEADER_LEN};

/// Decrements the IPv4 TTL in place and patches the header checksum incrementally
/// (RFC 1624: HC' = ~(~HC + ~m + m')). Returns the new TTL; a frame that arrives with TTL 0
/// is left unchanged and reports 0, so the caller drops it either way.
#[inline]
pub fn decrement_ttl(frame: &mut [u8]) -> Result<u8, WireError> {
    let got = frame.len();
    let need = field::IPV4 + IPV4_HEADER_LEN;
    if got < need {
        return Err(WireError::Truncated {
            layer: "IPv4",
            need,
            got,
        });
    }
    let ethertype = u16::from_be_bytes([frame[12], frame[13]]);
    if ethertype != ETHERTYPE_IPV4 {
        return Err(WireError::UnexpectedEthertype {
            expected: ETHERTYPE_IPV4,
            found: ethertype,
        });
    }
    let version = frame[ETH_HEADER_LEN] >> 4;
    if version != 4 {
        return Err(WireError::BadIpVersion(version));
    }
    match frame.first_chunk_mut::<{ field::IPV4 + IPV4_HEADER_LEN }>() {
        Some(h) => Ok(decrement_in_header(h)),
        // Not reached: the length was checked above.
        None => Ok(0),
    }
}

/// The TTL decrement and checksum patch of [`decrement_ttl`] on the first `N` bytes of a frame
/// already known to be IPv4 (`N` covers the IPv4 header; a shorter `N` fails to compile).
#[inline]
pub(crate) fn decrement_in_header<const N: usize>(h: &mut [u8; N]) -> u8 {
    const { assert!(N >= field::IPV4 + IPV4_HEADER_LEN) };
    let t = field::IPV4 + field::ipv4::TTL;
    let ttl = h[t];
    if ttl == 0 {
        return 0;
    }
    // TTL shares a 16-bit checksum word m with the protocol byte, and m' = m - 0x100, so
    // ~m + m' = 0xFFFF - m + m - 0x100 = 0xFEFF whatever the protocol and TTL: the checksum
    // depends on the old checksum alone (a test checks all 65536 against the general form).
    let c = field::IPV4 + field::ipv4::CHECKSUM.start;
    let hc = u16::from_be_bytes([h[c], h[c + 1]]);
    let hc_new = patch_for_decrement(hc);
    h[t] = ttl - 1;
    [h[c], h[c + 1]] = hc_new.to_be_bytes();
    ttl - 1
}

/// RFC 1624's HC' = ~(~HC + ~m + m') for m' = m - 0x100 (any m >= 0x100), that is
/// ~(~HC + 0xFEFF) folded: at most 0x1FEFE before the first fold, so two folds always bring
/// it to 16 bits (a fold of a 16-bit sum is the identity).
#[inline]
fn patch_for_decrement(hc: u16) -> u16 {
    let sum = u32::from(!hc) + 0xFEFF;
    let sum = (sum & 0xFFFF) + (sum >> 16);
    let sum = (sum & 0xFFFF) + (sum >> 16);
    !(sum as u16)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The RFC 1624 update as it was written before (the full sum, folded in a loop).
    fn general(hc: u16, old: u16) -> u16 {
        let new = old - 0x0100;
        let mut sum = (!hc as u32) + (!old as u32 & 0xFFFF) + new as u32;
        while sum > 0xFFFF {
            sum = (sum & 0xFFFF) + (sum >> 16);
        }
        !(sum as u16)
    }

    #[test]
    fn the_patch_depends_on_the_old_checksum_alone() {
        for hc in 0..=u16::MAX {
            let want = patch_for_decrement(hc);
            // Every TTL (1..=255) with a few protocols; the identity says none matters.
            for ttl in 1..=255u16 {
                for proto in [0u16, 6, 17, 0xFF] {
                    assert_eq!(general(hc, ttl << 8 | proto), want, "{hc:#x} {ttl} {proto}");
                }
            }
        }
    }
    use pnet_packet::ipv4::{self, Ipv4Packet};
    use proptest::prelude::*;

    proptest! {
        /// The incremental update equals a full recomputation for any header.
        #[test]
        fn incremental_checksum_matches_full(mut ip in proptest::collection::vec(any::<u8>(), 20), ttl in 1u8..=255) {
            ip[0] = 0x45;
            ip[8] = ttl;
            let full = |b: &[u8]| Ipv4Packet::new(b).map(|p| ipv4::checksum(&p)).unwrap_or(0);
            let cs = full(&ip);
            ip[10..12].copy_from_slice(&cs.to_be_bytes());
            let mut frame = vec![0u8; 14];
            frame[12] = 0x08;
            frame.extend_from_slice(&ip);
            prop_assert_eq!(decrement_ttl(&mut frame), Ok(ttl - 1));
            let after = &frame[14..];
            prop_assert_eq!(after[8], ttl - 1);
            let expected = full(after);
            prop_assert_eq!(u16::from_be_bytes([after[10], after[11]]), expected);
        }
    }

    #[test]
    fn rejects_short_and_non_ip_frames() {
        assert!(decrement_ttl(&mut [0u8; 20]).is_err());
        let mut f = [0u8; 34];
        f[12] = 0x88;
        f[13] = 0x08;
        assert!(decrement_ttl(&mut f).is_err());
    }
}
