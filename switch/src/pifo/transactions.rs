//! Scheduling and shaping transactions: the programs that give a PIFO tree its algorithm.
//!
//! A *scheduling transaction* runs when an element is enqueued at a node and returns the
//! element's rank in that node's PIFO (smaller leaves first, ties in arrival order). A *shaping
//! transaction* runs at the same moment on a non-root node and returns the time at which the
//! element is released to the parent: until then the parent does not see it, which makes the
//! node non-work-conserving (rate limits, framing). Both are small state machines fed with the
//! packet's [`PacketInfo`] — the "packet transactions" of Sivaraman et al. (SIGCOMM 2016),
//! whose formulas the built-ins follow:
//!
//! | transaction | rank / release time |
//! |---|---|
//! | [`Fifo`] | 0 for all (ties leave in arrival order) |
//! | [`StrictPriority`] | the class's level |
//! | [`Wfq`] (STFQ) | start = max(virtual time, last finish of the class); finish = start + length / weight; virtual time = start of the last dequeued element |
//! | [`RoundRobin`] | STFQ with every packet costing 1 |
//! | [`TokenBucket`] (shaping) | tokens = min(tokens + r (now - last), b); release = now if len <= tokens else now + (len - tokens)/r; tokens -= len (len: frame bytes, or wire bytes) |
//! | [`MinRate`] | 0 while the class is within its minimum rate (a token bucket at that rate), else 1 |
//! | [`Lstf`] | slack + arrival time |
//! | [`Srpt`] / [`Sjf`] / [`Las`] / [`Edf`] | remaining bytes / message size / attained bytes / deadline |
//! | [`StopAndGo`] (shaping or scheduling) | end of the current frame of length T |
//!
//! Users add algorithms by implementing [`SchedulingTransaction`] or [`ShapingTransaction`]
//! (object-safe, `Send`); a closure `FnMut(&PacketInfo, &TxnCtx) -> u64` is a scheduling
//! transaction too. Rate arithmetic is exact integer arithmetic (bits x picoseconds), so runs are
//! deterministic and free of rounding drift.

use fabemu_fabric::link::EthernetOverhead;
use fabemu_fabric::units::{Bandwidth, Time, PS_PER_S};
use rustc_hash::FxHashMap;

use super::PacketInfo;

/// Where in the tree a transaction runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct TxnCtx {
    /// At an inner node: the position (0-based, in the order children were added) of the child
    /// whose subtree the element comes from. `None` at a leaf, where the element is the packet.
    pub child: Option<usize>,
}

/// Computes an element's rank at one node (smaller leaves first; ties in arrival order).
pub trait SchedulingTransaction: Send {
    /// The rank of the element described by `info` (with `info.now` the enqueue time).
    fn rank(&mut self, info: &PacketInfo, ctx: &TxnCtx) -> u64;
    /// Called when an element of rank `rank` leaves this node's PIFO (virtual-time algorithms
    /// advance here). The default does nothing.
    fn on_dequeue(&mut self, rank: u64, now: Time) {
        let _ = (rank, now);
    }
}

/// Computes when an element enqueued at a node may enter its parent's PIFO.
pub trait ShapingTransaction: Send {
    /// The release time of the element described by `info` (at or after `info.now`).
    fn release_time(&mut self, info: &PacketInfo, ctx: &TxnCtx) -> Time;
}

impl<F> SchedulingTransaction for F
where
    F: FnMut(&PacketInfo, &TxnCtx) -> u64 + Send,
{
    fn rank(&mut self, info: &PacketInfo, ctx: &TxnCtx) -> u64 {
        self(info, ctx)
    }
}

/// A transaction parameter that cannot work.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum ParamError {
    /// A weight that is not a positive finite number.
    #[error("weight {weight} of class {class} must be a positive finite number")]
    BadWeight {
        /// The class.
        class: usize,
        /// The weight given.
        weight: f64,
    },
    /// A rate of zero (nothing would ever be released).
    #[error("rate must be above 0 bit/s")]
    ZeroRate,
    /// A Stop-and-Go frame of zero length.
    #[error("frame length must be above 0")]
    ZeroFrame,
}

