//! One congestion-control interface for the NIC, and the schemes behind it.
//!
//! A scheme has up to three parts, and this module is where the NIC meets all of them:
//!
//! - **Reaction point** (the sender, per QP): before a data packet goes, may the QP send now
//!   (`QpCc::window`: bytes in flight allowed) and how fast (`QpCc::rate`: the pacing rate,
//!   `None` at line rate); after it went (`dcqcn::Rp::on_sent`, DCQCN only); on an
//!   acknowledgement with what it carries back (`AckSignal`: bytes newly acknowledged, the ECN
//!   echo, a round-trip sample, the hop count) (`QpCc::on_ack`); on a CNP and on its own timer
//!   (DCQCN only).
//! - **Notification point** (the receiver, per QP): on a data frame, whether to send a CNP
//!   (DCQCN) or to echo the CE mark in the next ACK (DCTCP: the BTH's BECN bit, which
//!   InfiniBand defines for exactly this, so dissectors show it by name).
//! - **Congestion point** (the switch): ECN marking at egress ([`CongestionControl::wants_ecn`]:
//!   data goes out ECT(0) so RED marks it instead of dropping), or in-band telemetry appended
//!   at every egress ([`CongestionControl::wants_int`], HPCC; see [`crate::wire::int`]). The
//!   delay-based schemes (TIMELY, Swift) need nothing from the switch.
//!
//! **Dispatch.** Per QP the state is one enum (`QpCc`); a `match` per call, no boxing, no
//! allocation on the per-packet path (the rate history allocates only when a rate changes, in
//! bounded memory). One scheme runs at every NIC of a run, so the branch always goes the same
//! way and predicts perfectly; a trait object would add an indirect call and a heap object per
//! QP for nothing.
//!
//! **Round trips.** The NIC times one packet per round trip (Karn's rule: never a resent one,
//! the same probe the retransmission timer uses); TIMELY and Swift get that sample. The hop count
//! Swift scales its target with is read from the ACK's TTL: ACKs follow their QP's path back
//! (same UDP source port, so the same ECMP choice in a symmetric fabric), and every switch
//! decrements the TTL from the NIC's 64.
//!
//! YAML: `cc: none | dcqcn | dctcp | timely | swift | hpcc`, or a one-key map with parameters, e.g.
//! `cc: {timely: {t_low: 20us, beta: 0.8}}`.

pub mod dctcp;
pub mod hpcc;
pub mod swift;
pub mod timely;

use serde::{Deserialize, Serialize};

use super::dcqcn::{DcqcnConfig, Np, RateHistory, Rp};
use super::qp::RxAction;
use crate::units::Time;
use crate::wire::int::IntStack;

pub use self::dctcp::DctcpConfig;
pub use self::hpcc::HpccConfig;
pub use self::swift::SwiftConfig;
pub use self::timely::TimelyConfig;

/// Which congestion control the NIC runs (the scenario's `nic: {cc: ...}`).
///
/// YAML: `cc: none` (the default: no CNPs, no rate changes, data sent as `ecn_capable` says),
/// the bare name of a scheme for its paper's defaults (`cc: dcqcn`, `cc: dctcp`, `cc: timely`,
/// `cc: swift`, `cc: hpcc`), or a one-key map overriding any of its parameters, e.g.
/// `cc: {dcqcn: {g: 0.0625, rate_ai: 5Mbps, cnp_interval: 4us}}`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CongestionControl {
    /// No congestion control: QPs send at their configured rate (or line rate).
    #[default]
    None,
    /// DCQCN at every NIC: notification point and reaction point.
    Dcqcn(DcqcnConfig),
    /// DCTCP's window control over RoCE: ECN echoed in ACKs, alpha, one cut per window.
    Dctcp(DctcpConfig),
    /// TIMELY: per-QP rate from the RTT gradient.
    Timely(TimelyConfig),
    /// Swift: a window toward a target delay scaled by hop count, paced below one packet.
    Swift(SwiftConfig),
    /// HPCC: a window from in-band telemetry every switch appends, paced at window / RTT.
    Hpcc(HpccConfig),
}

