//! Weighted max-min fair rates by progressive filling.
//!
//! The problem: link directions with capacities `C_l` (bytes/s), flows that use some of them with
//! weights `w_fl > 0` and may have a cap. Rates `r_f` are max-min fair under
//! `sum_f w_fl * r_f <= C_l` and `r_f <= cap_f`: no flow can get more without taking from a flow
//! that has no more than it.
//!
//! Progressive filling computes them: all flows that are not yet frozen share one level `x`, which
//! rises until a constraint is tight. Link `l` is tight at
//! `x_l = (C_l - F_l) / W_l`, with `F_l` the load of its frozen flows and `W_l` the sum of the
//! weights of its unfrozen flows; a cap is a private link that is tight at `x = cap_f`. The
//! smallest of these levels wins: the flows of that link (or the capped flow) freeze at it, which
//! changes `F` and `W` of the other links they use, and the filling goes on.
//!
//! Levels only rise (freezing a flow at `x <= x_l` on link `l` leaves `x_l` no lower), so the
//! links wait in a min-heap keyed by a *lower bound* of their level, and a freeze updates no heap
//! entry at all. When the smallest entry comes out, its link's level is computed afresh: if it is
//! still the key, no other link can be lower (their keys are no smaller and their levels no
//! smaller than their keys) and the link saturates; if it rose, the link goes back in with the
//! new level. The heap holds at most one entry per link and one per cap, so it stays small and
//! warm in cache however many flows the links carry; a freeze costs `O(links of the flow)` and a
//! pop `O(log links)`.
//!
//! The `Filler` is the one implementation: [`max_min_rates`] runs it once over a whole network,
//! and [`crate::FlowNetwork`] runs it on the flows a change can move, on reused buffers
//! (`Filler::solve_from`: the level starts at the threshold below which nothing moved). Its
//! result is a pure function of its input in the order given (flows by index, each flow's links
//! by index), with heap ties broken by (level, links before caps, index), so runs are
//! reproducible.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use crate::{FlowError, LinkId};

/// One flow for [`max_min_rates`]: the link directions it loads and how much, and an optional cap.
#[derive(Clone, Debug, PartialEq)]
pub struct FlowSpec {
    /// `(link, weight)`: at rate `r` the flow uses `weight * r` of the link's capacity.
    pub usage: Vec<(LinkId, f64)>,
    /// Upper bound on the flow's rate (bytes/s), if any.
    pub cap: Option<f64>,
}

/// The max-min fair rates (bytes/s) of `flows` over link directions of the given capacities
/// (bytes/s), computed in one shot by progressive filling; `rates[i]` belongs to `flows[i]`.
///
/// A flow that uses no link and has no cap gets `f64::INFINITY`. A link listed twice by one flow
/// counts with the sum of its weights.
pub fn max_min_rates(capacities: &[f64], flows: &[FlowSpec]) -> Result<Vec<f64>, FlowError> {
    check_capacities(capacities)?;
    let mut filler = Filler::default();
    let mut usage = Vec::new();
    for &c in capacities {
        filler.add_link(c);
    }
    for f in flows {
        normalize_usage(&f.usage, capacities.len(), &mut usage)?;
        let cap = check_cap(f.cap)?;
        for &(l, w) in &usage {
            filler.push_use(l, w);
        }
        filler.end_flow(cap);
    }
    filler.solve();
    Ok((0..flows.len()).map(|i| filler.rate(i)).collect())
}

/// Checks that every capacity is positive and finite.
pub(crate) fn check_capacities(capacities: &[f64]) -> Result<(), FlowError> {
    for (l, &c) in capacities.iter().enumerate() {
        if !(c > 0.0 && c.is_finite()) {
            return Err(FlowError::InvalidCapacity {
                link: l as u32,
                value: c,
            });
        }
    }
    Ok(())
}

/// A cap as the filler wants it: `+inf` for none.
pub(crate) fn check_cap(cap: Option<f64>) -> Result<f64, FlowError> {
    match cap {
        None => Ok(f64::INFINITY),
        // `> 0.0` is false for NaN.
        Some(c) if c > 0.0 => Ok(c),
        Some(c) => Err(FlowError::InvalidCap { cap: c }),
    }
}

