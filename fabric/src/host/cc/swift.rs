//! Swift (Kumar et al., "Swift: Delay is Simple and Effective for Congestion Control in the
//! Datacenter", SIGCOMM 2020): a window of packets steered toward a target delay.
//!
//! The target is `base_target + hops * per_hop` (the fabric part scaled by the path's switch
//! count, read from the ACK's TTL) plus flow-based scaling: `fs = a / sqrt(cwnd) + b`, clamped
//! to `[0, fs_range]`, with `a` and `b` chosen so that `fs` is `fs_range` at `fs_min_cwnd` and 0
//! at `fs_max_cwnd` (smaller windows get more headroom: N flows share a queue fairly). With the
//! latest delay sample (the NIC's RTT; there is no host delay to remove here):
//! - delay < target: additive increase, `cwnd += ai / cwnd` per packet acknowledged when
//!   `cwnd >= 1`, `cwnd += ai` per packet below;
//! - otherwise, at most once per RTT: `cwnd *= max(1 - beta (delay - target) / delay,
//!   1 - max_mdf)`.
//!
//! The window stays within `[min_cwnd, max_cwnd]` packets. Below one packet the QP is paced:
//! one packet per `rtt / cwnd`.

use serde::{Deserialize, Serialize};

use super::{check_positive, check_range, AckSignal, CcConfigError};
use crate::host::dcqcn::RateHistory;
use crate::units::Time;

/// Swift's parameters; defaults are the paper's where it gives one (section 3 and its
/// Table 2), each named.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SwiftConfig {
    /// Fabric target delay before hop and flow scaling. Paper's deployment: 25 us (it scales
    /// with hops from there); set it near the fabric's unloaded RTT.
    pub base_target: Time,
    /// Target added per switch hop (`h`). Paper: a few microseconds per hop; 1 us assumed.
    pub per_hop: Time,
    /// Additive increase, packets per RTT. Paper: 1.
    pub ai: f64,
    /// Multiplicative decrease gain. Paper: 0.8.
    pub beta: f64,
    /// Largest cut per RTT (fraction). Paper: 0.5.
    pub max_mdf: f64,
    /// Flow-scaling range: extra target at `fs_min_cwnd`. Paper: 5 x base_target; absent = that.
    pub fs_range: Option<Time>,
    /// Window (packets) at which flow scaling is largest. Paper: 0.1.
    pub fs_min_cwnd: f64,
    /// Window (packets) at which flow scaling vanishes. Paper: 100.
    pub fs_max_cwnd: f64,
    /// Smallest window, packets (paced below 1). Paper: 0.001.
    pub min_cwnd: f64,
    /// Largest window, packets; absent = the line-rate BDP over `base_target`.
    pub max_cwnd: Option<f64>,
}

impl Default for SwiftConfig {
    fn default() -> Self {
        SwiftConfig {
            base_target: Time::from_us(25),
            per_hop: Time::from_us(1),
            ai: 1.0,
            beta: 0.8,
            max_mdf: 0.5,
            fs_range: None,
            fs_min_cwnd: 0.1,
            fs_max_cwnd: 100.0,
            min_cwnd: 0.001,
            max_cwnd: None,
        }
    }
}

// Floats compare by their bits, so the config stays `Eq` like the rest of `NicConfig`.
impl PartialEq for SwiftConfig {
    fn eq(&self, o: &Self) -> bool {
        let f = |a: f64, b: f64| a.to_bits() == b.to_bits();
        self.base_target == o.base_target
            && self.per_hop == o.per_hop
            && f(self.ai, o.ai)
            && f(self.beta, o.beta)
            && f(self.max_mdf, o.max_mdf)
            && self.fs_range == o.fs_range
            && f(self.fs_min_cwnd, o.fs_min_cwnd)
            && f(self.fs_max_cwnd, o.fs_max_cwnd)
            && f(self.min_cwnd, o.min_cwnd)
            && self.max_cwnd.map(f64::to_bits) == o.max_cwnd.map(f64::to_bits)
    }
}
impl Eq for SwiftConfig {}

