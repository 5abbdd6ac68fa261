//! The flow network: flows that start, progress at max-min fair rates and finish, in virtual
//! time, with rates recomputed incrementally: only for the flows a change can move.
//!
//! ## How a step works
//!
//! - [`FlowNetwork::start`] registers a flow on its links and marks it dirty; rates are not
//!   recomputed there, so that many starts (and finishes) at one instant cost one recomputation.
//!   A caller that starts many flows on the same links with the same weights (a queue pair's
//!   messages) registers them once as a path ([`FlowNetwork::add_path`], checked and sorted
//!   there) and starts each flow on it ([`FlowNetwork::start_on_path`]): the same flow, without
//!   the lists' checks and sort at every start. A short path lives in one cache line of its own.
//! - A flow's ACK reservations ([`FlowNetwork::start_with_acks`]) lower the capacity its reverse
//!   links offer to their flows; when a filling moves a rate by more than
//!   [`RESERVATION_EPSILON`] from the rate its reservations were set at, they are updated and
//!   their links marked dirty, and the refresh goes on in rounds until no reservation moves.
//!   A link applies the sum of its flows' reservations only when it has moved by more than
//!   [`LINK_RESERVATION_SLACK`] of the link's capacity since it last did (and then refills), so
//!   that the many small updates of the flows a finish speeds up do not each refill a tight
//!   reverse link (and with it most of an all-to-all's component); the links are checked once
//!   per round, after all of its updates.
//!   Where a reservation's feedback on its own flow overshoots (the rate swings to the other side
//!   of it), later updates apply only a shrinking share of the miss, so that the rounds settle
//!   at the fixed point instead of swinging between two rates (see `FlowNetwork::set_rate`).
//!   *Known limit:* where a reservation's loop gain is far above 1 (flows whose wire bytes per
//!   payload byte differ some 80-fold share links with reserving flows: in practice only
//!   one-packet messages beside bulk ones), the fixed point need not be unique, and an
//!   incremental refresh and a full recomputation can settle at different ones; the property test
//!   found one such case in 150 000 random scenarios.
//!   *A start's reservation.* A flow starts reserving at the rate that the last flow to leave
//!   its first ACK link (first there among that flow's ACK links) had reserved, if that flow's
//!   first data link was the new flow's too (`res_hint`); else at 0. A collective's next step
//!   starts a flow on the links of the one that just finished, at about its rate: reserving
//!   from 0, its first filling would move the reservation by 100%, refill the reverse links and
//!   with them the neighbours, and another round would follow. The start's value is only where
//!   the reservation begins: the flow's first filling (in the same refresh) compares it with
//!   the flow's rate and updates it when it is off by more than [`RESERVATION_EPSILON`], as
//!   every later filling does, so after a refresh a reservation is within that of its flow's
//!   rate, as it was when every start reserved 0 (whose first update was always a full one).
//! - *Held releases.* The ACK capacity a *finished* flow reserved on its reverse links is given
//!   back at its finish (within the slack) only on links that carry few flows
//!   ([`HOLD_RELEASES_ABOVE`]). On the others it is held until the link is refilled for a reason of
//!   its own (a flow starts on it or leaves it, which makes its applied reservation exact), a rate
//!   change moves its reservations (the exact sum is applied when it is beyond the slack), or its
//!   last reserving flow leaves (all of its ACK load is gone then). Given back at the finish, a
//!   release raises the capacity of a link that is usually tight for flows of its own, and refills
//!   them and every flow above their level that they reach: in an all-to-all, most of a million
//!   flows at each of thousands of finish instants; and the rates it moves (by about the ACK share)
//!   part flows that would otherwise finish together, so that every later finish moves rates again.
//!   Held, it usually waits for the link's own flows, which finish together and whose finish
//!   refills it at no cost. The price: such a link may offer its flows less than it has, by the ACK
//!   load of the flows that finished since its own flows last changed while others still reserve
//!   there (at most its whole ACK load, a few percent of the link at one ACK per 4 KiB packet),
//!   never more (a growing reservation is applied at once, within the slack). In a collective,
//!   whose every step starts flows on its links, it is given back at the next step.
//! - *Timed releases.* On a link of few flows (at most [`HOLD_RELEASES_ABOVE`]) the ACK capacity
//!   a finished flow reserved is held for [`RELEASE_HOLD_PS`] (100 us) after its finish, then
//!   given back (the link checks its reservations in the next refresh after that time), unless
//!   the link's own flows changed first (which makes its applied reservation exact) or a
//!   reservation moved it beyond the slack. Why: in a collective the finished flow's successor
//!   on the same queue pair starts a path latency or so later and reserves the same capacity
//!   again (`res_hint`); given back in between, the link's flow was refilled up by the ACK
//!   share at the finish and down again at the successor's start: two refillings of each
//!   neighbour per message, which also parted flows that otherwise run in lockstep (the
//!   8192-host ring drifted apart from its first ms on, and every message then had its own
//!   instant). Held, the successor takes the capacity over within the slack and nothing is
//!   refilled. Physically the ACKs of a flow's last packets cross its reverse links for about
//!   one round trip after its last byte; beyond that the hold is a modelling choice, whose
//!   price is bounded: a link may offer its flows less than it has by the ACK load of flows
//!   that finished in the last 100 us and have no successor (at most ~2.5% of the link at one
//!   ACK per 4 KiB packet, for at most 100 us each). Measured: the permutation of
//!   `tests/flow.rs` moved by 1.7e-4 at most (makespan 1.7532 → 1.7541 ms, packet level 1.7519),
//!   the 16 MiB ring on 1024 hosts (16 KiB messages, shorter than a step's latency, so its
//!   links always hold some reservation) 8334.44 → 8339.97 us (packet level 8332.98), the 1 GiB
//!   ring on 1024 hosts 184 218.955 → 184 217.402 us. [`FlowNetwork::set_release_hold`] with 0
//!   gives releases back at the finish, as before.
//! - A flow that is a component of its own (each of its links carries it alone: a ring's) is
//!   filled in closed form (`FlowNetwork::fill_alone`: the smallest level `C_l / w` of its
//!   links). When only the capacity of one of its links moved (a neighbour's reservation) and
//!   that link neither set its rate before nor is below it now, the refilling is skipped: it
//!   would give the same bits (`FlowNetwork::keeps_rate`).
//! - Every query ([`FlowNetwork::next_finish`], [`FlowNetwork::rate`], [`FlowNetwork::advance`])
//!   first *refreshes*. The links a start, a finish or a reservation touched are *perturbed*;
//!   each gets a *threshold*, a level below which the progressive filling of the new problem
//!   freezes the same flows at the same rates as the last filling did (see
//!   `FlowNetwork::threshold`: no perturbed link saturates below it, before or after). From
//!   each perturbed link a search over "link is used by a flow at or above the threshold" and
//!   "flow uses link" collects its *region*; the flows below the threshold on the region's
//!   links stay as they are and only lower those links' capacities (their load, the link's
//!   `base`). The region's flows, sorted by [`FlowId`], and links, sorted by [`LinkId`], are
//!   filled by [`crate::maxmin`] from the threshold up. A finish usually removes a fast flow,
//!   whose links saturate at its rate or higher, so the region is the few flows at the top
//!   rather than the connected component (a million flows in an all-to-all). Flows whose rate
//!   changed (bit for bit) settle their progress at the current time and get a new projected
//!   finish; links whose load changed settle their carried bytes. The result equals a full
//!   recomputation ([`FlowNetwork::recompute_all`], threshold 0: the connected components) up
//!   to the order of float additions (checked to 1e-9 relative by a property test).
//! - [`FlowNetwork::advance`] moves time forward finish by finish: it takes the earliest valid
//!   entry of the finish heap, removes every flow finishing at that instant (in [`FlowId`] order),
//!   refreshes, and repeats until the target time, so passing a time beyond
//!   [`FlowNetwork::next_finish`] is handled too.
//!
//! A flow's bytes count as sent when its projected finish time comes, not when a recomputed
//! `remaining` reaches zero: rounding can leave a remainder of a fraction of a byte, and the
//! finish time (rounded up to the picosecond) is the one truth.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::num::NonZeroU32;

use fabemu_fabric::units::{Time, PS_PER_S};
use smallvec::SmallVec;

use crate::maxmin::{check_cap, check_capacities, normalize_usage, Filler};
use crate::{FlowError, FlowId, LinkId};

/// Picoseconds per second as a float, for rate (bytes/s) x time (ps) products.
const PS_PER_S_F: f64 = PS_PER_S as f64;

