//! Running applications over the flow network: the flow-level [`Transport`].
//!
//! The same [`Application`]s that run on packet-level NICs (the point-to-point workload, the
//! collective executor) run here unchanged: a post becomes a message on the queue pair
//! `(src, dst)`, and the head message of every queue pair is a fluid flow in the
//! [`FlowNetwork`]. The timing of one message follows the packet level's store-and-forward
//! pipeline (docs/ARCHITECTURE.md, "Closed forms": the packet-level refinement):
//!
//! - **Bytes in wire units.** A message of `m` payload bytes is `n = ceil(m / mtu)` packets whose
//!   frames are exactly what the NIC sends ([`write_frame_len`]: RETH on the first, immediate
//!   on the last, ICRC) plus Ethernet's FCS, preamble and gap. On every link of its path the
//!   flow at payload rate `r` uses `r x wire/m` of the capacity (bandwidth / 8); on every link
//!   of the reverse path its ACKs use `r x acks x ack_wire / m` (one ACK per `ack_every`
//!   packets). Alone on a path, the flow's last byte leaves the source after
//!   `wire / B_bottleneck`, as the packets do.
//! - **Pipeline tail.** The message is delivered when its last packet (a partial packet when
//!   `m` is not a multiple of the MTU) has crossed the rest of the path: the sum of the
//!   propagation latencies plus the last packet's serialization on every hop after the first.
//!   A lone message over `h` equal hops thus takes `wire/B + (h-1) last/B + sum(latency)`, the
//!   packet level's closed form to the picosecond.
//! - **Completion.** The sender's [`Completion::SendDone`] comes one ACK later: the ACK's
//!   serialization and latency on every hop of the reverse path.
//! - **Queue pairs.** Messages to the same peer leave in the order posted, one after another
//!   (an RC queue pair); different queue pairs share links max-min fairly, as the NIC's
//!   round-robin and the switches' FIFOs share them on average. `qp_rate` caps a flow.
//!
//! What this does not model (the scenario refuses it at flow fidelity): packet loss and
//! retransmission, PFC, ECN and congestion control, switch schedulers, queueing beyond the
//! fair share (transient queues, incast bursts), real payload bytes. What senders without
//! congestion control would queue on each link is estimated alongside ([`crate::backlog`],
//! [`SimOutput::backlogs`]), so that a caller can say where these figures cannot be trusted.
//! Switch PFC is the exception: [`run_with_pfc`] pauses the ports whose lossless queue
//! reaches XOFF and holds the flows behind the pause ([`crate::pfc`]).
//!
//! Events at one instant run in a fixed order (flow finishes, then events by the order they
//! were scheduled), so a run is deterministic.

use std::collections::{BTreeMap, VecDeque};

use std::sync::atomic::Ordering;

use bytes::Bytes;
use fabemu_fabric::engine::Progress;
use fabemu_fabric::link::{EthernetOverhead, Rate};
use fabemu_fabric::transport::{Application, Completion, Transport};
use fabemu_fabric::units::{Bandwidth, Time};
use fabemu_fabric::wire::{write_frame_len, ACK_FRAME_LEN};
use rustc_hash::FxHashMap;

use crate::pfc::Holds;
use crate::{
    BacklogPeak, Backlogs, FlowError, FlowNetwork, LinkId, PathId, PauseThreshold, PauseTotal,
    QueueEvent, QueueNetwork,
};

/// One hop of a routed path: the link direction crossed, its rate and latency.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hop {
    /// The link direction (an index into the network's capacities).
    pub link: LinkId,
    /// Its bandwidth.
    pub bandwidth: Bandwidth,
    /// Its propagation latency.
    pub latency: Time,
}

/// Where messages go: the hops from one host to another, as the packets would take them.
pub trait PathSource {
    /// Appends to `out` the hops of the path from host `src` to host `dst`, in order from the
    /// source; returns false when there is none.
    fn path(&self, src: u32, dst: u32, out: &mut Vec<Hop>) -> bool;
}

/// Transport settings the flow model needs (the scenario's `nic` and `ethernet` sections).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SimConfig {
    /// Payload bytes per packet.
    pub mtu: u64,
    /// One ACK per this many packets (and on a message's last).
    pub ack_every: u32,
    /// Per-frame wire overhead.
    pub overhead: EthernetOverhead,
    /// Per queue pair rate cap (in wire bytes, as the NIC's rate limiter counts).
    pub qp_rate: Option<Bandwidth>,
    /// Nothing after this time is run.
    pub until: Time,
    /// How flows share links.
    pub model: FlowModel,
}

/// How flows share the links they cross.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FlowModel {
    /// Weighted max-min fair rates ([`FlowNetwork`]): exact where every flow meets its
    /// bottleneck at its fair share (symmetric collectives, incasts); the fastest model.
    #[default]
    MaxMin,
    /// Fluid FIFO queues ([`QueueNetwork`]): overloaded links serve flows in proportion to the
    /// rates they arrive with and queue the rest, as switches without congestion control do.
    Queues,
}

/// What a message is on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MessageWire {
    /// Packets.
    pub packets: u64,
    /// Wire bytes of all its packets.
    pub wire_bytes: u64,
    /// Wire bytes of its last packet.
    pub last_packet_wire: u64,
    /// ACK frames the receiver sends for it.
    pub acks: u64,
    /// Wire bytes of one ACK.
    pub ack_wire: u64,
}

impl MessageWire {
    /// The packets of a `len`-byte RDMA WRITE with immediate at `cfg`'s MTU and overhead.
    pub fn of(len: u64, cfg: &SimConfig) -> MessageWire {
        let mtu = cfg.mtu.max(1);
        let n = len.div_ceil(mtu).max(1);
        let o = &cfg.overhead;
        let frame = |payload: u64, first: bool, last: bool| {
            o.wire_bytes(write_frame_len(payload as usize, first, last))
        };
        let last_payload = len - (n - 1) * mtu;
        let (wire, last) = if n == 1 {
            let w = frame(len, true, true);
            (w, w)
        } else {
            let last = frame(last_payload, false, true);
            (
                frame(mtu, true, false) + (n - 2) * frame(mtu, false, false) + last,
                last,
            )
        };
        MessageWire {
            packets: n,
            wire_bytes: wire,
            last_packet_wire: last,
            acks: n.div_ceil(u64::from(cfg.ack_every.max(1))),
            ack_wire: o.wire_bytes(ACK_FRAME_LEN),
        }
    }
}