/// Validates `usage` against `links` link directions and writes it to `out` sorted by link, a
/// link listed twice merged into one entry with the sum of its weights (in the order given).
pub(crate) fn normalize_usage(
    usage: &[(LinkId, f64)],
    links: usize,
    out: &mut Vec<(u32, f64)>,
) -> Result<(), FlowError> {
    out.clear();
    // Whether the links come strictly increasing or strictly decreasing: then the list (or its
    // reverse) is its own normal form, no sort and no merge. A simulation passes each queue
    // pair's path the same way for every message, and a reverse path in the opposite order of
    // its forward one, so both are common; checking costs two compares a link. The checks come
    // first and the copy after, in one `extend` (one capacity check, not one per entry).
    let (mut rising, mut falling) = (true, true);
    let mut prev = u32::MAX;
    for (i, &(LinkId(l), w)) in usage.iter().enumerate() {
        if l as usize >= links {
            return Err(FlowError::UnknownLink { link: l, links });
        }
        if !positive_finite(w) {
            return Err(FlowError::InvalidWeight { link: l, weight: w });
        }
        if i > 0 {
            rising &= prev < l;
            falling &= prev > l;
        }
        prev = l;
    }
    let plain = |&(LinkId(l), w): &(LinkId, f64)| (l, w);
    if falling && !rising {
        out.extend(usage.iter().rev().map(plain));
        return Ok(());
    }
    out.extend(usage.iter().map(plain));
    if rising {
        return Ok(());
    }
    // Stable: equal links keep their given order, so the merged sum is deterministic.
    out.sort_by_key(|&(l, _)| l);
    let mut k = 0;
    for i in 0..out.len() {
        if k > 0 && out[k - 1].0 == out[i].0 {
            out[k - 1].1 += out[i].1;
        } else {
            out[k] = out[i];
            k += 1;
        }
    }
    out.truncate(k);
    Ok(())
}

/// `w > 0.0 && w.is_finite()` in one subtraction and one compare: the positive finite
/// doubles are exactly those whose bits lie in `1..=f64::MAX.to_bits()` (zero, negatives, the
/// infinities and NaNs all fall outside). Written out, the float tests were the most of a ring
/// message's `normalize_usage`.
fn positive_finite(w: f64) -> bool {
    w.to_bits().wrapping_sub(1) < f64::MAX.to_bits()
}

/// What a heap entry stands for: a link's level, or a flow's cap (links first on equal levels).
const KIND_LINK: u32 = 0;
const KIND_CAP: u32 = 1;

/// A candidate level in the filling heap (a lower bound for a link, exact for a cap), packed into
/// one integer ordered by (level, kind, index), all canonical, so equal levels come out in the
/// same order in every run. Levels are never negative, and the bits of a non-negative `f64`
/// order like its value; one `u128` compares in a few instructions, which matters because the
/// heap's pops are the hottest loop of a sparse filling.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Entry(u128);

impl Entry {
    fn new(level: f64, kind: u32, idx: u32) -> Entry {
        // `<= 0.0` also maps -0.0 to the smallest key.
        let bits = if level <= 0.0 { 0 } else { level.to_bits() };
        Entry((u128::from(bits) << 64) | (u128::from(kind) << 32) | u128::from(idx))
    }
    fn level(self) -> f64 {
        f64::from_bits((self.0 >> 64) as u64)
    }
    fn kind(self) -> u32 {
        (self.0 >> 32) as u32
    }
    fn idx(self) -> u32 {
        self.0 as u32
    }
}

/// Progressive filling over local indices: links `0..m` and flows `0..n` added in order, then
/// [`Filler::solve`]. Every buffer is kept between runs ([`Filler::clear`] empties without
/// freeing), so repeated fillings allocate nothing once the buffers have grown.
#[derive(Debug, Default)]
pub(crate) struct Filler {
    // Input.
    link_cap: Vec<f64>,
    flow_cap: Vec<f64>,
    /// Flow `i` uses `flow_use[flow_start[i]..flow_start[i + 1]]` (local link, weight).
    flow_start: Vec<u32>,
    flow_use: Vec<(u32, f64)>,
    // Derived: link `l` is used by `link_use[link_start[l]..link_start[l + 1]]` (flow, weight),
    // in flow order.
    link_start: Vec<u32>,
    link_use: Vec<(u32, f64)>,
    // Filling state per link.
    load: Vec<f64>,
    wsum: Vec<f64>,
    unfrozen: Vec<u32>,
    /// Fill cursor per link while building `link_use`.
    cursor: Vec<u32>,
    // Filling state per flow.
    frozen: Vec<bool>,
    rate: Vec<f64>,
    heap: BinaryHeap<Reverse<Entry>>,
}

