//! PFC (IEEE 802.1Qbb) at the NIC: honouring pause frames from the link partner, and
//! optionally generating them when the host cannot take data as fast as the wire brings it.
//!
//! **Honouring** (`PortPause`): a pause frame stops transmission of the enabled priority
//! classes on the port it arrived on for `quanta x 512` bit times at the port's speed; a later
//! frame for the same class replaces the timer (a shorter one shortens the pause), and quanta 0
//! (XON) resumes at once. The NIC consults `PortPause::is_paused` before sending a frame of
//! that class (priority = DSCP >> 3); MAC-control frames themselves are never paused. Paused time
//! is accounted as each frame changes the schedule, so the total is exact as soon as every pause
//! has run out (a run cut off by `until` mid-pause counts the pause to its scheduled end).
//!
//! **Generating** ([`NicPfcConfig`], `RxBuffer`): the host side (PCIe, host memory) is modelled
//! as a receive buffer drained at `rx_rate`. Data frames for this host enter it; the transport
//! sees a frame (acknowledges it, delivers a message's completion) only when it has been drained.
//! Above `xoff` bytes the NIC sends an XOFF of the frame's priority for `pause_quanta` on the
//! port the frame came from (refreshed each half pause while still above `xon`); once the
//! buffer is below `xon` it sends XON. A frame that does not fit is dropped and counted.

use std::collections::VecDeque;

use super::*;

use serde::{Deserialize, Serialize};

use crate::packet::Packet;
use crate::units::{Bandwidth, ByteSize, Time};

/// Priority classes of 802.1Qbb.
pub(crate) const CLASSES: usize = 8;

/// PFC generation at the NIC (the scenario's `nic: {pfc: {...}}`; absent = the NIC never sends
/// pause frames and hands received data to the host at once).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct NicPfcConfig {
    /// Rate at which the host takes received data out of the NIC (PCIe / memory bandwidth).
    pub rx_rate: Bandwidth,
    /// The NIC's receive buffer; a data frame that does not fit is dropped.
    pub rx_buffer: ByteSize,
    /// Send XOFF when the buffer holds more than this.
    pub xoff: ByteSize,
    /// Send XON when the buffer holds less than this (after an XOFF).
    pub xon: ByteSize,
    /// Pause time of each XOFF, in quanta of 512 bit times.
    pub pause_quanta: u16,
}

impl Default for NicPfcConfig {
    fn default() -> Self {
        NicPfcConfig {
            rx_rate: Bandwidth::from_gbps(100),
            rx_buffer: ByteSize(1 << 20),
            xoff: ByteSize(512 << 10),
            xon: ByteSize(256 << 10),
            pause_quanta: 0xFFFF,
        }
    }
}

/// A PFC generation setting out of range.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NicPfcConfigError {
    /// Thresholds must satisfy xon <= xoff <= rx_buffer.
    #[error("nic pfc needs xon ({xon}) <= xoff ({xoff}) <= rx_buffer ({buffer})")]
    BadThresholds {
        /// XON threshold.
        xon: ByteSize,
        /// XOFF threshold.
        xoff: ByteSize,
        /// Buffer size.
        buffer: ByteSize,
    },
    /// rx_rate or pause_quanta is zero.
    #[error("nic pfc {0} must be greater than zero")]
    Zero(&'static str),
}

impl NicPfcConfig {
    /// Checks the thresholds and rates.
    pub fn validate(&self) -> Result<(), NicPfcConfigError> {
        if !(self.xon <= self.xoff && self.xoff <= self.rx_buffer) {
            return Err(NicPfcConfigError::BadThresholds {
                xon: self.xon,
                xoff: self.xoff,
                buffer: self.rx_buffer,
            });
        }
        if self.rx_rate.bps() == 0 {
            return Err(NicPfcConfigError::Zero("rx_rate"));
        }
        if self.pause_quanta == 0 {
            return Err(NicPfcConfigError::Zero("pause_quanta"));
        }
        Ok(())
    }
}

/// Pause state of one port's transmit side: until when each class is stopped.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct PortPause {
    /// The latest of `until`: [`PortPause::any_paused`] compares it alone (the NIC asks on
    /// every frame it schedules; pauses are rare, so the array's line stays untouched).
    latest: Time,
    until: [Time; CLASSES],
}

impl PortPause {
    /// True when `class` may not transmit at `now`.
    #[inline]
    pub(crate) fn is_paused(&self, class: u8, now: Time) -> bool {
        self.until[usize::from(class & 7)] > now
    }

    /// True when any class is paused at `now` (the fast path skips per-frame checks otherwise).
    #[inline]
    pub(crate) fn any_paused(&self, now: Time) -> bool {
        self.latest > now
    }