/// How far a flow's rate may drift from the rate its reservations were last set at (relative)
/// before they are updated. See [`FlowNetwork::start_with_acks`] for why 1e-3 is harmless: a
/// reservation is a few percent of a link (ACKs), so the capacity left for data is off by at
/// most 1e-3 x that, about 2e-5 of the link for one ACK per 4 KiB packet.
pub const RESERVATION_EPSILON: f64 = 1e-3;

/// How far a link's reservation as the filling applies it may lag its exact sum (relative to the
/// link's capacity) before the filling follows and the link is refilled. Why: the flows a finish
/// speeds up move their reservations by a little each, on reverse links that are usually tight;
/// refilling each such link at every finish refills most of an all-to-all's component. With the
/// slack, a 100 Gb/s link offers its flows a capacity off by at most 1e-4 of it (12.5 MB/s), far
/// below what the flow model is checked to (1% of the packet level), and the per-flow
/// updates pile up until together they move the link by that much.
pub const LINK_RESERVATION_SLACK: f64 = 1e-4;

/// A link that carries more flows than this holds the ACK capacity finished flows reserved on
/// it until its own flows change (see "Held releases" in the module documentation); one that
/// carries fewer gives it back [`RELEASE_HOLD_PS`] after the finish ("Timed releases"), or at
/// once with [`FlowNetwork::set_release_hold`] at 0. Giving back refills the link's
/// flows and every flow above their level that they reach: few on a link shared by few flows
/// (a ring's, a permutation's), most of an all-to-all's million on its host links, shared by a
/// thousand each.
pub const HOLD_RELEASES_ABOVE: usize = 64;

/// How long (ps) the ACK capacity a finished flow reserved on a link of few flows (at most
/// [`HOLD_RELEASES_ABOVE`]) is held before it is given back, unless the link's own flows change
/// or its reservations move first (see "Timed releases" in the module documentation): 100 us.
/// A collective's next message on the same queue pair starts a path latency (a few us) plus the
/// drift between ranks later and takes the capacity over; 10 us was too short for the 8192-host
/// ring, whose ranks then still drifted apart (its first 10 ms took as long as with no hold),
/// 100 us keeps it in lockstep, and the price (module documentation) stays small.
pub const RELEASE_HOLD_PS: u64 = 100_000_000;

/// Below this share of its capacity, a link's capacity left for data is not lowered further by
/// reservations: only a link whose ACKs alone would exceed it (data at about 50x its capacity
/// acknowledged over it) gets there, and its flows must still progress.
const MIN_DATA_SHARE: f64 = 1.0 / 64.0;

/// Rounds after which reservations stop being updated within one refresh (a safeguard: the
/// updates shrink geometrically, usually by the ACK-to-data weight ratio per round, and stop
/// after two or three rounds in practice; a damped loop takes about ten).
const MAX_RESERVATION_ROUNDS: u32 = 64;

/// One link direction.
///
/// Laid out in the order written (`repr(C)`, 120 bytes) by who reads what, so that a ring's
/// message, which touches every field of four links at its start, its fillings and its finish,
/// reads each link in as few cache lines as its size allows: the fillings' and the settling's
/// numbers first, then the flow list (inline up to four flows: a ring's or a permutation's link
/// carries one or two, and a list of its own would be one more line at each start and finish)
/// and the refresh's marks. The weights and the refresh's `base` are apart
/// (`FlowNetwork::link_weights`, `FlowNetwork::link_base`): a ring's lone flows need neither
/// in their fillings. Not aligned to the cache line on purpose: aligned (128 bytes, or 192
/// with the weights inside), a ring's links missed a 1 MiB cache 1.3 to 1.5 times as often
/// (cachegrind).
#[derive(Debug, Default)]
#[repr(C)]
struct Link {
    cap: f64,
    /// The reservation the filling takes off the capacity: `reserved` as it was when it last
    /// moved by more than [`LINK_RESERVATION_SLACK`] of `cap` from this (see
    /// `FlowNetwork::reservation_moved`).
    applied: f64,
    /// Current load `sum w * r` (bytes/s) of the flows that use it, as the last filling of its
    /// component computed it.
    load: f64,
    /// Load of those ACKs at the flows' current rates, `sum a * r` (bytes/s), for carried bytes.
    ack_load: f64,
    /// Bytes carried up to `settled_at` (ps).
    bytes: f64,
    settled_at: u64,
    /// Capacity reserved by flows whose ACKs cross it: `sum a * reserved_rate` (bytes/s).
    reserved: f64,
    /// Slots of the active flows that use this link, in no particular order (a flow knows its
    /// position, for O(1) removal).
    flows: SmallVec<[u32; 4]>,
    /// The largest rate of a flow removed from this link since the last refresh (0: none).
    removed_max: f64,
    /// Scratch of a refresh: the lowest cap of the new flows on this link (`+inf`: none).
    new_cap: f64,
    /// Epoch of the last refresh that reached this link, and its local index then.
    mark: u32,
    local: u32,
    /// Epoch of the last refresh round in which this link was perturbed.
    pmark: u32,
    /// Flows that reserve on this link.
    reservers: u32,
    dirty: bool,
    /// Listed in `FlowNetwork::res_touched`: `reserved` changed since it was last checked.
    res_touched: bool,
    /// A flow left it since the last refresh, which refills it anyway: its applied reservation
    /// then becomes exact (`sync_reservation`; a start syncs at once).
    own_change: bool,
}

/// A finish-heap entry `(finish time, slot, version)` packed into one integer that orders like
/// the tuple: the heap's pops compare entries a dozen times each, and one `u128` compares in
/// two instructions where the tuple takes three branches.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Finish(u128);

impl Finish {
    fn new(time: u64, slot: u32, version: u32) -> Finish {
        Finish(u128::from(time) << 64 | u128::from(slot) << 32 | u128::from(version))
    }

    /// `(finish time, slot, version)`.
    fn parts(self) -> (u64, u32, u32) {
        ((self.0 >> 64) as u64, (self.0 >> 32) as u32, self.0 as u32)
    }
}

/// One flow slot; slots are reused after a flow finished. Aligned to the cache line: its 120
/// bytes then take two whole lines rather than straddling three (a ring's message reads its
/// flow at the start, at each filling and at the finish, and no cache holds 8192 of them).
#[derive(Debug, Default)]
#[repr(align(64))]
struct Flow {
    active: bool,
    /// `(link, weight, position of this flow in the link's `flows`)`, sorted by link.
    usage: Vec<(u32, f64, u32)>,
    /// `(link, weight)` reservations (ACKs), sorted by link.
    reserve: Vec<(u32, f64)>,
    /// The rate the reservations were last set at (0: not yet).
    reserved_rate: f64,
    /// The miss `rate - reserved_rate` that last updated the reservations in refresh
    /// `res_refresh` (0: none yet), for the damping of [`FlowNetwork::set_rate`].
    res_miss: f64,
    /// The share of a miss an update applies in refresh `res_refresh` (1 until damped).
    res_gain: f64,
    /// The refresh (see `FlowNetwork::refreshes`) that `res_miss` and `res_gain` belong to.
    res_refresh: u32,
    /// Rate cap (bytes/s), `+inf` for none.
    cap: f64,
    /// Payload bytes left at `last_change`.
    remaining: f64,
    last_change: u64,
    /// Current rate (bytes/s); 0 until the first refresh after the start.
    rate: f64,
    token: u64,
    dirty: bool,
    /// Listed in `FlowNetwork::projecting`: its rate changed in the refresh under way.
    projecting: bool,
}

/// Per flow slot, for skipping the refilling of a flow that is a component of its own when only
/// the capacity of a link that does not bound it moved (the ring's flows: a neighbour's ACK
/// reservation on one of its two links, about one filling in four).
#[derive(Clone, Copy, Debug)]
struct Solo {
    /// How many of the flow's links carry another flow too (0: `FlowNetwork::fill_alone`
    /// fills it).
    shared: u32,
    /// The link whose level `C_l / w` set the rate at the flow's last filling, if that was a
    /// `fill_alone`; [`NO_BIND`] when the cap did, or the flow was filled otherwise (or not
    /// yet).
    bind: u32,
}

/// [`Solo::bind`] of a flow whose rate no link of its own set alone.
const NO_BIND: u32 = u32::MAX;

/// A path registered with [`FlowNetwork::add_path`]: its data links and ACK links with their
/// weights, validated and normalized once, for the flows started on it with
/// [`FlowNetwork::start_on_path`].
/// Stored as its index plus one, so that an `Option<PathId>` takes four bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PathId(NonZeroU32);

impl PathId {
    /// Its index in `FlowNetwork::paths`.
    fn index(self) -> usize {
        self.0.get() as usize - 1
    }
}

/// Entries (data and ACK links together) a registered path holds in its own record.
const PATH_INLINE: usize = 4;