/// Per host counters.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HostCounters {
    /// Data packets the host's messages were cut into.
    pub data_packets_sent: u64,
    /// Payload bytes sent.
    pub data_bytes_sent: u64,
    /// ACK frames sent (for messages received).
    pub acks_sent: u64,
    /// Data packets received.
    pub data_packets_received: u64,
    /// Messages posted.
    pub messages_sent: u64,
    /// Messages delivered to this host.
    pub messages_received: u64,
}

/// Per link direction counters.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct LinkCounters {
    /// Frames (data and ACK) that crossed it.
    pub frames: u64,
    /// Wire bytes that crossed it.
    pub wire_bytes: u64,
}

/// Counters of a run.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SimStats {
    /// Events handled (timers, deliveries, completions, flow finishes).
    pub events: u64,
    /// Flows run.
    pub flows: u64,
    /// Frames times links crossed, as the packet level would count them.
    pub packet_hops: u64,
    /// Time of the last event handled.
    pub end_time: Time,
    /// True when the run stopped at `until` with work pending.
    pub stopped_at_limit: bool,
    /// Largest number of flows active at once.
    pub peak_flows: u64,
    /// True when the observer's cancel flag stopped the run early (the figures describe the
    /// run up to `end_time`).
    pub cancelled: bool,
}

/// The result of a run.
pub struct SimOutput<A> {
    /// The applications as they ended, by host.
    pub apps: Vec<A>,
    /// Per host.
    pub hosts: Vec<HostCounters>,
    /// Per link direction.
    pub links: Vec<LinkCounters>,
    /// Per link direction, the largest queue senders without congestion control would have
    /// built there ([`crate::backlog`]): where the flow model's assumption failed.
    pub backlogs: Vec<BacklogPeak>,
    /// Per link direction, how long its PFC port was paused ([`run_with_pfc`]; empty when
    /// PFC was not modelled).
    pub pauses: Vec<PauseTotal>,
    /// Counters.
    pub stats: SimStats,
}

/// A message in a queue pair or on its way: kept small (24 bytes), since tens of thousands
/// wait in the agenda's queues at once. Its [`MessageWire`] is a function of its length,
/// memoized by the queue pair; the payload (data mode only) is boxed.
struct Msg {
    tag: u64,
    len: u64,
    data: Option<Box<Bytes>>,
}

impl Msg {
    /// What an empty queue pair holds as its head (see [`Qp::queued`]).
    const NONE: Msg = Msg {
        tag: 0,
        len: 0,
        data: None,
    };
}

/// A queue pair: its path and its messages. What a message needs of the path is kept here in
/// a few words (the pipeline tail, the path's id and length), and the counters it moves are
/// summed here too (they go to hosts and links at the end of the run), so that a message
/// touches its queue pair and not its hops, two hosts' counters and every link's.
///
/// One cache line (`repr(C, align(64))`): all a message reads of its queue pair when it is
/// posted, started and when it leaves. With thousands of queue pairs each taking a message
/// in turn, each line a message reads is a miss; the second line the wire memo and the start
/// count were on cost one per message. The wire memo is the run's ([`Core::wire`]: a
/// function of the length alone), and the rest, rarely read, is in [`QpCold`]. Its delivery
/// reads none (the event carries the hosts), and the post finds the queue pair through
/// `Core::last_qp`.
#[repr(C, align(64))]
struct Qp {
    /// The head message when `queued > 0`, on the wire whenever there is one (see
    /// [`Qp::push`]); [`Msg::NONE`] otherwise.
    head: Msg,
    /// Messages queued, the head included: counted here so that taking the head reads the
    /// messages behind it (in [`QpCold::rest`]) only when there are some.
    queued: u32,
    /// The hosts: the delivery event carries them.
    src: u32,
    dst: u32,
    /// The path and way back as registered with the flow network, with the weights of a
    /// message of `memo_len` bytes (set again when that changes; registered at the second
    /// start): a start passes its id instead of lists the network would check and sort at
    /// every message.
    path: Option<PathId>,
    /// `links[..split]` is the path to `dst`, `links[split..]` the way back (ACKs), in
    /// [`QpCold`]; `n_links` of them.
    split: u16,
    n_links: u16,
    /// Messages of `memo_len` bytes started since it last changed: with the run's wire memo
    /// they are the counters (packets, ACKs, messages, bytes) a start would otherwise add
    /// to, each on every message (see [`Core::flush`]).
    started_here: u32,
    /// The length of the queue pair's last message started (a queue pair's messages are
    /// usually of one length; `u64::MAX` before the first).
    memo_len: u64,
    /// The pipeline tail (see `Core::deliver_after_tail`) of a message of `memo_len` bytes.
    tail: Time,
}

/// What a message rarely reads of its queue pair (see [`Qp`]): the messages behind the head,
/// the counters of the messages started before the length last changed, the link directions
/// and hops, the way back. By queue pair, beside [`Core::qps`].
struct QpCold {
    /// The link directions when there are at most [`INLINE_LINKS`] (see [`QpCold::links`]):
    /// the backlog estimate reads a path at every message of a tracked one, and a ring's
    /// neighbours mostly share a leaf switch (two hops each way).
    inline: [LinkId; INLINE_LINKS],
    /// `links[..split]` to `dst` (copies of [`Qp`]'s, so that the links are read from here).
    split: u16,
    n_links: u16,
    /// The messages behind the head.
    rest: VecDeque<Msg>,
    /// Started before `memo_len` last changed ([`Core::flush`]): data frames (on each link of
    /// the path), ACK frames (on each of the way back), messages and their payload bytes. The
    /// hosts' counters ([`HostCounters`]) are derived when the run ends: what was posted is
    /// what started plus what still waits; what was delivered is what was posted minus what
    /// is still queued or on its way.
    frames: u64,
    ack_frames: u64,
    started: u64,
    started_bytes: u64,
    /// All link directions (`links[..split]` to `dst`): read through [`QpCold::links`].
    links: Box<[LinkId]>,
    /// The path's hops (`hops[..split]` to `dst`), for a tail.
    hops: Box<[Hop]>,
    /// What an ACK takes on the way back: each hop's latency and serialization.
    back: Time,
}

