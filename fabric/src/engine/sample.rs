//! Time series: per-port busy time per interval, and actors' own values (queue depths) sampled
//! at interval boundaries.
//!
//! **Utilization is exact.** A transmit occupies its port over [start, start + serialization);
//! that interval's overlap with each bucket [k·I, (k+1)·I) is added to the bucket, so a bucket's
//! busy time over I is the port's utilization in it — no sampling error.
//!
//! **Actor values are snapshots.** At every boundary k·I a partition asks each of its actors for
//! [`super::Actor::sample`] before it handles any event at or after k·I: the values are the
//! state after every event earlier than k·I. That instant does not depend on how actors are
//! spread over threads, so neither do the series.
//!
//! **Adaptive interval.** With a bucket limit, the interval grows tenfold whenever a series
//! would exceed it (buckets are summed in tens, snapshots keep every tenth), so a run of unknown
//! length ends with between limit/10 and limit buckets on a round interval. Each partition
//! coarsens on its own; the merge brings all to the coarsest level any partition or the end
//! time needs, which depends on the events only.
//!
//! **The series end with the traffic.** After the last frame, a run may go on for long with
//! idle timers (a retransmission timeout that finds everything acknowledged, DCQCN's rate
//! recovery): the series stop at the last frame's arrival instead. Snapshots are held back
//! (as runs of equal values) until a frame is sent after them, so the idle tail neither
//! lengthens the series nor coarsens their interval.

#[cfg(feature = "mpi")]
use super::codec::{Reader, Writer};
use super::worker::Partition;
#[cfg(feature = "mpi")]
use super::EngineError;
use super::{Actor, ActorId};
use crate::units::Time;

/// How to sample.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SampleConfig {
    /// The (initial) interval; at least 1 ps.
    pub interval: Time,
    /// Grow the interval tenfold whenever a series would get more buckets than this
    /// (`None`: keep the interval, however many buckets the run needs).
    pub max_buckets: Option<usize>,
}

/// One actor's snapshots: `width` values per boundary.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ActorSamples {
    /// Values per snapshot (what the actor's first [`super::Actor::sample`] call gave; 0 for an
    /// actor that samples nothing).
    pub width: usize,
    /// Snapshot k (at time k·interval) is `data[k*width..(k+1)*width]`.
    pub data: Vec<u64>,
}

impl ActorSamples {
    /// The values at boundary `k` (empty past the end or for an actor without values).
    pub fn at(&self, k: usize) -> &[u64] {
        self.data
            .get(k * self.width..(k + 1) * self.width)
            .unwrap_or(&[])
    }
}

/// The series of a run.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Samples {
    /// The final interval I.
    pub interval: Time,
    /// Buckets: bucket k covers [k·I, (k+1)·I); snapshot k is taken at k·I. Covers the
    /// traffic: up to the last frame's arrival (or the run's end, if earlier), not the idle
    /// timers that may fire after it.
    pub buckets: usize,
    /// Per actor, per port, per bucket: picoseconds the port spent serializing in the bucket.
    pub busy_ps: Vec<Vec<Vec<u64>>>,
    /// Per actor, its snapshots.
    pub values: Vec<ActorSamples>,
}

/// One partition's sampling state.
pub(crate) struct Sampler {
    interval: u64,
    max: Option<usize>,
    /// Per local port (the partition's port numbering), busy ps per bucket.
    busy: Vec<Vec<u64>>,
    /// Per local actor.
    values: Vec<ActorSamples>,
    /// Snapshots taken so far (the next one is at `next_k * interval`).
    next_k: u64,
    pub(crate) scratch: Vec<u64>,
    /// Snapshots held back: (until, per local actor values): the values of every boundary
    /// not yet taken up to `until`. They are taken when a frame is sent after them; those
    /// after the last frame are taken only as far as the traffic of some partition reaches,
    /// so idle timers (retransmission, rate recovery) neither lengthen the series nor
    /// coarsen the interval.
    pending: Vec<(u64, Vec<Vec<u64>>)>,
    /// The latest arrival of a frame this partition sent (ps).
    traffic_end: u64,
}