/// The parameters of `none`: there are none, so any field is an error.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NoParameters {}

/// The scheme names, for error messages.
const NAMES: &[&str] = &["none", "dcqcn", "dctcp", "timely", "swift", "hpcc"];

// By hand: serde_yaml spells externally tagged enums with YAML tags (`!dcqcn`), which nobody
// writes; this takes the plain name or a one-key map.
impl<'de> Deserialize<'de> for CongestionControl {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::{self, MapAccess, Visitor};
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = CongestionControl;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(
                    "`none`, `dcqcn`, `dctcp`, `timely`, `swift`, `hpcc` or `{scheme: {parameters}}`",
                )
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<CongestionControl, E> {
                Ok(match v {
                    "none" => CongestionControl::None,
                    "dcqcn" => CongestionControl::Dcqcn(DcqcnConfig::default()),
                    "dctcp" => CongestionControl::Dctcp(DctcpConfig::default()),
                    "timely" => CongestionControl::Timely(TimelyConfig::default()),
                    "swift" => CongestionControl::Swift(SwiftConfig::default()),
                    "hpcc" => CongestionControl::Hpcc(HpccConfig::default()),
                    other => return Err(E::unknown_variant(other, NAMES)),
                })
            }
            fn visit_map<A: MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<CongestionControl, A::Error> {
                let key: String = map
                    .next_key()?
                    .ok_or_else(|| de::Error::custom("an empty map names no congestion control"))?;
                let cc = match key.as_str() {
                    "dcqcn" => CongestionControl::Dcqcn(map.next_value()?),
                    "dctcp" => CongestionControl::Dctcp(map.next_value()?),
                    "timely" => CongestionControl::Timely(map.next_value()?),
                    "swift" => CongestionControl::Swift(map.next_value()?),
                    "hpcc" => CongestionControl::Hpcc(map.next_value()?),
                    "none" => {
                        // `none` has no parameters: only `{none: {}}` or `{none: null}`.
                        map.next_value::<Option<NoParameters>>()?;
                        CongestionControl::None
                    }
                    other => return Err(de::Error::unknown_variant(other, NAMES)),
                };
                if map.next_key::<String>()?.is_some() {
                    return Err(de::Error::custom("name one congestion control"));
                }
                Ok(cc)
            }
        }
        d.deserialize_any(V)
    }
}

/// A congestion-control parameter out of its range: which scheme, which field, why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{scheme} {field}: {reason}")]
pub struct CcConfigError {
    /// The scheme (`dctcp`, `timely`, `swift`).
    pub scheme: &'static str,
    /// The parameter.
    pub field: &'static str,
    /// What is wrong with it.
    pub reason: String,
}

impl CcConfigError {
    pub(crate) fn new(scheme: &'static str, field: &'static str, reason: String) -> Self {
        CcConfigError {
            scheme,
            field,
            reason,
        }
    }
}

/// Checks that `v` is in `lo..=hi` (or `lo < v` when `open_lo`), for the range checks below.
pub(crate) fn check_range(
    scheme: &'static str,
    field: &'static str,
    v: f64,
    lo: f64,
    hi: f64,
    open_lo: bool,
) -> Result<(), CcConfigError> {
    let ok = if open_lo { v > lo } else { v >= lo } && v <= hi;
    if ok {
        Ok(())
    } else {
        let lo_b = if open_lo { '(' } else { '[' };
        Err(CcConfigError::new(
            scheme,
            field,
            format!("{v} is outside {lo_b}{lo}, {hi}]"),
        ))
    }
}

/// Checks that a time parameter is positive.
pub(crate) fn check_positive(
    scheme: &'static str,
    field: &'static str,
    t: Time,
) -> Result<(), CcConfigError> {
    if t == Time::ZERO {
        Err(CcConfigError::new(
            scheme,
            field,
            "must be greater than zero".into(),
        ))
    } else {
        Ok(())
    }
}

