//! What the application sees of its NIC ([`AppApi`], the packet-level [`Transport`]) and how
//! timer tokens are shared between the application and the NIC.
//!
//! The engine gives an actor one timer namespace; the low `TOKEN_KIND_BITS` bits of a token say
//! whose timer it is (the application's, a QP's pacing or retransmission timer, or a NIC-internal
//! one) and the rest is the owner's argument.

use bytes::Bytes;

use crate::engine::Ctx;
use crate::transport::{ClassId, Transport};
use crate::units::Time;

use super::Nic;

/// The packet-level [`Transport`]: the application's handle on its NIC and time while it
/// reacts.
pub struct AppApi<'n, 'c, 'e> {
    pub(super) nic: &'n mut Nic,
    pub(super) ctx: &'c mut Ctx<'e>,
}

impl Transport for AppApi<'_, '_, '_> {
    fn now(&self) -> Time {
        self.ctx.now()
    }
    fn host(&self) -> u32 {
        self.nic.index
    }
    fn post_send(&mut self, dst: u32, tag: u64, len: u64, data: Option<Bytes>) -> bool {
        self.nic.post_send(dst, tag, len, data, 0, self.ctx)
    }
    fn post_send_in(
        &mut self,
        dst: u32,
        tag: u64,
        len: u64,
        data: Option<Bytes>,
        class: ClassId,
    ) -> bool {
        self.nic.post_send(dst, tag, len, data, class, self.ctx)
    }
    fn set_timer(&mut self, at: Time, token: u64) {
        self.ctx.set_timer(at, token << TOKEN_KIND_BITS | TOKEN_APP);
    }
}

pub(super) const TOKEN_KIND_BITS: u32 = 2;
pub(super) const TOKEN_APP: u64 = 0;
pub(super) const TOKEN_PACE: u64 = 1;
pub(super) const TOKEN_RTO: u64 = 2;
/// NIC-internal timers; the next `NIC_SUB_BITS` bits say which, the rest is the argument.
pub(super) const TOKEN_NIC: u64 = 3;
pub(super) const NIC_SUB_BITS: u32 = 2;
/// DCQCN rate-increase timer of a QP (argument: QP index).
pub(super) const NIC_RATE: u64 = 0;
/// A PFC pause may have run out on a port (argument: port).
pub(super) const NIC_RESUME: u64 = 1;
/// The receive buffer's head frame is drained (no argument).
pub(super) const NIC_DRAIN: u64 = 2;
/// A scheduled route change (failover; argument: its index in the NIC's schedule).
pub(super) const NIC_REROUTE: u64 = 3;

pub(super) fn nic_token(sub: u64, arg: u64) -> u64 {
    ((arg << NIC_SUB_BITS | sub) << TOKEN_KIND_BITS) | TOKEN_NIC
}