/// Which packet field a per-class transaction keys its state (and weights or levels) on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum ClassBy {
    /// The child the element comes from ([`TxnCtx::child`]; 0 at a leaf). The usual choice at
    /// inner nodes: one class per subtree.
    #[default]
    Child,
    /// [`PacketInfo::priority`].
    Priority,
    /// [`PacketInfo::dscp`].
    Dscp,
    /// [`PacketInfo::flow`].
    Flow,
    /// [`PacketInfo::qp`].
    Qp,
}

impl ClassBy {
    /// The class of an element.
    #[inline]
    pub fn class(self, info: &PacketInfo, ctx: &TxnCtx) -> u64 {
        match self {
            ClassBy::Child => ctx.child.map_or(0, |c| c as u64),
            ClassBy::Priority => u64::from(info.priority),
            ClassBy::Dscp => u64::from(info.dscp),
            ClassBy::Flow => info.flow,
            ClassBy::Qp => u64::from(info.qp),
        }
    }
}

/// Per-class state: a vector for small class numbers, a hash map for the rest (flows).
#[derive(Clone, Debug)]
struct PerClass<S> {
    dense: Vec<S>,
    sparse: FxHashMap<u64, S>,
}

impl<S> Default for PerClass<S> {
    fn default() -> Self {
        PerClass {
            dense: Vec::new(),
            sparse: FxHashMap::default(),
        }
    }
}

const DENSE_CLASSES: u64 = 256;

impl<S> PerClass<S> {
    #[inline]
    fn get_mut(&mut self, class: u64, init: impl Fn(u64) -> S) -> &mut S {
        if class < DENSE_CLASSES {
            let c = class as usize;
            while self.dense.len() <= c {
                let k = self.dense.len() as u64;
                self.dense.push(init(k));
            }
            &mut self.dense[c]
        } else {
            self.sparse.entry(class).or_insert_with(|| init(class))
        }
    }
}

/// First in, first out: every element gets rank 0 and the PIFO's tie rule keeps arrival order
/// (the same order as rank = arrival time, without growing ranks).
#[derive(Clone, Copy, Debug, Default)]
pub struct Fifo;

impl SchedulingTransaction for Fifo {
    fn rank(&mut self, _info: &PacketInfo, _ctx: &TxnCtx) -> u64 {
        0
    }
}

/// Strict priority: rank = the class's level (smaller level first; FIFO within a level).
#[derive(Clone, Debug)]
pub struct StrictPriority {
    by: ClassBy,
    levels: Vec<u64>,
    invert_from: Option<u64>,
}

impl StrictPriority {
    /// Level = the class number itself (e.g. by [`ClassBy::Child`]: the first child first).
    pub fn new(by: ClassBy) -> Self {
        StrictPriority {
            by,
            levels: Vec::new(),
            invert_from: None,
        }
    }
    /// Level = `levels[class]`; classes beyond the table get level `u64::MAX` (last).
    pub fn with_levels(by: ClassBy, levels: Vec<u64>) -> Self {
        StrictPriority {
            by,
            levels,
            invert_from: None,
        }
    }
    /// IEEE 802.1p order on [`PacketInfo::priority`]: priority 7 first, 0 last
    /// (level = 7 - priority).
    pub fn pcp() -> Self {
        StrictPriority {
            by: ClassBy::Priority,
            levels: Vec::new(),
            invert_from: Some(7),
        }
    }
}

impl SchedulingTransaction for StrictPriority {
    fn rank(&mut self, info: &PacketInfo, ctx: &TxnCtx) -> u64 {
        let c = self.by.class(info, ctx);
        if let Some(top) = self.invert_from {
            return top.saturating_sub(c);
        }
        if self.levels.is_empty() {
            return c;
        }
        usize::try_from(c)
            .ok()
            .and_then(|i| self.levels.get(i).copied())
            .unwrap_or(u64::MAX)
    }
}

