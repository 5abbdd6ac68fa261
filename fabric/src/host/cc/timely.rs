//! TIMELY (Mittal et al., "TIMELY: RTT-based Congestion Control for the Datacenter",
//! SIGCOMM 2015): a per-QP rate driven by round-trip times the NIC measures itself.
//!
//! Per RTT sample (one per round trip, from the NIC's send and ACK timestamps), the paper's
//! Algorithm 1: `rtt_diff = (1 - alpha) rtt_diff + alpha (rtt - prev_rtt)`, the normalized
//! gradient `rtt_diff / min_rtt`, then:
//! - `rtt < t_low`: additive increase, `rate += delta`;
//! - `rtt > t_high`: `rate *= 1 - beta (1 - t_high / rtt)`;
//! - gradient <= 0: `rate += n delta`, with `n = 5` (hyperactive increase) after
//!   `hai_threshold` increases in a row, 1 before;
//! - gradient > 0: `rate *= 1 - beta gradient`.
//!
//! HAI counts completion events in a row whose gradient is negative, as the paper states it.
//! Two bounds come from the authors' own code (the snippet eRPC and the HPCC authors' ns-3 model
//! follow): each step is scaled by the time since the last update over `min_rtt` (at most 1),
//! and no single sample cuts more than `max_cut` (half) of the rate. Algorithm 1 alone reaches
//! zero whenever `beta x gradient >= 1`, which at 100 Gb/s with a 5 us `min_rtt` is one RTT
//! sample 6 us longer than the last.
//!
//! The rate starts at line rate, stays within `[min_rate, line rate]`; at line rate the QP is
//! not limited at all (the port paces it).

use serde::{Deserialize, Serialize};

use super::{check_positive, check_range, AckSignal, CcConfigError};
use crate::host::dcqcn::RateHistory;
use crate::units::{Bandwidth, Time};

/// TIMELY's parameters; defaults are the paper's (section 5, its 10 Gb/s testbed).
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TimelyConfig {
    /// EWMA weight of a new RTT difference (0 < alpha <= 1). Paper: 0.875.
    pub alpha: f64,
    /// Multiplicative decrease factor (0 < beta <= 1). Paper: 0.8.
    pub beta: f64,
    /// Additive increase step `delta`. Paper: 10 Mb/s.
    pub delta: Bandwidth,
    /// Below this RTT the rate always increases. Paper: 50 us.
    pub t_low: Time,
    /// Above this RTT the rate always decreases. Paper: 500 us.
    pub t_high: Time,
    /// The minimum RTT the gradient is normalized by. Paper: 20 us.
    pub min_rtt: Time,
    /// Increases in a row after which each adds 5 delta (HAI). Paper: 5.
    pub hai_threshold: u32,
    /// Floor of the rate. Not in the paper; 100 Mb/s as for DCQCN.
    pub min_rate: Bandwidth,
    /// The largest fraction one sample may cut (0 < max_cut <= 1; 1: no bound). Algorithm 1 alone reaches
    /// zero once `beta x gradient >= 1`; the authors' code keeps at least half: 0.5.
    pub max_cut: f64,
}

impl Default for TimelyConfig {
    fn default() -> Self {
        TimelyConfig {
            alpha: 0.875,
            beta: 0.8,
            delta: Bandwidth(10_000_000),
            t_low: Time::from_us(50),
            t_high: Time::from_us(500),
            min_rtt: Time::from_us(20),
            hai_threshold: 5,
            min_rate: Bandwidth(100_000_000),
            max_cut: 0.5,
        }
    }
}

// Floats compare by their bits, so the config stays `Eq` like the rest of `NicConfig`.
impl PartialEq for TimelyConfig {
    fn eq(&self, o: &Self) -> bool {
        self.alpha.to_bits() == o.alpha.to_bits()
            && self.beta.to_bits() == o.beta.to_bits()
            && self.delta == o.delta
            && self.t_low == o.t_low
            && self.t_high == o.t_high
            && self.min_rtt == o.min_rtt
            && self.hai_threshold == o.hai_threshold
            && self.min_rate == o.min_rate
            && self.max_cut.to_bits() == o.max_cut.to_bits()
    }
}
impl Eq for TimelyConfig {}

