//! HPCC (Li et al., "HPCC: High Precision Congestion Control", SIGCOMM 2019): a window from
//! in-band telemetry, paced at window / base RTT.
//!
//! Every switch egress appends a record (bandwidth, queue length, timestamp, bytes sent) to
//! data frames ([`crate::wire::int`]); the receiver echoes the stack in its ACK. Per ACK the
//! sender runs the paper's Algorithm 1 against the stack it saw last:
//! - per hop `i`: `txRate = dTxBytes / dTs`, `u_i = min(qlen, qlen_prev) / (B T) + txRate / B`;
//!   the most utilized hop gives `u` and `tau = min(dTs, T)`;
//! - `U = (1 - tau/T) U + (tau/T) u` (an EWMA over one base RTT);
//! - `W = Wc / (U / eta) + W_AI` when `U >= eta` or after `max_stage` additive steps, else
//!   `W = Wc + W_AI`; the reference window `Wc` (and the stage count) is updated only once per
//!   round trip (the first ACK past the PSN sent at the last update), so a window of ACKs that
//!   all report the same queue does not cut repeatedly;
//! - the pacing rate is `W / T`.
//!
//! The window starts at the line rate's bandwidth-delay product `B T` (rate = line) and stays
//! within `[min_window, B T]`.
//!
//! `W_AI` follows the paper's rule, `(1 - eta) B T / N` for `N` expected concurrent flows on a
//! link (`flows`, 8 by default): `N` flows' additive steps then stay within the headroom
//! `eta` leaves. The HPCC authors' ns-3 scripts use a smaller constant (`10 B / 25` Mb/s for
//! `B` in Gb/s, 40 Mb/s at 100 Gb/s, an `N` of 125): where windows are a frame or two (8:1 at
//! 4 KiB MTU) that step is too small to pull noisy shares back together.

use serde::{Deserialize, Serialize};

use super::{check_positive, check_range, AckSignal, CcConfigError};
use crate::host::dcqcn::RateHistory;
use crate::units::{Bandwidth, Time};
use crate::wire::int::{IntHop, IntStack, INT_MAX_HOPS};

/// HPCC's parameters; defaults are the paper's (section 3.3 and 5) where it gives one.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HpccConfig {
    /// Target utilization `eta` (0 < eta <= 1). Paper: 0.95.
    pub eta: f64,
    /// Additive steps before a multiplicative adjustment is forced (`maxStage`). Paper: 5.
    pub max_stage: u32,
    /// `T`: the base round trip, which the window covers at line rate. The paper uses the
    /// fabric's unloaded RTT; 10 us (a few hops at 100 Gb/s) is assumed: set it for your fabric.
    pub base_rtt: Time,
    /// Additive increase `W_AI` expressed as a rate (`W_AI = rate_ai x T`). Unset (the
    /// default): the paper's rule, `(1 - eta) B / flows` for a QP on a port of `B` bits per
    /// second, so that `flows` QPs adding `W_AI` each per round trip stay within the
    /// `1 - eta` of headroom.
    pub rate_ai: Option<Bandwidth>,
    /// The expected largest number of concurrent flows on a link, `N` in the paper's rule
    /// for `W_AI` when `rate_ai` is unset.
    pub flows: u32,
    /// Floor of the pacing rate (the window floor is `min_rate x T`). Not in the paper;
    /// 100 Mb/s as for DCQCN.
    pub min_rate: Bandwidth,
}

impl Default for HpccConfig {
    fn default() -> Self {
        HpccConfig {
            eta: 0.95,
            max_stage: 5,
            base_rtt: Time::from_us(10),
            rate_ai: None,
            flows: 8,
            min_rate: Bandwidth(100_000_000),
        }
    }
}

// Floats compare by their bits, so the config stays `Eq` like the rest of `NicConfig`.
impl PartialEq for HpccConfig {
    fn eq(&self, o: &Self) -> bool {
        self.eta.to_bits() == o.eta.to_bits()
            && self.max_stage == o.max_stage
            && self.base_rtt == o.base_rtt
            && self.rate_ai == o.rate_ai
            && self.flows == o.flows
            && self.min_rate == o.min_rate
    }
}
impl Eq for HpccConfig {}

