//! A fluid network with FIFO queues: how switches without congestion control really share an
//! overloaded link.
//!
//! Max-min fairness ([`crate::FlowNetwork`]) assumes every flow gets its fair share at its
//! bottleneck. FIFO queues do not do that: an overloaded output port serves the bytes in the
//! order they arrived, so each flow gets a share in proportion to the rate it *arrives* with,
//! and a flow held up at a later hop keeps arriving at an earlier one: its bytes pile up in the
//! later queue and leave at full rate once the others are gone. On oversubscribed fabrics with
//! ECMP collisions this is what decides single messages' completion times.
//!
//! ## The model
//!
//! Every message is a *data stream* along its forward path and an *ACK stream* along the
//! reverse path. Rates are in wire bytes per second.
//!
//! - **Injection.** A NIC port serves its queue pairs round-robin: the data streams that start
//!   on a link direction share its capacity, minus the ACK streams the NIC sends there first
//!   (control frames go before data), by water-filling (a capped stream, `qp_rate`, takes its
//!   cap and leaves the rest to the others). Frames relayed by a host (rings, tori) keep at
//!   least half of the port, as the NIC alternates them with its own data. An ACK stream is
//!   injected at `ack bytes / data bytes` times the rate its data stream leaves the last hop.
//! - **Queues.** Each link direction is a FIFO queue drained at its capacity. While the queue is
//!   empty and the streams arriving fit, they pass through unchanged. Otherwise the queue holds
//!   *segments*: stretches of time during which the arrival rates were constant, so a segment's
//!   bytes are mixed in proportion to those rates. The head segment drains at the capacity and
//!   the streams leave in its proportions; new arrivals append to the tail. This is fluid FIFO
//!   service: bytes leave in the order and the mix they arrived in. Arrivals whose mix differs
//!   from the tail's by at most 10^-6 of the rate for every stream join the tail in its mix
//!   rather than start a segment (see `MERGE_EPS`).
//! - **Propagation.** A stream's departure rate from one hop is its arrival rate at the next
//!   (propagation latency and store-and-forward are added by the transport to the last byte,
//!   as for max-min flows). A change of rates is pushed hop by hop; a change smaller than
//!   10^-12 of a link's capacity is not propagated (it would only ring around ACK cycles),
//!   and the departure keeps the rate the next hop has. Where a link has no queue before and
//!   after a change, the change passes straight on to the next hop.
//!
//! Rates are piecewise constant between events: a stream starts, its source has injected its
//! last byte, its last byte leaves the last hop, or a queue's head segment runs out. Events at
//! one picosecond run in a fixed order, so runs are deterministic.

use std::collections::VecDeque;

use fabemu_fabric::units::{Time, PS_PER_S};
use smallvec::SmallVec;

use crate::head_vec::HeadVec;
use crate::id_slab::IdSlab;
use crate::keyed_heap::KeyedHeap;
use crate::{FlowError, LinkId};

const PS_PER_S_F: f64 = PS_PER_S as f64;
/// Arrivals up to this fraction above a link's capacity still pass through (floating-point sums
/// of shares that fill a link exactly).
const REL_EPS: f64 = 1e-9;
/// Departure changes below this fraction of a link's capacity are not pushed to the next hop:
/// they would only ring around the cycles ACKs close (each turn scales a change by the ACK
/// share, ~2%). The departure then keeps the rate the next hop has, so a stream's rates at two
/// hops never differ by more than this (a 1 GiB message at line rate gains or loses at most a
/// thousandth of a byte); larger tolerances move results measurably.
const PROPAGATE_EPS: f64 = 1e-12;
/// Bytes below which a queue counts as empty.
const BYTES_EPS: f64 = 1e-3;
/// Arrivals whose mix differs from the queue's tail segment by at most this share for every
/// stream join that segment instead of starting a new one. Each split makes an event when the
/// segment reaches the head, and its departures a rate change to push on: rate changes ring
/// around the cycles ACKs close at about 2% per turn, and splitting at every ripple made tens of
/// events per message. The merged bytes keep the tail's mix, so a stream is credited at most
/// this share of a segment's bytes too many or too few (the drain check absorbs the remainder).
const MERGE_EPS: f64 = 1e-6;

/// `(stream, rate)` sorted by stream: a segment's mix. Inline: a segment rarely mixes more than
/// two streams, and one is made at every new tail.
type Rates = SmallVec<[(u64, f64); 2]>;

/// `(stream, rate)` sorted by stream: a link's arrivals and departures. A plain vector, unlike
/// [`Rates`]: a link keeps its buffers for the whole run (no allocation once they have grown),
/// and every rate change passing a hop reads and writes them several times, each time through
/// SmallVec's test of where its items are.
type LinkRates = Vec<(u64, f64)>;

/// No head-end event pending ([`Link::sched`]).
const UNSCHEDULED: u64 = u64::MAX;

/// What a queue network reports as time passes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QueueEvent {
    /// The source of the message with this token has put its last byte on the wire.
    SourceDone(u64),
    /// The last byte of the message with this token has left the last hop's queue.
    Drained(u64),
}

/// A stretch of arrivals at constant rates, waiting in a queue.
#[derive(Debug)]
struct Segment {
    /// `(stream, rate)`, the mix of the segment's bytes.
    mix: Rates,
    sum: f64,
    bytes: f64,
}

/// A queue's segments, head first (the segments popped dropped in bulk, see
/// [`HeadVec`]).
type Segments = HeadVec<Segment, 16>;

