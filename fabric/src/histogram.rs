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
#[derive(Clone, Debug, Default)]
pub struct LatencyHistogram {
    h: Option<Histogram<u64>>,
    min: u64,
    max: u64,
    /// `None`: 3 significant digits from 1 ps; `Some`: [`LatencyHistogram::coarse`].
    coarse: Option<()>,
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
            coarse: Some(()),
            ..LatencyHistogram::default()
        }
    }

    /// Records one value.
    #[inline]
    pub fn record(&mut self, value_ps: u64) {
        let h = match &mut self.h {
            Some(h) => h,
            None => match match self.coarse {
                None => Histogram::new(SIGNIFICANT_DIGITS),
                Some(()) => Histogram::new_with_bounds(1_000, 2_000, 2).map(|mut h| {
                    h.auto(true);
                    h
                }),
            } {
                Ok(h) => {
                    self.min = value_ps;
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
        let Some(o) = &other.h else {
            return;
        };
        match &mut self.h {
            None => *self = other.clone(),
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
        self.h.as_ref().map_or(0, |h| h.len())
    }

    /// True when nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The underlying histogram (`None` until a value was recorded).
    pub fn histogram(&self) -> Option<&Histogram<u64>> {
        self.h.as_ref()
    }

    /// Count, extremes and quantiles; `None` when empty. A quantile is the value at or below
    /// which that share of the values lies (hdrhistogram's `value_at_quantile`: the highest
    /// value equivalent to the recorded one at 3 significant digits, capped at the exact max).
    pub fn percentiles(&self) -> Option<Percentiles> {
        let h = self.h.as_ref().filter(|h| !h.is_empty())?;
        let q = |x: f64| h.value_at_quantile(x).clamp(self.min, self.max);
        Some(Percentiles {
            count: h.len(),
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
        self.percentiles() == other.percentiles()
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