impl TimelyConfig {
    /// Checks every parameter's range.
    pub fn validate(&self) -> Result<(), CcConfigError> {
        check_range("timely", "alpha", self.alpha, 0.0, 1.0, true)?;
        check_range("timely", "beta", self.beta, 0.0, 1.0, true)?;
        check_range("timely", "max_cut", self.max_cut, 0.0, 1.0, true)?;
        check_positive("timely", "min_rtt", self.min_rtt)?;
        check_positive("timely", "t_high", self.t_high)?;
        if self.t_low >= self.t_high {
            return Err(CcConfigError::new(
                "timely",
                "t_low",
                format!("{} is not below t_high ({})", self.t_low, self.t_high),
            ));
        }
        if self.min_rate.bps() == 0 {
            return Err(CcConfigError::new(
                "timely",
                "min_rate",
                "must be greater than zero".into(),
            ));
        }
        Ok(())
    }
}

/// One QP's TIMELY state.
#[derive(Debug)]
pub(crate) struct Timely {
    /// The rate, bits per second (0: not started, line rate).
    rate: f64,
    /// The previous RTT sample, ps (0: none yet).
    prev_rtt: f64,
    /// Smoothed RTT difference, ps.
    pub(crate) rtt_diff: f64,
    /// Completion events in a row with a negative gradient (HAI after `hai_threshold`).
    streak: u32,
    /// When the rate last changed (the authors' `delta_factor` scales a step by the time since).
    last_update: Option<Time>,
    /// Rate changes, for the report.
    pub(crate) history: RateHistory,
}

impl Timely {
    pub(crate) fn new(_cfg: &TimelyConfig) -> Timely {
        Timely {
            rate: 0.0,
            prev_rtt: 0.0,
            rtt_diff: 0.0,
            streak: 0,
            last_update: None,
            history: RateHistory::default(),
        }
    }

    /// The rate limit in force, `None` at line rate.
    pub(crate) fn rate(&self) -> Option<f64> {
        (self.rate > 0.0).then_some(self.rate)
    }

    /// An ACK; only one that brings an RTT sample changes the rate. True on a decrease.
    pub(crate) fn on_ack(
        &mut self,
        cfg: &TimelyConfig,
        line: f64,
        sig: &AckSignal,
        now: Time,
    ) -> bool {
        let Some(rtt) = sig.rtt else {
            return false;
        };
        let rtt = rtt.ps() as f64;
        let current = if self.rate > 0.0 { self.rate } else { line };
        // A step is scaled by the time since the last update in units of min_rtt (at most 1):
        // samples closer together than min_rtt move the rate proportionally less.
        let min_rtt = cfg.min_rtt.ps() as f64;
        let scale = self.last_update.map_or(1.0, |t| {
            (now.saturating_sub(t).ps() as f64 / min_rtt).min(1.0)
        });
        self.last_update = Some(now);
        let new = self.update(cfg, current, rtt, scale);
        // No single sample cuts below `max_cut` of the rate in force.
        let new = new.max(current * (1.0 - cfg.max_cut));
        let new = new.clamp((cfg.min_rate.bps() as f64).min(line), line);
        let cut = new < current;
        if new != current {
            self.rate = if line - new < 0.5 { 0.0 } else { new };
            self.history.record(128, now, new);
        }
        cut
    }

