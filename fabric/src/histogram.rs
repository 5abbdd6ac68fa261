//! Latency histograms for statistics that must report tails, not only means.
//!
//! A thin wrapper over an auto-resizing `hdrhistogram` with 3 significant digits: quantiles are
//! exact to within 0.1% of the value (the bucket width of 3 significant digits), the minimum,
//! maximum and count exactly. The histogram is created on the first value, so an actor that
//! never records allocates nothing; recording is a few integer operations and allocates only
//! when a value beyond the range seen so far widens it. It serializes as its [`Percentiles`].

use std::borrow::Cow;

use hdrhistogram::Histogram;
use serde::{Serialize, Serializer};

/// Non-zero values held back before they go into the histogram together (see
/// [`LatencyHistogram`]): with the maximum and the count, one cache line.
const STAGED: usize = 6;

/// Significant digits kept: quantiles within 0.1%.
pub const SIGNIFICANT_DIGITS: u8 = 3;

/// A histogram of times in picoseconds.
///
/// `repr(C)` with the zero count and the extremes first: recording a zero (most queueing
/// delays) writes only the first 16 bytes, which a switch's per-port counters placed just
/// before it keep in the same cache line. A non-zero value is staged in the next 64 bytes
/// (with the maximum) and goes into the histogram with five others: the histogram's own
/// fields and its counts, two or three more cache lines that a switch port's next frame
/// rarely finds cached on a large fabric, are then touched once per six values instead of
/// once per value. The counts come out the same (each value is recorded once, in order);
/// what reads them ([`LatencyHistogram::percentiles`], [`LatencyHistogram::add`], equality)
/// counts the staged values too.
#[derive(Clone, Debug, Default)]
#[repr(C)]
pub struct LatencyHistogram {
    /// Zeros, counted apart: most queueing delays are zero, and a counter costs far less than
    /// a histogram bucket (merged in when quantiles are asked for).
    zeros: u64,
    min: u64,
    max: u64,
    /// Values in `staged` (0..=[`STAGED`]; a full stage is flushed at once).
    staged_len: u64,
    /// Non-zero values recorded but not yet in `h`.
    staged: [u64; STAGED],
    /// Significant digits and lowest discernible value of the histogram once created: 3 from
    /// 1 ps by default, fewer for [`LatencyHistogram::coarse`] and [`LatencyHistogram::rough`].
    shape: Option<(u8, u64)>,
    h: Option<Histogram<u64>>,
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

impl LatencyHistogram {
    /// An empty histogram.
    pub fn new() -> LatencyHistogram {
        LatencyHistogram::default()
    }

    /// A smaller histogram for the many places one is kept per port: 2 significant digits
    /// (quantiles within 1%) and nothing finer than 1 ns, about 15 KiB once values span a
    /// millisecond instead of about 170 KiB.
    pub fn coarse() -> LatencyHistogram {
        LatencyHistogram {
            shape: Some((2, 1_000)),
            ..LatencyHistogram::default()
        }
    }

    /// The smallest form, for one per switch port (hundreds of them, each touched per frame):
    /// 1 significant digit (quantiles within 1/16 = 6.25%) from 1 ns, about 2 KiB once values
    /// span a millisecond, so a whole fabric's worth stays in cache.
    pub fn rough() -> LatencyHistogram {
        LatencyHistogram {
            shape: Some((1, 1_000)),
            ..LatencyHistogram::default()
        }
    }

    /// Records one value.
    #[inline]
    pub fn record(&mut self, value_ps: u64) {
        if value_ps == 0 {
            self.zeros += 1;
            self.min = 0;
            return;
        }
        // The first non-zero value is the minimum unless a zero came before (`max` is 0
        // until a non-zero value is recorded or added).
        if self.max == 0 && self.zeros == 0 {
            self.min = value_ps;
        }
        self.min = self.min.min(value_ps);
        self.max = self.max.max(value_ps);
        let n = self.staged_len as usize;
        if let Some(slot) = self.staged.get_mut(n) {
            *slot = value_ps;
            self.staged_len += 1;
        }
        if self.staged_len as usize >= STAGED {
            self.flush();
        }
    }

    /// Moves the staged values into the histogram (created on the first one).
    #[cold]
    fn flush(&mut self) {
        let n = (self.staged_len as usize).min(STAGED);
        self.staged_len = 0;
        if n == 0 {
            return;
        }
        let h = match &mut self.h {
            Some(h) => h,
            None => match match self.shape {
                None => Histogram::new(SIGNIFICANT_DIGITS),
                Some((digits, low)) => {
                    Histogram::new_with_bounds(low, 2 * low, digits).map(|mut h| {
                        h.auto(true);
                        h
                    })
                }
            } {
                Ok(h) => self.h.insert(h),
                // Unreachable for a valid constant digit count; losing values beats a panic.
                Err(_) => return,
            },
        };
        for &v in &self.staged[..n] {
            // `record` widens the auto-resizing range; `saturating_record` would clamp instead.
            if h.record(v).is_err() {
                h.saturating_record(v);
            }
        }
    }

    /// This histogram with no value staged (a copy when some are).
    fn settled(&self) -> Cow<'_, LatencyHistogram> {
        if self.staged_len == 0 {
            Cow::Borrowed(self)
        } else {
            let mut h = self.clone();
            h.flush();
            Cow::Owned(h)
        }
    }

