//! PFC at flow level: the flows held behind a paused port.
//!
//! A lossless switch port whose queue reaches XOFF pauses the link directions feeding it
//! ([`crate::backlog`] says which ports are paused and when). PFC pauses a whole priority, so
//! everything on a paused link waits, not only the traffic for the congested port: the link's
//! transmitter serves its queue (a switch's FIFO, a NIC's round-robin over its queue pairs) and
//! each pause stops all of it. The flows for the congested port advance at the rate that port
//! gives them, and the others on the same link, served between them, advance at a pace set by
//! theirs. This is the head-of-line blocking PFC is known for; max-min fairness, which gives
//! every flow its own bottleneck's share, leaves it out.
//!
//! The fluid model here adds it as rate caps, in the spirit of the fluid PFC models of the
//! literature (a paused link's rate is shared back up the tree):
//!
//! - While port `P` is paused, each link direction `L` that feeds it (the hop before `P` on a
//!   flow's path) is paused *for* `P`. A paused `L` whose transmitter is itself a PFC switch
//!   port fills that switch's queue for `L` and pauses the links feeding `L` in turn, for `L`:
//!   the pause cascades up to the sources' NICs.
//! - A paused link serves its flows in shares: equal shares for the links they come in over
//!   (each ingress port of a switch is paused and resumed on its own counter, so each gets
//!   about the same turn; a NIC's link is one ingress), split equally among the flows of one
//!   ingress (a NIC's round-robin). With `s_f` a flow's share, the link's *pace* for `P` is
//!   `T = sum r_f w_f / sum s_f` over the flows on `L` bound for `P` (rate `r_f`, wire bytes per
//!   payload byte `w_f`): the pace at which the flows for `P` get what `P` gives them. A link
//!   paused for several ports goes at the slowest one's pace.
//! - Every other flow on `L` is held to its share of the pace, `T s_f / w_f` payload bytes/s;
//!   the flows for the port that sets the pace keep their max-min rates. A flow on several
//!   paused links takes the lowest hold, and its own cap (`qp_rate`) if lower.
//! - A pace is taken from the flows that no pause holds (a flow held at one link is left out
//!   of the pace of every other): taken from held flows, a pace could feed on itself, a flow
//!   that sets one link's pace held at another whose pace it sets, down to nothing. A link
//!   paused for a port all of whose flows there are held takes its pace from its other ports.
//! - The holds are recomputed when a port pauses or resumes and, while some port is paused,
//!   at most every [`HOLD_PERIOD_PS`] (10 us) otherwise, with the rates of the moment; a hold
//!   that moved by less than 1e-6 is left as it is. Between, a flow that starts on a paused
//!   link runs unheld and the holds lag the rates. When no port is paused they are lifted.
//!
//! What is approximate: the pause starts where the open-loop queue estimate crosses XOFF and
//! ends where it falls to XON (not from the held rates); the cascade is immediate (an upstream
//! queue fills in the time its own threshold takes); the flows for the pacing port share it
//! max-min, not in the link's shares; and the bytes queued in the paused switches are not
//! modelled. Measured in docs/FLOW.md.

use crate::{FlowError, FlowId, FlowNetwork, LinkId};

/// A hold moved by at most this much (relative) is left as it is: no refilling for noise.
const HOLD_EPSILON: f64 = 1e-6;

/// While some port is paused and none paused or resumed since, the holds are recomputed at
/// most this often (ps): 10 us, a few round trips of a data-center path. Recomputed at every
/// instant (and from rates without holds, lifted first), an all-to-all on 64 hosts whose 64
/// ports take turns pausing refilled most of its 4032 flows twice at each of its 4000
/// instants (12 s against 0.02 s without holds).
pub const HOLD_PERIOD_PS: u64 = 10_000_000;

/// The flow of a key (the caller's queue pair: one flow at a time).
#[derive(Clone, Copy, Debug)]
struct KeyFlow {
    flow: FlowId,
    /// Wire bytes per payload byte.
    wire: f64,
    /// Its own cap (payload bytes/s, `+inf`: none).
    base: f64,
    /// The cap it has in the network now.
    cap: f64,
    /// The paused link whose pace set that cap (`u32::MAX`: none, its own cap).
    by: u32,
    /// Where it is in [`Holds::active`] (`u32::MAX`: not active).
    pos: u32,
}

