//! Latency histograms for statistics that must report tails, not only means.
//!
//! Values are counted in the buckets of an auto-resizing `hdrhistogram` (3 significant digits
//! by default): quantiles are exact to within 0.1% of the value (the bucket width of 3
//! significant digits), the minimum, maximum and count exactly. Recording only counts: the
//! bucket index of a value is hdrhistogram's own (its leading zeros give the power of two, the
//! next bits the sub-bucket), computed here from a few constants and added to a plain array of
//! counts, several times cheaper than `Histogram::record`. The
//! `hdrhistogram::Histogram` is built from those counts only when quantiles are asked for
//! (each count recorded at its bucket's value, which lands in the same bucket), so every
//! quantile is the one hdrhistogram gives for the values themselves. An actor that never
//! records a non-zero value allocates nothing. It serializes as its [`Percentiles`].

use hdrhistogram::Histogram;

use crate::engine::codec::{Reader, Writer};
use crate::engine::EngineError;
use serde::{Serialize, Serializer};

/// Significant digits kept: quantiles within 0.1%.
pub const SIGNIFICANT_DIGITS: u8 = 3;

/// A histogram of times in picoseconds.
///
/// `repr(C)` with the zero count and the extremes first, 56 bytes in all (the counts a boxed
/// slice, not a `Vec`, whose capacity would make it 64): a switch port keeps it on one cache
/// line with its sum of delays, so that recording a value reads and writes that line only
/// and increments one count (with a `Vec`, the maximum, the counts' address and the bucket
/// constants spilled onto a second line: 0.26 misses of a 1 MiB cache per packet-hop on
/// fat_tree1024).
#[derive(Clone, Debug)]
#[repr(C)]
pub struct LatencyHistogram {
    /// Zeros, counted apart: most queueing delays are zero, and a counter costs far less than
    /// a histogram bucket (merged in when quantiles are asked for).
    zeros: u64,
    /// The smallest non-zero value, `u64::MAX` before the first: the minimum is 0 when a zero
    /// was recorded ([`LatencyHistogram::min`]), so recording a value needs no test of what
    /// came before (a zero writes only its count).
    min_nonzero: u64,
    max: u64,
    /// Non-zero values per bucket, indexed as hdrhistogram's `counts` with the same shape;
    /// empty until the first non-zero value, grown when a value beyond it comes.
    counts: Box<[u64]>,
    /// `(2^(half_magnitude + 1) - 1) << unit_magnitude`: or-ed into a value so that values
    /// of the first bucket count the same leading zeros (hdrhistogram's `sub_bucket_mask`).
    sub_bucket_mask: u64,
    /// Lowest discernible value of the histogram (1 ps by default, 1 ns for
    /// [`LatencyHistogram::coarse`] and [`LatencyHistogram::rough`]).
    low: u32,
    /// Significant digits: 3 by default, fewer for the coarse and rough forms.
    digits: u8,
    /// log2 of `low`, rounded down: the width of the first bucket's sub-buckets.
    unit_magnitude: u8,
    /// log2 of half the sub-buckets of a bucket (2 * 10^digits rounded up to a power of 2).
    half_magnitude: u8,
    /// `64 - unit_magnitude - half_magnitude - 1`: leading zeros of the first bucket's values.
    leading_zero_base: u8,
}

/// What a histogram reports: count, exact extremes and quantiles (within 0.1%).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Percentiles {
    /// Values recorded.
    pub count: u64,
    /// Smallest value (exact).
    pub min_ps: u64,
    /// Median.
    pub p50_ps: u64,
    /// 90th percentile.
    pub p90_ps: u64,
    /// 99th percentile.
    pub p99_ps: u64,
    /// 99.9th percentile.
    pub p999_ps: u64,
    /// Largest value (exact).
    pub max_ps: u64,
}