#[derive(Debug, Default)]
struct Link {
    cap: f64,
    /// `cap * (1 + REL_EPS)`: the arrival rate up to which the link passes its streams through
    /// (computed once: the same product every test would compute).
    pass_max: f64,
    /// `cap * PROPAGATE_EPS`: departure changes up to this are not pushed on.
    tol: f64,
    /// Arrival rate per stream (only positive rates are kept).
    arr: LinkRates,
    arr_sum: f64,
    /// Departure rate per stream.
    dep: LinkRates,
    dep_sum: f64,
    segs: Segments,
    settled_at: u64,
    /// Bytes that left this link direction up to `settled_at`.
    carried: f64,
    /// Data streams injected here by their NIC and not done, with their caps, by stream.
    sources: Vec<(u64, f64)>,
    /// ACK streams injected here by their NIC, by stream.
    acks: Vec<u64>,
    /// When the pending head-end event is due ([`UNSCHEDULED`]: none); a recomputation that
    /// finds the same time leaves its entry alone.
    sched: u64,
    /// The head-end event's handle in the heap.
    ev: u32,
    /// Whether the link waits in [`QueueNetwork::dirty`] (kept here, beside what a rate
    /// change reads of the link anyway).
    dirty: bool,
}

impl Link {
    fn queued(&self) -> f64 {
        // One segment (the usual queue) without the iterator: the same value.
        match self.segs.len() {
            0 => 0.0,
            1 => self.segs.front().map_or(0.0, |s| s.bytes),
            _ => self.segs.iter().map(|s| s.bytes).sum(),
        }
    }

    fn settle(&mut self, now: u64) {
        if now <= self.settled_at {
            return;
        }
        let dt = ps_f64(now - self.settled_at) / PS_PER_S_F;
        self.carried += self.dep_sum * dt;
        let n = self.segs.len();
        if n == 1 {
            if let Some(s) = self.segs.front_mut() {
                s.bytes = (s.bytes + (self.arr_sum - self.cap) * dt).max(0.0);
            }
        } else if n > 1 {
            if let Some(s) = self.segs.front_mut() {
                s.bytes = (s.bytes - self.cap * dt).max(0.0);
            }
            if let Some(s) = self.segs.back_mut() {
                s.bytes += self.arr_sum * dt;
            }
        }
        self.settled_at = now;
    }

    /// When the head segment runs out (several segments) or the queue empties (one), from
    /// `settled_at`; `None` when neither happens at the current rates.
    fn head_end(&self) -> Option<u64> {
        let head = self.segs.front()?;
        let rate = if self.segs.len() > 1 {
            self.cap
        } else {
            self.cap - self.arr_sum
        };
        (rate > 0.0).then(|| self.settled_at + ceil_ps(head.bytes / rate))
    }
}

#[derive(Debug)]
enum Kind {
    Data {
        token: u64,
        ack: u64,
        /// ACK wire bytes per data wire byte.
        ack_ratio: f64,
    },
    Ack,
}

#[derive(Debug)]
struct Stream {
    path: SmallVec<[u32; 6]>,
    kind: Kind,
    /// Wire bytes to inject (data streams; `inf` for ACK streams, which end with their data).
    total: f64,
    inj: f64,
    injected: f64,
    inj_at: u64,
    source_done: bool,
    /// Departure rate at the last hop, and the bytes that left it.
    out: f64,
    delivered: f64,
    out_at: u64,
    drained: bool,
    /// The source-done and drain events' handles in the heap.
    inj_h: u32,
    out_h: u32,
    /// When the pending source-done and drain events are due ([`UNSCHEDULED`]: none). A rate
    /// change that leaves the time to the picosecond leaves the entry alone: ripples of a rate
    /// change far below a picosecond's worth are most of the changes.
    inj_ev: u64,
    out_ev: u64,
}

impl Stream {
    fn settle(&mut self, now: u64) {
        if now > self.inj_at {
            self.injected += self.inj * ps_f64(now - self.inj_at) / PS_PER_S_F;
            self.inj_at = now;
        }
        if now > self.out_at {
            self.delivered += self.out * ps_f64(now - self.out_at) / PS_PER_S_F;
            self.out_at = now;
        }
    }
}

/// A number of picoseconds as a float: through `i64` below 2^63, one instruction rather than
/// the unsigned conversion's several (the same value).
#[inline]
fn ps_f64(ps: u64) -> f64 {
    match i64::try_from(ps) {
        Ok(v) => v as f64,
        Err(_) => ps as f64,
    }
}

/// `seconds` in picoseconds, rounded up (`u64::MAX / 4` for what is not a time).
#[inline]
fn ceil_ps(seconds: f64) -> u64 {
    let x = seconds * PS_PER_S_F;
    // The usual range, rounded up through `i64` in place: truncation, raised where a fraction
    // was cut (what `round_up` does, without its tests for the magnitudes handled below; in
    // (-1, 0] the ceiling is a zero, 0 ps as below).
    if x > -1.0 && x < crate::WHOLE_FROM {
        let t = x as i64;
        return (t + i64::from((t as f64) < x)) as u64;
    }
    // Without libm's call (see `round_up`).
    let ps = crate::round_up(x);
    if ps.is_finite() && ps >= 0.0 {
        ps as u64
    } else {
        u64::MAX / 4
    }
}

/// Calls `f(id, rate in a, rate in b)` for every stream of two lists sorted by stream, in order
/// (`None` where a list lacks it), while `f` returns true; false when `f` stopped it.
fn join(
    a: &[(u64, f64)],
    b: &[(u64, f64)],
    mut f: impl FnMut(u64, Option<f64>, Option<f64>) -> bool,
) -> bool {
    let (mut i, mut j) = (0, 0);
    loop {
        let go = match (a.get(i).copied(), b.get(j).copied()) {
            (Some((ia, ra)), Some((ib, rb))) if ia == ib => {
                i += 1;
                j += 1;
                f(ia, Some(ra), Some(rb))
            }
            (Some((ia, ra)), Some((ib, _))) if ia < ib => {
                i += 1;
                f(ia, Some(ra), None)
            }
            (Some((ia, ra)), None) => {
                i += 1;
                f(ia, Some(ra), None)
            }
            (_, Some((ib, rb))) => {
                j += 1;
                f(ib, None, Some(rb))
            }
            (None, None) => return true,
        };
        if !go {
            return false;
        }
    }
}

