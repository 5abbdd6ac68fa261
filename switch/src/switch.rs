//! The switch actor: forwarding, MMU admission, PFC, ECN marking and per-port egress.
//!
//! A frame's path: parse → route (ECMP) → TTL → priority from its DSCP ([`DscpMap`]) → MMU
//! admission charged to its ingress (port, priority) ([`Mmu`]; may trigger XOFF toward the
//! ingress neighbour) → the egress port's scheduler → transmit when the port is idle, its
//! priority is not paused and no PFC frame is owed on it → at departure: release the MMU bytes
//! (may trigger XON), RED/ECN mark by the egress (port, priority) queue ([`Red`]).
//!
//! PFC frames received are consumed here ([`crate::pfc`]); those the switch sends go ahead of
//! queued data. A watchdog reports egress queues stuck behind pauses ([`crate::watchdog`]).
//!
//! **Which ingress a departing frame is charged to.** The switch gives every egress scheduler
//! the frame's priority and ingress port when it queues it, and the scheduler hands both back
//! with the frame ([`crate::egress::Dequeued`]), so the MMU releases exactly what it charged
//! without parsing the frame again.

use fabemu_fabric::engine::{Actor, Context, Ctx, Event, Frame};
use fabemu_fabric::histogram::LatencyHistogram;
use fabemu_fabric::packet::{Packet, Payload};
use fabemu_fabric::route::{flow_hash, RouteTable};
use fabemu_fabric::units::Time;
use fabemu_fabric::wire::{self, Ecn, ForwardPeek, FrameKind, PfcPauseRepr, PFC_FRAME_LEN};
use serde::{Deserialize, Serialize};

use crate::buffer::BufferConfig;
use crate::egress::{Arrival, ClassReport, Dequeued, EgressScheduler, Lanes, Popped, LEN_NOT_KEPT};
use crate::mmu::Mmu;
use crate::pfc::{headroom_formula, PortPfc};
use crate::priority::{DscpMap, PRIORITIES};
use crate::red::Red;
use crate::watchdog::{PortWatch, StalledQueue};

mod counters;
mod pause;
#[cfg(test)]
mod tests;
mod timers;

use self::counters::fold_log;
pub use self::counters::{PriorityStats, SwitchPortStats, SwitchStats};
use self::timers::SwitchTimer;

/// A switch's settings (the scenario's per-switch fields).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SwitchConfig {
    /// Packet memory: sizes, thresholds, PFC and ECN (see [`crate::buffer`] for the YAML).
    #[serde(default)]
    pub buffer: BufferConfig,
}

/// Entries of a switch's log of waits ([`Switch`]'s `waits`): 512 bytes, eight lines.
const WAIT_LOG: usize = 64;

/// [`Switch`]'s `wait_len` in a switch of more than 2^16 ports, whose port numbers do not all
/// fit an entry of the log: beyond the log, so that every wait takes the slow path and is
/// counted at once, and a departure need not test its port's width.
const NO_LOG: u8 = u8::MAX;

/// [`Switch::note_queue`] with egress `out`'s flags `fl` at hand: the port's counters (in
/// `stats`) are written only when `queued` is its deepest queue yet.
#[inline]
fn note_queue_in(fl: &mut PortFlags, stats: &mut [SwitchPortStats], out: usize, queued: u64) {
    if queued > fl.max_queue() {
        // Exact when the copy saturated: the counter itself is compared then.
        fl.set_max_queue(queued);
        let ps = &mut stats[out];
        ps.max_queue_bytes = ps.max_queue_bytes.max(queued);
    }
}

/// What every frame reads of its egress port: the PFC bits ([`Switch`] keeps them apart from
/// the rest of the port's PFC state), which priorities of its FIFO hold frames and its deepest
/// queue so far. 8 bytes, eight ports per line.
#[derive(Clone, Copy, Debug, Default)]
struct PortFlags {
    /// Classes the neighbour has paused on this port.
    paused: u8,
    /// Classes owed a PFC frame (XOFF, refresh or XON) at the next idle moment.
    pending: u8,
    /// The port runs a custom scheduler (`nonempty` is then unused).
    custom: bool,
    /// Bit p set: the FIFO's priority p holds frames. Whether a frame can leave at once,
    /// whether a completion is needed, and which priority goes next are told here without
    /// reading the FIFO's lines (the FIFO's [`crate::egress::Lanes`] keep no count of their own).
    nonempty: u8,
    /// Two counters in one word ([`PortFlags::max_queue`], [`PortFlags::count_cut`]), so
    /// that the flags stay 8 bytes (a wider stride costs every frame). High 24 bits: the port's `max_queue_bytes` (saturated at
    /// 2^24 - 1): an arriving frame compares its queue with it here and writes the port's
    /// counters only when the queue is deeper. Low 8 bits: frames that left without waiting
    /// (cut through an idle, empty port) not yet in the port's queueing-delay histogram,
    /// moved there every 256 and by [`Switch::port_stats`]: such a frame would otherwise
    /// touch the counters' line for a zero alone (a cache miss for half the departures on
    /// fat_tree1024).
    queue_cut: u32,
}

/// Low bits of [`PortFlags::queue_cut`]: zero waits not yet in the histogram.
const CUT_MASK: u32 = 0xFF;

impl PortFlags {
    /// The copy of the port's `max_queue_bytes` (saturated at 2^24 - 1).
    #[inline]
    fn max_queue(self) -> u64 {
        u64::from(self.queue_cut >> 8)
    }

    /// Sets the copy of `max_queue_bytes` to `queued` (saturated).
    #[inline]
    fn set_max_queue(&mut self, queued: u64) {
        let q = u32::try_from(queued.min(u64::from(u32::MAX >> 8))).unwrap_or(u32::MAX >> 8);
        self.queue_cut = q << 8 | self.queue_cut & CUT_MASK;
    }

    /// Counts a departure that never waited; true when the count wrapped (256 more zeros
    /// for the histogram).
    #[inline]
    fn count_cut(&mut self) -> bool {
        if self.queue_cut & CUT_MASK == CUT_MASK {
            self.queue_cut &= !CUT_MASK;
            true
        } else {
            self.queue_cut += 1;
            false
        }
    }

