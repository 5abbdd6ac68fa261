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
    /// Arms an application timer: [`Application::on_timer`] gets `token` at `at`.
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

/// Which of a host's applications an event belongs to.
///
/// Several applications share one host (the scenario's point-to-point messages, the collective
/// jobs, a training rank) and therefore one timer namespace and one RDMA immediate space. This
/// type alone assigns the bits that say whose a timer token or an immediate is; the host's
/// dispatcher asks it, and each application builds its tokens and immediates through it.
///
/// Timer tokens: [`AppId::Messages`] uses the token as is (below 2^40), [`AppId::Collectives`]
/// sets bit 40, [`AppId::Training`] bit 41. Immediates (on the wire as RoCE ImmDt): bit 31 set is
/// a collective's (its argument has the other 31 bits), else bit 30 set is a training rank's
/// point-to-point message, else a scenario message (tags stay below 2^30).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AppId {
    /// The scenario's point-to-point messages.
    Messages,
    /// Collective jobs (the program executor).
    Collectives,
    /// A training workload's rank (its timers and point-to-point messages).
    Training,
}

const TOKEN_COLLECTIVES: u64 = 1 << 40;
const TOKEN_TRAINING: u64 = 1 << 41;
const IMM_COLLECTIVES: u32 = 1 << 31;
const IMM_TRAINING: u32 = 1 << 30;

impl AppId {
    /// Largest timer-token argument an application may use (exclusive): 2^40.
    pub const TOKEN_ARG_LIMIT: u64 = TOKEN_COLLECTIVES;
    /// Largest immediate argument of [`AppId::Messages`] and [`AppId::Training`] (exclusive):
    /// 2^30; collectives have 2^31.
    pub const IMM_ARG_LIMIT: u32 = IMM_TRAINING;

    /// This application's timer token with argument `arg` (< [`AppId::TOKEN_ARG_LIMIT`]).
    pub const fn token(self, arg: u64) -> u64 {
        match self {
            AppId::Messages => arg,
            AppId::Collectives => TOKEN_COLLECTIVES | arg,
            AppId::Training => TOKEN_TRAINING | arg,
        }
    }

    /// Whose a timer token is, and its argument.
    pub const fn of_token(token: u64) -> (AppId, u64) {
        if token & TOKEN_TRAINING != 0 {
            (AppId::Training, token & !TOKEN_TRAINING)
        } else if token & TOKEN_COLLECTIVES != 0 {
            (AppId::Collectives, token & !TOKEN_COLLECTIVES)
        } else {
            (AppId::Messages, token)
        }
    }

    /// This application's immediate with argument `arg` (< 2^31 for collectives,
    /// < [`AppId::IMM_ARG_LIMIT`] otherwise).
    pub const fn imm(self, arg: u32) -> u32 {
        match self {
            AppId::Messages => arg,
            AppId::Collectives => IMM_COLLECTIVES | arg,
            AppId::Training => IMM_TRAINING | arg,
        }
    }

    /// Whose an immediate is, and its argument.
    pub const fn of_imm(imm: u32) -> (AppId, u32) {
        if imm & IMM_COLLECTIVES != 0 {
            (AppId::Collectives, imm & !IMM_COLLECTIVES)
        } else if imm & IMM_TRAINING != 0 {
            (AppId::Training, imm & !IMM_TRAINING)
        } else {
            (AppId::Messages, imm)
        }
    }

    /// Whose a posted message's tag is: applications other than [`AppId::Messages`] post with
    /// their immediate as the tag; tags of 2^32 and above are scenario messages.
    pub const fn of_tag(tag: u64) -> AppId {
        if tag >> 32 != 0 {
            AppId::Messages
        } else {
            AppId::of_imm(tag as u32).0
        }
    }
}

#[cfg(test)]
mod tests {
    use super::AppId;

    #[test]
    fn tokens_and_immediates_round_trip_and_keep_their_owner() {
        for app in [AppId::Messages, AppId::Collectives, AppId::Training] {
            for arg in [0, 1, 12345, AppId::TOKEN_ARG_LIMIT - 1] {
                assert_eq!(AppId::of_token(app.token(arg)), (app, arg));
            }
            for arg in [0, 1, 777, AppId::IMM_ARG_LIMIT - 1] {
                assert_eq!(AppId::of_imm(app.imm(arg)), (app, arg));
                assert_eq!(AppId::of_tag(u64::from(app.imm(arg))), app);
            }
        }
        // A collective's argument may use bit 30 (large job numbers) and stays a collective's.
        let big = (1 << 31) - 1;
        assert_eq!(
            AppId::of_imm(AppId::Collectives.imm(big)),
            (AppId::Collectives, big)
        );
        assert_eq!(AppId::of_tag(1 << 33), AppId::Messages);
    }
}
