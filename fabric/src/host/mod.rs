//! Hosts: an NPU's RoCE NIC with its queue pairs, and the application that drives it.
//!
//! [`Host`] is the actor. Its [`Nic`] keeps one RC queue pair per peer host, segments
//! posted messages into MTU packets with real RoCEv2 headers, acknowledges what it receives
//! (coalescing configurable), and recovers losses with go-back-N on a NAK or a retransmission
//! timeout. Each QP has a rate limiter, set by `qp_rate` and driven by the congestion control
//! `cc` selects ([`cc`]: DCQCN, DCTCP, TIMELY, Swift or HPCC, some of which also keep a window); per port, PFC frames go first, then control packets (ACK/NAK/CNP), then QPs
//! take turns round-robin. The NIC honours PFC pause frames per priority and can generate them
//! from a receive buffer drained at the host's rate ([`pfc`]). A host with several ports
//! forwards frames not addressed to it (host-to-host fabrics such as rings).
//!
//! The layer above the NIC is an [`Application`]: it posts sends and sees completions through
//! an [`AppApi`] (its [`Transport`]), and can arm its own timers. [`MessageApp`] is the point-to-point workload.

mod api;
mod app;
pub mod cc;
mod config;
pub mod dcqcn;
#[cfg(test)]
mod lone_tests;
pub mod pfc;
pub(crate) mod qp;
mod reaction;
mod receive;
mod relay;
#[cfg(test)]
mod tests;
mod transmit;
mod watch;

use std::collections::VecDeque;
use std::net::Ipv4Addr;
use std::sync::{Arc, LazyLock};

use bytes::Bytes;
use rustc_hash::FxHashMap;

use crate::engine::{Actor, Context, Ctx, Event, Frame, TransmitError};
use crate::packet::{Packet, PacketMeta, Payload};
use crate::route::{flow_hash, qp_udp_src_port, RouteTable};
use crate::units::{Bandwidth, Time};
use crate::wire::{
    self, opcode, AethRepr, BthRepr, Ecn, FrameKind, HeaderTemplate, PacketFields, PfcPauseRepr,
    RethRepr, RoceRepr, RoceRx, Sender,
};

pub use self::api::AppApi;
use self::api::*;
pub use self::app::{
    message_bytes, message_bytes_match, MessageApp, MessageSpec, RecvRecord, SendRecord,
};
use self::cc::{AckSignal, QpCc};
pub use self::cc::{CcConfigError, DctcpConfig, SwiftConfig, TimelyConfig};
pub use self::config::{HostAddr, HostDirectory, HostStats, NicConfig, NicConfigError};
pub use self::dcqcn::{CongestionControl, DcqcnConfig, DcqcnConfigError, RateHistory};
pub use self::pfc::{NicPfcConfig, NicPfcConfigError};
use self::pfc::{PortPause, RxBuffer, CLASSES};
use self::qp::{Qp, RxAction};
pub use self::watch::{FaultWatch, Recovery};
pub use crate::transport::{Application, ClassId, ClassTable, Completion, TrafficClass, Transport};

/// First QP number used; host `i`'s QP toward peer `p` has number `QPN_BASE + p`.
pub const QPN_BASE: u32 = 0x100;

/// Set in the number of a QP opened for a traffic class other than the default.
pub const CLASS_QPN_FLAG: u32 = 1 << 23;
/// Where such a QP number keeps the class number (6 bits: [`ClassTable::MAX`]).
pub const CLASS_QPN_SHIFT: u32 = 17;
/// Most hosts a fabric may have when it uses traffic classes: peer indices must stay below the
/// class bits of the QP number.
pub const CLASS_QPN_HOSTS: u32 = (1 << CLASS_QPN_SHIFT) - QPN_BASE;