/// The link directions of queue pair `q`'s path to its destination (empty if there is none).
fn forward(cold: &[QpCold], q: u32) -> &[LinkId] {
    cold.get(q as usize)
        .map_or(&[][..], |c| &c.links()[..usize::from(c.split)])
}

/// Link directions a queue pair holds inline (see [`QpCold::inline`]).
const INLINE_LINKS: usize = 4;

/// What a message's start needs of its [`MessageWire`], with the per-byte weights it puts
/// on the path and the way back (two divisions a message otherwise). The wire bytes are not
/// kept: only zero-length messages and the queue model read them (from [`MessageWire::of`]).
#[derive(Clone, Copy, Debug)]
struct WireMemo {
    packets: u64,
    acks: u64,
    /// `wire_bytes / len`: link capacity used per payload byte on the path (0 for `len` 0).
    data_w: f64,
    /// `acks x ack_wire / len`: the same of its ACKs on the way back (0 for `len` 0).
    ack_w: f64,
}

impl WireMemo {
    fn of(len: u64, cfg: &SimConfig) -> WireMemo {
        let w = MessageWire::of(len, cfg);
        let (data_w, ack_w) = if len == 0 {
            (0.0, 0.0)
        } else {
            let m = len as f64;
            (w.wire_bytes as f64 / m, (w.acks * w.ack_wire) as f64 / m)
        };
        WireMemo {
            packets: w.packets,
            acks: w.acks,
            data_w,
            ack_w,
        }
    }
}

/// Wire memos of the run by message length, direct-mapped ([`Core::wire`]): a run's
/// messages are of a few lengths, and a memo is a function of the length alone.
const WIRE_SLOTS: usize = 8;

/// The slot of length `len` in [`Core::wires`]: lengths are often multiples of large powers
/// of two, so the high bits of a multiplicative hash pick it.
#[inline]
fn wire_slot(len: u64) -> usize {
    (len.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 61) as usize % WIRE_SLOTS
}

impl Qp {
    /// Queues `msg` (behind the head in `rest`); true when it is the head (the queue was
    /// idle: the caller starts it).
    #[inline]
    fn push(&mut self, rest: &mut VecDeque<Msg>, msg: Msg) -> bool {
        self.queued += 1;
        if self.queued == 1 {
            self.head = msg;
            true
        } else {
            rest.push_back(msg);
            false
        }
    }

    /// The length of the head message, if there is one.
    #[inline]
    fn front_len(&self) -> Option<u64> {
        (self.queued > 0).then_some(self.head.len)
    }
}

impl QpCold {
    /// The link directions: `[..split]` the path to `dst`, `[split..]` the way back.
    #[inline]
    fn links(&self) -> &[LinkId] {
        match self.inline.get(..usize::from(self.n_links)) {
            Some(l) => l,
            None => &self.links,
        }
    }
}

/// The pending events in the order they run: by time, then in the order they were scheduled.
/// A ring's thousands of messages end at a handful of instants, so the events are kept in one
/// FIFO per instant (a map of few keys) instead of a heap of all of them: popping is a look at
/// the first instant's queue, not a sift through a heap whose entries point into a slab.
/// Events scheduled one after another mostly go to the same instant (every rank of a ring
/// delivers at the same time), and popping goes on at the first instant until it is empty, so
/// both are remembered: the map is searched only when an event goes to another instant and
/// when an instant's queue runs dry.
#[derive(Default)]
struct Agenda {
    /// Instant -> its queue in `queues`.
    at: BTreeMap<Time, u32>,
    queues: Vec<VecDeque<Ev>>,
    /// Queues of `queues` not in use (kept with their buffers: no allocation per instant).
    free: Vec<u32>,
    /// The instant an event was last pushed to, and its queue.
    last: Option<(Time, u32)>,
    /// The first instant and its queue, when known.
    first: Option<(Time, u32)>,
}

impl Agenda {
    /// Queues `ev` at `at`. Inlined: mostly the instant of the last push.
    #[inline]
    fn push(&mut self, at: Time, ev: Ev) {
        let q = match self.last {
            Some((t, q)) if t == at => q,
            _ => self.queue_of(at),
        };
        if let Some(queue) = self.queues.get_mut(q as usize) {
            queue.push_back(ev);
        }
    }

    /// The queue of instant `at` (made if there is none), remembered as the last pushed to.
    #[inline(never)]
    fn queue_of(&mut self, at: Time) -> u32 {
        let queues = &mut self.queues;
        let free = &mut self.free;
        let q = *self.at.entry(at).or_insert_with(|| {
            free.pop().unwrap_or_else(|| {
                queues.push(VecDeque::new());
                (queues.len() - 1) as u32
            })
        });
        self.last = Some((at, q));
        if self.first.is_some_and(|(t, _)| at < t) {
            self.first = Some((at, q));
        }
        q
    }

    /// The first instant and its queue.
    #[inline]
    fn front(&mut self) -> Option<(Time, u32)> {
        if self.first.is_none() {
            self.first = self.at.first_key_value().map(|(t, q)| (*t, *q));
        }
        self.first
    }

    /// The time of the next event.
    #[inline]
    fn peek(&mut self) -> Option<Time> {
        self.front().map(|(t, _)| t)
    }

    #[inline]
    fn pop(&mut self) -> Option<(Time, Ev)> {
        let (t, q) = self.front()?;
        let queue = self.queues.get_mut(q as usize)?;
        let ev = queue.pop_front();
        if queue.is_empty() {
            self.at.remove(&t);
            self.free.push(q);
            self.first = None;
            if self.last.is_some_and(|(_, l)| l == q) {
                self.last = None;
            }
        }
        ev.map(|ev| (t, ev))
    }
}

/// What an [`Ev`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// Host `id`'s timer `msg.tag`.
    Timer,
    /// A zero-length message of queue pair `id` left the source (its only packet did).
    TxDone,
    /// Message `msg` of queue pair `id` arrives at `dst` from `src`: the hosts come with it
    /// (read from the queue pair's line when the message left), so that the delivery reads no
    /// queue pair.
    Deliver,
    /// Queue pair `id`'s message tagged `msg.tag` is acknowledged.
    SendDone,
}

