//! One RC queue pair's transport state: segmentation, PSNs, acknowledgement, go-back-N.
//!
//! This is pure protocol logic. It decides *what* the next data packet is and how to react to
//! ACK/NAK/data; the NIC around it decides *when* (port idle, rate limiter) and builds the frame.
//!
//! PSNs are 24 bits on the wire; internally they are `u64` counters that never wrap, and wire
//! values are mapped back by their distance from the current window (a window is far below
//! 2^23 packets, so the mapping is unambiguous).
//!
//! Messages are RDMA WRITEs: FIRST (with RETH) / MIDDLE / LAST-with-immediate, or
//! ONLY-with-immediate for a single packet. The immediate carries the low 32 bits of the
//! message tag so the receiver can complete the right message; the last packet asks for an ACK.

use std::collections::VecDeque;
use std::num::NonZeroU64;

use bytes::{Bytes, BytesMut};

use crate::units::Time;
use crate::wire::opcode;

/// [`Qp`]'s `probe_psn` when no packet is being timed (PSNs never reach it).
const NO_PROBE: u64 = u64::MAX;

/// Mask of a 24-bit PSN.
pub(crate) const PSN_MASK: u64 = 0x00FF_FFFF;
const HALF_PSN_SPACE: u64 = 1 << 23;
/// Most PSNs a QP has unacknowledged at once: a quarter of the PSN space, so a wire PSN always
/// maps back to one packet (the receiver and the sender never disagree by half the space).
pub(crate) const MAX_IN_FLIGHT: u64 = 1 << 22;

/// A message posted for sending.
#[derive(Clone, Debug)]
pub(crate) struct SendMsg {
    pub(crate) tag: u64,
    pub(crate) len: u64,
    pub(crate) data: Option<Bytes>,
    pub(crate) first_psn: u64,
    pub(crate) npkts: u64,
}

/// What the next data packet carries.
#[derive(Clone, Debug)]
pub(crate) struct Segment {
    pub(crate) psn: u64,
    pub(crate) opcode: u8,
    pub(crate) ack_req: bool,
    /// RETH DMA length on FIRST/ONLY.
    pub(crate) dma_len: Option<u32>,
    /// Immediate data on LAST/ONLY.
    pub(crate) imm: Option<u32>,
    pub(crate) payload_len: u32,
    /// The payload bytes in data mode.
    pub(crate) data: Option<Bytes>,
    /// True when this PSN was sent before (a go-back-N retransmission).
    pub(crate) retransmission: bool,
    /// The message's size.
    pub(crate) msg_len: u64,
    /// Bytes of the message from this packet on.
    pub(crate) msg_remaining: u64,
}

/// What the receive side did with a data packet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum RxAction {
    /// Accepted in order; `ack` asks for an ACK of everything up to `psn`.
    Accepted {
        /// Whether to send an ACK now.
        ack: bool,
    },
    /// A gap: send a NAK (sequence error) naming the expected PSN, once per gap.
    Nak,
    /// A gap already NAKed: drop silently.
    DropOutOfOrder,
    /// A duplicate of something already received: re-ACK so the sender moves on.
    Duplicate,
}

/// A message fully received.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Received {
    pub(crate) imm: u32,
    /// Bytes that arrived.
    pub(crate) len: u64,
    /// Bytes the first packet's RETH announced.
    pub(crate) dma_len: u64,
    pub(crate) data: Option<Bytes>,
}