/// Whether arrivals at rates `arr` (sum `sum`) mix like segment `seg` within [`MERGE_EPS`].
fn mixes_alike(seg: &Segment, arr: &[(u64, f64)], sum: f64) -> bool {
    if seg.mix[..] == *arr {
        return true;
    }
    if !(seg.sum > 0.0 && sum > 0.0) {
        return false;
    }
    join(&seg.mix, arr, |_, a, b| {
        (a.unwrap_or(0.0) / seg.sum - b.unwrap_or(0.0) / sum).abs() <= MERGE_EPS
    })
}

/// Where stream `id` is in list `v` sorted by stream, or where it would go: what
/// `binary_search_by_key` finds, by a scan (the lists hold a few streams).
#[inline]
fn find(v: &[(u64, f64)], id: u64) -> Result<usize, usize> {
    // One loop deciding at the entry it stops at (a position, then a lookup, tested the index
    // twice).
    for (i, e) in v.iter().enumerate() {
        if e.0 >= id {
            return if e.0 == id { Ok(i) } else { Err(i) };
        }
    }
    Err(v.len())
}

/// The sum of the rates in `v`, in order: what `v.iter().map(|e| e.1).sum()` gives, to the bit
/// (that sum starts from -0.0, and -0.0 + x is x for every x), with the few streams a link
/// carries added without the loop.
#[inline]
fn sum_rates(v: &[(u64, f64)]) -> f64 {
    match v {
        [] => -0.0,
        [a] => a.1,
        [a, b] => a.1 + b.1,
        [a, b, c] => a.1 + b.1 + c.1,
        _ => v.iter().map(|e| e.1).sum(),
    }
}

fn rate_of(v: &[(u64, f64)], id: u64) -> f64 {
    find(v, id).map_or(0.0, |i| v[i].1)
}

/// Event kinds in the heap, in the order they run at one instant.
const EV_LINK: u8 = 0;
const EV_SOURCE: u8 = 1;
const EV_DRAIN: u8 = 2;

/// Moves the event `(kind, link or stream)` with handle `h` to `at` (`UNSCHEDULED`: none), in
/// place; an unmoved time touches nothing.
#[inline]
fn reschedule(heap: &mut KeyedHeap, h: u32, (kind, id): (u8, u64), at: u64, ev: &mut u64) {
    if at != *ev {
        *ev = at;
        if at == UNSCHEDULED {
            heap.remove(h);
        } else {
            heap.set(h, (at, kind, id));
        }
    }
}

/// The fluid FIFO network (see the module documentation).
#[derive(Debug)]
pub struct QueueNetwork {
    now: u64,
    links: Vec<Link>,
    /// Streams by number (numbers grow: data stream `2k`, its ACK stream `2k + 1`).
    streams: IdSlab<Stream>,
    next_id: u64,
    /// Pending events: links' head ends, streams' source-done and drain events.
    heap: KeyedHeap,
    /// Links whose arrivals changed and must recompute their departures.
    dirty: VecDeque<u32>,
    /// Ports whose NIC shares must be recomputed.
    reshare: Vec<u32>,
    /// Data streams whose last hop stopped: drained if their source is done (rounding can
    /// leave a fraction of a byte that no rate will ever carry).
    stalled: Vec<u64>,
    /// Data streams not yet drained.
    data_streams: usize,
    /// Buffers reused by [`QueueNetwork::recompute_link`] and [`QueueNetwork::share_port`] (kept
    /// empty between calls), so that a rate change allocates nothing.
    spare_dep: LinkRates,
    srcs: Vec<(f64, u64)>,
    rates: Vec<(u64, f64)>,
}

impl QueueNetwork {
    /// A network of link directions with `capacities` (bytes per second, positive and finite).
    pub fn new(capacities: Vec<f64>) -> Result<QueueNetwork, FlowError> {
        crate::maxmin::check_capacities(&capacities)?;
        let mut heap = KeyedHeap::default();
        Ok(QueueNetwork {
            now: 0,
            links: capacities
                .into_iter()
                .map(|cap| Link {
                    cap,
                    pass_max: cap * (1.0 + REL_EPS),
                    tol: cap * PROPAGATE_EPS,
                    sched: UNSCHEDULED,
                    ev: heap.handle(),
                    ..Link::default()
                })
                .collect(),
            streams: IdSlab::default(),
            next_id: 0,
            heap,
            dirty: VecDeque::new(),
            reshare: Vec::new(),
            stalled: Vec::new(),
            data_streams: 0,
            spare_dep: LinkRates::new(),
            srcs: Vec::new(),
            rates: Vec::new(),
        })
    }