/// Fixed-point scale of STFQ virtual time: one byte at weight 1 advances it by 2^16.
pub const WFQ_SCALE: u64 = 1 << 16;

fn cost_per_unit(class: usize, weight: f64) -> Result<u64, ParamError> {
    if !(weight.is_finite() && weight > 0.0) {
        return Err(ParamError::BadWeight { class, weight });
    }
    Ok(((WFQ_SCALE as f64 / weight).round() as u64).max(1))
}

#[derive(Clone, Copy, Debug)]
struct FqClass {
    last_finish: u64,
    cost: u64,
}

/// Weighted fair queueing by start-time fair queueing (STFQ; Goyal et al. 1996), as in the PIFO
/// paper: start = max(virtual_time, last_finish\[class\]); last_finish\[class\] = start +
/// length x [`WFQ_SCALE`] / weight; rank = start; virtual_time = the start (rank) of the last
/// dequeued element.
///
/// Over any backlogged period each class receives bytes in proportion to its weight (within
/// one maximum packet per class). Put it at every level of a tree for hierarchical WFQ.
#[derive(Clone, Debug)]
pub struct Wfq {
    by: ClassBy,
    default_cost: u64,
    classes: PerClass<FqClass>,
    weights_cost: Vec<u64>,
    virtual_time: u64,
}

impl Wfq {
    /// Weights per class number (`weights[k]` for class k; relative, any positive scale);
    /// classes beyond the list get weight 1.
    pub fn new(by: ClassBy, weights: &[f64]) -> Result<Self, ParamError> {
        let weights_cost = weights
            .iter()
            .enumerate()
            .map(|(k, &w)| cost_per_unit(k, w))
            .collect::<Result<Vec<u64>, ParamError>>()?;
        Ok(Wfq {
            by,
            default_cost: WFQ_SCALE,
            classes: PerClass::default(),
            weights_cost,
            virtual_time: 0,
        })
    }

    /// Every class weight 1 (fair queueing by bytes).
    pub fn fair(by: ClassBy) -> Self {
        Wfq {
            by,
            default_cost: WFQ_SCALE,
            classes: PerClass::default(),
            weights_cost: Vec::new(),
            virtual_time: 0,
        }
    }

    /// The current virtual time (start tag of the last dequeued element).
    pub fn virtual_time(&self) -> u64 {
        self.virtual_time
    }
}

impl SchedulingTransaction for Wfq {
    fn rank(&mut self, info: &PacketInfo, ctx: &TxnCtx) -> u64 {
        let class = self.by.class(info, ctx);
        let (costs, default) = (&self.weights_cost, self.default_cost);
        let c = self.classes.get_mut(class, |k| FqClass {
            last_finish: 0,
            cost: usize::try_from(k)
                .ok()
                .and_then(|i| costs.get(i).copied())
                .unwrap_or(default),
        });
        let start = self.virtual_time.max(c.last_finish);
        c.last_finish = start.saturating_add(u64::from(info.len).saturating_mul(c.cost));
        start
    }
    fn on_dequeue(&mut self, rank: u64, _now: Time) {
        self.virtual_time = rank;
    }
}

/// Round robin among classes, one packet per class per round: STFQ in which every packet costs
/// 1 (start = max(round, last\[class\]); last\[class\] = start + 1; rank = start).
#[derive(Clone, Debug, Default)]
pub struct RoundRobin {
    by: ClassBy,
    last: PerClass<u64>,
    round: u64,
}

impl RoundRobin {
    /// Round robin over the classes `by` selects.
    pub fn new(by: ClassBy) -> Self {
        RoundRobin {
            by,
            last: PerClass::default(),
            round: 0,
        }
    }
}

impl SchedulingTransaction for RoundRobin {
    fn rank(&mut self, info: &PacketInfo, ctx: &TxnCtx) -> u64 {
        let class = self.by.class(info, ctx);
        let last = self.last.get_mut(class, |_| 0);
        let start = self.round.max(*last);
        *last = start + 1;
        start
    }
    fn on_dequeue(&mut self, rank: u64, _now: Time) {
        self.round = rank;
    }
}