    /// Applies a pause timer of `dur` (zero = XON) to `class` at `now`. Returns the change of the
    /// total scheduled pause time, as (added, removed) picoseconds.
    pub(crate) fn apply(&mut self, class: u8, dur: Time, now: Time) -> (u64, u64) {
        let slot = &mut self.until[usize::from(class & 7)];
        let old = *slot;
        let new = now + dur;
        *slot = new;
        self.latest = self.until.iter().copied().fold(Time::ZERO, Time::max);
        if old <= now {
            (dur.ps(), 0)
        } else if new >= old {
            (new.ps() - old.ps(), 0)
        } else {
            (0, old.ps() - new.ps())
        }
    }
}

/// The NIC's receive buffer toward the host, drained at `rx_rate`.
#[derive(Debug, Default)]
pub(crate) struct RxBuffer {
    pub(crate) frames: VecDeque<Packet>,
    pub(crate) bytes: u64,
    /// Per port and class, when the last XOFF went out (while it is in force).
    pub(crate) xoff_sent: Vec<[Option<Time>; CLASSES]>,
    /// Whether a drain timer is pending for the head frame.
    pub(crate) draining: bool,
}

// The NIC side of PFC: honouring pause frames and generating them from the receive buffer.
impl super::Nic {
    /// A PFC frame arrived on `port`: pause (or resume) the classes it enables.
    pub(super) fn on_pause(&mut self, port: usize, pkt: &Packet, ctx: &mut impl Context) {
        let Ok(repr) = PfcPauseRepr::parse(pkt.header()) else {
            self.stats.dropped_invalid += 1;
            return;
        };
        let Some(bps) = ctx.channel(port).map(|c| c.rate.bandwidth().bps()) else {
            return;
        };
        let now = ctx.now();
        self.end_data_only();
        let Some(np) = self.ports.get_mut(port) else {
            return;
        };
        let mut resume = now;
        for class in 0..CLASSES as u8 {
            if repr.class_enable & (1 << class) == 0 {
                continue;
            }
            let quanta = repr.quanta[usize::from(class)];
            let dur = Time(wire::pause_quanta_to_ps(quanta, bps));
            let (added, removed) = np.pause.apply(class, dur, now);
            let st = &mut self.stats;
            st.paused_time_ps = st
                .paused_time_ps
                .saturating_add(added)
                .saturating_sub(removed);
            resume = resume.max(now + dur);
        }
        if resume > now && resume != Time::NEVER {
            ctx.set_timer(resume, HostTimer::Resume(port).token());
        }
        // An XON (or a shortened pause) may let frames go at once.
        self.pump(port, ctx);
    }

    /// Queues a PFC frame of this NIC on `port`, ahead of everything else.
    pub(super) fn send_pfc(&mut self, port: usize, repr: PfcPauseRepr, ctx: &mut impl Context) {
        let Ok(mut pkt) = Packet::with_header_len(wire::PFC_FRAME_LEN, Payload::Timing(0)) else {
            return;
        };
        if repr.emit(pkt.header_mut()).is_err() {
            return;
        }
        pkt.meta.created_at = ctx.now();
        self.end_data_only();
        let Some(np) = self.ports.get_mut(port) else {
            return;
        };
        np.mac_control.get_or_insert_default().push_back(pkt);
        self.stats.pause_frames_sent += 1;
        if repr.quanta.iter().all(|&q| q == 0) {
            self.stats.xon_frames_sent += 1;
        }
        self.pump(port, ctx);
    }

    /// A data frame for this host enters the receive buffer (PFC generation on).
    pub(super) fn rx_enqueue(
        &mut self,
        cfg: NicPfcConfig,
        port: usize,
        pkt: Packet,
        ctx: &mut impl Context,
    ) {
        let len = pkt.frame_len() as u64;
        if self.rx.bytes + len > cfg.rx_buffer.bytes() {
            self.stats.rx_buffer_dropped += 1;
            return;
        }
        let class = frame_class(&pkt);
        self.rx.bytes += len;
        self.rx.frames.push_back(pkt);
        if !self.rx.draining {
            self.rx.draining = true;
            let at = ctx.now() + cfg.rx_rate.serialization_time(len);
            ctx.set_timer(at, HostTimer::Drain.token());
        }
        if self.rx.bytes > cfg.xoff.bytes() {
            self.xoff(cfg, port, class, ctx);
        }
    }