    /// Starts a message at the current time (advance to it first): `wire` bytes along `fwd`,
    /// its ACKs (`ack_wire` bytes in all) along `rev`, at most `cap` bytes/s. `token` comes back
    /// in its [`QueueEvent`]s.
    pub fn start(
        &mut self,
        fwd: &[LinkId],
        rev: &[LinkId],
        wire: f64,
        ack_wire: f64,
        cap: Option<f64>,
        token: u64,
    ) -> Result<(), FlowError> {
        let n = self.links.len();
        for l in fwd.iter().chain(rev) {
            if l.0 as usize >= n {
                return Err(FlowError::UnknownLink {
                    link: l.0,
                    links: n,
                });
            }
        }
        let Some(first) = fwd.first() else {
            return Err(FlowError::Unbounded);
        };
        if !(wire > 0.0 && wire.is_finite()) {
            return Err(FlowError::ZeroBytes);
        }
        let cap = crate::maxmin::check_cap(cap)?;
        let data = self.next_id;
        let ack = data + 1;
        self.next_id += 2;
        let now = self.now;
        let heap = &mut self.heap;
        let mut stream = |path: &[LinkId], kind: Kind, total: f64| Stream {
            path: path.iter().map(|l| l.0).collect(),
            kind,
            total,
            inj: 0.0,
            injected: 0.0,
            inj_at: now,
            source_done: false,
            out: 0.0,
            delivered: 0.0,
            out_at: now,
            drained: false,
            inj_h: heap.handle(),
            out_h: heap.handle(),
            inj_ev: UNSCHEDULED,
            out_ev: UNSCHEDULED,
        };
        self.streams.insert(
            data,
            stream(
                fwd,
                Kind::Data {
                    token,
                    ack,
                    ack_ratio: if rev.is_empty() { 0.0 } else { ack_wire / wire },
                },
                wire,
            ),
        );
        self.data_streams += 1;
        if !rev.is_empty() {
            self.streams
                .insert(ack, stream(rev, Kind::Ack, f64::INFINITY));
            // Streams are numbered in order: pushing keeps the lists sorted.
            self.links[rev[0].0 as usize].acks.push(ack);
        }
        self.links[first.0 as usize].sources.push((data, cap));
        self.reshare.push(first.0);
        self.propagate();
        Ok(())
    }

    /// The earliest pending event, if any.
    pub fn next_event(&mut self) -> Option<Time> {
        self.peek().map(Time)
    }

    fn peek(&self) -> Option<u64> {
        self.heap.peek().map(|k| k.0)
    }

    /// Moves time to `t`, running every event up to it and appending what messages did.
    pub fn advance(&mut self, t: Time, out: &mut Vec<QueueEvent>) {
        let t = t.ps();
        while let Some(at) = self.peek() {
            if at > t {
                break;
            }
            self.now = self.now.max(at);
            let Some((_, kind, id)) = self.heap.pop() else {
                break;
            };
            match kind {
                EV_LINK => self.on_head_end(id as u32),
                EV_SOURCE => self.on_source_done(id, out),
                _ => self.on_drained(id, out),
            }
            self.propagate();
            while let Some(id) = self.stalled.pop() {
                self.check_drained(id, out);
                self.propagate();
            }
        }
        self.now = self.now.max(t);
    }

    /// The network's current time.
    pub fn now(&self) -> Time {
        Time(self.now)
    }

    /// Wire bytes link direction `l` has carried up to now.
    pub fn link_bytes(&self, l: LinkId) -> f64 {
        self.links.get(l.0 as usize).map_or(0.0, |k| {
            k.carried + k.dep_sum * self.now.saturating_sub(k.settled_at) as f64 / PS_PER_S_F
        })
    }

    /// Whether any hop still has stream `id` arriving or queued (then it will leave again).
    fn in_flight(&self, id: u64, s: &Stream) -> bool {
        s.path.iter().any(|&l| {
            let link = &self.links[l as usize];
            rate_of(&link.arr, id) > 0.0
                || link
                    .segs
                    .iter()
                    .any(|g| g.bytes > 0.0 && rate_of(&g.mix, id) > 0.0)
        })
    }

    /// Data streams not yet drained.
    pub fn active(&self) -> usize {
        self.data_streams
    }

    fn on_head_end(&mut self, l: u32) {
        let now = self.now;
        let link = &mut self.links[l as usize];
        link.settle(now);
        link.sched = UNSCHEDULED;
        if link.segs.len() > 1 {
            link.segs.pop_front();
        } else if link.arr_sum <= link.pass_max {
            link.segs.clear();
        } else if let Some(s) = link.segs.front_mut() {
            s.bytes = 0.0;
        }
        mark(link, &mut self.dirty, l);
    }

    fn on_source_done(&mut self, id: u64, out: &mut Vec<QueueEvent>) {
        let now = self.now;
        if let Some(s) = self.streams.get_mut(id) {
            s.settle(now);
            s.injected = s.total;
        }
        self.source_done(id, out);
        // A stream whose bytes all passed already is drained now.
        self.check_drained(id, out);
    }

    /// The source of data stream `id` has injected its last byte: report it, stop injecting.
    fn source_done(&mut self, id: u64, out: &mut Vec<QueueEvent>) {
        let Some(s) = self.streams.get_mut(id) else {
            return;
        };
        if s.source_done {
            return;
        }
        s.source_done = true;
        s.inj_ev = UNSCHEDULED;
        self.heap.remove(s.inj_h);
        if let Kind::Data { token, .. } = s.kind {
            out.push(QueueEvent::SourceDone(token));
        }
        let first = s.path[0];
        let src = &mut self.links[first as usize].sources;
        if let Some(i) = src.iter().position(|&x| x.0 == id) {
            src.remove(i);
        }
        self.set_injection(id, 0.0);
        self.reshare.push(first);
    }

    fn on_drained(&mut self, id: u64, out: &mut Vec<QueueEvent>) {
        self.finish(id, out);
    }

    fn check_drained(&mut self, id: u64, out: &mut Vec<QueueEvent>) {
        let Some(s) = self.streams.get(id) else {
            return;
        };
        // Drained when its bytes are out, or when nothing of it is left anywhere to come out
        // (rounding in the queues' mixes can leave a remainder no rate will ever carry).
        let done = s.source_done
            && (s.delivered >= s.total - BYTES_EPS || s.out == 0.0 && !self.in_flight(id, s));
        if done {
            self.finish(id, out);
        }
    }

