//! DCQCN (Zhu et al., "Congestion Control for Large-Scale RDMA Deployments", SIGCOMM 2015):
//! the NIC's two roles, as pure state machines the [`super::Nic`] drives.
//!
//! - **Notification point** (`Np`, the receiver): on a CE-marked data packet it asks for a CNP
//!   to the sender's QP, at most once per QP per `cnp_interval`.
//! - **Reaction point** (`Rp`, the sender): on a CNP, `Rt = Rc; Rc = Rc (1 - alpha/2);
//!   alpha = (1 - g) alpha + g`, and the timer and byte counters restart. Every `K` without a CNP
//!   alpha decays by `(1 - g)`. Rate increase events come from a timer (every `T`) and a byte
//!   counter (every `B` bytes sent); with `T_c` and `B_c` their counts since the last cut:
//!   fast recovery while `max(T_c, B_c) <= F` (`Rc = (Rt + Rc)/2`), hyper increase when
//!   `min(T_c, B_c) > F` (`Rt += i R_HAI`, `i = min(T_c, B_c) - F`, then `Rc = (Rt + Rc)/2`),
//!   additive otherwise (`Rt += R_AI`, then `Rc = (Rt + Rc)/2`). Rates stay within
//!   `[min_rate, line rate]`.
//!
//! **Cost.** A QP that never saw a CNP has no RP state in use and no timer: it sends at line
//! rate. Alpha's decay needs no timer at all: it is a closed form of the whole periods of `K`
//! since the last CNP, `alpha (1 - g)^n`, evaluated when a CNP needs it (equivalent to a timer
//! restarted by every CNP). Only the rate-increase timer `T` runs, and only while the QP is below
//! line rate; once `Rc` and `Rt` are back at the line rate the RP goes idle again.
//!
//! **Arithmetic and rounding.** Rates are `f64` bits per second. Line rates are whole numbers far
//! below 2^53, so halving, `(Rt + Rc)/2` and adding `R_AI`/`R_HAI` are exact; only
//! `Rc (1 - alpha/2)` with a non-dyadic alpha rounds (to the nearest double). `g = 1/256` and
//! `1 - g` are exact doubles, so alpha's updates round at most once each. The pacer uses the
//! rate rounded to the nearest whole bit per second, and `Rc` counts as back at the line rate
//! once it is within half a bit per second of it (the pacer could not tell them apart).

use serde::{Deserialize, Serialize};

use crate::units::{Bandwidth, ByteSize, Time};

pub use super::cc::CongestionControl;

/// DCQCN's parameters. Defaults are the paper's (Zhu et al., SIGCOMM 2015) where it gives one;
/// each field's doc says where the value comes from. Every QP starts at its port's line rate
/// (further capped by `qp_rate`); the first CNP starts the rate limiter.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DcqcnConfig {
    /// Alpha's gain `g` (0 < g <= 1). Paper: g = 1/256 (section 3, parameter table).
    pub g: f64,
    /// Alpha when a QP starts (0..=1). Paper: 1 (the first CNP halves the rate).
    pub initial_alpha: f64,
    /// `K`: alpha decays by `(1 - g)` every `K` without a CNP. Paper: 55 us.
    pub alpha_timer: Time,
    /// `T`: period of the rate-increase timer. Paper: 55 us.
    pub rate_timer: Time,
    /// `B`: bytes sent (frame bytes) per byte-counter rate-increase event. Paper: 10 MB
    /// (taken as 10 * 10^6 bytes).
    pub byte_counter: ByteSize,
    /// `F`: rate-increase events of fast recovery before additive increase. Paper: 5.
    pub fast_recovery_steps: u32,
    /// `R_AI`: additive-increase step of the target rate. Paper: 40 Mb/s.
    pub rate_ai: Bandwidth,
    /// `R_HAI`: hyper-increase step of the target rate. The paper leaves it open; 10 x R_AI
    /// (400 Mb/s), the ratio NIC firmware defaults use (5/50 Mb/s), is assumed.
    pub rate_hai: Bandwidth,
    /// Floor of a QP's rate. Not in the paper; 100 Mb/s as in the ns-3 DCQCN model (`MinRate`
    /// of `RdmaHw`, used by the HPCC artifact).
    pub min_rate: Bandwidth,
    /// Notification point: at most one CNP per QP per this interval. Paper: 50 us.
    pub cnp_interval: Time,
    /// Most (time, rate) samples kept per QP for the rate-over-time CSV (16 bytes each,
    /// allocated as they come; only QPs that were cut record any); beyond it the history is
    /// decimated evenly over the run (see [`RateHistory`]). 128 keeps a 256-host all-to-all's
    /// 65K cut QPs within about 130 MB. Not a DCQCN parameter.
    pub rate_history: usize,
}

