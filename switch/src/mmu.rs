//! The memory management unit: admission to the shared buffer, accounted per ingress (port,
//! priority), in the style of production switches and of the HPCC ns-3 model.
//!
//! **Pool.** The buffer (`total` bytes) is cut once, at start, into a *reserved* part (`reserved`
//! for each of the ports x 8 ingress (port, priority) counters), a *headroom* part (`headroom`
//! for each (port, lossless priority), only with PFC on) and the *shared* rest.
//!
//! **Admission** of a frame of `L` bytes arriving on ingress (i, p) for egress port e:
//! 1. into the reserved part if (i, p)'s reserved use + L fits `reserved`;
//! 2. else into the shared part if L fits the free shared bytes and (i, p)'s shared use + L is
//!    at most the *dynamic threshold* T = alpha x (free shared bytes) — the threshold shrinks as
//!    the buffer fills, so a few congested ports cannot take it all (Choudhury and Hahne);
//!    lossy frames also respect `per_queue` on e (egress cap, as before this MMU existed);
//! 3. else, on a lossless priority, into (i, p)'s headroom if it fits;
//! 4. else dropped: a *lossless drop* on a lossless priority (headroom exhausted: a
//!    misconfiguration or a neighbour that ignores pauses), a lossy drop otherwise.
//!
//! Lossless priorities use `alpha`, lossy ones `lossy_alpha`. Bytes leave (i, p) in the order
//! headroom, shared, reserved whatever frame departs (as in HPCC's model), so headroom empties
//! first and XON comes as early as it safely can.
//!
//! **XOFF / XON** (lossless priorities), evaluated on each arrival to (i, p) and each departure
//! from it:
//! - XOFF when (i, p) holds headroom bytes (a frame did not fit under T) or its shared use
//!   reached T;
//! - XON when it holds no headroom and its shared use is 0 or at most T - `xon_offset`.
//!
//! (The switch also sends XOFF when it has to refuse a lossless frame while (i, p) holds bytes:
//! with no headroom configured the threshold alone must stop the neighbour.)

use crate::buffer::{BufferConfig, Refusal};
use crate::priority::PRIORITIES;

/// Where an admitted frame was put.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Region {
    /// The (port, priority)'s reserved bytes.
    Reserved,
    /// The shared pool, under the dynamic threshold.
    Shared,
    /// The (port, priority)'s headroom (lossless only; the ingress is over XOFF).
    Headroom,
}

/// One ingress (port, priority)'s bytes by region.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IngressUse {
    /// Bytes in the reserved part.
    pub reserved: u64,
    /// Bytes in the shared pool.
    pub shared: u64,
    /// Bytes in headroom.
    pub headroom: u64,
    /// Most bytes held at once (kept here, in the line the admission just touched, so the
    /// per-port statistics are written only when the peak grows).
    pub peak: u64,
}

impl IngressUse {
    /// All bytes held.
    pub fn total(&self) -> u64 {
        self.reserved + self.shared + self.headroom
    }
}

/// Buffer occupancy and admission (see the module doc).
///
/// `repr(C)`, what an admission and a release read first (the counters' vectors, the caps, the
/// pool and the occupancy, the threshold exponents): 113 bytes that a switch places with the
/// rest of what every frame reads; the settings of the float and lossless paths after them.
#[derive(Clone, Debug, PartialEq)]
#[repr(C)]
pub struct Mmu {
    /// Per port, its 8 ingress (port, priority) counters: 32 bytes each in a line-aligned
    /// block, so the one a frame touches is one cache line (unaligned, one in two straddled).
    ingress: Vec<Line<[IngressUse; PRIORITIES]>>,
    /// Per port, the bytes queued per priority, in one cache line; the port's total is their
    /// sum (read from the same line), not a counter in a second array.
    egress: Vec<Line<[u64; PRIORITIES]>>,
    per_queue: u64,
    reserved: u64,
    shared_pool: u64,
    shared_used: u64,
    used: u64,
    peak: u64,
    /// The dynamic thresholds of lossless and lossy priorities as two shifts, when they are
    /// exactly that for every free byte count the pool allows ([`Shift`]).
    shift: Shift,
    lossy_shift: Shift,
    lossless: u8,
    /// `alpha` and `lossy_alpha` as powers of two (`Some(k)`: alpha = 2^k), when they are:
    /// the dynamic threshold is then a shift ([`dynamic_threshold`]).
    alpha_exp: Option<i32>,
    lossy_alpha_exp: Option<i32>,
    headroom: Vec<u64>,
    total: u64,
    alpha: f64,
    lossy_alpha: f64,
    xon_offset: u64,
}