    /// Zero waits counted here and not yet in the histogram.
    fn cut(self) -> u64 {
        u64::from(self.queue_cut & CUT_MASK)
    }
}

/// What the switch does with an arriving frame, read from its bytes.
enum Verdict {
    /// Forward it by egress port `out` at priority `prio`; it is `len` bytes long.
    Forward {
        /// The egress port.
        out: usize,
        /// The priority (from the DSCP map).
        prio: u8,
        /// Frame length without FCS.
        len: u64,
    },
    /// A PFC frame for this switch (`None`: it did not parse).
    Pause(Option<PfcPauseRepr>),
    /// Drop it (the reason is counted).
    Discard,
}

/// The DSCP map, 4 bits per entry (priorities are 0..=7): 32 bytes instead of 64, so that it
/// shares a cache line with the other fields every frame reads.
#[derive(Clone, Copy, Debug)]
struct PackedDscp([u32; 8]);

impl PackedDscp {
    fn new(map: &DscpMap) -> PackedDscp {
        let mut w = [0u32; 8];
        for d in 0..64u8 {
            w[usize::from(d >> 3)] |= u32::from(map.priority(d) & 7) << ((d & 7) * 4);
        }
        PackedDscp(w)
    }

    /// [`DscpMap::priority`] (only the low 6 bits of `dscp` are read).
    #[inline]
    fn priority(&self, dscp: u8) -> u8 {
        let d = dscp & 0x3F;
        (self.0[usize::from(d >> 3)] >> ((d & 7) * 4)) as u8 & 7
    }
}

/// A switch: forwarding table, MMU, PFC, ECN marking, one egress scheduler per port.
///
/// `repr(C, align(64))`, laid out for what every frame reads: the route table's own fields
/// (which it keeps last), the seed, the frame count, the flags and counters of the ports,
/// whether frames are marked, the DSCP map and the MMU's counters (which it keeps first)
/// follow one another in 245 bytes, four cache lines (a test checks it); a queued frame also
/// reads the lanes' vector, in the first line. A large fabric touches each switch too rarely
/// for those lines to stay cached: spread over the struct (the counters of `stats` among
/// them), they were nine or ten.
#[repr(C, align(64))]
pub struct Switch {
    /// Per port, its FIFO's lanes (read by a frame that is queued, not by one that leaves at
    /// once: kept before the stretch every frame reads). Apart from the custom schedulers
    /// (`custom`), so that queueing and taking a frame index them without an enum's tag
    /// test (the port's flags say which it runs).
    lanes: Vec<Lanes<Frame>>,
    /// Per port, its PFC state (lossless priorities only).
    pfc: Vec<PortPfc>,
    routes: RouteTable,
    seed: u64,
    /// Frames received (`stats().received`): kept here, with what every frame reads, rather
    /// than in `stats`, whose other counters are written only on rare events.
    received: u64,
    /// Per port, the PFC bits and FIFO length every frame reads (split from `pfc` and
    /// `lanes`, whose per-port state spans cache lines: eight ports' flags share one line).
    flags: Vec<PortFlags>,
    /// Per port counters, but `enqueued`, which holds only the frames admitted and then lost
    /// to an internal error ([`Switch::port_stats`] adds the dequeued and queued ones), and
    /// the waits still in `waits`. A boxed slice (never resized): 8 bytes fewer than a `Vec`
    /// make room for `waits` in the stretch every frame reads.
    port_stats: Box<[SwitchPortStats]>,
    /// The waits of the last queued departures (up to [`WAIT_LOG`], `wait_len` of them), each
    /// `wait << 16 | port`, not yet in their port's counters: added in a burst when the log
    /// is full ([`Switch::fold_waits`]) and by [`Switch::port_stats`]. A departure wrote its
    /// port's counters' line and a histogram bucket, two lines apart from anything else it
    /// touches; on a large fabric each port is visited too rarely for them to stay cached (a
    /// miss each for most departures), while a burst finds the lines of a port's recent
    /// waits together.
    waits: Box<[u64; WAIT_LOG]>,
    /// RED/ECN or INT is on: departures call [`Switch::mark`] (read here instead of the two
    /// options' lines).
    marking: bool,
    /// Entries of `waits` in use.
    wait_len: u8,
    /// Some ingress was ever put in XOFF: until then no departure can bring an XON, and
    /// departures skip the ingress's PFC state (a lossless fabric that never pauses, the
    /// usual case, reads it for nothing). Set for good: no count to keep per XON.
    xoff_seen: bool,
    /// `cfg.dscp_priority` is the class-selector map (priority = DSCP >> 3, the default):
    /// a frame's priority is then a shift, not a look-up in `dscp` (in what was padding).
    dscp_class_selector: bool,
    /// `cfg.dscp_priority`, packed.
    dscp: PackedDscp,
    mmu: Mmu,
    red: Option<Red>,
    /// In-band telemetry (HPCC): per port, bytes transmitted so far; `None` when off.
    int_tx: Option<Vec<u64>>,
    /// Whole-switch counters but `received` and `peak_buffer_bytes` (see [`Switch::stats`]).
    stats: SwitchStats,
    /// Route tables to take at given times (failover), and whether one was taken.
    reroutes: Vec<(Time, RouteTable)>,
    watch: Vec<PortWatch>,
    /// Per port, a pending shaping wake-up timer.
    wake_at: Vec<Option<Time>>,
    cfg: BufferConfig,
    failed_over: bool,
    /// Per port, its custom scheduler if it runs one (`PortFlags::custom` says so too; its
    /// lanes are then empty and unused).
    custom: Vec<Option<Box<dyn EgressScheduler>>>,
}

impl Switch {
    /// Turns on in-band telemetry: every egress appends a record to data frames that carry an
    /// INT stack (the NICs run HPCC; see [`fabemu_fabric::wire::int`]).
    pub fn enable_int(&mut self) {
        self.int_tx = Some(vec![0; self.lanes.len()]);
        self.marking = true;
    }