impl CongestionControl {
    /// The DCQCN parameters when DCQCN is on.
    pub fn dcqcn(&self) -> Option<&DcqcnConfig> {
        match self {
            CongestionControl::Dcqcn(c) => Some(c),
            _ => None,
        }
    }

    /// The scheme's name as the scenario spells it.
    pub fn name(&self) -> &'static str {
        match self {
            CongestionControl::None => "none",
            CongestionControl::Dcqcn(_) => "dcqcn",
            CongestionControl::Dctcp(_) => "dctcp",
            CongestionControl::Timely(_) => "timely",
            CongestionControl::Swift(_) => "swift",
            CongestionControl::Hpcc(_) => "hpcc",
        }
    }

    /// Whether data must go out ECN-capable so switches mark it (DCQCN, DCTCP).
    pub fn wants_ecn(&self) -> bool {
        matches!(
            self,
            CongestionControl::Dcqcn(_) | CongestionControl::Dctcp(_)
        )
    }

    /// Whether data carries an in-band telemetry stack that switches append to and ACKs echo
    /// (HPCC).
    pub fn wants_int(&self) -> bool {
        matches!(self, CongestionControl::Hpcc(_))
    }

    /// Whether the receiver echoes CE marks in its ACKs (BTH BECN): DCTCP.
    pub fn echoes_ecn(&self) -> bool {
        matches!(self, CongestionControl::Dctcp(_))
    }

    /// Checks every parameter of the scheme (DCQCN's have their own error type).
    pub fn validate_scheme(&self) -> Result<(), CcConfigError> {
        match self {
            CongestionControl::None | CongestionControl::Dcqcn(_) => Ok(()),
            CongestionControl::Dctcp(c) => c.validate(),
            CongestionControl::Timely(c) => c.validate(),
            CongestionControl::Swift(c) => c.validate(),
            CongestionControl::Hpcc(c) => c.validate(),
        }
    }

    /// Fresh per-QP state for a new QP (`None` when no scheme runs); `mtu` is the payload
    /// bytes per packet, `line` the QP's port rate in bits per second.
    pub(crate) fn new_qp(&self, mtu: u64, line: f64) -> Option<QpCc> {
        Some(match self {
            CongestionControl::None => return None,
            CongestionControl::Dcqcn(d) => QpCc::Dcqcn {
                np: Np::default(),
                rp: Rp::new(d),
            },
            CongestionControl::Dctcp(c) => QpCc::Dctcp(dctcp::Dctcp::new(c, mtu, line)),
            CongestionControl::Timely(c) => QpCc::Timely(timely::Timely::new(c, mtu)),
            CongestionControl::Swift(c) => QpCc::Swift(swift::Swift::new(c, mtu, line)),
            CongestionControl::Hpcc(c) => QpCc::Hpcc(hpcc::Hpcc::new(c, line)),
        })
    }
}

/// What an acknowledgement tells the reaction point.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct AckSignal {
    /// Payload bytes newly acknowledged (0 for a duplicate or a NAK).
    pub(crate) acked_bytes: u64,
    /// The receiver saw CE on data this ACK covers (BTH BECN).
    pub(crate) ece: bool,
    /// A round-trip sample (one per round trip), if this ACK completed one.
    pub(crate) rtt: Option<Time>,
    /// Switches on the path (64 minus the ACK's TTL).
    pub(crate) hops: u32,
    /// The QP's next PSN to send (DCTCP's window ends when the ACK passes it).
    pub(crate) snd_nxt: u64,
    /// The QP's oldest unacknowledged PSN after this ACK.
    pub(crate) snd_una: u64,
    /// The in-band telemetry the receiver echoed (HPCC).
    pub(crate) int: Option<IntStack>,
}

