//! The flow network: flows that start, progress at max-min fair rates and finish, in virtual
//! time, with rates recomputed incrementally per connected component.
//!
//! ## How a step works
//!
//! - [`FlowNetwork::start`] registers a flow on its links and marks it dirty; rates are not
//!   recomputed there, so that many starts (and finishes) at one instant cost one recomputation.
//! - A flow's ACK reservations ([`FlowNetwork::start_with_acks`]) lower the capacity its reverse
//!   links offer to their flows; when a filling moves a rate by more than
//!   [`RESERVATION_EPSILON`] from the rate its reservations were set at, they are updated and
//!   their links marked dirty, and the refresh goes on in rounds until no reservation moves.
//! - Every query ([`FlowNetwork::next_finish`], [`FlowNetwork::rate`], [`FlowNetwork::advance`])
//!   first *refreshes*: from every dirty flow and dirty link it collects the connected component
//!   (breadth-first over "flow uses link" and "link is used by flow"), sorts its flows by
//!   [`FlowId`] and links by [`LinkId`], and runs the [`crate::maxmin`] filling on it. Flows whose
//!   rate changed (bit for bit) settle their progress at the current time and get a new projected
//!   finish; links whose load changed settle their carried bytes. Components without a dirty link
//!   are not looked at.
//! - [`FlowNetwork::advance`] moves time forward finish by finish: it takes the earliest valid
//!   entry of the finish heap, removes every flow finishing at that instant (in [`FlowId`] order),
//!   refreshes, and repeats until the target time, so passing a time beyond
//!   [`FlowNetwork::next_finish`] is handled too.
//!
//! A flow's bytes count as sent when its projected finish time comes, not when a recomputed
//! `remaining` reaches zero: rounding can leave a remainder of a fraction of a byte, and the
//! finish time (rounded up to the picosecond) is the one truth.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use fabemu_fabric::units::{Time, PS_PER_S};

use crate::maxmin::{check_cap, check_capacities, normalize_usage, Filler};
use crate::{FlowError, FlowId, LinkId};

/// Picoseconds per second as a float, for rate (bytes/s) x time (ps) products.
const PS_PER_S_F: f64 = PS_PER_S as f64;

/// How far a flow's rate may drift from the rate its reservations were last set at (relative)
/// before they are updated. See [`FlowNetwork::start_with_acks`] for why 1e-3 is harmless: a
/// reservation is a few percent of a link (ACKs), so the capacity left for data is off by at
/// most 1e-3 x that, about 2e-5 of the link for one ACK per 4 KiB packet.
pub const RESERVATION_EPSILON: f64 = 1e-3;

/// Below this share of its capacity, a link's capacity left for data is not lowered further by
/// reservations: only a link whose ACKs alone would exceed it (data at about 50x its capacity
/// acknowledged over it) gets there, and its flows must still progress.
const MIN_DATA_SHARE: f64 = 1.0 / 64.0;

/// Refreshes after which reservations stop being updated within one refresh (a safeguard: the
/// updates shrink geometrically, by the ACK-to-data weight ratio per round, and stop after two
/// or three rounds in practice).
const MAX_RESERVATION_ROUNDS: u32 = 64;

/// One link direction.
#[derive(Debug, Default)]
struct Link {
    cap: f64,
    /// Slots of the active flows that use this link, in no particular order (a flow knows its
    /// position, for O(1) removal); the filling never reads this order.
    flows: Vec<u32>,
    /// Current load `sum w * r` (bytes/s) of the flows that use it, as the last filling of its
    /// component computed it.
    load: f64,
    /// Capacity reserved by flows whose ACKs cross it: `sum a * reserved_rate` (bytes/s).
    reserved: f64,
    /// Load of those ACKs at the flows' current rates, `sum a * r` (bytes/s), for carried bytes.
    ack_load: f64,
    /// Flows that reserve on this link.
    reservers: u32,
    /// Bytes carried up to `settled_at` (ps).
    bytes: f64,
    settled_at: u64,
    dirty: bool,
    /// Epoch of the last refresh that reached this link, and its local index then.
    mark: u32,
    local: u32,
}

/// One flow slot; slots are reused after a flow finished.
#[derive(Debug, Default)]
struct Flow {
    active: bool,
    /// `(link, weight, position of this flow in the link's `flows`)`, sorted by link.
    usage: Vec<(u32, f64, u32)>,
    /// `(link, weight)` reservations (ACKs), sorted by link.
    reserve: Vec<(u32, f64)>,
    /// The rate the reservations were last set at (0: not yet).
    reserved_rate: f64,
    /// Rate cap (bytes/s), `+inf` for none.
    cap: f64,
    /// Payload bytes left at `last_change`.
    remaining: f64,
    last_change: u64,
    /// Current rate (bytes/s); 0 until the first refresh after the start.
    rate: f64,
    /// Bumped at every rate change and at removal; finish-heap entries carry it.
    version: u32,
    token: u64,
    dirty: bool,
}