/// The bucket constants of a histogram's shape, as [`LatencyHistogram`] keeps them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Buckets {
    /// [`LatencyHistogram`]'s `sub_bucket_mask`.
    mask: u64,
    /// [`LatencyHistogram`]'s `unit_magnitude`.
    unit_magnitude: u8,
    /// [`LatencyHistogram`]'s `half_magnitude`.
    half_magnitude: u8,
    /// [`LatencyHistogram`]'s `leading_zero_base`.
    leading_zero_base: u8,
}

/// The buckets of [`LatencyHistogram::rough`] (1 significant digit from 1 ns), constants for
/// [`LatencyHistogram::record_often`].
const ROUGH: Buckets = Buckets::of(1, 1_000);

impl Buckets {
    /// The constants hdrhistogram's `new_with_bounds` derives for `digits` (1..=5) and `low`
    /// (at least 1).
    const fn of(digits: u8, low: u32) -> Buckets {
        let largest = 2 * 10u64.pow(digits as u32);
        // ceil(log2(largest)) and floor(log2(low)), as hdrhistogram computes them in f64.
        let sub_magnitude = (64 - (largest - 1).leading_zeros()) as u8;
        let unit_magnitude = (31 - low.leading_zeros()) as u8;
        Buckets {
            mask: ((1u64 << sub_magnitude) - 1) << unit_magnitude,
            unit_magnitude,
            half_magnitude: sub_magnitude - 1,
            leading_zero_base: 64 - unit_magnitude - sub_magnitude,
        }
    }

    /// [`LatencyHistogram::index`] with these constants.
    #[inline(always)]
    fn index(self, value: u64) -> usize {
        let bucket = u32::from(self.leading_zero_base) - (value | self.mask).leading_zeros();
        let sub = value >> (bucket + u32::from(self.unit_magnitude));
        ((bucket as usize) << self.half_magnitude) + sub as usize
    }
}

impl Default for LatencyHistogram {
    fn default() -> LatencyHistogram {
        LatencyHistogram::with_shape(SIGNIFICANT_DIGITS, 1)
    }
}

impl LatencyHistogram {
    /// An empty histogram.
    pub fn new() -> LatencyHistogram {
        LatencyHistogram::default()
    }

    /// An empty histogram of `digits` significant digits (1..=5) and nothing finer than `low`
    /// (at least 1): the bucket constants hdrhistogram's `new_with_bounds` derives.
    fn with_shape(digits: u8, low: u32) -> LatencyHistogram {
        let digits = digits.clamp(1, 5);
        let low = low.max(1);
        let b = Buckets::of(digits, low);
        LatencyHistogram {
            zeros: 0,
            min_nonzero: u64::MAX,
            max: 0,
            counts: Box::default(),
            sub_bucket_mask: b.mask,
            low,
            digits,
            unit_magnitude: b.unit_magnitude,
            half_magnitude: b.half_magnitude,
            leading_zero_base: b.leading_zero_base,
        }
    }

    /// A smaller histogram for the many places one is kept per port: 2 significant digits
    /// (quantiles within 1%) and nothing finer than 1 ns, about 15 KiB once values span a
    /// millisecond instead of about 170 KiB.
    pub fn coarse() -> LatencyHistogram {
        LatencyHistogram::with_shape(2, 1_000)
    }

    /// The smallest form, for one per switch port (hundreds of them, each touched per frame):
    /// 1 significant digit (quantiles within 1/16 = 6.25%) from 1 ns, about 2 KiB once values
    /// span a millisecond, so a whole fabric's worth stays in cache.
    pub fn rough() -> LatencyHistogram {
        LatencyHistogram::with_shape(1, 1_000)
    }

    /// The bucket of a value: hdrhistogram's `index_for`. The bucket (power of two) is how
    /// many leading zeros the value has fewer than the first bucket's values, the sub-bucket
    /// the value's top bits; buckets after the first use only their upper half of sub-buckets,
    /// so bucket `b`, sub-bucket `s` is at `b * half + s`. At most `64 << half_magnitude`
    /// plus a bucket: no overflow for any value.
    #[inline]
    fn index(&self, value: u64) -> usize {
        self.buckets().index(value)
    }

