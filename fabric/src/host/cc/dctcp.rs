//! DCTCP (Alizadeh et al., "Data Center TCP", SIGCOMM 2010) as a window on a RoCE QP.
//!
//! Switches mark CE above a queue threshold (RED with `kmin = kmax = K`, the paper's step
//! marking); the receiver echoes each mark in its ACK (BTH BECN). The sender keeps a window of
//! bytes in flight and, per window of data (from the PSN sent when the window began to the ACK
//! that passes it), the fraction `F` of acknowledged bytes that came back marked:
//! `alpha = (1 - g) alpha + g F`. The first marked ACK of a window cuts the window once,
//! `W = W (1 - alpha / 2)`; unmarked ACKs grow it by `ai` bytes per window's worth acknowledged
//! (additive increase, `W += ai * acked / W`). The window starts at the line rate's
//! bandwidth-delay product over `base_rtt` and never exceeds it (more would only queue), and
//! never falls below `min_window`.

use serde::{Deserialize, Serialize};

use super::{check_positive, check_range, AckSignal, CcConfigError};
use crate::host::dcqcn::RateHistory;
use crate::units::{ByteSize, Time};

/// DCTCP's parameters.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DctcpConfig {
    /// Alpha's gain `g` (0 < g <= 1). Paper: 1/16.
    pub g: f64,
    /// Alpha when a QP starts (0..=1). Linux's DCTCP starts at 1 (the first mark halves).
    pub initial_alpha: f64,
    /// Additive increase per window acknowledged. Paper (TCP's congestion avoidance): one
    /// segment; absent = one MTU.
    pub ai: Option<ByteSize>,
    /// The unloaded round trip the initial (and largest) window covers at line rate. Not a
    /// DCTCP parameter (TCP probes with slow start); 10 us covers a few switch hops at
    /// 100 Gb/s with 4 KiB frames. Set it to your fabric's base RTT.
    pub base_rtt: Time,
    /// Smallest window. Paper (TCP): one segment; absent = one MTU.
    pub min_window: Option<ByteSize>,
}

impl Default for DctcpConfig {
    fn default() -> Self {
        DctcpConfig {
            g: 1.0 / 16.0,
            initial_alpha: 1.0,
            ai: None,
            base_rtt: Time::from_us(10),
            min_window: None,
        }
    }
}

// Floats compare by their bits, so the config stays `Eq` like the rest of `NicConfig`.
impl PartialEq for DctcpConfig {
    fn eq(&self, o: &Self) -> bool {
        self.g.to_bits() == o.g.to_bits()
            && self.initial_alpha.to_bits() == o.initial_alpha.to_bits()
            && self.ai == o.ai
            && self.base_rtt == o.base_rtt
            && self.min_window == o.min_window
    }
}
impl Eq for DctcpConfig {}

impl DctcpConfig {
    /// Checks every parameter's range.
    pub fn validate(&self) -> Result<(), CcConfigError> {
        check_range("dctcp", "g", self.g, 0.0, 1.0, true)?;
        check_range(
            "dctcp",
            "initial_alpha",
            self.initial_alpha,
            0.0,
            1.0,
            false,
        )?;
        check_positive("dctcp", "base_rtt", self.base_rtt)?;
        for (field, v) in [("ai", self.ai), ("min_window", self.min_window)] {
            if v.is_some_and(|b| b.bytes() == 0) {
                return Err(CcConfigError::new(
                    "dctcp",
                    field,
                    "must be greater than zero".into(),
                ));
            }
        }
        Ok(())
    }
}

/// One QP's DCTCP state.
#[derive(Debug)]
pub(crate) struct Dctcp {
    /// The window, bytes.
    cwnd: f64,
    /// Its ceiling (the line-rate BDP) and floor.
    max: f64,
    min: f64,
    /// Additive increase per window, bytes.
    ai: f64,
    pub(crate) alpha: f64,
    /// Bytes acknowledged and, of those, marked, in the current window.
    acked: u64,
    marked: u64,
    /// The window ends when an ACK passes this PSN.
    window_end: u64,
    /// Whether this window already cut.
    cut: bool,
    /// Receive side: a CE mark seen since the last ACK went.
    pub(crate) ece_pending: bool,
    /// Windows as rates (window / base RTT), for the report.
    pub(crate) history: RateHistory,
    base_rtt_s: f64,
}

