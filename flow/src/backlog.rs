//! Where the fluid model is not to be trusted: the queues an open-loop sender would build.
//!
//! Both flow models assume that what a link cannot carry never reaches it: max-min gives every
//! flow its fair share at the source, and the queue model's FIFO queues are unbounded. A RoCE
//! fabric without congestion control does neither: every NIC sends at its line rate (shared
//! round-robin among its queue pairs), so a link that more traffic arrives at than it carries
//! queues the difference in its switch's buffer until the packet level drops (lossy) or pauses
//! the upstream port (PFC), and the flow level's figures are then off (too early, for the
//! flows behind the pause).
//!
//! This module estimates that queue alongside either model, so that a run can say where its
//! assumption fails. Per link direction after a flow's first hop it keeps:
//!
//! - the **arrival rate** of its flows: each flow arrives at the rate its source sends it,
//!   the first hop's capacity over the flows then active at that source (and the queue pair's
//!   rate cap), fixed when the flow starts; all of them together at most the sum of the
//!   capacities of the link directions they come in over (the hops before this one);
//! - the **backlog**, integrated between starts and finishes: it grows at arrival rate minus
//!   capacity, never below zero and never above the wire bytes of the flows on the link;
//! - its **peak**, the time of the peak and how many input links fed it then (a switch's
//!   buffer thresholds are per ingress port).
//!
//! The estimate is first order: it keeps each flow's arrival rate until the flow model ends it
//! (an open-loop source that finishes earlier stops earlier; the cap by the flows' bytes
//! bounds that), and it charges each link with all its arrivals (a queue upstream smooths what
//! reaches the next one). It costs a few operations per hop, at every start and finish, on the
//! link directions that can queue at all (see `Screen`); elsewhere a few dense reads per flow.
//!
//! **PFC.** Given the pause thresholds of the switch ports that run PFC
//! ([`Backlogs::set_pause`]), it also keeps, on those ports, the queue a lossless switch would
//! hold: the same open-loop arrivals, but the queue stops at XOFF (the threshold for the
//! inputs feeding it then) and the port *pauses* its inputs there, the excess held upstream;
//! it resumes when the arrivals fall below the port's rate and the queue drains to XON
//! (XOFF less the XON offset). [`Backlogs::paused`] lists the paused ports,
//! [`Backlogs::next_pause_change`] says when one will cross either threshold at the present
//! rates, so that the caller can hold the flows behind a pause ([`crate::pfc`]). Without
//! [`Backlogs::set_pause`] none of it runs.

use std::collections::BTreeSet;

use fabemu_fabric::units::{Time, PS_PER_S};
use smallvec::SmallVec;

use crate::LinkId;

/// The estimated peak queue of one link direction (see the module doc).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct BacklogPeak {
    /// Largest estimated queue, in wire bytes (0 when arrivals never exceeded the capacity).
    pub bytes: f64,
    /// When it was reached: where it stopped at the flows' bytes, the time it got there;
    /// otherwise the start or finish at which it was last seen growing.
    pub at: Time,
    /// Input link directions with flows arriving over them at that time.
    pub inputs: u32,
    /// The arrival rate then, in wire bytes per second.
    pub arrival: f64,
}

/// A switch buffer's dynamic threshold for the queue that `n` ingress ports feeding one egress
/// port may build: each ingress holds its reserved bytes plus `alpha x free shared bytes`,
/// which with `n` of them alone in the pool is `alpha x shared / (1 + n alpha)` each.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DynamicThreshold {
    /// The buffer, bytes.
    pub total: f64,
    /// Reserved bytes per ingress (port, priority).
    pub reserved: f64,
    /// The dynamic threshold's factor.
    pub alpha: f64,
}

impl DynamicThreshold {
    /// The threshold, bytes, for `n` ingress ports (at least one).
    pub fn bytes(&self, n: u32) -> f64 {
        let n = f64::from(n.max(1));
        let shared = (self.total - n * self.reserved).max(0.0);
        n * (self.reserved + self.alpha * shared / (1.0 + n * self.alpha))
    }
}

/// When a PFC port pauses its inputs and resumes them.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PauseThreshold {
    /// XOFF: the queue at which it pauses, by the number of inputs feeding it.
    pub xoff: DynamicThreshold,
    /// XON is this many bytes below XOFF (at least 0).
    pub xon_offset: f64,
}

