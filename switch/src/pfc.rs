//! Priority flow control (IEEE 802.1Qbb): pausing the upstream neighbour, and being paused.
//!
//! **Sending.** When the MMU says an ingress (port, priority) crossed XOFF ([`crate::mmu`]),
//! the switch owes that port's neighbour a pause frame for that priority with `quanta` (default
//! 0xFFFF). It is a real 802.1Qbb frame ([`PfcPauseRepr`], 60 bytes + FCS on the wire), sent
//! ahead of any queued data the next moment the port is idle (it cannot preempt a frame being
//! serialized). While the counter stays over XON the pause is refreshed every half pause time
//! (`quanta x 512 bit times / 2` at the port's speed), so the neighbour never resumes by
//! timeout; when it falls below XON an XON (quanta 0) goes out — only if an XOFF was sent. One
//! frame carries every class owed at that moment.
//!
//! **Receiving.** A pause frame is consumed, never forwarded. For each class it enables on a
//! priority this switch runs lossless, the egress (port, priority) stops for `quanta x 512 bit
//! times` at the port's speed (a timer resumes it) or until an XON; a new pause reloads the
//! timer. Paused time is accounted per (port, priority). Classes this switch runs lossy (or all
//! classes with PFC off) are counted and ignored, as a port without PFC enabled does.
//!
//! **Headroom** is what arrives after XOFF, before the neighbour stops. With `R` the port
//! speed, `d` the cable's one-way latency, `M` the wire bytes of the largest frame, `P` those
//! of a pause frame and `t_r` the neighbour's response time, the default per (port, lossless
//! priority) is
//!
//! ```text
//! headroom = 2 R d + 3 M + P + R t_r        (bytes; R d in bytes = rate x latency / 8)
//! ```
//!
//! Derivation: the frame whose arrival crosses the threshold itself goes into headroom (1 M).
//! After it, the neighbour keeps starting frames until the pause reaches it: our port may be
//! busy with a frame (M), then the pause is serialized (P) and propagates (d), and the
//! neighbour reacts after t_r; frames started from `d` before the crossing (already on the
//! cable) until then add `R (2 d + t_r) + M + P`, plus the last one it started, which it finishes
//! (M). Wire bytes over-count the frame bytes the MMU stores, so the bound is conservative.
//! Emulated neighbours react at once (t_r = 0 by default).

use fabemu_fabric::units::{Bandwidth, ByteSize, Time, PS_PER_S};
use fabemu_fabric::wire::{pause_quanta_to_ps, MacAddr, PfcPauseRepr};
use serde::{Deserialize, Serialize};

use crate::priority::{PrioritySet, PRIORITIES};

/// The largest RoCEv2 frame with a 4096-byte MTU: payload + the largest header stack (74 B) +
/// ICRC (4 B).
pub const DEFAULT_MAX_FRAME: u64 = 4096 + 74 + 4;

/// PFC settings (the `pfc:` section of a switch's `buffer:`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PfcConfig {
    /// Run the `priorities` lossless: pause instead of drop. Off: every priority is lossy and
    /// received pause frames are ignored.
    pub enabled: bool,
    /// The lossless priorities (default `[3]`, where DSCP 26 lands).
    pub priorities: PrioritySet,
    /// Pause time put in XOFF frames, in quanta of 512 bit times (1..=65535; default 65535).
    pub quanta: u16,
    /// Headroom per (ingress port, lossless priority); absent: the formula in the module doc,
    /// per port from its speed and cable latency.
    pub headroom: Option<ByteSize>,
    /// XON once the shared use is this far below the threshold (and no headroom is in use);
    /// absent: 2 `max_frame`.
    pub xon_offset: Option<ByteSize>,
    /// The largest frame (for the headroom formula and the default XON offset).
    pub max_frame: ByteSize,
    /// The neighbour's reaction time to a pause (for the headroom formula; default 0: emulated
    /// actors react when the frame arrives).
    pub response_time: Time,
    /// An egress (port, priority) that holds frames and stays paused this long is reported as
    /// stalled (a PFC deadlock). Default 10 ms: 30 times the longest single pause at 100 Gb/s
    /// (65535 quanta = 336 us) and 3.7 times the time to drain a whole 32 MiB buffer at
    /// 100 Gb/s (2.7 ms), so congestion that still moves never trips it; a real deadlock never
    /// clears, so waiting longer costs only simulated time (a refresh frame per port every
    /// ~170 us).
    pub deadlock_timeout: Time,
}

impl Default for PfcConfig {
    fn default() -> Self {
        PfcConfig {
            enabled: false,
            priorities: PrioritySet::default(),
            quanta: u16::MAX,
            headroom: None,
            xon_offset: None,
            max_frame: ByteSize(DEFAULT_MAX_FRAME),
            response_time: Time::ZERO,
            deadlock_timeout: Time(10 * fabemu_fabric::units::PS_PER_MS),
        }
    }
}