/// The number of the QP toward `peer` in traffic class `class`: `QPN_BASE + peer` in the
/// default class 0 (as without classes), else `QPN_BASE + peer + CLASS_QPN_FLAG +
/// (class << CLASS_QPN_SHIFT)`. A host keeps one QP per (peer, class): a QP's traffic class is
/// fixed when it is created, as on RoCE NICs, so the packets of one QP never sit in two
/// priority queues and overtake each other, and the QP number tells a switch the class.
pub fn qp_number(peer: u32, class: ClassId) -> u32 {
    if class == 0 {
        QPN_BASE + peer
    } else {
        QPN_BASE + peer + CLASS_QPN_FLAG + (u32::from(class & 63) << CLASS_QPN_SHIFT)
    }
}

/// The traffic class a QP number (from [`qp_number`]) belongs to.
#[inline]
pub fn qpn_class(qpn: u32) -> ClassId {
    if qpn & CLASS_QPN_FLAG == 0 {
        0
    } else {
        (qpn >> CLASS_QPN_SHIFT) as u8 & 63
    }
}

/// The key of a QP in `qp_index`: its peer and its class.
fn qp_key(peer: u32, class: ClassId) -> u64 {
    u64::from(class) << 32 | u64::from(peer)
}

/// Per-port transmit state of a NIC.
///
/// Two cache lines per frame sent (`repr(C, align(64))`): the control queue, the head of the
/// round-robin list and the pacing timer, then what `Nic::pump` checks besides (the rest of the
/// round-robin list, the PFC and relay queues, boxed since most NICs never use them, and the
/// pause state's summary word); the pause state's per-class array, last, is read only while a
/// class is paused (on a large fabric the NICs do not stay in cache). Until a port of
/// the NIC uses the second line's state, `data_only` lets a frame's send read the first line
/// alone, and so does a port with at most one QP to serve (the list's head is on the first
/// line: a NIC that sends to one peer never reads the list's buffer).
#[derive(Debug, Default)]
#[repr(C, align(64))]
struct NicPort {
    // Line 0.
    /// ACK/NAK/CNP frames, sent before data: held in the engine's slab, where they were built.
    control: VecDeque<ControlFrame>,
    /// The round-robin list of QPs (by index) with data to send: its first entry (valid while
    /// `active_len` > 0) and its length; `active_rest` holds the others in order.
    active_head: u32,
    active_len: u32,
    /// Pacing timer pending at this time (to avoid arming duplicates).
    pace_timer_at: Option<Time>,
    /// Whether relayed frames go next when local data also waits (the two alternate).
    transit_turn: bool,
    /// Set while no port of the NIC has used its second line's state (a PFC frame queued, a
    /// pause applied, a frame relayed; see [`Nic::end_data_only`]): [`Nic::pump`] then reads only
    /// this line of the port, and nothing of the `Nic` beyond its first line to decide.
    data_only: bool,
    // Line 1.
    /// The round-robin list after its head.
    active_rest: QpRing,
    /// PFC frames this NIC generates: sent before anything else and never paused (created
    /// with the first).
    // Boxed on purpose: 8 bytes on the port's second line instead of a 32-byte deque.
    #[allow(clippy::box_collection)]
    mac_control: Option<Box<VecDeque<Packet>>>,
    /// Frames relayed for other hosts, bounded by `relay_buffer` (created with the first).
    #[allow(clippy::box_collection)]
    transit: Option<Box<VecDeque<Packet>>>,
    transit_bytes: u64,
    /// PFC pause state of this port's transmit side.
    pause: PortPause,
}

/// A control frame waiting in a port's control queue: held in the engine's slab (built there,
/// see [`build_held`]), with its length without FCS, so that it leaves without its slot read
/// for it.
#[derive(Debug)]
struct ControlFrame {
    frame: Frame,
    len: u32,
}

/// A FIFO of QP indices (the round-robin list after its head): a ring of a power-of-two
/// size, all inlined, where `VecDeque<u32>::push_back` was a call per data frame sent. 32
/// bytes, as the deque was.
#[derive(Debug, Default)]
struct QpRing {
    /// The slots; the length is zero or a power of two.
    buf: Vec<u32>,
    /// The slot of the first entry.
    head: u32,
    /// Entries held.
    len: u32,
}