/// alpha x `free`, the dynamic threshold ([`Mmu::threshold`]); `exp`: alpha's exponent
/// when alpha is a power of two.
#[inline]
fn dynamic_threshold(free: u64, alpha: f64, exp: Option<i32>) -> u64 {
    match exp {
        // The float product below, exactly, by a shift (the defaults, 1/8 and 8, are
        // powers of two, and the cast's saturation and rounding are costly per frame): `free`
        // below 2^53 is exact as an f64, multiplying it by 2^k is exact, and the cast
        // truncates, as `>>` does.
        Some(k) if free < 1 << 53 => {
            if k < 0 {
                free >> k.unsigned_abs()
            } else if free.leading_zeros() >= k.unsigned_abs() {
                free << k.unsigned_abs()
            } else {
                u64::MAX
            }
        }
        // Saturating float-to-int cast; IEEE arithmetic is deterministic.
        _ => (alpha * free as f64) as u64,
    }
}

/// A dynamic threshold `alpha x free` as `free << left >> right`, exact (`exact`) when alpha
/// is 2^k and no free byte count up to the shared pool's size takes [`dynamic_threshold`]'s
/// other branches (a pool below 2^53 bytes that `<< k` does not overflow): the threshold of
/// every frame is then two shifts, without that function's tests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Shift {
    exact: bool,
    left: u8,
    right: u8,
}

impl Shift {
    /// The shifts of alpha = 2^`exp` for free byte counts up to `pool` (not exact when
    /// `exp` is `None` or a count up to `pool` would not shift exactly).
    fn new(exp: Option<i32>, pool: u64) -> Shift {
        match exp {
            Some(k) if pool < 1 << 53 && k < 0 && k > -64 => Shift {
                exact: true,
                left: 0,
                right: k.unsigned_abs() as u8,
            },
            Some(k)
                if pool < 1 << 53
                    && (0..64).contains(&k)
                    && pool.leading_zeros() >= k.unsigned_abs() =>
            {
                Shift {
                    exact: true,
                    left: k.unsigned_abs() as u8,
                    right: 0,
                }
            }
            _ => Shift::default(),
        }
    }
}

/// [`dynamic_threshold`] by the shifts `s` when they are exact for `free`'s pool.
#[inline]
fn shifted_threshold(free: u64, s: Shift, alpha: f64, exp: Option<i32>) -> u64 {
    if s.exact {
        free << s.left >> s.right
    } else {
        dynamic_threshold(free, alpha, exp)
    }
}

/// Frees `len` bytes of ingress use `u` (headroom first, then shared, then reserved) from a
/// pool with `shared_used` shared bytes in use; returns the shared bytes then in use. What
/// [`Mmu::release`] and [`Mmu::pass`] both do.
#[inline(always)]
fn free_ingress(u: &mut IngressUse, shared_used: u64, len: u64) -> u64 {
    if u.headroom == 0 && u.shared >= len {
        // The usual case (no headroom held, the shared bytes cover the frame): what the
        // general steps below do then, without their minimums.
        u.shared -= len;
        return shared_used.saturating_sub(len);
    }
    let from_h = u.headroom.min(len);
    u.headroom -= from_h;
    let from_s = u.shared.min(len - from_h);
    u.shared -= from_s;
    u.reserved = u.reserved.saturating_sub(len - from_h - from_s);
    shared_used.saturating_sub(from_s)
}

/// Free bytes of a shared pool of `pool` bytes with `used` in use.
#[inline]
fn free_after(pool: u64, used: u64) -> u64 {
    pool.saturating_sub(used)
}

/// `Some(k)` when `a` is exactly 2^k, for k in -63..=63.
fn pow2_exponent(a: f64) -> Option<i32> {
    let bits = a.to_bits();
    let biased = ((bits >> 52) & 0x7FF) as i32;
    // Positive, normal, no fraction bits.
    let k = biased - 1023;
    (a > 0.0 && bits & ((1 << 52) - 1) == 0 && biased != 0 && biased != 0x7FF && k.abs() < 64)
        .then_some(k)
}