impl Sampler {
    pub(crate) fn new(cfg: &SampleConfig, ports: usize, actors: usize) -> Sampler {
        Sampler {
            interval: cfg.interval.ps().max(1),
            max: cfg.max_buckets.map(|m| m.max(10)),
            busy: vec![Vec::new(); ports],
            values: vec![ActorSamples::default(); actors],
            next_k: 0,
            scratch: Vec::new(),
            pending: Vec::new(),
            traffic_end: 0,
        }
    }

    /// The first boundary after `t` at the current interval (where the next snapshot is due
    /// once every one up to `t` is held).
    pub(crate) fn next_after(&self, t: u64) -> u64 {
        (t / self.interval)
            .saturating_add(1)
            .saturating_mul(self.interval)
    }

    /// Holds `values` (per local actor) as the snapshot of every boundary up to `until` not
    /// taken yet: the actors' state before the event at `until`. Runs with equal values merge,
    /// so an idle tail costs one run however many boundaries it spans.
    pub(crate) fn hold(&mut self, until: u64, values: Vec<Vec<u64>>) {
        match self.pending.last_mut() {
            Some((u, v)) if *v == values => *u = until,
            _ => self.pending.push((until, values)),
        }
    }

    /// Takes the held snapshots: all of them, coarsening as needed (`cap` = `None`), or, at
    /// the final interval, those of the first `cap` boundaries.
    pub(crate) fn flush(&mut self, cap: Option<usize>) {
        let runs = std::mem::take(&mut self.pending);
        for (until, values) in &runs {
            while self.next_at() <= *until {
                if cap.is_some_and(|c| self.next_k >= c as u64) {
                    return;
                }
                for (i, v) in values.iter().enumerate() {
                    self.scratch.clear();
                    self.scratch.extend_from_slice(v);
                    self.store(i);
                }
                if cap.is_some() {
                    self.advance_fixed();
                } else {
                    self.advance();
                }
            }
        }
    }

    /// The latest arrival of a frame this partition sent.
    pub(crate) fn traffic_end(&self) -> u64 {
        self.traffic_end
    }

    /// Time of the next snapshot.
    pub(crate) fn next_at(&self) -> u64 {
        self.next_k.saturating_mul(self.interval)
    }

    fn level_needed(&self, bucket: u64) -> bool {
        self.max.is_some_and(|m| bucket >= m as u64)
    }

    /// Grows the interval tenfold, merging what was gathered.
    fn coarsen(&mut self) {
        self.interval = self.interval.saturating_mul(10);
        for b in &mut self.busy {
            let merged: Vec<u64> = b.chunks(10).map(|c| c.iter().sum()).collect();
            *b = merged;
        }
        for v in &mut self.values {
            if v.width > 0 {
                let w = v.width;
                let kept: Vec<u64> = v
                    .data
                    .chunks(w)
                    .step_by(10)
                    .flat_map(|c| c.iter().copied())
                    .collect();
                v.data = kept;
            }
        }
        self.next_k = self.next_k.div_ceil(10);
    }

    /// Adds a serialization over [start, end) to local port `port`, of a frame that arrives at
    /// `arrive`: the traffic goes on, so the snapshots held until now are taken.
    pub(crate) fn add_busy(&mut self, port: usize, start: u64, end: u64, arrive: u64) {
        if !self.pending.is_empty() {
            self.flush(None);
        }
        self.traffic_end = self.traffic_end.max(arrive);
        if end <= start {
            return;
        }
        while self.level_needed((end - 1) / self.interval) {
            self.coarsen();
        }
        let i = self.interval;
        let (first, last) = (start / i, (end - 1) / i);
        let b = &mut self.busy[port];
        if b.len() <= last as usize {
            b.resize(last as usize + 1, 0);
        }
        for k in first..=last {
            let lo = start.max(k * i);
            let hi = end.min((k + 1) * i);
            b[k as usize] += hi - lo;
        }
    }

