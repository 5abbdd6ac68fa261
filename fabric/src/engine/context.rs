//! What an actor can do while it reacts, as a trait: the engine's [`Ctx`] is one
//! implementation, [`Recorder`] (a lone actor's context, for tests) the other.
//!
//! Switches and hosts write their reactions against [`Context`], generic and monomorphized:
//! driven by the engine they compile to the same code as against [`Ctx`] itself, and a test can
//! drive one of them alone, feeding it events and reading what it transmitted and when, without
//! building a world (as quinn-proto's tests drive its connection state machines).

use crate::link::Channel;
use crate::packet::Packet;
use crate::units::Time;

use super::{ActorId, Ctx, Frame, TransmitError};

#[cfg(doc)]
use super::{Event, Recorder};

/// An actor's window on its surroundings while it handles an event: time, its ports, the
/// frames it holds, its timers. See [`Ctx`] for what each method means to the engine.
pub trait Context {
    /// Current virtual time.
    fn now(&self) -> Time;
    /// This actor's id.
    fn id(&self) -> ActorId;
    /// True when `port` can transmit now.
    fn port_idle(&self, port: usize) -> bool;
    /// The channel `port` transmits on.
    fn channel(&self, port: usize) -> Option<Channel>;
    /// Bytes a frame of `frame_len` bytes occupies on the wire (with Ethernet's overhead).
    fn wire_bytes(&self, frame_len: usize) -> u64;
    /// Puts `packet` on the wire of `port`; [`Event::TxDone`] follows when it is serialized.
    fn transmit(&mut self, port: usize, packet: Packet) -> Result<(), TransmitError> {
        self.transmit_then(port, packet, true)
    }
    /// [`Context::transmit`] whose [`Event::TxDone`] follows only with `tx_done`, or when
    /// [`Context::want_tx_done`] asks for it while the frame is on the wire.
    fn transmit_then(
        &mut self,
        port: usize,
        packet: Packet,
        tx_done: bool,
    ) -> Result<(), TransmitError>;
    /// The packet of a held `frame`.
    fn frame(&self, frame: &Frame) -> Option<&Packet>;
    /// The packet of a held `frame`, writable.
    fn frame_mut(&mut self, frame: &Frame) -> Option<&mut Packet>;
    /// Holds `packet` as a [`Frame`].
    fn hold(&mut self, packet: Packet) -> Frame;
    /// [`Context::hold`], and the packet where it now lies, to finish writing it there.
    fn hold_mut(&mut self, packet: Packet) -> Option<(Frame, &mut Packet)>;
    /// Takes the packet of a held `frame` back.
    fn take_frame(&mut self, frame: Frame) -> Option<Packet>;
    /// Discards a held `frame`.
    fn drop_frame(&mut self, frame: Frame);
    /// Frames held right now (handed out and not yet given back).
    fn held_frames(&self) -> usize;
    /// [`Context::transmit_then`] for a held frame, which leaves from where it lies.
    fn transmit_frame(
        &mut self,
        port: usize,
        frame: Frame,
        tx_done: bool,
    ) -> Result<(), TransmitError>;
    /// [`Context::transmit_frame`] for a frame whose length without FCS the caller kept
    /// (`frame_len`): the frame is timed by it.
    fn transmit_frame_len(
        &mut self,
        port: usize,
        frame: Frame,
        frame_len: u32,
        tx_done: bool,
    ) -> Result<(), TransmitError>;
    /// Asks for the [`Event::TxDone`] of the frame `port` is sending.
    fn want_tx_done(&mut self, port: usize);
    /// Asks the run to stop.
    fn halt(&mut self);
    /// Arms a timer that fires at `at` (clamped to now) with `token`.
    fn set_timer(&mut self, at: Time, token: u64);
}

/// The engine's context: each method is [`Ctx`]'s own, inlined.
impl Context for Ctx<'_> {
    #[inline(always)]
    fn now(&self) -> Time {
        Ctx::now(self)
    }
    #[inline(always)]
    fn id(&self) -> ActorId {
        Ctx::id(self)
    }
    #[inline(always)]
    fn port_idle(&self, port: usize) -> bool {
        Ctx::port_idle(self, port)
    }
    #[inline(always)]
    fn channel(&self, port: usize) -> Option<Channel> {
        Ctx::channel(self, port)
    }
    #[inline(always)]
    fn wire_bytes(&self, frame_len: usize) -> u64 {
        Ctx::wire_bytes(self, frame_len)
    }
    #[inline(always)]
    fn transmit(&mut self, port: usize, packet: Packet) -> Result<(), TransmitError> {
        Ctx::transmit(self, port, packet)
    }
    #[inline(always)]
    fn transmit_then(
        &mut self,
        port: usize,
        packet: Packet,
        tx_done: bool,
    ) -> Result<(), TransmitError> {
        Ctx::transmit_then(self, port, packet, tx_done)
    }
    #[inline(always)]
    fn frame(&self, frame: &Frame) -> Option<&Packet> {
        Ctx::frame(self, frame)
    }
    #[inline(always)]
    fn frame_mut(&mut self, frame: &Frame) -> Option<&mut Packet> {
        Ctx::frame_mut(self, frame)
    }
    #[inline(always)]
    fn hold(&mut self, packet: Packet) -> Frame {
        Ctx::hold(self, packet)
    }
    #[inline(always)]
    fn hold_mut(&mut self, packet: Packet) -> Option<(Frame, &mut Packet)> {
        Ctx::hold_mut(self, packet)
    }
    #[inline(always)]
    fn take_frame(&mut self, frame: Frame) -> Option<Packet> {
        Ctx::take_frame(self, frame)
    }
    #[inline(always)]
    fn drop_frame(&mut self, frame: Frame) {
        Ctx::drop_frame(self, frame)
    }
    #[inline(always)]
    fn held_frames(&self) -> usize {
        Ctx::held_frames(self)
    }
    #[inline(always)]
    fn transmit_frame(
        &mut self,
        port: usize,
        frame: Frame,
        tx_done: bool,
    ) -> Result<(), TransmitError> {
        Ctx::transmit_frame(self, port, frame, tx_done)
    }
    #[inline(always)]
    fn transmit_frame_len(
        &mut self,
        port: usize,
        frame: Frame,
        frame_len: u32,
        tx_done: bool,
    ) -> Result<(), TransmitError> {
        Ctx::transmit_frame_len(self, port, frame, frame_len, tx_done)
    }
    #[inline(always)]
    fn want_tx_done(&mut self, port: usize) {
        Ctx::want_tx_done(self, port)
    }
    #[inline(always)]
    fn halt(&mut self) {
        Ctx::halt(self)
    }
    #[inline(always)]
    fn set_timer(&mut self, at: Time, token: u64) {
        Ctx::set_timer(self, at, token)
    }
}
