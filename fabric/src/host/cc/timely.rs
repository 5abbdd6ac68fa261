//! TIMELY (Mittal et al., "TIMELY: RTT-based Congestion Control for the Datacenter",
//! SIGCOMM 2015): a per-QP rate driven by round-trip times the NIC measures itself.
//!
//! Per completion event the paper's Algorithm 1 runs on its RTT sample (send of the timed
//! packet to the ACK that covers it): `rtt_diff = (1 - alpha) rtt_diff + alpha (rtt - prev_rtt)`, the normalized
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
//! **Completion events.** The paper's NIC completes segments of 16-64 KB sent as bursts; this
//! NIC paces and acknowledges every packet, so by default every packet is one (`segment`
//! groups them). The granularity decides whether the band holds: samples a round trip apart
//! differ by whether another flow's frame was ahead of one and not the other (a frame is 7%
//! of a 5 us `min_rtt`, and the paper's EWMA weight passes that noise to the gradient, which
//! cuts on every positive one), while consecutive packets of interleaved flows see the same
//! queue and differ by its real change over one packet time.
//!
//! The rate starts at line rate, stays within `[min_rate, line rate]`; at line rate the QP is
//! not limited at all (the port paces it).

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

use super::{check_positive, check_range, AckSignal, CcConfigError};
use crate::host::dcqcn::RateHistory;
use crate::units::{Bandwidth, ByteSize, Time};

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
    /// Bytes per completion event, rounded up to whole packets: one packet in every `segment`
    /// bytes a QP sends is timed, and the ACK that covers it is one RTT sample. The paper's
    /// NIC completes segments of 16-64 KB; this NIC paces and acknowledges every packet, so
    /// the default (`0B`) makes every packet a completion event.
    pub segment: ByteSize,
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
            segment: ByteSize(0),
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
            && self.segment == o.segment
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
    /// Packets per completion event (at least 1).
    segment_packets: u64,
    /// The timed packets in flight, oldest first: PSN and first send time.
    timed: VecDeque<(u64, Time)>,
    /// The next PSN to time.
    next_timed: u64,
    /// Rate changes, for the report.
    pub(crate) history: RateHistory,
}

impl Timely {
    /// A QP's state; `mtu` is its payload bytes per packet.
    pub(crate) fn new(cfg: &TimelyConfig, mtu: u64) -> Timely {
        Timely {
            rate: 0.0,
            prev_rtt: 0.0,
            rtt_diff: 0.0,
            streak: 0,
            last_update: None,
            segment_packets: cfg.segment.bytes().div_ceil(mtu.max(1)).max(1),
            timed: VecDeque::new(),
            next_timed: 0,
            history: RateHistory::default(),
        }
    }

    /// A packet left: the first send at or past the next segment's start is timed. A resend
    /// voids every timed packet (Karn: its acknowledgement no longer dates one send).
    pub(crate) fn on_sent(&mut self, psn: u64, retransmission: bool, now: Time) {
        if retransmission {
            self.timed.clear();
            self.next_timed = psn + 1;
        } else if psn >= self.next_timed {
            self.timed.push_back((psn, now));
            self.next_timed = psn + self.segment_packets;
        }
    }

