//! Latency histograms for statistics that must report tails, not only means.
//!
//! A thin wrapper over an auto-resizing `hdrhistogram` with 3 significant digits: quantiles are
//! exact to within 0.1% of the value (the bucket width of 3 significant digits), the minimum,
//! maximum and count exactly. The histogram is created on the first value, so an actor that
//! never records allocates nothing; recording is a few integer operations and allocates only
//! when a value beyond the range seen so far widens it. It serializes as its [`Percentiles`].

use hdrhistogram::Histogram;
use serde::{Serialize, Serializer};

/// Significant digits kept: quantiles within 0.1%.
pub const SIGNIFICANT_DIGITS: u8 = 3;

/// A histogram of times in picoseconds.
///
/// `repr(C)` with the zero count and the extremes first: recording a zero (most queueing
/// delays) writes only the first 16 bytes, which a switch's per-port counters placed just
/// before it keep in the same cache line.
#[derive(Clone, Debug, Default)]
#[repr(C)]
pub struct LatencyHistogram {
    /// Zeros, counted apart: most queueing delays are zero, and a counter costs far less than
    /// a histogram bucket (merged in when quantiles are asked for).
    zeros: u64,
    min: u64,
    max: u64,
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
                Ok(h) => {
                    if self.zeros == 0 {
                        self.min = value_ps;
                    }
                    self.h.insert(h)
                }
                // Unreachable for a valid constant digit count; losing a value beats a panic.
                Err(_) => return,
            },
        };
        // `record` widens the auto-resizing range; `saturating_record` would clamp instead.
        if h.record(value_ps).is_err() {
            h.saturating_record(value_ps);
        }
        self.min = self.min.min(value_ps);
        self.max = self.max.max(value_ps);
    }

    /// Adds every value of `other`.
    pub fn add(&mut self, other: &LatencyHistogram) {
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
        self.h.as_ref().map_or(0, |h| h.len()) + self.zeros
    }

    /// True when nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The underlying histogram (`None` until a non-zero value was recorded); zeros are
    /// counted apart ([`LatencyHistogram::len`] includes them, this does not).
    pub fn histogram(&self) -> Option<&Histogram<u64>> {
        self.h.as_ref()
    }

    /// Count, extremes and quantiles; `None` when empty. A quantile is the value at or below
    /// which that share of the values lies (hdrhistogram's `value_at_quantile`: the highest
    /// value equivalent to the recorded one at 3 significant digits, capped at the exact max).
    pub fn percentiles(&self) -> Option<Percentiles> {
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
        self.zeros == other.zeros
            && self.percentiles() == other.percentiles()
            && match (&self.h, &other.h) {
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