    /// Stores the snapshot in `scratch` as local actor `actor`'s value at the current boundary.
    pub(crate) fn store(&mut self, actor: usize) {
        let v = &mut self.values[actor];
        if v.width == 0 && v.data.is_empty() {
            v.width = self.scratch.len();
        }
        let w = v.width;
        if w == 0 {
            return;
        }
        // A fixed width keeps snapshot k at a fixed offset: cut or pad a deviating sample.
        self.scratch.resize(w, 0);
        v.data.extend_from_slice(&self.scratch);
    }

    /// Moves to the next boundary after every actor was stored.
    pub(crate) fn advance(&mut self) {
        self.next_k += 1;
        if self.level_needed(self.next_k) {
            self.coarsen();
        }
    }

    /// Moves to the next boundary without coarsening (the final interval is set).
    pub(crate) fn advance_fixed(&mut self) {
        self.next_k += 1;
    }

    /// The interval this partition reached.
    pub(crate) fn interval(&self) -> u64 {
        self.interval
    }

    /// Buckets this partition's busy series reach.
    pub(crate) fn busy_len(&self) -> usize {
        self.busy.iter().map(Vec::len).max().unwrap_or(0)
    }

    /// Coarsens to `interval` (a tenfold multiple of the current one, or equal).
    pub(crate) fn coarsen_to(&mut self, interval: u64) {
        while self.interval < interval {
            self.coarsen();
        }
    }

    /// Snapshots still to take to cover `buckets` boundaries.
    pub(crate) fn missing(&self, buckets: usize) -> u64 {
        (buckets as u64).saturating_sub(self.next_k)
    }

    /// Hands out the series for `buckets` buckets: per local port busy, per local actor values.
    pub(crate) fn finish(mut self, buckets: usize) -> (Vec<Vec<u64>>, Vec<ActorSamples>) {
        for b in &mut self.busy {
            b.resize(buckets, 0);
        }
        for v in &mut self.values {
            v.data.truncate(buckets * v.width);
        }
        (self.busy, self.values)
    }
}

/// The interval every partition is brought to: the coarsest any partition reached, and coarse
/// enough that the end time (the traffic's) fits the bucket limit.
pub(crate) fn final_interval(cfg: &SampleConfig, reached: &[u64], end: Time) -> u64 {
    let mut i = reached
        .iter()
        .copied()
        .max()
        .unwrap_or(cfg.interval.ps().max(1));
    if let Some(m) = cfg.max_buckets.map(|m| m.max(10)) {
        while buckets_for(end, i) > m {
            i = i.saturating_mul(10);
        }
    }
    i
}

/// Buckets that cover `end` at `interval`, and one more: its snapshot, the first after the
/// end, shows the state the traffic left (queues drained, or not).
pub(crate) fn buckets_for(end: Time, interval: u64) -> usize {
    usize::try_from(end.ps() / interval.max(1))
        .unwrap_or(usize::MAX)
        .saturating_add(2)
}

/// How far some partitions' series got: `[coarsest interval reached (0: no series), latest
/// arrival of a frame they sent]` (ps). The element-wise maximum over every partition of a run,
/// whichever thread or process ran it, decides the run's interval and length.
pub(crate) fn reach<A: Actor>(parts: &[Partition<A>]) -> [u64; 2] {
    let mut r = [0, 0];
    for s in parts.iter().filter_map(|p| p.state.sampler.as_ref()) {
        r[0] = r[0].max(s.interval());
        r[1] = r[1].max(s.traffic_end());
    }
    r
}

/// The run's interval and the end of its series, from the [`reach`] of all its partitions and
/// its end time.
pub(crate) fn interval_for(cfg: &SampleConfig, reach: [u64; 2], end: Time) -> (u64, Time) {
    // The series end with the traffic (the last frame's arrival), not with the idle timers
    // that may keep the run going after it; a run stopped by `until` ends there.
    let end = Time(reach[1].min(end.ps()));
    let reached: &[u64] = if reach[0] > 0 { &[reach[0]] } else { &[] };
    (final_interval(cfg, reached, end), end)
}