    /// Whole-switch counters.
    pub fn stats(&self) -> SwitchStats {
        SwitchStats {
            received: self.received,
            // The MMU's peak: the counter was set to it after every admission.
            peak_buffer_bytes: self.mmu.peak(),
            ..self.stats.clone()
        }
    }

    /// A switch with `ports` ports, FIFO egress, forwarding by `routes`, ECMP hashed with `seed`
    /// (give each switch its own seed, as real switches salt their hash, or two tiers of ECMP
    /// would make the same choice and polarize). The seed also seeds RED's generator.
    pub fn new(ports: usize, mut routes: RouteTable, cfg: &SwitchConfig, seed: u64) -> Switch {
        routes.compact();
        let b = cfg.buffer;
        Switch {
            routes,
            dscp: PackedDscp::new(&b.dscp_priority),
            dscp_class_selector: (0..64u8).all(|d| b.dscp_priority.priority(d) == d >> 3),
            seed,
            received: 0,
            marking: b.ecn.is_some(),
            xoff_seen: false,
            cfg: b,
            mmu: Mmu::new(&b, ports),
            lanes: (0..ports).map(|_| Lanes::default()).collect(),
            custom: (0..ports).map(|_| None).collect(),
            pfc: vec![PortPfc::new(); ports],
            flags: vec![PortFlags::default(); ports],
            watch: vec![PortWatch::default(); ports],
            red: b.ecn.map(|r| Red::new(&r, seed)),
            wake_at: vec![None; ports],
            int_tx: None,
            port_stats: vec![
                SwitchPortStats {
                    queueing_delay: LatencyHistogram::rough(),
                    ..SwitchPortStats::default()
                };
                ports
            ]
            .into_boxed_slice(),
            waits: Box::new([0; WAIT_LOG]),
            wait_len: if ports > 1 << 16 { NO_LOG } else { 0 },
            stats: SwitchStats::default(),
            reroutes: Vec::new(),
            failed_over: false,
        }
    }

    /// Routes to switch to during the run: at each time, the table that replaces the current
    /// one (how faults' failover reaches the switch: the scenario computes the tables). After
    /// the first change, a frame without a next hop counts as blackholed.
    pub fn schedule_routes(&mut self, reroutes: Vec<(Time, RouteTable)>) {
        self.reroutes = reroutes;
    }

    /// Replaces port `port`'s egress scheduler (it must be empty: call before the run).
    pub fn set_scheduler(&mut self, port: usize, sched: Box<dyn EgressScheduler>) {
        if let (Some(c), Some(f)) = (self.custom.get_mut(port), self.flags.get_mut(port)) {
            *c = Some(sched);
            f.custom = true;
        }
    }

    /// Frames queued on `port` (by its custom scheduler or in its lanes).
    fn queue_len(&self, port: usize) -> usize {
        match self.custom.get(port) {
            Some(Some(c)) => c.len(),
            _ => self.lanes.get(port).map_or(0, Lanes::len),
        }
    }

    /// Per port counters. `enqueued` is not written per frame (an arriving frame would touch
    /// the counters' cache line for it alone, a miss per frame on a large fabric): every frame
    /// admitted to a port is dequeued, still queued, or lost to an internal error (counted as
    /// it happens), and a frame a custom scheduler refuses or evicts leaves the count.
    ///
    /// `peak_ingress_bytes` is read from the MMU, which keeps each ingress (port, priority)'s
    /// peak beside its byte counts ([`crate::mmu::IngressUse::peak`]): copied into the
    /// counters whenever it grew, it cost a write to a line of their own.
    ///
    /// The queueing-delay histogram gets the zero waits of frames that cut through still
    /// counted in the port's flags (see `PortFlags::queue_cut`).
    pub fn port_stats(&self) -> Vec<SwitchPortStats> {
        let mut all = self.port_stats.to_vec();
        let logged = self.waits.get(..usize::from(self.wait_len));
        fold_log(&mut all, logged.unwrap_or(&[]));
        all.into_iter()
            .zip(&self.flags)
            .enumerate()
            .map(|(port, (mut ps, fl))| {
                ps.queueing_delay.record_zeros(fl.cut());
                ps.dequeued = ps.queueing_delay.len();
                ps.enqueued += ps.dequeued + self.queue_len(port) as u64;
                for (c, pp) in ps.priorities.iter_mut().enumerate() {
                    pp.peak_ingress_bytes = self.mmu.ingress_use(port, c as u8).peak;
                }
                ps
            })
            .collect()
    }

    /// Per port counters as kept, without the derived `enqueued` and `peak_ingress_bytes`,
    /// and with only some of the queueing delays (those of frames that waited, up to the last
    /// few): for reads of fields that need no copy, the PFC counters; [`Switch::port_stats`]
    /// has the whole histograms.
    pub fn port_counters(&self) -> &[SwitchPortStats] {
        &self.port_stats
    }

    /// Total frames dropped at admission.
    pub fn dropped_packets(&self) -> u64 {
        self.port_stats.iter().map(|p| p.dropped_packets).sum()
    }

    /// Frames dropped on lossless priorities (non-zero means the lossless promise broke).
    pub fn lossless_drops(&self) -> u64 {
        self.stats.lossless_drops
    }

    /// Frames still queued (non-zero after a run means frames were stranded).
    pub fn queued_packets(&self) -> usize {
        (0..self.lanes.len()).map(|p| self.queue_len(p)).sum()
    }

    /// The headroom of each lossless priority of `port` (set at start from the port's link).
    pub fn headroom(&self, port: usize) -> u64 {
        self.mmu.headroom(port)
    }

    /// The priorities the neighbour on `port` has paused (bit p = priority p).
    pub fn paused(&self, port: usize) -> u8 {
        self.flags.get(port).map_or(0, |p| p.paused)
    }

    /// The priorities this switch holds in XOFF toward the neighbour on `port`.
    pub fn xoff(&self, port: usize) -> u8 {
        self.pfc.get(port).map_or(0, |p| p.xoff)
    }

