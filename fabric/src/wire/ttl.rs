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
    let t = field::IPV4 + field::ipv4::TTL;
    let ttl = frame[t];
    if ttl == 0 {
        return Ok(0);
    }
    // TTL shares a 16-bit checksum word with the protocol byte.
    let old = u16::from_be_bytes([frame[t], frame[t + 1]]);
    let new = old - 0x0100;
    let c = field::IPV4 + field::ipv4::CHECKSUM.start;
    let hc = u16::from_be_bytes([frame[c], frame[c + 1]]);
    let mut sum = (!hc as u32) + (!old as u32 & 0xFFFF) + new as u32;
    while sum > 0xFFFF {
        sum = (sum & 0xFFFF) + (sum >> 16);
    }
    let hc_new = !(sum as u16);
    frame[t] = ttl - 1;
    frame[c..c + 2].copy_from_slice(&hc_new.to_be_bytes());
    Ok(ttl - 1)
}

#[cfg(test)]
mod tests {
    use super::*;
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