/// A fluid network of flows over link directions with weighted max-min fair rates (see the
/// crate documentation for the model).
#[derive(Debug)]
pub struct FlowNetwork {
    now: u64,
    links: Vec<Link>,
    flows: Vec<Flow>,
    /// Per flow slot: the epoch of the last refresh that reached it. Apart from the flows, so
    /// that the component search, which checks every flow of every link it crosses, reads a
    /// dense array instead of a cache line of each flow.
    flow_mark: Vec<u32>,
    /// Free flow slots, reused last-freed first.
    free: Vec<u32>,
    active: usize,
    dirty_links: Vec<u32>,
    dirty_flows: Vec<u32>,
    /// `(finish time, slot, version)`: the earliest valid entry is the next finish.
    finishes: BinaryHeap<Reverse<(u64, u32, u32)>>,
    epoch: u32,
    filler: Filler,
    // Scratch buffers of a refresh, kept to avoid allocating per event.
    comp_flows: Vec<u32>,
    comp_links: Vec<u32>,
    queue: Vec<u32>,
    usage_scratch: Vec<(u32, f64)>,
    reserve_scratch: Vec<(u32, f64)>,
    /// Rounds of reservation updates in the refresh under way.
    rounds: u32,
}

impl FlowNetwork {
    /// A network of `capacities.len()` link directions; `capacities[l]` is the capacity of link
    /// direction `l` in bytes per second (positive and finite, else an error).
    pub fn new(capacities: Vec<f64>) -> Result<FlowNetwork, FlowError> {
        check_capacities(&capacities)?;
        Ok(FlowNetwork {
            now: 0,
            links: capacities
                .into_iter()
                .map(|cap| Link {
                    cap,
                    ..Link::default()
                })
                .collect(),
            flows: Vec::new(),
            flow_mark: Vec::new(),
            free: Vec::new(),
            active: 0,
            dirty_links: Vec::new(),
            dirty_flows: Vec::new(),
            finishes: BinaryHeap::new(),
            epoch: 0,
            filler: Filler::default(),
            comp_flows: Vec::new(),
            comp_links: Vec::new(),
            queue: Vec::new(),
            usage_scratch: Vec::new(),
            reserve_scratch: Vec::new(),
            rounds: 0,
        })
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
    /// than [`RESERVATION_EPSILON`] (relative) since; the links whose reservation changed are
    /// refilled in the same refresh, which may move other rates and their reservations in turn
    /// (each round smaller by the ACK-to-data weight ratio, about 1/50). The capacity a filling
    /// sees is thus off by at most `RESERVATION_EPSILON` of the ACK load: 2e-5 of a link at one
    /// ACK per 4 KiB packet, far below what the flow model is checked to (1% of the packet
    /// level). The carried bytes ([`FlowNetwork::link_bytes`]) count the ACKs at the exact rates.
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
        let at = now.ps();
        if at < self.now {
            return Err(FlowError::TimeInPast { at, now: self.now });
        }
        if bytes == 0 {
            return Err(FlowError::ZeroBytes);
        }
        let cap = check_cap(cap)?;
        let mut scratch = std::mem::take(&mut self.usage_scratch);
        let mut reserve = std::mem::take(&mut self.reserve_scratch);
        let checked = normalize_usage(usage, self.links.len(), &mut scratch)
            .and_then(|()| normalize_usage(acks, self.links.len(), &mut reserve));
        let unbounded = scratch.is_empty() && cap == f64::INFINITY;
        let checked = if unbounded {
            checked.and(Err(FlowError::Unbounded))
        } else {
            checked
        };
        let checked = checked.and_then(|()| {
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
            Ok(())
        });
        if let Err(e) = checked {
            self.usage_scratch = scratch;
            self.reserve_scratch = reserve;
            return Err(e);
        }
        self.now = self.now.max(at);

        let slot = match self.free.pop() {
            Some(s) => s,
            None => {
                self.flows.push(Flow::default());
                self.flow_mark.push(0);
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
        flow.token = token;
        flow.usage.clear();
        for &(l, w) in &scratch {
            let link = &mut self.links[l as usize];
            flow.usage.push((l, w, link.flows.len() as u32));
            link.flows.push(slot);
        }
        flow.reserve.clear();
        flow.reserve.extend_from_slice(&reserve);
        for &(l, _) in &reserve {
            // Nothing reserved yet: the first filling sets it (rate 0 until then).
            self.links[l as usize].reservers += 1;
        }
        self.usage_scratch = scratch;
        self.reserve_scratch = reserve;
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
            self.refresh();
            let at = match self.peek_finish() {
                Some(at) if at <= t => at,
                _ => break,
            };
            self.now = at.max(self.now);
            while let Some(&Reverse((ft, slot, version))) = self.finishes.peek() {
                if ft != at {
                    break;
                }
                self.finishes.pop();
                let flow = &self.flows[slot as usize];
                if flow.active && flow.version == version {
                    finished.push((FlowId(slot), flow.token));
                    self.remove(slot);
                }
            }
            if at >= t {
                break;
            }
        }
        self.now = t;
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
    /// bytes/s, as last updated; 0 for an unknown link.
    pub fn link_reserved(&self, l: LinkId) -> f64 {
        self.links
            .get(l.0 as usize)
            .map_or(0.0, |link| link.reserved)
    }

    /// Number of link directions.
    pub fn links(&self) -> usize {
        self.links.len()
    }

    /// Number of active flows.
    pub fn active(&self) -> usize {
        self.active
    }

    /// Recomputes every component from scratch; the incremental updates must give the same
    /// rates bit for bit (tests and diagnostics).
    pub fn recompute_all(&mut self) {
        for slot in 0..self.flows.len() {
            let flow = &mut self.flows[slot];
            if flow.active && !flow.dirty {
                flow.dirty = true;
                self.dirty_flows.push(slot as u32);
            }
        }
        self.refresh();
    }

    /// The earliest valid projected finish, dropping stale heap entries on the way.
    fn peek_finish(&mut self) -> Option<u64> {
        while let Some(&Reverse((ft, slot, version))) = self.finishes.peek() {
            let flow = &self.flows[slot as usize];
            if flow.active && flow.version == version {
                return Some(ft);
            }
            self.finishes.pop();
        }
        None
    }

    /// Removes a finished flow from its links (marking them dirty) and frees its slot.
    fn remove(&mut self, slot: u32) {
        let mut usage = std::mem::take(&mut self.flows[slot as usize].usage);
        for &(l, _, pos) in &usage {
            let link = &mut self.links[l as usize];
            link.flows.swap_remove(pos as usize);
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
            if !link.dirty {
                link.dirty = true;
                self.dirty_links.push(l);
            }
        }
        flow.active = false;
        flow.version = flow.version.wrapping_add(1);
        self.active -= 1;
        self.free.push(slot);
        self.compact_finishes();
    }

    /// Rebuilds the finish heap without its stale entries once they outnumber the valid ones,
    /// so that it stays proportional to the number of active flows.
    fn compact_finishes(&mut self) {
        if self.finishes.len() <= 2 * self.active + 1024 {
            return;
        }
        let flows = &self.flows;
        self.finishes.retain(|&Reverse((_, slot, version))| {
            let f = &flows[slot as usize];
            f.active && f.version == version
        });
    }

    /// Recomputes the rates of every component that holds a dirty flow or link, in rounds until
    /// no reservation changes any more (see [`FlowNetwork::start_with_acks`]).
    fn refresh(&mut self) {
        self.rounds = 0;
        while !(self.dirty_flows.is_empty() && self.dirty_links.is_empty()) {
            self.refresh_round();
            self.rounds += 1;
        }
    }

    /// One round of [`FlowNetwork::refresh`]: every component with a dirty flow or link, once.
    fn refresh_round(&mut self) {
        self.epoch = self.epoch.wrapping_add(1);
        if self.epoch == 0 {
            // After 2^32 refreshes: clear the marks so an old mark cannot look current.
            self.links.iter_mut().for_each(|l| l.mark = 0);
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
            self.links[l as usize].dirty = false;
        }
        for &slot in &dirty_flows {
            let flow = &self.flows[slot as usize];
            if flow.active && self.flow_mark[slot as usize] != epoch {
                self.collect_from_flow(slot);
                self.fill_component();
            }
        }
        for &l in &dirty_links {
            let link = &mut self.links[l as usize];
            if link.mark == epoch {
                continue;
            }
            if link.flows.is_empty() {
                // Its last flow finished (or only its reservations changed): it carries no
                // flow's data from now on.
                link.mark = epoch;
                if link.load != 0.0 {
                    settle_link(link, self.now);
                    link.load = 0.0;
                }
                continue;
            }
            let first = link.flows[0];
            self.collect_from_flow(first);
            self.fill_component();
        }
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

    /// Collects the connected component of flow `start` into `comp_flows` and `comp_links`
    /// (breadth-first), marking what it reaches with the current epoch.
    fn collect_from_flow(&mut self, start: u32) {
        let epoch = self.epoch;
        self.comp_flows.clear();
        self.comp_links.clear();
        self.queue.clear();
        self.flow_mark[start as usize] = epoch;
        self.comp_flows.push(start);
        let mut next_flow = 0;
        let mut next_link = 0;
        loop {
            if next_flow < self.comp_flows.len() {
                let f = self.comp_flows[next_flow] as usize;
                next_flow += 1;
                for &(l, _, _) in &self.flows[f].usage {
                    let link = &mut self.links[l as usize];
                    if link.mark != epoch {
                        link.mark = epoch;
                        self.comp_links.push(l);
                    }
                }
            } else if next_link < self.comp_links.len() {
                let l = self.comp_links[next_link] as usize;
                next_link += 1;
                for &g in &self.links[l].flows {
                    let mark = &mut self.flow_mark[g as usize];
                    if *mark != epoch {
                        *mark = epoch;
                        self.comp_flows.push(g);
                    }
                }
            } else {
                break;
            }
        }
    }

    /// Fills the collected component in canonical order and applies the rates and loads that
    /// changed.
    fn fill_component(&mut self) {
        if self.comp_flows.len() == 1 {
            self.fill_single();
            return;
        }
        self.comp_flows.sort_unstable();
        self.comp_links.sort_unstable();
        let filler = &mut self.filler;
        filler.clear();
        for (i, &l) in self.comp_links.iter().enumerate() {
            let link = &mut self.links[l as usize];
            link.local = i as u32;
            filler.add_link(link.data_capacity());
        }
        for &f in &self.comp_flows {
            let flow = &self.flows[f as usize];
            for &(l, w, _) in &flow.usage {
                // Usage is sorted by link id, and local ids preserve that order.
                filler.push_use(self.links[l as usize].local, w);
            }
            filler.end_flow(flow.cap);
        }
        filler.solve();

        for i in 0..self.comp_flows.len() {
            self.set_rate(self.comp_flows[i], self.filler.rate(i));
        }
        for i in 0..self.comp_links.len() {
            let load = self.filler.load(i);
            self.set_load(self.comp_links[i], load);
        }
        self.compact_finishes();
    }

    /// [`FlowNetwork::fill_component`] of a component of one flow (a ring's flows, once ACKs
    /// reserve instead of sharing): the filling's result without its heap. Alone, the flow
    /// freezes at the smallest of its links' levels `C_l / w_l` (each computed as the filling
    /// does, `(C_l - 0) / (0 + w_l)`, which is exactly `C_l / w_l`) and its cap, and loads each
    /// link with `0 + w_l * rate`: bit for bit what [`Filler::solve`] gives.
    fn fill_single(&mut self) {
        let f = self.comp_flows[0] as usize;
        let mut rate = self.flows[f].cap;
        for &(l, w, _) in &self.flows[f].usage {
            rate = rate.min(self.links[l as usize].data_capacity() / w);
        }
        self.set_rate(f as u32, rate);
        for k in 0..self.flows[f].usage.len() {
            let (l, w, _) = self.flows[f].usage[k];
            self.set_load(l, w * rate);
        }
        self.compact_finishes();
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
        let flow = &mut self.flows[f as usize];
        if rate.to_bits() == flow.rate.to_bits() {
            return;
        }
        let sent = flow.rate * (now - flow.last_change) as f64 / PS_PER_S_F;
        flow.remaining = (flow.remaining - sent).max(0.0);
        flow.last_change = now;
        let old = flow.rate;
        flow.rate = rate;
        if !flow.reserve.is_empty() {
            let rho = flow.reserved_rate;
            let update = self.rounds < MAX_RESERVATION_ROUNDS
                && (rate - rho).abs() > RESERVATION_EPSILON * rho;
            for &(l, a) in &flow.reserve {
                let link = &mut self.links[l as usize];
                settle_link(link, now);
                link.ack_load += a * (rate - old);
                if update {
                    link.reserved += a * (rate - rho);
                    if !link.dirty {
                        link.dirty = true;
                        self.dirty_links.push(l);
                    }
                }
            }
            if update {
                flow.reserved_rate = rate;
            }
        }
        flow.version = flow.version.wrapping_add(1);
        if rate > 0.0 {
            let ps = (flow.remaining * PS_PER_S_F / rate).ceil();
            // A finish beyond u64 picoseconds is never.
            if ps < u64::MAX as f64 {
                self.finishes
                    .push(Reverse((now.saturating_add(ps as u64), f, flow.version)));
            }
        }
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
        (self.cap - self.reserved).max(self.cap * MIN_DATA_SHARE)
    }
}

/// Adds the bytes `link` carried since it was last settled, at its current load.
fn settle_link(link: &mut Link, now: u64) {
    link.bytes += link.total_load() * (now - link.settled_at) as f64 / PS_PER_S_F;
    link.settled_at = now;
}