impl QpRing {
    /// Appends `i`.
    #[inline(always)]
    fn push_back(&mut self, i: u32) {
        if self.len as usize >= self.buf.len() {
            self.grow();
        }
        let mask = self.buf.len().wrapping_sub(1);
        let at = (self.head as usize).wrapping_add(self.len as usize) & mask;
        if let Some(slot) = self.buf.get_mut(at) {
            *slot = i;
            self.len += 1;
        }
    }

    /// Takes the first entry.
    #[inline(always)]
    fn pop_front(&mut self) -> Option<u32> {
        if self.len == 0 {
            return None;
        }
        let mask = self.buf.len().wrapping_sub(1);
        let head = self.head as usize & mask;
        let i = self.buf.get(head).copied()?;
        self.head = (head.wrapping_add(1) & mask) as u32;
        self.len -= 1;
        Some(i)
    }

    /// Doubles the ring (at least 4 slots), its entries moved to the front in order.
    #[cold]
    #[inline(never)]
    fn grow(&mut self) {
        let n = (self.buf.len() * 2).max(4);
        let mut buf = Vec::with_capacity(n);
        while let Some(i) = self.pop_front() {
            buf.push(i);
        }
        self.len = buf.len() as u32;
        buf.resize(n, 0);
        self.buf = buf;
        self.head = 0;
    }
}

impl NicPort {
    /// QPs in the round-robin list.
    #[inline]
    fn active_len(&self) -> usize {
        self.active_len as usize
    }

    /// Appends QP `i` to the round-robin list.
    #[inline]
    fn push_active(&mut self, i: u32) {
        if self.active_len == 0 {
            self.active_head = i;
        } else {
            self.active_rest.push_back(i);
        }
        self.active_len += 1;
    }

    /// Takes the first QP of the round-robin list; `active_rest` is read only when it holds
    /// one.
    #[inline]
    fn pop_active(&mut self) -> Option<u32> {
        if self.active_len == 0 {
            return None;
        }
        let head = self.active_head;
        self.active_len -= 1;
        if self.active_len > 0 {
            // `active_len` counts `active_rest` and the head: the rest holds one.
            self.active_head = self.active_rest.pop_front().unwrap_or(head);
        }
        Some(head)
    }

    /// Keeps the QPs of the round-robin list for which `keep` holds, in order.
    fn retain_active(&mut self, mut keep: impl FnMut(u32) -> bool) {
        let mut all = Vec::with_capacity(self.active_len());
        while let Some(i) = self.pop_active() {
            all.push(i);
        }
        for i in all {
            if keep(i) {
                self.push_active(i);
            }
        }
    }
}

/// A RoCE NIC: queue pairs, per-port scheduling, frame building and parsing.
///
/// `repr(C, align(64))`: a data frame sent reads two cache lines of its NIC, the first two
/// (the vectors of ports and QPs; the directory, the per-frame settings copied out of
/// [`NicConfig`], the addresses, and the two counters it bumps: [`Nic::stats`] starts at
/// offset 112); the counters of frames received follow on the third, and what only a frame
/// received reads (the QP map, the RTO floor, the class table, `ack_every`) fills one line
/// behind the counters (`Reception`). The header bytes come from a template shared by all NICs
/// (`TEMPLATE`; a template per NIC took a line and a half). Everything else comes after:
/// on a large fabric the NICs do not stay in cache, and each line a frame reads is a miss.
#[repr(C, align(64))]
pub struct Nic {
    // Line 0.
    ports: Box<[NicPort]>,
    /// Queue pairs, created on first use; `reception.qp_index` maps a (peer host, class)
    /// ([`qp_key`]) to its QP.
    qps: Vec<Qp>,
    /// Congestion-control state per QP (same index as `qps`); empty when `cc` is none.
    qp_cc: Vec<QpCc>,
    // Line 1: what a data frame sent reads.
    dir: Arc<HostDirectory>,
    /// What a frame reads of `cfg`, copied here when the NIC is made (`cfg` never changes).
    qp_rate: Option<Bandwidth>,
    /// `cfg.mtu`, at least 1 (a u32: frames are far shorter, and the counters stay on this
    /// line).
    mtu: u32,
    addr: HostAddr,
    control_dscp: u8,
    /// `cfg.ecn_capable` or a scheme that wants ECN: data frames go out ECT(0).
    ecn_data: bool,
    verify_icrc: bool,
    data_mode: bool,
    /// `cfg.cc.wants_int()`, `cfg.cc.echoes_ecn()`, whether `cfg.cc` is DCQCN and whether
    /// `cfg.pfc` is set: `cfg` is read only when one of them says so.
    wants_int: bool,
    echoes_ecn: bool,
    dcqcn: bool,
    pfc: bool,
    /// Whether `watch` is set: an ACK reads `watch` only then.
    watched: bool,
    /// True while no port has used its second line's state (a PFC frame queued, a pause
    /// applied, a frame relayed), and so every port's `data_only` is set; false for good after
    /// [`Nic::end_data_only`].
    data_only: bool,
    /// Counters (from offset 112: the two every data frame sent bumps end line 1, those of
    /// frames received are on line 2).
    pub stats: HostStats,
    /// What only frames received read, on a line of its own.
    reception: Reception,
    /// Fault measurements (messages delayed, loss recoveries); `None` without faults.
    watch: Option<Box<FaultWatch>>,
    completions: VecDeque<Completion>,
    index: u32,
    /// Whether a failover table was taken (a frame without a route is then blackholed).
    failed_over: bool,
    cfg: NicConfig,
    routes: Arc<RouteTable>,
    seed: u64,
    /// The receive buffer toward the host when the NIC generates PFC.
    rx: RxBuffer,
    /// Route tables to take at given times (failover of a multi-port NIC; see
    /// [`Nic::schedule_routes`]); empty without faults.
    reroutes: Vec<(Time, Arc<RouteTable>)>,
}