impl PfcConfig {
    /// The lossless priorities as a bit mask (empty when PFC is off).
    pub fn lossless_mask(&self) -> u8 {
        if self.enabled {
            self.priorities.0
        } else {
            0
        }
    }
    /// The XON offset in bytes.
    pub fn xon_offset_bytes(&self) -> u64 {
        self.xon_offset
            .map_or(2 * self.max_frame.bytes(), |b| b.bytes())
    }
}

/// Bytes a link of `rate` carries in `t` (rounded up).
fn bytes_in(rate: Bandwidth, t: Time) -> u64 {
    let b = u128::from(rate.bps()) * u128::from(t.ps());
    u64::try_from(b.div_ceil(8 * u128::from(PS_PER_S))).unwrap_or(u64::MAX)
}

/// The default headroom (module doc): `2 R d + 3 M + P + R t_r` bytes, with `max_frame_wire`
/// and `pause_wire` the wire bytes (Ethernet overhead included) of the largest frame and of a
/// pause frame.
pub fn headroom_formula(
    rate: Bandwidth,
    latency: Time,
    max_frame_wire: u64,
    pause_wire: u64,
    response_time: Time,
) -> u64 {
    bytes_in(rate, latency)
        .saturating_mul(2)
        .saturating_add(max_frame_wire.saturating_mul(3))
        .saturating_add(pause_wire)
        .saturating_add(bytes_in(rate, response_time))
}

/// One port's PFC state, both directions.
#[derive(Clone, Debug)]
pub(crate) struct PortPfc {
    /// This port's MAC (source of the pause frames it sends).
    pub(crate) mac: MacAddr,
    /// The port's speed in bit/s (for quanta), 0 until `start`.
    pub(crate) rate_bps: u64,
    /// Classes whose ingress counter on this port is over XOFF.
    pub(crate) xoff: u8,
    /// Classes whose last frame sent said XOFF (so an XON is owed when they recover).
    pub(crate) announced: u8,
    /// When the armed refresh timer fires.
    pub(crate) refresh_at: Option<Time>,
    /// Per class, when the neighbour's pause ends unless refreshed.
    pub(crate) paused_until: [Time; PRIORITIES],
    /// Per class, when the current continuous pause began.
    pub(crate) paused_since: [Time; PRIORITIES],
}

impl PortPfc {
    pub(crate) fn new() -> Self {
        PortPfc {
            mac: [0; 6],
            rate_bps: 0,
            xoff: 0,
            announced: 0,
            refresh_at: None,
            paused_until: [Time::ZERO; PRIORITIES],
            paused_since: [Time::ZERO; PRIORITIES],
        }
    }

    /// How long `quanta` pause this port.
    pub(crate) fn pause_time(&self, quanta: u16) -> Time {
        Time(pause_quanta_to_ps(quanta, self.rate_bps))
    }

    /// The frame owed now for the classes `pending` (the caller then clears them), if any.
    pub(crate) fn take_frame(&mut self, pending: u8, quanta: u16) -> Option<PfcPauseRepr> {
        // An XON is owed only to a neighbour told XOFF.
        let classes = pending & (self.xoff | self.announced);
        if classes == 0 {
            return None;
        }
        let mut times = [0u16; PRIORITIES];
        for (c, t) in times.iter_mut().enumerate() {
            if classes & self.xoff & (1 << c) != 0 {
                *t = quanta.max(1);
            }
        }
        self.announced = (self.announced & !classes) | (self.xoff & classes);
        Some(PfcPauseRepr {
            src_mac: self.mac,
            class_enable: classes,
            quanta: times,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headroom_formula_closed_form() {
        // 100 Gb/s, 1 us cable: 12,500 bytes in flight each way; 4174-byte frames are 4198 on
        // the wire, a pause frame 84: 2 * 12500 + 3 * 4198 + 84 = 37,678 bytes.
        let h = headroom_formula(
            Bandwidth::from_gbps(100),
            Time::from_us(1),
            4198,
            84,
            Time::ZERO,
        );
        assert_eq!(h, 37_678);
        // A 500 ns response at 400 Gb/s adds 25,000 bytes; 2 m of cable (10 ns) 2 * 500.
        let h = headroom_formula(
            Bandwidth::from_gbps(400),
            Time::from_ns(10),
            4198,
            84,
            Time::from_ns(500),
        );
        assert_eq!(h, 1_000 + 12_594 + 84 + 25_000);
    }

    #[test]
    fn frames_owed() {
        let mut p = PortPfc::new();
        p.rate_bps = 100_000_000_000;
        assert_eq!(p.pause_time(0xFFFF), Time(65_535 * 5_120));
        // XON without a prior XOFF: nothing to say.
        assert_eq!(p.take_frame(1 << 3, 100), None);
        p.xoff = 1 << 3;
        let f = p.take_frame(1 << 3, 100).unwrap();
        assert_eq!((f.class_enable, f.quanta[3]), (0x08, 100));
        p.xoff = 0;
        let f = p.take_frame(1 << 3, 100).unwrap();
        assert_eq!((f.class_enable, f.quanta), (0x08, [0; 8]));
        assert_eq!(p.announced, 0);
    }
}