const IDLE: KeyFlow = KeyFlow {
    flow: FlowId(u32::MAX),
    wire: 1.0,
    base: f64::INFINITY,
    cap: f64::INFINITY,
    by: u32::MAX,
    pos: u32::MAX,
};

/// The holds PFC puts on flows (see the module doc).
#[derive(Clone, Debug, Default)]
pub struct Holds {
    keys: Vec<KeyFlow>,
    /// Keys with an active flow.
    active: Vec<u32>,
    /// Some flow's cap is below its own.
    holding: bool,
    /// When the holds are next recomputed unless a port pauses or resumes first.
    next_at: u64,
    // Scratch of a recomputation.
    /// `(link, key, position of the link on the key's path)` of every active flow's hops.
    entries: Vec<(u32, u32, u32)>,
    /// `(paused link, the port it is paused for)`.
    pairs: Vec<(u32, u32)>,
    ports: Vec<u32>,
    /// Per active flow (by position in `active`): its hold and the link that sets it.
    target: Vec<(f64, u32)>,
    /// `(ingress link, key, next link, share)` of the flows on one paused link.
    flows: Vec<(u32, u32, u32, f64)>,
}

impl Holds {
    /// No flows, no holds.
    pub fn new() -> Holds {
        Holds::default()
    }

    /// Key `key`'s flow `flow` started, `wire` wire bytes per payload byte, capped at `cap`
    /// payload bytes/s if given.
    pub fn started(&mut self, key: u32, flow: FlowId, wire: f64, cap: Option<f64>) {
        self.finished(key);
        if self.keys.len() <= key as usize {
            self.keys.resize(key as usize + 1, IDLE);
        }
        let base = cap.unwrap_or(f64::INFINITY);
        self.keys[key as usize] = KeyFlow {
            flow,
            wire,
            base,
            cap: base,
            by: u32::MAX,
            pos: self.active.len() as u32,
        };
        self.active.push(key);
    }

    /// Key `key`'s flow finished (nothing if it has none).
    pub fn finished(&mut self, key: u32) {
        let Some(k) = self.keys.get_mut(key as usize) else {
            return;
        };
        let pos = k.pos as usize;
        if pos >= self.active.len() {
            return;
        }
        *k = IDLE;
        self.active.swap_remove(pos);
        if let Some(&moved) = self.active.get(pos) {
            self.keys[moved as usize].pos = pos as u32;
        }
    }