impl HpccConfig {
    /// Checks every parameter's range.
    pub fn validate(&self) -> Result<(), CcConfigError> {
        check_range("hpcc", "eta", self.eta, 0.0, 1.0, true)?;
        check_positive("hpcc", "base_rtt", self.base_rtt)?;
        if self.flows == 0 {
            return Err(CcConfigError::new(
                "hpcc",
                "flows",
                "must be at least 1".into(),
            ));
        }
        if self.min_rate.bps() == 0 {
            return Err(CcConfigError::new(
                "hpcc",
                "min_rate",
                "must be greater than zero".into(),
            ));
        }
        Ok(())
    }
}

impl HpccConfig {
    /// `W_AI` as a rate in bits per second for a QP on a port of `line` bits per second.
    pub(crate) fn w_ai_rate(&self, line: f64) -> f64 {
        match self.rate_ai {
            Some(r) => r.bps() as f64,
            None => (1.0 - self.eta) * line / f64::from(self.flows.max(1)),
        }
    }
}

/// One QP's HPCC state.
#[derive(Debug)]
pub(crate) struct Hpcc {
    /// Window and reference window, bytes.
    w: f64,
    wc: f64,
    /// Normalized utilization estimate.
    pub(crate) u: f64,
    inc_stage: u32,
    /// `Wc` is next updated by an ACK past this PSN.
    last_update_seq: u64,
    /// The previous ACK's stack and when it came (records older than a timestamp wrap are not
    /// differenced).
    prev: IntStack,
    prev_at: Option<Time>,
    line: f64,
    /// `T` in seconds.
    t: f64,
    /// Rate changes, for the report.
    pub(crate) history: RateHistory,
}

/// Records further apart than this are not differenced: 24-bit ns timestamps wrap at 16.8 ms.
const MAX_RECORD_GAP: Time = Time::from_us(8_000);

impl Hpcc {
    pub(crate) fn new(cfg: &HpccConfig, line: f64) -> Hpcc {
        let w = line / 8.0 * cfg.base_rtt.ps() as f64 / 1e12;
        Hpcc {
            w,
            wc: w,
            u: 0.0,
            inc_stage: 0,
            last_update_seq: 0,
            prev: IntStack::default(),
            prev_at: None,
            line,
            t: cfg.base_rtt.ps() as f64 / 1e12,
            history: RateHistory::default(),
        }
    }

    /// Bytes allowed in flight (at least one byte; pacing does the rest).
    pub(crate) fn window(&self) -> u64 {
        (self.w as u64).max(1)
    }

    /// The pacing rate `W / T`, `None` at line rate.
    pub(crate) fn rate(&self) -> Option<f64> {
        let r = self.w * 8.0 / self.t;
        (self.line - r >= 0.5).then_some(r)
    }

    /// An ACK with the echoed stack `int`. True when the window shrank.
    pub(crate) fn on_ack(
        &mut self,
        cfg: &HpccConfig,
        line: f64,
        sig: &AckSignal,
        now: Time,
    ) -> bool {
        self.line = line;
        let Some(int) = &sig.int else {
            return false;
        };
        let fresh = self
            .prev_at
            .is_some_and(|t| now.saturating_sub(t) < MAX_RECORD_GAP)
            && self.prev.hops().len() == int.hops().len();
        let before = self.w;
        if fresh {
            let u = self.measure_inflight(cfg, int.hops());
            let update_wc = sig.snd_una > self.last_update_seq;
            self.w = self.compute_wind(cfg, u, update_wc);
            if update_wc {
                self.last_update_seq = sig.snd_nxt;
            }
        }
        self.prev = *int;
        self.prev_at = Some(now);
        if self.w != before {
            self.history.record(
                128,
                now,
                (self.w * 8.0 / (cfg.base_rtt.ps() as f64 / 1e12)).min(line),
            );
        }
        self.w < before
    }

    /// MeasureInflight: the EWMA of the most utilized hop's normalized utilization.
    fn measure_inflight(&mut self, cfg: &HpccConfig, hops: &[IntHop]) -> f64 {
        let t = cfg.base_rtt.ps() as f64 / 1e12;
        let mut u = 0.0;
        let mut tau = 0.0;
        for (i, h) in hops.iter().enumerate().take(INT_MAX_HOPS) {
            let Some(p) = self.prev.hops().get(i) else {
                continue;
            };
            let dt_ns = h.ts_delta_ns(p);
            if dt_ns == 0 {
                continue;
            }
            let dt = f64::from(dt_ns) * 1e-9;
            let b = h.bandwidth_bytes_per_s();
            let tx_rate = h.tx_delta_bytes(p) as f64 / dt;
            let u1 = h.qlen_bytes().min(p.qlen_bytes()) / (b * t) + tx_rate / b;
            if u1 > u {
                u = u1;
                tau = dt;
            }
        }
        let tau = tau.min(t);
        self.u = (1.0 - tau / t) * self.u + tau / t * u;
        self.u
    }