/// A registered path: `usage` data entries, then `reserve` ACK entries, in `links` and
/// `weights` when they are at most [`PATH_INLINE`], else from `start` in
/// `FlowNetwork::path_entries`. One cache line: a start reads its path there (a ring's
/// neighbours mostly share a leaf switch, two links each way), not a span and then a pool.
#[derive(Clone, Copy, Debug)]
#[repr(C, align(64))]
struct PathSpan {
    usage: u32,
    reserve: u32,
    start: u32,
    links: [u32; PATH_INLINE],
    weights: [f64; PATH_INLINE],
}

/// A fluid network of flows over link directions with weighted max-min fair rates (see the
/// crate documentation for the model).
#[derive(Debug)]
pub struct FlowNetwork {
    now: u64,
    links: Vec<Link>,
    /// Per link: `link_weights[l][k]` is the weight of flow `links[l].flows[k]` on it (apart
    /// from the link, which then takes 120 bytes instead of 160, and from its slots, which stay
    /// dense for the searches that only read them; a ring's message reads it at start and
    /// finish only).
    link_weights: Vec<SmallVec<[f64; 2]>>,
    /// Per link, scratch of a refresh: the load of its flows left out of the refilling (apart,
    /// like the weights: a lone flow's filling, every filling of a ring, needs none).
    link_base: Vec<f64>,
    /// Per link: `(first data link, reserved rate)` of the last flow that left with this link
    /// first among its ACK links; a flow that starts on the same links reserves at that rate
    /// from its start (see `FlowNetwork::start_with_acks`).
    res_hint: Vec<(u32, f64)>,
    flows: Vec<Flow>,
    /// Per flow slot: the epoch of the last refresh that reached it. Apart from the flows, so
    /// that the component search, which checks every flow of every link it crosses, reads a
    /// dense array instead of a cache line of each flow.
    flow_mark: Vec<u32>,
    /// Per flow slot: the rate of the flow as the last filling left it, `+inf` for a flow not
    /// filled yet (so that every threshold takes it in); dense, like `flow_mark`, for the
    /// threshold searches that read it for every flow of a link.
    fill_rate: Vec<f64>,
    /// Per flow slot: bumped at every rate change of its flow and at its removal; finish-heap
    /// entries carry it, and only the entry with the current version is valid (a removed flow's
    /// version moved on, so no entry of it is). Dense, so that checking a heap entry, stale
    /// ones included, reads no flow.
    version: Vec<u32>,
    /// Per flow slot: what lets a refilling of a lone flow be skipped (see [`Solo`]); dense,
    /// so that the check reads no flow.
    solo: Vec<Solo>,
    /// Set for good once a refresh stopped updating reservations at
    /// [`MAX_RESERVATION_ROUNDS`] with one still off: a refilling at an unchanged rate may then
    /// move a reservation, so none is skipped any more.
    res_capped: bool,
    /// Set by [`FlowNetwork::recompute_all`]: every threshold is 0.
    full: bool,
    /// Scratch of a refresh round: `(threshold, link)` of the perturbed links.
    pert: Vec<(f64, u32)>,
    /// Scratch of a threshold: `(rate, weight)` of a link's filled flows.
    rates_scratch: Vec<(f64, f64)>,
    /// Free flow slots, reused last-freed first.
    free: Vec<u32>,
    active: usize,
    dirty_links: Vec<u32>,
    dirty_flows: Vec<u32>,
    /// Links whose `reserved` changed since their applied reservation was last checked.
    res_touched: Vec<u32>,
    /// Flows whose rate changed in the refresh under way, for `FlowNetwork::project_finishes`.
    projecting: Vec<u32>,
    /// `(finish time, slot, version)`: the earliest valid entry is the next finish.
    finishes: BinaryHeap<Reverse<Finish>>,
    epoch: u32,
    filler: Filler,
    // Scratch buffers of a refresh, kept to avoid allocating per event.
    comp_flows: Vec<u32>,
    comp_links: Vec<u32>,
    usage_scratch: Vec<(u32, f64)>,
    reserve_scratch: Vec<(u32, f64)>,
    /// The registered paths ([`PathId`] indexes it) and their normalized entries, one pool
    /// for all (a path re-set with as many entries as before keeps its place).
    paths: Vec<PathSpan>,
    path_entries: Vec<(u32, f64)>,
    /// Rounds of reservation updates in the refresh under way.
    rounds: u32,
    /// Refreshes so far (wrapping): a flow's damping state from an older refresh is stale.
    refreshes: u32,
    /// Links that carry more flows than this hold released ACK capacity.
    hold_above: usize,
    /// How long releases on links of few flows are held (ps; 0: given back at once).
    release_hold: u64,
    /// `(deadline, link)` of the held releases on links of few flows, by deadline (they are
    /// pushed at the network's time plus `release_hold`, which never decreases).
    held: VecDeque<(u64, u32)>,
    /// Per link: a release changed its `reserved` without listing it for a check since its
    /// reservations were last checked (`FlowNetwork::apply_reservations`). A held release whose
    /// time comes on a link without this flag is not listed: the check would find the applied
    /// reservation within the slack, as the last check left it (every other change of
    /// `reserved` lists the link). In a collective the successor's start has been checked by
    /// then, so the expiry reads no link (dense, apart from the links, for that).
    unchecked: Vec<bool>,
}

impl FlowNetwork {
    /// A network of `capacities.len()` link directions; `capacities[l]` is the capacity of link
    /// direction `l` in bytes per second (positive and finite, else an error).
    pub fn new(capacities: Vec<f64>) -> Result<FlowNetwork, FlowError> {
        check_capacities(&capacities)?;
        let n = capacities.len();
        Ok(FlowNetwork {
            now: 0,
            link_weights: vec![SmallVec::new(); n],
            link_base: vec![0.0; n],
            res_hint: vec![(u32::MAX, 0.0); n],
            links: capacities
                .into_iter()
                .map(|cap| Link {
                    cap,
                    new_cap: f64::INFINITY,
                    ..Link::default()
                })
                .collect(),
            flows: Vec::new(),
            flow_mark: Vec::new(),
            fill_rate: Vec::new(),
            version: Vec::new(),
            solo: Vec::new(),
            res_capped: false,
            full: false,
            pert: Vec::new(),
            rates_scratch: Vec::new(),
            free: Vec::new(),
            active: 0,
            dirty_links: Vec::new(),
            dirty_flows: Vec::new(),
            res_touched: Vec::new(),
            projecting: Vec::new(),
            finishes: BinaryHeap::new(),
            epoch: 0,
            filler: Filler::default(),
            comp_flows: Vec::new(),
            comp_links: Vec::new(),
            usage_scratch: Vec::new(),
            reserve_scratch: Vec::new(),
            paths: Vec::new(),
            path_entries: Vec::new(),
            rounds: 0,
            refreshes: 0,
            hold_above: HOLD_RELEASES_ABOVE,
            release_hold: RELEASE_HOLD_PS,
            held: VecDeque::new(),
            unchecked: vec![false; n],
        })
    }

    /// Sets how many flows a link must carry to hold the ACK capacity finished flows leave on it
    /// until its own flows change ([`HOLD_RELEASES_ABOVE`] unless set): 0 holds on every link
    /// that carries a flow, `usize::MAX` on none (every link then times its releases, see
    /// [`FlowNetwork::set_release_hold`]). For tests and experiments; scenarios use the default.
    pub fn set_hold_releases_above(&mut self, flows: usize) {
        self.hold_above = flows;
    }

    /// Sets how long (ps) the ACK capacity a finished flow leaves on a link of few flows is held
    /// ([`RELEASE_HOLD_PS`] unless set; 0 gives it back at the finish). For tests and
    /// experiments; scenarios use the default.
    pub fn set_release_hold(&mut self, ps: u64) {
        self.release_hold = ps;
    }

    /// Starts a flow at `now` that must move `bytes` payload bytes.
    ///
    /// `usage` lists the link directions it loads: at rate `r` (payload bytes/s) it uses
    /// `weight * r` of each one's capacity (a link listed twice counts with the sum of its
    /// weights). `cap` bounds `r`; `token` comes back when the flow finishes. Rates are
    /// recomputed lazily, at the next query.
    ///
    /// `now` may be later than [`FlowNetwork::now`] only if no flow finishes up to it (the
    /// network then advances to `now`); otherwise advance first, to collect the finished flows.
    pub fn start(
        &mut self,
        now: Time,
        usage: &[(LinkId, f64)],
        bytes: u64,
        cap: Option<f64>,
        token: u64,
    ) -> Result<FlowId, FlowError> {
        self.start_with_acks(now, usage, &[], bytes, cap, token)
    }