/// How long a PFC port was paused ([`Backlogs::pause_totals`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PauseTotal {
    /// Times it paused its inputs.
    pub pauses: u32,
    /// When it first did.
    pub first: Time,
    /// Time spent paused, ps.
    pub paused_ps: u64,
}

/// One PFC port's lossless queue (see the module doc).
#[derive(Clone, Copy, Debug, Default)]
struct PauseState {
    /// Time the queue was integrated to.
    t: Time,
    /// Queue, wire bytes: at most XOFF.
    q: f64,
    paused: bool,
    /// Since when, while paused.
    since: Time,
    /// When it crosses XOFF or XON at the present rates (`Time::NEVER`: not at these rates).
    due: Time,
    total: PauseTotal,
}

/// `bytes / rate` seconds in picoseconds, rounded up (`u64::MAX` beyond).
fn ps_for(bytes: f64, rate: f64) -> u64 {
    let ps = (bytes.max(0.0) / rate * PS_PER_S as f64).ceil();
    if ps < u64::MAX as f64 {
        ps as u64
    } else {
        u64::MAX
    }
}

impl PauseState {
    /// Integrates the queue up to `now` at growth `grow` (arrivals less capacity, bytes/s),
    /// bounded by the flows' `bytes`, pausing where it reaches `xoff` and resuming where it
    /// drains to `xon`; true when it paused or resumed.
    fn advance(&mut self, now: Time, grow: f64, bytes: f64, xoff: f64, xon: f64) -> bool {
        let mut changed = false;
        while now > self.t {
            let dt = (now.ps() - self.t.ps()) as f64 / PS_PER_S as f64;
            let open = self.q + grow * dt;
            if !self.paused && grow > 0.0 && open >= xoff && xoff <= bytes {
                let at = Time(self.t.ps().saturating_add(ps_for(xoff - self.q, grow)));
                if at <= now {
                    self.t = at;
                    self.q = xoff;
                    self.paused = true;
                    self.since = at;
                    if self.total.pauses == 0 {
                        self.total.first = at;
                    }
                    self.total.pauses += 1;
                    changed = true;
                    continue;
                }
            } else if self.paused && grow < 0.0 && open <= xon {
                let at = Time(self.t.ps().saturating_add(ps_for(self.q - xon, -grow)));
                if at <= now {
                    self.t = at;
                    self.q = xon;
                    self.resume(at);
                    changed = true;
                    continue;
                }
            }
            if !self.paused || grow < 0.0 {
                self.q = open.clamp(0.0, if self.paused { xoff } else { bytes.max(0.0) });
            }
            self.t = now;
        }
        changed
    }

    fn resume(&mut self, at: Time) {
        self.paused = false;
        self.total.paused_ps += at.ps().saturating_sub(self.since.ps());
    }

    /// After the rates or inputs changed at `t` (integrated to it): a threshold the queue is
    /// already beyond takes effect now; sets when the next crossing is due. True when it
    /// paused or resumed.
    fn recheck(&mut self, grow: f64, bytes: f64, xoff: f64, xon: f64) -> bool {
        let t = self.t;
        let mut changed = false;
        if !self.paused && self.q >= xoff && xoff <= bytes {
            self.q = xoff;
            self.paused = true;
            self.since = t;
            if self.total.pauses == 0 {
                self.total.first = t;
            }
            self.total.pauses += 1;
            changed = true;
        } else if self.paused && self.q <= xon {
            self.resume(t);
            changed = true;
        }
        self.due = if !self.paused && grow > 0.0 && xoff <= bytes {
            Time(
                t.ps()
                    .saturating_add(ps_for(xoff - self.q, grow))
                    .max(t.ps() + 1),
            )
        } else if self.paused && grow < 0.0 {
            Time(
                t.ps()
                    .saturating_add(ps_for(self.q - xon, -grow))
                    .max(t.ps() + 1),
            )
        } else {
            Time::NEVER
        };
        changed
    }
}