/// An event: one flat record of aligned words (`repr(C)`, 40 bytes) rather than an enum of
/// variants laid out apart, so that taking it from the agenda to its handler moves the same
/// words the push stored (an enum's 36-byte payload was copied in overlapping pieces that
/// the loads after them could not take from the stores: a stall of every event).
#[repr(C)]
struct Ev {
    kind: Kind,
    /// The host of a timer, the queue pair of the others.
    id: u32,
    /// The hosts of a delivery.
    src: u32,
    dst: u32,
    /// The message of a delivery; a timer's token and an acknowledgement's tag are its `tag`.
    msg: Msg,
}

impl Ev {
    fn timer(host: u32, token: u64) -> Ev {
        Ev::of(Kind::Timer, host, token)
    }

    fn tx_done(qp: u32) -> Ev {
        Ev::of(Kind::TxDone, qp, 0)
    }

    fn send_done(qp: u32, tag: u64) -> Ev {
        Ev::of(Kind::SendDone, qp, tag)
    }

    fn of(kind: Kind, id: u32, tag: u64) -> Ev {
        Ev {
            kind,
            id,
            src: 0,
            dst: 0,
            msg: Msg {
                tag,
                len: 0,
                data: None,
            },
        }
    }
}

struct Core<'p> {
    now: Time,
    cfg: SimConfig,
    paths: &'p dyn PathSource,
    net: FlowNetwork,
    /// The queue model's network (used instead of `net` when `cfg.model` says so).
    qnet: Option<QueueNetwork>,
    /// Queue model: messages whose source is done, waiting for their last byte to drain, by
    /// token (`(queue pair, message)`), and the next token.
    draining: FxHashMap<u64, (u32, Msg)>,
    sending: FxHashMap<u64, u32>,
    next_token: u64,
    qevents: Vec<QueueEvent>,
    /// The queue pairs: what every message reads (one line each), and the rest, by index.
    qps: Vec<Qp>,
    cold: Vec<QpCold>,
    /// The run's wire memos (see [`WIRE_SLOTS`]): `(length, memo)`, `u64::MAX` for none.
    wires: [(u64, WireMemo); WIRE_SLOTS],
    qp_index: FxHashMap<(u32, u32), u32>,
    /// Per source host, the queue pair it posted to last and its destination (a host sends to
    /// few peers): finding it reads this dense list, not the queue pair's cold key.
    last_qp: Vec<(u32, u32)>,
    agenda: Agenda,
    links: Vec<LinkCounters>,
    stats: SimStats,
    usage: Vec<(LinkId, f64)>,
    acks: Vec<(LinkId, f64)>,
    scratch: Vec<Hop>,
    /// The first flow the network refused (a bug in the caller's numbers): the run stops.
    error: Option<FlowError>,
    /// Open-loop queue estimates (see [`crate::backlog`]).
    backlogs: Backlogs,
    /// PFC's holds, when it is modelled ([`run_with_pfc`]).
    pfc: Option<Box<Holds>>,
}