    /// This histogram's bucket constants.
    #[inline(always)]
    fn buckets(&self) -> Buckets {
        Buckets {
            mask: self.sub_bucket_mask,
            unit_magnitude: self.unit_magnitude,
            half_magnitude: self.half_magnitude,
            leading_zero_base: self.leading_zero_base,
        }
    }

    /// The lowest value of bucket `index` (hdrhistogram's `value_for`), which `index` maps
    /// back to `index`.
    fn value_for(&self, index: usize) -> u64 {
        let half = 1usize << self.half_magnitude;
        let bucket = (index >> self.half_magnitude).saturating_sub(1);
        let sub = if index < half {
            index
        } else {
            (index & (half - 1)) + half
        };
        (sub as u64) << (bucket as u32 + u32::from(self.unit_magnitude))
    }

    /// Records one value.
    #[inline]
    pub fn record(&mut self, value_ps: u64) {
        if value_ps == 0 {
            self.zeros += 1;
            return;
        }
        self.min_nonzero = self.min_nonzero.min(value_ps);
        self.max = self.max.max(value_ps);
        self.count(self.index(value_ps), 1);
    }

    /// Records one value as [`LatencyHistogram::record`] does, in fewer instructions for a
    /// caller that folds many values into [`LatencyHistogram::rough`] histograms (a switch's
    /// log of waits): the extremes are written only when the value moves them (they rarely
    /// do), and a histogram of the rough shape's buckets finds the value's bucket with that
    /// shape's constants rather than the four it keeps and two shifts by a register (any
    /// other shape goes out of line to `record`). The bucket mask tells the shape: it is a
    /// run of `half_magnitude + 1` ones shifted by `unit_magnitude`, and those two give the
    /// leading-zero base; so whatever the histogram's `low` and digits, equal masks give
    /// equal indices. (Checking every histogram of a batch once, instead of each value's,
    /// read each switch port's line per fold: +0.06 misses of a 1 MiB cache per packet-hop
    /// on fat_tree1024.)
    #[inline]
    pub fn record_often(&mut self, value_ps: u64) {
        if value_ps == 0 {
            self.zeros += 1;
            return;
        }
        if self.sub_bucket_mask != ROUGH.mask {
            self.record_other(value_ps);
            return;
        }
        if value_ps < self.min_nonzero {
            self.min_nonzero = value_ps;
        }
        if value_ps > self.max {
            self.max = value_ps;
        }
        self.count(ROUGH.index(value_ps), 1);
    }

    /// [`LatencyHistogram::record_often`] into a histogram of another shape than the rough
    /// one: [`LatencyHistogram::record`], out of line.
    #[cold]
    #[inline(never)]
    fn record_other(&mut self, value_ps: u64) {
        self.record(value_ps);
    }

    /// Records `n` zeros (a caller that counted them apart, in a line it touches anyway).
    #[inline]
    pub fn record_zeros(&mut self, n: u64) {
        self.zeros += n;
    }

    /// Adds `n` to the count of bucket `index`.
    #[inline]
    fn count(&mut self, index: usize, n: u64) {
        match self.counts.get_mut(index) {
            Some(c) => *c = c.saturating_add(n),
            None => self.grow_and_count(index, n),
        }
    }

    /// [`LatencyHistogram::count`] beyond the counts so far: widens them first.
    #[cold]
    #[inline(never)]
    fn grow_and_count(&mut self, index: usize, n: u64) {
        self.widen(index + 1);
        if let Some(c) = self.counts.get_mut(index) {
            *c = n;
        }
    }

    /// Widens the counts to hold at least `len`, to the end of that bucket (at least two
    /// buckets' worth, the first bucket's lower half included), and to at least twice the
    /// counts so far: the boxed counts have no spare capacity, so they grow as a `Vec`'s
    /// capacity would, reallocated (and copied) as rarely, not at every bucket the range grows by.
    fn widen(&mut self, len: usize) {
        let old = self.counts.len();
        if len <= old {
            return;
        }
        let len =
            (((len.max(2 * old) - 1) >> self.half_magnitude) + 1).max(2) << self.half_magnitude;
        let mut counts = std::mem::take(&mut self.counts).into_vec();
        // Exactly `len`: no shrinking reallocation when boxed again.
        counts.reserve_exact(len - old);
        counts.resize(len, 0);
        self.counts = counts.into_boxed_slice();
    }