/// A value aligned to a cache line (per-port MMU counters: one line each).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
#[repr(align(64))]
struct Line<T>(T);

impl Mmu {
    /// An MMU for `ports` ports, with no headroom set yet ([`Mmu::set_headroom`]).
    pub fn new(cfg: &BufferConfig, ports: usize) -> Mmu {
        let total = cfg.total.bytes();
        let (alpha, lossy_alpha) = (cfg.alpha.max(0.0), cfg.lossy_alpha.max(0.0));
        let mut m = Mmu {
            total,
            per_queue: cfg.per_queue.map_or(total, |q| q.bytes().min(total)),
            reserved: cfg.reserved.bytes(),
            alpha,
            lossy_alpha,
            alpha_exp: pow2_exponent(alpha),
            lossy_alpha_exp: pow2_exponent(lossy_alpha),
            xon_offset: cfg.pfc.xon_offset_bytes(),
            lossless: cfg.pfc.lossless_mask(),
            shift: Shift::default(),
            lossy_shift: Shift::default(),
            shared_pool: 0,
            shared_used: 0,
            used: 0,
            peak: 0,
            headroom: vec![0; ports],
            ingress: vec![Line([IngressUse::default(); PRIORITIES]); ports],
            egress: vec![Line([0; PRIORITIES]); ports],
        };
        m.recompute_pool();
        m
    }

    /// Sets the headroom of each (`port`, lossless priority) (call before traffic).
    pub fn set_headroom(&mut self, port: usize, bytes: u64) {
        if let Some(h) = self.headroom.get_mut(port) {
            *h = bytes;
        }
        self.recompute_pool();
    }

    fn recompute_pool(&mut self) {
        let ports = self.ingress.len() as u64;
        let reserved = self.reserved.saturating_mul(ports * PRIORITIES as u64);
        let per_port = u64::from(self.lossless.count_ones());
        let headroom = self
            .headroom
            .iter()
            .fold(0u64, |a, h| a.saturating_add(h.saturating_mul(per_port)));
        self.shared_pool = self.total.saturating_sub(reserved).saturating_sub(headroom);
        self.shift = Shift::new(self.alpha_exp, self.shared_pool);
        self.lossy_shift = Shift::new(self.lossy_alpha_exp, self.shared_pool);
    }

    /// The headroom of each lossless priority of `port`.
    pub fn headroom(&self, port: usize) -> u64 {
        self.headroom.get(port).copied().unwrap_or(0)
    }

    /// Bytes of the shared pool (after reserved and headroom are set aside).
    pub fn shared_pool(&self) -> u64 {
        self.shared_pool
    }

    /// True when priority `p` is lossless.
    #[inline]
    pub fn is_lossless(&self, p: u8) -> bool {
        self.lossless & (1 << (p & 7)) != 0
    }

    /// The dynamic threshold for a lossless (`true`) or lossy priority now.
    #[inline]
    pub fn threshold(&self, lossless: bool) -> u64 {
        self.threshold_of(free_after(self.shared_pool, self.shared_used), lossless)
    }

    /// [`Mmu::threshold`] with `free` bytes of the shared pool free (at most the pool's
    /// size: what [`Shift`] assumes).
    #[inline]
    fn threshold_of(&self, free: u64, lossless: bool) -> u64 {
        let s = if lossless {
            self.shift
        } else {
            self.lossy_shift
        };
        if lossless {
            shifted_threshold(free, s, self.alpha, self.alpha_exp)
        } else {
            shifted_threshold(free, s, self.lossy_alpha, self.lossy_alpha_exp)
        }
    }

    /// Admits `len` bytes arriving on (`ingress`, `p`) for egress port `egress`, or says why not.
    #[inline]
    pub fn admit(
        &mut self,
        ingress: usize,
        p: u8,
        egress: usize,
        len: u64,
    ) -> Result<Region, Refusal> {
        self.admit_queued(ingress, p, egress, len).map(|(r, _)| r)
    }

    /// [`Mmu::admit`], also returning the bytes queued for `egress` with the frame (what the
    /// switch's deepest-queue counter wants: read here, from the line admission reads anyway).
    /// Always inlined: the switch admits in two places, and out of line its result goes
    /// through memory. An `egress` beyond the
    /// ports is refused as [`Refusal::QueueFull`].
    #[inline(always)]
    pub fn admit_queued(
        &mut self,
        ingress: usize,
        p: u8,
        egress: usize,
        len: u64,
    ) -> Result<(Region, u64), Refusal> {
        self.admit_inner::<false>(ingress, p, egress, len)
    }