    /// The buffer accounting (occupancy per ingress and egress, thresholds).
    pub fn mmu(&self) -> &Mmu {
        &self.mmu
    }

    /// Egress queues found stalled by the deadlock watchdog and still stalled: frames queued,
    /// paused without a break for at least `deadlock_timeout`. Ordered by port, then priority.
    pub fn stalled(&self) -> Vec<StalledQueue> {
        let mut out = Vec::new();
        for (port, w) in self.watch.iter().enumerate() {
            for p in 0..PRIORITIES as u8 {
                if w.stalled & (1 << p) != 0 {
                    out.push(StalledQueue {
                        port,
                        priority: p,
                        queued_bytes: self.mmu.egress_bytes(port, p),
                        paused_since: w.blocked_since[usize::from(p)].unwrap_or(Time::ZERO),
                    });
                }
            }
        }
        out
    }

    /// When the watchdog first found a stalled queue (stays set once set).
    pub fn deadlock_detected_at(&self) -> Option<Time> {
        self.stats.deadlock_detected_at
    }

    /// Reads what the switch needs from an arriving frame's bytes and rewrites its TTL: the
    /// egress port, priority and length of a frame to forward, or why not (counted here).
    #[inline(always)]
    fn classify(&mut self, in_port: usize, pkt: &mut Packet) -> Verdict {
        // Damaged on the wire: the MAC's FCS check discards it (see `fabemu_fabric::fault`).
        if pkt.is_corrupted() {
            self.stats.fcs_dropped += 1;
            return Verdict::Discard;
        }
        // The read and the TTL rewrite in one pass (the rewrite of a frame dropped below for
        // want of a route is never seen); the drops are counted in the order of the checks.
        let peek = wire::peek_forward(pkt.header_mut());
        let (flow, ttl) = match peek {
            ForwardPeek {
                kind: FrameKind::RoceV2,
                flow: Some(flow),
                ttl,
            } => (flow, ttl),
            ForwardPeek {
                kind: FrameKind::PfcPause,
                ..
            } => return Verdict::Pause(PfcPauseRepr::parse(pkt.header()).ok()),
            _ => match plain_ipv4(pkt) {
                Some(f) => f,
                None => {
                    self.stats.malformed += 1;
                    return Verdict::Discard;
                }
            },
        };
        let seed = self.seed;
        let hash = || flow_hash(flow.src, flow.dst, flow.udp_src_port, seed);
        let Some(out) = self.routes.select_by(flow.dst, hash) else {
            if self.failed_over {
                self.stats.blackholed += 1;
            } else {
                self.stats.no_route += 1;
            }
            return Verdict::Discard;
        };
        // Every per-port vector has one entry per port: the flags' length is read with them
        // (the lanes' is in a line a forwarded frame need not read).
        if in_port >= self.flags.len() || out >= self.flags.len() {
            self.stats.no_route += 1;
            return Verdict::Discard;
        }
        match ttl {
            Ok(0) => {
                self.stats.ttl_expired += 1;
                return Verdict::Discard;
            }
            Ok(_) => {}
            Err(_) => {
                self.stats.malformed += 1;
                return Verdict::Discard;
            }
        }
        Verdict::Forward {
            out,
            // The DSCP as read with the flow (a TTL rewrite does not touch it).
            prio: if self.dscp_class_selector {
                (flow.dscp & 0x3F) >> 3
            } else {
                self.dscp.priority(flow.dscp)
            },
            len: pkt.frame_len() as u64,
        }
    }

    /// A frame arrived on `in_port`: forward it (admission, queueing, departure) or consume
    /// it (a PFC frame) or drop it. It stays in the engine's slab throughout.
    fn on_packet(&mut self, in_port: usize, frame: Frame, ctx: &mut impl Context) {
        self.received += 1;
        let verdict = match ctx.frame_mut(&frame) {
            Some(pkt) => self.classify(in_port, pkt),
            None => {
                self.stats.malformed += 1;
                Verdict::Discard
            }
        };
        let (out, prio, len) = match verdict {
            Verdict::Forward { out, prio, len } => (out, prio, len),
            Verdict::Pause(repr) => {
                ctx.drop_frame(frame);
                self.on_pause(in_port, repr, ctx);
                return;
            }
            Verdict::Discard => {
                ctx.drop_frame(frame);
                return;
            }
        };
        // A frame for an idle FIFO port with nothing queued, no class of it paused and no PFC
        // frame owed leaves at once: admitted, counted and released in one pass
        // ([`Mmu::pass`]), what the general path below does for it step by step. A lossy
        // admission cannot be followed by an XOFF; a lossless one takes this path unless it
        // puts the ingress over XOFF (the pause must go first: the general path below). Its
        // wait, 0 either way, is counted as a cut-through's.
        let fl = self.flags[out];
        if !fl.custom
            && fl.nonempty == 0
            && fl.pending == 0
            && fl.paused & (1 << (prio & 7)) == 0
            && ctx.port_idle(out)
        {
            let passed = if self.mmu.is_lossless(prio) {
                self.mmu.pass_unless_xoff(in_port, prio, len)
            } else {
                // The FIFO is empty (checked above), so its egress holds no bytes.
                Some(self.mmu.pass(in_port, prio, len))
            };
            if let Some(passed) = passed {
                self.leave_at_once(in_port, out, prio, len, frame, passed, ctx);
                return;
            }
        }
        // The usual case of a loaded fabric: a FIFO port
        // that is busy, with no class paused and no PFC frame owed. The frame joins its
        // queue and the frame on the wire sends it at its completion: what the general path
        // below does for it, with the port's flags read once.
        if !fl.custom && fl.paused == 0 && fl.pending == 0 && !ctx.port_idle(out) {
            self.queue_behind(in_port, out, prio, len, frame, ctx);
            return;
        }
        self.queue_general(in_port, out, prio, len, frame, ctx);
    }