/// Send and receive state of one QP (one per peer host).
///
/// Laid out by who reads what, from a cache line's start (`repr(C, align(64))`): line 0 holds
/// what every send and every ACK reads (the sequence numbers, the rate limiter, the flags and
/// the header fields of the pair), line 1 the current message, the timed packet and the
/// window's size (every send), line 2 the window, the timer's state, the retry count and the
/// port (every ACK; a send only when nothing was outstanding), line 3 the receive side, then
/// what only a new message or a retransmission needs. With Rust's own layout the
/// fields a send reads were spread over five or six lines (4032 QPs on fabric64, ~1.3 MB).
#[derive(Debug)]
#[repr(C, align(64))]
pub(crate) struct Qp {
    // Line 0.
    /// Oldest unacknowledged PSN.
    snd_una: u64,
    /// Next PSN to transmit.
    snd_nxt: u64,
    /// One past the last PSN allocated to a posted message.
    alloc: u64,
    /// One past the highest PSN ever transmitted.
    snd_max: u64,
    /// Rate limiter: earliest time the next packet may start.
    pub(crate) next_send_time: Time,
    /// One past the last PSN of `msgs[0]` (`u64::MAX` when empty): ACKs compare against it
    /// without touching the queue.
    front_end: u64,
    /// The peer host.
    pub(crate) peer: u32,
    /// The number of the peer's QP of this pair, which this QP's packets carry as their
    /// destination QP.
    pub(crate) remote_qpn: u32,
    /// UDP source port (flow entropy for ECMP).
    pub(crate) udp_src_port: u16,
    /// DSCP of the QP's data packets (its traffic class, fixed when the QP is created).
    pub(crate) dscp: u8,
    /// Set when the QP exhausted its retries: it sends nothing more (RC's error state).
    pub(crate) failed: bool,
    /// Whether the QP sits in its port's round-robin list.
    pub(crate) active: bool,
    cur_valid: bool,
    /// Whether an RTO timer event is pending.
    pub(crate) rto_armed: bool,
    nak_outstanding: bool,
    // Line 1.
    /// Copy of `msgs[cursor]`'s bounds, so sending does not touch the message queue's memory
    /// for every packet (valid while `cur_valid`).
    cur: CurMsg,
    /// The PSN of the packet being timed ([`NO_PROBE`]: none) and when it was first sent
    /// (Karn: never a resent one). Two words rather than an `Option` of a pair (24 bytes), so
    /// that `cwnd` fits on this line.
    probe_psn: u64,
    probe_sent: Time,
    /// Packets that may be unacknowledged at once: `window`'s `cwnd`, or [`MAX_IN_FLIGHT`]
    /// without one. A copy on the line every send reads: [`Qp::has_data`] read `window` on
    /// line 2, which a send otherwise leaves alone (a cache miss per data frame sent on
    /// benches/fat_tree1024.yaml).
    cwnd: u64,
    // Line 2.
    /// Loss-recovery window (see [`Qp::on_loss`]): `None` until the QP first loses a packet,
    /// so a loss-free QP is never held back. Its `cwnd` is copied into [`Qp::cwnd`] whenever
    /// it changes.
    window: Option<Window>,
    /// Retransmission deadline while packets are outstanding.
    pub(crate) rto_deadline: Time,
    /// Smoothed round-trip time and its variation (RFC 6298), in ps; `srtt` 0: no sample yet.
    srtt: u64,
    rttvar: u64,
    /// State of the QP's own jitter generator (seeded, so runs stay reproducible).
    jitter: u64,
    /// Retransmission timeouts in a row without an acknowledgement making progress (every
    /// ACK clears it: on this line, which an ACK reads anyway, not on the receive side's).
    pub(crate) retries: u32,
    /// Egress port this QP's packets leave by (see [`Qp::port`]; a u32 to share this line).
    port: u32,
    // Line 3: the receive side (one line: a data frame received reads no other of the
    // receive side), then what a send needs only now and then.
    epsn: u64,
    since_ack: u32,
    /// Messages completed by the receive side (the AETH MSN).
    pub(crate) msn: u32,
    rx_msg: Option<RxMsg>,
    /// Index in `msgs` of the message containing `snd_nxt`.
    cursor: usize,
    msgs: VecDeque<SendMsg>,
}

/// The window a QP keeps after a loss: packets it may have unacknowledged, grown back per
/// acknowledged packet (slow start below `ssthresh`, one packet per window above it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Window {
    /// Packets that may be unacknowledged at once.
    pub(crate) cwnd: u64,
    /// Where slow start (doubling per round trip) gives way to additive increase; at least
    /// the restart window, so never zero, which makes `Option<Window>` 24 bytes, not 32.
    pub(crate) ssthresh: NonZeroU64,
    /// Packets acknowledged since the last additive increase.
    acked: u64,
}

