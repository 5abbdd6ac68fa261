//! Faults on the wire: what happens to a frame a port transmits while a fault is active.
//!
//! A fault is a rule on one direction of a link (one transmitting port): while its time
//! window is active, the direction is down (every frame lost), drops frames at random
//! (`loss`), corrupts them with bit errors (`ber`), or runs at a lower bandwidth. A failed
//! node is every direction into and out of it being down. The engine applies the rules when a
//! frame starts transmission (`now` is the frame's first bit), so a frame is judged by the
//! state of the wire when it was put on it.
//!
//! Random draws come from one generator per transmitting port, seeded from the run's seed and
//! the port, and advanced once per frame the port sends while a random rule is active: the
//! frames a port sends are the same for any thread count, so the losses are too.
//!
//! A frame hit by bit errors really carries flipped bits: the engine flips one seeded bit of it
//! — in the payload's bytes when it has them (data mode; the sender's buffer is copied, never
//! written), else in the header — counts it as corrupted on the link direction that damaged
//! it, marks it [`Packet::is_corrupted`] and delivers it. One bit, because at the error rates of
//! real links (1e-12 .. 1e-6 over a few thousand bytes) a frame with an error almost always has
//! exactly one. The receivers decide: a switch discards it on its FCS check (the flag: the FCS
//! its MAC computes over the damaged bytes differs from the one sent; the simulator does not
//! carry FCS bytes, and computing a CRC32 per frame would cost every run); a NIC verifies, in
//! data mode, the RoCE ICRC of frames with payload addressed to it over their real bytes and
//! discards a mismatch, and discards every other damaged frame on the FCS. So corrupted data is
//! never accepted, and the ICRC check is what proves it for payload bytes.

use bytes::Bytes;

use crate::link::Rate;
use crate::mix::mix;
use crate::packet::{Packet, Payload};
use crate::units::Time;

/// When a fault is active: from `from` until `until` (exclusive; `Time::NEVER`: for good),
/// repeated every `period` when given (a flapping link: down for `until - from` of every
/// `period`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FaultWindow {
    /// Start of the (first) active stretch.
    pub from: Time,
    /// End of the (first) active stretch.
    pub until: Time,
    /// Repetition period, if the fault flaps.
    pub period: Option<Time>,
}

impl FaultWindow {
    /// Active from time zero for good (a fault without `from`/`until`).
    pub const ALWAYS: FaultWindow = FaultWindow {
        from: Time::ZERO,
        until: Time::NEVER,
        period: None,
    };

    /// True when the fault is active at `t`.
    pub fn active(&self, t: Time) -> bool {
        if t < self.from {
            return false;
        }
        let since = t.ps() - self.from.ps();
        let len = self.until.ps().saturating_sub(self.from.ps());
        match self.period {
            Some(p) if p.ps() > 0 && self.until != Time::NEVER => since % p.ps() < len,
            _ => t < self.until,
        }
    }

    /// The instants at which the fault's state changes, up to `horizon`, in order:
    /// (time, active after it).
    pub fn changes(&self, horizon: Time) -> Vec<(Time, bool)> {
        let mut out = Vec::new();
        let len = self.until.ps().saturating_sub(self.from.ps());
        let mut start = self.from.ps();
        loop {
            if start > horizon.ps() {
                break;
            }
            out.push((Time(start), true));
            if self.until == Time::NEVER {
                break;
            }
            let end = start.saturating_add(len);
            if end > horizon.ps() {
                break;
            }
            out.push((Time(end), false));
            match self.period {
                Some(p) if p.ps() > len => start = start.saturating_add(p.ps()),
                _ => break,
            }
        }
        out
    }
}

/// What a fault does to a direction while active.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum FaultKind {
    /// Every frame is lost (a failed link or node).
    Down,
    /// Each frame is lost with this probability, independently.
    Loss(f64),
    /// Each bit is flipped with this probability: a frame of `b` bits is corrupted with
    /// probability 1 - (1 - ber)^b.
    Ber(f64),
    /// The direction runs at this rate instead of its own.
    Bandwidth(Rate),
}

/// One fault rule on one transmitting port.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PortFault {
    /// The scenario's fault entry it comes from (its counters are summed per entry).
    pub entry: u32,
    /// When it is active.
    pub window: FaultWindow,
    /// What it does.
    pub kind: FaultKind,
}

/// Every fault rule of a run: which port (actor, port) each applies to.
#[derive(Clone, Debug, Default)]
pub struct FaultPlan {
    /// (actor, port, rule).
    pub rules: Vec<(u32, usize, PortFault)>,
    /// Number of scenario entries (the length of [`FaultCounts`] lists).
    pub entries: usize,
    /// Seeds the per-port generators.
    pub seed: u64,
}