    /// [`Mmu::admit_queued`], then [`Mmu::note_peak`], in one pass (the ingress's counters
    /// are in registers after the admission): what the switch does for every queued frame.
    #[inline(always)]
    pub fn admit_noting_peak(
        &mut self,
        ingress: usize,
        p: u8,
        egress: usize,
        len: u64,
    ) -> Result<(Region, u64), Refusal> {
        self.admit_inner::<true>(ingress, p, egress, len)
    }

    /// [`Mmu::admit_queued`] and, with `PEAK`, [`Mmu::note_peak`] after it.
    #[inline(always)]
    fn admit_inner<const PEAK: bool>(
        &mut self,
        ingress: usize,
        p: u8,
        egress: usize,
        len: u64,
    ) -> Result<(Region, u64), Refusal> {
        let pi = usize::from(p & 7);
        let lossless = self.is_lossless(p);
        let free = self.shared_pool.saturating_sub(self.shared_used);
        let threshold = self.threshold(lossless);
        // The egress line, indexed once for its sum and its count.
        let Some(e) = self.egress.get_mut(egress) else {
            return Err(Refusal::QueueFull);
        };
        let queued = e.0.iter().sum::<u64>() + len;
        if !lossless && queued > self.per_queue {
            return Err(Refusal::QueueFull);
        }
        let u = &mut self.ingress[ingress].0[pi];
        let region = if u.reserved + len <= self.reserved {
            u.reserved += len;
            Region::Reserved
        } else if len <= free && u.shared + len <= threshold {
            u.shared += len;
            self.shared_used += len;
            Region::Shared
        } else if lossless && u.headroom + len <= self.headroom[ingress] {
            u.headroom += len;
            Region::Headroom
        } else if lossless {
            return Err(Refusal::HeadroomFull);
        } else if len > free {
            return Err(Refusal::PoolFull);
        } else {
            return Err(Refusal::ThresholdExceeded);
        };
        if PEAK {
            let held = u.reserved + u.shared + u.headroom;
            if held > u.peak {
                u.peak = held;
            }
        }
        e.0[pi] += len;
        self.used += len;
        self.peak = self.peak.max(self.used);
        Ok((region, queued))
    }

    /// A frame that leaves as soon as it is admitted (it arrives at an idle egress with nothing
    /// queued): exactly [`Mmu::admit_queued`], then [`Mmu::note_peak`], then [`Mmu::release`]
    /// of the same bytes, in one pass. Returns the egress bytes with the frame (as
    /// `admit_queued`) and the ingress's new peak (as `note_peak`), or why it was refused
    /// (nothing changed then).
    ///
    /// The frame's egress must hold no bytes (every byte it holds is a frame queued there):
    /// its counters are not read, so the frame costs the egress line nothing (a miss per frame
    /// on a large fabric, to learn a sum that is 0). The bytes with the frame are `len`.
    ///
    /// The egress and total counts would go up by `len` and straight back down: only the peak
    /// keeps a trace. The ingress counter is charged to its region and released from headroom,
    /// shared and reserved in that order, as the three calls do (a frame charged to reserved
    /// bytes may free shared ones); this changes it only when the ingress holds other bytes.
    #[inline]
    pub fn pass(&mut self, ingress: usize, p: u8, len: u64) -> Result<(u64, Option<u64>), Refusal> {
        // Without the XOFF check there is no `None`.
        self.pass_checked::<false>(ingress, p, len)
            .unwrap_or(Err(Refusal::ThresholdExceeded))
    }

    /// [`Mmu::pass`], but `None` (and nothing changed) when the admission would put a
    /// lossless ingress over XOFF ([`Mmu::should_xoff`] after [`Mmu::admit_queued`]): a
    /// frame that must go step by step, so that the switch pauses the neighbour first.
    #[inline]
    pub fn pass_unless_xoff(
        &mut self,
        ingress: usize,
        p: u8,
        len: u64,
    ) -> Option<Result<(u64, Option<u64>), Refusal>> {
        self.pass_checked::<true>(ingress, p, len)
    }