/// What kind of loss signal the sender saw.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Loss {
    /// The retransmission timer fired: nothing came back, the path is presumed saturated.
    Timeout,
    /// The receiver reported a gap (NAK): packets after the lost one got through.
    Nak,
}

#[derive(Clone, Copy, Debug, Default)]
struct CurMsg {
    first: u64,
    end: u64,
    len: u64,
    tag: u64,
    has_data: bool,
}

#[derive(Debug)]
struct RxMsg {
    len: u64,
    got: u64,
    /// The bytes so far (data mode), boxed so that the receive side fits its line.
    buf: Option<Box<BytesMut>>,
}

/// Maps a 24-bit wire PSN to the internal counter nearest to `base` (forward or backward).
pub(crate) fn unwrap_psn(base: u64, wire: u32) -> (u64, bool) {
    let d = (wire as u64).wrapping_sub(base) & PSN_MASK;
    if d < HALF_PSN_SPACE {
        (base + d, true)
    } else {
        (base.saturating_sub(PSN_MASK + 1 - d), false)
    }
}

impl Qp {
    pub(crate) fn new(
        peer: u32,
        port: usize,
        udp_src_port: u16,
        dscp: u8,
        remote_qpn: u32,
        jitter_seed: u64,
    ) -> Qp {
        Qp {
            dscp,
            remote_qpn,
            srtt: 0,
            rttvar: 0,
            probe_psn: NO_PROBE,
            probe_sent: Time::ZERO,
            cwnd: MAX_IN_FLIGHT,
            jitter: jitter_seed,
            window: None,
            peer,
            port: u32::try_from(port).unwrap_or(u32::MAX),
            udp_src_port,
            msgs: VecDeque::new(),
            snd_una: 0,
            snd_nxt: 0,
            snd_max: 0,
            alloc: 0,
            cursor: 0,
            cur: CurMsg::default(),
            cur_valid: false,
            front_end: u64::MAX,
            next_send_time: Time::ZERO,
            rto_deadline: Time::NEVER,
            rto_armed: false,
            active: false,
            retries: 0,
            failed: false,
            epsn: 0,
            nak_outstanding: false,
            since_ack: 0,
            rx_msg: None,
            msn: 0,
        }
    }

    /// Queues a message of `len` bytes split into packets of at most `mtu` payload bytes.
    pub(crate) fn post(&mut self, tag: u64, len: u64, data: Option<Bytes>, mtu: u64) {
        let npkts = len.div_ceil(mtu).max(1);
        if self.msgs.is_empty() {
            self.front_end = self.alloc + npkts;
        }
        self.msgs.push_back(SendMsg {
            tag,
            len,
            data,
            first_psn: self.alloc,
            npkts,
        });
        self.alloc += npkts;
    }

    /// The egress port this QP's packets leave by.
    #[inline]
    pub(crate) fn port(&self) -> usize {
        self.port as usize
    }

    /// Moves the QP to egress port `port` (failover).
    pub(crate) fn set_port(&mut self, port: usize) {
        self.port = u32::try_from(port).unwrap_or(u32::MAX);
    }

    /// True when a data packet is waiting to be (re)transmitted.
    pub(crate) fn has_data(&self) -> bool {
        !self.failed && self.snd_nxt < self.alloc && self.snd_nxt - self.snd_una < self.cwnd
    }

    /// The loss-recovery window, if a loss ever engaged it.
    #[cfg(test)]
    pub(crate) fn window(&self) -> Option<Window> {
        self.window
    }

    /// A loss bounds what the QP puts on the wire from now on, as lossy-RoCE NICs do after a
    /// retransmission (ConnectX's slow restart and transmission window) and as TCP does
    /// (RFC 5681): `ssthresh` becomes half the packets that were in flight (at least
    /// `restart`); a timeout restarts from `restart` packets, a NAK continues from `ssthresh`.
    /// Called before the go-back rewinds `snd_nxt`.
    pub(crate) fn on_loss(&mut self, kind: Loss, restart: u64) {
        let restart = restart.max(1);
        let flight = self.snd_nxt.saturating_sub(self.snd_una);
        let current = self.window.map_or(flight, |w| w.cwnd.min(flight.max(1)));
        // `restart` >= 1: never zero (the fallback is unreachable).
        let ssthresh = NonZeroU64::new((current / 2).max(restart)).unwrap_or(NonZeroU64::MIN);
        let cwnd = match kind {
            Loss::Timeout => restart,
            Loss::Nak => ssthresh.get(),
        };
        self.window = Some(Window {
            cwnd,
            ssthresh,
            acked: 0,
        });
        self.cwnd = cwnd;
    }