    /// [`Switch::on_packet`] for a frame that neither leaves at once nor joins a busy FIFO
    /// port's queue: a custom scheduler, a paused class or a PFC frame owed, or an idle port
    /// whose frame must wait. Out of line: its stack frame and register saves were paid by
    /// every arrival, and few take it.
    #[inline(never)]
    fn queue_general(
        &mut self,
        in_port: usize,
        out: usize,
        prio: u8,
        len: u64,
        frame: Frame,
        ctx: &mut impl Context,
    ) {
        let now = ctx.now();
        // The peak stays in the MMU's counter (`Switch::port_stats` reads it there).
        let Ok((_, queued)) = self.mmu.admit_noting_peak(in_port, prio, out, len) else {
            self.refused(in_port, out, prio, len, frame, ctx);
            return;
        };
        self.note_queue(out, queued);

        // A frame for an empty FIFO may leave at once; it is held here (not queued) until
        // the PFC bookkeeping below has run, which may claim the port for a pause frame first.
        let mut held = None;
        // Queued behind frames already in the FIFO: see the end.
        let mut behind = false;
        let fl = &mut self.flags[out];
        // Told by the port's flags, without reading the queue's own lines.
        if fl.custom {
            self.enqueue_custom(out, frame, now, prio, in_port, ctx);
        } else if fl.nonempty == 0 {
            held = Some(frame);
        } else if let Some(f) = self.lanes.get_mut(out) {
            f.push(frame, now, prio, in_port, len as u32);
            fl.nonempty |= 1 << (prio & 7);
            behind = true;
        } else {
            ctx.drop_frame(frame);
        }
        if self.mmu.is_lossless(prio) && self.mmu.should_xoff(in_port, prio) {
            self.enter_xoff(in_port, prio, ctx);
        }
        if self.flags[out].paused & (1 << prio) != 0 && self.mmu.egress_bytes(out, prio) > 0 {
            self.block(out, prio, now, ctx);
        }
        if let Some(frame) = held {
            // The cut-through of the queue: exactly what queueing it and `start_tx` popping
            // it would do (it is the only frame queued), without touching the queue's cache
            // lines. Skipped when the port is busy, owes a PFC frame or has this priority
            // paused: then it waits in the queue as any frame would.
            let f = self.flags[out];
            if f.pending == 0 && f.paused & (1 << prio) == 0 && ctx.port_idle(out) {
                self.depart(out, frame, Some(now), len as u32, prio, in_port, ctx);
                return;
            }
            if let Some(f) = self.lanes.get_mut(out) {
                f.push(frame, now, prio, in_port, len as u32);
                self.flags[out].nonempty |= 1 << (prio & 7);
            } else {
                ctx.drop_frame(frame);
            }
        }
        // A FIFO that already held frames, with no class paused and no PFC frame owed, on a
        // busy port: that frame's completion was asked for (whoever queued the first of them
        // called `start_tx`, which sent it or asked; a departure leaving frames behind asks
        // too), so `start_tx` would only find the port busy and ask again: 0.66 calls per
        // packet-hop on fabric64. (A port whose frame ends right now is idle: `start_tx` sends
        // the next frame at once, ahead of the completion already queued.)
        let f = self.flags[out];
        if behind && f.paused == 0 && f.pending == 0 && !ctx.port_idle(out) {
            return;
        }
        self.start_tx(out, ctx);
    }

    /// [`Switch::on_packet`] for a frame (`len` bytes, from `in_port`, at `prio`) for the
    /// busy FIFO port `out` that has no class paused and owes no PFC frame: admitted,
    /// queued, then the ingress paused if it went over XOFF. The completion of the frame on
    /// the wire is asked for when this one is the first queued (what `start_tx` does on a
    /// busy port); with frames ahead, it was asked for already (see the end of `on_packet`),
    /// and `start_tx` runs only if the XOFF owed a PFC frame on `out` itself (a frame sent
    /// back by its ingress).
    /// Out of line: inlined, it pushed `Mmu::threshold` and `note_queue` out of `on_packet`.
    #[inline(never)]
    fn queue_behind(
        &mut self,
        in_port: usize,
        out: usize,
        prio: u8,
        len: u64,
        frame: Frame,
        ctx: &mut impl Context,
    ) {
        let Ok((_, queued)) = self.mmu.admit_noting_peak(in_port, prio, out, len) else {
            self.refused(in_port, out, prio, len, frame, ctx);
            return;
        };
        // The port's flags indexed once, for the deepest queue and the non-empty bit.
        let Some(fl) = self.flags.get_mut(out) else {
            ctx.drop_frame(frame);
            return;
        };
        note_queue_in(fl, &mut self.port_stats, out, queued);
        let Some(f) = self.lanes.get_mut(out) else {
            ctx.drop_frame(frame);
            return;
        };
        f.push(frame, ctx.now(), prio, in_port, len as u32);
        let first = fl.nonempty == 0;
        fl.nonempty |= 1 << (prio & 7);
        if self.mmu.is_lossless(prio) && self.mmu.should_xoff(in_port, prio) {
            self.enter_xoff(in_port, prio, ctx);
            // As `on_packet`'s end: the XOFF may have claimed `out` (when it is `in_port`).
            let f = self.flags[out];
            if !first && (f.paused != 0 || f.pending != 0 || ctx.port_idle(out)) {
                self.start_tx(out, ctx);
            }
        }
        if first {
            // `start_tx` on the port, still busy: nothing else can have sent on it.
            ctx.want_tx_done(out);
        }
    }

    /// Queues `frame` (admitted from `in_port` at `prio`) on `out`'s custom scheduler. Out of
    /// line: the scheduler's packet and arrival took stack in [`Switch::on_packet`].
    #[inline(never)]
    fn enqueue_custom(
        &mut self,
        out: usize,
        frame: Frame,
        now: Time,
        prio: u8,
        in_port: usize,
        ctx: &mut impl Context,
    ) {
        let Some(Some(c)) = self.custom.get_mut(out) else {
            ctx.drop_frame(frame);
            return;
        };
        let at = Arrival {
            now,
            priority: prio,
            ingress: in_port,
        };
        // A custom scheduler owns its packets (its classifiers read them). The frame is in
        // the slab (it was read on arrival), so the packet is always there.
        match ctx.take_frame(frame) {
            Some(p) => {
                if let Some(dropped) = c.enqueue(p, at) {
                    self.scheduler_drop(out, &dropped, ctx);
                }
            }
            // Admitted, then lost (it cannot happen: see above): still enqueued.
            None => self.port_stats[out].enqueued += 1,
        }
    }