impl Default for DcqcnConfig {
    fn default() -> Self {
        DcqcnConfig {
            g: 1.0 / 256.0,
            initial_alpha: 1.0,
            alpha_timer: Time::from_us(55),
            rate_timer: Time::from_us(55),
            byte_counter: ByteSize(10_000_000),
            fast_recovery_steps: 5,
            rate_ai: Bandwidth(40_000_000),
            rate_hai: Bandwidth(400_000_000),
            min_rate: Bandwidth(100_000_000),
            cnp_interval: Time::from_us(50),
            rate_history: 128,
        }
    }
}

// Floats compare by their bits: reflexive even for a NaN that `validate` would reject, so the
// config can stay `Eq` like the rest of `NicConfig`.
impl PartialEq for DcqcnConfig {
    fn eq(&self, o: &Self) -> bool {
        self.g.to_bits() == o.g.to_bits()
            && self.initial_alpha.to_bits() == o.initial_alpha.to_bits()
            && self.alpha_timer == o.alpha_timer
            && self.rate_timer == o.rate_timer
            && self.byte_counter == o.byte_counter
            && self.fast_recovery_steps == o.fast_recovery_steps
            && self.rate_ai == o.rate_ai
            && self.rate_hai == o.rate_hai
            && self.min_rate == o.min_rate
            && self.cnp_interval == o.cnp_interval
            && self.rate_history == o.rate_history
    }
}
impl Eq for DcqcnConfig {}

/// A DCQCN parameter out of its range.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum DcqcnConfigError {
    /// `g` must be in (0, 1].
    #[error("dcqcn g = {0} is outside (0, 1]")]
    BadGain(f64),
    /// `initial_alpha` must be in [0, 1].
    #[error("dcqcn initial_alpha = {0} is outside [0, 1]")]
    BadAlpha(f64),
    /// A period or counter that must be positive is zero.
    #[error("dcqcn {0} must be greater than zero")]
    Zero(&'static str),
    /// A timer shorter than [`DcqcnConfig::MIN_TIMER`]: the rate would recover between two
    /// frames, and DCQCN would act as no congestion control at all.
    #[error(
        "dcqcn {0} = {1} is shorter than {min}: DCQCN's timers are tens of microseconds \
         (paper: 55us and 50us), and one this short undoes every cut before the next frame",
        min = DcqcnConfig::MIN_TIMER
    )]
    TooShort(&'static str, Time),
}

impl DcqcnConfigError {
    /// The parameter at fault, when the error is about one.
    pub fn field(&self) -> &'static str {
        match self {
            DcqcnConfigError::BadGain(_) => "g",
            DcqcnConfigError::BadAlpha(_) => "initial_alpha",
            DcqcnConfigError::Zero(f) | DcqcnConfigError::TooShort(f, _) => f,
        }
    }
}

impl DcqcnConfig {
    /// The shortest `alpha_timer`, `rate_timer` and `cnp_interval` accepted.
    pub const MIN_TIMER: Time = Time::from_us(1);

    /// Checks every parameter's range.
    pub fn validate(&self) -> Result<(), DcqcnConfigError> {
        if !(self.g > 0.0 && self.g <= 1.0) {
            return Err(DcqcnConfigError::BadGain(self.g));
        }
        if !(0.0..=1.0).contains(&self.initial_alpha) {
            return Err(DcqcnConfigError::BadAlpha(self.initial_alpha));
        }
        for (name, zero) in [
            ("alpha_timer", self.alpha_timer == Time::ZERO),
            ("rate_timer", self.rate_timer == Time::ZERO),
            ("byte_counter", self.byte_counter.bytes() == 0),
            ("min_rate", self.min_rate.bps() == 0),
            ("cnp_interval", self.cnp_interval == Time::ZERO),
            ("rate_ai", self.rate_ai.bps() == 0),
            ("rate_hai", self.rate_hai.bps() == 0),
            ("rate_history", self.rate_history == 0),
        ] {
            if zero {
                return Err(DcqcnConfigError::Zero(name));
            }
        }
        for (name, t) in [
            ("alpha_timer", self.alpha_timer),
            ("rate_timer", self.rate_timer),
            ("cnp_interval", self.cnp_interval),
        ] {
            if t < Self::MIN_TIMER {
                return Err(DcqcnConfigError::TooShort(name, t));
            }
        }
        Ok(())
    }
}