    /// Like [`FlowNetwork::start`], with `acks`: link directions on which the flow *reserves*
    /// `weight * r` of the capacity instead of sharing it (its ACKs on the reverse path).
    ///
    /// Why a reservation: ACK bytes are a few percent of a flow's data bytes, yet sharing a link
    /// joins the flow to every flow on its reverse path, so that a ring of flows becomes one
    /// connected component and every start or finish refills all of them. A reservation takes
    /// its capacity off the link before the filling (`C - sum a * reserved rate`), and does not
    /// join components. It is set at the flow's rate and updated when the rate has moved by more
    /// than [`RESERVATION_EPSILON`] (relative) since (it starts at the rate its links last
    /// carried: "A start's reservation" in the module documentation); the links whose
    /// reservation changed are refilled in the same refresh, which may move other rates and
    /// their reservations in turn (each round smaller by the ACK-to-data weight ratio, about
    /// 1/50; where flows with small weights amplify it beyond the update itself, the updates are
    /// damped). The capacity a filling
    /// sees is thus off by at most `RESERVATION_EPSILON` of the ACK load: 2e-5 of a link at one
    /// ACK per 4 KiB packet, far below what the flow model is checked to (1% of the packet
    /// level). A link applies the sum of its reservations only when it has moved by more than
    /// [`LINK_RESERVATION_SLACK`] of its capacity (1e-4) since it last did, so that the small
    /// updates of many flows perturb it once rather than each; what a finished flow reserved is
    /// held until the link is next refilled for its own flows' sake (see the module
    /// documentation: a filling may offer less than the link has, never more). The carried
    /// bytes ([`FlowNetwork::link_bytes`]) count the ACKs at the exact rates.
    /// A link whose reservations would leave less than 1/64 of its capacity keeps that 1/64 for
    /// its flows (only ACKs of data at about 50x its capacity get there).
    pub fn start_with_acks(
        &mut self,
        now: Time,
        usage: &[(LinkId, f64)],
        acks: &[(LinkId, f64)],
        bytes: u64,
        cap: Option<f64>,
        token: u64,
    ) -> Result<FlowId, FlowError> {
        let (at, cap) = self.check_start(now, bytes, cap)?;
        let mut scratch = std::mem::take(&mut self.usage_scratch);
        let mut reserve = std::mem::take(&mut self.reserve_scratch);
        let checked = normalize_usage(usage, self.links.len(), &mut scratch)
            .and_then(|()| normalize_usage(acks, self.links.len(), &mut reserve));
        let started = checked.and_then(|()| {
            self.start_normal(
                at,
                scratch.iter().copied(),
                reserve.iter().copied(),
                bytes,
                cap,
                token,
            )
        });
        self.usage_scratch = scratch;
        self.reserve_scratch = reserve;
        started
    }

    /// Registers a path for [`FlowNetwork::start_on_path`]: `usage` and `acks` as
    /// [`FlowNetwork::start_with_acks`] takes them, validated and normalized here once instead
    /// of at every start (a queue pair's messages all take the same path with the same weights
    /// per byte).
    pub fn add_path(
        &mut self,
        usage: &[(LinkId, f64)],
        acks: &[(LinkId, f64)],
    ) -> Result<PathId, FlowError> {
        let paths = self.paths.len();
        let Some(id) = u32::try_from(paths + 1)
            .ok()
            .and_then(NonZeroU32::new)
            .map(PathId)
        else {
            return Err(FlowError::UnknownPath {
                path: u32::MAX,
                paths,
            });
        };
        self.paths.push(PathSpan {
            usage: 0,
            reserve: 0,
            start: 0,
            links: [0; PATH_INLINE],
            weights: [0.0; PATH_INLINE],
        });
        let set = self.set_path(id, usage, acks);
        if set.is_err() {
            self.paths.pop();
        }
        set.map(|()| id)
    }

    /// Replaces the links and weights of path `id` (flows started on it keep what they
    /// started with). Its entries keep their place when they are as many as before.
    pub fn set_path(
        &mut self,
        id: PathId,
        usage: &[(LinkId, f64)],
        acks: &[(LinkId, f64)],
    ) -> Result<(), FlowError> {
        let paths = self.paths.len();
        if id.index() >= paths {
            return Err(FlowError::UnknownPath {
                path: id.index() as u32,
                paths,
            });
        }
        let mut scratch = std::mem::take(&mut self.usage_scratch);
        let mut reserve = std::mem::take(&mut self.reserve_scratch);
        let checked = normalize_usage(usage, self.links.len(), &mut scratch)
            .and_then(|()| normalize_usage(acks, self.links.len(), &mut reserve));
        if checked.is_ok() {
            let span = &mut self.paths[id.index()];
            let n = scratch.len() + reserve.len();
            // At most one entry a link direction, and link directions are `u32`s.
            let (n_use, n_res) = (scratch.len() as u32, reserve.len() as u32);
            let all = scratch.iter().chain(reserve.iter());
            if n <= PATH_INLINE {
                for (k, &(l, w)) in all.enumerate() {
                    span.links[k] = l;
                    span.weights[k] = w;
                }
            } else {
                if (span.usage + span.reserve) as usize != n {
                    span.start = self.path_entries.len() as u32;
                    self.path_entries
                        .resize(self.path_entries.len() + n, (0, 0.0));
                }
                let at = span.start as usize;
                for (e, &x) in self.path_entries[at..at + n].iter_mut().zip(all) {
                    *e = x;
                }
            }
            span.usage = n_use;
            span.reserve = n_res;
        }
        self.usage_scratch = scratch;
        self.reserve_scratch = reserve;
        checked
    }

    /// What both ways of starting a flow check first: the time is not in the past, the flow has
    /// bytes, the cap is valid. Returns the start in picoseconds and the cap as the filler wants it.
    #[inline(always)]
    fn check_start(
        &self,
        now: Time,
        bytes: u64,
        cap: Option<f64>,
    ) -> Result<(u64, f64), FlowError> {
        let at = now.ps();
        if at < self.now {
            return Err(FlowError::TimeInPast { at, now: self.now });
        }
        if bytes == 0 {
            return Err(FlowError::ZeroBytes);
        }
        Ok((at, check_cap(cap)?))
    }

    /// [`FlowNetwork::start_with_acks`] on a path registered with [`FlowNetwork::add_path`]:
    /// the same flow, without validating and normalizing its lists again.
    pub fn start_on_path(
        &mut self,
        now: Time,
        path: PathId,
        bytes: u64,
        cap: Option<f64>,
        token: u64,
    ) -> Result<FlowId, FlowError> {
        let (at, cap) = self.check_start(now, bytes, cap)?;
        let Some(&span) = self.paths.get(path.index()) else {
            return Err(FlowError::UnknownPath {
                path: path.index() as u32,
                paths: self.paths.len(),
            });
        };
        let (n_use, n) = (span.usage as usize, (span.usage + span.reserve) as usize);
        if n <= PATH_INLINE {
            // Read from the path's own line: no copy into scratch lists.
            let (links, weights) = (&span.links[..n], &span.weights[..n]);
            let (lu, lr) = links.split_at(n_use);
            let (wu, wr) = weights.split_at(n_use);
            let usage = lu.iter().copied().zip(wu.iter().copied());
            let reserve = lr.iter().copied().zip(wr.iter().copied());
            return self.start_normal(at, usage, reserve, bytes, cap, token);
        }
        let entries = std::mem::take(&mut self.path_entries);
        let from = span.start as usize;
        let started = match entries.get(from..from + n) {
            Some(e) => {
                let (usage, reserve) = e.split_at(n_use);
                self.start_normal(
                    at,
                    usage.iter().copied(),
                    reserve.iter().copied(),
                    bytes,
                    cap,
                    token,
                )
            }
            None => Err(FlowError::UnknownPath {
                path: path.index() as u32,
                paths: self.paths.len(),
            }),
        };
        self.path_entries = entries;
        started
    }