    /// Egress `out` holds `queued` bytes with a frame just admitted: its deepest queue yet?
    /// Compared with the flags' copy, so that the port's counters are read only when it is.
    #[inline]
    fn note_queue(&mut self, out: usize, queued: u64) {
        note_queue_in(&mut self.flags[out], &mut self.port_stats, out, queued);
    }

    /// A frame that cuts through an idle, empty port (see [`Switch::on_packet`]), whose pass
    /// through the MMU gave `passed`: sent, or refused.
    // Eight arguments: each is one the callers hold in registers.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn leave_at_once(
        &mut self,
        in_port: usize,
        out: usize,
        prio: u8,
        len: u64,
        frame: Frame,
        passed: Result<(u64, Option<u64>), crate::buffer::Refusal>,
        ctx: &mut impl Context,
    ) {
        let Ok((queued, _)) = passed else {
            self.refused(in_port, out, prio, len, frame, ctx);
            return;
        };
        self.note_queue(out, queued);
        self.depart(out, frame, None, len as u32, prio, in_port, ctx);
    }

    /// The MMU refused a frame from `in_port` for `out`: drop and count it.
    fn refused(
        &mut self,
        in_port: usize,
        out: usize,
        prio: u8,
        len: u64,
        frame: Frame,
        ctx: &mut impl Context,
    ) {
        ctx.drop_frame(frame);
        self.count_drop(out, prio, len);
        // A lossless ingress that could not take a frame must stop its neighbour — if it
        // holds bytes, whose departure will bring the XON (pausing an empty one would
        // never end).
        if self.mmu.is_lossless(prio) && self.mmu.ingress_use(in_port, prio).total() > 0 {
            self.enter_xoff(in_port, prio, ctx);
        }
    }

    fn count_drop(&mut self, out: usize, prio: u8, len: u64) {
        let ps = &mut self.port_stats[out];
        ps.dropped_packets += 1;
        ps.dropped_bytes += len;
        let pp = &mut ps.priorities[usize::from(prio)];
        if self.mmu.is_lossless(prio) {
            pp.dropped_lossless += 1;
            self.stats.lossless_drops += 1;
        } else {
            pp.dropped_lossy += 1;
        }
    }

    /// A custom scheduler refused or evicted `dropped` (queued for `out`): free and count it.
    fn scheduler_drop(&mut self, out: usize, dropped: &Dequeued, ctx: &mut impl Context) {
        let (prio, ingress) = (dropped.priority, dropped.ingress);
        let len = dropped.packet.frame_len() as u64;
        self.mmu.release(ingress, prio, out, len);
        // It leaves the queue without being dequeued: out of the derived `enqueued`.
        self.count_drop(out, prio, len);
        self.check_xon(ingress, prio, ctx);
    }

    /// Whether `port` has more to send after the frame it is about to transmit (frames
    /// queued, held by a shaper or paused, or a PFC frame owed): only then does the frame's
    /// completion do anything, so only then is it asked for (saving an event per frame on an
    /// uncongested port); work queued while the frame is on the wire asks for it in
    /// [`Switch::start_tx`].
    #[inline]
    fn has_more(&self, port: usize) -> bool {
        let fl = self.flags[port];
        // A FIFO port is told by its flags, without reading the lanes' vector.
        let queued = !fl.custom && fl.nonempty != 0
            || fl.custom
                && match self.custom.get(port) {
                    Some(Some(c)) => !c.is_empty(),
                    _ => false,
                };
        queued || fl.pending != 0
    }

    /// Sends what `port` has to send next if it is idle (a PFC frame owed, else the next
    /// frame of the highest unpaused priority), or asks for its completion if it is busy.
    fn start_tx(&mut self, port: usize, ctx: &mut impl Context) {
        // Indexed once: the flags are read here and their non-empty bit cleared below.
        let Some(flags) = self.flags.get_mut(port) else {
            return;
        };
        let fl = *flags;
        if !ctx.port_idle(port) {
            // Work came for a busy port: its frame's completion must come back to us (frames
            // go out with `transmit_then`, whose completions are otherwise skipped).
            ctx.want_tx_done(port);
            return;
        }
        if fl.pending != 0 || fl.custom {
            self.start_tx_other(port, ctx);
            return;
        }
        // A FIFO port with no PFC frame owed: what `start_tx_other` does for it, without its
        // stack frame (the PFC frame's buffer, the custom scheduler's packet), which every
        // completion paid.
        if fl.nonempty & !fl.paused == 0 {
            return;
        }
        let Some(f) = self.lanes.get_mut(port) else {
            return;
        };
        if let Some(d) = f.pop_highest(&mut flags.nonempty, fl.paused) {
            self.depart_queued(port, d, ctx);
        }
    }

    /// Sends `d`, taken from `port`'s queue (see [`Switch::depart`]).
    #[inline(always)]
    fn depart_queued(&mut self, port: usize, d: Popped<Frame>, ctx: &mut impl Context) {
        self.depart(
            port,
            d.item,
            Some(d.enqueued_at),
            d.len,
            d.priority,
            d.ingress,
            ctx,
        );
    }

    /// [`Switch::start_tx`] on an idle port that owes a PFC frame or runs a custom scheduler.
    #[inline(never)]
    fn start_tx_other(&mut self, port: usize, ctx: &mut impl Context) {
        if port >= self.lanes.len() {
            return;
        }
        if self.flags[port].pending != 0 && self.send_control(port, ctx) {
            return;
        }
        let now = ctx.now();
        let fl = &mut self.flags[port];
        if !fl.custom && fl.nonempty == 0 {
            return;
        }
        let paused = fl.paused;
        let custom = if fl.custom {
            self.custom.get_mut(port).and_then(Option::as_mut)
        } else {
            None
        };
        let d = match custom {
            None => {
                let Some(f) = self.lanes.get_mut(port) else {
                    return;
                };
                match f.pop_highest(&mut fl.nonempty, paused) {
                    Some(d) => d,
                    None => return,
                }
            }
            Some(c) => match c.dequeue(now, paused) {
                // Back into the slab: `depart` sends every frame from there.
                Some(d) => Popped {
                    len: d.packet.frame_len() as u32,
                    item: ctx.hold(d.packet),
                    enqueued_at: d.enqueued_at,
                    priority: d.priority,
                    ingress: d.ingress,
                },
                None => {
                    // Frames held by a shaper: wake up when the first becomes eligible.
                    if let Some(t) = c.next_release(now) {
                        let armed = &mut self.wake_at[port];
                        if armed.is_none_or(|a| a > t) {
                            *armed = Some(t);
                            ctx.set_timer(t, SwitchTimer::Wake(port).token());
                        }
                    }
                    return;
                }
            },
        };
        self.depart_queued(port, d, ctx);
    }

    /// Sends `frame` (for egress (`port`, `prio`), charged to `ingress`) on the idle `port`:
    /// frees its buffer, counts it, marks it by RED, then resumes the ingress if it fell below
    /// XON. The frame leaves from its slab slot. `queued_at`: when it was queued; `None` for a
    /// frame that never waited, whose bytes [`Mmu::pass`] already settled. `len`: its frame
    /// length as kept since it arrived ([`LEN_NOT_KEPT`]: read from its packet), so that its slab slot
    /// is not read as it leaves (the engine needs it only for its length too): a cache miss
    /// per departure on large fabrics.
    ///
    /// One function for both (a flag, not a second copy of the departure): with two copies
    /// the engine's `transmit_frame` was left out of line.
    // Eight arguments: each is one the callers hold in registers; a struct of them would go
    // through memory.
    #[allow(clippy::too_many_arguments)]
    #[inline(never)]
    fn depart(
        &mut self,
        port: usize,
        frame: Frame,
        queued_at: Option<Time>,
        len: u32,
        prio: u8,
        ingress: usize,
        ctx: &mut impl Context,
    ) {
        let len = match len {
            LEN_NOT_KEPT => match ctx.frame(&frame) {
                Some(pkt) => u32::try_from(pkt.frame_len()).unwrap_or(u32::MAX),
                None => {
                    self.stats.tx_refused += 1;
                    if queued_at.is_some() {
                        // Admitted, then lost: neither dequeued nor queued, still enqueued.
                        self.port_stats[port].enqueued += 1;
                    }
                    return;
                }
            },
            l => l,
        };
        match queued_at {
            Some(at) => {
                self.mmu.release(ingress, prio, port, u64::from(len));
                let waited = ctx.now().saturating_sub(at).ps();
                self.log_wait(port, waited);
            }
            // A zero wait, counted apart (`port_stats` adds the count to the histogram's
            // zeros); the sum does not change.
            None => {
                if self.flags[port].count_cut() {
                    self.port_stats[port]
                        .queueing_delay
                        .record_zeros(u64::from(CUT_MASK) + 1);
                }
            }
        }
        // INT stamping lengthens the frame: it leaves, and is timed, by its new length.
        let len = if self.marking {
            self.mark(port, prio, &frame, len, ctx)
        } else {
            len
        };
        let more = self.has_more(port);
        if ctx.transmit_frame_len(port, frame, len, more).is_err() {
            self.stats.tx_refused += 1;
        }
        // Only lossless priorities are ever in XOFF, and only after some ingress went over
        // its threshold: until then a frame need not touch the ingress port's PFC state (a
        // cache miss per frame on large switches).
        if self.xoff_seen && self.mmu.is_lossless(prio) && ingress < self.pfc.len() {
            self.check_xon(ingress, prio, ctx);
        }
    }

    /// Counts a queued frame's wait on `port`: into the log (`dequeued` is the histogram's
    /// count, derived in `port_stats`). The port is one of the switch's (the callers indexed
    /// its flags), so below 2^16 in a switch that logs at all (`wait_len` is [`NO_LOG`] in a
    /// wider one): not tested here.
    #[inline(always)]
    fn log_wait(&mut self, port: usize, waited: u64) {
        let n = usize::from(self.wait_len);
        if waited >> 48 == 0 {
            if let Some(w) = self.waits.get_mut(n) {
                *w = waited << 16 | port as u64;
                self.wait_len += 1;
                return;
            }
        }
        self.log_wait_slow(port, waited);
    }

    /// [`Switch::log_wait`] when the log is full, for a wait too large for an entry (2^48 ps)
    /// or in a switch too wide for one ([`NO_LOG`]): folds the log, then logs the wait or
    /// counts it at once.
    #[cold]
    #[inline(never)]
    fn log_wait_slow(&mut self, port: usize, waited: u64) {
        if self.wait_len != NO_LOG {
            self.fold_waits();
        }
        if self.wait_len == 0 && waited >> 48 == 0 && port >> 16 == 0 {
            self.waits[0] = waited << 16 | port as u64;
            self.wait_len = 1;
        } else if let Some(ps) = self.port_stats.get_mut(port) {
            ps.queueing_delay_sum_ps += waited;
            ps.queueing_delay.record(waited);
        }
    }

    /// Adds the logged waits to their ports' counters and empties the log.
    fn fold_waits(&mut self) {
        let n = usize::from(self.wait_len);
        fold_log(&mut self.port_stats, self.waits.get(..n).unwrap_or(&[]));
        self.wait_len = 0;
    }

    /// RED/ECN marking and INT stamping of `frame` as it leaves (`port`, `prio`), after its
    /// bytes were released. Returns the frame's length after it (`len`, the length kept since
    /// it arrived, plus the INT record a stamp appends). Out of line: most runs have neither,
    /// and inlined into `depart` it made every frame pay its stack frame and register saves.
    #[inline(never)]
    fn mark(
        &mut self,
        port: usize,
        prio: u8,
        frame: &Frame,
        len: u32,
        ctx: &mut impl Context,
    ) -> u32 {
        let now = ctx.now();
        // Read before the frame is borrowed from the context (HPCC only).
        let bw = match self.int_tx {
            Some(_) => ctx.channel(port).map_or(0, |c| c.rate.bandwidth().bps()),
            None => 0,
        };
        let Some(pkt) = ctx.frame_mut(frame) else {
            return len;
        };
        if let Some(red) = &mut self.red {
            let ect = matches!(wire::ecn(pkt.header()), Some(Ecn::Ect0 | Ecn::Ect1));
            if ect
                && red.should_mark(self.mmu.egress_bytes(port, prio))
                && wire::set_ecn(pkt.header_mut(), Ecn::Ce).is_ok()
            {
                if let Some(ps) = self.port_stats.get_mut(port) {
                    ps.priorities[usize::from(prio & 7)].ecn_marked += 1;
                }
                self.stats.ecn_marked += 1;
            }
        }
        if let Some(tx) = self.int_tx.as_mut().and_then(|t| t.get_mut(port)) {
            // HPCC's congestion point: the port's state as this frame leaves (queue behind it,
            // bytes sent before it, the link's rate), appended to data frames that carry a stack.
            let qlen = self.mmu.egress_bytes(port, prio);
            let hop = wire::int::IntHop::new(bw, qlen, now.ps(), *tx);
            if wire::int::stamp(pkt, &hop).is_ok() {
                self.stats.int_stamped += 1;
            }
            *tx += pkt.frame_len() as u64;
            return u32::try_from(pkt.frame_len()).unwrap_or(u32::MAX);
        }
        len
    }

    /// Per egress port, the scheduler's per-class counters (empty for FIFO ports).
    pub fn port_classes(&self) -> Vec<Vec<ClassReport>> {
        self.custom
            .iter()
            .map(|c| c.as_ref().map_or_else(Vec::new, |c| c.classes()))
            .collect()
    }

    /// Priority inversions counted by the ports' schedulers, summed.
    pub fn priority_inversions(&self) -> u64 {
        self.custom
            .iter()
            .flatten()
            .map(|c| c.priority_inversions())
            .sum()
    }
}