/// What of a NIC only frames received read (and a send only now and then), on one cache line
/// of its own behind the counters: a data frame sent no longer reads them.
#[repr(C, align(64))]
struct Reception {
    /// A (peer host, class) ([`qp_key`]) to its QP's index in `qps`.
    qp_index: FxHashMap<u64, u32>,
    /// `cfg.rto`.
    rto: Time,
    /// `cfg.classes`.
    classes: ClassTable,
    /// `cfg.ack_every`.
    ack_every: u32,
}

/// One QP's congestion-control state, for reports.
#[derive(Clone, Copy, Debug)]
pub struct QpRateReport<'a> {
    /// The peer host.
    pub peer: u32,
    /// The congestion-control rate in force (for window schemes, the window over the RTT),
    /// `None` at line rate.
    pub rate: Option<Bandwidth>,
    /// Rate changes over time.
    pub history: &'a RateHistory,
}

impl Nic {
    /// Per QP (in creation order), the congestion-control rate and its history; empty when
    /// `cc` is none.
    pub fn qp_rates(&self) -> impl Iterator<Item = QpRateReport<'_>> {
        self.qps
            .iter()
            .zip(&self.qp_cc)
            .map(|(qp, cc)| QpRateReport {
                peer: qp.peer,
                rate: cc.rate().map(dcqcn::to_bandwidth),
                history: cc.history(),
            })
    }

    /// Whether `port` may not send frames of priority `class` at `now` (PFC).
    pub fn is_paused(&self, port: usize, class: u8, now: Time) -> bool {
        self.ports
            .get(port)
            .is_some_and(|p| p.pause.is_paused(class, now))
    }

    /// The NIC's settings.
    pub fn config(&self) -> &NicConfig {
        &self.cfg
    }

    /// The index of the QP toward `peer` in traffic class `class`, created on first use. The
    /// lookup inlined (every data frame received asks), the creation out of line.
    #[inline]
    fn qp_entry(&mut self, peer: u32, class: ClassId, ctx: &impl Context) -> Option<usize> {
        if let Some(&i) = self.reception.qp_index.get(&qp_key(peer, class)) {
            return Some(i as usize);
        }
        self.qp_create(peer, class, ctx)
    }

    /// [`Nic::qp_entry`] of a QP not created yet.
    #[cold]
    #[inline(never)]
    fn qp_create(&mut self, peer: u32, class: ClassId, ctx: &impl Context) -> Option<usize> {
        let key = qp_key(peer, class);
        let dscp = self.cfg.classes.get(class).dscp.unwrap_or(self.cfg.dscp);
        if class != 0 && peer.max(self.index) >= CLASS_QPN_HOSTS {
            // No room for the class in the QP number (the scenario check refuses this first).
            return None;
        }
        {
            let paddr = self.dir.get(peer)?;
            let udp = qp_udp_src_port(self.addr.ip, paddr.ip, peer, self.seed);
            let port = if self.ports.len() == 1 {
                0
            } else {
                self.route_flow(self.addr.ip, paddr.ip, udp)?
            };
            let jitter_seed =
                crate::mix::mix(self.seed ^ u64::from(self.index) << 32 ^ u64::from(peer));
            let remote_qpn = qp_number(self.index, class);
            self.qps
                .push(Qp::new(peer, port, udp, dscp, remote_qpn, jitter_seed));
            let line = ctx
                .channel(port)
                .map_or(0.0, |c| c.rate.bandwidth().bps() as f64);
            if let Some(cc) = self.cfg.cc.new_qp(self.cfg.mtu.bytes().max(1), line) {
                self.qp_cc.push(cc);
            }
            self.reception
                .qp_index
                .insert(key, (self.qps.len() - 1) as u32);
        }
        Some(self.qps.len() - 1)
    }

    fn post_send(
        &mut self,
        dst: u32,
        tag: u64,
        len: u64,
        data: Option<Bytes>,
        class: ClassId,
        ctx: &mut impl Context,
    ) -> bool {
        let mtu = self.cfg.mtu.bytes().max(1);
        let Some(i) = self.qp_entry(dst, class, ctx) else {
            return false;
        };
        if let Some(w) = self.watch.as_deref_mut() {
            w.posted(i, ctx.now());
        }
        let qp = &mut self.qps[i];
        qp.post(tag, len, data, mtu);
        let port = qp.port();
        self.activate(i);
        self.pump(port, ctx);
        true
    }

    /// Ends data-only mode on every port before a port's second line gets state:
    /// [`Nic::pump`] reads the whole port from then on.
    pub(super) fn end_data_only(&mut self) {
        if !std::mem::take(&mut self.data_only) {
            return;
        }
        for np in self.ports.iter_mut() {
            np.data_only = false;
        }
    }

    /// Puts QP `i` into its port's round-robin list if it has data and is not there yet.
    /// Inlined: every ACK received asks (out of line, a call per ACK).
    #[inline(always)]
    fn activate(&mut self, i: usize) {
        if let Some(qp) = self.qps.get_mut(i) {
            if qp.has_data() && !qp.active {
                qp.active = true;
                self.ports[qp.port()].push_active(i as u32);
            }
        }
    }
}