    /// `n` packets newly acknowledged: the window grows by one per packet below `ssthresh`
    /// (doubling every round trip) and by one per window's worth above it.
    fn grow_window(&mut self, n: u64) {
        let Some(w) = self.window.as_mut() else {
            return;
        };
        let slow = n.min(w.ssthresh.get().saturating_sub(w.cwnd));
        w.cwnd += slow;
        w.acked += n - slow;
        while w.acked >= w.cwnd {
            w.acked -= w.cwnd;
            w.cwnd += 1;
        }
        w.cwnd = w.cwnd.min(MAX_IN_FLIGHT);
        self.cwnd = w.cwnd;
    }

    /// True when packets are in flight without acknowledgement.
    pub(crate) fn outstanding(&self) -> bool {
        self.snd_una < self.snd_max
    }

    /// True when nothing is posted, in flight or unacknowledged.
    #[cfg(test)]
    pub(crate) fn idle(&self) -> bool {
        self.msgs.is_empty()
    }

    /// Takes the next segment to transmit and advances `snd_nxt`.
    #[inline(always)]
    pub(crate) fn next_segment(&mut self, mtu: u64) -> Option<Segment> {
        if !self.has_data() {
            return None;
        }
        if !self.cur_valid || self.snd_nxt >= self.cur.end || self.snd_nxt < self.cur.first {
            while self.cursor < self.msgs.len() {
                let m = &self.msgs[self.cursor];
                if self.snd_nxt < m.first_psn + m.npkts {
                    break;
                }
                self.cursor += 1;
            }
            let m = self.msgs.get(self.cursor)?;
            self.cur = CurMsg {
                first: m.first_psn,
                end: m.first_psn + m.npkts,
                len: m.len,
                tag: m.tag,
                has_data: m.data.is_some(),
            };
            self.cur_valid = true;
        }
        let m = self.cur;
        let idx = self.snd_nxt - m.first;
        let offset = idx * mtu;
        let payload_len = (m.len - offset.min(m.len)).min(mtu);
        let first = idx == 0;
        let last = m.first + idx + 1 == m.end;
        let op = match (first, last) {
            (true, true) => opcode::WRITE_ONLY_IMM,
            (true, false) => opcode::WRITE_FIRST,
            (false, true) => opcode::WRITE_LAST_IMM,
            (false, false) => opcode::WRITE_MIDDLE,
        };
        let data = if m.has_data {
            self.msgs[self.cursor]
                .data
                .as_ref()
                .map(|d| d.slice(offset as usize..(offset + payload_len) as usize))
        } else {
            None
        };
        let seg = Segment {
            psn: self.snd_nxt,
            opcode: op,
            ack_req: last,
            dma_len: first.then_some(m.len as u32),
            imm: last.then_some(m.tag as u32),
            payload_len: payload_len as u32,
            data,
            retransmission: self.snd_nxt < self.snd_max,
            msg_len: m.len,
            msg_remaining: m.len - offset.min(m.len),
        };
        self.snd_nxt += 1;
        self.snd_max = self.snd_max.max(self.snd_nxt);
        Some(seg)
    }

    /// Handles a cumulative ACK of every PSN up to `wire_psn`; returns the completed sends'
    /// tags, oldest first.
    pub(crate) fn on_ack(&mut self, wire_psn: u32, done: &mut Vec<u64>) -> bool {
        let (acked, fwd) = unwrap_psn(self.snd_una, wire_psn);
        if !fwd || acked >= self.snd_max {
            return false;
        }
        self.advance_una(acked + 1, done);
        true
    }

