//! The seam between what runs on a host and what moves its messages.
//!
//! An [`Application`] (the point-to-point workload, a collective's program executor, later a
//! training workload) posts messages to peers, is told when they completed and arms timers,
//! all through a [`Transport`]. It never knows what carries the bytes: at packet fidelity the
//! host's RoCE NIC ([`crate::host::AppApi`]) segments them into frames that cross real
//! switches; at flow fidelity a fluid network moves them at max-min fair rates. One executor
//! and one algorithm library serve both fidelities because this trait is all they see.

use bytes::Bytes;

use crate::units::Time;

mod app_id;
mod class;

pub use app_id::{AppId, TOKEN_BITS};
pub use class::{ClassId, ClassTable, TrafficClass};

/// What an application may ask of the transport under it while it reacts to an event.
pub trait Transport {
    /// Current virtual time.
    fn now(&self) -> Time;
    /// This host's index.
    fn host(&self) -> u32;
    /// Posts a message of `len` bytes to host `dst` (an RDMA WRITE with immediate at packet
    /// level); `data` must be `len` bytes in data mode and `None` in timing mode. Completes
    /// with [`Completion::SendDone`] here and [`Completion::Received`] (carrying the low 32
    /// bits of `tag`) at `dst`. Messages to the same peer are delivered in the order posted.
    /// Returns false when `dst` is unknown or unreachable.
    fn post_send(&mut self, dst: u32, tag: u64, len: u64, data: Option<Bytes>) -> bool;
    /// [`post_send`](Transport::post_send) in traffic class `class` of the run's
    /// [`ClassTable`] (0: the NIC's default, the same as `post_send`): the packet transport
    /// sends the message on its QP of that class toward `dst`. Messages to the same peer in the
    /// same class are delivered in the order posted; different classes are different QPs and
    /// may overtake each other. A transport without classes (the fluid flow model) ignores
    /// `class`.
    fn post_send_in(
        &mut self,
        dst: u32,
        tag: u64,
        len: u64,
        data: Option<Bytes>,
        class: ClassId,
    ) -> bool {
        let _ = class;
        self.post_send(dst, tag, len, data)
    }
    /// Arms an application timer: [`Application::on_timer`] gets `token` (below
    /// 2^[`TOKEN_BITS`]) at `at`.
    fn set_timer(&mut self, at: Time, token: u64);
}

/// A completion delivered to the application.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Completion {
    /// Every byte of a posted message was acknowledged.
    SendDone {
        /// Peer host.
        dst: u32,
        /// The tag given to `post_send`.
        tag: u64,
    },
    /// A whole message arrived from `src`.
    Received {
        /// Sending host.
        src: u32,
        /// Low 32 bits of the sender's tag (carried as RDMA immediate data).
        imm: u32,
        /// Bytes received.
        len: u64,
        /// The bytes, in data mode.
        data: Option<Bytes>,
    },
}

/// What runs on a host above its transport: a workload, a collective's program executor, ...
pub trait Application: Send {
    /// Called once at time zero.
    fn start(&mut self, api: &mut dyn Transport);
    /// A timer armed with [`Transport::set_timer`] fired.
    fn on_timer(&mut self, token: u64, api: &mut dyn Transport);
    /// A send or receive completed.
    fn on_completion(&mut self, completion: Completion, api: &mut dyn Transport);
    /// Whether the application wants [`Completion::SendDone`] for the message it posted with
    /// `tag` (default: yes). A transport may skip the completions nobody reads: the flow
    /// level then schedules no acknowledgement event for them.
    fn wants_send_done(&self, tag: u64) -> bool {
        let _ = tag;
        true
    }
}