/// Token-bucket arithmetic in exact integers: tokens are counted in bit-picoseconds / 10^12
/// ("bits x 10^12"), so that refilling at `r` bit/s for `dt` ps adds exactly `r x dt`.
#[derive(Clone, Copy, Debug)]
struct Bucket {
    /// bits x 10^12; may go negative (a debt the release times already account for).
    tokens: i128,
    last: Time,
}

const SCALE: i128 = PS_PER_S as i128;

#[inline]
fn bytes_scaled(bytes: u64) -> i128 {
    bytes as i128 * 8 * SCALE
}

impl Bucket {
    fn full(burst: i128) -> Bucket {
        Bucket {
            tokens: burst,
            last: Time::ZERO,
        }
    }
    #[inline]
    fn refill(&mut self, now: Time, rate: u64, burst: i128) {
        let dt = now.ps().saturating_sub(self.last.ps());
        self.tokens = self
            .tokens
            .saturating_add((rate as i128).saturating_mul(dt as i128))
            .min(burst);
        self.last = self.last.max(now);
    }
}

/// Token-bucket shaper (rate `r`, burst `b`), the PIFO paper's shaping transaction:
/// tokens = min(tokens + r (now - last), b); release = now if len <= tokens, else
/// now + (len - tokens) / r (rounded up to the picosecond); tokens -= len.
///
/// Over any interval of length `t` it releases at most `b + r t` bytes, and exactly `r` in the
/// long run under backlog. The bucket starts full.
///
/// `len` is the frame's length as the queue holds it ([`PacketInfo::len`]: no FCS, preamble or
/// inter-frame gap) unless [`TokenBucket::counting_wire_bytes`] says to count what the frame
/// occupies on the wire: then `r` is a share of a link's line rate (a shaper at half the line
/// rate keeps the link half busy), where frame bytes let the link run above `r` by the
/// overhead's share (24 bytes per frame: 0.6% of a 4 KiB frame, 30% of an 80-byte ACK).
#[derive(Clone, Debug)]
pub struct TokenBucket {
    rate_bps: u64,
    burst: i128,
    bucket: Bucket,
    /// `Some`: count wire bytes with this overhead; `None`: frame bytes.
    wire: Option<EthernetOverhead>,
}

impl TokenBucket {
    /// A shaper at `rate` with a bucket of `burst_bytes`.
    pub fn new(rate: Bandwidth, burst_bytes: u64) -> Result<Self, ParamError> {
        if rate.bps() == 0 {
            return Err(ParamError::ZeroRate);
        }
        let burst = bytes_scaled(burst_bytes);
        Ok(TokenBucket {
            rate_bps: rate.bps(),
            burst,
            bucket: Bucket::full(burst),
            wire: None,
        })
    }

    /// Counts every frame as the wire bytes `overhead` gives it (FCS, preamble/SFD and gap
    /// added, padded to the minimum frame) instead of its frame length.
    pub fn counting_wire_bytes(mut self, overhead: EthernetOverhead) -> Self {
        self.wire = Some(overhead);
        self
    }
}

impl ShapingTransaction for TokenBucket {
    fn release_time(&mut self, info: &PacketInfo, _ctx: &TxnCtx) -> Time {
        let now = info.now;
        self.bucket.refill(now, self.rate_bps, self.burst);
        let len = match &self.wire {
            Some(o) => o.wire_bytes(info.len as usize),
            None => u64::from(info.len),
        };
        let len = bytes_scaled(len);
        let b = &mut self.bucket;
        let release = if len <= b.tokens {
            now
        } else {
            let wait = (len - b.tokens) as u128;
            let ps = wait.div_ceil(self.rate_bps as u128);
            now.add(Time(u64::try_from(ps).unwrap_or(u64::MAX)))
        };
        b.tokens -= len;
        release
    }
}

#[derive(Clone, Copy, Debug)]
struct MinRateClass {
    rate_bps: u64,
    bucket: Bucket,
}