    /// True when a non-zero value was recorded or added (what an hdrhistogram would hold):
    /// the maximum is then that value, above 0.
    fn has_nonzero(&self) -> bool {
        self.max > 0
    }

    /// The smallest value recorded (0 when none was).
    fn min(&self) -> u64 {
        if self.zeros > 0 || !self.has_nonzero() {
            0
        } else {
            self.min_nonzero
        }
    }

    /// True when `other` counts values in the same buckets as this.
    fn same_shape(&self, other: &LatencyHistogram) -> bool {
        (self.digits, self.low) == (other.digits, other.low)
    }

    /// Adds every value of `other`. Into a histogram without non-zero values, `other`'s
    /// non-zero values come with its shape (as hdrhistogram's would); otherwise each of
    /// `other`'s buckets is counted at its lowest value in this one's (hdrhistogram's `add`).
    pub fn add(&mut self, other: &LatencyHistogram) {
        self.zeros += other.zeros;
        if !other.has_nonzero() {
            return;
        }
        if !self.has_nonzero() {
            let zeros = self.zeros;
            *self = other.clone();
            self.zeros = zeros;
            return;
        }
        if self.same_shape(other) {
            let n = other
                .counts
                .iter()
                .rposition(|&c| c > 0)
                .map_or(0, |i| i + 1);
            self.widen(n);
            for (a, &b) in self.counts.iter_mut().zip(&other.counts[..n]) {
                *a = a.saturating_add(b);
            }
        } else {
            for (i, &c) in other.counts.iter().enumerate() {
                if c > 0 {
                    let v = other.value_for(i);
                    self.count(self.index(v), c);
                }
            }
        }
        self.min_nonzero = self.min_nonzero.min(other.min_nonzero);
        self.max = self.max.max(other.max);
    }

    /// Values recorded.
    pub fn len(&self) -> u64 {
        self.zeros + self.nonzero_len()
    }

    /// Non-zero values recorded.
    fn nonzero_len(&self) -> u64 {
        self.counts.iter().fold(0u64, |a, &c| a.saturating_add(c))
    }

    /// True when nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The non-zero values as an auto-resizing hdrhistogram of this shape (`None` when there
    /// are none): each bucket's count recorded at the bucket's lowest value (1 for the first).
    /// Zeros are counted apart ([`LatencyHistogram::len`] includes them, this does not).
    pub fn histogram(&self) -> Option<Histogram<u64>> {
        if !self.has_nonzero() {
            return None;
        }
        let low = u64::from(self.low);
        let mut h = Histogram::new_with_bounds(low, 2 * low, self.digits).ok()?;
        h.auto(true);
        for (i, &c) in self.counts.iter().enumerate() {
            if c > 0 {
                // At 1 rather than 0 for the first bucket: a value below the unit (1 ns in
                // the coarse shapes) lands there, and hdrhistogram leaves its maximum unset
                // for a 0 but not for a 1, which lands in the same bucket.
                // Auto-resizing: fails only if the counts would not fit in memory.
                h.record_n(self.value_for(i).max(1), c).ok()?;
            }
        }
        Some(h)
    }

