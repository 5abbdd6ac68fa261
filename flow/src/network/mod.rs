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
//!   first data link was the new flow's too (`Link::res_hint_rate`); else at 0. A collective's next step
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
//!   again (`Link::res_hint_rate`); given back in between, the link's flow was refilled up by the ACK
//!   share at the finish and down again at the successor's start: two refillings of each
//!   neighbour per message, which also parted flows that otherwise run in lockstep (the
//!   8192-host ring drifted apart from its first ms on, and every message then had its own
//!   instant). Held, the successor takes the capacity over within the slack and nothing is
//!   refilled. Physically the ACKs of a flow's last packets cross its reverse links for about
//!   one round trip after its last byte; beyond that the hold is a modelling choice, whose
//!   price is bounded: a link may offer its flows less than it has by the ACK load of flows
//!   that finished in the last 100 us and have no successor (at most ~2.5% of the link at one
//!   ACK per 4 KiB packet, for at most 100 us each). Measured: the permutation of
//!   `tests/it/flow.rs` moved by 1.7e-4 at most (makespan 1.7532 → 1.7541 ms, packet level 1.7519),
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
//!   entry of the finish queue, removes every flow finishing at that instant (in [`FlowId`] order),
//!   refreshes, and repeats until the target time, so passing a time beyond
//!   [`FlowNetwork::next_finish`] is handled too.
//!
//! A flow's bytes count as sent when its projected finish time comes, not when a recomputed
//! `remaining` reaches zero: rounding can leave a remainder of a fraction of a byte, and the
//! finish time (rounded up to the picosecond) is the one truth.

use std::collections::VecDeque;
use std::num::NonZeroU32;

use fabemu_fabric::units::{Time, PS_PER_S};
use smallvec::SmallVec;

use crate::maxmin::{check_cap, check_capacities, normalize_usage, Filler};
use crate::{FlowError, FlowId, LinkId};

mod finishes;
mod refresh;

use finishes::FinishQueue;

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
/// Laid out in the order written (`repr(C)`, 128 bytes aligned to the cache line: two whole
/// lines), by which passes over an instant's flows read what. The first line holds what a
/// start, a reservation check and a finish's bookkeeping need: the flow list with the flows'
/// weights (inline for one flow: a ring's link carries one; a list of its own would be one
/// more line at each start and finish), the capacity and the reservations, the start's slot
/// hint and the flags. The second holds what fillings and settling need: loads, carried bytes,
/// the refresh's scratch and marks, and the reservation hint. A start then reads one line of
/// each data link, a reservation check one line, a filling's ACK links one line. The hints
/// as arrays of their own cost a start and a finish a cache miss each. The refresh's `base` and
/// local index are apart (`FlowNetwork::link_base`, `FlowNetwork::link_local`): a ring's lone
/// flows need neither in their fillings.
#[derive(Debug)]
#[repr(C, align(64))]
struct Link {
    /// `(slot, weight)` of the active flows that use this link, in no particular order (a
    /// flow knows its position, for O(1) removal).
    flows: SmallVec<[(u32, f64); 1]>,
    cap: f64,
    /// The reservation the filling takes off the capacity: `reserved` as it was when it last
    /// moved by more than [`LINK_RESERVATION_SLACK`] of `cap` from this (see
    /// `FlowNetwork::reservation_moved`).
    applied: f64,
    /// Capacity reserved by flows whose ACKs cross it: `sum a * reserved_rate` (bytes/s).
    reserved: f64,
    /// Flows that reserve on this link.
    reservers: u32,
    /// The slot of the last flow that left with this link first among its data links
    /// (`u32::MAX`: none). A flow that starts there takes that slot if it is free (see
    /// `FlowNetwork::take_slot`).
    slot_hint: u32,
    /// Epoch of the last refresh round in which this link was perturbed.
    pmark: u32,
    dirty: bool,
    /// Listed in `FlowNetwork::res_touched`: `reserved` changed since it was last checked.
    res_touched: bool,
    /// A flow left it since the last refresh, which refills it anyway: its applied reservation
    /// then becomes exact (`sync_reservation`; a start syncs at once).
    own_change: bool,
    /// Current load `sum w * r` (bytes/s) of the flows that use it, as the last filling of its
    /// component computed it.
    load: f64,
    /// Load of those ACKs at the flows' current rates, `sum a * r` (bytes/s), for carried bytes.
    ack_load: f64,
    /// Bytes carried up to `settled_at` (ps).
    bytes: f64,
    settled_at: u64,
    /// Scratch of a refresh: the lowest cap of the new flows on this link (`+inf`: none).
    new_cap: f64,
    /// The reserved rate of the last flow that left with this link first among its ACK links,
    /// valid for a flow whose first data link is `res_hint_key` (see
    /// `FlowNetwork::start_with_acks`).
    res_hint_rate: f64,
    /// The first data link of the flow `res_hint_rate` is from (`u32::MAX`: none).
    res_hint_key: u32,
    /// Epoch of the last refresh that reached this link.
    mark: u32,
}