/// Brings every partition's series to `interval`: gives the buckets the longest busy series
/// reaches.
pub(crate) fn coarsen_all<A: Actor>(parts: &mut [Partition<A>], interval: u64) -> usize {
    let mut longest = 0;
    for s in parts.iter_mut().filter_map(|p| p.state.sampler.as_mut()) {
        s.coarsen_to(interval);
        longest = longest.max(s.busy_len());
    }
    longest
}

/// One actor's series: its id, per port the busy time per bucket, its snapshots.
pub(crate) type ActorSeries = (ActorId, Vec<Vec<u64>>, ActorSamples);

/// Takes every partition's series at `interval` over `buckets` buckets (the snapshots still
/// missing are of the actors' final state), per actor.
pub(crate) fn finish_all<A: Actor>(
    parts: &mut [Partition<A>],
    interval: u64,
    buckets: usize,
) -> Vec<ActorSeries> {
    let mut out = Vec::new();
    for p in parts.iter_mut() {
        p.finish_samples(interval, buckets);
        let Some(s) = p.state.sampler.take() else {
            continue;
        };
        let (busy, values) = s.finish(buckets);
        let (gids, port_base) = p.layout();
        let mut busy = busy.into_iter();
        for (local, (&gid, v)) in gids.iter().zip(values).enumerate() {
            let n = (port_base[local + 1] - port_base[local]) as usize;
            out.push((gid, busy.by_ref().take(n).collect(), v));
        }
    }
    out
}

/// The series of a run of `n_actors` actors from every actor's.
pub(crate) fn lay_out(
    series: Vec<ActorSeries>,
    interval: u64,
    buckets: usize,
    n_actors: usize,
) -> Samples {
    let mut busy_ps = vec![Vec::new(); n_actors];
    let mut values = vec![ActorSamples::default(); n_actors];
    for (gid, b, v) in series {
        if let (Some(bo), Some(vo)) = (busy_ps.get_mut(gid as usize), values.get_mut(gid as usize))
        {
            *bo = b;
            *vo = v;
        }
    }
    Samples {
        interval: Time(interval),
        buckets,
        busy_ps,
        values,
    }
}

/// Brings every partition's series to one interval and length and lays them out by actor.
pub(crate) fn merge<A: Actor>(
    parts: &mut [Partition<A>],
    cfg: &SampleConfig,
    end: Time,
    n_actors: usize,
) -> Samples {
    let (interval, end) = interval_for(cfg, reach(parts), end);
    let buckets = coarsen_all(parts, interval).max(buckets_for(end, interval));
    let series = finish_all(parts, interval, buckets);
    lay_out(series, interval, buckets, n_actors)
}

/// Writes one actor's series (to carry it to another process).
#[cfg(feature = "mpi")]
pub(crate) fn write_series(w: &mut Writer, (gid, busy, values): &ActorSeries) {
    w.u32(*gid);
    w.usize(busy.len());
    for b in busy {
        write_u64s(w, b);
    }
    w.usize(values.width);
    write_u64s(w, &values.data);
}

/// Reads one actor's series written by [`write_series`].
#[cfg(feature = "mpi")]
pub(crate) fn read_series(r: &mut Reader<'_>) -> Result<ActorSeries, EngineError> {
    let gid = r.u32()?;
    let ports = r.usize()?;
    let busy = (0..ports)
        .map(|_| read_u64s(r))
        .collect::<Result<Vec<_>, _>>()?;
    let width = r.usize()?;
    let data = read_u64s(r)?;
    Ok((gid, busy, ActorSamples { width, data }))
}

#[cfg(feature = "mpi")]
fn write_u64s(w: &mut Writer, v: &[u64]) {
    w.usize(v.len());
    for &x in v {
        w.u64(x);
    }
}

