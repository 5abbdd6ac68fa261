//! A lone actor's [`Context`]: no engine, no peers. A test gives the actor events (a frame
//! arriving on a port, or the next completion or timer the actor itself asked for) and reads
//! what it transmitted, on which port and when.
//!
//! Time moves only when the test says: [`Recorder::next_event`] advances it to the earliest
//! pending completion or timer, [`Recorder::advance`] to a given instant. Ports serialize as
//! the engine's do (the channel's rate with Ethernet's overhead, a busy port refuses a
//! frame), and completions a frame did not ask for are reserved and queued only if
//! [`Context::want_tx_done`] asks, as in the engine. Nothing arrives anywhere: a transmitted
//! frame is recorded ([`Sent`]) with the time its last bit would reach the peer.

use std::collections::BTreeMap;

use crate::link::{Channel, EthernetOverhead};
use crate::packet::Packet;
use crate::units::Time;

use super::{ActorId, Context, Event, Frame, TransmitError};

/// A frame an actor put on the wire.
#[derive(Clone, Debug)]
pub struct Sent {
    /// The port it left by.
    pub port: usize,
    /// When its first bit left.
    pub start: Time,
    /// When its serialization ended (the port idle again).
    pub done: Time,
    /// When its last bit reaches the peer (`done` plus the channel's latency).
    pub arrive: Time,
    /// The frame.
    pub packet: Packet,
}

/// Something the actor asked to happen later.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Pending {
    TxDone(usize),
    Timer(u64),
}

/// One port of the lone actor.
#[derive(Clone, Debug)]
struct RecordedPort {
    channel: Channel,
    busy_until: Time,
    /// The order number reserved for the completion of the frame on the wire, when it was not
    /// asked for at transmit time.
    reserved: Option<u64>,
}

/// A [`Context`] for driving one actor by hand (see the module doc).
#[derive(Debug)]
pub struct Recorder {
    now: Time,
    id: ActorId,
    overhead: EthernetOverhead,
    ports: Vec<RecordedPort>,
    slab: Vec<Option<Packet>>,
    free: Vec<u32>,
    held: usize,
    /// By (time, order of asking): the engine's order for one actor.
    pending: BTreeMap<(Time, u64), Pending>,
    order: u64,
    sent: Vec<Sent>,
    halted: Option<Time>,
}

impl Recorder {
    /// Actor `id` at time zero with one port per channel in `channels`.
    pub fn new(id: ActorId, channels: &[Channel]) -> Recorder {
        Recorder {
            now: Time::ZERO,
            id,
            overhead: EthernetOverhead::default(),
            ports: channels
                .iter()
                .map(|&channel| RecordedPort {
                    channel,
                    busy_until: Time::ZERO,
                    reserved: None,
                })
                .collect(),
            slab: Vec::new(),
            free: Vec::new(),
            held: 0,
            pending: BTreeMap::new(),
            order: 0,
            sent: Vec::new(),
            halted: None,
        }
    }

    /// The event of `packet` arriving on `port` now: a held [`Event::Frame`] for an actor
    /// that holds frames ([`super::Actor::holds_frames`]), else [`Event::Packet`].
    pub fn arrival(&mut self, port: usize, packet: Packet, holds_frames: bool) -> Event {
        if holds_frames {
            Event::Frame {
                port,
                frame: self.hold(packet),
            }
        } else {
            Event::Packet { port, packet }
        }
    }

    /// The earliest completion or timer due at or before `until`, with the time moved to it;
    /// `None` (time unchanged) when there is none.
    pub fn next_event(&mut self, until: Time) -> Option<Event> {
        let (&(at, order), _) = self.pending.first_key_value()?;
        if at > until {
            return None;
        }
        let what = self.pending.remove(&(at, order))?;
        self.now = self.now.max(at);
        Some(match what {
            Pending::TxDone(port) => Event::TxDone { port },
            Pending::Timer(token) => Event::Timer { token },
        })
    }

    /// Moves the time to `at` (never back). Pending events before `at` stay pending: take
    /// them with [`Recorder::next_event`] first.
    pub fn advance(&mut self, at: Time) {
        self.now = self.now.max(at);
    }

    /// Every frame transmitted so far, in order.
    pub fn sent(&self) -> &[Sent] {
        &self.sent
    }

    /// Takes the frames transmitted so far.
    pub fn take_sent(&mut self) -> Vec<Sent> {
        std::mem::take(&mut self.sent)
    }

    /// Timers armed and not yet fired: (when, token), earliest first.
    pub fn timers(&self) -> Vec<(Time, u64)> {
        self.pending
            .iter()
            .filter_map(|(&(at, _), p)| match *p {
                Pending::Timer(t) => Some((at, t)),
                Pending::TxDone(_) => None,
            })
            .collect()
    }

    /// When the actor first asked the run to stop.
    pub fn halted(&self) -> Option<Time> {
        self.halted
    }

    fn push(&mut self, at: Time, what: Pending) {
        let order = self.next_order();
        self.pending.insert((at, order), what);
    }

    fn next_order(&mut self) -> u64 {
        self.order += 1;
        self.order
    }

    /// Puts a frame of `frame_len` bytes (`packet`) on `port`, timed as the engine times it.
    fn launch(
        &mut self,
        port: usize,
        packet: Packet,
        frame_len: u64,
        tx_done: bool,
    ) -> Result<(), TransmitError> {
        let now = self.now;
        let order = self.next_order();
        let p = self.ports.get_mut(port).ok_or(TransmitError::NoSuchPort)?;
        if p.busy_until > now {
            return Err(TransmitError::Busy);
        }
        let wire = self.overhead.wire_bytes(frame_len as usize);
        let done = now + p.channel.rate.serialization_time(wire);
        p.busy_until = done;
        p.reserved = (!tx_done).then_some(order);
        if tx_done {
            self.pending.insert((done, order), Pending::TxDone(port));
        }
        let arrive = done + p.channel.latency;
        self.sent.push(Sent {
            port,
            start: now,
            done,
            arrive,
            packet,
        });
        Ok(())
    }
}