    /// The RTT sample an ACK brings: the newest timed packet it covers (older ones covered by
    /// the same cumulative ACK were acknowledged late).
    fn sample(&mut self, sig: &AckSignal, now: Time) -> Option<Time> {
        let mut newest = None;
        while let Some(&(psn, sent)) = self.timed.front() {
            if psn >= sig.snd_una {
                break;
            }
            newest = Some(now.saturating_sub(sent));
            self.timed.pop_front();
        }
        newest
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
        let Some(rtt) = self.sample(sig, now) else {
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

    /// One completion event: the next packet was sent `us` before `now` and the ACK covering it
    /// arrives at `now`. True when the rate was cut.
    fn feed(t: &mut Timely, cfg: &TimelyConfig, line: f64, us: f64, now: Time) -> bool {
        let psn = t.next_timed;
        t.on_sent(psn, false, now.saturating_sub(Time((us * 1e6) as u64)));
        let sig = AckSignal {
            snd_una: psn + 1,
            ..AckSignal::default()
        };
        t.on_ack(cfg, line, &sig, now)
    }

    /// The k-th sample's time: one `min_rtt` (the default's 20 us) apart, so every step is
    /// whole (from 10 ms, so that a send a round trip earlier is after time zero).
    fn at(k: u64) -> Time {
        Time::from_us(10_000 + 20 * k)
    }

    #[test]
    fn one_packet_per_segment_is_timed_and_a_resend_voids_them() {
        let cfg = TimelyConfig {
            segment: ByteSize(16 * 1024),
            ..TimelyConfig::default()
        };
        let mut t = Timely::new(&cfg, 4096);
        // PSNs 0..8 leave 1 us apart: 0 and 4 are timed (16 KiB = 4 packets).
        for psn in 0..8 {
            t.on_sent(psn, false, Time::from_us(psn));
        }
        assert_eq!(t.timed, [(0, Time::ZERO), (4, Time::from_us(4))]);
        let ack = |una| AckSignal {
            snd_una: una,
            ..AckSignal::default()
        };
        // An ACK below PSN 0's successor brings nothing; one covering both dates the newer.
        assert_eq!(t.sample(&ack(0), Time::from_us(20)), None);
        assert_eq!(
            t.sample(&ack(6), Time::from_us(30)),
            Some(Time::from_us(26))
        );
        assert!(t.timed.is_empty());
        // A resend (go-back to 6) times nothing until a first send past it.
        t.on_sent(8, false, Time::from_us(31));
        t.on_sent(6, true, Time::from_us(40));
        assert!(t.timed.is_empty());
        t.on_sent(7, true, Time::from_us(41));
        t.on_sent(9, false, Time::from_us(42));
        assert_eq!(t.timed, [(9, Time::from_us(42))]);
    }

    #[test]
    fn cuts_on_a_rising_gradient_and_increases_below_t_low() {
        // Algorithm 1 alone (no bound on a cut) for its arithmetic.
        let cfg = TimelyConfig {
            max_cut: 1.0,
            ..TimelyConfig::default()
        };
        let line = 10e9;
        let mut t = Timely::new(&cfg, 4096);
        // Between t_low and t_high, RTT rising 100 -> 120 us: gradient = 0.875 * 20 / 20 =
        // 0.875, rate *= 1 - 0.8 * 0.875 = 0.3.
        assert!(!feed(&mut t, &cfg, line, 100.0, at(1)));
        // (The first sample has no difference: gradient 0, an increase, capped at line.)
        assert_eq!(t.rate(), None);
        assert!(feed(&mut t, &cfg, line, 120.0, at(2)));
        let r = t.rate().unwrap_or(0.0);
        assert!((r - line * 0.3).abs() < 1.0, "{r}");
        // Below t_low: + delta, whatever the gradient.
        assert!(!feed(&mut t, &cfg, line, 10.0, at(3)));
        assert!((t.rate().unwrap_or(0.0) - (r + 10e6)).abs() < 1.0);
        // Above t_high: rate *= 1 - 0.8 (1 - 500/1000) = 0.6.
        let before = t.rate().unwrap_or(0.0);
        assert!(feed(&mut t, &cfg, line, 1000.0, at(4)));
        assert!((t.rate().unwrap_or(0.0) - before * 0.6).abs() < 1.0);
    }

    #[test]
    fn no_sample_cuts_more_than_half_and_a_steep_rise_never_reaches_zero() {
        let cfg = TimelyConfig::default();
        let line = 100e9;
        let mut t = Timely::new(&cfg, 4096);
        feed(&mut t, &cfg, line, 100.0, at(1));
        // +60 us: beta x gradient = 0.8 x 0.875 x 3 = 2.1, a cut to below zero by Algorithm 1
        // alone; bounded to half.
        assert!(feed(&mut t, &cfg, line, 160.0, at(2)));
        assert!((t.rate().unwrap_or(0.0) - 50e9).abs() < 1.0);
        // Three more such samples: 50 -> 25 -> 12.5 -> 6.25 Gb/s, never the floor.
        for (k, rtt) in [220.0, 280.0, 340.0].into_iter().enumerate() {
            assert!(feed(&mut t, &cfg, line, rtt, at(3 + k as u64)));
        }
        assert!((t.rate().unwrap_or(0.0) - 6.25e9).abs() < 1.0);
    }

    #[test]
    fn a_sample_sooner_than_min_rtt_moves_the_rate_proportionally_less() {
        let cfg = TimelyConfig::default();
        let line = 10e9;
        let mut t = Timely::new(&cfg, 4096);
        feed(&mut t, &cfg, line, 100.0, at(1));
        feed(&mut t, &cfg, line, 160.0, at(2));
        let r = t.rate().unwrap_or(0.0);
        // Below t_low 10 us later (half of min_rtt): + delta / 2.
        feed(&mut t, &cfg, line, 10.0, at(2) + Time::from_us(10));
        assert!((t.rate().unwrap_or(0.0) - (r + 5e6)).abs() < 1.0);
    }

    #[test]
    fn hyperactive_increase_after_a_streak() {
        let cfg = TimelyConfig::default();
        let line = 10e9;
        let mut t = Timely::new(&cfg, 4096);
        // Get below line rate first: a steep rise.
        feed(&mut t, &cfg, line, 100.0, at(1));
        feed(&mut t, &cfg, line, 200.0, at(2));
        // Now a falling RTT between the thresholds.
        let mut rtt = 200.0;
        let mut prev = t.rate().unwrap_or(0.0);
        let mut steps = Vec::new();
        for k in 0..9 {
            rtt -= 10.0;
            feed(&mut t, &cfg, line, rtt, at(3 + k));
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

    /// Why a completion event is a packet here, not a segment or a round trip: on the 2:1
    /// incast of `tests/it/cc.rs` (100 Gb/s, 4 KiB frames) two samples a round trip (or a 16 KiB
    /// segment) apart differ by a frame's serialization (0.334 us) whenever the other flow's
    /// frame happens to be ahead of one and not the other: noise of 0.067 in the gradient over
    /// a 5 us `min_rtt`. With the paper's EWMA weight 0.875 the gradient follows it: a positive
    /// sample cuts ~5% of the rate, a negative one adds `delta` (0.2% of 50 Gb/s), so at a
    /// constant mean RTT inside the band the rate falls until the queue drains below `t_low`
    /// (measured with a sample per round trip: 96% of the time below). Consecutive packets of
    /// interleaved flows see the same queue, so their difference is the queue's own change.
    /// The authors' code snippet weighs a new difference 0.02, which averages the noise away
    /// at the price of a gradient that lags by ~50 samples.
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
            let mut t = Timely::new(&cfg, 4096);
            (t.rate, t.prev_rtt) = (50e9, 20e6);
            // One sample per 5.4 us (a round trip of the incast's unloaded fabric), each 20 us
            // plus a frame time or not, by a fixed pseudo-random sequence.
            let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
            for k in 1..=200u64 {
                x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
                let rtt = 20e6 + if x >> 63 == 1 { noise_ps } else { 0.0 };
                feed(&mut t, &cfg, 100e9, rtt / 1e6, at(0) + Time(k * 5_400_000));
            }
            t.rate().unwrap_or(100e9)
        };
        // Without noise the gradient is zero: +delta per sample.
        assert!((run(0.875, 0.0) - 70e9).abs() < 1e6, "{}", run(0.875, 0.0));
        // A 4 KiB frame at 100 Gb/s of noise: the paper's weight loses most of the rate in
        // 200 samples (about 1 ms) ...
        let noisy = run(0.875, 334_240.0);
        assert!(noisy < 15e9, "{noisy}");
        // ... the authors' snippet's keeps it.
        let smoothed = run(0.02, 334_240.0);
        assert!(smoothed > 45e9, "{smoothed}");
    }
}