    /// The start of a flow whose time, size and cap are checked and whose lists are
    /// normalized (`scratch` the data links, `reserve` the ACK links).
    #[inline]
    fn start_normal<U, R>(
        &mut self,
        at: u64,
        scratch: U,
        reserve: R,
        bytes: u64,
        cap: f64,
        token: u64,
    ) -> Result<FlowId, FlowError>
    where
        U: Iterator<Item = (u32, f64)> + ExactSizeIterator + Clone,
        R: Iterator<Item = (u32, f64)> + ExactSizeIterator + Clone,
    {
        if scratch.len() == 0 && cap == f64::INFINITY {
            return Err(FlowError::Unbounded);
        }
        if at > self.now {
            if let Some(finish) = self.next_finish() {
                if finish.ps() <= at {
                    return Err(FlowError::SkipsFinish {
                        at,
                        finish: finish.ps(),
                    });
                }
            }
        }
        self.now = self.now.max(at);

        let slot = match self.free.pop() {
            Some(s) => s,
            None => {
                self.flows.push(Flow::default());
                self.flow_mark.push(0);
                self.fill_rate.push(f64::INFINITY);
                self.version.push(0);
                self.solo.push(Solo {
                    shared: 0,
                    bind: NO_BIND,
                });
                (self.flows.len() - 1) as u32
            }
        };
        let flow = &mut self.flows[slot as usize];
        flow.active = true;
        flow.cap = cap;
        flow.remaining = bytes as f64;
        flow.last_change = at;
        flow.rate = 0.0;
        flow.reserved_rate = 0.0;
        flow.res_miss = 0.0;
        flow.res_gain = 1.0;
        flow.token = token;
        flow.usage.clear();
        let mut shared = 0;
        for (l, w) in scratch.clone() {
            let link = &mut self.links[l as usize];
            match link.flows.len() {
                0 => {}
                1 => {
                    // Its one flow shares this link from now on (and is no longer filled
                    // alone: `bind` is forgotten while on this line, see `set_rate`).
                    let other = &mut self.solo[link.flows[0] as usize];
                    other.shared += 1;
                    other.bind = NO_BIND;
                    shared += 1;
                }
                _ => shared += 1,
            }
            flow.usage.push((l, w, link.flows.len() as u32));
            // The start refills the link anyway: its applied reservation becomes exact now
            // rather than in the refresh, which would walk the started flows' links once more
            // only for this (at one instant of a ring, 8192 flows' links that no cache holds).
            // Nothing moves a reservation between a start and the next refresh (a finish is
            // preceded by one), so the value is the one the refresh would apply.
            link.own_change = true;
            sync_reservation(link);
            link.flows.push(slot);
            self.link_weights[l as usize].push(w);
        }
        self.fill_rate[slot as usize] = f64::INFINITY;
        self.solo[slot as usize] = Solo {
            shared,
            bind: NO_BIND,
        };
        flow.reserve.clear();
        flow.reserve.extend(reserve.clone());
        let rho = match (reserve.clone().next(), scratch.clone().next()) {
            (Some((r0, _)), Some((u0, _))) => match self.res_hint[r0 as usize] {
                (key, rho) if key == u0 => rho,
                _ => 0.0,
            },
            _ => 0.0,
        };
        flow.reserved_rate = rho;
        for (l, a) in reserve {
            let link = &mut self.links[l as usize];
            link.reservers += 1;
            if rho > 0.0 {
                link.reserved += a * rho;
                touch_reservation(link, l, &mut self.res_touched);
            }
        }
        if !flow.dirty {
            flow.dirty = true;
            self.dirty_flows.push(slot);
        }
        self.active += 1;
        Ok(FlowId(slot))
    }

    /// The earliest time at which some flow will have sent its last byte (rounded up to the
    /// picosecond), after recomputing the rates that changed; `None` when no flow is active or
    /// none progresses.
    pub fn next_finish(&mut self) -> Option<Time> {
        self.refresh();
        self.peek_finish().map(Time)
    }

    /// Moves time to `t`: every flow progresses at its rate, and the flows whose last byte is
    /// sent by `t` are removed and appended to `finished` as `(id, token)`, ordered by finish
    /// time, then [`FlowId`]. Rates change at every finish on the way, so a `t` beyond
    /// [`FlowNetwork::next_finish`] is fine. A `t` before [`FlowNetwork::now`] does nothing.
    ///
    /// The rates changed by the finishes at `t` itself are recomputed lazily, like starts (so
    /// they are batched with the starts the caller makes at `t`). In the rare case that rounding
    /// leaves another flow with nothing left to send at `t`, the next
    /// [`FlowNetwork::next_finish`] returns `t` and the next `advance(t)` reports it.
    pub fn advance(&mut self, t: Time, finished: &mut Vec<(FlowId, u64)>) {
        let t = t.ps();
        if t < self.now {
            return;
        }
        loop {
            self.expire_held();
            self.refresh();
            let at = match self.peek_finish() {
                Some(at) if at <= t => at,
                _ => break,
            };
            self.now = at.max(self.now);
            while let Some(&Reverse(entry)) = self.finishes.peek() {
                let (ft, slot, version) = entry.parts();
                if ft != at {
                    break;
                }
                self.finishes.pop();
                if self.version[slot as usize] == version {
                    finished.push((FlowId(slot), self.flows[slot as usize].token));
                    self.remove(slot);
                }
            }
            if at >= t {
                break;
            }
        }
        self.now = t;
        // Given back in the next refresh, with the starts made at `t`.
        self.expire_held();
    }

    /// The network's current time.
    pub fn now(&self) -> Time {
        Time(self.now)
    }

    /// Current rate (payload bytes/s) of an active flow, after recomputing the rates that changed;
    /// `None` for a flow that is not active.
    pub fn rate(&mut self, f: FlowId) -> Option<f64> {
        self.refresh();
        self.flows
            .get(f.0 as usize)
            .filter(|fl| fl.active)
            .map(|fl| fl.rate)
    }

    /// Payload bytes an active flow still has to send at the current time (rates as last
    /// computed); `None` for a flow that is not active.
    pub fn remaining(&self, f: FlowId) -> Option<f64> {
        let fl = self.flows.get(f.0 as usize).filter(|fl| fl.active)?;
        let sent = fl.rate * (self.now - fl.last_change) as f64 / PS_PER_S_F;
        Some((fl.remaining - sent).max(0.0))
    }

    /// Whether flow `f` is active (started and not yet finished).
    pub fn is_active(&self, f: FlowId) -> bool {
        self.flows.get(f.0 as usize).is_some_and(|fl| fl.active)
    }

    /// Bytes (capacity units: weight x payload) link direction `l` has carried up to now, for
    /// utilization reports; 0 for an unknown link.
    pub fn link_bytes(&self, l: LinkId) -> f64 {
        self.links.get(l.0 as usize).map_or(0.0, |link| {
            link.bytes + link.total_load() * (self.now - link.settled_at) as f64 / PS_PER_S_F
        })
    }

    /// Current load of link direction `l` (bytes/s in capacity units, ACKs included) as last
    /// computed; 0 for an unknown link.
    pub fn link_load(&self, l: LinkId) -> f64 {
        self.links.get(l.0 as usize).map_or(0.0, Link::total_load)
    }

    /// Capacity of link direction `l` reserved by ACKs (see [`FlowNetwork::start_with_acks`]),
    /// bytes/s, as the filling applies it (at most [`LINK_RESERVATION_SLACK`] of the capacity
    /// below the flows' reservations, and above them by at most that plus the held reservations
    /// of finished flows); 0 for an unknown link.
    pub fn link_reserved(&self, l: LinkId) -> f64 {
        self.links
            .get(l.0 as usize)
            .map_or(0.0, |link| link.applied)
    }

    /// Number of link directions.
    pub fn links(&self) -> usize {
        self.links.len()
    }

    /// Number of active flows.
    pub fn active(&self) -> usize {
        self.active
    }

    /// Recomputes every component from scratch (every threshold 0); the incremental updates
    /// must give the same rates up to the order of float additions (tests and diagnostics).
    pub fn recompute_all(&mut self) {
        for slot in 0..self.flows.len() {
            let flow = &mut self.flows[slot];
            if flow.active && !flow.dirty {
                flow.dirty = true;
                self.dirty_flows.push(slot as u32);
            }
        }
        self.full = true;
        self.refresh();
        self.full = false;
    }

    /// The earliest valid projected finish, dropping stale heap entries on the way.
    fn peek_finish(&mut self) -> Option<u64> {
        while let Some(&Reverse(entry)) = self.finishes.peek() {
            let (ft, slot, version) = entry.parts();
            if self.version[slot as usize] == version {
                return Some(ft);
            }
            self.finishes.pop();
        }
        None
    }