/// The PFC ports' lossless queues (see the module doc).
#[derive(Clone, Debug)]
struct Pauses {
    /// Per link direction: its thresholds, if a switch with PFC transmits on it.
    thr: Vec<Option<PauseThreshold>>,
    st: Vec<PauseState>,
    /// `(due, link)` of every port with a crossing due.
    due: BTreeSet<(Time, u32)>,
    /// The paused ports.
    paused: BTreeSet<u32>,
    /// Some port paused or resumed since [`Backlogs::take_pause_change`] last said so.
    changed: bool,
}

impl Pauses {
    /// The thresholds of port `l` for `n` inputs: (XOFF, XON).
    fn levels(&self, l: usize, n: u32) -> Option<(f64, f64)> {
        let t = self.thr.get(l).copied().flatten()?;
        let xoff = t.xoff.bytes(n);
        Some((xoff, (xoff - t.xon_offset.max(0.0)).max(0.0)))
    }

    /// Integrates port `l` to `now` at its present rates (`s`, capacity `cap`).
    fn advance(&mut self, l: usize, now: Time, s: &LinkState, cap: f64) {
        let Some((xoff, xon)) = self.levels(l, s.inputs.len() as u32) else {
            return;
        };
        let grow = s.arrive.min(s.in_cap) - cap;
        if self.st[l].advance(now, grow, s.bytes, xoff, xon) {
            self.flip(l);
        }
    }

    /// After port `l`'s rates changed (`s`): applies a threshold crossed by the change and
    /// files its next crossing.
    fn recheck(&mut self, l: usize, s: &LinkState, cap: f64) {
        let Some((xoff, xon)) = self.levels(l, s.inputs.len() as u32) else {
            return;
        };
        let grow = s.arrive.min(s.in_cap) - cap;
        let st = &mut self.st[l];
        let old = st.due;
        let flipped = st.recheck(grow, s.bytes, xoff, xon);
        let due = st.due;
        if flipped {
            self.flip(l);
        }
        if old != due {
            self.due.remove(&(old, l as u32));
            if due != Time::NEVER {
                self.due.insert((due, l as u32));
            }
        }
    }

    /// Port `l` paused or resumed: lists it as its state says.
    fn flip(&mut self, l: usize) {
        self.changed = true;
        if self.st[l].paused {
            self.paused.insert(l as u32);
        } else {
            self.paused.remove(&(l as u32));
        }
    }
}

/// One link direction's state.
#[derive(Clone, Debug, Default)]
struct LinkState {
    /// Time of the last update.
    t: Time,
    /// Sum of the active flows' arrival rates (wire bytes/s).
    arrive: f64,
    /// Sum of the capacities of the inputs with flows.
    in_cap: f64,
    /// (input link direction, flows arriving over it): inline, a link is mostly fed by one or
    /// two.
    inputs: SmallVec<[(u32, u32); 2]>,
    /// Wire bytes of the active flows.
    bytes: f64,
    /// Current backlog.
    b: f64,
    peak: BacklogPeak,
}

impl LinkState {
    /// Integrates the backlog up to `now` and records a new peak.
    fn update(&mut self, now: Time, cap: f64) {
        if now > self.t && self.arrive > 0.0 {
            let dt = (now.ps() - self.t.ps()) as f64 * 1e-12;
            let grow = self.arrive.min(self.in_cap) - cap;
            let open = self.b + grow * dt;
            let mut at = now;
            if open > self.bytes && grow > 0.0 {
                // It reached the flows' bytes before `now`: that is when it peaked.
                let ps = ((self.bytes - self.b).max(0.0) / grow * 1e12).ceil() as u64;
                at = Time(self.t.ps() + ps.min(now.ps() - self.t.ps()));
            }
            self.b = open.clamp(0.0, self.bytes);
            if self.b > self.peak.bytes {
                self.peak = BacklogPeak {
                    bytes: self.b,
                    at,
                    inputs: self.inputs.len() as u32,
                    arrival: self.arrive.min(self.in_cap),
                };
            }
        }
        self.t = now;
    }
}

/// Per key (the caller's queue pair): its path's first capacity, whether any hop of its path
/// is tracked, and its current flow.
#[derive(Clone, Copy, Debug, Default)]
struct Key {
    /// Capacity of the path's first link direction (0 until the key is first seen).
    first_cap: f64,
    /// The flow's source rate (its cap until applied).
    rate: f64,
    /// Its wire bytes.
    bytes: f64,
    src: u32,
    state: FlowState,
    /// Its path was walked once (see [`Backlogs::register`]).
    known: bool,
    /// Some hop of its path after the first is tracked: its flows are applied there.
    tracked: bool,
}