impl Filler {
    /// Empties the problem, keeping the buffers' capacity.
    pub(crate) fn clear(&mut self) {
        self.link_cap.clear();
        self.flow_cap.clear();
        self.flow_start.clear();
        self.flow_use.clear();
    }

    /// Adds link `self.links()` with capacity `cap` (bytes/s).
    pub(crate) fn add_link(&mut self, cap: f64) {
        self.link_cap.push(cap);
    }

    /// Adds `(link, weight)` to the flow being built; links must come in increasing order,
    /// each at most once.
    pub(crate) fn push_use(&mut self, link: u32, weight: f64) {
        if self.flow_start.is_empty() {
            self.flow_start.push(0);
        }
        self.flow_use.push((link, weight));
    }

    /// Ends the flow being built (possibly with no link), with its cap (`+inf` for none).
    pub(crate) fn end_flow(&mut self, cap: f64) {
        if self.flow_start.is_empty() {
            self.flow_start.push(0);
        }
        self.flow_start.push(self.flow_use.len() as u32);
        self.flow_cap.push(cap);
    }

    /// The rate of flow `i` after [`Filler::solve`].
    pub(crate) fn rate(&self, i: usize) -> f64 {
        self.rate[i]
    }

    /// The load `sum w * r` of link `l` after [`Filler::solve`].
    pub(crate) fn load(&self, l: usize) -> f64 {
        self.load[l]
    }

    /// Runs the progressive filling.
    pub(crate) fn solve(&mut self) {
        self.solve_from(0.0);
    }

    /// Runs the progressive filling with the level starting at `floor` instead of 0: for a
    /// problem whose flows are known to freeze at `floor` or above (the flows above a
    /// threshold, the others folded into the capacities), so that rounding in `C - F` cannot
    /// freeze one below it.
    pub(crate) fn solve_from(&mut self, floor: f64) {
        let m = self.link_cap.len();
        let n = self.flow_cap.len();
        if self.flow_start.is_empty() {
            self.flow_start.push(0);
        }
        self.build_link_index(m);
        self.load.clear();
        self.load.resize(m, 0.0);
        self.wsum.clear();
        self.wsum.resize(m, 0.0);
        self.unfrozen.clear();
        self.unfrozen.resize(m, 0);
        self.frozen.clear();
        self.frozen.resize(n, false);
        self.rate.clear();
        self.rate.resize(n, 0.0);
        self.heap.clear();

        for l in 0..m {
            let (a, b) = (self.link_start[l] as usize, self.link_start[l + 1] as usize);
            // Summed in flow order: canonical.
            let mut w = 0.0;
            for &(_, wf) in &self.link_use[a..b] {
                w += wf;
            }
            self.wsum[l] = w;
            self.unfrozen[l] = (b - a) as u32;
            if b > a {
                self.heap.push(Reverse(Entry::new(
                    self.link_cap[l] / w,
                    KIND_LINK,
                    l as u32,
                )));
            }
        }
        for (f, &cap) in self.flow_cap.iter().enumerate() {
            if cap < f64::INFINITY {
                self.heap.push(Reverse(Entry::new(cap, KIND_CAP, f as u32)));
            }
        }

        // The level of the last saturation: every flow frozen so far has a rate <= x.
        let mut x = floor;
        while let Some(Reverse(e)) = self.heap.pop() {
            if e.kind() == KIND_LINK {
                let l = e.idx() as usize;
                if self.unfrozen[l] == 0 {
                    continue;
                }
                let mut level = (self.link_cap[l] - self.load[l]) / self.wsum[l];
                // Rounding in `C - F` or in a weight sum worn down to ~0 must not make a link
                // look tight below the current level (this also turns a NaN into x).
                if level.is_nan() || level < x {
                    level = x;
                }
                if level > e.level() {
                    // Its level rose since the key was set: back in, with the level as it is.
                    self.heap
                        .push(Reverse(Entry::new(level, KIND_LINK, e.idx())));
                    continue;
                }
                x = level;
                let (a, b) = (self.link_start[l] as usize, self.link_start[l + 1] as usize);
                for k in a..b {
                    let f = self.link_use[k].0 as usize;
                    if !self.frozen[f] {
                        self.freeze(f, x);
                    }
                }
            } else {
                let f = e.idx() as usize;
                if self.frozen[f] {
                    continue;
                }
                // Caps are exact keys; `max` keeps rates monotone if a cap sits below a
                // level already passed (rounding only).
                x = x.max(e.level());
                self.freeze(f, x);
            }
        }
        // Left unfrozen: flows with neither a link nor a cap.
        for f in 0..n {
            if !self.frozen[f] {
                self.rate[f] = f64::INFINITY;
            }
        }
    }