impl Core<'_> {
    #[inline]
    fn schedule(&mut self, at: Time, ev: Ev) {
        self.agenda.push(at.max(self.now), ev);
    }

    fn qp(&mut self, src: u32, dst: u32) -> Option<u32> {
        if let Some(&(q, d)) = self.last_qp.get(src as usize) {
            if d == dst && (q as usize) < self.qps.len() {
                return Some(q);
            }
        }
        if let Some(&q) = self.qp_index.get(&(src, dst)) {
            if let Some(l) = self.last_qp.get_mut(src as usize) {
                *l = (q, dst);
            }
            return Some(q);
        }
        self.scratch.clear();
        if src == dst || !self.paths.path(src, dst, &mut self.scratch) || self.scratch.is_empty() {
            return None;
        }
        let split = self.scratch.len();
        if !self.paths.path(dst, src, &mut self.scratch) {
            return None;
        }
        let (Ok(split16), Ok(n_links)) = (u16::try_from(split), u16::try_from(self.scratch.len()))
        else {
            return None;
        };
        let q = self.qps.len() as u32;
        let ack_wire = self.cfg.overhead.wire_bytes(ACK_FRAME_LEN);
        let mut back = Time::ZERO;
        for h in &self.scratch[split..] {
            back = back + h.latency + Rate::new(h.bandwidth).serialization_time(ack_wire);
        }
        self.qps.push(Qp {
            head: Msg::NONE,
            queued: 0,
            src,
            dst,
            path: None,
            split: split16,
            n_links,
            started_here: 0,
            memo_len: u64::MAX,
            tail: Time::ZERO,
        });
        self.cold.push(QpCold {
            inline: {
                let mut a = [LinkId(0); INLINE_LINKS];
                for (x, h) in a.iter_mut().zip(&self.scratch) {
                    *x = h.link;
                }
                a
            },
            split: split16,
            n_links,
            rest: VecDeque::new(),
            frames: 0,
            ack_frames: 0,
            started: 0,
            started_bytes: 0,
            links: self.scratch.iter().map(|h| h.link).collect(),
            hops: self.scratch.as_slice().into(),
            back,
        });
        self.qp_index.insert((src, dst), q);
        if let Some(l) = self.last_qp.get_mut(src as usize) {
            *l = (q, dst);
        }
        Some(q)
    }

    fn post(&mut self, src: u32, dst: u32, tag: u64, len: u64, data: Option<Bytes>) -> bool {
        let Some(q) = self.qp(src, dst) else {
            return false;
        };
        // The head message is on the wire whenever there is one (`start_head`), so the queue
        // was idle if this one is the head.
        let (Some(qp), Some(cold)) = (self.qps.get_mut(q as usize), self.cold.get_mut(q as usize))
        else {
            return false;
        };
        let msg = Msg {
            tag,
            len,
            data: data.map(Box::new),
        };
        if qp.push(&mut cold.rest, msg) {
            self.start_head(q);
        }
        true
    }

    /// Takes queue pair `q`'s head message; the next one (if any) becomes the head.
    #[inline]
    fn take_head(&mut self, q: u32) -> Option<Msg> {
        let qp = self.qps.get_mut(q as usize)?;
        if qp.queued == 0 {
            return None;
        }
        qp.queued -= 1;
        let next = if qp.queued > 0 {
            self.cold
                .get_mut(q as usize)
                .and_then(|c| c.rest.pop_front())
                .unwrap_or(Msg::NONE)
        } else {
            Msg::NONE
        };
        Some(std::mem::replace(&mut qp.head, next))
    }

    /// The wire memo of a message of `len` bytes (the run's, see [`Core::wires`]). Inlined:
    /// it is a comparison when the memo holds.
    #[inline]
    fn wire(&mut self, len: u64) -> WireMemo {
        let slot = &mut self.wires[wire_slot(len)];
        if slot.0 != len {
            *slot = (len, WireMemo::of(len, &self.cfg));
        }
        slot.1
    }

    /// Adds queue pair `q`'s starts counted in `started_here` (messages of `memo_len` bytes)
    /// to its counters: done before `memo_len` changes and at the end.
    fn flush(&mut self, q: u32) {
        let Some(qp) = self.qps.get_mut(q as usize) else {
            return;
        };
        let n = u64::from(std::mem::take(&mut qp.started_here));
        if n == 0 {
            return;
        }
        let len = qp.memo_len;
        let w = self.wire(len);
        if let Some(c) = self.cold.get_mut(q as usize) {
            c.frames += n * w.packets;
            c.ack_frames += n * w.acks;
            c.started += n;
            c.started_bytes += n * len;
        }
    }

    /// Queue pair `q`'s messages are now of `len` bytes: its counters of the last length are
    /// flushed, and the pipeline tail of the new one is worked out. Out of line: a queue
    /// pair's messages are mostly of one length.
    #[cold]
    #[inline(never)]
    fn remember(&mut self, q: u32, len: u64) {
        self.flush(q);
        let tail = self.tail_of(q, len);
        if let Some(qp) = self.qps.get_mut(q as usize) {
            qp.memo_len = len;
            qp.tail = tail;
        }
    }

    /// The pipeline tail of a message of `len` bytes on queue pair `q`'s path: the sum of the
    /// propagation latencies plus the last packet's serialization on every hop after the
    /// first.
    fn tail_of(&self, q: u32, len: u64) -> Time {
        let last = MessageWire::of(len, &self.cfg).last_packet_wire;
        let mut tail = Time::ZERO;
        if let Some(c) = self.cold.get(q as usize) {
            for (i, h) in c.hops[..usize::from(c.split)].iter().enumerate() {
                tail = tail + h.latency;
                if i > 0 {
                    tail = tail + Rate::new(h.bandwidth).serialization_time(last);
                }
            }
        }
        tail
    }

    /// Puts queue pair `q`'s head message on the wire.
    fn start_head(&mut self, q: u32) {
        let Some(qp) = self.qps.get(q as usize) else {
            return;
        };
        let Some(len) = qp.front_len() else {
            return;
        };
        let fresh = qp.memo_len == len;
        if !fresh || qp.started_here == u32::MAX {
            self.remember(q, len);
        }
        let w = self.wire(len);
        let qp = &mut self.qps[q as usize];
        qp.started_here += 1;
        let (split, n_links, path, src) =
            (u64::from(qp.split), u64::from(qp.n_links), qp.path, qp.src);
        self.stats.packet_hops += w.packets * split + w.acks * (n_links - split);
        self.stats.flows += 1;
        if len > 0 {
            let cap = self.cfg.qp_rate.map(|r| r.bps() as f64 / 8.0);
            let bytes = w.data_w * len as f64;
            let cold = &self.cold;
            self.backlogs
                .start(self.now, q, src, bytes, cap, |k| forward(cold, k));
        }
        if len == 0 || self.qnet.is_some() {
            self.start_other(q, len);
            return;
        }
        let cap = self.cfg.qp_rate.map(|r| r.bps() as f64 / 8.0 / w.data_w);
        let path = match (fresh, path) {
            (true, Some(p)) => Some(p),
            // A queue pair's first message starts on lists, as it would once registered: the
            // path is registered at its second message of one length (in an all-to-all, most
            // queue pairs carry one message, and registering it would only add a copy).
            (false, None) => {
                self.start_lists(q, w, len, cap);
                return;
            }
            _ => self.set_path(q, w),
        };
        // ACKs reserve their share of the reverse path instead of sharing it: see
        // `FlowNetwork::start_with_acks` (the rates are the same to 2e-5; the components stay
        // as small as the data paths make them).
        let started = match path {
            Some(p) => self.net.start_on_path(self.now, p, len, cap, u64::from(q)),
            // Only when registering it failed (the error is kept already).
            None => return,
        };
        match started {
            Ok(f) => {
                if let Some(h) = self.pfc.as_deref_mut() {
                    h.started(q, f, w.data_w, cap);
                }
            }
            Err(e) => {
                self.error.get_or_insert(e);
            }
        }
        self.stats.peak_flows = self.stats.peak_flows.max(self.net.active() as u64);
    }

    /// Starts the head message of queue pair `q` (`len` bytes, wire memo `w`) on its link
    /// lists, without registering its path (see [`Core::start_head`]).
    #[cold]
    #[inline(never)]
    fn start_lists(&mut self, q: u32, w: WireMemo, len: u64, cap: Option<f64>) {
        self.fill_lists(q, w);
        match self
            .net
            .start_with_acks(self.now, &self.usage, &self.acks, len, cap, u64::from(q))
        {
            Ok(f) => {
                if let Some(h) = self.pfc.as_deref_mut() {
                    h.started(q, f, w.data_w, cap);
                }
            }
            Err(e) => {
                self.error.get_or_insert(e);
            }
        }
        self.stats.peak_flows = self.stats.peak_flows.max(self.net.active() as u64);
    }

    /// Fills `usage` and `acks` with queue pair `q`'s path and way back at the weights of
    /// the memo `w`.
    fn fill_lists(&mut self, q: u32, w: WireMemo) {
        let c = &self.cold[q as usize];
        let (fwd, rev) = c.links().split_at(usize::from(c.split));
        self.usage.clear();
        self.usage.extend(fwd.iter().map(|&l| (l, w.data_w)));
        self.acks.clear();
        self.acks.extend(rev.iter().map(|&l| (l, w.ack_w)));
    }

    /// Gives queue pair `q`'s registered path the weights of the memo `w` (its messages'
    /// length changed), registering it at its first start; returns it (`None` if that
    /// failed: the error is kept). Out of line, a queue pair's messages are mostly of one
    /// length.
    #[cold]
    #[inline(never)]
    fn set_path(&mut self, q: u32, w: WireMemo) -> Option<PathId> {
        self.fill_lists(q, w);
        let set = match self.qps[q as usize].path {
            Some(p) => self.net.set_path(p, &self.usage, &self.acks).map(|()| p),
            None => self.net.add_path(&self.usage, &self.acks),
        };
        match set {
            Ok(p) => {
                self.qps[q as usize].path = Some(p);
                Some(p)
            }
            Err(e) => {
                self.error.get_or_insert(e);
                None
            }
        }
    }

    /// [`start_head`](Self::start_head) of a zero-length message, or in the queue model: out
    /// of line, so that the max-min model's start does not carry it.
    #[cold]
    #[inline(never)]
    fn start_other(&mut self, q: u32, len: u64) {
        let w = MessageWire::of(len, &self.cfg);
        let c = &self.cold[q as usize];
        let (fwd, rev) = c.links().split_at(usize::from(c.split));
        if len == 0 {
            // No payload to share a link with: one minimum frame, at the first hop's rate.
            for l in fwd {
                self.links[l.0 as usize].wire_bytes += w.wire_bytes;
            }
            for l in rev {
                self.links[l.0 as usize].wire_bytes += w.acks * w.ack_wire;
            }
            let t = self.now + Rate::new(c.hops[0].bandwidth).serialization_time(w.wire_bytes);
            self.schedule(t, Ev::tx_done(q));
            return;
        }
        if let Some(qnet) = self.qnet.as_mut() {
            let token = self.next_token;
            self.next_token += 1;
            self.sending.insert(token, q);
            let cap = self.cfg.qp_rate.map(|r| r.bps() as f64 / 8.0);
            if let Err(e) = qnet.start(
                fwd,
                rev,
                w.wire_bytes as f64,
                (w.acks * w.ack_wire) as f64,
                cap,
                token,
            ) {
                self.error.get_or_insert(e);
            }
            self.stats.peak_flows = self.stats.peak_flows.max(qnet.active() as u64);
        }
    }

    /// Queue model: what a message did in the queue network.
    fn queue_event(&mut self, ev: QueueEvent) {
        match ev {
            QueueEvent::SourceDone(token) => {
                let Some(q) = self.sending.remove(&token) else {
                    return;
                };
                self.backlog_done(q);
                if let Some(msg) = self.take_head(q) {
                    self.draining.insert(token, (q, msg));
                }
                self.start_head(q);
            }
            QueueEvent::Drained(token) => {
                if let Some((q, msg)) = self.draining.remove(&token) {
                    self.deliver_after_tail(q, msg);
                }
            }
        }
    }

    /// Queue pair `q`'s head message has left the source: deliver it after the pipeline tail,
    /// start the next.
    fn tx_done(&mut self, q: u32) {
        self.backlog_done(q);
        if let Some(h) = self.pfc.as_deref_mut() {
            h.finished(q);
        }
        let Some(msg) = self.take_head(q) else {
            return;
        };
        self.deliver_after_tail(q, msg);
        // Asked here, not by the call: a collective's queue pair is mostly empty by now.
        if self.qps.get(q as usize).is_some_and(|qp| qp.queued > 0) {
            self.start_head(q);
        }
    }

    /// Queue pair `q`'s head message has left its source: its arrivals end.
    fn backlog_done(&mut self, q: u32) {
        let cold = &self.cold;
        self.backlogs.finish(self.now, q, &|k| forward(cold, k));
    }

    /// Message `msg` of queue pair `q` has left the first hop (or, with queues, the last
    /// queue): it is delivered once its last packet has crossed the rest of the path.
    fn deliver_after_tail(&mut self, q: u32, msg: Msg) {
        let Some(qp) = self.qps.get(q as usize) else {
            return;
        };
        let (src, dst) = (qp.src, qp.dst);
        // The queue model may deliver a message after the next one, of another length, has
        // started.
        let tail = if qp.memo_len == msg.len {
            qp.tail
        } else {
            self.tail_of(q, msg.len)
        };
        self.schedule(
            self.now + tail,
            Ev {
                kind: Kind::Deliver,
                id: q,
                src,
                dst,
                msg,
            },
        );
    }
}