/// The priority class of a frame: DSCP >> 3 (class 0 for frames without an IPv4 header).
fn frame_class(pkt: &Packet) -> u8 {
    wire::dscp(pkt.header()).map_or(0, |d| d >> 3)
}

/// Emits `repr` into a new packet with `payload`, its `repr.bth.pad_count` bytes of pad and
/// the ICRC (computed over real bytes in data mode; zero in timing mode, where the payload
/// bytes do not exist). `int` is an in-band telemetry stack placed after the transport headers
/// (empty without HPCC); `repr.payload_len` must count it.
fn build(repr: &RoceRepr, payload: Payload, int: &[u8]) -> Option<Packet> {
    let std_len = repr.header_len();
    let mut pkt = Packet::with_header_len(std_len + int.len(), payload).ok()?;
    repr.emit(pkt.header_mut()).ok()?;
    finish(&mut pkt, std_len, int, usize::from(repr.bth.pad_count))?;
    Some(pkt)
}

/// [`build`] from the NIC's header template and the frame's own fields (`f.payload_len`
/// counts `int`), written into the engine's packet slab and held there ([`Ctx::hold_mut`]):
/// the same bytes for a fraction of the work, and the frame is written once, in the slot it
/// leaves from, never moved (built on the stack, the 128-byte packet was copied three times
/// on its way to the slab). Returns the held frame and its length without FCS. Inlined into
/// its two callers.
///
/// An ACK or a data frame without extension headers or telemetry (nearly every frame) is
/// checked by [`HeaderTemplate::common_shape`], made with a zero header and its payload and
/// metadata, and its header then written in place ([`HeaderTemplate::write_common_from`]).
/// Any other frame (or fields the common emit refuses) takes the general emit.
#[inline(always)]
fn build_held(
    ctx: &mut impl Context,
    src: &Sender,
    f: &PacketFields,
    payload: Payload,
    int: &[u8],
    meta: PacketMeta,
) -> Option<(Frame, u32)> {
    let t = TEMPLATE.as_ref();
    if int.is_empty() {
        if let (Some(t), Some(shape)) = (t, HeaderTemplate::common_shape(f)) {
            let pad = usize::from(f.pad);
            let lens =
                crate::packet::InlineLens::new(shape.header_len(), pad + wire::ICRC_LEN).ok()?;
            let (frame, pkt) = ctx.hold_mut(Packet::from_inline(
                [0; crate::packet::INLINE_LEN],
                lens,
                payload,
                meta,
            ))?;
            t.write_common_from(src, f, shape, pkt.header_mut());
            // The trailer is still zero: the pad, and the ICRC of timing mode.
            if let Payload::Data(d) = pkt.payload() {
                let (t, n) = wire::padded_trailer(pkt.header(), d, pad);
                if pkt.set_trailer(&t[..n]).is_err() {
                    ctx.drop_frame(frame);
                    return None;
                }
            }
            let len = u32::try_from(pkt.frame_len()).unwrap_or(u32::MAX);
            return Some((frame, len));
        }
    }
    // The fields by value: their copy is made on this rare path only, so the common one
    // need not write them out to memory for a reference.
    let mut pkt = build_general(t, src, *f, payload, int)?;
    pkt.meta = meta;
    let len = u32::try_from(pkt.frame_len()).unwrap_or(u32::MAX);
    Some((ctx.hold(pkt), len))
}

