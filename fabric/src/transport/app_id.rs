//! Which of a host's applications a timer token or an RDMA immediate belongs to.
//!
//! Several applications share one host and therefore one timer namespace and one 32-bit
//! immediate space. The fabric knows none of them: an [`AppId`] is an opaque prefix of the
//! high bits, chosen by the crate that owns the application, and the host's dispatcher (the
//! crate that puts the applications together) checks that its applications' prefixes are
//! apart ([`AppId::overlaps`]). What the remaining bits mean is the owner's business: each
//! owner encodes and decodes its arguments in one place of its own.
//!
//! Timer tokens are [`TOKEN_BITS`] wide (the packet transport keeps the two bits above for
//! its own timers): the prefix is the high end of those.

/// Bits of a timer token an application may use: every transport takes tokens below 2^62.
pub const TOKEN_BITS: u32 = 62;

/// An application's prefix of the high bits of its timer tokens and immediates.
///
/// `AppId::new(0b1, 1)` owns every value whose top bit is set and leaves its owner 31 bits of
/// immediate (61 of token); `AppId::new(0b01, 2)` owns those starting `01`, with 30 (60).
/// Prefixes of different lengths are apart when neither begins the other.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AppId {
    /// The prefix's value, in its low `bits` bits.
    prefix: u32,
    /// The prefix's length, 1..=8.
    bits: u32,
}

impl AppId {
    /// The application owning the values whose `bits` high bits (1..=8) are `prefix`.
    /// Out-of-range arguments are clamped: `bits` into 1..=8, `prefix` to its low `bits` bits.
    pub const fn new(prefix: u32, bits: u32) -> AppId {
        let bits = if bits < 1 {
            1
        } else if bits > 8 {
            8
        } else {
            bits
        };
        AppId {
            prefix: prefix & ((1 << bits) - 1),
            bits,
        }
    }

    /// Bits of an immediate left to the owner's argument.
    pub const fn imm_arg_bits(self) -> u32 {
        32 - self.bits
    }

    /// Bits of a timer token left to the owner's argument.
    pub const fn token_arg_bits(self) -> u32 {
        TOKEN_BITS - self.bits
    }

    /// This application's immediate with argument `arg` (only its low
    /// [`imm_arg_bits`](Self::imm_arg_bits) bits are kept).
    #[inline]
    pub const fn imm(self, arg: u32) -> u32 {
        let shift = 32 - self.bits;
        (self.prefix << shift) | (arg & ((1 << shift) - 1))
    }

    /// The argument of `imm` when it is this application's.
    #[inline]
    pub const fn imm_arg(self, imm: u32) -> Option<u32> {
        let shift = 32 - self.bits;
        if imm >> shift == self.prefix {
            Some(imm & ((1 << shift) - 1))
        } else {
            None
        }
    }

    /// This application's timer token with argument `arg` (only its low
    /// [`token_arg_bits`](Self::token_arg_bits) bits are kept).
    #[inline]
    pub const fn token(self, arg: u64) -> u64 {
        let shift = TOKEN_BITS - self.bits;
        ((self.prefix as u64) << shift) | (arg & ((1 << shift) - 1))
    }

    /// The argument of `token` when it is this application's.
    #[inline]
    pub const fn token_arg(self, token: u64) -> Option<u64> {
        let shift = TOKEN_BITS - self.bits;
        if token >> shift == self.prefix as u64 {
            Some(token & ((1 << shift) - 1))
        } else {
            None
        }
    }

    /// Whether some value belongs to both applications (one prefix begins the other).
    pub const fn overlaps(self, other: AppId) -> bool {
        let common = if self.bits < other.bits {
            self.bits
        } else {
            other.bits
        };
        self.prefix >> (self.bits - common) == other.prefix >> (other.bits - common)
    }
}

#[cfg(test)]
mod tests {
    use super::{AppId, TOKEN_BITS};

    #[test]
    fn arguments_round_trip_and_stay_with_their_owner() {
        let apps = [AppId::new(0b1, 1), AppId::new(0b01, 2), AppId::new(0b00, 2)];
        for (i, a) in apps.iter().enumerate() {
            let imm_max = (1u64 << a.imm_arg_bits()) - 1;
            let tok_max = (1u128 << a.token_arg_bits()) - 1;
            for arg in [0, 1, 777, imm_max as u32] {
                assert_eq!(a.imm_arg(a.imm(arg)), Some(arg));
                for (k, b) in apps.iter().enumerate() {
                    assert_eq!(b.imm_arg(a.imm(arg)).is_some(), i == k);
                }
            }
            for arg in [0, 1, 1 << 40, tok_max as u64] {
                assert_eq!(a.token_arg(a.token(arg)), Some(arg));
                assert!(a.token(arg) < 1 << TOKEN_BITS);
                for (k, b) in apps.iter().enumerate() {
                    assert_eq!(b.token_arg(a.token(arg)).is_some(), i == k);
                    assert_eq!(a.overlaps(*b), i == k);
                }
            }
        }
        // A one-bit prefix covers both two-bit prefixes that begin with it.
        assert!(AppId::new(0b1, 1).overlaps(AppId::new(0b10, 2)));
        assert!(AppId::new(0b11, 2).overlaps(AppId::new(0b1, 1)));
        // Arguments wider than the owner's bits lose their high bits, never the prefix.
        let c = AppId::new(0b1, 1);
        assert_eq!(c.imm_arg(c.imm(u32::MAX)), Some(u32::MAX >> 1));
        assert_eq!(AppId::new(0b00, 2).imm(u32::MAX), u32::MAX >> 2);
    }
}