    /// Removes a finished flow from its links (marking them dirty) and frees its slot.
    fn remove(&mut self, slot: u32) {
        let mut usage = std::mem::take(&mut self.flows[slot as usize].usage);
        let rate = self.fill_rate[slot as usize];
        let flow = &self.flows[slot as usize];
        if let (Some(&(r0, _)), Some(&(u0, _, _))) = (flow.reserve.first(), usage.first()) {
            self.res_hint[r0 as usize] = (u0, flow.reserved_rate);
        }
        for &(l, _, pos) in &usage {
            let link = &mut self.links[l as usize];
            if rate < f64::INFINITY {
                link.removed_max = link.removed_max.max(rate);
            }
            link.own_change = true;
            link.flows.swap_remove(pos as usize);
            self.link_weights[l as usize].swap_remove(pos as usize);
            if let [alone] = link.flows[..] {
                // The flow left behind has this link to itself now; its `bind` is from a
                // filling with company (or older): forgotten until `fill_alone` sets it.
                let solo = &mut self.solo[alone as usize];
                solo.shared -= 1;
                solo.bind = NO_BIND;
            }
            if let Some(&moved) = link.flows.get(pos as usize) {
                // The flow moved into `pos` records its position on this link.
                let mu = &mut self.flows[moved as usize].usage;
                if let Ok(k) = mu.binary_search_by_key(&l, |&(ml, _, _)| ml) {
                    mu[k].2 = pos;
                }
            }
            if !link.dirty {
                link.dirty = true;
                self.dirty_links.push(l);
            }
        }
        usage.clear();
        let now = self.now;
        let flow = &mut self.flows[slot as usize];
        flow.usage = usage;
        for &(l, a) in &flow.reserve {
            let link = &mut self.links[l as usize];
            settle_link(link, now);
            link.reservers -= 1;
            if link.reservers == 0 {
                // No running sum left to wear down by rounding.
                link.reserved = 0.0;
                link.ack_load = 0.0;
            } else {
                link.reserved -= a * flow.reserved_rate;
                link.ack_load -= a * flow.rate;
            }
            // On a link shared by many flows the release is held (module documentation),
            // unless this was its last reserving flow: then all of its ACK load is gone. On a
            // link of few flows it is held for `release_hold` ("Timed releases").
            if link.flows.len() > self.hold_above {
                if link.reservers == 0 {
                    touch_reservation(link, l, &mut self.res_touched);
                } else {
                    self.unchecked[l as usize] = true;
                }
            } else if self.release_hold == 0 {
                touch_reservation(link, l, &mut self.res_touched);
            } else {
                self.unchecked[l as usize] = true;
                self.held
                    .push_back((now.saturating_add(self.release_hold), l));
            }
        }
        flow.active = false;
        let v = &mut self.version[slot as usize];
        *v = v.wrapping_add(1);
        self.active -= 1;
        self.free.push(slot);
        self.compact_finishes();
    }

    /// Gives back the held releases whose time has come (see "Timed releases" in the module
    /// documentation): their links check their reservations in the next refresh, which refills
    /// them only if no reservation took the capacity up again in the meantime (beyond the slack).
    fn expire_held(&mut self) {
        while let Some(&(at, l)) = self.held.front() {
            if at > self.now {
                break;
            }
            self.held.pop_front();
            if self.unchecked[l as usize] {
                touch_reservation(&mut self.links[l as usize], l, &mut self.res_touched);
            }
        }
    }

    /// Rebuilds the finish heap without its stale entries once they outnumber the valid ones,
    /// so that it stays proportional to the number of active flows.
    fn compact_finishes(&mut self) {
        if self.finishes.len() <= 2 * self.active + 1024 {
            return;
        }
        let current = &self.version;
        self.finishes.retain(|&Reverse(entry)| {
            let (_, slot, version) = entry.parts();
            current[slot as usize] == version
        });
    }

    /// Recomputes the rates of every component that holds a dirty flow or link, in rounds until
    /// no reservation changes any more (see [`FlowNetwork::start_with_acks`]).
    fn refresh(&mut self) {
        self.rounds = 0;
        self.refreshes = self.refreshes.wrapping_add(1);
        loop {
            self.apply_reservations();
            if self.dirty_flows.is_empty() && self.dirty_links.is_empty() {
                break;
            }
            self.refresh_round();
            self.rounds += 1;
        }
        self.project_finishes();
    }

    /// Lets every link whose reservations changed since the last call apply their sum where
    /// `reservation_moved` says so, marking it dirty then. Checked once per round, after all of
    /// its updates (and once after a batch of finishes), not after each flow's: checked per
    /// update, a link would apply whichever partial sum first crossed the slack, which depends on
    /// the order its flows were filled in, so that links alike in every way would offer
    /// capacities apart by up to the slack.
    fn apply_reservations(&mut self) {
        let mut touched = std::mem::take(&mut self.res_touched);
        for &l in &touched {
            let link = &mut self.links[l as usize];
            link.res_touched = false;
            self.unchecked[l as usize] = false;
            if reservation_moved(link) && !link.dirty {
                link.dirty = true;
                self.dirty_links.push(l);
            }
        }
        touched.clear();
        self.res_touched = touched;
    }

    /// One round of [`FlowNetwork::refresh`]: every region around a perturbed link, once.
    ///
    /// A link is *perturbed* when a flow started on it or left it, or its capacity moved (a
    /// reservation). Each perturbed link gets a threshold (`FlowNetwork::threshold`) below
    /// which the progressive filling of the new problem freezes the same flows at the same
    /// levels as the last one; its region is what a search from it reaches through flows at or
    /// above the threshold, and only those flows are refilled. Links are taken by rising
    /// threshold: a region found at a lower threshold contains every region it touches at a
    /// higher one (a flow at or above the higher threshold is at or above the lower), so a link
    /// already reached is done.
    fn refresh_round(&mut self) {
        self.epoch = self.epoch.wrapping_add(1);
        if self.epoch == 0 {
            // After 2^32 refreshes: clear the marks so an old mark cannot look current.
            self.links.iter_mut().for_each(|l| {
                l.mark = 0;
                l.pmark = 0;
            });
            self.flow_mark.iter_mut().for_each(|m| *m = 0);
            self.epoch = 1;
        }
        let epoch = self.epoch;
        let mut dirty_flows = std::mem::take(&mut self.dirty_flows);
        let mut dirty_links = std::mem::take(&mut self.dirty_links);
        // Flags down first: a reservation that changes during this round marks its link dirty
        // again, for the next round, even if the link is further down this round's list.
        for &slot in &dirty_flows {
            self.flows[slot as usize].dirty = false;
        }
        for &l in &dirty_links {
            let link = &mut self.links[l as usize];
            link.dirty = false;
            sync_reservation(link);
        }
        // The links a start touched were synced at the start (`start_with_acks`), the links
        // a finish left just above: a filling sees the capacities of this round only.
        let mut pert = std::mem::take(&mut self.pert);
        pert.clear();
        for &slot in &dirty_flows {
            let flow = &self.flows[slot as usize];
            if !flow.active || self.flow_mark[slot as usize] == epoch {
                continue;
            }
            if flow.usage.is_empty() {
                // Only its cap bounds it: a region of its own.
                self.set_rate(slot, flow.cap);
                continue;
            }
            if self.fill_alone(slot) {
                continue;
            }
            let flow = &self.flows[slot as usize];
            for &(l, _, _) in &flow.usage {
                let link = &mut self.links[l as usize];
                link.new_cap = link.new_cap.min(flow.cap);
                if link.pmark != epoch {
                    link.pmark = epoch;
                    pert.push((0.0, l));
                }
            }
        }
        for &l in &dirty_links {
            let link = &mut self.links[l as usize];
            if link.pmark == epoch || link.mark == epoch {
                continue;
            }
            match link.flows.len() {
                0 => {
                    // Its last flow finished (or only its reservations changed): it carries no
                    // flow's data from now on.
                    link.mark = epoch;
                    link.removed_max = 0.0;
                    if link.load != 0.0 {
                        settle_link(link, self.now);
                        link.load = 0.0;
                    }
                    continue;
                }
                1 => {
                    let g = link.flows[0];
                    if self.flow_mark[g as usize] == epoch
                        || self.keeps_rate(l, g)
                        || self.fill_alone(g)
                    {
                        continue;
                    }
                }
                _ => {}
            }
            let link = &mut self.links[l as usize];
            link.pmark = epoch;
            pert.push((0.0, l));
        }
        for p in pert.iter_mut() {
            p.0 = self.threshold(p.1);
        }
        // Thresholds are >= 0 (or +inf): their bits order like their values.
        pert.sort_unstable_by_key(|&(t, l)| (t.to_bits(), l));
        for &(theta, l) in &pert {
            if self.links[l as usize].mark == epoch {
                continue;
            }
            self.collect_region(l, theta);
            self.fill_region(if theta < f64::INFINITY { theta } else { 0.0 });
        }
        self.pert = pert;
        // Keep the larger buffers; the lists of the next round (if any) are in `self`.
        dirty_flows.clear();
        dirty_links.clear();
        if self.dirty_flows.is_empty() {
            self.dirty_flows = dirty_flows;
        }
        if self.dirty_links.is_empty() {
            self.dirty_links = dirty_links;
        }
    }

