//! The project's one random mixer: SplitMix64's finalizer, a cheap bijective map of 64-bit
//! words with good avalanche. Everything that must look random yet be reproducible from the
//! scenario's seed (ECMP hashes, per-QP jitter, fault draws, RED's coin) mixes its inputs
//! through it, so that one seed gives one run.

/// SplitMix64's finalizer (Steele, Lea and Flood, "Fast splittable pseudorandom number
/// generators", OOPSLA 2014): a bijection of `u64` whose every output bit depends on every
/// input bit.
#[inline]
pub fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::mix;

    /// SplitMix64's published first outputs from state 0 (the generator adds the constant,
    /// then finalizes): the finalizer is the reference one.
    #[test]
    fn matches_splitmix64s_reference_outputs() {
        assert_eq!(mix(0), 0xE220_A839_7B1D_CDAF);
        assert_eq!(mix(0x9E37_79B9_7F4A_7C15), 0x6E78_9E6A_A1B9_65F4);
    }

    /// One flipped input bit flips about half of the output bits.
    #[test]
    fn one_bit_in_moves_half_the_bits_out() {
        let mut total = 0u32;
        for i in 0..64 {
            total += (mix(12345) ^ mix(12345 ^ 1 << i)).count_ones();
        }
        let mean = f64::from(total) / 64.0;
        assert!((28.0..=36.0).contains(&mean), "{mean}");
    }
}