/// [`build_held`] through the template's general emit (extension headers, telemetry).
#[inline(never)]
fn build_general(
    t: Option<&HeaderTemplate>,
    src: &Sender,
    f: PacketFields,
    payload: Payload,
    int: &[u8],
) -> Option<Packet> {
    let std_len = HeaderTemplate::header_len(&f);
    let mut pkt = Packet::with_header_len(std_len + int.len(), payload).ok()?;
    t?.emit_from(src, &f, pkt.header_mut()).ok()?;
    finish(&mut pkt, std_len, int, usize::from(f.pad))?;
    Some(pkt)
}

/// Copies `int` behind the `std_len` bytes of standard headers and sets the trailer: `pad`
/// zero bytes and the ICRC. In place: taking and returning the 128-byte packet by value cost
/// two moves of it per frame built.
#[inline]
fn finish(pkt: &mut Packet, std_len: usize, int: &[u8], pad: usize) -> Option<()> {
    pkt.header_mut().get_mut(std_len..)?.copy_from_slice(int);
    let (t, n) = match pkt.payload() {
        Payload::Data(d) => wire::padded_trailer(pkt.header(), d, pad),
        Payload::Timing(_) => (
            [0; wire::MAX_PAD_LEN + wire::ICRC_LEN],
            pad + wire::ICRC_LEN,
        ),
    };
    pkt.set_trailer(t.get(..n)?).ok()
}

/// The header template of a NIC at `addr` (see [`HeaderTemplate`]): its frames carry TTL 64
/// and the default P_Key 0xFFFF.
fn sender_template(addr: HostAddr) -> Option<HeaderTemplate> {
    let repr = RoceRepr {
        src_mac: addr.mac,
        dst_mac: [0; 6],
        src_ip: addr.ip,
        dst_ip: Ipv4Addr::UNSPECIFIED,
        dscp: 0,
        ecn: Ecn::NotEct,
        ttl: 64,
        ip_id: 0,
        udp_src_port: 0,
        bth: BthRepr {
            pkey: 0xFFFF,
            ..BthRepr::default()
        },
        reth: None,
        aeth: None,
        immdt: None,
        payload_len: 0,
    };
    HeaderTemplate::new(&repr).ok()
}