impl Link {
    /// A link of capacity `cap` that carried nothing yet.
    fn new(cap: f64) -> Link {
        Link {
            cap,
            applied: 0.0,
            load: 0.0,
            ack_load: 0.0,
            bytes: 0.0,
            settled_at: 0,
            reserved: 0.0,
            new_cap: f64::INFINITY,
            res_hint_rate: 0.0,
            flows: SmallVec::new(),
            mark: 0,
            pmark: 0,
            reservers: 0,
            slot_hint: u32::MAX,
            res_hint_key: u32::MAX,
            dirty: false,
            res_touched: false,
            own_change: false,
        }
    }
}

// Two cache lines each, as the layouts above are meant to be, the link's split where meant.
const _: () = assert!(std::mem::size_of::<Link>() == 128);
const _: () = assert!(std::mem::offset_of!(Link, load) == 64);
const _: () = assert!(std::mem::size_of::<Flow>() == 128);

/// One of a flow's links: a data link, with the flow's position in the link's `flows`, or an
/// ACK link (`pos` unused), with the flow's weight there.
#[derive(Clone, Copy, Debug, Default)]
struct Entry {
    link: u32,
    pos: u32,
    w: f64,
}

/// One flow slot; slots are reused after a flow finished. 128 bytes aligned to the cache line,
/// its links inline (up to four, a ring's two data and two ACK links): a ring's message reads
/// its flow at the start, at each filling and at the finish, and no cache holds 8192 of them,
/// so that lists on the heap cost a miss each every time.
#[derive(Debug, Default)]
#[repr(C, align(64))]
struct Flow {
    /// The data links (the first `n_use`), then the ACK links, each part sorted by link:
    /// the first `n` entries of `inline` when `n` is at most [`FLOW_INLINE`], else `spill`'s
    /// (see [`Flow::entries`]).
    inline: [Entry; FLOW_INLINE],
    /// The entries of a flow of more than [`FLOW_INLINE`] (a path up through the fabric),
    /// kept with its buffer when the slot's next flow is inline: no allocation per start.
    /// Boxed so that the field is one word (a `Vec` is three) and the flow its 128 bytes.
    #[allow(clippy::box_collection)]
    spill: Option<Box<Vec<Entry>>>,
    /// How many entries there are, and how many of them are data links.
    n: u16,
    n_use: u16,
    active: bool,
    /// Listed in `FlowNetwork::dirty_flows` for the refresh round of this tag (`round_tag`);
    /// 0: not listed.
    dirty: u8,
    /// Listed in `FlowNetwork::projecting`: its rate changed in the refresh under way.
    projecting: bool,
    /// Current rate (bytes/s); 0 until the first refresh after the start.
    rate: f64,
    /// Payload bytes left at `last_change`.
    remaining: f64,
    last_change: u64,
    /// The rate the reservations were last set at (0: not yet).
    reserved_rate: f64,
    /// Rate cap (bytes/s), `+inf` for none.
    cap: f64,
    token: u64,
}

/// Entries a flow holds in its own record ([`Flow::inline`]): a ring's neighbours mostly share
/// a leaf switch, two links each way.
const FLOW_INLINE: usize = 4;