#[cfg(feature = "mpi")]
fn read_u64s(r: &mut Reader<'_>) -> Result<Vec<u64>, EngineError> {
    let n = r.usize()?;
    // Bounded by what is left: a corrupt length cannot allocate more than the message holds.
    let mut v = Vec::with_capacity(n.min(r.remaining() / 8));
    for _ in 0..n {
        v.push(r.u64()?);
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn busy_time_is_split_exactly_over_buckets() {
        let cfg = SampleConfig {
            interval: Time(100),
            max_buckets: None,
        };
        let mut s = Sampler::new(&cfg, 1, 0);
        s.add_busy(0, 50, 320, 400); // 50 in bucket 0, 100 in 1 and 2, 20 in 3
        let (busy, _) = s.finish(5);
        assert_eq!(busy[0], vec![50, 100, 100, 20, 0]);
    }

    #[test]
    fn coarsening_sums_buckets_and_keeps_every_tenth_snapshot() {
        let cfg = SampleConfig {
            interval: Time(1),
            max_buckets: Some(10),
        };
        let mut s = Sampler::new(&cfg, 1, 1);
        for k in 0..10u64 {
            s.scratch.clear();
            s.scratch.push(k);
            s.store(0);
            s.advance();
        }
        // The tenth snapshot triggered a tenfold interval: snapshot 0 kept, next at 10.
        assert_eq!(s.interval(), 10);
        assert_eq!(s.next_at(), 10);
        s.add_busy(0, 5, 25, 30);
        let (busy, values) = s.finish(3);
        assert_eq!(busy[0], vec![5, 10, 5]);
        assert_eq!(values[0].data, vec![0]);
        assert_eq!(values[0].at(0), &[0]);
        assert!(values[0].at(1).is_empty());
    }

    #[test]
    fn held_snapshots_are_taken_only_as_far_as_traffic_reaches() {
        let cfg = SampleConfig {
            interval: Time(10),
            max_buckets: Some(10),
        };
        let mut s = Sampler::new(&cfg, 1, 1);
        // Events at 0 and 25 (value 1, then 2), a frame sent at 30 that arrives at 40.
        s.hold(0, vec![vec![1]]);
        s.hold(25, vec![vec![2]]);
        s.add_busy(0, 30, 35, 40);
        assert_eq!(s.next_at(), 30, "boundaries 0, 10, 20 taken");
        // An idle tail: timers at 60 and then every 10 up to 10_000, nothing changes. Held
        // as one run; taking it would have coarsened the interval tenfold twice.
        s.hold(60, vec![vec![3]]);
        for t in (70..10_000).step_by(10) {
            s.hold(t, vec![vec![3]]);
        }
        assert_eq!(s.pending.len(), 1);
        assert_eq!((s.interval(), s.traffic_end()), (10, 40));
        // The merge asks for the buckets the traffic covers (to 40: 5 of them).
        s.flush(Some(5));
        let (busy, values) = s.finish(5);
        assert_eq!(busy[0], vec![0, 0, 0, 5, 0]);
        assert_eq!(values[0].data, vec![1, 2, 2, 3, 3]);
    }

    #[cfg(feature = "mpi")]
    #[test]
    fn series_read_back_as_written() {
        let s: ActorSeries = (
            7,
            vec![vec![1, 2, 3], vec![], vec![u64::MAX]],
            ActorSamples {
                width: 2,
                data: vec![4, 5, 6, 7],
            },
        );
        let mut w = Writer::default();
        write_series(&mut w, &s);
        let mut r = Reader::new(&w.buf);
        assert_eq!(read_series(&mut r).ok(), Some(s));
        assert!(r.is_empty());
    }

    #[test]
    fn final_interval_fits_the_end_time() {
        let cfg = SampleConfig {
            interval: Time(1),
            max_buckets: Some(100),
        };
        assert_eq!(final_interval(&cfg, &[1, 10], Time(5_000)), 100);
        assert_eq!(final_interval(&cfg, &[1000], Time(5)), 1000);
    }
}