/// Minimum-rate guarantees, the PIFO paper's two-level construction: this transaction at the
/// root, FIFO leaves below (one per guaranteed class, so a flow's packets never reorder).
///
/// Each class has a token bucket at its minimum rate: tokens = min(tokens + min_rate (now -
/// last), burst); if len <= tokens the class is within its minimum, tokens -= len and rank = 0;
/// otherwise rank = 1 (tokens untouched). The root thus serves, strictly first and FIFO among
/// themselves, the elements that are within their class's guarantee, then the rest FIFO.
#[derive(Clone, Debug)]
pub struct MinRate {
    by: ClassBy,
    rates: Vec<u64>,
    burst: i128,
    classes: PerClass<MinRateClass>,
}

impl MinRate {
    /// `rates[k]` is class k's guaranteed rate (classes beyond the list have none);
    /// `burst_bytes` the bucket size of every class.
    pub fn new(by: ClassBy, rates: &[Bandwidth], burst_bytes: u64) -> Self {
        MinRate {
            by,
            rates: rates.iter().map(|r| r.bps()).collect(),
            burst: bytes_scaled(burst_bytes),
            classes: PerClass::default(),
        }
    }
}

impl SchedulingTransaction for MinRate {
    fn rank(&mut self, info: &PacketInfo, ctx: &TxnCtx) -> u64 {
        let class = self.by.class(info, ctx);
        let (rates, burst) = (&self.rates, self.burst);
        let c = self.classes.get_mut(class, |k| MinRateClass {
            rate_bps: usize::try_from(k)
                .ok()
                .and_then(|i| rates.get(i).copied())
                .unwrap_or(0),
            bucket: Bucket::full(burst),
        });
        c.bucket.refill(info.now, c.rate_bps, burst);
        let len = bytes_scaled(u64::from(info.len));
        if c.rate_bps > 0 && len <= c.bucket.tokens {
            c.bucket.tokens -= len;
            0
        } else {
            1
        }
    }
}

/// Least slack time first: rank = slack + arrival time (ps), i.e. the time by which the packet
/// must leave.
#[derive(Clone, Copy, Debug, Default)]
pub struct Lstf;

impl SchedulingTransaction for Lstf {
    fn rank(&mut self, info: &PacketInfo, _ctx: &TxnCtx) -> u64 {
        info.slack.ps().saturating_add(info.arrival.ps())
    }
}

/// Shortest remaining processing time: rank = bytes of the message still to send.
#[derive(Clone, Copy, Debug, Default)]
pub struct Srpt;

impl SchedulingTransaction for Srpt {
    fn rank(&mut self, info: &PacketInfo, _ctx: &TxnCtx) -> u64 {
        info.remaining_bytes
    }
}

/// Shortest job first: rank = message size.
#[derive(Clone, Copy, Debug, Default)]
pub struct Sjf;

impl SchedulingTransaction for Sjf {
    fn rank(&mut self, info: &PacketInfo, _ctx: &TxnCtx) -> u64 {
        info.message_size
    }
}

/// Least attained service: rank = bytes the flow has attained before this packet.
#[derive(Clone, Debug, Default)]
pub struct Las {
    per_flow: Option<FxHashMap<u64, u64>>,
}

impl Las {
    /// Reads [`PacketInfo::attained_bytes`] (counted by the sender).
    pub fn from_packet() -> Self {
        Las { per_flow: None }
    }
    /// Counts bytes per [`PacketInfo::flow`] at this node: rank = bytes enqueued here for the
    /// flow before this packet. (One counter per flow ever seen.)
    pub fn per_flow() -> Self {
        Las {
            per_flow: Some(FxHashMap::default()),
        }
    }
}

impl SchedulingTransaction for Las {
    fn rank(&mut self, info: &PacketInfo, _ctx: &TxnCtx) -> u64 {
        match &mut self.per_flow {
            None => info.attained_bytes,
            Some(m) => {
                let a = m.entry(info.flow).or_insert(0);
                let rank = *a;
                *a = a.saturating_add(u64::from(info.len));
                rank
            }
        }
    }
}

/// Earliest deadline first: rank = deadline (ps).
#[derive(Clone, Copy, Debug, Default)]
pub struct Edf;