    /// Sends an XOFF for `class` on `port` unless one is in force and not yet half over.
    pub(super) fn xoff(
        &mut self,
        cfg: NicPfcConfig,
        port: usize,
        class: u8,
        ctx: &mut impl Context,
    ) {
        let now = ctx.now();
        let bps = ctx.channel(port).map_or(0, |c| c.rate.bandwidth().bps());
        let half = Time(wire::pause_quanta_to_ps(cfg.pause_quanta, bps) / 2);
        let Some(slot) = self
            .rx
            .xoff_sent
            .get_mut(port)
            .and_then(|p| p.get_mut(usize::from(class & 7)))
        else {
            return;
        };
        if slot.is_some_and(|t| now < t + half) {
            return;
        }
        *slot = Some(now);
        let repr = PfcPauseRepr::xoff(self.addr.mac, class, cfg.pause_quanta);
        self.send_pfc(port, repr, ctx);
    }

    /// The receive buffer's head frame reached the host: hand it to the transport, start the
    /// next one, and send XON (or refresh XOFF) by the new fill level.
    pub(super) fn on_drain(&mut self, ctx: &mut impl Context) {
        let Some(cfg) = self.cfg.pfc else {
            return;
        };
        self.rx.draining = false;
        let Some(head) = self.rx.frames.pop_front() else {
            return;
        };
        self.rx.bytes = self.rx.bytes.saturating_sub(head.frame_len() as u64);
        if let Some(next) = self.rx.frames.front() {
            self.rx.draining = true;
            let len = next.frame_len() as u64;
            ctx.set_timer(
                ctx.now() + cfg.rx_rate.serialization_time(len),
                HostTimer::Drain.token(),
            );
        }
        let below_xon = self.rx.bytes < cfg.xon.bytes();
        for port in 0..self.rx.xoff_sent.len() {
            for class in 0..CLASSES as u8 {
                if self.rx.xoff_sent[port][usize::from(class)].is_none() {
                    continue;
                }
                if below_xon {
                    self.rx.xoff_sent[port][usize::from(class)] = None;
                    let repr = PfcPauseRepr::xon(self.addr.mac, class);
                    self.send_pfc(port, repr, ctx);
                } else {
                    // Still above XON: keep the partner paused.
                    self.xoff(cfg, port, class, ctx);
                }
            }
        }
        let Ok(repr) = RoceRepr::parse(head.header()) else {
            self.stats.dropped_invalid += 1;
            return;
        };
        let Some(src) = self.dir.index_of(repr.src_ip) else {
            self.stats.dropped_invalid += 1;
            return;
        };
        self.on_data_frame(src, &RoceRx::from(&repr), receive::Arrived::of(&head), ctx);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pause_time_accounts_extensions_shortenings_and_xon() {
        let mut p = PortPause::default();
        let us = Time::from_us;
        assert_eq!(p.apply(3, us(10), us(0)), (10_000_000, 0));
        assert!(p.is_paused(3, us(9)) && !p.is_paused(3, us(10)) && !p.is_paused(2, us(1)));
        // Refreshed at 5 us for 10 us more: until 15, +5 us.
        assert_eq!(p.apply(3, us(10), us(5)), (5_000_000, 0));
        // Replaced at 6 us by 2 us: until 8, -7 us.
        assert_eq!(p.apply(3, us(2), us(6)), (0, 7_000_000));
        // XON at 7 us: -1 us.
        assert_eq!(p.apply(3, Time::ZERO, us(7)), (0, 1_000_000));
        assert!(!p.any_paused(us(7)));
        // Total: 10 + 5 - 7 - 1 = 7 us = from 0 to 7 us.
    }

    /// `any_paused` (which reads the latest end only) says what a look at every class says,
    /// as pauses of several classes start, end, are shortened and are lifted by XON.
    #[test]
    fn any_paused_agrees_with_every_class() {
        let us = Time::from_us;
        let mut p = PortPause::default();
        let steps = [
            (1u8, 10u64, 0u64),
            (5, 3, 1),
            (1, 1, 2),
            (5, 0, 2),
            (7, 20, 3),
            (7, 0, 4),
            (0, 2, 30),
        ];
        for (class, dur, at) in steps {
            p.apply(class, us(dur), us(at));
            for t in 0..40 {
                let any = (0..CLASSES as u8).any(|c| p.is_paused(c, us(t)));
                assert_eq!(
                    p.any_paused(us(t)),
                    any,
                    "after {class}/{dur}/{at}, at {t} us"
                );
            }
        }
    }

    #[test]
    fn config_validation() {
        assert!(NicPfcConfig::default().validate().is_ok());
        let bad = NicPfcConfig {
            xon: ByteSize(2),
            xoff: ByteSize(1),
            ..NicPfcConfig::default()
        };
        assert!(bad.validate().is_err());
    }
}