    fn finish(&mut self, id: u64, out: &mut Vec<QueueEvent>) {
        let Some(s) = self.streams.get(id) else {
            return;
        };
        if s.drained {
            return;
        }
        if let Kind::Data { .. } = s.kind {
            // Rounding can bring the last byte out a picosecond before the source reports it.
            self.source_done(id, out);
        }
        let Some(s) = self.streams.get_mut(id) else {
            return;
        };
        s.drained = true;
        s.out_ev = UNSCHEDULED;
        self.heap.remove(s.out_h);
        if let Kind::Data { token, ack, .. } = s.kind {
            out.push(QueueEvent::Drained(token));
            self.end_acks(ack, out);
        }
        self.remove(id);
    }

    /// The data of ACK stream `ack` has all arrived: the receiver sends no more ACKs, and the
    /// stream lives on until the ACKs it sent have left their queues.
    fn end_acks(&mut self, ack: u64, out: &mut Vec<QueueEvent>) {
        self.set_injection(ack, 0.0);
        let now = self.now;
        let Some(s) = self.streams.get_mut(ack) else {
            return;
        };
        s.settle(now);
        s.total = s.injected;
        s.source_done = true;
        let at = if s.out > 0.0 {
            now + ceil_ps((s.total - s.delivered).max(0.0) / s.out)
        } else {
            UNSCHEDULED
        };
        reschedule(&mut self.heap, s.out_h, (EV_DRAIN, ack), at, &mut s.out_ev);
        self.check_drained(ack, out);
    }

    /// Forgets a stream, and its arrivals wherever leftovers of a fraction of a byte keep it.
    fn remove(&mut self, id: u64) {
        let Some(s) = self.streams.remove(id) else {
            return;
        };
        self.heap.release(s.inj_h);
        self.heap.release(s.out_h);
        if let Kind::Data { .. } = s.kind {
            self.data_streams -= 1;
        } else if let Some(&first) = s.path.first() {
            let acks = &mut self.links[first as usize].acks;
            if let Some(i) = acks.iter().position(|&x| x == id) {
                acks.remove(i);
            }
        }
        for &l in &s.path {
            self.set_arrival(l, id, 0.0);
        }
    }

    /// Sets a stream's injection rate at its first hop.
    fn set_injection(&mut self, id: u64, rate: f64) {
        let now = self.now;
        let Some(s) = self.streams.get_mut(id) else {
            return;
        };
        s.settle(now);
        if s.inj == rate {
            return;
        }
        s.inj = rate;
        let first = s.path[0];
        if let Kind::Data { .. } = s.kind {
            let at = if !s.source_done && rate > 0.0 {
                let left = (s.total - s.injected).max(0.0);
                now + ceil_ps(left / rate)
            } else {
                UNSCHEDULED
            };
            reschedule(&mut self.heap, s.inj_h, (EV_SOURCE, id), at, &mut s.inj_ev);
        } else {
            // ACKs go first at their NIC: the port's data shares change.
            self.reshare.push(first);
        }
        // What `set_arrival` at the first hop does, with the stream at hand.
        if walk(&mut self.links, &mut self.dirty, &s.path, id, 0, rate, now) {
            if let Some((ack, r)) = leave(s, id, rate, now, &mut self.heap, &mut self.stalled) {
                self.set_injection(ack, r);
            }
        }
    }

    /// Stream `id` arrives at link `l` at `rate` from now on; where the link passes it straight
    /// on, so do the next hops.
    fn set_arrival(&mut self, l: u32, id: u64, rate: f64) {
        let now = self.now;
        let link = &mut self.links[l as usize];
        if arrive(link, &mut self.dirty, l, id, rate, now) {
            self.set_departure(l, id, rate);
        }
    }

    /// Recomputes NIC shares and departures until nothing changes.
    fn propagate(&mut self) {
        loop {
            while let Some(p) = self.reshare.pop() {
                self.share_port(p);
            }
            let Some(l) = self.dirty.pop_front() else {
                if self.reshare.is_empty() {
                    break;
                }
                continue;
            };
            self.links[l as usize].dirty = false;
            self.recompute_link(l);
        }
    }

    /// Water-fills a NIC port among the data streams its host injects there.
    fn share_port(&mut self, p: u32) {
        let link = &self.links[p as usize];
        if link.sources.is_empty() {
            return;
        }
        // Summed in stream order, as the arrivals are; one term without the iterator (the
        // same value: the sum starts from -0.0, which adds nothing).
        let own: f64 = match link.sources[..] {
            [(id, _)] => rate_of(&link.arr, id),
            _ => link
                .sources
                .iter()
                .map(|&(id, _)| rate_of(&link.arr, id))
                .sum(),
        };
        let acks: f64 = match link.acks[..] {
            [id] => rate_of(&link.arr, id),
            _ => link.acks.iter().map(|&id| rate_of(&link.arr, id)).sum(),
        };
        let transit = (link.arr_sum - own - acks).max(0.0);
        let port = (link.cap - acks).max(0.0);
        let avail = if transit > 0.0 {
            (port - transit).max(port / 2.0)
        } else {
            port
        };
        if let [(id, cap)] = link.sources[..] {
            // One source (the usual NIC): the water-filling below gives it `cap.min(avail / 1)`,
            // that is `cap.min(avail)`, without its buffers and sorts.
            self.set_injection(id, cap.min(avail));
            return;
        }
        let mut srcs = std::mem::take(&mut self.srcs);
        srcs.extend(link.sources.iter().map(|&(id, cap)| (cap, id)));
        srcs.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        let mut left = avail;
        let mut n = srcs.len();
        let mut rates = std::mem::take(&mut self.rates);
        for &(cap, id) in &srcs {
            let share = left / n as f64;
            let r = cap.min(share);
            rates.push((id, r));
            left -= r;
            n -= 1;
        }
        srcs.clear();
        self.srcs = srcs;
        rates.sort_by_key(|e| e.0);
        for &(id, r) in &rates {
            self.set_injection(id, r);
        }
        rates.clear();
        self.rates = rates;
    }