    /// Count, extremes and quantiles; `None` when empty. A quantile is the value at or below
    /// which that share of the values lies (hdrhistogram's `value_at_quantile`: the highest
    /// value equivalent to the recorded one at 3 significant digits, capped at the exact max).
    pub fn percentiles(&self) -> Option<Percentiles> {
        if self.is_empty() {
            return None;
        }
        let len = self.len() as f64;
        let nz = self.histogram().filter(|h| !h.is_empty());
        // The zeros come first in value order: a quantile within them is 0, beyond them it is
        // the non-zero histogram's quantile of the remaining share.
        let q = |x: f64| {
            let rank = (x * len).ceil().max(1.0);
            match &nz {
                Some(h) if rank > self.zeros as f64 => {
                    let share = (rank - self.zeros as f64) / h.len() as f64;
                    h.value_at_quantile(share.min(1.0))
                        .clamp(self.min(), self.max)
                }
                _ => 0,
            }
        };
        Some(Percentiles {
            count: self.len(),
            min_ps: self.min(),
            p50_ps: q(0.5),
            p90_ps: q(0.9),
            p99_ps: q(0.99),
            p999_ps: q(0.999),
            max_ps: self.max,
        })
    }
}

impl LatencyHistogram {
    /// Appends everything this histogram holds (shape, zeros, extremes, counts) to `w`, for
    /// another process to read back with [`LatencyHistogram::read_from`].
    pub fn write_to(&self, w: &mut Writer) {
        w.u8(self.digits);
        w.u32(self.low);
        w.u64(self.zeros);
        w.u64(self.min_nonzero);
        w.u64(self.max);
        w.usize(self.counts.len());
        for &c in self.counts.iter() {
            w.u64(c);
        }
    }

    /// Reads back what [`LatencyHistogram::write_to`] wrote: the same histogram.
    pub fn read_from(r: &mut Reader<'_>) -> Result<LatencyHistogram, EngineError> {
        let digits = r.u8()?;
        let low = r.u32()?;
        let mut h = LatencyHistogram::with_shape(digits, low);
        h.zeros = r.u64()?;
        h.min_nonzero = r.u64()?;
        h.max = r.u64()?;
        let n = r.usize()?;
        // Counts beyond the largest index of any u64 would mean the two sides disagree.
        if n > h.index(u64::MAX) + 1 {
            return Err(EngineError::Failure(format!(
                "a histogram of {n} buckets read from another process"
            )));
        }
        h.counts = (0..n).map(|_| r.u64()).collect::<Result<_, _>>()?;
        Ok(h)
    }
}

impl PartialEq for LatencyHistogram {
    /// Same zeros, extremes and, when there are non-zero values, same shape and counts
    /// (however far each side's counts were widened).
    fn eq(&self, other: &Self) -> bool {
        fn nonzero(h: &LatencyHistogram) -> &[u64] {
            let n = h.counts.iter().rposition(|&c| c > 0).map_or(0, |i| i + 1);
            &h.counts[..n]
        }
        let (a, b) = (nonzero(self), nonzero(other));
        (self.zeros, self.min(), self.max) == (other.zeros, other.min(), other.max)
            && a == b
            && (a.is_empty() || self.same_shape(other))
    }
}

impl Eq for LatencyHistogram {}

impl Serialize for LatencyHistogram {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.percentiles().serialize(s)
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn zeros_are_counted_apart_and_quantiles_stay_exact() {
        // 60 zeros, then 1..=40 ns: p50 is 0, p90 is the 30th non-zero value (30 ns), the max
        // 40 ns; quantiles are the highest value of their bucket, within 0.1%.
        let mut h = LatencyHistogram::new();
        for _ in 0..60 {
            h.record(0);
        }
        for v in 1..=40u64 {
            h.record(v * 1000);
        }
        let p = h.percentiles().unwrap_or_default();
        assert_eq!((p.count, p.min_ps, p.p50_ps, p.max_ps), (100, 0, 0, 40_000));
        assert!(p.p90_ps.abs_diff(30_000) <= 30, "{}", p.p90_ps);
        assert!(p.p99_ps.abs_diff(39_000) <= 39, "{}", p.p99_ps);
        // Adding keeps the zeros; only zeros still gives percentiles.
        let mut z = LatencyHistogram::coarse();
        z.record(0);
        assert_eq!(z.percentiles().map(|p| (p.count, p.max_ps)), Some((1, 0)));
        z.add(&h);
        assert_eq!(z.len(), 101);
        assert_eq!(z.percentiles().map(|p| p.p50_ps), Some(0));
    }