    /// [`Mmu::pass`] and [`Mmu::pass_unless_xoff`] (`XOFF`: check it).
    #[inline(always)]
    fn pass_checked<const XOFF: bool>(
        &mut self,
        ingress: usize,
        p: u8,
        len: u64,
    ) -> Option<Result<(u64, Option<u64>), Refusal>> {
        let pi = usize::from(p & 7);
        let lossless = self.is_lossless(p);
        let queued = len;
        if !lossless && queued > self.per_queue {
            return Some(Err(Refusal::QueueFull));
        }
        let free = self.shared_pool.saturating_sub(self.shared_used);
        let threshold = self.threshold(lossless);
        let reserved = self.reserved;
        let pool = self.shared_pool;
        let (shift, alpha, alpha_exp) = (self.shift, self.alpha, self.alpha_exp);
        // Read only on a lossless frame past its threshold, as `admit_queued` does (read up
        // front, the headroom vector cost fat_tree1024 0.3 more misses per hop).
        let headroom = &self.headroom;
        let u = &mut self.ingress[ingress].0[pi];
        // Admission (`admit_queued`), on a copy until it is known to succeed.
        let mut v = *u;
        let mut shared_used = self.shared_used;
        if v.reserved + len <= reserved {
            v.reserved += len;
        } else if len <= free && v.shared + len <= threshold {
            v.shared += len;
            shared_used += len;
        } else if lossless && v.headroom + len <= headroom[ingress] {
            v.headroom += len;
        } else if lossless {
            return Some(Err(Refusal::HeadroomFull));
        } else if len > free {
            return Some(Err(Refusal::PoolFull));
        } else {
            return Some(Err(Refusal::ThresholdExceeded));
        }
        // `should_xoff` on the admitted copy, with the threshold the admission leaves.
        if XOFF
            && lossless
            && (v.headroom > 0
                || (v.shared > 0
                    && v.shared
                        >= shifted_threshold(
                            free_after(pool, shared_used),
                            shift,
                            alpha,
                            alpha_exp,
                        )))
        {
            return None;
        }
        self.peak = self.peak.max(self.used + len);
        // `note_peak`.
        let held = v.reserved + v.shared + v.headroom;
        let new_peak = (held > v.peak).then(|| {
            v.peak = held;
            held
        });
        // `release`.
        self.shared_used = free_ingress(&mut v, shared_used, len);
        *u = v;
        Some(Ok((queued, new_peak)))
    }

    /// Records the current use of (`ingress`, `p`) as its peak if it is one; returns the new
    /// peak then.
    #[inline]
    pub fn note_peak(&mut self, ingress: usize, p: u8) -> Option<u64> {
        let u = self
            .ingress
            .get_mut(ingress)?
            .0
            .get_mut(usize::from(p & 7))?;
        let held = u.reserved + u.shared + u.headroom;
        (held > u.peak).then(|| {
            u.peak = held;
            held
        })
    }

    /// Frees `len` bytes of a frame that came in on (`ingress`, `p`) and left egress `egress`.
    #[inline]
    pub fn release(&mut self, ingress: usize, p: u8, egress: usize, len: u64) {
        let pi = usize::from(p & 7);
        let u = &mut self.ingress[ingress].0[pi];
        self.shared_used = free_ingress(u, self.shared_used, len);
        let e = &mut self.egress[egress].0[pi];
        *e = e.saturating_sub(len);
        self.used = self.used.saturating_sub(len);
    }

    /// Whether (`ingress`, `p`) should be paused (module doc).
    #[inline]
    pub fn should_xoff(&self, ingress: usize, p: u8) -> bool {
        let u = &self.ingress[ingress].0[usize::from(p & 7)];
        u.headroom > 0 || (u.shared > 0 && u.shared >= self.threshold(true))
    }

    /// Whether a paused (`ingress`, `p`) may resume (module doc).
    #[inline]
    pub fn should_xon(&self, ingress: usize, p: u8) -> bool {
        let u = &self.ingress[ingress].0[usize::from(p & 7)];
        u.headroom == 0 && (u.shared == 0 || u.shared + self.xon_offset <= self.threshold(true))
    }

    /// What (`ingress`, `p`) holds.
    pub fn ingress_use(&self, ingress: usize, p: u8) -> IngressUse {
        self.ingress[ingress].0[usize::from(p & 7)]
    }