    /// Adds every value of `other`.
    pub fn add(&mut self, other: &LatencyHistogram) {
        self.flush();
        let other = &*other.settled();
        if other.zeros > 0 {
            self.zeros += other.zeros;
            self.min = 0;
        }
        let Some(o) = &other.h else {
            return;
        };
        match &mut self.h {
            None => {
                let (zeros, min) = (self.zeros, self.min);
                *self = other.clone();
                self.zeros = zeros;
                if zeros > 0 {
                    self.min = min;
                }
            }
            Some(h) => {
                // Both auto-resize, so adding cannot run out of range.
                let _ = h.add(o);
                self.min = self.min.min(other.min);
                self.max = self.max.max(other.max);
            }
        }
    }

    /// Values recorded.
    pub fn len(&self) -> u64 {
        self.h.as_ref().map_or(0, |h| h.len()) + self.zeros + self.staged_len
    }

    /// True when nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The underlying histogram (`None` until a non-zero value was recorded), with the staged
    /// values moved in (hence `&mut`); zeros are counted apart ([`LatencyHistogram::len`]
    /// includes them, this does not).
    pub fn histogram(&mut self) -> Option<&Histogram<u64>> {
        self.flush();
        self.h.as_ref()
    }

    /// Count, extremes and quantiles; `None` when empty. A quantile is the value at or below
    /// which that share of the values lies (hdrhistogram's `value_at_quantile`: the highest
    /// value equivalent to the recorded one at 3 significant digits, capped at the exact max).
    pub fn percentiles(&self) -> Option<Percentiles> {
        if self.staged_len != 0 {
            return self.settled().percentiles();
        }
        if self.is_empty() {
            return None;
        }
        let len = self.len() as f64;
        let nz = self.h.as_ref().filter(|h| !h.is_empty());
        // The zeros come first in value order: a quantile within them is 0, beyond them it is
        // the non-zero histogram's quantile of the remaining share.
        let q = |x: f64| {
            let rank = (x * len).ceil().max(1.0);
            match nz {
                Some(h) if rank > self.zeros as f64 => {
                    let share = (rank - self.zeros as f64) / h.len() as f64;
                    h.value_at_quantile(share.min(1.0))
                        .clamp(self.min, self.max)
                }
                _ => 0,
            }
        };
        Some(Percentiles {
            count: self.len(),
            min_ps: self.min,
            p50_ps: q(0.5),
            p90_ps: q(0.9),
            p99_ps: q(0.99),
            p999_ps: q(0.999),
            max_ps: self.max,
        })
    }
}

impl PartialEq for LatencyHistogram {
    fn eq(&self, other: &Self) -> bool {
        let (a, b) = (self.settled(), other.settled());
        let (this, other) = (&*a, &*b);
        this.zeros == other.zeros
            && this.percentiles() == other.percentiles()
            && match (&this.h, &other.h) {
                (Some(a), Some(b)) => a == b,
                (a, b) => {
                    a.as_ref().is_none_or(|h| h.is_empty())
                        && b.as_ref().is_none_or(|h| h.is_empty())
                }
            }
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

    proptest::proptest! {
        /// Staging changes nothing: after any sequence of values (zeros among them), read at
        /// any point, the count, extremes and quantiles, the histogram itself and sums by
        /// `add` equal those of a plain hdrhistogram fed the same values, zeros merged in.
        #[test]
        fn staged_values_count_as_recorded(
            values in proptest::collection::vec(
                proptest::prop_oneof![proptest::strategy::Just(0u64), 1u64..5_000_000], 0..40),
            cut in 0usize..40,
        ) {
            let mut h = LatencyHistogram::rough();
            for (i, &v) in values.iter().enumerate() {
                h.record(v);
                if i == cut {
                    // Reading mid-way (staged values pending) must not disturb anything.
                    let p = h.percentiles().unwrap();
                    proptest::prop_assert_eq!(p.count, i as u64 + 1);
                }
            }
            proptest::prop_assert_eq!(h.len(), values.len() as u64);
            if let Some(p) = h.percentiles() {
                let nz: Vec<u64> = values.iter().copied().filter(|&v| v > 0).collect();
                proptest::prop_assert_eq!(p.min_ps, values.iter().copied().min().unwrap());
                proptest::prop_assert_eq!(p.max_ps, values.iter().copied().max().unwrap());
                let zeros = (values.len() - nz.len()) as f64;
                for (q, got) in [(0.5, p.p50_ps), (0.9, p.p90_ps), (0.999, p.p999_ps)] {
                    let rank = (q * values.len() as f64).ceil().max(1.0);
                    let want = if rank > zeros {
                        let mut only = Histogram::<u64>::new_with_bounds(1_000, 2_000, 1).unwrap();
                        only.auto(true);
                        for &v in &nz {
                            only.record(v).unwrap();
                        }
                        let share = ((rank - zeros) / nz.len() as f64).min(1.0);
                        only.value_at_quantile(share).clamp(p.min_ps, p.max_ps)
                    } else {
                        0
                    };
                    proptest::prop_assert_eq!(got, want);
                }
            }
            // Sums and equality see the staged values of both sides.
            let mut twice = h.clone();
            twice.add(&h);
            proptest::prop_assert_eq!(twice.len(), 2 * values.len() as u64);
            let mut again = LatencyHistogram::rough();
            for &v in values.iter().chain(&values) {
                again.record(v);
            }
            proptest::prop_assert!(twice == again);
            // Counted from the values: a rough histogram's zero bucket also holds values
            // below 1 ns, so its `count_at(0)` is not the number of zeros.
            let nz_count = values.iter().filter(|&&v| v > 0).count() as u64;
            if nz_count > 0 {
                proptest::prop_assert_eq!(h.histogram().map(|x| x.len()), Some(nz_count));
            }
        }
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