    /// Sets the holds for the ports `paused` (sorted) on `net`'s flows at time `now`:
    /// `changed` says that a port paused or resumed since the last call, `is_port` which link
    /// directions a PFC switch transmits on (a pause cascades through them), `path` gives a
    /// key's link directions from its source. With no port paused, lifts every hold; else
    /// recomputes them when a port paused or resumed, or [`HOLD_PERIOD_PS`] after they last
    /// were, from the rates max-min gives without them (the last ones lifted first).
    pub fn hold<'a>(
        &mut self,
        net: &mut FlowNetwork,
        now: u64,
        changed: bool,
        paused: &[LinkId],
        is_port: impl Fn(LinkId) -> bool,
        path: impl Fn(u32) -> &'a [LinkId],
    ) -> Result<(), FlowError> {
        if paused.is_empty() {
            if self.holding {
                self.target.clear();
                self.target
                    .resize(self.active.len(), (f64::INFINITY, u32::MAX));
                self.apply(net)?;
            }
            return Ok(());
        }
        if !changed && now < self.next_at {
            return Ok(());
        }
        self.next_at = now.saturating_add(HOLD_PERIOD_PS);
        self.index(paused, &is_port, &path);
        self.targets(net, &path);
        self.apply(net)?;
        Ok(())
    }

    /// Collects the active flows' hops and the (paused link, port) pairs of the cascade.
    fn index<'a>(
        &mut self,
        paused: &[LinkId],
        is_port: &impl Fn(LinkId) -> bool,
        path: &impl Fn(u32) -> &'a [LinkId],
    ) {
        self.entries.clear();
        for &k in &self.active {
            for (i, l) in path(k).iter().enumerate() {
                self.entries.push((l.0, k, i as u32));
            }
        }
        self.entries.sort_unstable();
        self.pairs.clear();
        self.ports.clear();
        self.ports.extend(paused.iter().map(|l| l.0));
        let mut next = 0;
        while next < self.ports.len() {
            let p = self.ports[next];
            next += 1;
            for &(_, k, i) in on_link(&self.entries, p) {
                let Some(l) = i.checked_sub(1).and_then(|i| path(k).get(i as usize)) else {
                    continue;
                };
                self.pairs.push((l.0, p));
                if is_port(*l) && !self.ports.contains(&l.0) {
                    self.ports.push(l.0);
                }
            }
        }
        self.pairs.sort_unstable();
        self.pairs.dedup();
    }

    /// Each active flow's hold at the present rates (`target`, by position in `active`).
    fn targets<'a>(&mut self, net: &mut FlowNetwork, path: &impl Fn(u32) -> &'a [LinkId]) {
        self.target.clear();
        self.target
            .resize(self.active.len(), (f64::INFINITY, u32::MAX));
        let mut i = 0;
        while i < self.pairs.len() {
            let l = self.pairs[i].0;
            let mut j = i;
            while j < self.pairs.len() && self.pairs[j].0 == l {
                j += 1;
            }
            let ports = &self.pairs[i..j];
            i = j;
            let on = on_link(&self.entries, l);
            // Each flow's share: equal per ingress, then per flow of an ingress.
            self.flows.clear();
            for &(_, k, pos) in on {
                let p = path(k);
                let prev = pos
                    .checked_sub(1)
                    .and_then(|i| p.get(i as usize))
                    .map_or(u32::MAX, |l| l.0);
                let next = p.get(pos as usize + 1).map_or(u32::MAX, |l| l.0);
                self.flows.push((prev, k, next, 0.0));
            }
            self.flows.sort_unstable_by_key(|f| (f.0, f.1));
            let groups = self.flows.chunk_by(|a, b| a.0 == b.0).count() as f64;
            let mut a = 0;
            while a < self.flows.len() {
                let mut b = a;
                while b < self.flows.len() && self.flows[b].0 == self.flows[a].0 {
                    b += 1;
                }
                let share = 1.0 / (groups * (b - a) as f64);
                for f in &mut self.flows[a..b] {
                    f.3 = share;
                }
                a = b;
            }
            // The pace: the slowest of the ports the link is paused for, from the flows that
            // no pause holds (a pace taken from held flows could feed on itself: a flow that
            // sets one link's pace held at another whose pace it sets, down to nothing).
            let mut pace = (f64::INFINITY, u32::MAX);
            for &(_, port) in ports {
                let (mut rate, mut share) = (0.0, 0.0);
                for &(_, k, next, s) in &self.flows {
                    if next == port {
                        let kf = self.keys[k as usize];
                        if kf.by != u32::MAX {
                            continue;
                        }
                        rate += net.rate(kf.flow).unwrap_or(0.0) * kf.wire;
                        share += s;
                    }
                }
                if share > 0.0 && rate / share < pace.0 {
                    pace = (rate / share, port);
                }
            }
            let (t, port) = pace;
            if !(t.is_finite() && t > 0.0) {
                continue;
            }
            for &(_, k, next, s) in &self.flows {
                if next != port {
                    let kf = self.keys[k as usize];
                    let cap = &mut self.target[kf.pos as usize];
                    let held = t * s / kf.wire;
                    if held < cap.0 {
                        *cap = (held, l);
                    }
                }
            }
        }
    }

    /// Gives every active flow the cap `target` and its own cap leave it; true when one moved.
    fn apply(&mut self, net: &mut FlowNetwork) -> Result<bool, FlowError> {
        let mut moved = false;
        let mut holding = false;
        for (i, &k) in self.active.iter().enumerate() {
            let kf = &mut self.keys[k as usize];
            let (hold, by) = self
                .target
                .get(i)
                .copied()
                .unwrap_or((f64::INFINITY, u32::MAX));
            let (cap, by) = if hold < kf.base {
                (hold, by)
            } else {
                (kf.base, u32::MAX)
            };
            holding |= by != u32::MAX;
            kf.by = by;
            let same = cap == kf.cap
                || (cap.is_finite()
                    && kf.cap.is_finite()
                    && (cap - kf.cap).abs() <= HOLD_EPSILON * kf.cap);
            if same {
                continue;
            }
            kf.cap = cap;
            net.set_cap(kf.flow, (cap < f64::INFINITY).then_some(cap))?;
            moved = true;
        }
        self.holding = holding;
        Ok(moved)
    }
}