/// Where a key's flow is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum FlowState {
    /// None active.
    #[default]
    Idle,
    /// Started at `pending_t`, its arrivals not applied yet.
    Pending,
    /// Arriving at `rate`.
    Applied,
}

/// Which link directions need their queue integrated. A link direction that one key's path
/// alone reaches (after its first hop), over an input no faster than itself, cannot queue: a
/// key has one flow at a time, which arrives no faster than its input carries. Such a link
/// keeps no state (a ring's every link: the estimate then costs a few dense reads per
/// message); when a second key's path reaches it, the first key's flow, if one is arriving,
/// is applied there (its queue was 0 until then, exactly as if it had been integrated).
#[derive(Clone, Copy, Debug)]
struct Screen {
    /// The one key whose path reaches it ([`NO_KEY`]: none yet).
    owner: u32,
    tracked: bool,
}

/// [`Screen::owner`] of a link direction no path reached yet.
const NO_KEY: u32 = u32::MAX;

/// Open-loop queue estimates of a network's link directions (see the module doc).
#[derive(Clone, Debug)]
pub struct Backlogs {
    caps: Vec<f64>,
    links: Vec<LinkState>,
    screen: Vec<Screen>,
    /// Active flows per source host.
    at_source: Vec<u32>,
    /// Per key (the caller's queue pair: one flow at a time each).
    keys: Vec<Key>,
    /// Keys of the flows started at `pending_t` and not applied yet.
    pending: Vec<u32>,
    pending_t: Time,
    /// The PFC ports' queues, once [`Backlogs::set_pause`] gave thresholds.
    pause: Option<Box<Pauses>>,
}

impl Backlogs {
    /// Estimates for link directions of `caps` wire bytes per second and `hosts` sources.
    pub fn new(caps: Vec<f64>, hosts: usize) -> Backlogs {
        Backlogs {
            links: vec![LinkState::default(); caps.len()],
            screen: vec![
                Screen {
                    owner: NO_KEY,
                    tracked: false,
                };
                caps.len()
            ],
            caps,
            at_source: vec![0; hosts],
            keys: Vec::new(),
            pending: Vec::new(),
            pending_t: Time::ZERO,
            pause: None,
        }
    }

    /// Models PFC on the link directions `thresholds` gives thresholds for (by [`LinkId`]):
    /// their lossless queues and pauses (see the module doc). Nothing is kept when none has
    /// one. Call before the first start.
    pub fn set_pause(&mut self, mut thresholds: Vec<Option<PauseThreshold>>) {
        if thresholds.iter().all(Option::is_none) {
            self.pause = None;
            return;
        }
        // A port that the screen leaves untracked cannot queue (see `Screen`), so it never
        // pauses either: the ports are integrated where the estimate is, no more.
        thresholds.resize(self.caps.len(), None);
        self.pause = Some(Box::new(Pauses {
            st: vec![PauseState::default(); thresholds.len()],
            thr: thresholds,
            due: BTreeSet::new(),
            paused: BTreeSet::new(),
            changed: false,
        }));
    }