/// The header template every NIC's frames start from: [`sender_template`] with the source
/// addresses zero, which each NIC writes as its own ([`HeaderTemplate::emit_common_from`]).
/// One for all NICs, it stays cached, where a template per NIC was a cache line of each NIC
/// that every frame built read. `None` if it cannot be emitted, and then neither can a frame.
static TEMPLATE: LazyLock<Option<HeaderTemplate>> = LazyLock::new(|| {
    sender_template(HostAddr {
        ip: Ipv4Addr::UNSPECIFIED,
        mac: [0; 6],
    })
});

/// A host: a NIC plus the application above it.
pub struct Host<A> {
    /// The NIC.
    pub nic: Nic,
    /// The application.
    pub app: A,
}

impl<A: Application> Host<A> {
    /// A host with index `index` (its place in `dir`), its routes (used when it has several
    /// ports or forwards), NIC settings and the run's seed.
    pub fn new(
        index: u32,
        dir: Arc<HostDirectory>,
        routes: Arc<RouteTable>,
        ports: usize,
        cfg: NicConfig,
        seed: u64,
        app: A,
    ) -> Option<Host<A>> {
        let addr = *dir.get(index)?;
        Some(Host {
            nic: Nic {
                index,
                addr,
                dir,
                routes,
                reception: Reception {
                    qp_index: FxHashMap::default(),
                    rto: cfg.rto,
                    classes: cfg.classes.clone(),
                    ack_every: cfg.ack_every,
                },
                qp_rate: cfg.qp_rate,
                mtu: u32::try_from(cfg.mtu.bytes().max(1)).unwrap_or(u32::MAX),
                control_dscp: cfg.control_dscp,
                ecn_data: cfg.ecn_capable || cfg.cc.wants_ecn(),
                verify_icrc: cfg.verify_icrc,
                data_mode: cfg.data_mode,
                wants_int: cfg.cc.wants_int(),
                echoes_ecn: cfg.cc.echoes_ecn(),
                dcqcn: cfg.cc.dcqcn().is_some(),
                pfc: cfg.pfc.is_some(),
                watched: false,
                data_only: true,
                cfg,
                seed,
                qps: Vec::new(),
                ports: (0..ports.max(1))
                    .map(|_| NicPort {
                        data_only: true,
                        ..NicPort::default()
                    })
                    .collect(),
                completions: VecDeque::new(),
                qp_cc: Vec::new(),
                rx: RxBuffer {
                    xoff_sent: vec![[None; CLASSES]; ports.max(1)],
                    ..RxBuffer::default()
                },
                // Coarse (1%, 1 ns): one per host, touched per packet; the 3-digit form's
                // larger count array cost cache misses.
                stats: HostStats {
                    latency: crate::histogram::LatencyHistogram::coarse(),
                    ..HostStats::default()
                },
                reroutes: Vec::new(),
                watch: None,
                failed_over: false,
            },
            app,
        })
    }

    /// Arms the route changes and starts the application (the engine's start, or a test's
    /// through any [`Context`]).
    pub fn on_start(&mut self, ctx: &mut impl Context) {
        for (i, (t, _)) in self.nic.reroutes.iter().enumerate() {
            ctx.set_timer(*t, HostTimer::Reroute(i).token());
        }
        let mut api = AppApi {
            nic: &mut self.nic,
            ctx,
        };
        self.app.start(&mut api);
        self.deliver_completions(ctx);
    }

    /// Reacts to one event (a test's through any [`Context`]; the engine's take
    /// [`Actor::handle`], the same reaction).
    pub fn on_event<C: Context>(&mut self, event: Event, ctx: &mut C) {
        let nic = NicReactions {
            frame: Nic::receive_frame,
            packet: Nic::receive,
            tx_done: Nic::pump,
            timer: Nic::on_timer,
        };
        self.react(event, ctx, nic);
    }