impl SwiftConfig {
    /// Checks every parameter's range.
    pub fn validate(&self) -> Result<(), CcConfigError> {
        check_positive("swift", "base_target", self.base_target)?;
        check_range("swift", "ai", self.ai, 0.0, 1e6, true)?;
        check_range("swift", "beta", self.beta, 0.0, 1.0, true)?;
        check_range("swift", "max_mdf", self.max_mdf, 0.0, 1.0, true)?;
        check_range("swift", "min_cwnd", self.min_cwnd, 0.0, 1e9, true)?;
        check_range("swift", "fs_min_cwnd", self.fs_min_cwnd, 0.0, 1e9, true)?;
        if self.fs_max_cwnd.is_nan() || self.fs_max_cwnd <= self.fs_min_cwnd {
            return Err(CcConfigError::new(
                "swift",
                "fs_max_cwnd",
                format!(
                    "{} is not above fs_min_cwnd ({})",
                    self.fs_max_cwnd, self.fs_min_cwnd
                ),
            ));
        }
        if let Some(m) = self.max_cwnd {
            if m.is_nan() || m < self.min_cwnd {
                return Err(CcConfigError::new(
                    "swift",
                    "max_cwnd",
                    format!("{m} is below min_cwnd ({})", self.min_cwnd),
                ));
            }
        }
        Ok(())
    }
}

/// One QP's Swift state.
#[derive(Debug)]
pub(crate) struct Swift {
    /// Window, packets.
    pub(crate) cwnd: f64,
    max: f64,
    /// Bytes per packet.
    mtu: f64,
    /// The latest delay sample, ps (0: none yet).
    delay: f64,
    /// The latest target, ps (for tests and reports).
    pub(crate) target: f64,
    /// When the window was last cut.
    last_cut: Option<Time>,
    /// Line rate, bits per second (pacing is computed against it).
    line: f64,
    /// Window changes as rates (window / latest RTT), for the report.
    pub(crate) history: RateHistory,
}

impl Swift {
    pub(crate) fn new(cfg: &SwiftConfig, mtu: u64, line: f64) -> Swift {
        let mtu = mtu.max(1) as f64;
        let bdp = line / 8.0 * cfg.base_target.ps() as f64 / 1e12 / mtu;
        let max = cfg.max_cwnd.unwrap_or(bdp.max(1.0)).max(cfg.min_cwnd);
        Swift {
            cwnd: max,
            max,
            mtu,
            delay: 0.0,
            target: 0.0,
            last_cut: None,
            line,
            history: RateHistory::default(),
        }
    }

    /// Bytes allowed in flight: the window, at least one packet (below one packet the
    /// pacing rate does the limiting).
    pub(crate) fn window(&self) -> u64 {
        (self.cwnd.max(1.0) * self.mtu) as u64
    }

    /// Pacing when the window is below one packet: one packet per `rtt / cwnd`.
    pub(crate) fn rate(&self) -> Option<f64> {
        if self.cwnd >= 1.0 || self.delay == 0.0 {
            return None;
        }
        let r = self.cwnd * self.mtu * 8.0 / (self.delay * 1e-12);
        (r < self.line).then_some(r.max(1.0))
    }

    /// The target delay in ps for `hops` switches at the current window.
    pub(crate) fn target_ps(&self, cfg: &SwiftConfig, hops: u32) -> f64 {
        let base = cfg.base_target.ps() as f64 + f64::from(hops) * cfg.per_hop.ps() as f64;
        let range = cfg
            .fs_range
            .map_or(5.0 * cfg.base_target.ps() as f64, |t| t.ps() as f64);
        let inv = |w: f64| 1.0 / w.sqrt();
        let a = range / (inv(cfg.fs_min_cwnd) - inv(cfg.fs_max_cwnd));
        let b = -a * inv(cfg.fs_max_cwnd);
        let fs = (a * inv(self.cwnd.max(1e-9)) + b).clamp(0.0, range);
        base + fs
    }