impl Flow {
    /// All entries: the data links, then the ACK links. A fixed array and a length rather than
    /// a `SmallVec`, whose every push and read checked which of its two layouts it was in.
    #[inline]
    fn entries(&self) -> &[Entry] {
        let n = usize::from(self.n);
        if n <= FLOW_INLINE {
            &self.inline[..n]
        } else {
            self.spill.as_deref().map_or(&[][..], |v| &v[..])
        }
    }

    /// [`Flow::entries`], mutable.
    #[inline]
    fn entries_mut(&mut self) -> &mut [Entry] {
        let n = usize::from(self.n);
        if n <= FLOW_INLINE {
            &mut self.inline[..n]
        } else {
            self.spill
                .as_deref_mut()
                .map_or(&mut [][..], |v| &mut v[..])
        }
    }

    /// Makes room for `n` entries (`n16` of them), `n_use` of them data links, and returns
    /// them to be written.
    #[inline]
    fn entries_for(&mut self, n16: u16, n_use: usize) -> &mut [Entry] {
        let n = usize::from(n16);
        self.n = n16;
        // At most `n`, which fits.
        self.n_use = n_use.min(n) as u16;
        if n <= FLOW_INLINE {
            &mut self.inline[..n]
        } else {
            let v = self.spill.get_or_insert_with(Default::default);
            v.clear();
            v.resize(n, Entry::default());
            &mut v[..]
        }
    }

    /// The data links: `(link, weight, position of this flow in the link's `flows`)`.
    #[inline]
    fn usage(&self) -> &[Entry] {
        let n_use = usize::from(self.n_use);
        if usize::from(self.n) <= FLOW_INLINE {
            &self.inline[..n_use.min(FLOW_INLINE)]
        } else {
            self.spill
                .as_deref()
                .map_or(&[][..], |v| &v[..n_use.min(v.len())])
        }
    }

    /// The ACK links (`pos` unused).
    #[inline]
    fn reserve(&self) -> &[Entry] {
        self.entries().get(usize::from(self.n_use)..).unwrap_or(&[])
    }

    /// Whether the flow reserves capacity anywhere.
    #[inline]
    fn reserves(&self) -> bool {
        self.n > self.n_use
    }
}

/// Per flow slot, the damping state of its reservation updates (see `FlowNetwork::set_rate`),
/// apart from the flow: only an update reads it, and a ring's messages seldom update. A start
/// leaves it as it is: the first update of the new flow comes in a later refresh than any of
/// the slot's last flow, and finds a state of an older refresh, which it resets.
#[derive(Clone, Copy, Debug)]
struct Damp {
    /// The miss `rate - reserved_rate` that last updated the reservations in refresh
    /// `refresh` (0: none yet).
    miss: f64,
    /// The share of a miss an update applies in refresh `refresh` (1 until damped).
    gain: f64,
    /// The refresh (see `FlowNetwork::refreshes`) that `miss` and `gain` belong to.
    refresh: u32,
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
    /// Per link, scratch of a refresh: the load of its flows left out of the refilling (apart:
    /// a lone flow's filling, every filling of a ring, needs none).
    link_base: Vec<f64>,
    /// Per link, scratch of a filling of several flows: the link's index in the filler.
    link_local: Vec<u32>,
    flows: Vec<Flow>,
    /// Per flow slot: the damping state of its reservation updates.
    damp: Vec<Damp>,
    /// Per flow slot: the epoch of the last refresh that reached it. Apart from the flows, so
    /// that the component search, which checks every flow of every link it crosses, reads a
    /// dense array instead of a cache line of each flow.
    flow_mark: Vec<u32>,
    /// Per flow slot: the rate of the flow as the last filling left it, `+inf` for a flow not
    /// filled yet (so that every threshold takes it in); dense, like `flow_mark`, for the
    /// threshold searches that read it for every flow of a link.
    fill_rate: Vec<f64>,
    /// Per flow slot: bumped at every rate change of its flow and at its removal; finish-queue
    /// entries carry it, and only the entry with the current version is valid (a removed flow's
    /// version moved on, so no entry of it is). Dense, so that checking a queued entry, stale
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
    /// Free flow slots, reused last-freed first unless `Link::slot_hint` names a free one. A slot
    /// taken by its hint stays listed, marked taken by its flow being active, and is skipped
    /// when popped; `listed` says which slots are in the list, so that none is listed twice.
    free: Vec<u32>,
    listed: Vec<bool>,
    active: usize,
    dirty_links: Vec<u32>,
    dirty_flows: Vec<u32>,
    /// Links whose `reserved` changed since their applied reservation was last checked.
    res_touched: Vec<u32>,
    /// Flows whose rate changed in the refresh under way, for `FlowNetwork::project_finishes`.
    projecting: Vec<u32>,
    /// Projected finishes `(time, slot, version)`: the earliest valid entry is the next finish.
    finishes: FinishQueue,
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
    /// Per link: the largest rate of a flow removed from it since the last refresh that
    /// reached it (0: none), for its threshold. Dense, apart from the links: a finish writes it
    /// and the refresh resets it for links of no flow without reading them (see `emptied`).
    removed_max: Vec<f64>,
    /// Links whose last flow left since the last refresh and that no flow started on since
    /// (those with `emptied_flag` set; a start clears it). A finish settles such a link's load
    /// to 0 at once, where the refresh would have done it, and does not list it dirty: the
    /// refresh then only resets its `removed_max`, rather than reading both lines of every link
    /// a collective's finish instant empties (a ring's two per message).
    emptied: Vec<u32>,
    emptied_flag: Vec<bool>,
}