    use super::*;

    /// The three shapes, with the plain hdrhistogram each stands for.
    fn shapes() -> [(LatencyHistogram, Histogram<u64>); 3] {
        let auto = |mut h: Histogram<u64>| {
            h.auto(true);
            h
        };
        [
            (
                LatencyHistogram::rough(),
                auto(Histogram::new_with_bounds(1_000, 2_000, 1).unwrap()),
            ),
            (
                LatencyHistogram::coarse(),
                auto(Histogram::new_with_bounds(1_000, 2_000, 2).unwrap()),
            ),
            (
                LatencyHistogram::new(),
                Histogram::new(SIGNIFICANT_DIGITS).unwrap(),
            ),
        ]
    }

    /// Quantiles as the histogram computes them, from a plain hdrhistogram fed the non-zero
    /// values and the count of zeros.
    fn quantiles_of(nz: &Histogram<u64>, zeros: u64, min: u64, max: u64) -> [u64; 4] {
        let len = (zeros + nz.len()) as f64;
        [0.5, 0.9, 0.99, 0.999].map(|q| {
            let rank = (q * len).ceil().max(1.0);
            if rank > zeros as f64 {
                let share = ((rank - zeros as f64) / nz.len() as f64).min(1.0);
                nz.value_at_quantile(share).clamp(min, max)
            } else {
                0
            }
        })
    }

    /// Up to 60 values to record: zeros, values within a few microseconds, any value.
    fn recorded_values() -> impl proptest::strategy::Strategy<Value = Vec<u64>> {
        proptest::collection::vec(
            proptest::prop_oneof![
                proptest::strategy::Just(0u64),
                1u64..5_000_000,
                1u64..u64::MAX,
            ],
            0..60,
        )
    }

    proptest::proptest! {
        /// Counting by hand changes nothing: after any sequence of values (zeros among them,
        /// from below 1 ns to beyond a second), in each shape, the count, extremes, quantiles
        /// and the hdrhistogram built from the counts equal those of a plain hdrhistogram fed
        /// the same values, zeros merged in; so do sums by `add`, within a shape and across.
        #[test]
        fn counts_equal_hdrhistogram(
            values in recorded_values(),
            more in proptest::collection::vec(0u64..50_000_000_000, 0..30),
        ) {
            for (mut h, mut plain) in shapes() {
                for &v in &values {
                    h.record(v);
                    if v > 0 {
                        plain.record(v).unwrap();
                    }
                }
                proptest::prop_assert_eq!(h.len(), values.len() as u64);
                let zeros = values.iter().filter(|&&v| v == 0).count() as u64;
                match h.percentiles() {
                    None => proptest::prop_assert!(values.is_empty()),
                    Some(p) => {
                        let (min, max) = (values.iter().min().unwrap(), values.iter().max().unwrap());
                        proptest::prop_assert_eq!((p.min_ps, p.max_ps), (*min, *max));
                        proptest::prop_assert_eq!(
                            [p.p50_ps, p.p90_ps, p.p99_ps, p.p999_ps],
                            quantiles_of(&plain, zeros, *min, *max)
                        );
                    }
                }
                if plain.is_empty() {
                    proptest::prop_assert!(h.histogram().is_none());
                } else {
                    proptest::prop_assert!(h.histogram() == Some(plain.clone()));
                }
                // Sums: the same values twice, within the shape.
                let mut twice = h.clone();
                twice.add(&h);
                let mut again = h.clone();
                for &v in &values {
                    again.record(v);
                }
                proptest::prop_assert!(twice == again);
                proptest::prop_assert_eq!(twice.percentiles(), again.percentiles());
                // Across shapes: into a rough histogram holding `more`, as hdrhistogram adds.
                let mut rough = LatencyHistogram::rough();
                let mut rough_plain = Histogram::new_with_bounds(1_000, 2_000, 1).unwrap();
                rough_plain.auto(true);
                for &v in &more {
                    rough.record(v);
                    if v > 0 {
                        rough_plain.record(v).unwrap();
                    }
                }
                rough.add(&h);
                proptest::prop_assert_eq!(rough.len(), (values.len() + more.len()) as u64);
                let zeros = zeros + more.iter().filter(|&&v| v == 0).count() as u64;
                if let Some(p) = rough.percentiles() {
                    // What the old code held: hdrhistogram's own sum, or the other side
                    // whole when this one had no non-zero value.
                    let sum = if rough_plain.is_empty() {
                        plain.clone()
                    } else {
                        rough_plain.add(&plain).unwrap();
                        rough_plain.clone()
                    };
                    proptest::prop_assert_eq!(
                        [p.p50_ps, p.p90_ps, p.p99_ps, p.p999_ps],
                        quantiles_of(&sum, zeros, p.min_ps, p.max_ps)
                    );
                    let all = values.iter().chain(&more);
                    proptest::prop_assert_eq!(
                        (p.min_ps, p.max_ps),
                        (*all.clone().min().unwrap(), *all.max().unwrap())
                    );
                }
            }
        }
    }