    /// A link's arrivals (or queue) changed: new tail segment or pass-through, new departures,
    /// and the changes pushed to the next hops.
    fn recompute_link(&mut self, l: u32) {
        let now = self.now;
        let link = &mut self.links[l as usize];
        link.settle(now);
        let overloaded = link.arr_sum > link.pass_max;
        if link.queued() > BYTES_EPS {
            let alike = link
                .segs
                .back()
                .is_some_and(|s| mixes_alike(s, &link.arr, link.arr_sum));
            if !alike {
                let n = link.segs.len();
                // An empty tail (arrivals changed again at the same instant) is dropped when
                // the arrivals are back to the mix before it, else it takes theirs: the
                // queue ends the same whatever the order its arrivals changed in.
                let back_alike = n > 1
                    && link
                        .segs
                        .get(n - 2)
                        .is_some_and(|s| mixes_alike(s, &link.arr, link.arr_sum));
                match link.segs.back_mut() {
                    Some(s) if s.bytes <= BYTES_EPS && n > 1 => {
                        if back_alike {
                            link.segs.pop_back();
                        } else {
                            s.mix.clear();
                            s.mix.extend_from_slice(&link.arr);
                            s.sum = link.arr_sum;
                        }
                    }
                    _ => link.segs.push_back(Segment {
                        mix: Rates::from_slice(&link.arr),
                        sum: link.arr_sum,
                        bytes: 0.0,
                    }),
                }
            }
        } else if overloaded {
            link.segs.clear();
            link.segs.push_back(Segment {
                mix: Rates::from_slice(&link.arr),
                sum: link.arr_sum,
                bytes: 0.0,
            });
        } else if !link.segs.is_empty() {
            // Asked first: an empty queue has nothing to drop.
            link.segs.clear();
        }
        // The new departures: the head segment's mix scaled to the capacity, or the arrivals.
        let cap = link.cap;
        let (new, head_sum): (&[(u64, f64)], Option<f64>) = match link.segs.front() {
            Some(head) if head.sum > 0.0 => (&head.mix, Some(head.sum)),
            Some(_) => (&[], None),
            None => (&link.arr, None),
        };
        let rate = |r: f64| head_sum.map_or(r, |sum| cap * r / sum);
        // Streams whose departure changed: in the old departures or the new ones. A stream
        // whose change is within the tolerance keeps its old rate here too, so that the next
        // hop's arrival is always the departure here (an error never builds up over small
        // changes).
        let tol = link.tol;
        // On the stack: a link's departures rarely change for more than a few streams at once.
        let mut changed: SmallVec<[(u64, f64); 4]> = SmallVec::new();
        if link.dep.len() == new.len() && link.dep.iter().zip(new).all(|(d, n)| d.0 == n.0) {
            // The same streams (a ripple's usual case): compared and updated in place, and
            // summed in the same pass (in order and from -0.0, as `Iterator::sum`).
            let mut sum = -0.0;
            for (d, &(id, r)) in link.dep.iter_mut().zip(new) {
                let v = rate(r);
                if (d.1 - v).abs() > tol {
                    d.1 = v;
                    changed.push((id, v));
                }
                sum += d.1;
            }
            link.dep_sum = sum;
        } else {
            // The new departures go to the spare buffer; the old ones are compared with them.
            let old_dep = std::mem::replace(&mut link.dep, std::mem::take(&mut self.spare_dep));
            // Pushed one by one: SmallVec's `extend` takes its generic path.
            for &(id, r) in new {
                link.dep.push((id, rate(r)));
            }
            let mut j = 0;
            for e in link.dep.iter_mut() {
                while let Some(&(id, _)) = old_dep.get(j).filter(|o| o.0 < e.0) {
                    changed.push((id, 0.0));
                    j += 1;
                }
                match old_dep.get(j) {
                    Some(&(id, old)) if id == e.0 => {
                        if (old - e.1).abs() <= tol {
                            e.1 = old;
                        } else {
                            changed.push(*e);
                        }
                        j += 1;
                    }
                    _ => changed.push(*e),
                }
            }
            // Pushed one by one: SmallVec's `extend` takes its generic path.
            for &(id, _) in old_dep.get(j..).unwrap_or(&[]) {
                changed.push((id, 0.0));
            }
            self.spare_dep = old_dep;
            self.spare_dep.clear();
            link.dep_sum = sum_rates(&link.dep);
        }
        let at = link.head_end().unwrap_or(UNSCHEDULED);
        reschedule(
            &mut self.heap,
            link.ev,
            (EV_LINK, u64::from(l)),
            at,
            &mut link.sched,
        );
        for &(id, rate) in &changed {
            self.set_departure(l, id, rate);
        }
    }

    /// Stream `id` leaves link `l` at `rate` from now on.
    fn set_departure(&mut self, l: u32, id: u64, rate: f64) {
        let now = self.now;
        let Some(s) = self.streams.get_mut(id) else {
            return;
        };
        let Some(pos) = s.path.iter().position(|&x| x == l) else {
            return;
        };
        // The next hops, with the stream looked up once for all of them.
        if !walk(
            &mut self.links,
            &mut self.dirty,
            &s.path,
            id,
            pos + 1,
            rate,
            now,
        ) {
            return;
        }
        if let Some((ack, r)) = leave(s, id, rate, now, &mut self.heap, &mut self.stalled) {
            self.set_injection(ack, r);
        }
    }
}

/// Lists link `l` for recomputation (once until it is recomputed).
#[inline]
fn mark(link: &mut Link, dirty: &mut VecDeque<u32>, l: u32) {
    if !link.dirty {
        link.dirty = true;
        dirty.push_back(l);
    }
}