impl FlowNetwork {
    /// A network of `capacities.len()` link directions; `capacities[l]` is the capacity of link
    /// direction `l` in bytes per second (positive and finite, else an error).
    pub fn new(capacities: Vec<f64>) -> Result<FlowNetwork, FlowError> {
        check_capacities(&capacities)?;
        let n = capacities.len();
        Ok(FlowNetwork {
            now: 0,
            link_base: vec![0.0; n],
            link_local: vec![0; n],
            links: capacities.into_iter().map(Link::new).collect(),
            flows: Vec::new(),
            damp: Vec::new(),
            flow_mark: Vec::new(),
            fill_rate: Vec::new(),
            version: Vec::new(),
            solo: Vec::new(),
            res_capped: false,
            full: false,
            pert: Vec::new(),
            rates_scratch: Vec::new(),
            free: Vec::new(),
            listed: Vec::new(),
            active: 0,
            dirty_links: Vec::new(),
            dirty_flows: Vec::new(),
            res_touched: Vec::new(),
            projecting: Vec::new(),
            finishes: FinishQueue::default(),
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
            removed_max: vec![0.0; n],
            emptied: Vec::new(),
            emptied_flag: vec![false; n],
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

    /// A free slot: `hint` (the slot of the last flow that left the new flow's first data
    /// link) if it is free, else the last-freed one; `None` when every slot is in use.
    ///
    /// Why the hint: a collective's next message on a queue pair starts on its predecessor's
    /// links, and taking its slot keeps the slots in the order of the queue pairs from step to
    /// step. An instant's finishes come out in slot order, and the deliveries, the starts and
    /// the fillings follow in that order, so every sweep over an instant's thousands of flows
    /// then walks the flows, their links and their ranks' state in one memory order. Taken
    /// last-freed first, the order of a ring's slots was reversed at every step and scrambled
    /// wherever paths of different lengths finish at different instants; the 8192-host ring
    /// missed the cache at every flow, link and rank it touched.
    #[inline]
    fn take_slot(&mut self, hint: u32) -> Option<u32> {
        if self.flows.get(hint as usize).is_some_and(|f| !f.active) {
            return Some(hint);
        }
        while let Some(s) = self.free.pop() {
            self.listed[s as usize] = false;
            if !self.flows[s as usize].active {
                return Some(s);
            }
        }
        None
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
        let links = scratch.len() + reserve.len();
        let Ok(n_entries) = u16::try_from(links) else {
            return Err(FlowError::TooManyLinks { links });
        };
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

        let hint = scratch
            .clone()
            .next()
            .map_or(u32::MAX, |(u0, _)| self.links[u0 as usize].slot_hint);
        let slot = match self.take_slot(hint) {
            Some(s) => s,
            None => {
                self.flows.push(Flow::default());
                self.damp.push(Damp {
                    miss: 0.0,
                    gain: 1.0,
                    refresh: 0,
                });
                self.listed.push(false);
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
        flow.token = token;
        // The damping state needs no reset: an update first resets a state from an earlier
        // refresh, and the start's first refresh is a later one than any of the slot's last flow.
        let rho = match (reserve.clone().next(), scratch.clone().next()) {
            (Some((r0, _)), Some((u0, _))) => {
                let link = &self.links[r0 as usize];
                if link.res_hint_key == u0 {
                    link.res_hint_rate
                } else {
                    0.0
                }
            }
            _ => 0.0,
        };
        flow.reserved_rate = rho;
        let n_use = scratch.len();
        let entries = flow.entries_for(n_entries, n_use);
        let (data, acks) = entries.split_at_mut(n_use.min(entries.len()));
        let mut shared = 0;
        for (e, (l, w)) in data.iter_mut().zip(scratch.clone()) {
            let link = &mut self.links[l as usize];
            match link.flows.len() {
                0 => self.emptied_flag[l as usize] = false,
                1 => {
                    // Its one flow shares this link from now on (and is no longer filled
                    // alone: `bind` is forgotten while on this line, see `set_rate`).
                    let other = &mut self.solo[link.flows[0].0 as usize];
                    other.shared += 1;
                    other.bind = NO_BIND;
                    shared += 1;
                }
                _ => shared += 1,
            }
            *e = Entry {
                link: l,
                pos: link.flows.len() as u32,
                w,
            };
            // The start refills the link anyway: its applied reservation becomes exact now
            // rather than in the refresh, which would walk the started flows' links once more
            // only for this (at one instant of a ring, 8192 flows' links that no cache holds).
            // Nothing moves a reservation between a start and the next refresh (a finish is
            // preceded by one), so the value is the one the refresh would apply.
            link.own_change = true;
            sync_reservation(link);
            link.flows.push((slot, w));
        }
        self.fill_rate[slot as usize] = f64::INFINITY;
        self.solo[slot as usize] = Solo {
            shared,
            bind: NO_BIND,
        };
        for (e, (l, a)) in acks.iter_mut().zip(reserve) {
            *e = Entry {
                link: l,
                pos: 0,
                w: a,
            };
            let link = &mut self.links[l as usize];
            link.reservers += 1;
            if rho > 0.0 {
                link.reserved += a * rho;
                // Listed for `apply_reservations` only if the check it makes would move the
                // link now; else checked here (nothing but other starts moves `reserved` or
                // `applied` before that check, and each rechecks or syncs the link), which
                // spares a pass over a ring's ACK links at each of its instants.
                if link.res_touched || reservation_off(link) {
                    touch_reservation(link, l, &mut self.res_touched);
                } else {
                    self.unchecked[l as usize] = false;
                }
            }
        }
        let tag = round_tag(self.epoch.wrapping_add(1));
        if flow.dirty != tag {
            flow.dirty = tag;
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
            if let Some(due) = self.finishes.take_first() {
                for &entry in &due {
                    if finishes::valid(entry, &self.version) {
                        let slot = finishes::slot(entry);
                        finished.push((FlowId(slot), self.flows[slot as usize].token));
                        self.remove(slot);
                    }
                }
                self.finishes.recycle(due);
                self.compact_finishes();
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

    /// Sets the rate cap (payload bytes/s; `None`: none) of active flow `f` from now on; the
    /// rates move at the next query, as after a start. The refresh takes the flow as if it left
    /// and started again with the new cap (its old rate bounds its links' thresholds, its new
    /// one is open), so the incremental rates stay those of a full recomputation. Setting the
    /// cap it has, or that of a flow not active, does nothing.
    pub fn set_cap(&mut self, f: FlowId, cap: Option<f64>) -> Result<(), FlowError> {
        let cap = check_cap(cap)?;
        let slot = f.0 as usize;
        let Some(flow) = self.flows.get_mut(slot).filter(|fl| fl.active) else {
            return Ok(());
        };
        if flow.cap.to_bits() == cap.to_bits() {
            return Ok(());
        }
        if flow.usage().is_empty() && cap == f64::INFINITY {
            return Err(FlowError::Unbounded);
        }
        flow.cap = cap;
        let tag = round_tag(self.epoch.wrapping_add(1));
        if flow.dirty != tag {
            flow.dirty = tag;
            self.dirty_flows.push(f.0);
        }
        let old = std::mem::replace(&mut self.fill_rate[slot], f64::INFINITY);
        if old < f64::INFINITY {
            for e in self.flows[slot].usage() {
                let l = e.link;
                let r = &mut self.removed_max[l as usize];
                *r = r.max(old);
            }
        }
        Ok(())
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
            // A link a flow left applies its exact reservation at its next filling.
            .map_or(0.0, |link| {
                if link.own_change {
                    link.reserved
                } else {
                    link.applied
                }
            })
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
        let tag = round_tag(self.epoch.wrapping_add(1));
        for slot in 0..self.flows.len() {
            let flow = &mut self.flows[slot];
            if flow.active && flow.dirty != tag {
                flow.dirty = tag;
                self.dirty_flows.push(slot as u32);
            }
        }
        self.full = true;
        self.refresh();
        self.full = false;
    }

    /// The earliest valid projected finish, dropping instants of stale entries on the way.
    fn peek_finish(&mut self) -> Option<u64> {
        self.finishes.peek(&self.version)
    }

    /// Removes a finished flow from its links (marking them dirty) and frees its slot.
    fn remove(&mut self, slot: u32) {
        let rate = self.fill_rate[slot as usize];
        let flow = &mut self.flows[slot as usize];
        let (reserved_rate, flow_rate) = (flow.reserved_rate, flow.rate);
        // The entries apart from the flows, which the loops below update: a copy of the
        // inline ones, else the spilled list (given back at the end).
        let (n, n_use) = (usize::from(flow.n), usize::from(flow.n_use));
        let inline = flow.inline;
        let spill = if n > FLOW_INLINE {
            flow.spill.take()
        } else {
            None
        };
        let entries = match &spill {
            Some(v) => &v[..],
            None => inline.get(..n).unwrap_or(&[]),
        };
        let (usage, reserve) = entries.split_at(n_use.min(entries.len()));
        let (now, hold_above, release_hold) = (self.now, self.hold_above, self.release_hold);
        // The fields apart, so that each link is looked up once per use.
        let Self {
            links,
            flows,
            solo,
            removed_max,
            emptied_flag,
            emptied,
            dirty_links,
            res_touched,
            unchecked,
            held,
            ..
        } = self;
        if let (Some(r0), Some(u0)) = (reserve.first(), usage.first()) {
            let link = &mut links[r0.link as usize];
            link.res_hint_key = u0.link;
            link.res_hint_rate = reserved_rate;
        }
        if let Some(u0) = usage.first() {
            links[u0.link as usize].slot_hint = slot;
        }
        for &Entry { link: l, pos, .. } in usage {
            if rate < f64::INFINITY {
                let r = &mut removed_max[l as usize];
                *r = r.max(rate);
            }
            let link = &mut links[l as usize];
            link.own_change = true;
            link.flows.swap_remove(pos as usize);
            let left = &link.flows[..];
            if let [(alone, _)] = *left {
                // The flow left behind has this link to itself now; its `bind` is from a
                // filling with company (or older): forgotten until `fill_alone` sets it.
                let solo = &mut solo[alone as usize];
                solo.shared -= 1;
                solo.bind = NO_BIND;
            }
            if let Some(&(moved, _)) = left.get(pos as usize) {
                // The flow moved into `pos` records its position on this link.
                let mu = &mut flows[moved as usize];
                let n = usize::from(mu.n_use);
                if let Some(es) = mu.entries_mut().get_mut(..n) {
                    if let Ok(k) = es.binary_search_by_key(&l, |e| e.link) {
                        es[k].pos = pos;
                    }
                }
            }
            if left.is_empty() {
                // What the refresh would do to a link of no flow, but its reset of
                // `removed_max` (see `emptied`): its load is 0 from now (the refresh settles at
                // this time too, and nothing moves the load of a link without flows before).
                // Its reservation is synced by the next start on it, the only filling that
                // reads it; `own_change` stays set until then.
                if link.load != 0.0 {
                    settle_link(link, now);
                    link.load = 0.0;
                }
                if !emptied_flag[l as usize] {
                    emptied_flag[l as usize] = true;
                    emptied.push(l);
                }
            } else if !link.dirty {
                link.dirty = true;
                dirty_links.push(l);
            }
        }
        for &Entry { link: l, w: a, .. } in reserve {
            let link = &mut links[l as usize];
            settle_link(link, now);
            link.reservers -= 1;
            if link.reservers == 0 {
                // No running sum left to wear down by rounding.
                link.reserved = 0.0;
                link.ack_load = 0.0;
            } else {
                link.reserved -= a * reserved_rate;
                link.ack_load -= a * flow_rate;
            }
            // On a link shared by many flows the release is held (module documentation),
            // unless this was its last reserving flow: then all of its ACK load is gone. On a
            // link of few flows it is held for `release_hold` ("Timed releases").
            if link.flows.len() > hold_above {
                if link.reservers == 0 {
                    touch_reservation(link, l, res_touched);
                } else {
                    unchecked[l as usize] = true;
                }
            } else if release_hold == 0 {
                touch_reservation(link, l, res_touched);
            } else {
                unchecked[l as usize] = true;
                held.push_back((now.saturating_add(release_hold), l));
            }
        }
        let flow = &mut self.flows[slot as usize];
        if spill.is_some() {
            flow.spill = spill;
        }
        flow.active = false;
        let v = &mut self.version[slot as usize];
        *v = v.wrapping_add(1);
        self.active -= 1;
        if !self.listed[slot as usize] {
            self.listed[slot as usize] = true;
            self.free.push(slot);
        }
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

    /// Rebuilds the finish queue without its stale entries once they outnumber the valid ones,
    /// so that it stays proportional to the number of active flows. Checked after each batch
    /// of finishes and each refresh, not at each flow: which entries are kept does not depend
    /// on when (the stale ones are never taken), and the check cost two calls a message.
    fn compact_finishes(&mut self) {
        if self.finishes.len() <= 2 * self.active + 1024 {
            return;
        }
        self.finishes.retain_valid(&self.version);
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
    let follow = reservation_off(link);
    if follow {
        link.applied = link.reserved;
    }
    follow
}

/// Whether `link.reserved` lags its applied reservation by more than
/// [`LINK_RESERVATION_SLACK`] of the capacity.
fn reservation_off(link: &Link) -> bool {
    (link.reserved - link.applied).abs() > LINK_RESERVATION_SLACK * link.cap
}

/// A link that a start or a finish refills anyway: its applied reservation becomes exact.
fn sync_reservation(link: &mut Link) {
    if link.own_change {
        link.own_change = false;
        link.applied = link.reserved;
    }
}

/// Adds the bytes `link` carried since it was last settled, at its current load. Settled at
/// `now` already, it would add `+0` (the load is finite): nothing to do.
fn settle_link(link: &mut Link, now: u64) {
    if now != link.settled_at {
        link.bytes += link.total_load() * (now - link.settled_at) as f64 / PS_PER_S_F;
        link.settled_at = now;
    }
}

/// The tag of refresh round `epoch` in `Flow::dirty` (1 or 2 by the round's parity): a flow
/// listed for the next round while still listed in the current one (a damped reservation, see
/// `FlowNetwork::set_rate`) carries the next round's tag, so that the round lowers each flag
/// when it reaches the flow rather than all of them in a pass of their own first.
fn round_tag(epoch: u32) -> u8 {
    1 + (epoch & 1) as u8
}