impl Core<'_> {
    /// PFC at the end of an instant: the ports' pauses and resumes up to now, and the holds
    /// they put on the flows ([`crate::pfc`]). Returns when a port will next pause or resume.
    #[cold]
    #[inline(never)]
    fn settle_pfc(&mut self) -> Option<Time> {
        let cold = &self.cold;
        let changed = self.backlogs.settle_pauses(self.now, |k| forward(cold, k));
        let h = self.pfc.as_deref_mut()?;
        let paused: Vec<LinkId> = self.backlogs.paused().collect();
        if changed || !paused.is_empty() {
            let b = &self.backlogs;
            if let Err(e) = h.hold(
                &mut self.net,
                self.now.ps(),
                changed,
                &paused,
                |l| b.is_pause_port(l),
                |k| forward(cold, k),
            ) {
                self.error.get_or_insert(e);
            }
        }
        self.backlogs.next_pause_change()
    }

    /// Queue model: runs the queue network's events up to `t`; false for the max-min model.
    /// Inlined: the max-min model asks this at every event.
    #[inline]
    fn advance_queues(&mut self, t: Time) -> bool {
        if self.qnet.is_none() {
            return false;
        }
        self.run_queues(t);
        true
    }

    /// Queue model: the body of [`advance_queues`](Self::advance_queues).
    fn run_queues(&mut self, t: Time) {
        let mut evs = std::mem::take(&mut self.qevents);
        while let Some(q) = self.qnet.as_mut() {
            q.advance(t, &mut evs);
            if evs.is_empty() {
                break;
            }
            for ev in evs.drain(..) {
                self.stats.events += 1;
                self.queue_event(ev);
            }
        }
        self.qevents = evs;
    }
}

struct Api<'c, 'p> {
    core: &'c mut Core<'p>,
    host: u32,
}

impl Transport for Api<'_, '_> {
    fn now(&self) -> Time {
        self.core.now
    }
    fn host(&self) -> u32 {
        self.host
    }
    fn post_send(&mut self, dst: u32, tag: u64, len: u64, data: Option<Bytes>) -> bool {
        self.core.post(self.host, dst, tag, len, data)
    }
    fn set_timer(&mut self, at: Time, token: u64) {
        let host = self.host;
        self.core.schedule(at, Ev::timer(host, token));
    }
}