    /// Handles a NAK (PSN sequence error) whose PSN is the receiver's expected PSN: everything
    /// before it arrived; go back and resend from it, with the window cut (see
    /// [`Qp::on_loss`]; `restart` is its floor). Returns the number of PSNs rewound.
    pub(crate) fn on_nak(
        &mut self,
        wire_psn: u32,
        done: &mut Vec<u64>,
        restart: u64,
    ) -> Option<u64> {
        let (expected, fwd) = unwrap_psn(self.snd_una, wire_psn);
        if !fwd || expected > self.snd_max {
            return None;
        }
        self.advance_una(expected, done);
        self.on_loss(Loss::Nak, restart);
        Some(self.go_back())
    }

    /// Retransmission timeout: resend everything unacknowledged, starting again from a
    /// window of `restart` packets. Returns PSNs rewound.
    pub(crate) fn on_timeout(&mut self, restart: u64) -> u64 {
        self.on_loss(Loss::Timeout, restart);
        self.go_back()
    }

    /// Oldest unacknowledged PSN.
    pub(crate) fn snd_una(&self) -> u64 {
        self.snd_una
    }

    /// Next PSN to transmit.
    pub(crate) fn snd_nxt(&self) -> u64 {
        self.snd_nxt
    }

    /// A first transmission of `psn` left at `now`: time it if no other packet is being timed.
    pub(crate) fn on_first_send(&mut self, psn: u64, now: Time) {
        if self.probe_psn == NO_PROBE {
            (self.probe_psn, self.probe_sent) = (psn, now);
        }
    }

    /// After an acknowledgement: if it covers the timed packet, fold the round trip into the
    /// estimate (RFC 6298: rttvar = 3/4 rttvar + 1/4 |srtt - r|, srtt = 7/8 srtt + 1/8 r).
    /// Returns the round trip measured, if any (congestion control's sample).
    pub(crate) fn on_acked(&mut self, now: Time) -> Option<Time> {
        let (psn, sent) = (self.probe_psn, self.probe_sent);
        if psn == NO_PROBE || self.snd_una <= psn {
            return None;
        }
        self.probe_psn = NO_PROBE;
        let r = now.ps().saturating_sub(sent.ps());
        if self.srtt == 0 {
            self.srtt = r.max(1);
            self.rttvar = r / 2;
        } else {
            self.rttvar = (3 * self.rttvar + self.srtt.abs_diff(r)) / 4;
            self.srtt = (7 * self.srtt + r) / 8;
        }
        Some(Time(r))
    }

    /// The retransmission timeout before backoff: `min` (the scenario's `rto`) until a round
    /// trip was measured, then srtt + 4 rttvar, never below `min`.
    pub(crate) fn base_rto(&self, min: Time) -> Time {
        if self.srtt == 0 {
            min
        } else {
            Time(
                min.ps()
                    .max(self.srtt.saturating_add(self.rttvar.saturating_mul(4))),
            )
        }
    }

    /// `t` stretched by a seeded random factor in [1, 1.5): QPs that lost packets together
    /// then retransmit at different instants instead of colliding again.
    pub(crate) fn jittered(&mut self, t: Time) -> Time {
        self.jitter = crate::mix::mix(self.jitter);
        let frac = self.jitter >> 32; // uniform in [0, 2^32)
        let extra = (u128::from(t.ps()) * u128::from(frac)) >> 33; // [0, t/2)
        Time(t.ps().saturating_add(extra as u64))
    }

    fn go_back(&mut self) -> u64 {
        // Karn: a round trip that includes a resend measures nothing.
        self.probe_psn = NO_PROBE;
        let rewound = self.snd_nxt.saturating_sub(self.snd_una);
        self.snd_nxt = self.snd_una;
        self.cursor = 0;
        self.cur_valid = false;
        rewound
    }

    /// Moves `snd_una` up to `new_una`, completing the messages it covers (into `done`).
    /// Inlined into the ACK's handling; the completions (about one ACK in a message's packets)
    /// out of line.
    #[inline(always)]
    fn advance_una(&mut self, new_una: u64, done: &mut Vec<u64>) {
        if new_una <= self.snd_una {
            return;
        }
        let newly = new_una - self.snd_una;
        self.snd_una = new_una;
        self.retries = 0;
        self.grow_window(newly);
        if self.snd_nxt < new_una {
            self.snd_nxt = new_una;
        }
        if self.front_end <= new_una {
            self.complete_messages(new_una, done);
        }
    }