    /// Builds the link -> flows index from the flow -> links one (counting sort by link, which
    /// keeps each link's flows in flow order).
    fn build_link_index(&mut self, m: usize) {
        self.link_start.clear();
        self.link_start.resize(m + 1, 0);
        for &(l, _) in &self.flow_use {
            self.link_start[l as usize + 1] += 1;
        }
        for l in 0..m {
            self.link_start[l + 1] += self.link_start[l];
        }
        self.link_use.clear();
        self.link_use.resize(self.flow_use.len(), (0, 0.0));
        self.cursor.clear();
        self.cursor.extend_from_slice(&self.link_start[..m]);
        for f in 0..self.flow_cap.len() {
            let (a, b) = (self.flow_start[f] as usize, self.flow_start[f + 1] as usize);
            for k in a..b {
                let (l, w) = self.flow_use[k];
                let at = &mut self.cursor[l as usize];
                self.link_use[*at as usize] = (f as u32, w);
                *at += 1;
            }
        }
    }

    /// Freezes flow `f` at rate `x` and updates the links it uses.
    fn freeze(&mut self, f: usize, x: f64) {
        self.frozen[f] = true;
        self.rate[f] = x;
        let (a, b) = (self.flow_start[f] as usize, self.flow_start[f + 1] as usize);
        for k in a..b {
            let (l, w) = self.flow_use[k];
            let l = l as usize;
            self.load[l] += w * x;
            self.wsum[l] -= w;
            self.unfrozen[l] -= 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(usage: &[(u32, f64)], cap: Option<f64>) -> FlowSpec {
        FlowSpec {
            usage: usage.iter().map(|&(l, w)| (LinkId(l), w)).collect(),
            cap,
        }
    }

    #[test]
    fn positive_finite_is_the_float_test() {
        let cases = [
            0.0,
            -0.0,
            f64::MIN_POSITIVE,
            f64::from_bits(1),
            1.0,
            -1.0,
            f64::MAX,
            f64::MIN,
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::NAN,
            -f64::NAN,
        ];
        for w in cases {
            assert_eq!(positive_finite(w), w > 0.0 && w.is_finite(), "{w:e}");
        }
    }

    #[test]
    fn one_link_shared_equally() {
        let r = max_min_rates(&[10.0], &[spec(&[(0, 1.0)], None), spec(&[(0, 1.0)], None)]);
        assert_eq!(r, Ok(vec![5.0, 5.0]));
    }

    #[test]
    fn weights_count_against_capacity() {
        // Level x with 1*x + 3*x = 12 => x = 3 for both flows.
        let r = max_min_rates(&[12.0], &[spec(&[(0, 1.0)], None), spec(&[(0, 3.0)], None)]);
        assert_eq!(r, Ok(vec![3.0, 3.0]));
    }

    #[test]
    fn duplicate_links_merge() {
        let r = max_min_rates(&[12.0], &[spec(&[(0, 1.0), (0, 2.0)], None)]);
        assert_eq!(r, Ok(vec![4.0]));
    }

    #[test]
    fn flows_without_links() {
        let r = max_min_rates(&[1.0], &[spec(&[], Some(7.0)), spec(&[], None)]);
        assert_eq!(r, Ok(vec![7.0, f64::INFINITY]));
    }

    #[test]
    fn bad_input_is_an_error() {
        assert!(matches!(
            max_min_rates(&[0.0], &[]),
            Err(FlowError::InvalidCapacity { link: 0, .. })
        ));
        assert!(matches!(
            max_min_rates(&[1.0], &[spec(&[(1, 1.0)], None)]),
            Err(FlowError::UnknownLink { link: 1, links: 1 })
        ));
        assert!(matches!(
            max_min_rates(&[1.0], &[spec(&[(0, f64::NAN)], None)]),
            Err(FlowError::InvalidWeight { link: 0, .. })
        ));
        assert!(matches!(
            max_min_rates(&[1.0], &[spec(&[(0, 1.0)], Some(0.0))]),
            Err(FlowError::InvalidCap { .. })
        ));
    }
}