/// A QP's sending rate over time, in bounded memory: running figures over every change (count,
/// cuts, minimum, time-weighted mean) and a history of (time, rate) samples, oldest first, of at
/// most [`DcqcnConfig::rate_history`] entries. While the history has room every change is
/// kept; when it fills, it is thinned to samples at least `resolution` apart (the resolution
/// doubling as often as needed) and later changes closer than that to the last kept sample are
/// left out, so a long run keeps an evenly decimated picture of the whole run. Before the first
/// change the QP sent at line rate.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct RateHistory {
    /// (when, the new rate), decimated as described above.
    pub samples: Vec<(Time, Bandwidth)>,
    /// Smallest spacing of the kept samples (0: every change is kept).
    pub resolution: Time,
    /// Rate changes seen.
    pub changes: u64,
    /// Changes that lowered the rate (CNP reactions).
    pub cuts: u64,
    /// Lowest rate reached.
    pub min: Option<Bandwidth>,
    /// The latest change (always known, whether or not it was kept as a sample).
    pub last: Option<(Time, Bandwidth)>,
    /// When the first change happened.
    pub first_at: Option<Time>,
    /// Integral of the rate over time from the first change to the last, in bit-picoseconds
    /// per second (rate in b/s times ps).
    area: u128,
}

impl RateHistory {
    pub(crate) fn record(&mut self, cap: usize, at: Time, rate: f64) {
        let bw = to_bandwidth(rate);
        if let Some((t, prev)) = self.last {
            self.area += u128::from(prev.bps()) * u128::from(at.ps().saturating_sub(t.ps()));
            if bw < prev {
                self.cuts += 1;
            }
        } else {
            self.first_at = Some(at);
            // The first change always cuts from line rate.
            self.cuts += 1;
        }
        self.changes += 1;
        self.min = Some(self.min.map_or(bw, |m| m.min(bw)));
        self.last = Some((at, bw));
        let spaced = self
            .samples
            .last()
            .is_none_or(|&(t, _)| at.ps() >= t.ps().saturating_add(self.resolution.ps()));
        if !spaced || cap == 0 {
            return;
        }
        if self.samples.len() >= cap {
            self.thin(cap, at);
        }
        let spaced = self
            .samples
            .last()
            .is_none_or(|&(t, _)| at.ps() >= t.ps().saturating_add(self.resolution.ps()));
        if spaced && self.samples.len() < cap {
            self.samples.push((at, bw));
        }
    }

    /// Doubles the resolution (starting from the span / capacity) until the samples spaced at
    /// least that far apart fill at most half the history.
    fn thin(&mut self, cap: usize, now: Time) {
        let first = self.samples.first().map_or(now, |s| s.0);
        let span = now.ps().saturating_sub(first.ps());
        let mut res = if self.resolution == Time::ZERO {
            (span / cap.max(1) as u64).max(1)
        } else {
            self.resolution.ps().saturating_mul(2)
        };
        loop {
            let mut kept: Vec<(Time, Bandwidth)> = Vec::with_capacity(cap);
            for &s in &self.samples {
                if kept
                    .last()
                    .is_none_or(|&(t, _)| s.0.ps() >= t.ps().saturating_add(res))
                {
                    kept.push(s);
                }
            }
            if kept.len() <= cap / 2 || res == u64::MAX {
                self.samples = kept;
                self.resolution = Time(res);
                return;
            }
            res = res.saturating_mul(2);
        }
    }

    /// The time-weighted mean rate from the first change to the last (which includes the
    /// recovery toward line rate after the traffic, as long as the rate timer ran); `None`
    /// before any change, the rate itself after one.
    pub fn mean_bps(&self) -> Option<f64> {
        let (first, (t, last)) = (self.first_at?, self.last?);
        let span = t.ps().saturating_sub(first.ps());
        Some(if span == 0 {
            last.bps() as f64
        } else {
            (self.area / u128::from(span)) as f64
        })
    }
}