/// What the faults of one scenario entry did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FaultCounts {
    /// Frames lost: sent into a down direction or dropped by random loss.
    pub lost: u64,
    /// Frames corrupted by bit errors (and discarded by the receiver's frame check).
    pub corrupted: u64,
}

/// A queue pair that lost a frame to a fault, for measuring the fault's recovery: the QP on
/// host `owner` toward host `peer` in traffic class `class` (for a lost data frame its sender,
/// for a lost ACK or NAK the data sender it was meant for), and when it last lost one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FaultHit {
    /// The fault entry.
    pub entry: u32,
    /// Address of the host whose QP must recover.
    pub owner: std::net::Ipv4Addr,
    /// Address of its peer.
    pub peer: std::net::Ipv4Addr,
    /// The QP pair's class (from the QP number).
    pub class: u32,
    /// The last frame of that QP the fault lost or corrupted (its first bit's time).
    pub at: Time,
}

/// What becomes of one frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fate {
    Deliver,
    Lost,
    Corrupted,
}

/// The fault state of one transmitting port.
#[derive(Clone, Debug)]
pub(crate) struct PortFaults {
    rules: Vec<PortFault>,
    rng: u64,
    /// Per rule: frames it lost and corrupted.
    pub(crate) counts: Vec<FaultCounts>,
    /// The rule that decided the last frame's fate, when it was not `Deliver`.
    last_rule: usize,
    /// Per (entry, owner, peer, class): the last time a RoCE frame of that QP pair was lost.
    pub(crate) hits:
        std::collections::BTreeMap<(u32, std::net::Ipv4Addr, std::net::Ipv4Addr, u32), Time>,
}

impl PortFaults {
    pub(crate) fn new(rules: Vec<PortFault>, seed: u64, actor: u32, port: usize) -> PortFaults {
        let counts = vec![FaultCounts::default(); rules.len()];
        PortFaults {
            rules,
            rng: mix(seed ^ mix(u64::from(actor) << 20 ^ port as u64 ^ 0xFA17)),
            counts,
            last_rule: 0,
            hits: std::collections::BTreeMap::new(),
        }
    }

