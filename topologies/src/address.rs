//! Host addresses: the IPv4 address each host puts in its packets.
//!
//! All addresses lie in 10.0.0.0/8 and none is a network (`10.0.0.0`) or broadcast
//! (`10.255.255.255`) address. Two schemes, chosen per fabric (never per host, so one fabric's
//! addresses are always distinct):
//!
//! - **rank-based** ([`rank_ipv4`]): the host of rank `r` is `10.0.0.0 + r + 1`, i.e.
//!   `10.0.0.1`, `10.0.0.2`, ..., `10.0.0.255`, `10.0.1.0`, ... This is what the emulator has
//!   always used; fabrics without dimensions (explicit, leaf-spine, fat-tree) keep it.
//! - **coordinate-based** ([`host_ipv4`]): on a fabric with at most 3 dimensions, each of size
//!   at most 255, the host at coordinates `[c0, c1, c2]` is `10.c2.c1.(c0 + 1)` (missing
//!   dimensions count as coordinate 0), so an address can be read back as a position: in a
//!   4×4×4 torus, `10.3.1.1` is `[0, 1, 3]`. Larger or higher-dimensional fabrics fall back to
//!   the rank-based address of the host's rank. On one-dimensional fabrics the two schemes
//!   give the same addresses.

use crate::error::TopologyError;

/// The highest `rank + 1` that stays below the 10.0.0.0/8 broadcast address.
const MAX_OFFSET: usize = 0x00FF_FFFE;

/// Largest dimension size the coordinate-based scheme spells out (`c0 + 1` must fit a byte).
const MAX_SPELLED_SIZE: usize = 255;

/// The rank-based address `10.0.0.0 + rank + 1`.
///
/// # Errors
/// [`TopologyError::TooLarge`] if `rank + 1` does not fit below `10.255.255.255`.
pub fn rank_ipv4(rank: usize) -> Result<[u8; 4], TopologyError> {
    let offset =
        rank.checked_add(1)
            .filter(|&o| o <= MAX_OFFSET)
            .ok_or(TopologyError::TooLarge {
                what: "host rank for a 10.0.0.0/8 address",
            })?;
    let [_, b, c, d] = (offset as u32).to_be_bytes();
    Ok([10, b, c, d])
}

/// The address of the host at `coords` in a fabric whose dimensions have sizes `dims` (the
/// scheme of the [module documentation](self)): `10.c2.c1.(c0 + 1)` when there are at most 3
/// dimensions of size at most 255, else [`rank_ipv4`] of the host's rank.
///
/// # Errors
/// [`TopologyError::BadCoordinates`] if `coords` and `dims` differ in length or a coordinate is
/// not below its size; [`TopologyError::TooLarge`] as for [`rank_ipv4`].
pub fn host_ipv4(coords: &[usize], dims: &[usize]) -> Result<[u8; 4], TopologyError> {
    if coords.len() != dims.len() || coords.iter().zip(dims).any(|(c, s)| c >= s) {
        return Err(TopologyError::BadCoordinates {
            coords: coords.to_vec(),
            dims: dims.to_vec(),
        });
    }
    if dims.len() <= 3 && dims.iter().all(|&s| s <= MAX_SPELLED_SIZE) {
        let at = |d: usize| coords.get(d).copied().unwrap_or(0) as u8;
        // c0 < 255, so c0 + 1 fits; c2 <= 254, so the broadcast address is never reached.
        return Ok([10, at(2), at(1), at(0) + 1]);
    }
    let mut rank = 0usize;
    for (&c, &s) in coords.iter().zip(dims).rev() {
        rank =
            rank.checked_mul(s)
                .and_then(|r| r.checked_add(c))
                .ok_or(TopologyError::TooLarge {
                    what: "host rank for a 10.0.0.0/8 address",
                })?;
    }
    rank_ipv4(rank)
}

/// Coordinates of `rank` (dimension 0 fastest); the caller guarantees `rank < ∏ dims`.
pub(crate) fn coordinates_of(mut rank: usize, dims: &[usize]) -> Vec<usize> {
    dims.iter()
        .map(|&s| {
            let c = rank % s.max(1);
            rank /= s.max(1);
            c
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rank_addresses_count_from_10_0_0_1() {
        assert_eq!(rank_ipv4(0), Ok([10, 0, 0, 1]));
        assert_eq!(rank_ipv4(254), Ok([10, 0, 0, 255]));
        assert_eq!(rank_ipv4(255), Ok([10, 0, 1, 0]));
        assert_eq!(rank_ipv4(MAX_OFFSET - 1), Ok([10, 255, 255, 254]));
        assert!(matches!(
            rank_ipv4(MAX_OFFSET),
            Err(TopologyError::TooLarge { .. })
        ));
        assert!(matches!(
            rank_ipv4(usize::MAX),
            Err(TopologyError::TooLarge { .. })
        ));
    }

    #[test]
    fn coordinate_addresses_spell_the_position() {
        assert_eq!(host_ipv4(&[0, 1, 3], &[4, 4, 4]), Ok([10, 3, 1, 1]));
        assert_eq!(host_ipv4(&[254, 0], &[255, 2]), Ok([10, 0, 0, 255]));
        assert_eq!(host_ipv4(&[5], &[8]), rank_ipv4(5));
        // Four dimensions, or a size above 255: the rank-based address of the rank.
        assert_eq!(host_ipv4(&[1, 1, 0, 1], &[2, 2, 2, 2]), rank_ipv4(11));
        assert_eq!(host_ipv4(&[1, 2], &[256, 3]), rank_ipv4(2 * 256 + 1));
        assert_eq!(
            host_ipv4(&[1, 4], &[2, 4]),
            Err(TopologyError::BadCoordinates {
                coords: vec![1, 4],
                dims: vec![2, 4]
            })
        );
        assert!(host_ipv4(&[1], &[2, 4]).is_err());
    }

    #[test]
    fn one_dimension_agrees_with_ranks() {
        for s in [2, 7, 255, 256, 1000] {
            for r in [0, 1, s / 2, s - 1] {
                assert_eq!(host_ipv4(&[r], &[s]), rank_ipv4(r), "size {s} rank {r}");
            }
        }
    }

    #[test]
    fn coordinates_invert_the_rank() {
        assert_eq!(coordinates_of(0, &[2, 8, 4]), vec![0, 0, 0]);
        assert_eq!(
            coordinates_of(1 + 2 * 3 + 16 * 2, &[2, 8, 4]),
            vec![1, 3, 2]
        );
        assert_eq!(coordinates_of(63, &[2, 8, 4]), vec![1, 7, 3]);
    }
}
