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

use super::ActorId;
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
    /// Buckets: bucket k covers [k·I, (k+1)·I); snapshot k is taken at k·I. Covers the run's
    /// end time.
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
        }
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

    /// Adds a serialization over [start, end) to local port `port`.
    pub(crate) fn add_busy(&mut self, port: usize, start: u64, end: u64) {
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
/// enough that the end time fits the bucket limit.
pub(crate) fn final_interval(cfg: &SampleConfig, reached: &[u64], end: Time) -> u64 {
    let mut i = reached
        .iter()
        .copied()
        .max()
        .unwrap_or(cfg.interval.ps().max(1));
    if let Some(m) = cfg.max_buckets.map(|m| m.max(10)) {
        while end.ps() / i >= m as u64 {
            i = i.saturating_mul(10);
        }
    }
    i
}

/// Per-actor, per-port layout helper for the merge.
pub(crate) fn empty(n_actors: usize) -> (Vec<Vec<Vec<u64>>>, Vec<ActorSamples>) {
    (
        vec![Vec::new(); n_actors],
        vec![ActorSamples::default(); n_actors],
    )
}

/// Assigns a partition's per-local results to global actor slots.
pub(crate) fn scatter(
    busy_out: &mut [Vec<Vec<u64>>],
    values_out: &mut [ActorSamples],
    gids: &[ActorId],
    port_base: &[u32],
    busy: Vec<Vec<u64>>,
    values: Vec<ActorSamples>,
) {
    let mut busy = busy.into_iter();
    for (local, (&gid, v)) in gids.iter().zip(values).enumerate() {
        let n = (port_base[local + 1] - port_base[local]) as usize;
        busy_out[gid as usize] = busy.by_ref().take(n).collect();
        values_out[gid as usize] = v;
    }
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
        s.add_busy(0, 50, 320); // 50 in bucket 0, 100 in 1 and 2, 20 in 3
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
        s.add_busy(0, 5, 25);
        let (busy, values) = s.finish(3);
        assert_eq!(busy[0], vec![5, 10, 5]);
        assert_eq!(values[0].data, vec![0]);
        assert_eq!(values[0].at(0), &[0]);
        assert!(values[0].at(1).is_empty());
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