impl SchedulingTransaction for Edf {
    fn rank(&mut self, info: &PacketInfo, _ctx: &TxnCtx) -> u64 {
        info.deadline.ps()
    }
}

/// Stop-and-Go queueing (Golestani 1990): time is cut into frames of length T; a packet that
/// arrives during a frame is released at the frame's end, so rank / release time =
/// (floor(now / T) + 1) x T.
///
/// The PIFO paper keeps `frame_end` as state and advances it by T when `now` passes it; frames
/// aligned to time 0 are the same frames without the state (and stay right after idle periods
/// longer than one frame). Use it as a shaping transaction (the usual form) or as a scheduling
/// transaction.
#[derive(Clone, Copy, Debug)]
pub struct StopAndGo {
    frame: Time,
}

impl StopAndGo {
    /// Frames of length `frame`.
    pub fn new(frame: Time) -> Result<Self, ParamError> {
        if frame.ps() == 0 {
            return Err(ParamError::ZeroFrame);
        }
        Ok(StopAndGo { frame })
    }

    fn frame_end(&self, now: Time) -> Time {
        let t = self.frame.ps();
        Time((now.ps() / t).saturating_add(1).saturating_mul(t))
    }
}

impl ShapingTransaction for StopAndGo {
    fn release_time(&mut self, info: &PacketInfo, _ctx: &TxnCtx) -> Time {
        self.frame_end(info.now)
    }
}