impl Dctcp {
    pub(crate) fn new(cfg: &DctcpConfig, mtu: u64, line: f64) -> Dctcp {
        let base_rtt_s = cfg.base_rtt.ps() as f64 / 1e12;
        // Bytes per second times ps, then to seconds: exact for whole-Gb/s rates and whole us.
        let max = (line / 8.0 * cfg.base_rtt.ps() as f64 / 1e12).max(mtu as f64);
        let min = cfg.min_window.map_or(mtu, |b| b.bytes()) as f64;
        Dctcp {
            cwnd: max,
            max,
            min: min.min(max),
            ai: cfg.ai.map_or(mtu, |b| b.bytes()) as f64,
            alpha: cfg.initial_alpha,
            acked: 0,
            marked: 0,
            window_end: 0,
            cut: false,
            ece_pending: false,
            history: RateHistory::default(),
            base_rtt_s,
        }
    }

    /// The window in bytes (whole bytes, at least one).
    pub(crate) fn window(&self) -> u64 {
        (self.cwnd as u64).max(1)
    }

    /// An ACK: alpha's bookkeeping, then a cut (first mark of a window) or an increase.
    pub(crate) fn on_ack(&mut self, cfg: &DctcpConfig, sig: &AckSignal, now: Time) -> bool {
        self.acked += sig.acked_bytes;
        if sig.ece {
            self.marked += sig.acked_bytes;
        }
        let before = self.cwnd;
        let mut cut = false;
        if sig.ece && !self.cut {
            self.cwnd = (self.cwnd * (1.0 - self.alpha / 2.0)).max(self.min);
            self.cut = true;
            cut = true;
        } else if !sig.ece && sig.acked_bytes > 0 {
            self.cwnd = (self.cwnd + self.ai * sig.acked_bytes as f64 / self.cwnd).min(self.max);
        }
        if sig.snd_una > self.window_end {
            // One window of data acknowledged: fold its marked fraction into alpha.
            if self.acked > 0 {
                let f = self.marked as f64 / self.acked as f64;
                self.alpha = (1.0 - cfg.g) * self.alpha + cfg.g * f;
            }
            self.acked = 0;
            self.marked = 0;
            self.cut = false;
            self.window_end = sig.snd_nxt;
        }
        if self.cwnd != before {
            self.history
                .record(128, now, self.cwnd * 8.0 / self.base_rtt_s);
        }
        cut
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alpha_converges_to_the_marked_fraction() {
        // A fixed marking probability p = 1/4: every fourth ACK marked, one ACK per packet and
        // a window ends every 8 ACKs (its marked fraction is exactly 1/4). alpha's EWMA with
        // g = 1/16 approaches F geometrically: after n windows |alpha - F| = (15/16)^n |1 - F|,
        // below 1e-6 after 220 windows.
        let cfg = DctcpConfig::default();
        let mut d = Dctcp::new(&cfg, 1000, 100e9);
        let mut psn = 0u64;
        for i in 0..2000u64 {
            psn += 1;
            // The window boundary: the sender had sent 8 packets past the last boundary.
            let sig = AckSignal {
                acked_bytes: 1000,
                ece: i % 4 == 3,
                snd_una: psn,
                snd_nxt: psn.div_ceil(8) * 8,
                ..AckSignal::default()
            };
            d.on_ack(&cfg, &sig, Time::from_us(i));
        }
        assert!((d.alpha - 0.25).abs() < 1e-6, "alpha {}", d.alpha);
    }

    #[test]
    fn one_cut_per_window_and_additive_increase() {
        let cfg = DctcpConfig {
            initial_alpha: 1.0,
            ..DctcpConfig::default()
        };
        // 100 Gb/s x 10 us = 125,000 bytes.
        let mut d = Dctcp::new(&cfg, 1000, 100e9);
        assert_eq!(d.window(), 125_000);
        let sig = |una, ece| AckSignal {
            acked_bytes: 1000,
            ece,
            snd_una: una,
            snd_nxt: 100,
            ..AckSignal::default()
        };
        // The first ACK ends window 0 (window_end 0), starting one that ends at PSN 100.
        assert!(!d.on_ack(&cfg, &sig(1, false), Time::ZERO));
        assert!(d.on_ack(&cfg, &sig(2, true), Time::ZERO));
        // alpha = 1 (after one unmarked window: 15/16), so the cut is by 15/32.
        let w = d.window();
        assert!(!d.on_ack(&cfg, &sig(3, true), Time::ZERO));
        assert_eq!(d.window(), w);
        // Unmarked: + ai * acked / W.
        d.on_ack(&cfg, &sig(4, false), Time::ZERO);
        assert!(d.window() > w);
    }
}