impl Context for Recorder {
    fn now(&self) -> Time {
        self.now
    }
    fn id(&self) -> ActorId {
        self.id
    }
    fn port_idle(&self, port: usize) -> bool {
        self.ports
            .get(port)
            .is_some_and(|p| p.busy_until <= self.now)
    }
    fn channel(&self, port: usize) -> Option<Channel> {
        self.ports.get(port).map(|p| p.channel)
    }
    fn wire_bytes(&self, frame_len: usize) -> u64 {
        self.overhead.wire_bytes(frame_len)
    }
    fn transmit_then(
        &mut self,
        port: usize,
        packet: Packet,
        tx_done: bool,
    ) -> Result<(), TransmitError> {
        let len = packet.frame_len() as u64;
        self.launch(port, packet, len, tx_done)
    }
    fn frame(&self, frame: &Frame) -> Option<&Packet> {
        self.slab.get(frame.slot as usize)?.as_ref()
    }
    fn frame_mut(&mut self, frame: &Frame) -> Option<&mut Packet> {
        self.slab.get_mut(frame.slot as usize)?.as_mut()
    }
    fn hold(&mut self, packet: Packet) -> Frame {
        self.held += 1;
        match self.free.pop() {
            Some(slot) => {
                self.slab[slot as usize] = Some(packet);
                Frame { slot }
            }
            None => {
                self.slab.push(Some(packet));
                Frame {
                    slot: (self.slab.len() - 1) as u32,
                }
            }
        }
    }
    fn hold_mut(&mut self, packet: Packet) -> Option<(Frame, &mut Packet)> {
        let frame = self.hold(packet);
        let p = self.slab.get_mut(frame.slot as usize)?.as_mut()?;
        Some((frame, p))
    }
    fn take_frame(&mut self, frame: Frame) -> Option<Packet> {
        let p = self.slab.get_mut(frame.slot as usize)?.take()?;
        self.free.push(frame.slot);
        self.held -= 1;
        Some(p)
    }
    fn drop_frame(&mut self, frame: Frame) {
        let _ = self.take_frame(frame);
    }
    fn held_frames(&self) -> usize {
        self.held
    }
    fn transmit_frame(
        &mut self,
        port: usize,
        frame: Frame,
        tx_done: bool,
    ) -> Result<(), TransmitError> {
        let packet = self.take_frame(frame).ok_or(TransmitError::NoSuchFrame)?;
        let len = packet.frame_len() as u64;
        self.launch(port, packet, len, tx_done)
    }
    fn transmit_frame_len(
        &mut self,
        port: usize,
        frame: Frame,
        frame_len: u32,
        tx_done: bool,
    ) -> Result<(), TransmitError> {
        let packet = self.take_frame(frame).ok_or(TransmitError::NoSuchFrame)?;
        self.launch(port, packet, u64::from(frame_len), tx_done)
    }
    fn want_tx_done(&mut self, port: usize) {
        let Some(p) = self.ports.get_mut(port) else {
            return;
        };
        if p.busy_until <= self.now {
            return;
        }
        if let Some(order) = p.reserved.take() {
            self.pending
                .insert((p.busy_until, order), Pending::TxDone(port));
        }
    }
    fn halt(&mut self) {
        self.halted.get_or_insert(self.now);
    }
    fn set_timer(&mut self, at: Time, token: u64) {
        self.push(at.max(self.now), Pending::Timer(token));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::link::Rate;
    use crate::packet::Payload;
    use crate::units::Bandwidth;

    fn port() -> Channel {
        Channel {
            rate: Rate::new(Bandwidth::from_gbps(100)),
            latency: Time::from_us(1),
        }
    }

    /// A 1000-byte frame is 1024 bytes on the wire (FCS, preamble, gap): 81.92 ns at
    /// 100 Gb/s; the port refuses a second until then, and a completion not asked for comes
    /// only when asked for while the frame is on the wire.
    #[test]
    fn ports_serialize_at_the_channel_rate() {
        let mut r = Recorder::new(7, &[port()]);
        let pkt = Packet::new(&[0; 64], Payload::Timing(936), &[]).unwrap();
        r.transmit_then(0, pkt.clone(), false).unwrap();
        assert_eq!(r.transmit(0, pkt.clone()), Err(TransmitError::Busy));
        let s = &r.sent()[0];
        assert_eq!((s.start, s.done), (Time::ZERO, Time(81_920)));
        assert_eq!(s.arrive, Time(81_920) + Time::from_us(1));
        r.set_timer(Time(5), 42);
        assert_eq!(r.timers(), vec![(Time(5), 42)]);
        assert!(matches!(
            r.next_event(Time::NEVER),
            Some(Event::Timer { token: 42 })
        ));
        assert!(r.next_event(Time::NEVER).is_none());
        r.want_tx_done(0);
        assert!(matches!(
            r.next_event(Time::NEVER),
            Some(Event::TxDone { port: 0 })
        ));
        assert_eq!(r.now(), Time(81_920));
        assert!(r.port_idle(0));
        let f = r.hold(pkt);
        assert_eq!(r.held_frames(), 1);
        r.transmit_frame_len(0, f, 100, true).unwrap();
        assert_eq!(r.held_frames(), 0);
        assert_eq!(
            r.sent()[1].done.saturating_sub(r.sent()[1].start),
            Time(124 * 80)
        );
    }
}