    /// Fills flow `slot` at once if it is a connected component of its own (each of its links
    /// carries it alone: a ring's flows, once ACKs reserve instead of sharing), marking it and
    /// its links as done; false (nothing done) otherwise. Alone, its filling needs no threshold:
    /// nothing else can move.
    fn fill_alone(&mut self, slot: u32) -> bool {
        let epoch = self.epoch;
        let flow = &self.flows[slot as usize];
        if flow
            .usage
            .iter()
            .any(|&(l, _, _)| self.links[l as usize].flows.len() != 1)
        {
            return false;
        }
        self.flow_mark[slot as usize] = epoch;
        // `fill_single` at floor 0, its first loop merged with the marking (one pass over the
        // links instead of two: this is every filling of a ring), computed the same way.
        let mut rate = flow.cap;
        let mut bind = NO_BIND;
        for &(l, w, _) in &flow.usage {
            let link = &mut self.links[l as usize];
            link.mark = epoch;
            link.removed_max = 0.0;
            link.new_cap = f64::INFINITY;
            // Its base is 0 (no other flow): `C - 0` is `C`, bit for bit.
            let level = link.data_capacity() / w;
            // `<` skips a NaN level, as the filling turns it into the floor.
            if level < rate {
                rate = level;
                bind = l;
            }
        }
        if rate.is_nan() || rate < 0.0 {
            rate = 0.0;
            bind = NO_BIND;
        }
        self.set_rate(slot, rate);
        self.solo[slot as usize].bind = bind;
        for k in 0..self.flows[slot as usize].usage.len() {
            let (l, w, _) = self.flows[slot as usize].usage[k];
            // `0 + w r` is `w r` bit for bit: `w r` is not -0 (w > 0, rate >= 0).
            self.set_load(l, w * rate);
        }
        self.compact_finishes();
        true
    }

    /// Whether refilling flow `g`, the lone flow of dirty link `l`, would leave everything as it
    /// is, so that it is skipped (and `l`'s refresh scratch reset, as the filling would): `g`
    /// was last filled alone (`fill_alone`) and is still alone, its rate was set by another link
    /// or its cap, `l`'s level is not below that rate now, and `l`'s load is already the one the
    /// filling would set (no flow left it since). Then the smallest level of `g`'s links (the
    /// links other than `l` did not move, or they are dirty and checked on their own) is the same
    /// value, so `fill_alone` would give the same bits and set the same loads; and `set_rate` at
    /// an unchanged rate moves nothing while no reservation was left off by the round limit.
    /// Where a neighbour's ACK reservation moves on the link that does not bound a ring's flow,
    /// this skips a quarter of the ring's fillings.
    fn keeps_rate(&mut self, l: u32, g: u32) -> bool {
        let solo = self.solo[g as usize];
        if solo.shared != 0 || solo.bind == NO_BIND || solo.bind == l || self.res_capped {
            return false;
        }
        let r = self.fill_rate[g as usize];
        let w = self.link_weights[l as usize][0];
        let link = &mut self.links[l as usize];
        if link.data_capacity() / w < r || link.load.to_bits() != (w * r).to_bits() {
            return false;
        }
        link.removed_max = 0.0;
        link.new_cap = f64::INFINITY;
        true
    }

    /// The threshold of perturbed link `l`: a level below which the filling of the new problem
    /// (flows, weights and capacities as they are now) freezes exactly the flows the last
    /// filling froze there, at the same rates; resets the link's per-refresh scratch.
    ///
    /// Progressive filling is a process in the level `x`: below a level at which no perturbed
    /// link saturates, in the last problem or in the new one, the same links saturate in the
    /// same order and freeze the same flows. In the last filling, `l` saturated (if it did) at
    /// the largest rate of its flows, the removed ones included: at least `old_max`. In the new
    /// one, with the flows below the threshold at their last rates and the new flows unfrozen,
    /// its load at level `y` is `sum w min(r, y) + W_new y`, which rises with `y`: it saturates
    /// where that reaches its capacity. The threshold is the smaller of the two (and of the
    /// caps of new flows, which freeze a flow by themselves), 0 for a full recomputation.
    fn threshold(&mut self, l: u32) -> f64 {
        let link = &mut self.links[l as usize];
        let mut old_max = link.removed_max;
        let new_cap = link.new_cap;
        link.removed_max = 0.0;
        link.new_cap = f64::INFINITY;
        if self.full {
            return 0.0;
        }
        let link = &self.links[l as usize];
        let c = link.data_capacity();
        let mut w_new = 0.0;
        self.rates_scratch.clear();
        for (k, &g) in link.flows.iter().enumerate() {
            let w = self.link_weights[l as usize][k];
            let r = self.fill_rate[g as usize];
            if r < f64::INFINITY {
                old_max = old_max.max(r);
                self.rates_scratch.push((r, w));
            } else {
                w_new += w;
            }
        }
        let theta = if old_max > 0.0 {
            old_max
        } else {
            f64::INFINITY
        }
        .min(new_cap);
        if theta < f64::INFINITY {
            let mut load = w_new * theta;
            for &(r, w) in &self.rates_scratch {
                load += w * r.min(theta);
            }
            if load <= c {
                return theta;
            }
        } else if w_new == 0.0 {
            return theta;
        }
        // Where the new load reaches the capacity: walk the rates upwards, the flows below
        // the candidate level at their rates, the others (and the new ones) at the level.
        self.rates_scratch
            .sort_unstable_by(|a, b| a.0.total_cmp(&b.0));
        let mut low = 0.0;
        let mut high = w_new;
        for &(_, w) in &self.rates_scratch {
            high += w;
        }
        let mut y = f64::INFINITY;
        for &(r, w) in &self.rates_scratch {
            let at = (c - low) / high;
            if at <= r {
                y = at;
                break;
            }
            low += w * r;
            high -= w;
        }
        if y == f64::INFINITY && w_new > 0.0 {
            y = (c - low) / w_new;
        }
        // `max` also turns a NaN (a weight sum worn down to nothing) into 0: a full region.
        theta.min(y).max(0.0)
    }

    /// Collects into `comp_flows` and `comp_links` the region of link `start` at threshold
    /// `theta`: the flows at or above it (and the new ones) reachable from `start` through
    /// links and such flows, and their links; each link's `base` is the load of its flows
    /// below the threshold (summed in the link's order, which is deterministic).
    fn collect_region(&mut self, start: u32, theta: f64) {
        let epoch = self.epoch;
        self.comp_flows.clear();
        self.comp_links.clear();
        self.links[start as usize].mark = epoch;
        self.comp_links.push(start);
        let mut next = 0;
        while next < self.comp_links.len() {
            let l = self.comp_links[next] as usize;
            next += 1;
            let mut base = 0.0;
            for k in 0..self.links[l].flows.len() {
                let g = self.links[l].flows[k];
                let r = self.fill_rate[g as usize];
                if r < theta {
                    base += self.link_weights[l][k] * r;
                    continue;
                }
                let mark = &mut self.flow_mark[g as usize];
                if *mark == epoch {
                    continue;
                }
                *mark = epoch;
                self.comp_flows.push(g);
                for &(l2, _, _) in &self.flows[g as usize].usage {
                    let link = &mut self.links[l2 as usize];
                    if link.mark != epoch {
                        link.mark = epoch;
                        self.comp_links.push(l2);
                    }
                }
            }
            self.link_base[l] = base;
        }
    }

    /// Fills the collected region in canonical order (flows by slot, links by index), each
    /// link offering its data capacity less its `base`, the level starting at `floor` (the
    /// region's threshold), and applies the rates and loads that changed.
    fn fill_region(&mut self, floor: f64) {
        match self.comp_flows.len() {
            0 => {
                for i in 0..self.comp_links.len() {
                    let l = self.comp_links[i];
                    self.set_load(l, self.link_base[l as usize]);
                }
            }
            1 => self.fill_single(floor),
            _ => {
                self.comp_flows.sort_unstable();
                self.comp_links.sort_unstable();
                let filler = &mut self.filler;
                filler.clear();
                for (i, &l) in self.comp_links.iter().enumerate() {
                    let link = &mut self.links[l as usize];
                    link.local = i as u32;
                    filler.add_link(link.data_capacity() - self.link_base[l as usize]);
                }
                for &f in &self.comp_flows {
                    let flow = &self.flows[f as usize];
                    for &(l, w, _) in &flow.usage {
                        // Usage is sorted by link id, and local ids preserve that order.
                        filler.push_use(self.links[l as usize].local, w);
                    }
                    filler.end_flow(flow.cap);
                }
                filler.solve_from(floor);
                for i in 0..self.comp_flows.len() {
                    self.set_rate(self.comp_flows[i], self.filler.rate(i));
                }
                for i in 0..self.comp_links.len() {
                    let l = self.comp_links[i];
                    let load = self.link_base[l as usize] + self.filler.load(i);
                    self.set_load(l, load);
                }
            }
        }
        self.compact_finishes();
    }