/// One QP's congestion-control state (same index as the NIC's QPs).
#[derive(Debug)]
pub(crate) enum QpCc {
    /// DCQCN: notification point (receive side) and reaction point (send side).
    Dcqcn {
        /// CNP pacing of the receive side.
        np: Np,
        /// The rate limiter of the send side.
        rp: Rp,
    },
    /// DCTCP's window.
    Dctcp(dctcp::Dctcp),
    /// TIMELY's rate.
    Timely(timely::Timely),
    /// Swift's window.
    Swift(swift::Swift),
    /// HPCC's window and rate.
    Hpcc(hpcc::Hpcc),
}

impl QpCc {
    /// The pacing rate in bits per second, `None` at line rate.
    pub(crate) fn rate(&self) -> Option<f64> {
        match self {
            QpCc::Dcqcn { rp, .. } => rp.rate(),
            QpCc::Dctcp(_) => None,
            QpCc::Timely(t) => t.rate(),
            QpCc::Swift(s) => s.rate(),
            QpCc::Hpcc(h) => h.rate(),
        }
    }

    /// Bytes the QP may have in flight, `None` without a window.
    pub(crate) fn window(&self) -> Option<u64> {
        match self {
            QpCc::Dcqcn { .. } | QpCc::Timely(_) => None,
            QpCc::Dctcp(d) => Some(d.window()),
            QpCc::Swift(s) => Some(s.window()),
            QpCc::Hpcc(h) => Some(h.window()),
        }
    }

    /// A data packet `psn` left at `now` (TIMELY times one per segment).
    #[inline]
    pub(crate) fn on_sent(&mut self, psn: u64, retransmission: bool, now: Time) {
        if let QpCc::Timely(t) = self {
            t.on_sent(psn, retransmission, now);
        }
    }

    /// The rate changes over time, for the report.
    pub(crate) fn history(&self) -> &RateHistory {
        match self {
            QpCc::Dcqcn { rp, .. } => &rp.history,
            QpCc::Dctcp(d) => &d.history,
            QpCc::Timely(t) => &t.history,
            QpCc::Swift(s) => &s.history,
            QpCc::Hpcc(h) => &h.history,
        }
    }

    /// An acknowledgement arrived at `now` for a QP on a port of `line` bits per second.
    /// Returns true when it lowered the rate or the window.
    pub(crate) fn on_ack(
        &mut self,
        cfg: &CongestionControl,
        line: f64,
        sig: &AckSignal,
        now: Time,
    ) -> bool {
        match (self, cfg) {
            (QpCc::Dctcp(s), CongestionControl::Dctcp(c)) => s.on_ack(c, sig, now),
            (QpCc::Timely(s), CongestionControl::Timely(c)) => s.on_ack(c, line, sig, now),
            (QpCc::Swift(s), CongestionControl::Swift(c)) => s.on_ack(c, line, sig, now),
            (QpCc::Hpcc(s), CongestionControl::Hpcc(c)) => s.on_ack(c, line, sig, now),
            _ => false,
        }
    }

    /// DCTCP's notification point on a data frame: remembers a CE mark and, when the frame
    /// draws an ACK, returns whether that ACK echoes one (every mark since the last ACK is
    /// folded into the next one, as DCTCP's receiver does with delayed ACKs).
    pub(crate) fn echo_ce(&mut self, ce: bool, action: &RxAction) -> bool {
        let QpCc::Dctcp(d) = self else {
            return false;
        };
        d.ece_pending |= ce;
        if matches!(
            action,
            RxAction::Accepted { ack: true } | RxAction::Duplicate
        ) {
            std::mem::take(&mut d.ece_pending)
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::de::value::{Error, StrDeserializer};

    #[test]
    fn every_scheme_parses_by_name() {
        for name in NAMES {
            let cc = CongestionControl::deserialize(StrDeserializer::<Error>::new(name));
            assert_eq!(cc.map(|c| c.name()), Ok(*name));
        }
        assert!(CongestionControl::deserialize(StrDeserializer::<Error>::new("bbr")).is_err());
    }
}