/// A rate in bits per second as the pacer uses it: rounded to the nearest whole bit per second,
/// at least 1.
pub(crate) fn to_bandwidth(bps: f64) -> Bandwidth {
    Bandwidth((bps.round() as u64).max(1))
}

/// Notification point state of one QP: when it last asked for a CNP.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Np {
    last_cnp: Option<Time>,
}

impl Np {
    /// A CE-marked packet arrived at `now`: true when a CNP may go (and then it counts as sent).
    pub(crate) fn on_ce(&mut self, now: Time, interval: Time) -> bool {
        let due = self
            .last_cnp
            .is_none_or(|t| now.saturating_sub(t) >= interval);
        if due {
            self.last_cnp = Some(now);
        }
        due
    }
}

/// Reaction point state of one QP.
#[derive(Clone, Debug)]
pub(crate) struct Rp {
    /// Current rate `Rc`, bits per second (meaningful while `limited`).
    rc: f64,
    /// Target rate `Rt`.
    rt: f64,
    /// Alpha as of `alpha_at`.
    alpha: f64,
    /// The last CNP: alpha decays by whole periods of `K` from here. `None` before the first
    /// CNP, when alpha stays at its initial value.
    alpha_at: Option<Time>,
    /// Timer (`T_c`) and byte-counter (`B_c`) events since the last cut.
    t_count: u32,
    b_count: u32,
    /// Bytes sent since the last byte-counter event.
    bytes: u64,
    /// True while the QP is below line rate (the rate limiter and the timer are in use).
    limited: bool,
    /// When the next rate-increase timer event is due.
    pub(crate) timer_deadline: Time,
    /// Whether a timer event is pending in the engine (timers cannot be cancelled).
    pub(crate) timer_armed: bool,
    /// Rate changes, for the report.
    pub(crate) history: RateHistory,
}

impl Rp {
    pub(crate) fn new(cfg: &DcqcnConfig) -> Rp {
        Rp {
            rc: 0.0,
            rt: 0.0,
            alpha: cfg.initial_alpha,
            alpha_at: None,
            t_count: 0,
            b_count: 0,
            bytes: 0,
            limited: false,
            timer_deadline: Time::NEVER,
            timer_armed: false,
            history: RateHistory::default(),
        }
    }

    /// The rate limit in force: `None` at line rate.
    pub(crate) fn rate(&self) -> Option<f64> {
        self.limited.then_some(self.rc)
    }

    /// The target rate `Rt` (meaningful while limited).
    #[cfg(test)]
    pub(crate) fn target(&self) -> f64 {
        self.rt
    }

    /// Whether the QP is below line rate (and the increase timer should run).
    pub(crate) fn limited(&self) -> bool {
        self.limited
    }

    /// Alpha at `now`: the value after the last CNP decayed once per whole `K` since.
    pub(crate) fn alpha(&self, cfg: &DcqcnConfig, now: Time) -> f64 {
        let Some(at) = self.alpha_at else {
            return self.alpha;
        };
        let k = cfg.alpha_timer.ps().max(1);
        let n = now.saturating_sub(at).ps() / k;
        self.alpha * pow_u64(1.0 - cfg.g, n)
    }

    /// A CNP arrived at `now` on a port of `line` bits per second: cut the rate. Returns the
    /// new rate.
    pub(crate) fn on_cnp(&mut self, cfg: &DcqcnConfig, line: f64, now: Time) -> f64 {
        let alpha = self.alpha(cfg, now);
        if !self.limited {
            self.rc = line;
            self.limited = true;
        }
        self.rt = self.rc;
        self.rc = (self.rc * (1.0 - alpha / 2.0)).max(min_rate(cfg, line));
        self.alpha = (1.0 - cfg.g) * alpha + cfg.g;
        self.alpha_at = Some(now);
        self.t_count = 0;
        self.b_count = 0;
        self.bytes = 0;
        self.timer_deadline = now + cfg.rate_timer;
        self.history.record(cfg.rate_history, now, self.rc);
        self.rc
    }

    /// The rate-increase timer fired at `now` (its deadline reached). Returns whether the QP is
    /// still limited (then the next deadline is set).
    pub(crate) fn on_timer(&mut self, cfg: &DcqcnConfig, line: f64, now: Time) -> bool {
        if !self.limited {
            return false;
        }
        self.t_count = self.t_count.saturating_add(1);
        self.increase(cfg, line, now);
        if self.limited {
            self.timer_deadline = now + cfg.rate_timer;
        }
        self.limited
    }

