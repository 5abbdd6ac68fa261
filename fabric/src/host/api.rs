//! What the application sees of its NIC ([`AppApi`], the packet-level [`Transport`]) and how
//! the host's timers share the engine's one namespace of tokens ([`HostTimer`]).

use bytes::Bytes;

use crate::engine::Context;
use crate::transport::{ClassId, Transport};
use crate::units::Time;

use super::Nic;

/// The packet-level [`Transport`]: the application's handle on its NIC and time while it
/// reacts.
pub struct AppApi<'n, 'c, C> {
    pub(super) nic: &'n mut Nic,
    pub(super) ctx: &'c mut C,
}

impl<C: Context> Transport for AppApi<'_, '_, C> {
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
        self.ctx.set_timer(at, HostTimer::App(token).token());
    }
}

/// A timer of the host, as its token carries it. The engine gives an actor one namespace of
/// `u64` tokens; this type alone lays them out: the low two bits say whose timer it is (the
/// application's, a QP's pacing or retransmission timer, or a NIC-internal one, whose next two
/// bits say which), the rest is the owner's argument.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum HostTimer {
    /// The application's timer with its own token.
    App(u64),
    /// A port's pacing timer: a rate-limited QP may send again.
    Pace(usize),
    /// A QP's retransmission timeout.
    Rto(usize),
    /// A QP's DCQCN rate-increase timer.
    Rate(usize),
    /// A PFC pause may have run out on a port.
    Resume(usize),
    /// The receive buffer's head frame is drained.
    Drain,
    /// A scheduled route change (failover), by its index in the NIC's schedule.
    Reroute(usize),
}

/// Bits of the token that say whose timer it is.
const KIND_BITS: u32 = 2;
const KIND_APP: u64 = 0;
const KIND_PACE: u64 = 1;
const KIND_RTO: u64 = 2;
/// NIC-internal timers; the next `NIC_BITS` bits say which.
const KIND_NIC: u64 = 3;
const NIC_BITS: u32 = 2;
const NIC_RATE: u64 = 0;
const NIC_RESUME: u64 = 1;
const NIC_DRAIN: u64 = 2;
const NIC_REROUTE: u64 = 3;

impl HostTimer {
    /// The token to arm.
    #[inline]
    pub(super) fn token(self) -> u64 {
        let nic = |sub: u64, arg: usize| ((arg as u64) << NIC_BITS | sub) << KIND_BITS | KIND_NIC;
        match self {
            HostTimer::App(t) => t << KIND_BITS | KIND_APP,
            HostTimer::Pace(port) => (port as u64) << KIND_BITS | KIND_PACE,
            HostTimer::Rto(qp) => (qp as u64) << KIND_BITS | KIND_RTO,
            HostTimer::Rate(qp) => nic(NIC_RATE, qp),
            HostTimer::Resume(port) => nic(NIC_RESUME, port),
            HostTimer::Drain => nic(NIC_DRAIN, 0),
            HostTimer::Reroute(i) => nic(NIC_REROUTE, i),
        }
    }

    /// The timer a fired token stands for.
    #[inline]
    pub(super) fn of(token: u64) -> HostTimer {
        let arg = token >> KIND_BITS;
        match token & ((1 << KIND_BITS) - 1) {
            KIND_APP => HostTimer::App(arg),
            KIND_PACE => HostTimer::Pace(arg as usize),
            KIND_RTO => HostTimer::Rto(arg as usize),
            _ => {
                let sub_arg = (arg >> NIC_BITS) as usize;
                match arg & ((1 << NIC_BITS) - 1) {
                    NIC_RATE => HostTimer::Rate(sub_arg),
                    NIC_RESUME => HostTimer::Resume(sub_arg),
                    NIC_DRAIN => HostTimer::Drain,
                    _ => HostTimer::Reroute(sub_arg),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::HostTimer;

    #[test]
    fn every_timer_comes_back_from_its_token() {
        for t in [
            HostTimer::App(0),
            HostTimer::App((1 << 41) | 7),
            HostTimer::Pace(3),
            HostTimer::Rto(1 << 20),
            HostTimer::Rate(5),
            HostTimer::Resume(1),
            HostTimer::Drain,
            HostTimer::Reroute(9),
        ] {
            assert_eq!(HostTimer::of(t.token()), t, "{t:?}");
        }
        // The layout the host's tokens always had (the order of equal-time timers follows
        // arming order, not the token, but reports name no token either way).
        assert_eq!(HostTimer::Pace(2).token(), 2 << 2 | 1);
        assert_eq!(HostTimer::Drain.token(), (2 << 2) | 3);
    }
}