    /// An ACK: the window moves toward the target. True on a cut.
    pub(crate) fn on_ack(
        &mut self,
        cfg: &SwiftConfig,
        line: f64,
        sig: &AckSignal,
        now: Time,
    ) -> bool {
        self.line = line;
        if let Some(r) = sig.rtt {
            self.delay = r.ps() as f64;
        }
        if self.delay == 0.0 || sig.acked_bytes == 0 {
            return false;
        }
        let before = self.cwnd;
        let acked = sig.acked_bytes as f64 / self.mtu;
        self.target = self.target_ps(cfg, sig.hops);
        let mut cut = false;
        if self.delay < self.target {
            self.cwnd += if self.cwnd >= 1.0 {
                cfg.ai / self.cwnd * acked
            } else {
                cfg.ai * acked
            };
        } else if self
            .last_cut
            .is_none_or(|t| now.saturating_sub(t).ps() as f64 >= self.delay)
        {
            let f =
                (1.0 - cfg.beta * (self.delay - self.target) / self.delay).max(1.0 - cfg.max_mdf);
            self.cwnd *= f;
            self.last_cut = Some(now);
            cut = true;
        }
        self.cwnd = self.cwnd.clamp(cfg.min_cwnd, self.max);
        if self.cwnd != before {
            let rate = self.cwnd * self.mtu * 8.0 / (self.delay * 1e-12);
            self.history.record(128, now, rate.min(line));
        }
        cut
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ack(us: f64) -> AckSignal {
        AckSignal {
            acked_bytes: 1000,
            rtt: Some(Time((us * 1e6) as u64)),
            hops: 2,
            ..AckSignal::default()
        }
    }

    #[test]
    fn target_scales_with_hops_and_flow_window() {
        let cfg = SwiftConfig::default();
        let mut s = Swift::new(&cfg, 1000, 100e9);
        s.cwnd = cfg.fs_max_cwnd;
        // At fs_max_cwnd flow scaling is 0: 25 + 2 x 1 us.
        assert!((s.target_ps(&cfg, 2) - 27e6).abs() < 1.0);
        s.cwnd = cfg.fs_min_cwnd;
        // At fs_min_cwnd it is the whole range, 5 x 25 us.
        assert!((s.target_ps(&cfg, 2) - (27e6 + 125e6)).abs() < 1.0);
    }

    #[test]
    fn increases_below_target_and_cuts_once_per_rtt_above() {
        let cfg = SwiftConfig {
            max_cwnd: Some(1000.0),
            ..SwiftConfig::default()
        };
        let mut s = Swift::new(&cfg, 1000, 100e9);
        s.cwnd = 100.0;
        // Below target (27 us at cwnd 100): + ai / cwnd per packet.
        assert!(!s.on_ack(&cfg, 100e9, &ack(10.0), Time::ZERO));
        assert!((s.cwnd - 100.01).abs() < 1e-9);
        // 54 us: twice the target; the cut is max(1 - 0.8 * 27/54, 0.5) = 0.6.
        s.cwnd = 100.0;
        assert!(s.on_ack(&cfg, 100e9, &ack(54.0), Time::from_us(100)));
        assert!((s.cwnd - 60.0).abs() < 1e-6, "{}", s.cwnd);
        // Within the same RTT no second cut.
        assert!(!s.on_ack(&cfg, 100e9, &ack(54.0), Time::from_us(120)));
        assert!(s.on_ack(&cfg, 100e9, &ack(54.0), Time::from_us(160)));
    }

    #[test]
    fn below_one_packet_it_paces() {
        let cfg = SwiftConfig::default();
        let mut s = Swift::new(&cfg, 1000, 100e9);
        s.cwnd = 0.5;
        s.delay = 10e6;
        // Half a 1000-byte packet per 10 us: 400 Mb/s.
        assert_eq!(s.rate().map(|r| r.round()), Some(400e6));
        assert_eq!(s.window(), 1000);
    }
}