impl Switch {
    /// Learns each port's speed and cable: sets the PFC headroom (configured, or the formula
    /// of [`crate::pfc`]) and the ports' MAC addresses (02-style local addresses from the actor
    /// id and port).
    pub fn on_start(&mut self, ctx: &mut impl Context) {
        for (i, (t, _)) in self.reroutes.iter().enumerate() {
            ctx.set_timer(*t, SwitchTimer::Reroute(i).token());
        }
        let id = ctx.id();
        let pfc = self.cfg.pfc;
        let max_wire = ctx.wire_bytes(pfc.max_frame.bytes() as usize);
        let pause_wire = ctx.wire_bytes(PFC_FRAME_LEN);
        for port in 0..self.pfc.len() {
            let [_, a, b, c] = id.to_be_bytes();
            let [p1, p2] = (port as u16).to_be_bytes();
            let st = &mut self.pfc[port];
            st.mac = [0x06, a, b, c, p1, p2];
            let Some(ch) = ctx.channel(port) else {
                continue;
            };
            st.rate_bps = ch.rate.bandwidth().bps();
            let h = pfc.headroom.map_or_else(
                || {
                    headroom_formula(
                        ch.rate.bandwidth(),
                        ch.latency,
                        max_wire,
                        pause_wire,
                        pfc.response_time,
                    )
                },
                |h| h.bytes(),
            );
            self.mmu.set_headroom(port, h);
        }
    }