    /// [`FlowNetwork::fill_region`] of a region of one flow (a ring's flows, once ACKs
    /// reserve instead of sharing): the filling's result without its heap. Alone, the flow
    /// freezes at the smallest of its links' levels `(C_l - base_l) / w_l` (computed as the
    /// filling does, its load starting at 0) and its cap, never below `floor`, and loads each
    /// link with `base_l + w_l * rate`: bit for bit what [`Filler::solve_from`] gives.
    fn fill_single(&mut self, floor: f64) {
        let f = self.comp_flows[0] as usize;
        let mut rate = self.flows[f].cap;
        for &(l, w, _) in &self.flows[f].usage {
            let link = &self.links[l as usize];
            let level = (link.data_capacity() - self.link_base[l as usize]) / w;
            // `<` skips a NaN level, as the filling turns it into the floor.
            if level < rate {
                rate = level;
            }
        }
        if rate.is_nan() || rate < floor {
            rate = floor;
        }
        self.set_rate(f as u32, rate);
        for k in 0..self.flows[f].usage.len() {
            let (l, w, _) = self.flows[f].usage[k];
            let load = self.link_base[l as usize] + w * rate;
            self.set_load(l, load);
        }
    }

    /// Sets link `l`'s load from a filling, settling its carried bytes if it changed.
    fn set_load(&mut self, l: u32, load: f64) {
        let link = &mut self.links[l as usize];
        if load.to_bits() != link.load.to_bits() {
            settle_link(link, self.now);
            link.load = load;
        }
    }

    /// Gives flow `f` its newly filled rate: settles its progress, projects its finish and
    /// updates its reservations when the rate moved beyond [`RESERVATION_EPSILON`].
    fn set_rate(&mut self, f: u32, rate: f64) {
        let now = self.now;
        self.fill_rate[f as usize] = rate;
        // `Solo::bind` is not reset here: only `fill_alone` fills a flow whose `shared` is 0,
        // and `bind` is forgotten whenever `shared` moves, so a `bind` that `keeps_rate` reads
        // (at `shared` 0) is always its last filling's. Writing it here cost a million-flow
        // all-to-all a cache line per filling (8 bytes a flow, written at random).
        let flow = &mut self.flows[f as usize];
        let changed = rate.to_bits() != flow.rate.to_bits();
        // A damped reservation (below) may still be off at an unchanged rate.
        if !changed && flow.reserve.is_empty() {
            return;
        }
        let old = flow.rate;
        if changed {
            let sent = flow.rate * (now - flow.last_change) as f64 / PS_PER_S_F;
            flow.remaining = (flow.remaining - sent).max(0.0);
            flow.last_change = now;
            flow.rate = rate;
        }
        if !flow.reserve.is_empty() {
            let rho = flow.reserved_rate;
            let miss = rate - rho;
            let off = miss.abs() > RESERVATION_EPSILON * rho;
            let update = self.rounds < MAX_RESERVATION_ROUNDS && off;
            if off && !update {
                self.res_capped = true;
            }
            if !changed && !update {
                // Neither the rate nor its reservations move: nothing below has work to do
                // (a quarter of the fillings on a ring, whose neighbours' refills often give the
                // same rate again).
                return;
            }
            // The rate the reservations move to: the new rate, unless the updates of this
            // refresh overshoot. A reservation feeds back on its own flow's rate through the
            // flows on its link, and the gain `g` of that loop (the flow's rate falls by `g` per
            // unit of reserved rate) is not always small: a flow with a small weight on a link
            // it shares with a flow the reservation slows takes what that flow frees at the
            // ratio of their weights (2.5 to 1/32 in the case the property test found, which
            // turned an ACK weight of 0.082 into g = 1.9). Set at each new rate, a reservation
            // with g > 1 swings between two rates for ever and never meets its flow's ACK load.
            // A miss of the other sign than the last one and not at least halved is such an
            // overshoot: from then on only half as large a share `s` of each miss is applied.
            // The miss then shrinks by `1 - s (1 + g)` per round, and `s` is halved until that
            // is below 1/2 in size. A miss of the same sign and not at least halved is a crawl
            // (a loop gain near +1, or damped too much once coupled flows moved): `s` doubles
            // back towards 1, as the plain update converges there. With g small (the usual ACK
            // ratio), every miss is far below half the last one and the updates are the plain
            // ones, bit for bit.
            let mut target = rate;
            if update {
                if flow.res_refresh != self.refreshes {
                    flow.res_refresh = self.refreshes;
                    flow.res_miss = 0.0;
                    flow.res_gain = 1.0;
                }
                if miss.abs() > 0.5 * flow.res_miss.abs() {
                    if miss * flow.res_miss < 0.0 {
                        flow.res_gain *= 0.5;
                    } else if flow.res_gain < 1.0 {
                        // Crawling the same way: damped too much (or no longer needed).
                        flow.res_gain = (flow.res_gain * 2.0).min(1.0);
                    }
                }
                flow.res_miss = miss;
                if flow.res_gain < 1.0 {
                    target = rho + flow.res_gain * miss;
                }
            }
            for &(l, a) in &flow.reserve {
                let link = &mut self.links[l as usize];
                if changed {
                    settle_link(link, now);
                    link.ack_load += a * (rate - old);
                }
                if update {
                    link.reserved += a * (target - rho);
                    touch_reservation(link, l, &mut self.res_touched);
                }
            }
            if update {
                flow.reserved_rate = target;
                // Damped, the reservation is still off: refill the flow next round even if no
                // link of its own moves, so that the next share of the miss is applied.
                if target.to_bits() != rate.to_bits() && !flow.dirty {
                    flow.dirty = true;
                    self.dirty_flows.push(f);
                }
            }
        }
        if !changed {
            return;
        }
        let v = &mut self.version[f as usize];
        *v = v.wrapping_add(1);
        let flow = &mut self.flows[f as usize];
        if !flow.projecting {
            flow.projecting = true;
            self.projecting.push(f);
        }
    }

    /// Pushes the projected finish of every flow whose rate changed in the refresh that ends,
    /// once per flow at its last rate. Why at the end: the rounds of one refresh often move a
    /// rate twice or more (a start's first filling, then its reservations' feedback, and a
    /// release and a new reservation at one finish instant move its neighbours' back), and each
    /// push would leave a stale entry for a later pop. Time stands still within a refresh, so the
    /// progress settled at the last change and the finish projected from it are the same as when
    /// every change pushed.
    fn project_finishes(&mut self) {
        let now = self.now;
        for &f in &self.projecting {
            let flow = &mut self.flows[f as usize];
            flow.projecting = false;
            let rate = flow.rate;
            if flow.active && rate > 0.0 {
                let ps = (flow.remaining * PS_PER_S_F / rate).ceil();
                // A finish beyond u64 picoseconds is never.
                if ps < u64::MAX as f64 {
                    self.finishes.push(Reverse(Finish::new(
                        now.saturating_add(ps as u64),
                        f,
                        self.version[f as usize],
                    )));
                }
            }
        }
        self.projecting.clear();
    }
}

impl Link {
    /// Data and ACK load (bytes/s).
    fn total_load(&self) -> f64 {
        self.load + self.ack_load
    }

    /// The capacity the filling shares among the link's flows: what reservations leave, but
    /// never less than [`MIN_DATA_SHARE`] of it.
    fn data_capacity(&self) -> f64 {
        (self.cap - self.applied).max(self.cap * MIN_DATA_SHARE)
    }
}

/// Lists link `l` (once) for the next `FlowNetwork::apply_reservations`.
fn touch_reservation(link: &mut Link, l: u32, touched: &mut Vec<u32>) {
    if !link.res_touched {
        link.res_touched = true;
        touched.push(l);
    }
}

/// After `link.reserved` changed: lets the applied reservation follow it when it lags by more
/// than [`LINK_RESERVATION_SLACK`] of the capacity; true when it moved, so that the link must
/// be refilled.
fn reservation_moved(link: &mut Link) -> bool {
    let follow = (link.reserved - link.applied).abs() > LINK_RESERVATION_SLACK * link.cap;
    if follow {
        link.applied = link.reserved;
    }
    follow
}

/// A link that a start or a finish refills anyway: its applied reservation becomes exact.
fn sync_reservation(link: &mut Link) {
    if link.own_change {
        link.own_change = false;
        link.applied = link.reserved;
    }
}

/// Adds the bytes `link` carried since it was last settled, at its current load.
fn settle_link(link: &mut Link, now: u64) {
    link.bytes += link.total_load() * (now - link.settled_at) as f64 / PS_PER_S_F;
    link.settled_at = now;
}