    /// Algorithm 1 for one sample: the new rate from `rate`, each step scaled by `scale`.
    fn update(&mut self, cfg: &TimelyConfig, rate: f64, rtt: f64, scale: f64) -> f64 {
        let first = self.prev_rtt == 0.0;
        let new_diff = if first { 0.0 } else { rtt - self.prev_rtt };
        self.prev_rtt = rtt;
        self.rtt_diff = (1.0 - cfg.alpha) * self.rtt_diff + cfg.alpha * new_diff;
        let gradient = self.rtt_diff / cfg.min_rtt.ps() as f64;
        // HAI: "N = 5 if gradient < 0 for five completion events", whichever branch acts.
        self.streak = if gradient < 0.0 {
            self.streak.saturating_add(1)
        } else {
            0
        };
        let delta = cfg.delta.bps() as f64 * scale;
        if rtt < cfg.t_low.ps() as f64 {
            return rate + delta;
        }
        let t_high = cfg.t_high.ps() as f64;
        if rtt > t_high {
            return rate * (1.0 - scale * cfg.beta * (1.0 - t_high / rtt));
        }
        if gradient <= 0.0 {
            let n = if self.streak >= cfg.hai_threshold {
                5.0
            } else {
                1.0
            };
            rate + n * delta
        } else {
            rate * (1.0 - scale * cfg.beta * gradient)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(us: f64) -> AckSignal {
        AckSignal {
            rtt: Some(Time((us * 1e6) as u64)),
            ..AckSignal::default()
        }
    }

    /// The k-th sample's time: one `min_rtt` (the default's 20 us) apart, so every step is
    /// whole.
    fn at(k: u64) -> Time {
        Time::from_us(20 * k)
    }

    #[test]
    fn cuts_on_a_rising_gradient_and_increases_below_t_low() {
        // Algorithm 1 alone (no bound on a cut) for its arithmetic.
        let cfg = TimelyConfig {
            max_cut: 1.0,
            ..TimelyConfig::default()
        };
        let line = 10e9;
        let mut t = Timely::new(&cfg);
        // Between t_low and t_high, RTT rising 100 -> 120 us: gradient = 0.875 * 20 / 20 =
        // 0.875, rate *= 1 - 0.8 * 0.875 = 0.3.
        assert!(!t.on_ack(&cfg, line, &sample(100.0), at(1)));
        // (The first sample has no difference: gradient 0, an increase, capped at line.)
        assert_eq!(t.rate(), None);
        assert!(t.on_ack(&cfg, line, &sample(120.0), at(2)));
        let r = t.rate().unwrap_or(0.0);
        assert!((r - line * 0.3).abs() < 1.0, "{r}");
        // Below t_low: + delta, whatever the gradient.
        assert!(!t.on_ack(&cfg, line, &sample(10.0), at(3)));
        assert!((t.rate().unwrap_or(0.0) - (r + 10e6)).abs() < 1.0);
        // Above t_high: rate *= 1 - 0.8 (1 - 500/1000) = 0.6.
        let before = t.rate().unwrap_or(0.0);
        assert!(t.on_ack(&cfg, line, &sample(1000.0), at(4)));
        assert!((t.rate().unwrap_or(0.0) - before * 0.6).abs() < 1.0);
    }

    #[test]
    fn no_sample_cuts_more_than_half_and_a_steep_rise_never_reaches_zero() {
        let cfg = TimelyConfig::default();
        let line = 100e9;
        let mut t = Timely::new(&cfg);
        t.on_ack(&cfg, line, &sample(100.0), at(1));
        // +60 us: beta x gradient = 0.8 x 0.875 x 3 = 2.1, a cut to below zero by Algorithm 1
        // alone; bounded to half.
        assert!(t.on_ack(&cfg, line, &sample(160.0), at(2)));
        assert!((t.rate().unwrap_or(0.0) - 50e9).abs() < 1.0);
        // Three more such samples: 50 -> 25 -> 12.5 -> 6.25 Gb/s, never the floor.
        for (k, rtt) in [220.0, 280.0, 340.0].into_iter().enumerate() {
            assert!(t.on_ack(&cfg, line, &sample(rtt), at(3 + k as u64)));
        }
        assert!((t.rate().unwrap_or(0.0) - 6.25e9).abs() < 1.0);
    }

    #[test]
    fn a_sample_sooner_than_min_rtt_moves_the_rate_proportionally_less() {
        let cfg = TimelyConfig::default();
        let line = 10e9;
        let mut t = Timely::new(&cfg);
        t.on_ack(&cfg, line, &sample(100.0), at(1));
        t.on_ack(&cfg, line, &sample(160.0), at(2));
        let r = t.rate().unwrap_or(0.0);
        // Below t_low 10 us later (half of min_rtt): + delta / 2.
        t.on_ack(&cfg, line, &sample(10.0), at(2) + Time::from_us(10));
        assert!((t.rate().unwrap_or(0.0) - (r + 5e6)).abs() < 1.0);
    }

    #[test]
    fn hyperactive_increase_after_a_streak() {
        let cfg = TimelyConfig::default();
        let line = 10e9;
        let mut t = Timely::new(&cfg);
        // Get below line rate first: a steep rise.
        t.on_ack(&cfg, line, &sample(100.0), at(1));
        t.on_ack(&cfg, line, &sample(200.0), at(2));
        // Now a falling RTT between the thresholds.
        let mut rtt = 200.0;
        let mut prev = t.rate().unwrap_or(0.0);
        let mut steps = Vec::new();
        for k in 0..9 {
            rtt -= 10.0;
            t.on_ack(&cfg, line, &sample(rtt), at(3 + k));
            let r = t.rate().unwrap_or(line);
            steps.push(((r - prev) / 10e6).round() as i64);
            prev = r;
        }
        // The first fall still leaves the smoothed difference positive (0.125 * 87.5 - 8.75
        // us): a cut; then increases, the fifth negative gradient in a row and later ones
        // hyperactive.
        assert!(steps[0] < 0, "{steps:?}");
        assert_eq!(steps[1..], [1, 1, 1, 1, 5, 5, 5, 5]);
    }

    /// Why the RTT leaves `[t_low, t_high]` at 100 Gb/s with 4 KiB frames (the 2:1 incast of
    /// `tests/cc.rs`): one RTT sample differs from the last by a frame's serialization
    /// (0.334 us) whenever another flow's frame happens to be ahead or not, which is noise of
    /// 0.067 in the gradient over a 5 us `min_rtt`. With the paper's EWMA weight 0.875 the
    /// gradient follows it: a positive sample cuts ~5% of the rate, a negative one adds
    /// `delta` (0.2% of 50 Gb/s), so at a constant mean RTT inside the band the rate falls
    /// until the queue drains below `t_low`. The authors' code weighs a new difference 0.02,
    /// which averages the noise away.
    #[test]
    fn packet_sized_rtt_noise_inside_the_band_drives_the_rate_down_unless_smoothed() {
        let run = |alpha: f64, noise_ps: f64| {
            let cfg = TimelyConfig {
                t_low: Time::from_us(10),
                t_high: Time::from_us(50),
                min_rtt: Time::from_us(5),
                delta: Bandwidth(100_000_000),
                alpha,
                ..TimelyConfig::default()
            };
            let mut t = Timely::new(&cfg);
            (t.rate, t.prev_rtt) = (50e9, 20e6);
            // One sample per 5.4 us (the RTT the incast's flows see), each 20 us plus a frame
            // time or not, by a fixed pseudo-random sequence.
            let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
            for k in 1..=200u64 {
                x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
                let rtt = 20e6 + if x >> 63 == 1 { noise_ps } else { 0.0 };
                let sig = AckSignal {
                    rtt: Some(Time(rtt as u64)),
                    ..AckSignal::default()
                };
                t.on_ack(&cfg, 100e9, &sig, Time(k * 5_400_000));
            }
            t.rate().unwrap_or(100e9)
        };
        // Without noise the gradient is zero: +delta per sample.
        assert!((run(0.875, 0.0) - 70e9).abs() < 1e6, "{}", run(0.875, 0.0));
        // A 4 KiB frame at 100 Gb/s of noise: the paper's weight loses most of the rate in
        // 200 samples (about 1 ms) ...
        let noisy = run(0.875, 334_240.0);
        assert!(noisy < 15e9, "{noisy}");
        // ... the authors' code's keeps it.
        let smoothed = run(0.02, 334_240.0);
        assert!(smoothed > 45e9, "{smoothed}");
    }
}
