//! The seam between what runs on a host and what moves its messages.
//!
//! An [`Application`] (the point-to-point workload, a collective's program executor, later a
//! training workload) posts messages to peers, is told when they completed and arms timers,
//! all through a [`Transport`]. It never knows what carries the bytes: at packet fidelity the
//! host's RoCE NIC ([`crate::host::AppApi`]) segments them into frames that cross real
//! switches; at flow fidelity a fluid network moves them at max-min fair rates. One executor
//! and one algorithm library serve both fidelities because this trait is all they see.

use std::sync::Arc;

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
    /// Arms an application timer: [`Application::on_timer`] gets `token` at `at`.
    fn set_timer(&mut self, at: Time, token: u64);
}

/// The traffic class of a message: how the fabric should treat its packets.
///
/// The DSCP goes into the IPv4 header of every data packet (switches map it to a priority,
/// which selects the PFC class, the ECN queue and the strict-priority queue). Deadline, slack
/// and rank are what PIFO schedulers rank by: a class is sent on QPs of its own, whose number
/// names the class ([`ClassTable`]), and a switch reads them from its copy of the run's
/// table — the way a switch's control plane holds per-QP policy — so they cost no wire bytes
/// and no bytes in any packet. The default is the NIC's: its `dscp` and none of the three.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct TrafficClass {
    /// DSCP of the data packets, 0..=63; `None`: the NIC's `dscp`.
    pub dscp: Option<u8>,
    /// Absolute deadline of the message (EDF ranks by it); [`Time::ZERO`]: none.
    pub deadline: Time,
    /// How long each packet may wait in a switch's queue (LSTF ranks by arrival + slack);
    /// [`Time::ZERO`]: none.
    pub slack: Time,
    /// An explicit rank (the PIFO `rank` transaction); 0: none.
    pub rank: u64,
}

impl TrafficClass {
    /// True when the class is the NIC's default (nothing set).
    pub fn is_default(&self) -> bool {
        *self == TrafficClass::default()
    }
}

/// A traffic class's number in the run's [`ClassTable`]; 0 is the NIC's default class.
pub type ClassId = u8;

/// The run's traffic classes, numbered 1.. (0 is the NIC's default class, not stored; an empty
/// table allocates nothing): the
/// NICs open one QP per (peer, class) and put the number in the QP number
/// (`fabemu_fabric::host::qp_number`); switches look a packet's class up by its destination QP.
/// Built once before the run and shared read-only, so every thread sees the same table.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClassTable(Option<Arc<[TrafficClass]>>);

impl ClassTable {
    /// Most classes besides the default (the QP number holds 6 bits of class number).
    pub const MAX: usize = 63;

    /// The table of `classes`, numbered 1, 2, ... in order; `None` when there are more than
    /// [`ClassTable::MAX`].
    pub fn new(classes: Vec<TrafficClass>) -> Option<ClassTable> {
        (classes.len() <= Self::MAX)
            .then(|| ClassTable((!classes.is_empty()).then(|| classes.into())))
    }

    /// Class `id` (the default class for 0 or a number not in the table).
    #[inline]
    pub fn get(&self, id: ClassId) -> TrafficClass {
        match (&self.0, usize::from(id).checked_sub(1)) {
            (Some(t), Some(i)) => t.get(i).copied().unwrap_or_default(),
            _ => TrafficClass::default(),
        }
    }

    /// True when the run has no class besides the default.
    pub fn is_empty(&self) -> bool {
        self.0.is_none()
    }
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
    use super::{AppId, ClassTable, TrafficClass};

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

    #[test]
    fn class_table_numbers_from_one_and_defaults_elsewhere() {
        let a = TrafficClass {
            dscp: Some(46),
            ..TrafficClass::default()
        };
        let b = TrafficClass {
            rank: 7,
            ..TrafficClass::default()
        };
        let t = ClassTable::new(vec![a, b]).unwrap();
        assert_eq!((t.get(1), t.get(2)), (a, b));
        assert!(t.get(0).is_default() && t.get(3).is_default());
        assert!(ClassTable::new(Vec::new()).unwrap().is_empty());
        assert!(ClassTable::new(vec![a; ClassTable::MAX + 1]).is_none());
    }
}