    /// Per rule, its entry and counts.
    pub(crate) fn entry_counts(&self) -> impl Iterator<Item = (u32, FaultCounts)> + '_ {
        self.rules
            .iter()
            .map(|r| r.entry)
            .zip(self.counts.iter().copied())
    }

    fn draw(&mut self) -> f64 {
        self.rng = mix(self.rng);
        (self.rng >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Notes which QP pair lost `pkt` (not delivered, or corrupted) at `now`: measurement only,
    /// called on the loss path. Frames that are not RoCE (PFC) are not noted.
    pub(crate) fn note_hit(&mut self, pkt: &Packet, now: Time) {
        use crate::wire;
        let h = pkt.header();
        let (Some(src), Some(dst), Some(op), Some(qpn)) = (
            wire::ipv4_src(h),
            wire::ipv4_dst(h),
            wire::bth_opcode(h),
            wire::RoceRepr::parse(h).ok().map(|r| r.bth.dest_qp),
        ) else {
            return;
        };
        let Some(rule) = self.rules.get(self.last_rule) else {
            return;
        };
        // A data frame's loss is its sender's to recover; an ACK's or NAK's (or a CNP's) the
        // data sender's it was meant for.
        let (owner, peer) = if wire::opcode::is_write(op) {
            (src, dst)
        } else {
            (dst, src)
        };
        let class = crate::host::qpn_class(qpn);
        self.hits
            .insert((rule.entry, owner, peer, u32::from(class)), now);
    }

    /// Flips one seeded bit of `pkt` (of its payload bytes when it has them, else of its
    /// header) and marks its FCS bad: what a `Corrupted` fate does to the frame.
    pub(crate) fn corrupt(&mut self, pkt: &mut Packet) {
        self.rng = mix(self.rng);
        let r = self.rng;
        if let Payload::Data(d) = pkt.payload() {
            if !d.is_empty() {
                let mut bytes = d.to_vec();
                let bit = (r % (bytes.len() as u64 * 8)) as usize;
                bytes[bit / 8] ^= 1 << (bit % 8);
                pkt.replace_payload(Payload::data(Bytes::from(bytes)));
                pkt.set_corrupted(true);
                return;
            }
        }
        let h = pkt.header_mut();
        if !h.is_empty() {
            let bit = (r % (h.len() as u64 * 8)) as usize;
            h[bit / 8] ^= 1 << (bit % 8);
        }
        pkt.set_corrupted(true);
    }

    /// Decides a frame's fate at `now` and the serialization time of its `wire` bytes (the
    /// channel's own, `ser`, unless a bandwidth fault is active).
    pub(crate) fn apply(&mut self, now: Time, wire: u64, ser: Time) -> (Time, Fate) {
        let mut ser = ser;
        let mut fate = Fate::Deliver;
        for i in 0..self.rules.len() {
            let r = self.rules[i];
            if !r.window.active(now) {
                continue;
            }
            match r.kind {
                FaultKind::Bandwidth(rate) => ser = ser.max(rate.serialization_time(wire)),
                FaultKind::Down => {
                    if fate == Fate::Deliver {
                        fate = Fate::Lost;
                        self.counts[i].lost += 1;
                        self.last_rule = i;
                    }
                }
                FaultKind::Loss(p) => {
                    if self.draw() < p && fate == Fate::Deliver {
                        fate = Fate::Lost;
                        self.counts[i].lost += 1;
                        self.last_rule = i;
                    }
                }
                FaultKind::Ber(ber) => {
                    let bits = (wire * 8) as f64;
                    let p = -(bits * (-ber).ln_1p()).exp_m1();
                    let u = self.draw();
                    if u < p && fate == Fate::Deliver {
                        fate = Fate::Corrupted;
                        self.counts[i].corrupted += 1;
                        self.last_rule = i;
                    }
                }
            }
        }
        (ser, fate)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_and_flaps() {
        let w = FaultWindow {
            from: Time::from_us(10),
            until: Time::from_us(13),
            period: Some(Time::from_us(10)),
        };
        assert!(!w.active(Time::from_us(9)));
        assert!(w.active(Time::from_us(10)));
        assert!(!w.active(Time::from_us(13)));
        assert!(w.active(Time::from_us(22)));
        assert!(!w.active(Time::from_us(29)));
        assert_eq!(
            w.changes(Time::from_us(25)),
            vec![
                (Time::from_us(10), true),
                (Time::from_us(13), false),
                (Time::from_us(20), true),
                (Time::from_us(23), false),
            ]
        );
        let forever = FaultWindow::ALWAYS;
        assert!(forever.active(Time::from_us(1_000_000)));
        assert_eq!(forever.changes(Time::from_us(5)), vec![(Time::ZERO, true)]);
    }

    #[test]
    fn loss_rate_matches_its_probability() {
        let rule = PortFault {
            entry: 0,
            window: FaultWindow::ALWAYS,
            kind: FaultKind::Loss(0.1),
        };
        let mut f = PortFaults::new(vec![rule], 1, 2, 3);
        let lost = (0..100_000)
            .filter(|_| f.apply(Time::ZERO, 1000, Time(1)).1 == Fate::Lost)
            .count();
        // Binomial(100000, 0.1): sd ~95; 5 sd either side.
        assert!((9_500..10_500).contains(&lost), "{lost}");
        assert_eq!(f.counts[0].lost, lost as u64);
    }

    #[test]
    fn corruption_flips_one_bit_of_a_copy_and_marks_the_fcs() {
        let mut f = PortFaults::new(Vec::new(), 4, 0, 0);
        let ones = |a: &[u8], b: &[u8]| -> u32 {
            a.iter().zip(b).map(|(x, y)| (x ^ y).count_ones()).sum()
        };
        // Data mode: one payload bit flips; the sender's buffer, shared, stays as it was.
        let sent = Bytes::from(vec![0x5Au8; 4096]);
        let mut pkt = Packet::new(&[1u8; 58], Payload::data(sent.clone()), &[9; 4]).unwrap();
        assert!(!pkt.is_corrupted());
        f.corrupt(&mut pkt);
        assert!(pkt.is_corrupted());
        let Payload::Data(got) = pkt.payload() else {
            panic!("payload kind changed")
        };
        assert_eq!(ones(&got[..], &sent), 1);
        assert!(sent.iter().all(|&b| b == 0x5A));
        assert_eq!(pkt.header(), &[1u8; 58][..]);
        assert_eq!(
            (pkt.trailer(), pkt.frame_len()),
            (&[9u8; 4][..], 58 + 4096 + 4)
        );
        // Timing mode: no payload bytes, so a header bit flips.
        let mut pkt = Packet::new(&[0u8; 58], Payload::Timing(4096), &[]).unwrap();
        f.corrupt(&mut pkt);
        assert!(pkt.is_corrupted());
        assert_eq!(ones(pkt.header(), &[0u8; 58]), 1);
        assert_eq!(pkt.frame_len(), 58 + 4096);
    }
}
