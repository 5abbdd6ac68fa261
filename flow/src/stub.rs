//! Naive stand-in for the max-min network (full recomputation), same API.
#![allow(clippy::all)]
use fabemu_fabric::units::Time;

/// One direction of a link.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LinkId(pub u32);
/// A flow.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FlowId(pub u32);

struct F {
    usage: Vec<(LinkId, f64)>,
    remaining: f64,
    cap: Option<f64>,
    token: u64,
    rate: f64,
}

/// Stub network.
pub struct FlowNetwork {
    cap: Vec<f64>,
    flows: Vec<Option<F>>,
    now: Time,
    dirty: bool,
    bytes: Vec<f64>,
}

impl FlowNetwork {
    /// New.
    pub fn new(capacities: Vec<f64>) -> FlowNetwork {
        let n = capacities.len();
        FlowNetwork {
            cap: capacities,
            flows: Vec::new(),
            now: Time::ZERO,
            dirty: false,
            bytes: vec![0.0; n],
        }
    }
    /// Start.
    pub fn start(
        &mut self,
        now: Time,
        usage: &[(LinkId, f64)],
        bytes: u64,
        cap: Option<f64>,
        token: u64,
    ) -> FlowId {
        self.progress(now);
        self.dirty = true;
        let f = F {
            usage: usage.to_vec(),
            remaining: bytes as f64,
            cap,
            token,
            rate: 0.0,
        };
        let i = match self.flows.iter().position(|f| f.is_none()) {
            Some(i) => {
                self.flows[i] = Some(f);
                i
            }
            None => {
                self.flows.push(Some(f));
                self.flows.len() - 1
            }
        };
        FlowId(i as u32)
    }
    fn progress(&mut self, t: Time) {
        let dt = (t.ps() - self.now.ps()) as f64 / 1e12;
        for f in self.flows.iter_mut().flatten() {
            let moved = (f.rate * dt).min(f.remaining);
            f.remaining -= f.rate * dt;
            for &(l, w) in &f.usage {
                self.bytes[l.0 as usize] += moved * w;
            }
        }
        self.now = t;
    }
    fn recompute(&mut self) {
        if !self.dirty {
            return;
        }
        self.dirty = false;
        let mut rem = self.cap.clone();
        let mut frozen: Vec<bool> = self.flows.iter().map(|f| f.is_none()).collect();
        loop {
            let mut wsum = vec![0.0; rem.len()];
            for (i, f) in self.flows.iter().enumerate() {
                if let (Some(f), false) = (f, frozen[i]) {
                    for &(l, w) in &f.usage {
                        wsum[l.0 as usize] += w;
                    }
                }
            }
            let mut best = f64::INFINITY;
            for l in 0..rem.len() {
                if wsum[l] > 0.0 {
                    best = best.min(rem[l] / wsum[l]);
                }
            }
            for (i, f) in self.flows.iter().enumerate() {
                if let (Some(f), false) = (f, frozen[i]) {
                    if let Some(c) = f.cap {
                        best = best.min(c);
                    }
                }
            }
            if !best.is_finite() {
                break;
            }
            let mut any = false;
            for i in 0..self.flows.len() {
                if frozen[i] {
                    continue;
                }
                let Some(f) = self.flows[i].as_ref() else {
                    continue;
                };
                let hit = f.cap.is_some_and(|c| c <= best)
                    || f.usage.iter().any(|&(l, _)| {
                        wsum[l.0 as usize] > 0.0 && rem[l.0 as usize] / wsum[l.0 as usize] <= best
                    });
                if hit {
                    frozen[i] = true;
                    any = true;
                }
            }
            for (i, f) in self.flows.iter_mut().enumerate() {
                if let Some(f) = f {
                    if frozen[i] && f.rate >= 0.0 && !f.usage.is_empty() {}
                }
                let _ = i;
            }
            // assign rates for newly frozen
            for i in 0..self.flows.len() {
                let Some(f) = self.flows[i].as_mut() else {
                    continue;
                };
                if frozen[i] && f.rate.is_nan() {}
            }
            // simple: set rate for flows frozen this round
            let newly: Vec<usize> = (0..self.flows.len())
                .filter(|&i| frozen[i] && self.flows[i].as_ref().is_some_and(|f| f.rate < 0.0))
                .collect();
            for i in newly {
                if let Some(f) = self.flows[i].as_mut() {
                    f.rate = best;
                    for &(l, w) in &f.usage {
                        rem[l.0 as usize] -= best * w;
                    }
                }
            }
            if !any {
                break;
            }
        }
    }
    /// Next finish.
    pub fn next_finish(&mut self) -> Option<Time> {
        if self.dirty {
            for f in self.flows.iter_mut().flatten() {
                f.rate = -1.0;
            }
            self.recompute();
        }
        self.flows
            .iter()
            .flatten()
            .filter(|f| f.rate > 0.0)
            .map(|f| Time(self.now.ps() + (f.remaining.max(0.0) / f.rate * 1e12).ceil() as u64))
            .min()
    }
    /// Advance.
    pub fn advance(&mut self, t: Time, finished: &mut Vec<(FlowId, u64)>) {
        let _ = self.next_finish();
        let mut fin: Vec<(Time, usize)> = Vec::new();
        for (i, f) in self.flows.iter().enumerate() {
            if let Some(f) = f {
                if f.rate > 0.0 {
                    let ft =
                        Time(self.now.ps() + (f.remaining.max(0.0) / f.rate * 1e12).ceil() as u64);
                    if ft <= t {
                        fin.push((ft, i));
                    }
                }
            }
        }
        self.progress(t);
        fin.sort();
        for (_, i) in fin {
            if let Some(f) = self.flows[i].take() {
                finished.push((FlowId(i as u32), f.token));
                self.dirty = true;
            }
        }
    }
    /// Now.
    pub fn now(&self) -> Time {
        self.now
    }
    /// Bytes carried.
    pub fn link_bytes(&self, l: LinkId) -> f64 {
        self.bytes[l.0 as usize]
    }
    /// Active flows.
    pub fn active(&self) -> usize {
        self.flows.iter().flatten().count()
    }
}