/// Runs `apps` (one per host, by host index) over a network of link directions with
/// `capacities` (bytes per second each), routing by `paths`. Fails when the network refuses a
/// capacity or a flow (not a positive finite number: a caller's bug, never input).
///
/// `progress`, when given, is kept up to date (simulated time, events) every 256 events, and
/// its `cancel` flag, read before every event, stops the run there.
pub fn run<A: Application>(
    apps: Vec<A>,
    paths: &dyn PathSource,
    capacities: Vec<f64>,
    cfg: &SimConfig,
    progress: Option<&Progress>,
) -> Result<SimOutput<A>, FlowError> {
    run_with_pfc(apps, paths, capacities, cfg, progress, Vec::new())
}

/// [`run`] with PFC on the switch ports `pause` gives thresholds for (by [`LinkId`]): their
/// lossless queues pause the links feeding them, and the flows behind a pause are held
/// ([`crate::pfc`]). Only the max-min model holds flows; the queue model, and a `pause` with
/// no thresholds, run as [`run`] does.
pub fn run_with_pfc<A: Application>(
    mut apps: Vec<A>,
    paths: &dyn PathSource,
    capacities: Vec<f64>,
    cfg: &SimConfig,
    progress: Option<&Progress>,
    pause: Vec<Option<PauseThreshold>>,
) -> Result<SimOutput<A>, FlowError> {
    let n_links = capacities.len();
    let mut backlogs = Backlogs::new(capacities.clone(), apps.len());
    let pfc = (cfg.model == FlowModel::MaxMin && pause.iter().any(Option::is_some)).then(|| {
        backlogs.set_pause(pause);
        Box::new(Holds::new())
    });
    let mut core = Core {
        now: Time::ZERO,
        cfg: *cfg,
        paths,
        qnet: match cfg.model {
            FlowModel::Queues => Some(QueueNetwork::new(capacities.clone())?),
            FlowModel::MaxMin => None,
        },
        draining: FxHashMap::default(),
        sending: FxHashMap::default(),
        next_token: 0,
        qevents: Vec::new(),
        net: FlowNetwork::new(capacities)?,
        qps: Vec::new(),
        cold: Vec::new(),
        wires: [(u64::MAX, WireMemo::of(0, cfg)); WIRE_SLOTS],
        qp_index: FxHashMap::default(),
        last_qp: vec![(u32::MAX, u32::MAX); apps.len()],
        agenda: Agenda::default(),
        links: vec![LinkCounters::default(); n_links],
        stats: SimStats::default(),
        usage: Vec::new(),
        acks: Vec::new(),
        scratch: Vec::new(),
        error: None,
        backlogs,
        pfc,
    };
    for (h, app) in apps.iter_mut().enumerate() {
        app.start(&mut Api {
            core: &mut core,
            host: h as u32,
        });
    }
    let mut finished = Vec::new();
    loop {
        // Looked at before it is taken: taking it stores to the stack at every event, and a
        // later copy through the same slot had to wait for those stores.
        if core.error.is_some() {
            if let Some(e) = core.error.take() {
                return Err(e);
            }
        }
        if let Some(p) = progress {
            // One event can cost a refilling of a million flows: read the flag every time.
            if p.cancel.load(Ordering::Relaxed) {
                core.stats.cancelled = true;
                break;
            }
            if core.stats.events % 256 == 0 {
                p.sim_time_ps.store(core.now.ps(), Ordering::Relaxed);
                p.events.store(core.stats.events, Ordering::Relaxed);
            }
        }
        let ev_t = core.agenda.peek();
        // Events of the current instant run before the network is asked anything: asking
        // refills the components that starts and finishes touched, so all of an instant's
        // starts (a million posts at time zero) share one refilling. No flow can finish at
        // the current instant any more: those were reported when time reached it.
        let mut pause_t = None;
        let flow_t = if ev_t == Some(core.now) && core.stats.events > 0 {
            None
        } else if let Some(q) = core.qnet.as_mut() {
            q.next_event()
        } else {
            if core.pfc.is_some() {
                pause_t = core.settle_pfc();
            }
            core.net.next_finish()
        };
        let next = match (flow_t, ev_t) {
            (None, None) => break,
            (a, b) => a.unwrap_or(Time::NEVER).min(b.unwrap_or(Time::NEVER)),
        };
        if next > cfg.until {
            core.stats.stopped_at_limit = true;
            break;
        }
        if let Some(t) = pause_t.filter(|&t| t < next) {
            // A PFC port pauses or resumes before anything else happens: the next round
            // settles it at `t` (no flow finishes before `next`).
            core.now = t;
            core.net.advance(t, &mut finished);
            for (_, token) in finished.drain(..) {
                core.stats.events += 1;
                core.tx_done(token as u32);
            }
            continue;
        }
        if flow_t == Some(next) {
            core.now = next;
            core.stats.end_time = next;
            if core.advance_queues(next) {
                continue;
            }
            core.net.advance(next, &mut finished);
            for (_, token) in finished.drain(..) {
                core.stats.events += 1;
                core.tx_done(token as u32);
            }
            continue;
        }
        let Some((t, ev)) = core.agenda.pop() else {
            break;
        };
        core.now = t;
        core.stats.end_time = t;
        core.advance_queues(t);
        // Only when time moves: at the network's own instant every finish was reported when
        // time reached it, and advancing would refill the components touched so far, once per
        // event (a million timers posting at time zero: a million refillings of a growing
        // component). The instant's starts and finishes are filled together when the next
        // finish is asked for.
        core.stats.events += 1;
        if t > core.net.now() {
            core.net.advance(t, &mut finished);
            // Flows cannot finish before `t` (it is not later than the next finish); finishing
            // exactly at `t` they are handled before the event. (Only here, where some may
            // have: an iterator made at every event stored to the stack, and a later copy
            // through the same slot had to wait for those stores.)
            for (_, token) in finished.drain(..) {
                core.stats.events += 1;
                core.tx_done(token as u32);
            }
        }
        dispatch(&mut core, &mut apps, t, ev);
    }
    let (hosts, links) = counters(&mut core, apps.len());
    if let Some(e) = core.error.take() {
        return Err(e);
    }
    let cold = &core.cold;
    let backlogs = core
        .backlogs
        .peaks(core.stats.end_time, |k| forward(cold, k));
    let pauses = core.backlogs.pause_totals(core.stats.end_time);
    Ok(SimOutput {
        apps,
        hosts,
        links,
        backlogs,
        pauses,
        stats: core.stats,
    })
}