    /// [`Qp::advance_una`]'s completions: the messages that end at or before `new_una`.
    #[inline(never)]
    fn complete_messages(&mut self, new_una: u64, done: &mut Vec<u64>) {
        while self.front_end <= new_una {
            let Some(m) = self.msgs.pop_front() else {
                break;
            };
            done.push(m.tag);
            // The cached cursor message keeps its bounds; only its index shifts.
            self.cursor = self.cursor.saturating_sub(1);
            self.front_end = self
                .msgs
                .front()
                .map_or(u64::MAX, |m| m.first_psn + m.npkts);
        }
    }

    /// The wire PSN to acknowledge: the last one received in order.
    pub(crate) fn ack_psn(&self) -> u32 {
        (self.epsn.wrapping_sub(1) & PSN_MASK) as u32
    }

    /// The wire PSN the receiver expects next (the NAK's PSN).
    pub(crate) fn expected_psn(&self) -> u32 {
        (self.epsn & PSN_MASK) as u32
    }

    /// Handles a data packet. On a completed message, returns it through `received`. Inlined
    /// into its one caller (`Nic::on_data_frame`): a call passed its nine arguments through
    /// the stack.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    pub(crate) fn on_data(
        &mut self,
        wire_psn: u32,
        op: u8,
        ack_req: bool,
        dma_len: Option<u32>,
        imm: Option<u32>,
        payload: Option<&Bytes>,
        payload_len: usize,
        ack_every: u32,
        received: &mut Option<Received>,
    ) -> RxAction {
        let (psn, fwd) = unwrap_psn(self.epsn, wire_psn);
        if !fwd {
            return RxAction::Duplicate;
        }
        if psn != self.epsn {
            if self.nak_outstanding {
                return RxAction::DropOutOfOrder;
            }
            self.nak_outstanding = true;
            return RxAction::Nak;
        }
        self.epsn += 1;
        self.nak_outstanding = false;
        let first = matches!(
            op,
            opcode::WRITE_FIRST | opcode::WRITE_ONLY | opcode::WRITE_ONLY_IMM
        );
        let last = matches!(
            op,
            opcode::WRITE_LAST
                | opcode::WRITE_LAST_IMM
                | opcode::WRITE_ONLY
                | opcode::WRITE_ONLY_IMM
        );
        if first {
            let len = dma_len.unwrap_or(0) as u64;
            self.rx_msg = Some(RxMsg {
                len,
                got: 0,
                buf: payload.map(|_| Box::new(BytesMut::with_capacity(len as usize))),
            });
        }
        if let Some(m) = self.rx_msg.as_mut() {
            m.got += payload_len as u64;
            if let (Some(buf), Some(p)) = (m.buf.as_mut(), payload) {
                buf.extend_from_slice(p);
            }
        }
        if last {
            if let Some(m) = self.rx_msg.take() {
                self.msn = self.msn.wrapping_add(1);
                *received = Some(Received {
                    imm: imm.unwrap_or(0),
                    len: m.got,
                    dma_len: m.len,
                    data: m.buf.map(|b| b.freeze()),
                });
            }
        }
        self.since_ack += 1;
        let ack = ack_req || self.since_ack >= ack_every.max(1);
        if ack {
            self.since_ack = 0;
        }
        RxAction::Accepted { ack }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn send_state_fills_the_first_lines() {
        use std::mem::offset_of;
        assert_eq!(std::mem::align_of::<Qp>(), 64);
        assert_eq!(offset_of!(Qp, cur), 64);
        assert_eq!(offset_of!(Qp, cwnd), 120);
        assert_eq!(offset_of!(Qp, window), 128);
        // What an ACK reads and writes of lines 2 and 3 stays on line 2; the receive side on
        // line 3.
        assert!(offset_of!(Qp, port) < 192 && offset_of!(Qp, retries) < 192);
        assert!(offset_of!(Qp, rx_msg) + std::mem::size_of::<Option<RxMsg>>() <= 256);
        assert_eq!(offset_of!(Qp, epsn), 192);
    }

    fn drain(qp: &mut Qp, mtu: u64) -> Vec<Segment> {
        std::iter::from_fn(|| qp.next_segment(mtu)).collect()
    }

    #[test]
    fn segments_a_message() {
        let mut qp = Qp::new(1, 0, 1, 26, 0x100, 0);
        qp.post(7, 10_000, None, 4096);
        let segs = drain(&mut qp, 4096);
        let ops: Vec<u8> = segs.iter().map(|s| s.opcode).collect();
        assert_eq!(
            ops,
            vec![
                opcode::WRITE_FIRST,
                opcode::WRITE_MIDDLE,
                opcode::WRITE_LAST_IMM
            ]
        );
        let lens: Vec<u32> = segs.iter().map(|s| s.payload_len).collect();
        assert_eq!(lens, vec![4096, 4096, 1808]);
        assert_eq!(segs[0].dma_len, Some(10_000));
        assert_eq!(segs[2].imm, Some(7));
        assert!(segs[2].ack_req && !segs[0].ack_req);
    }

    #[test]
    fn zero_length_message_is_one_packet() {
        let mut qp = Qp::new(1, 0, 1, 26, 0x100, 0);
        qp.post(1, 0, None, 1024);
        let segs = drain(&mut qp, 1024);
        assert_eq!(segs.len(), 1);
        assert_eq!(segs[0].opcode, opcode::WRITE_ONLY_IMM);
    }

    #[test]
    fn go_back_n_on_nak() {
        let mut qp = Qp::new(1, 0, 1, 26, 0x100, 0);
        qp.post(1, 5 * 100, None, 100);
        assert_eq!(drain(&mut qp, 100).len(), 5);
        let mut done = vec![];
        // Receiver got PSN 0 and 1 and expects 2 (a window floor of 4 lets all three go again).
        assert_eq!(qp.on_nak(2, &mut done, 4), Some(3));
        let again = drain(&mut qp, 100);
        assert_eq!(
            again.iter().map(|s| s.psn).collect::<Vec<_>>(),
            vec![2, 3, 4]
        );
        assert!(again.iter().all(|s| s.retransmission));
        assert!(qp.on_ack(4, &mut done));
        assert_eq!(done, vec![1]);
        assert!(qp.idle());
    }

    #[test]
    fn receiver_naks_once_per_gap_and_reacks_duplicates() {
        let mut qp = Qp::new(1, 0, 1, 26, 0x100, 0);
        let mut rx = None;
        let mut data = |qp: &mut Qp, psn: u32, op: u8| {
            qp.on_data(psn, op, false, Some(300), Some(9), None, 100, 100, &mut rx)
        };
        assert_eq!(
            data(&mut qp, 0, opcode::WRITE_FIRST),
            RxAction::Accepted { ack: false }
        );
        assert_eq!(data(&mut qp, 2, opcode::WRITE_LAST_IMM), RxAction::Nak);
        assert_eq!(
            data(&mut qp, 2, opcode::WRITE_LAST_IMM),
            RxAction::DropOutOfOrder
        );
        assert_eq!(data(&mut qp, 0, opcode::WRITE_FIRST), RxAction::Duplicate);
        assert_eq!(qp.expected_psn(), 1);
        assert_eq!(qp.ack_psn(), 0);
    }

    #[test]
    fn psn_unwraps_across_24_bits() {
        assert_eq!(unwrap_psn(PSN_MASK, 0), (PSN_MASK + 1, true));
        assert_eq!(unwrap_psn(PSN_MASK + 5, PSN_MASK as u32), (PSN_MASK, false));
        assert_eq!(unwrap_psn(10, 12), (12, true));
    }

    #[test]
    fn rto_follows_measured_round_trips_and_never_goes_below_the_minimum() {
        let mut qp = Qp::new(1, 0, 1, 26, 0x100, 7);
        let min = Time::from_us(10);
        assert_eq!(qp.base_rto(min), min, "no sample yet");
        qp.post(0, 3 * 4096, None, 4096);
        for _ in 0..3 {
            assert!(qp.next_segment(4096).is_some());
        }
        // Time PSN 0, sent at 0, acknowledged after 40 us: srtt 40, rttvar 20 -> 120 us.
        qp.on_first_send(0, Time::ZERO);
        let mut done = Vec::new();
        assert!(qp.on_ack(0, &mut done));
        qp.on_acked(Time::from_us(40));
        assert_eq!(qp.base_rto(min), Time::from_us(40 + 4 * 20));
        // A second sample of 40 us: rttvar = 3/4 20 + 1/4 0 = 15, srtt stays 40 -> 100 us.
        qp.on_first_send(1, Time::from_us(40));
        assert!(qp.on_ack(1, &mut done));
        qp.on_acked(Time::from_us(80));
        assert_eq!(qp.base_rto(min), Time::from_us(100));
        // Karn: after a go-back, the packet in flight is not timed.
        qp.on_first_send(2, Time::from_us(80));
        qp.on_timeout(1);
        assert!(qp.next_segment(4096).is_some());
        assert!(qp.on_ack(2, &mut done));
        qp.on_acked(Time::from_us(500));
        assert_eq!(qp.base_rto(min), Time::from_us(100));
        // A tiny RTT never takes the timeout below the configured minimum.
        let mut fast = Qp::new(1, 0, 1, 26, 0x100, 7);
        fast.post(0, 4096, None, 4096);
        assert!(fast.next_segment(4096).is_some());
        fast.on_first_send(0, Time::ZERO);
        assert!(fast.on_ack(0, &mut done));
        fast.on_acked(Time::from_ns(100));
        assert_eq!(fast.base_rto(min), min);
    }

    #[test]
    fn a_loss_engages_a_window_that_grows_back() {
        let mut qp = Qp::new(1, 0, 1, 26, 0x100, 0);
        qp.post(1, 64 * 100, None, 100);
        // Loss-free: no window, all 64 packets go at once.
        assert_eq!(drain(&mut qp, 100).len(), 64);
        assert_eq!(qp.window(), None);
        let mut done = vec![];
        // 16 packets acknowledged, 48 in flight; a timeout: ssthresh 24, restart from 1.
        assert!(qp.on_ack(15, &mut done));
        qp.on_timeout(1);
        let w = qp.window().unwrap();
        assert_eq!((w.cwnd, w.ssthresh.get()), (1, 24));
        assert_eq!(drain(&mut qp, 100).len(), 1, "one packet after a timeout");
        // Its ACK grows the window to 2 (slow start): two more go.
        assert!(qp.on_ack(16, &mut done));
        assert_eq!(drain(&mut qp, 100).len(), 2);
        assert!(qp.on_ack(18, &mut done));
        assert_eq!(qp.window().unwrap().cwnd, 4);
        // A NAK for the first of 4 in flight halves the window (ssthresh 2) and continues
        // from there instead of restarting.
        assert_eq!(drain(&mut qp, 100).len(), 4);
        assert!(qp.on_nak(19, &mut done, 1).is_some());
        let w = qp.window().unwrap();
        assert_eq!((w.cwnd, w.ssthresh.get()), (2, 2));
        // At ssthresh: one packet more per window's worth acknowledged.
        assert_eq!(drain(&mut qp, 100).len(), 2);
        assert!(qp.on_ack(20, &mut done));
        assert_eq!(qp.window().unwrap().cwnd, 3);
    }

    #[test]
    fn jitter_stays_in_range_differs_per_qp_and_is_reproducible() {
        let t = Time::from_us(100);
        let draws = |seed: u64| -> Vec<Time> {
            let mut qp = Qp::new(1, 0, 1, 26, 0x100, seed);
            (0..1000).map(|_| qp.jittered(t)).collect()
        };
        let a = draws(1);
        assert_eq!(a, draws(1));
        assert_ne!(a, draws(2));
        assert!(a.iter().all(|&x| x >= t && x < Time::from_us(150)));
        // Spread over the whole range (1000 draws, uniform: both quarters are hit).
        assert!(a.iter().any(|&x| x < Time::from_us(112)));
        assert!(a.iter().any(|&x| x > Time::from_us(138)));
    }
}