/// Stream `id` arrives at link `l` (`link`) at `rate` from now on. True when the link passes
/// the change straight on to the next hop (its departure changed with it); otherwise the link is
/// listed in `dirty` for recomputation, or nothing changed.
#[inline(always)]
fn arrive(
    link: &mut Link,
    dirty: &mut VecDeque<u32>,
    l: u32,
    id: u64,
    rate: f64,
    now: u64,
) -> bool {
    link.settle(now);
    let at = find(&link.arr, id);
    match at {
        Ok(i) => {
            let Some(e) = link.arr.get_mut(i) else {
                return false;
            };
            if e.1 == rate {
                return false;
            }
            if rate > 0.0 {
                e.1 = rate;
            } else {
                link.arr.remove(i);
            }
        }
        Err(i) if rate > 0.0 => link.arr.insert(i, (id, rate)),
        Err(_) => return false,
    }
    link.arr_sum = sum_rates(&link.arr);
    if link.segs.is_empty() && !link.dirty && link.arr_sum <= link.pass_max {
        // No queue before or after: the departures are the arrivals, and only this
        // stream's changed (what a recomputation of the link would find).
        let tol = link.tol;
        // Where the link passes its streams through, its departures list the streams its
        // arrivals did before this change, in the same places: tried first.
        let in_dep = match at {
            Ok(i) | Err(i) if link.dep.get(i).is_some_and(|e| e.0 == id) => Ok(i),
            _ => find(&link.dep, id),
        };
        let push = match in_dep {
            Ok(i) if rate > 0.0 => match link.dep.get_mut(i) {
                Some(d) if (d.1 - rate).abs() > tol => {
                    d.1 = rate;
                    true
                }
                _ => false,
            },
            Ok(i) => {
                link.dep.remove(i);
                true
            }
            Err(i) if rate > 0.0 => {
                link.dep.insert(i, (id, rate));
                true
            }
            Err(_) => false,
        };
        link.dep_sum = sum_rates(&link.dep);
        return push;
    }
    mark(link, dirty, l);
    false
}

/// A change of stream `id`'s rate to `rate` arriving at hop `from` of its `path`, passed on
/// through the hops that pass it straight on (one loop, where a call per hop looked the stream
/// up at every hop). True when it left the last hop changed: the caller then sets the stream's
/// departure there ([`leave`]). Inlined into its two callers: a call per change cost more
/// than the loop it runs (most changes pass one or two hops).
#[inline(always)]
fn walk(
    links: &mut [Link],
    dirty: &mut VecDeque<u32>,
    path: &[u32],
    id: u64,
    from: usize,
    rate: f64,
    now: u64,
) -> bool {
    for &l in path.get(from..).unwrap_or(&[]) {
        let Some(link) = links.get_mut(l as usize) else {
            return false;
        };
        if !arrive(link, dirty, l, id, rate, now) {
            return false;
        }
    }
    true
}