    /// Reacts to one event (the engine's, or a test's through any [`Context`]). Always
    /// inlined: out of line, the event would be copied to pass it.
    #[inline(always)]
    pub fn on_event(&mut self, event: Event, ctx: &mut impl Context) {
        match event {
            Event::Packet { port, packet } => {
                let frame = ctx.hold(packet);
                self.on_packet(port, frame, ctx);
            }
            Event::Frame { port, frame } => self.on_packet(port, frame, ctx),
            Event::TxDone { port } => self.start_tx(port, ctx),
            Event::Timer { token } => self.on_timer(token, ctx),
        }
    }
}

impl Actor for Switch {
    fn start(&mut self, ctx: &mut Ctx<'_>) {
        self.on_start(ctx);
    }

    /// Frames arrive as held [`Frame`]s: a forwarded frame never leaves the engine's slab.
    fn holds_frames(&self) -> bool {
        true
    }

    /// Queue depth for time series: per egress port, the bytes queued (all priorities).
    fn sample(&self, out: &mut Vec<u64>) {
        out.extend((0..self.lanes.len()).map(|p| self.mmu.queue_bytes(p)));
    }

    /// [`Switch::on_event`] for the engine's context, spelt out here: through the generic call,
    /// the engine's loop copied each event before the call.
    fn handle(&mut self, event: Event, ctx: &mut Ctx<'_>) {
        match event {
            Event::Packet { port, packet } => {
                let frame = ctx.hold(packet);
                self.on_packet(port, frame, ctx);
            }
            Event::Frame { port, frame } => self.on_packet(port, frame, ctx),
            Event::TxDone { port } => self.start_tx(port, ctx),
            Event::Timer { token } => self.on_timer(token, ctx),
        }
    }
}

/// The flow and TTL of an IPv4 frame that is not RoCEv2 (a real program's TCP, UDP or ICMP,
/// carried by an emulation): forwarded by the same rules as RoCEv2 frames, its TTL decremented
/// with the checksum patched. `None` for anything else (IPv6, ARP, LLDP: dropped as
/// malformed). Out of line: the fabric's own frames never come here.
#[cold]
#[inline(never)]
fn plain_ipv4(pkt: &mut Packet) -> Option<(wire::RoceFlow, Result<u8, wire::WireError>)> {
    let flow = wire::ip_flow(pkt.header())?;
    Some((flow, wire::decrement_ttl(pkt.header_mut())))
}