    /// `n` bytes were sent at `now`; byte-counter events follow every `B` bytes.
    pub(crate) fn on_sent(&mut self, cfg: &DcqcnConfig, line: f64, n: u64, now: Time) {
        if !self.limited {
            return;
        }
        let b = cfg.byte_counter.bytes().max(1);
        self.bytes += n;
        while self.bytes >= b && self.limited {
            self.bytes -= b;
            self.b_count = self.b_count.saturating_add(1);
            self.increase(cfg, line, now);
        }
    }

    fn increase(&mut self, cfg: &DcqcnConfig, line: f64, now: Time) {
        let f = cfg.fast_recovery_steps;
        let (hi, lo) = (
            self.t_count.max(self.b_count),
            self.t_count.min(self.b_count),
        );
        if hi <= f {
            // Fast recovery: back halfway toward the rate before the cut.
        } else if lo > f {
            self.rt += f64::from(lo - f) * cfg.rate_hai.bps() as f64;
        } else {
            self.rt += cfg.rate_ai.bps() as f64;
        }
        let before = self.rc;
        self.rt = self.rt.min(line);
        self.rc = ((self.rt + self.rc) / 2.0).min(line);
        if line - self.rc < 0.5 && self.rt >= line {
            // Back at line rate: the limiter and its timer stop until the next CNP.
            self.rc = line;
            self.limited = false;
            self.timer_deadline = Time::NEVER;
        }
        if self.rc != before {
            self.history.record(cfg.rate_history, now, self.rc);
        }
    }
}

/// The rate floor, never above the line rate.
fn min_rate(cfg: &DcqcnConfig, line: f64) -> f64 {
    (cfg.min_rate.bps() as f64).min(line)
}