/// Stream `s` (number `id`) leaves its last hop at `rate` from now on: its drain event moves
/// with it. Returns the injection its ACK stream takes now (a data stream with ACKs), for the
/// caller to set. Inlined into its two callers, as [`walk`] is.
#[inline(always)]
fn leave(
    s: &mut Stream,
    id: u64,
    rate: f64,
    now: u64,
    heap: &mut KeyedHeap,
    stalled: &mut Vec<u64>,
) -> Option<(u64, f64)> {
    s.settle(now);
    s.out = rate;
    let at = if rate > 0.0 && !s.drained && s.total.is_finite() {
        let left = (s.total - s.delivered).max(0.0);
        now + ceil_ps(left / rate)
    } else {
        UNSCHEDULED
    };
    reschedule(heap, s.out_h, (EV_DRAIN, id), at, &mut s.out_ev);
    if rate == 0.0 {
        stalled.push(id);
    }
    match s.kind {
        Kind::Data { ack, ack_ratio, .. } if ack_ratio > 0.0 => Some((ack, rate * ack_ratio)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::panic)] // test code: a failure is a panic

    use super::*;

    /// Runs the network to the end, returning `(event, time in ps)`.
    fn run(net: &mut QueueNetwork) -> Vec<(QueueEvent, u64)> {
        let mut out = Vec::new();
        let mut evs = Vec::new();
        while let Some(t) = net.next_event() {
            net.advance(t, &mut evs);
            out.extend(evs.drain(..).map(|e| (e, t.ps())));
        }
        out
    }

    #[test]
    fn sum_rates_gives_the_bits_the_iterator_sum_gives() {
        let xs = [
            0.0,
            -0.0,
            1e9,
            3.3e-7,
            12_500_000_000.0,
            0.1,
            f64::NAN,
            f64::INFINITY,
        ];
        let mut v: Vec<(u64, f64)> = Vec::new();
        for n in 0..6u64 {
            for k in 0..xs.len() {
                v.clear();
                v.extend((0..n).map(|i| (i, xs[(k + 3 * i as usize) % xs.len()] * (i + 1) as f64)));
                let want: f64 = v.iter().map(|e| e.1).sum();
                assert_eq!(sum_rates(&v).to_bits(), want.to_bits(), "{v:?}");
            }
        }
    }

    #[test]
    fn ceil_ps_rounds_up_as_ceil_does() {
        let by_ceil = |seconds: f64| {
            let ps = (seconds * PS_PER_S_F).ceil();
            if ps.is_finite() && ps >= 0.0 {
                ps as u64
            } else {
                u64::MAX / 4
            }
        };
        let mut x = 0.123_456_789_f64;
        for _ in 0..2000 {
            x = (x * 3.917).fract();
            for s in [x * 1e-9, x * 1e-6, x, x * 1e3, x * 1e7, x * 1e9, -x * 1e-13] {
                assert_eq!(ceil_ps(s), by_ceil(s), "{s}");
            }
        }
        for s in [
            0.0,
            -0.0,
            1e-12,
            -1e-12,
            -1.5e-12,
            9.0e6,
            9.3e6,
            1e9,
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::NAN,
        ] {
            assert_eq!(ceil_ps(s), by_ceil(s), "{s}");
        }
        for ps in [
            0,
            1,
            999_999_999_999,
            (1 << 53) + 1,
            i64::MAX as u64,
            1 << 63,
            u64::MAX,
        ] {
            assert_eq!(ps_f64(ps), ps as f64, "{ps}");
        }
    }

    #[test]
    fn two_sources_into_one_link_share_by_arrival_and_queue_the_excess() {
        // Links 0 and 1: each source's NIC; link 2: the shared output port. 1 GB/s each.
        let mut net = QueueNetwork::new(vec![1e9; 3]).unwrap();
        net.start(&[LinkId(0), LinkId(2)], &[], 1e6, 0.0, None, 10)
            .unwrap();
        net.start(&[LinkId(1), LinkId(2)], &[], 1e6, 0.0, None, 11)
            .unwrap();
        let ev = run(&mut net);
        // Both inject at line rate for 1 ms; the port serves each at half rate, so both last
        // bytes leave it at 2 ms, with 1 MB queued at the 1 ms mark.
        assert!(ev.contains(&(QueueEvent::SourceDone(10), 1_000_000_000)));
        assert!(ev.contains(&(QueueEvent::SourceDone(11), 1_000_000_000)));
        for tok in [10, 11] {
            let t = ev
                .iter()
                .find(|(e, _)| *e == QueueEvent::Drained(tok))
                .map(|&(_, t)| t)
                .unwrap();
            assert!(t.abs_diff(2_000_000_000) <= 2, "{tok} drained at {t} ps");
        }
        assert!((net.link_bytes(LinkId(2)) - 2e6).abs() < 1.0);
    }

    #[test]
    fn a_flow_held_up_downstream_keeps_its_upstream_share_and_drains_later() {
        // A: links 0 -> 3 -> 4; B: 1 -> 3 (shares link 3 with A); C: 2 -> 4 (shares link 4).
        // Max-min would give A 1/2 GB/s everywhere, C 1/2 and B 1/2. FIFO: at link 3, A and B
        // arrive at 1 GB/s each and leave at 1/2 each; at link 4, A arrives at 1/2 and C at 1,
        // so C leaves at 2/3 and A at 1/3, and the port queues 1/2 GB/s.
        let mut net = QueueNetwork::new(vec![1e9; 5]).unwrap();
        net.start(&[LinkId(0), LinkId(3), LinkId(4)], &[], 1e6, 0.0, None, 1)
            .unwrap();
        net.start(&[LinkId(1), LinkId(3)], &[], 1e6, 0.0, None, 2)
            .unwrap();
        net.start(&[LinkId(2), LinkId(4)], &[], 1e6, 0.0, None, 3)
            .unwrap();
        let ev = run(&mut net);
        let drained = |tok| {
            ev.iter()
                .find(|(e, _)| *e == QueueEvent::Drained(tok))
                .map(|&(_, t)| t as f64 / 1e9)
                .unwrap()
        };
        // Link 3 holds 1 MB of A and B mixed 1:1 at 1 ms (both injected by then); it drains
        // at 1/2 each until 2 ms: B is out at 2 ms.
        assert!((drained(2) - 2.0).abs() < 1e-6, "B {}", drained(2));
        // Link 4 holds 0.5 MB mixed A:C = 1:2 when C's source stops at 1 ms; that segment
        // drains at 1 GB/s, so C's last byte is out at 1.5 ms (max-min: 2 ms).
        assert!((drained(3) - 1.5).abs() < 1e-6, "C {}", drained(3));
        // Then only A: it keeps arriving at 1/2 until link 3 is empty at 2 ms, and the queue
        // ahead of it drains at 1 - 1/2: empty at 2 ms too.
        assert!((drained(1) - 2.0).abs() < 1e-6, "A {}", drained(1));
    }

    #[test]
    fn a_queue_takes_a_new_segment_only_for_a_mix_that_differs_measurably() {
        // Two sources into link 2 at line rate: it queues, one segment mixed 1:1.
        let mut net = QueueNetwork::new(vec![1e9; 3]).unwrap();
        net.start(&[LinkId(0), LinkId(2)], &[], 1e6, 0.0, None, 10)
            .unwrap();
        net.start(&[LinkId(1), LinkId(2)], &[], 1e6, 0.0, None, 11)
            .unwrap();
        assert_eq!(net.active(), 2);
        let mut evs = Vec::new();
        net.advance(Time(100_000_000), &mut evs);
        assert_eq!(net.links[2].segs.len(), 1);
        // Stream 0 (the first data stream) arrives 10^-9 faster: the same mix within MERGE_EPS.
        net.set_arrival(2, 0, 1e9 * (1.0 + 1e-9));
        net.propagate();
        assert_eq!(net.links[2].segs.len(), 1);
        // 1% slower and back at the same instant: the empty tail goes again.
        net.set_arrival(2, 0, 0.99e9);
        net.propagate();
        assert_eq!(net.links[2].segs.len(), 2);
        net.set_arrival(2, 0, 1e9);
        net.propagate();
        assert_eq!(net.links[2].segs.len(), 1);
        // 1% slower: a segment of its own behind the first.
        net.set_arrival(2, 0, 0.99e9);
        net.propagate();
        assert_eq!(net.links[2].segs.len(), 2);
        let ev = run(&mut net);
        assert_eq!(
            ev.iter()
                .filter(|(e, _)| matches!(e, QueueEvent::Drained(_)))
                .count(),
            2
        );
        assert_eq!(net.active(), 0);
    }
}