    /// Brings the PFC ports up to `now`: applies the flows started before or at `now` and
    /// every pause and resume due by then. True when some port paused or resumed since the
    /// last call.
    pub fn settle_pauses<'a>(&mut self, now: Time, path: impl Fn(u32) -> &'a [LinkId]) -> bool {
        if self.pause.is_none() {
            return false;
        }
        if !self.pending.is_empty() {
            self.apply_pending(&path);
        }
        let Some(p) = self.pause.as_deref_mut() else {
            return false;
        };
        while let Some(&(due, l)) = p.due.first() {
            if due > now {
                break;
            }
            p.due.remove(&(due, l));
            let (l, cap) = (l as usize, self.caps[l as usize]);
            let s = &mut self.links[l];
            s.update(due, cap);
            p.st[l].due = Time::NEVER;
            p.advance(l, due, s, cap);
            p.recheck(l, s, cap);
        }
        std::mem::take(&mut p.changed)
    }

    /// The PFC ports paused now, by [`LinkId`] (after [`Backlogs::settle_pauses`]).
    pub fn paused(&self) -> impl Iterator<Item = LinkId> + '_ {
        self.pause
            .iter()
            .flat_map(|p| p.paused.iter().map(|&l| LinkId(l)))
    }

    /// Whether link direction `l` is a PFC port (a switch with PFC transmits on it).
    pub fn is_pause_port(&self, l: LinkId) -> bool {
        self.pause
            .as_ref()
            .is_some_and(|p| p.thr.get(l.0 as usize).is_some_and(Option::is_some))
    }

    /// When a PFC port will next pause or resume at the present rates, if it will.
    pub fn next_pause_change(&self) -> Option<Time> {
        self.pause
            .as_ref()
            .and_then(|p| p.due.first().map(|&(t, _)| t))
    }

    /// How long each PFC port was paused, by [`LinkId`], up to `now` (empty without
    /// [`Backlogs::set_pause`]).
    pub fn pause_totals(&self, now: Time) -> Vec<PauseTotal> {
        let Some(p) = &self.pause else {
            return Vec::new();
        };
        p.st.iter()
            .map(|st| {
                let mut t = st.total;
                if st.paused {
                    t.paused_ps += now.ps().saturating_sub(st.since.ps());
                }
                t
            })
            .collect()
    }

    /// Flow `key` of `bytes` wire bytes starts at `now` from host `src`, its source rate
    /// capped at `cap` wire bytes/s if given. A key has one flow at a time (a start replaces
    /// an unfinished one); `path` gives a key's link directions from the source, the same
    /// for every flow of the key.
    ///
    /// Its arrivals are applied when time moves on, at the source's share among all the flows
    /// that started with it at `now` (a collective posts many at one instant).
    #[inline]
    pub fn start<'a>(
        &mut self,
        now: Time,
        key: u32,
        src: u32,
        bytes: f64,
        cap: Option<f64>,
        path: impl Fn(u32) -> &'a [LinkId],
    ) {
        self.flush(now, &path);
        if src as usize >= self.at_source.len() {
            return;
        }
        if self.keys.len() <= key as usize {
            self.keys.resize(key as usize + 1, Key::default());
        }
        if !self.keys[key as usize].known {
            self.register(now, key, &path);
        }
        if self.keys[key as usize].state != FlowState::Idle {
            self.finish(now, key, &path);
        }
        self.at_source[src as usize] += 1;
        let k = &mut self.keys[key as usize];
        k.rate = cap.unwrap_or(f64::INFINITY);
        k.bytes = bytes;
        k.src = src;
        k.state = FlowState::Pending;
        self.pending.push(key);
        self.pending_t = now;
    }

    /// Walks `key`'s path once: the links it reaches after its first hop learn of it (see
    /// [`Screen`]), and the key learns whether any of them is tracked.
    #[cold]
    fn register<'a>(&mut self, now: Time, key: u32, path: &impl Fn(u32) -> &'a [LinkId]) {
        let p = path(key);
        let k = &mut self.keys[key as usize];
        k.known = true;
        k.first_cap = p
            .first()
            .and_then(|l| self.caps.get(l.0 as usize))
            .copied()
            .unwrap_or(0.0);
        for w in p.windows(2) {
            let (input, l) = (w[0].0 as usize, w[1].0 as usize);
            let (Some(&in_cap), Some(&cap), Some(s)) = (
                self.caps.get(input),
                self.caps.get(l),
                self.screen.get_mut(l),
            ) else {
                continue;
            };
            if s.tracked {
                self.keys[key as usize].tracked = true;
                continue;
            }
            let owner = s.owner;
            if owner == NO_KEY || owner == key {
                s.owner = key;
                if in_cap <= cap {
                    continue;
                }
            }
            s.tracked = true;
            self.keys[key as usize].tracked = true;
            if owner != NO_KEY && owner != key {
                self.promote(now, owner, l as u32, path);
            }
        }
    }

    /// Link `l`, reached so far by `owner`'s path alone, is tracked from `now` on: `owner`'s
    /// flow, if one is arriving, arrives there from now (its queue there was 0).
    fn promote<'a>(&mut self, now: Time, owner: u32, l: u32, path: &impl Fn(u32) -> &'a [LinkId]) {
        let Some(k) = self.keys.get_mut(owner as usize) else {
            return;
        };
        k.tracked = true;
        if k.state != FlowState::Applied {
            // Idle, or pending: the flush applies it on every tracked hop.
            return;
        }
        let (rate, bytes) = (k.rate, k.bytes);
        let p = path(owner);
        if let Some(i) = p.iter().position(|h| h.0 == l).filter(|&i| i > 0) {
            self.apply_hop(now, p[i - 1].0, l as usize, rate, bytes, true);
        }
    }

    /// Applies the flows started at `pending_t`, once time has moved past it.
    #[inline]
    fn flush<'a>(&mut self, now: Time, path: &impl Fn(u32) -> &'a [LinkId]) {
        if now > self.pending_t && !self.pending.is_empty() {
            self.apply_pending(path);
        }
    }

    // Out of line: once an instant, where `start` and `finish`, inlined, run once a message.
    #[inline(never)]
    fn apply_pending<'a>(&mut self, path: &impl Fn(u32) -> &'a [LinkId]) {
        let t = self.pending_t;
        let mut pending = std::mem::take(&mut self.pending);
        for &key in &pending {
            let Some(k) = self.keys.get_mut(key as usize) else {
                continue;
            };
            if k.state != FlowState::Pending {
                continue;
            }
            if k.first_cap == 0.0 {
                // No path: it arrives nowhere.
                continue;
            }
            let n = self
                .at_source
                .get(k.src as usize)
                .copied()
                .unwrap_or(1)
                .max(1);
            k.rate = k.rate.min(k.first_cap / f64::from(n));
            k.state = FlowState::Applied;
            if k.tracked {
                let (rate, bytes) = (k.rate, k.bytes);
                self.apply(t, path(key), rate, bytes, true);
            }
        }
        pending.clear();
        self.pending = pending;
    }

    /// Flow `key` finishes at `now` (`path` as for [`Backlogs::start`]).
    #[inline]
    pub fn finish<'a>(&mut self, now: Time, key: u32, path: &impl Fn(u32) -> &'a [LinkId]) {
        self.flush(now, path);
        let Some(k) = self.keys.get_mut(key as usize) else {
            return;
        };
        let state = std::mem::take(&mut k.state);
        if state == FlowState::Idle {
            return;
        }
        if let Some(n) = self.at_source.get_mut(k.src as usize) {
            *n = n.saturating_sub(1);
        }
        if state == FlowState::Applied && k.tracked {
            let (rate, bytes) = (k.rate, k.bytes);
            self.apply(now, path(key), rate, bytes, false);
        }
    }

    /// Adds (or takes off) a flow's arrivals on the tracked hops of `path` after the first.
    #[inline]
    fn apply(&mut self, now: Time, path: &[LinkId], rate: f64, bytes: f64, add: bool) {
        for w in path.windows(2) {
            let (input, l) = (w[0].0, w[1].0 as usize);
            if self.screen.get(l).is_some_and(|s| s.tracked) {
                self.apply_hop(now, input, l, rate, bytes, add);
            }
        }
    }

    /// [`Backlogs::apply`] on link direction `l`, entered from `input`.
    fn apply_hop(&mut self, now: Time, input: u32, l: usize, rate: f64, bytes: f64, add: bool) {
        let (Some(&cap), Some(&in_cap)) = (self.caps.get(l), self.caps.get(input as usize)) else {
            return;
        };
        let Some(s) = self.links.get_mut(l) else {
            return;
        };
        s.update(now, cap);
        if let Some(p) = self.pause.as_deref_mut() {
            p.advance(l, now, s, cap);
        }
        let i = s.inputs.iter().position(|&(u, _)| u == input);
        if add {
            s.arrive += rate;
            s.bytes += bytes;
            match i {
                Some(i) => s.inputs[i].1 += 1,
                None => {
                    s.inputs.push((input, 1));
                    s.in_cap += in_cap;
                }
            }
        } else {
            s.arrive -= rate;
            s.bytes -= bytes;
            if let Some(i) = i {
                s.inputs[i].1 -= 1;
                if s.inputs[i].1 == 0 {
                    s.inputs.swap_remove(i);
                    s.in_cap -= in_cap;
                }
            }
            if s.inputs.is_empty() {
                // Exactly empty: no float residue carried into the next flows.
                s.arrive = 0.0;
                s.bytes = 0.0;
                s.in_cap = 0.0;
            }
            s.b = s.b.min(s.bytes.max(0.0));
        }
        if let Some(p) = self.pause.as_deref_mut() {
            p.recheck(l, s, cap);
        }
    }

    /// The peak of every link direction, by [`LinkId`], integrated up to `now`.
    pub fn peaks<'a>(&mut self, now: Time, path: impl Fn(u32) -> &'a [LinkId]) -> Vec<BacklogPeak> {
        self.flush(Time::NEVER, &path);
        let caps = &self.caps;
        self.links
            .iter_mut()
            .zip(caps)
            .map(|(s, &c)| {
                s.update(now, c);
                s.peak
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const G100: f64 = 12.5e9;

    /// Test paths by key.
    fn paths<'a>(p: &'a [Vec<LinkId>]) -> impl Fn(u32) -> &'a [LinkId] + 'a {
        move |k| p.get(k as usize).map_or(&[][..], |v| v.as_slice())
    }

    /// Four sources at 100 Gb/s into one 100 Gb/s link over a 400 Gb/s one: the queue grows
    /// at 300 Gb/s, 37.5 kB per microsecond, up to the bytes of the flows.
    #[test]
    fn incast_grows_at_the_excess_and_stops_at_the_bytes() {
        // Links 0-3: sources' first hops; 4: the 400 Gb/s trunk; 5: the receiver's link.
        let mut caps = vec![G100; 4];
        caps.extend([4.0 * G100, G100]);
        let mut b = Backlogs::new(caps, 4);
        let p: Vec<Vec<LinkId>> = (0..4)
            .map(|s| vec![LinkId(s), LinkId(4), LinkId(5)])
            .collect();
        let p = paths(&p);
        for s in 0..4u32 {
            b.start(Time::ZERO, s, s, 1e6, None, &p);
        }
        let p5 = b.peaks(Time::from_us(1), &p);
        assert!((p5[5].bytes - 37_500.0).abs() < 1e-6, "{:?}", p5[5]);
        assert_eq!(p5[5].inputs, 1);
        assert_eq!(p5[4].bytes, 0.0, "the trunk carries what arrives");
        let p5 = b.peaks(Time::from_us(1000), &p);
        assert_eq!(p5[5].bytes, 4e6, "never more than the flows' bytes");
        // Reached at 4e6 B / 37.5e9 B/s = 106.67 us.
        assert_eq!(p5[5].at, Time(106_666_667), "{:?}", p5[5]);
        for s in 0..4u32 {
            b.finish(Time::from_us(1000), s, &p);
        }
        let p5 = b.peaks(Time::from_us(2000), &p);
        assert_eq!(p5[5].bytes, 4e6, "the peak stays");
    }

    /// A link that one source's path reached alone keeps no state; when a second source's
    /// path reaches it while the first one's flow arrives, both arrive there from then on.
    #[test]
    fn a_second_path_onto_a_link_counts_the_flow_already_there() {
        // Links 0 and 1: the sources' first hops; 2: the link they share.
        let mut b = Backlogs::new(vec![G100; 3], 2);
        let p = [vec![LinkId(0), LinkId(2)], vec![LinkId(1), LinkId(2)]];
        let p = paths(&p);
        b.start(Time::ZERO, 0, 0, 1e6, None, &p);
        let q = b.peaks(Time::from_us(1), &p);
        assert_eq!(q[2].bytes, 0.0, "one source at the link's rate");
        b.start(Time::from_us(1), 1, 1, 1e6, None, &p);
        // 200 Gb/s into 100 Gb/s for 1 us: 12.5 kB over two inputs.
        let q = b.peaks(Time::from_us(2), &p);
        assert!((q[2].bytes - 12_500.0).abs() < 1e-6, "{:?}", q[2]);
        assert_eq!(q[2].inputs, 2);
        assert_eq!(q[2].arrival, 2.0 * G100);
    }

    /// Two flows from one source share its line rate: arriving together at a link of the
    /// same rate, they build no queue.
    #[test]
    fn a_sources_flows_share_its_line_rate() {
        // Link 1 runs at half the line rate: one flow alone would queue on it.
        let mut b = Backlogs::new(vec![G100, G100 / 2.0, G100 / 2.0], 1);
        let p = [
            vec![LinkId(0), LinkId(1)],
            vec![LinkId(0), LinkId(2)],
            vec![LinkId(0), LinkId(1)],
        ];
        let p = paths(&p);
        b.start(Time::ZERO, 0, 0, 1e6, None, &p);
        b.start(Time::ZERO, 1, 0, 1e6, None, &p);
        let q = b.peaks(Time::from_us(10), &p);
        assert_eq!(q[1].bytes, 0.0);
        assert_eq!(q[2].bytes, 0.0);
        b.finish(Time::from_us(10), 1, &p);
        b.start(Time::from_us(10), 2, 0, 1e6, None, &p);
        let q = b.peaks(Time::from_us(11), &p);
        // Both at 50 Gb/s now: 100 Gb/s into 50 Gb/s for 1 us.
        assert!((q[1].bytes - 6250.0).abs() < 1e-6, "{:?}", q[1]);
    }

    /// A PFC port pauses where its queue reaches XOFF and holds it there; it resumes once the
    /// arrivals fall below its rate and the queue has drained to XON.
    #[test]
    fn a_pfc_port_pauses_at_xoff_and_resumes_at_xon() {
        // Links 0-3: sources' first hops; 4: the 400 Gb/s trunk; 5: the receiver's port.
        let mut caps = vec![G100; 4];
        caps.extend([4.0 * G100, G100]);
        let mut b = Backlogs::new(caps, 4);
        // XOFF 1.5 MB whatever the inputs; XON 0.5 MB below.
        let xoff = DynamicThreshold {
            total: 1.5e6,
            reserved: 0.0,
            alpha: 1e12,
        };
        let mut thr = vec![None; 6];
        thr[5] = Some(PauseThreshold {
            xoff,
            xon_offset: 5e5,
        });
        b.set_pause(thr);
        let p: Vec<Vec<LinkId>> = (0..5)
            .map(|s| vec![LinkId(s % 4), LinkId(4), LinkId(5)])
            .collect();
        let p = paths(&p);
        for s in 0..4u32 {
            b.start(Time::ZERO, s, s, 1e8, None, &p);
        }
        assert!(!b.settle_pauses(Time::ZERO, &p));
        // 300 Gb/s of excess (37.5 GB/s) fills 1.5 MB in 40 us.
        assert_eq!(b.next_pause_change(), Some(Time::from_us(40)));
        assert!(b.settle_pauses(Time::from_us(40), &p));
        assert_eq!(b.paused().collect::<Vec<_>>(), [LinkId(5)]);
        assert_eq!(
            b.next_pause_change(),
            None,
            "held at XOFF while arrivals exceed"
        );
        // Three sources stop at 100 us: 100 Gb/s arrive, no excess: still paused.
        for s in 1..4u32 {
            b.finish(Time::from_us(100), s, &p);
        }
        assert!(!b.settle_pauses(Time::from_us(100), &p));
        assert_eq!(b.next_pause_change(), None);
        // Its source's flow is replaced by one capped at 50 Gb/s: the queue drains at
        // 50 Gb/s (6.25 GB/s) from XOFF to XON, 0.5 MB, in 80 us.
        b.start(Time::from_us(200), 4, 0, 1e8, Some(G100 / 2.0), &p);
        b.finish(Time::from_us(200), 0, &p);
        assert!(!b.settle_pauses(Time::from_us(200), &p));
        assert_eq!(b.next_pause_change(), Some(Time::from_us(280)));
        assert!(b.settle_pauses(Time::from_us(280), &p));
        assert_eq!(b.paused().count(), 0);
        assert_eq!(b.next_pause_change(), None);
        let totals = b.pause_totals(Time::from_us(300));
        assert_eq!(totals[5].pauses, 1);
        assert_eq!(totals[5].first, Time::from_us(40));
        assert_eq!(totals[5].paused_ps, Time::from_us(240).ps());
        b.finish(Time::from_us(300), 4, &p);
        assert!(!b.settle_pauses(Time::from_us(300), &p));
        assert_eq!(b.paused().count(), 0);
    }
}