    /// Bytes queued for egress (`port`, `p`).
    #[inline]
    pub fn egress_bytes(&self, port: usize, p: u8) -> u64 {
        self.egress[port].0[usize::from(p & 7)]
    }

    /// Bytes queued for egress `port`, all priorities.
    #[inline]
    pub fn queue_bytes(&self, port: usize) -> u64 {
        self.egress.get(port).map_or(0, |e| e.0.iter().sum())
    }

    /// Bytes held in all.
    pub fn used(&self) -> u64 {
        self.used
    }

    /// Highest occupancy seen.
    pub fn peak(&self) -> u64 {
        self.peak
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pfc::PfcConfig;
    use fabemu_fabric::units::ByteSize;

    fn cfg(total: u64, pfc: bool) -> BufferConfig {
        BufferConfig {
            total: ByteSize(total),
            reserved: ByteSize(1_000),
            alpha: 1.0,
            lossy_alpha: 1.0,
            pfc: PfcConfig {
                enabled: pfc,
                xon_offset: Some(ByteSize(500)),
                ..PfcConfig::default()
            },
            ..BufferConfig::default()
        }
    }

    #[test]
    fn regions_fill_in_order_and_drain_headroom_first() {
        // 2 ports: reserved 2 x 8 x 1000 = 16,000; headroom 2 x 1 x 3000 = 6000; shared 78,000.
        let mut m = Mmu::new(&cfg(100_000, true), 2);
        m.set_headroom(0, 3_000);
        m.set_headroom(1, 3_000);
        assert_eq!(m.shared_pool(), 78_000);
        assert_eq!(m.admit(0, 3, 1, 1_000), Ok(Region::Reserved));
        // T = 1 x free: shared use s admitted while s + len <= 78,000 - s_total.
        assert_eq!(m.admit(0, 3, 1, 30_000), Ok(Region::Shared));
        assert!(!m.should_xoff(0, 3), "30,000 < T = 48,000");
        assert_eq!(m.admit(0, 3, 1, 20_000), Err(Refusal::HeadroomFull));
        assert_eq!(m.admit(0, 3, 1, 9_000), Ok(Region::Shared));
        // 39,000 shared; T = 39,000: at the threshold.
        assert!(m.should_xoff(0, 3));
        assert_eq!(m.admit(0, 3, 1, 1_000), Ok(Region::Headroom));
        assert_eq!(m.admit(0, 3, 1, 2_000), Ok(Region::Headroom));
        assert_eq!(m.admit(0, 3, 1, 1), Err(Refusal::HeadroomFull));
        assert_eq!(m.egress_bytes(1, 3), 43_000);
        // Departures drain headroom first.
        m.release(0, 3, 1, 2_500);
        assert_eq!(
            m.ingress_use(0, 3),
            IngressUse {
                reserved: 1_000,
                shared: 39_000,
                headroom: 500,
                peak: 0,
            }
        );
        assert!(!m.should_xon(0, 3));
        m.release(0, 3, 1, 500);
        // No headroom; shared 39,000 = T: not xon_offset (500) below it.
        assert!(!m.should_xon(0, 3));
        m.release(0, 3, 1, 1_000);
        // 38,000 + 500 <= T = 40,000.
        assert!(m.should_xon(0, 3));
        m.release(0, 3, 1, 39_000);
        assert_eq!(m.ingress_use(0, 3), IngressUse::default());
        assert_eq!((m.used(), m.peak()), (0, 43_000));
    }

    /// The float product the threshold is defined by.
    fn float_threshold(alpha: f64, free: u64) -> u64 {
        (alpha * free as f64) as u64
    }

    #[test]
    fn power_of_two_alphas_are_recognised() {
        assert_eq!(pow2_exponent(0.125), Some(-3));
        assert_eq!(pow2_exponent(8.0), Some(3));
        assert_eq!(pow2_exponent(1.0), Some(0));
        for a in [
            0.0,
            -1.0,
            0.3,
            3.0,
            f64::INFINITY,
            f64::NAN,
            f64::MIN_POSITIVE / 2.0,
        ] {
            assert_eq!(pow2_exponent(a), None, "{a}");
        }
        assert_eq!(pow2_exponent(2f64.powi(64)), None);
        assert_eq!(pow2_exponent(2f64.powi(-64)), None);
    }

    proptest::proptest! {
        /// The shift gives the float product's value for every power-of-two alpha and free
        /// byte count, saturation included, with the pool's size or less free.
        #[test]
        fn shifted_threshold_is_the_float_product(
            k in -63i32..=63,
            free in proptest::prop_oneof![0u64..1 << 20, 0u64..1 << 53, 0u64..=u64::MAX],
            used in 0u64..=u64::MAX,
        ) {
            let alpha = 2f64.powi(k);
            let mut c = cfg(u64::MAX, false);
            c.reserved = ByteSize(0);
            c.alpha = alpha;
            c.lossy_alpha = alpha;
            let mut m = Mmu::new(&c, 1);
            proptest::prop_assert_eq!(m.alpha_exp, Some(k));
            m.shared_pool = free;
            m.shift = Shift::new(m.alpha_exp, free);
            m.lossy_shift = Shift::new(m.lossy_alpha_exp, free);
            proptest::prop_assert_eq!(m.threshold(true), float_threshold(alpha, free));
            proptest::prop_assert_eq!(m.threshold(false), float_threshold(alpha, free));
            // Any free count below the pool's size, by the shifts set for the pool.
            m.shared_used = used % (free / 2 + 1) * 2;
            let left = free - m.shared_used;
            proptest::prop_assert_eq!(m.threshold(true), float_threshold(alpha, left));
            proptest::prop_assert_eq!(m.threshold(false), float_threshold(alpha, left));
        }
    }

    /// Random admissions (with their peaks) and releases on a 3-port MMU (lossless priorities
    /// 3 and 5 when `pfc`, a per-queue cap, headroom, refusals included), then egress `e`
    /// emptied of its frames: the precondition of [`Mmu::pass`].
    fn emptied_egress_state(ops: Vec<(usize, u8, usize, u64, bool)>, e: usize, pfc: bool) -> Mmu {
        let mut c = cfg(60_000, pfc);
        c.per_queue = Some(ByteSize(25_000));
        c.pfc.priorities = crate::priority::PrioritySet(0b0010_1000);
        let mut m = Mmu::new(&c, 3);
        for port in 0..3 {
            m.set_headroom(port, 4_000);
        }
        let mut held: Vec<(usize, u8, usize, u64)> = Vec::new();
        for (oi, op, oe, olen, release) in ops {
            if release && !held.is_empty() {
                let (ri, rp, re, rlen) = held.remove(olen as usize % held.len());
                m.release(ri, rp, re, rlen);
            } else if m.admit(oi, op, oe, olen).is_ok() {
                m.note_peak(oi, op);
                held.push((oi, op, oe, olen));
            }
        }
        for &(ri, rp, re, rlen) in held.iter().filter(|h| h.2 == e) {
            m.release(ri, rp, re, rlen);
        }
        m
    }

    proptest::proptest! {
        /// `pass` leaves the MMU as admission, `note_peak` and release of the same frame do,
        /// and returns what they return, from states built by random admissions and releases
        /// (both priorities kinds, all regions, refusals included) then emptied of the frames
        /// of the frame's egress (`pass`'s precondition).
        #[test]
        fn pass_is_admit_note_peak_release(
            ops in proptest::collection::vec((0usize..3, 0u8..8, 0usize..3, 1u64..9_000, proptest::prelude::any::<bool>()), 0..40),
            (i, p, e, len) in (0usize..3, 0u8..8, 0usize..3, 1u64..20_000),
            pfc in proptest::prelude::any::<bool>(),
        ) {
            let mut m = emptied_egress_state(ops, e, pfc);
            proptest::prop_assert_eq!(m.queue_bytes(e), 0);
            let mut a = m.clone();
            let want = a.admit_queued(i, p, e, len).map(|(_, queued)| {
                let peak = a.note_peak(i, p);
                a.release(i, p, e, len);
                (queued, peak)
            });
            let got = m.pass(i, p, len);
            proptest::prop_assert_eq!(got, want);
            proptest::prop_assert_eq!(m, a);
        }
    }

    proptest::proptest! {
        /// `pass_unless_xoff` is `pass` when admission, then `should_xoff`, would not pause the
        /// ingress, and changes nothing when it would (states as in the test above).
        #[test]
        fn pass_unless_xoff_is_pass_or_nothing(
            ops in proptest::collection::vec((0usize..3, 0u8..8, 0usize..3, 1u64..9_000, proptest::prelude::any::<bool>()), 0..40),
            (i, p, e, len) in (0usize..3, 0u8..8, 0usize..3, 1u64..20_000),
            pfc in proptest::prelude::any::<bool>(),
        ) {
            let mut m = emptied_egress_state(ops, e, pfc);
            let mut probe = m.clone();
            let xoff = probe.admit(i, p, e, len).is_ok() && probe.is_lossless(p) && probe.should_xoff(i, p);
            let mut a = m.clone();
            let got = m.pass_unless_xoff(i, p, len);
            if xoff {
                proptest::prop_assert_eq!(got, None);
                proptest::prop_assert_eq!(m, a);
            } else {
                proptest::prop_assert_eq!(got, Some(a.pass(i, p, len)));
                proptest::prop_assert_eq!(m, a);
            }
        }
    }

    proptest::proptest! {
        /// `release` frees bytes as its general steps do (headroom, then shared, then
        /// reserved), whichever path it takes, from states as in the tests above.
        #[test]
        fn release_is_its_general_steps(
            ops in proptest::collection::vec((0usize..3, 0u8..8, 0usize..3, 1u64..9_000, proptest::prelude::any::<bool>()), 0..40),
            (i, p, e, len) in (0usize..3, 0u8..8, 0usize..3, 1u64..20_000),
            pfc in proptest::prelude::any::<bool>(),
        ) {
            let mut m = emptied_egress_state(ops, 3, pfc);
            let mut want = m.clone();
            let pi = usize::from(p);
            let u = &mut want.ingress[i].0[pi];
            let from_h = u.headroom.min(len);
            u.headroom -= from_h;
            let from_s = u.shared.min(len - from_h);
            u.shared -= from_s;
            want.shared_used = want.shared_used.saturating_sub(from_s);
            u.reserved = u.reserved.saturating_sub(len - from_h - from_s);
            want.egress[e].0[pi] = want.egress[e].0[pi].saturating_sub(len);
            want.used = want.used.saturating_sub(len);
            m.release(i, p, e, len);
            proptest::prop_assert_eq!(m, want);
        }
    }

    proptest::proptest! {
        /// `admit_noting_peak` is `admit_queued` then `note_peak` (states as above).
        #[test]
        fn admit_noting_peak_is_admit_then_note_peak(
            ops in proptest::collection::vec((0usize..3, 0u8..8, 0usize..3, 1u64..9_000, proptest::prelude::any::<bool>()), 0..40),
            (i, p, e, len) in (0usize..3, 0u8..8, 0usize..3, 1u64..20_000),
            pfc in proptest::prelude::any::<bool>(),
        ) {
            let mut m = emptied_egress_state(ops, 3, pfc);
            let mut want = m.clone();
            let w = want.admit_queued(i, p, e, len);
            if w.is_ok() {
                want.note_peak(i, p);
            }
            proptest::prop_assert_eq!(m.admit_noting_peak(i, p, e, len), w);
            proptest::prop_assert_eq!(m, want);
        }
    }

    #[test]
    fn lossy_drops_by_threshold_and_caps() {
        let mut c = cfg(20_000, false);
        c.per_queue = Some(ByteSize(15_000));
        // 1 port: reserved 8 x 1000; shared 12,000; no headroom with PFC off.
        let mut m = Mmu::new(&c, 1);
        m.set_headroom(0, 5_000);
        assert_eq!(m.shared_pool(), 12_000);
        assert_eq!(m.admit(0, 3, 0, 1_000), Ok(Region::Reserved));
        assert_eq!(m.admit(0, 3, 0, 6_000), Ok(Region::Shared));
        // T = 6,000: 6,000 + 1 > T.
        assert_eq!(m.admit(0, 3, 0, 1), Err(Refusal::ThresholdExceeded));
        assert_eq!(m.admit(0, 2, 0, 6_000), Ok(Region::Shared));
        assert_eq!(m.admit(0, 1, 0, 1_000), Ok(Region::Reserved));
        assert_eq!(m.admit(0, 1, 0, 1_001), Err(Refusal::QueueFull));
        assert_eq!(m.admit(0, 1, 0, 1_000), Err(Refusal::PoolFull));
    }
}
