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
//! reaches the next one). It costs a few operations per hop at every start and finish.

use fabemu_fabric::units::Time;
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

/// What a started flow added, to be taken off when it finishes.
#[derive(Clone, Copy, Debug, Default)]
struct Active {
    rate: f64,
    bytes: f64,
    src: u32,
    /// Started at `pending_t`, its arrivals not applied yet.
    pending: bool,
}

/// Open-loop queue estimates of a network's link directions (see the module doc).
#[derive(Clone, Debug)]
pub struct Backlogs {
    caps: Vec<f64>,
    links: Vec<LinkState>,
    /// Active flows per source host.
    at_source: Vec<u32>,
    /// The active flow per key (the caller's queue pair: one flow at a time each).
    active: Vec<Option<Active>>,
    /// Keys of the flows started at `pending_t` and not applied yet.
    pending: Vec<u32>,
    pending_t: Time,
}

impl Backlogs {
    /// Estimates for link directions of `caps` wire bytes per second and `hosts` sources.
    pub fn new(caps: Vec<f64>, hosts: usize) -> Backlogs {
        Backlogs {
            links: vec![LinkState::default(); caps.len()],
            caps,
            at_source: vec![0; hosts],
            active: Vec::new(),
            pending: Vec::new(),
            pending_t: Time::ZERO,
        }
    }

    /// Flow `key` of `bytes` wire bytes starts at `now` from host `src`, its source rate
    /// capped at `cap` wire bytes/s if given. A key has one flow at a time (a start replaces
    /// an unfinished one); `path` gives a key's link directions from the source.
    ///
    /// Its arrivals are applied when time moves on, at the source's share among all the flows
    /// that started with it at `now` (a collective posts many at one instant).
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
        if self.active.len() <= key as usize {
            self.active.resize(key as usize + 1, None);
        }
        if self.active[key as usize].is_some() {
            self.finish(now, key, &path);
        }
        self.at_source[src as usize] += 1;
        self.active[key as usize] = Some(Active {
            rate: cap.unwrap_or(f64::INFINITY),
            bytes,
            src,
            pending: true,
        });
        self.pending.push(key);
        self.pending_t = now;
    }

    /// Applies the flows started at `pending_t`, once time has moved past it.
    #[inline]
    fn flush<'a>(&mut self, now: Time, path: &impl Fn(u32) -> &'a [LinkId]) {
        if now > self.pending_t && !self.pending.is_empty() {
            self.apply_pending(path);
        }
    }

    fn apply_pending<'a>(&mut self, path: &impl Fn(u32) -> &'a [LinkId]) {
        let t = self.pending_t;
        let mut pending = std::mem::take(&mut self.pending);
        for &key in &pending {
            let Some(a) = self.active.get_mut(key as usize).and_then(Option::as_mut) else {
                continue;
            };
            if !a.pending {
                continue;
            }
            let p = path(key);
            let Some(first) = p.first().and_then(|l| self.caps.get(l.0 as usize)) else {
                continue;
            };
            let n = self
                .at_source
                .get(a.src as usize)
                .copied()
                .unwrap_or(1)
                .max(1);
            a.rate = a.rate.min(first / f64::from(n));
            a.pending = false;
            let (rate, bytes) = (a.rate, a.bytes);
            self.apply(t, p, rate, bytes, true);
        }
        pending.clear();
        self.pending = pending;
    }

    /// Flow `key` finishes at `now` (`path` as for [`Backlogs::start`]).
    pub fn finish<'a>(&mut self, now: Time, key: u32, path: &impl Fn(u32) -> &'a [LinkId]) {
        self.flush(now, path);
        let Some(a) = self.active.get_mut(key as usize).and_then(Option::take) else {
            return;
        };
        if let Some(n) = self.at_source.get_mut(a.src as usize) {
            *n = n.saturating_sub(1);
        }
        if !a.pending {
            self.apply(now, path(key), a.rate, a.bytes, false);
        }
    }

    /// Adds (or takes off) a flow's arrivals on the hops of `path` after the first.
    #[inline]
    fn apply(&mut self, now: Time, path: &[LinkId], rate: f64, bytes: f64, add: bool) {
        for w in path.windows(2) {
            let (input, l) = (w[0].0, w[1].0 as usize);
            let (Some(&cap), Some(&in_cap)) = (self.caps.get(l), self.caps.get(input as usize))
            else {
                continue;
            };
            let Some(s) = self.links.get_mut(l) else {
                continue;
            };
            s.update(now, cap);
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
}