/// `base^n` by square-and-multiply over the bits of `n`, lowest first: a fixed sequence of
/// IEEE-754 multiplications, each correctly rounded, so the result is the same bits on every
/// platform and toolchain. (`f64::powi` is an LLVM intrinsic whose lowering — a libm call, an
/// unrolled product, constant folding at another precision — is not specified, and reports
/// must not change from one machine to the next.)
pub(crate) fn pow_u64(base: f64, mut n: u64) -> f64 {
    let mut result = 1.0;
    let mut square = base;
    while n > 0 {
        if n & 1 == 1 {
            result *= square;
        }
        n >>= 1;
        if n > 0 {
            square *= square;
        }
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    const LINE: f64 = 100e9;

    #[test]
    fn a_first_cnp_at_line_rate_halves_exactly() {
        let cfg = DcqcnConfig::default();
        let mut rp = Rp::new(&cfg);
        assert_eq!(rp.rate(), None);
        let t0 = Time::from_us(10);
        assert_eq!(rp.on_cnp(&cfg, LINE, t0), 50e9);
        assert_eq!(rp.rate(), Some(50e9));
        assert_eq!(rp.target(), LINE);
        // alpha = (1 - g) * 1 + g = 1 exactly; a second CNP at once halves again.
        assert_eq!(rp.alpha(&cfg, t0), 1.0);
        assert_eq!(rp.on_cnp(&cfg, LINE, t0), 25e9);
        assert_eq!(
            rp.history.samples,
            vec![
                (t0, Bandwidth(50_000_000_000)),
                (t0, Bandwidth(25_000_000_000))
            ]
        );
    }

    #[test]
    fn alpha_decays_once_per_whole_k_without_cnp() {
        let cfg = DcqcnConfig::default();
        let mut rp = Rp::new(&cfg);
        let t0 = Time::from_us(3);
        rp.on_cnp(&cfg, LINE, t0);
        let k = cfg.alpha_timer;
        for n in 0..2000u64 {
            // Just before the (n+1)-th period ends, n decays have happened.
            let at = Time(t0.ps() + (n + 1) * k.ps() - 1);
            let expected = (0..n).fold(1.0f64, |a, _| a * (255.0 / 256.0));
            // Square-and-multiply and repeated multiplication by an exact 255/256 round
            // differently, a few ulps per step at most: over 2000 steps well under 1e-12,
            // which is far below one decay step (~4e-3 relative).
            assert!((rp.alpha(&cfg, at) - expected).abs() < 1e-12, "n = {n}");
        }
        // A CNP after n periods uses the decayed alpha and then adds g.
        let n = 10u64;
        let at = Time(t0.ps() + n * k.ps());
        let a = (0..n).fold(1.0f64, |a, _| a * (255.0 / 256.0));
        let before = rp.rate().unwrap_or(0.0);
        let rc = rp.on_cnp(&cfg, LINE, at);
        assert!((rc - before * (1.0 - a / 2.0)).abs() < 1e-3);
        assert!((rp.alpha(&cfg, at) - ((1.0 - cfg.g) * a + cfg.g)).abs() < 1e-12);
    }

    #[test]
    fn power_is_exactly_specified() {
        // Exact cases: powers of two and small integers are representable all the way.
        assert_eq!(pow_u64(0.5, 10).to_bits(), (1.0f64 / 1024.0).to_bits());
        assert_eq!(pow_u64(3.0, 5), 243.0);
        assert_eq!(pow_u64(0.7, 0), 1.0);
        assert_eq!(pow_u64(0.999, u64::MAX), 0.0);
        // The bits of (255/256)^55 as the square-and-multiply order defines them: this pins
        // the computation (1, 2, 4, 16, 32 products in that order), not a platform's powi.
        let g = 255.0f64 / 256.0;
        let g2 = g * g;
        let g4 = g2 * g2;
        let g8 = g4 * g4;
        let g16 = g8 * g8;
        let g32 = g16 * g16;
        let expected = (((g * g2) * g4) * g16) * g32;
        assert_eq!(pow_u64(g, 55).to_bits(), expected.to_bits());
    }

    #[test]
    fn recovery_goes_fast_then_additive_then_hyper() {
        // Paper defaults (F = 5, R_AI = 40 Mb/s, R_HAI = 400 Mb/s) but B = 1000 bytes, so byte
        // events are cheap to cause. Every value below is a sum of whole numbers and halvings
        // far below 2^53, so the arithmetic is exact and compared with ==.
        let cfg = DcqcnConfig {
            byte_counter: ByteSize(1000),
            ..DcqcnConfig::default()
        };
        let mut rp = Rp::new(&cfg);
        let t = Time::from_us(1);
        // Two cuts at once (alpha stays exactly 1): Rt = 50, Rc = 25 Gb/s, below the line rate
        // so additive and hyper increases of Rt are visible.
        assert_eq!(rp.on_cnp(&cfg, LINE, t), 50e9);
        assert_eq!(rp.on_cnp(&cfg, LINE, t), 25e9);
        assert_eq!(rp.target(), 50e9);
        // Fast recovery: F = 5 timer events, each Rc = (Rt + Rc)/2, Rt fixed.
        let mut rc = 25e9;
        for _ in 0..5 {
            assert!(rp.on_timer(&cfg, LINE, t));
            rc = (50e9 + rc) / 2.0;
            assert_eq!((rp.target(), rp.rate()), (50e9, Some(rc)));
        }
        assert_eq!(rc, 49.21875e9);
        // T_c = 6 > F, B_c = 0: additive, Rt += R_AI, then Rc = (Rt + Rc)/2.
        rp.on_timer(&cfg, LINE, t);
        let mut rt = 50.04e9;
        rc = (rt + rc) / 2.0;
        assert_eq!((rp.target(), rp.rate()), (rt, Some(rc)));
        // Byte events 1..5 (T_c = 6): min(T_c, B_c) <= F, still additive.
        for _ in 0..5 {
            rp.on_sent(&cfg, LINE, 1000, t);
            rt += 40e6;
            rc = (rt + rc) / 2.0;
            assert_eq!((rp.target(), rp.rate()), (rt, Some(rc)));
        }
        assert_eq!(rt, 50.24e9);
        // B_c = 6: min = 6 > F, hyper with i = 1: Rt += R_HAI.
        rp.on_sent(&cfg, LINE, 1000, t);
        assert_eq!(rp.target(), 50.64e9);
        // T_c = 7: min still 6, i = 1; B_c = 7: i = 2.
        rp.on_timer(&cfg, LINE, t);
        assert_eq!(rp.target(), 51.04e9);
        rp.on_sent(&cfg, LINE, 1000, t);
        assert_eq!(rp.target(), 51.84e9);
    }

    #[test]
    fn recovery_ends_at_line_rate_and_stops_the_timer() {
        let cfg = DcqcnConfig::default();
        let mut rp = Rp::new(&cfg);
        let mut t = Time::ZERO;
        rp.on_cnp(&cfg, LINE, t);
        let mut steps = 0;
        while rp.limited() {
            t = rp.timer_deadline;
            rp.on_timer(&cfg, LINE, t);
            steps += 1;
            assert!(steps < 1000);
        }
        assert_eq!(rp.rate(), None);
        assert_eq!(rp.timer_deadline, Time::NEVER);
        assert_eq!(
            rp.history.samples.last().map(|s| s.1),
            Some(Bandwidth(100_000_000_000))
        );
    }

    #[test]
    fn min_rate_is_a_floor() {
        let cfg = DcqcnConfig {
            min_rate: Bandwidth(30_000_000_000),
            ..DcqcnConfig::default()
        };
        let mut rp = Rp::new(&cfg);
        rp.on_cnp(&cfg, LINE, Time::ZERO);
        assert_eq!(rp.on_cnp(&cfg, LINE, Time::ZERO), 30e9);
    }

    #[test]
    fn np_allows_one_cnp_per_interval() {
        let mut np = Np::default();
        let iv = Time::from_us(50);
        assert!(np.on_ce(Time::from_us(1), iv));
        assert!(!np.on_ce(Time::from_us(50), iv));
        assert!(np.on_ce(Time::from_us(51), iv));
        assert!(!np.on_ce(Time::from_us(100), iv));
    }

    #[test]
    fn history_is_bounded_decimated_and_keeps_exact_running_figures() {
        let mut h = RateHistory::default();
        // 1000 changes, one every microsecond, alternating cut and recovery.
        for i in 0..1000u64 {
            let rate = if i % 2 == 0 { 40e9 } else { 60e9 };
            h.record(8, Time::from_us(i), rate);
        }
        assert!(h.samples.len() <= 8, "{}", h.samples.len());
        assert_eq!(h.changes, 1000);
        // The first change cuts from line rate; then every other change is a cut.
        assert_eq!(h.cuts, 500);
        // Kept samples are at least `resolution` apart and span the run.
        assert!(h.resolution > Time::ZERO);
        for w in h.samples.windows(2) {
            assert!(w[1].0.ps() - w[0].0.ps() >= h.resolution.ps());
        }
        assert_eq!(h.samples.first().map(|s| s.0), Some(Time::ZERO));
        assert!(h.samples.last().is_some_and(|s| s.0 >= Time::from_us(500)));
        assert_eq!(h.last.map(|s| s.0), Some(Time::from_us(999)));
        assert_eq!(h.min, Some(Bandwidth(40_000_000_000)));
        // Mean over [0, 999 us]: 500 us at 40, 499 us at 60.
        assert_eq!(
            h.mean_bps(),
            Some(((500 * 40 + 499 * 60) as f64 / 999.0 * 1e9).floor())
        );
    }

    #[test]
    fn mean_rate_is_time_weighted() {
        let mut h = RateHistory::default();
        // 50 Gb/s for 10 us, then 100 Gb/s for 30 us, then 60: mean 87.5 Gb/s over the 40 us.
        h.record(16, Time::from_us(0), 50e9);
        h.record(16, Time::from_us(10), 100e9);
        h.record(16, Time::from_us(40), 60e9);
        assert_eq!(h.mean_bps(), Some(87.5e9));
        assert_eq!(h.cuts, 2);
        assert_eq!(h.changes, 3);
    }

    #[test]
    fn config_deserializes_from_none_and_a_partial_map() {
        use serde::de::value::{Error, MapDeserializer, StrDeserializer};
        use serde::de::IntoDeserializer;
        let none = CongestionControl::deserialize(StrDeserializer::<Error>::new("none"));
        assert_eq!(none, Ok(CongestionControl::None));
        let cfg = DcqcnConfig::deserialize(MapDeserializer::<_, Error>::new(
            [("cnp_interval", "4us"), ("rate_ai", "5Mbps")]
                .into_iter()
                .map(|(k, v)| (k, v.into_deserializer())),
        ));
        let expected = DcqcnConfig {
            cnp_interval: Time::from_us(4),
            rate_ai: Bandwidth(5_000_000),
            ..DcqcnConfig::default()
        };
        assert_eq!(cfg, Ok(expected));
        assert!(DcqcnConfig::default().validate().is_ok());
        let bad = DcqcnConfig {
            g: 0.0,
            ..DcqcnConfig::default()
        };
        assert!(bad.validate().is_err());
    }
}