impl SchedulingTransaction for StopAndGo {
    fn rank(&mut self, info: &PacketInfo, _ctx: &TxnCtx) -> u64 {
        self.frame_end(info.now).ps()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pkt(len: u32, now: u64) -> PacketInfo {
        PacketInfo {
            len,
            now: Time(now),
            ..PacketInfo::default()
        }
    }

    #[test]
    fn token_bucket_counts_frame_or_wire_bytes() {
        // 8 Gb/s = 1 byte per ns, no burst: each frame waits for its own length in tokens.
        // A 576-byte frame is 600 bytes on the wire (FCS 4, preamble 8, gap 12).
        let ctx = TxnCtx::default();
        let frame = TokenBucket::new(Bandwidth::from_gbps(8), 0).unwrap();
        let wire = frame
            .clone()
            .counting_wire_bytes(EthernetOverhead::default());
        for (mut tb, per) in [(frame, 576), (wire, 600)] {
            let releases: Vec<Time> = (0..4)
                .map(|_| tb.release_time(&pkt(576, 0), &ctx))
                .collect();
            let want: Vec<Time> = (1..=4).map(|k| Time::from_ns(k * per)).collect();
            assert_eq!(releases, want);
        }
        // Short frames are padded to the minimum (64 with FCS): 40 bytes count 64 + 8 + 12.
        let mut tb = TokenBucket::new(Bandwidth::from_gbps(8), 0)
            .unwrap()
            .counting_wire_bytes(EthernetOverhead::default());
        assert_eq!(tb.release_time(&pkt(40, 0), &ctx), Time::from_ns(84));
    }

    #[test]
    fn token_bucket_follows_the_formula() {
        // 8 Gb/s = 1 byte per ns; burst 1000 B.
        let mut tb = TokenBucket::new(Bandwidth::from_gbps(8), 1000).unwrap();
        let ctx = TxnCtx::default();
        assert_eq!(tb.release_time(&pkt(600, 0), &ctx), Time(0));
        // 400 tokens left: 600 B waits for 200 B = 200 ns.
        assert_eq!(tb.release_time(&pkt(600, 0), &ctx), Time::from_ns(200));
        // Now -200 tokens; at 1 us, 800: 1000 B waits 200 ns more.
        assert_eq!(
            tb.release_time(&pkt(1000, 1_000_000), &ctx),
            Time::from_ns(1200)
        );
        // Tokens cap at the burst: after a long idle period only 1000 B pass at once.
        assert_eq!(
            tb.release_time(&pkt(1000, 1_000_000_000), &ctx),
            Time(1_000_000_000)
        );
        assert_eq!(
            tb.release_time(&pkt(1, 1_000_000_000), &ctx),
            Time(1_000_000_000).add(Time::from_ns(1))
        );
        assert_eq!(
            TokenBucket::new(Bandwidth(0), 1).err(),
            Some(ParamError::ZeroRate)
        );
    }

    #[test]
    fn stfq_tags_and_virtual_time() {
        let mut w = Wfq::new(ClassBy::Child, &[1.0, 2.0]).unwrap();
        let c0 = TxnCtx { child: Some(0) };
        let c1 = TxnCtx { child: Some(1) };
        assert_eq!(w.rank(&pkt(100, 0), &c0), 0);
        assert_eq!(w.rank(&pkt(100, 0), &c0), 100 * WFQ_SCALE);
        assert_eq!(w.rank(&pkt(100, 0), &c1), 0);
        assert_eq!(w.rank(&pkt(100, 0), &c1), 50 * WFQ_SCALE);
        w.on_dequeue(300 * WFQ_SCALE, Time::ZERO);
        // An idle class restarts at the virtual time.
        assert_eq!(
            w.rank(&pkt(1, 0), &TxnCtx { child: Some(2) }),
            300 * WFQ_SCALE
        );
        assert!(Wfq::new(ClassBy::Child, &[1.0, 0.0]).is_err());
        assert!(Wfq::new(ClassBy::Child, &[f64::NAN]).is_err());
    }

    #[test]
    fn simple_ranks() {
        let ctx = TxnCtx::default();
        let info = PacketInfo {
            len: 10,
            flow: 7,
            priority: 5,
            remaining_bytes: 300,
            message_size: 1000,
            attained_bytes: 44,
            deadline: Time(99),
            slack: Time(5),
            arrival: Time(10),
            now: Time(12),
            ..PacketInfo::default()
        };
        assert_eq!(Fifo.rank(&info, &ctx), 0);
        assert_eq!(StrictPriority::pcp().rank(&info, &ctx), 2);
        assert_eq!(
            StrictPriority::with_levels(ClassBy::Priority, vec![0; 3]).rank(&info, &ctx),
            u64::MAX
        );
        assert_eq!(Lstf.rank(&info, &ctx), 15);
        assert_eq!(Srpt.rank(&info, &ctx), 300);
        assert_eq!(Sjf.rank(&info, &ctx), 1000);
        assert_eq!(Las::from_packet().rank(&info, &ctx), 44);
        let mut las = Las::per_flow();
        assert_eq!(las.rank(&info, &ctx), 0);
        assert_eq!(las.rank(&info, &ctx), 10);
        assert_eq!(Edf.rank(&info, &ctx), 99);
        let mut sg = StopAndGo::new(Time(10)).unwrap();
        assert_eq!(sg.release_time(&info, &ctx), Time(20));
        assert_eq!(SchedulingTransaction::rank(&mut sg, &pkt(1, 20), &ctx), 30);
        let mut rr = RoundRobin::new(ClassBy::Flow);
        assert_eq!(rr.rank(&info, &ctx), 0);
        assert_eq!(rr.rank(&info, &ctx), 1);
        let mut closure = |i: &PacketInfo, _: &TxnCtx| u64::from(i.len) * 2;
        assert_eq!(SchedulingTransaction::rank(&mut closure, &info, &ctx), 20);
    }

    #[test]
    fn min_rate_marks_within_guarantee() {
        // 8 Gb/s = 1 B/ns guarantee for class 0, burst 100 B; class 1 has none.
        let mut m = MinRate::new(ClassBy::Child, &[Bandwidth::from_gbps(8)], 100);
        let c0 = TxnCtx { child: Some(0) };
        assert_eq!(m.rank(&pkt(100, 0), &c0), 0);
        assert_eq!(m.rank(&pkt(100, 0), &c0), 1);
        assert_eq!(m.rank(&pkt(100, 100_000), &c0), 0);
        assert_eq!(m.rank(&pkt(1, 0), &TxnCtx { child: Some(1) }), 1);
    }
}