    /// ComputeWind.
    fn compute_wind(&mut self, cfg: &HpccConfig, u: f64, update_wc: bool) -> f64 {
        let t = cfg.base_rtt.ps() as f64 / 1e12;
        let w_ai = cfg.w_ai_rate(self.line) / 8.0 * t;
        let max = self.line / 8.0 * t;
        let min = (cfg.min_rate.bps() as f64 / 8.0 * t).min(max);
        let w = if u >= cfg.eta || self.inc_stage >= cfg.max_stage {
            let w = self.wc / (u / cfg.eta).max(1e-9) + w_ai;
            if update_wc {
                self.inc_stage = 0;
            }
            w
        } else {
            if update_wc {
                self.inc_stage += 1;
            }
            self.wc + w_ai
        };
        let w = w.clamp(min, max);
        if update_wc {
            self.wc = w;
        }
        w
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `sig` echoing a one-hop stack.
    fn with(sig: &AckSignal, hop: IntHop) -> AckSignal {
        let mut s = IntStack::default();
        s.push(hop);
        AckSignal {
            int: Some(s),
            ..*sig
        }
    }

    #[test]
    fn a_hop_at_line_rate_with_a_queue_cuts_toward_eta() {
        let cfg = HpccConfig::default();
        let line = 100e9;
        let mut h = Hpcc::new(&cfg, line);
        // 100 Gb/s x 10 us = 125,000 bytes.
        assert_eq!(h.window(), 125_000);
        assert_eq!(h.rate(), None);
        let sig = AckSignal {
            snd_una: 1,
            snd_nxt: 100,
            ..AckSignal::default()
        };
        // First ACK: nothing to difference yet.
        let a = IntHop::new(100_000_000_000, 128_000, 0, 0);
        assert!(!h.on_ack(&cfg, line, &with(&sig, a), Time::ZERO));
        // 10 us later (tau = T): the port sent 128,000 bytes (1.024 x line rate x T) and still
        // holds 128,000 bytes of queue (1.024 BDP; both whole units of the record):
        // u = 2.048, U = u (tau = T), W = Wc / (2.048 / 0.95) + W_AI.
        let b = IntHop::new(100_000_000_000, 128_000, 10_000_000, 128_000);
        assert!(h.on_ack(&cfg, line, &with(&sig, b), Time::from_us(10)));
        // The paper's rule for the defaults: (1 - 0.95) x 100 Gb/s / 8 flows = 625 Mb/s.
        let w_ai = 625e6 / 8.0 * 10e-6;
        let expected = 125_000.0 / (2.048 / 0.95) + w_ai;
        // Float rounding only (a few ulps of 1e5).
        assert!((h.w - expected).abs() < 1e-6, "{} vs {expected}", h.w);
        assert!((h.u - 2.048).abs() < 1e-9);
        assert!(h.rate().is_some());
    }

    #[test]
    fn an_idle_path_grows_additively_then_by_stage() {
        let cfg = HpccConfig::default();
        let line = 100e9;
        let mut h = Hpcc::new(&cfg, line);
        h.w = 50_000.0;
        h.wc = 50_000.0;
        // The paper's rule for the defaults: (1 - 0.95) x 100 Gb/s / 8 flows = 625 Mb/s.
        let w_ai = 625e6 / 8.0 * 10e-6;
        let mut ts = 0;
        let mut tx = 0;
        for k in 0..3u64 {
            // Half the line rate, no queue: u = 0.5 < eta.
            let hop = IntHop::new(100_000_000_000, 0, ts, tx);
            let sig = AckSignal {
                snd_una: k * 100 + 1,
                snd_nxt: (k + 1) * 100,
                ..AckSignal::default()
            };
            h.on_ack(&cfg, line, &with(&sig, hop), Time(ts));
            ts += 10_000_000;
            tx += 62_500;
        }
        // Two differenced ACKs, each a new round trip: Wc += W_AI twice.
        assert!((h.w - (50_000.0 + 2.0 * w_ai)).abs() < 1e-6, "{}", h.w);
        assert_eq!(h.inc_stage, 2);
    }
}