    /// An application timer goes to the application, any other event to the NIC (by `nic`);
    /// then the application sees the completions the event brought.
    #[inline(always)]
    fn react<C: Context>(&mut self, event: Event, ctx: &mut C, nic: NicReactions<C>) {
        match event {
            Event::Frame { port, frame } => (nic.frame)(&mut self.nic, port, frame, ctx),
            Event::TxDone { port } => (nic.tx_done)(&mut self.nic, port, ctx),
            // Hosts hold frames (`holds_frames`): a packet comes only from a caller that
            // says otherwise (an actor wrapping a host).
            Event::Packet { port, packet } => (nic.packet)(&mut self.nic, port, packet, ctx),
            Event::Timer { token } => match HostTimer::of(token) {
                HostTimer::App(t) => {
                    let mut api = AppApi {
                        nic: &mut self.nic,
                        ctx,
                    };
                    self.app.on_timer(t, &mut api);
                }
                timer => (nic.timer)(&mut self.nic, timer, ctx),
            },
        }
        self.deliver_completions(ctx);
    }

    fn deliver_completions(&mut self, ctx: &mut impl Context) {
        while let Some(c) = self.nic.completions.pop_front() {
            let mut api = AppApi {
                nic: &mut self.nic,
                ctx,
            };
            self.app.on_completion(c, &mut api);
        }
    }
}

/// The NIC's reactions to the events a host passes it, for a context `C`: each event's
/// fields go to its reaction as they are (an [`Event`] passed whole is copied).
struct NicReactions<C> {
    frame: fn(&mut Nic, usize, Frame, &mut C),
    packet: fn(&mut Nic, usize, Packet, &mut C),
    tx_done: fn(&mut Nic, usize, &mut C),
    timer: fn(&mut Nic, HostTimer, &mut C),
}

/// The NIC's reactions for the engine's context, made here: the NIC's code is compiled with
/// the rest of this crate, not in the crate that names the application.
impl Nic {
    fn frame_in_engine(&mut self, port: usize, frame: Frame, ctx: &mut Ctx<'_>) {
        self.receive_frame(port, frame, ctx);
    }

    fn packet_in_engine(&mut self, port: usize, packet: Packet, ctx: &mut Ctx<'_>) {
        self.receive(port, packet, ctx);
    }

    fn tx_done_in_engine(&mut self, port: usize, ctx: &mut Ctx<'_>) {
        self.pump(port, ctx);
    }

    fn timer_in_engine(&mut self, timer: HostTimer, ctx: &mut Ctx<'_>) {
        self.on_timer(timer, ctx);
    }

    /// A timer of the NIC fired.
    fn on_timer(&mut self, timer: HostTimer, ctx: &mut impl Context) {
        match timer {
            HostTimer::App(_) => {}
            HostTimer::Pace(port) => {
                if let Some(p) = self.ports.get_mut(port) {
                    p.pace_timer_at = None;
                    self.pump(port, ctx);
                }
            }
            HostTimer::Rto(i) => self.on_rto(i, ctx),
            HostTimer::Rate(i) => self.on_rate_timer(i, ctx),
            HostTimer::Resume(port) if port < self.ports.len() => self.pump(port, ctx),
            HostTimer::Resume(_) => {}
            HostTimer::Drain => self.on_drain(ctx),
            HostTimer::Reroute(i) => self.on_reroute(i, ctx),
        }
    }
}

impl<A: Application> Actor for Host<A> {
    fn start(&mut self, ctx: &mut Ctx<'_>) {
        self.on_start(ctx);
    }

    /// True: a frame that arrives stays in the engine's slab, where the NIC reads it (an
    /// intact frame for this host is never moved out).
    fn holds_frames(&self) -> bool {
        true
    }

    /// Out of line: inlined into the caller's dispatch, it made that too large to inline into
    /// the engine's loop, and every event was then copied on its way.
    #[inline(never)]
    fn handle(&mut self, event: Event, ctx: &mut Ctx<'_>) {
        let nic = NicReactions {
            frame: Nic::frame_in_engine,
            packet: Nic::packet_in_engine,
            tx_done: Nic::tx_done_in_engine,
            timer: Nic::timer_in_engine,
        };
        self.react(event, ctx, nic);
    }
}