/// Runs event `ev` of instant `t`: a timer or a completion handed to its application, or a
/// zero-length message's departure.
#[inline]
fn dispatch<A: Application>(core: &mut Core<'_>, apps: &mut [A], t: Time, ev: Ev) {
    match ev.kind {
        Kind::Timer => {
            let host = ev.id;
            if let Some(app) = apps.get_mut(host as usize) {
                app.on_timer(ev.msg.tag, &mut Api { core, host });
            }
        }
        Kind::TxDone => core.tx_done(ev.id),
        Kind::Deliver => {
            let (qp, src, dst, msg) = (ev.id, ev.src, ev.dst, ev.msg);
            let tag = msg.tag;
            // The way back is only read for a sender that wants to know (collectives do
            // not): a cold line of the queue pair per message otherwise.
            if apps
                .get(src as usize)
                .is_some_and(|a| a.wants_send_done(tag))
            {
                if let Some(c) = core.cold.get(qp as usize) {
                    let at = t + c.back;
                    core.schedule(at, Ev::send_done(qp, tag));
                }
            }
            if let Some(app) = apps.get_mut(dst as usize) {
                let c = Completion::Received {
                    src,
                    imm: tag as u32,
                    len: msg.len,
                    data: msg.data.map(|b| *b),
                };
                app.on_completion(c, &mut Api { core, host: dst });
            }
        }
        Kind::SendDone => {
            let Some(q) = core.qps.get(ev.id as usize) else {
                return;
            };
            let (src, dst) = (q.src, q.dst);
            if let Some(app) = apps.get_mut(src as usize) {
                app.on_completion(
                    Completion::SendDone {
                        dst,
                        tag: ev.msg.tag,
                    },
                    &mut Api { core, host: src },
                );
            }
        }
    }
}

/// The hosts' and links' counters of a run that ended: what the queue pairs started (summed
/// per queue pair as it went) and what still waited, was draining or was on its way.
fn counters(core: &mut Core<'_>, n_hosts: usize) -> (Vec<HostCounters>, Vec<LinkCounters>) {
    // What was posted and not delivered: still queued (the head maybe on the wire), draining
    // (queue model) or on its way to the destination (a `Deliver` event).
    let mut undelivered: Vec<(u32, u64)> = Vec::new();
    // Per queue pair, the packets, ACKs, messages and bytes of messages posted and not
    // started (all queued ones but the head, which is on the wire whenever there is one).
    let mut waiting = vec![[0u64; 4]; core.qps.len()];
    for (i, c) in waiting.iter_mut().enumerate() {
        let q = i as u32;
        core.flush(q);
        let mut head = true;
        while let Some(m) = core.take_head(q) {
            undelivered.push((q, m.len));
            if !head {
                let w = MessageWire::of(m.len, &core.cfg);
                c[0] += w.packets;
                c[1] += w.acks;
                c[2] += 1;
                c[3] += m.len;
            }
            head = false;
        }
    }
    undelivered.extend(core.draining.values().map(|(q, m)| (*q, m.len)));
    for queue in &core.agenda.queues {
        undelivered.extend(
            queue
                .iter()
                .filter(|ev| ev.kind == Kind::Deliver)
                .map(|ev| (ev.id, ev.msg.len)),
        );
    }
    let mut links = std::mem::take(&mut core.links);
    let mut hosts = vec![HostCounters::default(); n_hosts];
    for &(q, len) in &undelivered {
        let Some(dst) = core.qps.get(q as usize).map(|q| q.dst) else {
            continue;
        };
        if let Some(h) = hosts.get_mut(dst as usize) {
            // Taken from what the loop below adds (every one of these was posted).
            let w = MessageWire::of(len, &core.cfg);
            h.messages_received = h.messages_received.wrapping_sub(1);
            h.data_packets_received = h.data_packets_received.wrapping_sub(w.packets);
            h.acks_sent = h.acks_sent.wrapping_sub(w.acks);
        }
    }
    for ((q, c), &[w_packets, w_acks, w_msgs, w_bytes]) in
        core.qps.iter().zip(&core.cold).zip(&waiting)
    {
        let (posted_packets, posted_acks) = (c.frames + w_packets, c.ack_frames + w_acks);
        let (posted, posted_bytes) = (c.started + w_msgs, c.started_bytes + w_bytes);
        let (fwd, rev) = c.links.split_at(usize::from(c.split));
        for l in fwd {
            links[l.0 as usize].frames += c.frames;
        }
        for l in rev {
            links[l.0 as usize].frames += c.ack_frames;
        }
        if let Some(h) = hosts.get_mut(q.src as usize) {
            h.messages_sent += posted;
            h.data_packets_sent += posted_packets;
            h.data_bytes_sent += posted_bytes;
        }
        if let Some(h) = hosts.get_mut(q.dst as usize) {
            h.messages_received = h.messages_received.wrapping_add(posted);
            h.data_packets_received = h.data_packets_received.wrapping_add(posted_packets);
            h.acks_sent = h.acks_sent.wrapping_add(posted_acks);
        }
    }
    for (l, c) in links.iter_mut().enumerate() {
        let l = LinkId(l as u32);
        c.wire_bytes += match &core.qnet {
            Some(q) => q.link_bytes(l),
            None => core.net.link_bytes(l),
        }
        .round() as u64;
    }
    (hosts, links)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{align_of, offset_of, size_of};

    /// The layout [`Qp`]'s doc describes: all a message reads of its queue pair is one line.
    #[test]
    fn a_message_reads_one_line_of_its_queue_pair() {
        assert_eq!(size_of::<Qp>(), 64);
        assert_eq!(align_of::<Qp>(), 64);
    }

    /// Events are moved whole words at a time (see [`Ev`]).
    #[test]
    fn an_event_is_five_words() {
        assert_eq!(size_of::<Ev>(), 40);
        assert_eq!(offset_of!(Ev, msg), 16);
    }
}