/// The entries of link `l` in `entries` (sorted by link).
fn on_link(entries: &[(u32, u32, u32)], l: u32) -> &[(u32, u32, u32)] {
    let from = entries.partition_point(|e| e.0 < l);
    let to = entries.partition_point(|e| e.0 <= l);
    &entries[from..to]
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // test code: a failure is a panic

    use super::*;
    use fabemu_fabric::units::Time;

    const G100: f64 = 12.5e9;

    /// Setting a cap and lifting it again gives the rates a network started with those caps
    /// gives, bit for bit or to the order of float additions.
    #[test]
    fn set_cap_refills_as_a_fresh_start_would() {
        // Two flows share link 0; flow b also crosses link 1 (half the rate).
        let caps = vec![G100, G100 / 2.0];
        let mut net = FlowNetwork::new(caps.clone()).unwrap();
        let a = net
            .start(Time::ZERO, &[(LinkId(0), 1.0)], 1 << 30, None, 0)
            .unwrap();
        let b = net
            .start(
                Time::ZERO,
                &[(LinkId(0), 1.0), (LinkId(1), 1.0)],
                1 << 30,
                None,
                1,
            )
            .unwrap();
        assert_eq!(net.rate(a), Some(G100 / 2.0));
        for cap in [Some(G100 / 8.0), Some(G100), None, Some(G100 / 4.0)] {
            net.set_cap(b, cap).unwrap();
            let mut fresh = FlowNetwork::new(caps.clone()).unwrap();
            let fa = fresh
                .start(Time::ZERO, &[(LinkId(0), 1.0)], 1 << 30, None, 0)
                .unwrap();
            let fb = fresh
                .start(
                    Time::ZERO,
                    &[(LinkId(0), 1.0), (LinkId(1), 1.0)],
                    1 << 30,
                    cap,
                    1,
                )
                .unwrap();
            let (ra, rb) = (net.rate(a).unwrap(), net.rate(b).unwrap());
            assert_eq!(ra, fresh.rate(fa).unwrap(), "{cap:?}");
            assert_eq!(rb, fresh.rate(fb).unwrap(), "{cap:?}");
            net.recompute_all();
            assert!((net.rate(a).unwrap() - ra).abs() <= 1e-9 * ra);
            assert!((net.rate(b).unwrap() - rb).abs() <= 1e-9 * rb);
        }
        assert_eq!(net.rate(a), Some(G100 * 0.75));
        assert!(net.set_cap(b, Some(-1.0)).is_err());
    }

    /// `examples/lossless.yaml` in the abstract: four flows over a 400 Gb/s trunk (link 5) into
    /// a 100 Gb/s port (link 6), and a victim that shares only the trunk (then link 7). With
    /// port 6 paused, the trunk is paused for it and the victim is held to its ingress share
    /// of the trunk's pace: each of the five ingress links a fifth, the four incast flows at
    /// 25 Gb/s making a pace of 125 Gb/s, so 25 Gb/s. Lifted when nothing is paused.
    #[test]
    fn a_paused_trunk_holds_the_victim_to_the_pace_of_the_incast() {
        let mut caps = vec![G100; 5];
        caps.extend([4.0 * G100, G100, G100]);
        let mut net = FlowNetwork::new(caps).unwrap();
        let paths: Vec<Vec<LinkId>> = (0..5u32)
            .map(|s| vec![LinkId(s), LinkId(5), LinkId(if s < 4 { 6 } else { 7 })])
            .collect();
        let mut holds = Holds::new();
        for (k, p) in paths.iter().enumerate() {
            let usage: Vec<(LinkId, f64)> = p.iter().map(|&l| (l, 1.0)).collect();
            let f = net
                .start(Time::ZERO, &usage, 1 << 30, None, k as u64)
                .unwrap();
            holds.started(k as u32, f, 1.0, None);
        }
        let path = |k: u32| paths.get(k as usize).map_or(&[][..], |p| p.as_slice());
        let victim = FlowId(4);
        assert_eq!(net.rate(victim), Some(G100));
        holds
            .hold(&mut net, 0, true, &[LinkId(6)], |l| l.0 >= 5, path)
            .unwrap();
        assert_eq!(net.rate(victim), Some(G100 / 4.0));
        assert_eq!(net.rate(FlowId(0)), Some(G100 / 4.0));
        // Again at the same rates: the same hold.
        holds
            .hold(&mut net, 0, true, &[LinkId(6)], |l| l.0 >= 5, path)
            .unwrap();
        assert_eq!(net.rate(victim), Some(G100 / 4.0));
        holds
            .hold(&mut net, 0, true, &[], |l| l.0 >= 5, path)
            .unwrap();
        assert_eq!(net.rate(victim), Some(G100));
    }
}