    proptest::proptest! {
        /// `record_often` records as `record` does, in each shape (the rough one by its
        /// constants, others by their own), and a mask equal to the rough one's gives the same
        /// index whatever the shape's `low`.
        #[test]
        fn record_often_is_record(
            values in recorded_values(),
            low in 1u32..100_000,
        ) {
            let mut all: Vec<LatencyHistogram> = shapes().into_iter().map(|(h, _)| h).collect();
            all.push(LatencyHistogram::with_shape(1, low));
            all.push(LatencyHistogram::with_shape(2, low));
            for h in all {
                let (mut a, mut b) = (h.clone(), h);
                for &v in &values {
                    a.record(v);
                    b.record_often(v);
                }
                proptest::prop_assert!(a == b);
                proptest::prop_assert_eq!(&a.counts, &b.counts);
                proptest::prop_assert_eq!((a.min_nonzero, a.max), (b.min_nonzero, b.max));
                proptest::prop_assert_eq!(a.percentiles(), b.percentiles());
                if a.sub_bucket_mask == ROUGH.mask {
                    for &v in &values {
                        proptest::prop_assert_eq!(a.index(v), ROUGH.index(v));
                    }
                }
            }
        }
    }

    #[test]
    fn rough_constants_are_the_rough_shape() {
        let h = LatencyHistogram::rough();
        assert_eq!(
            (
                h.sub_bucket_mask,
                h.unit_magnitude,
                h.half_magnitude,
                h.leading_zero_base
            ),
            (
                ROUGH.mask,
                ROUGH.unit_magnitude,
                ROUGH.half_magnitude,
                ROUGH.leading_zero_base
            )
        );
    }

    #[test]
    fn fits_a_cache_line() {
        // All that recording reads and writes, with a switch port's 8-byte sum of delays
        // beside it, is one line.
        assert!(std::mem::size_of::<LatencyHistogram>() <= 56);
    }

    #[test]
    fn percentiles_of_a_uniform_sequence() {
        let mut h = LatencyHistogram::new();
        for v in 1..=1000u64 {
            h.record(v * 1000);
        }
        let p = h.percentiles().unwrap_or_default();
        assert_eq!(p.count, 1000);
        assert_eq!((p.min_ps, p.max_ps), (1000, 1_000_000));
        // Quantile q of 1..=1000 (x1000) is 1000·ceil(1000 q), within 0.1%.
        for (got, want) in [
            (p.p50_ps, 500_000.0),
            (p.p90_ps, 900_000.0),
            (p.p99_ps, 990_000.0),
        ] {
            assert!((got as f64 - want).abs() <= want * 1e-3, "{got} vs {want}");
        }
        let mut g = LatencyHistogram::new();
        g.add(&h);
        g.add(&h);
        assert_eq!(g.len(), 2000);
        assert_eq!(g.percentiles().map(|p| p.p50_ps), Some(p.p50_ps));
        assert!(LatencyHistogram::new().percentiles().is_none());
    }
}
