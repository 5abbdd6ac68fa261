//! The facts ([`super::facts`]) as bytes, for the rank that ran an actor to send them to rank 0
//! of a run over MPI ranks.
//!
//! Written and read in one fixed order with the engine's codec (both sides are the same
//! binary). Every struct is read back with a struct literal naming all its fields, so a field
//! added to a counter struct fails to compile here until it is carried.

use fabemu_collectives::JobRecord;
use fabemu_fabric::engine::codec::{Reader, Writer};
use fabemu_fabric::engine::EngineError;
use fabemu_fabric::histogram::LatencyHistogram;
use fabemu_fabric::host::{HostStats, Recovery};
use fabemu_switch::egress::ClassReport;
use fabemu_switch::priority::PRIORITIES;
use fabemu_switch::{PriorityStats, SwitchPortStats, SwitchStats};
use fabemu_workload::scheduler::NodeRecord;

use super::facts::{
    ActorFacts, Blocked, Delivery, HostFacts, QpFacts, SwitchFacts, TrainingFacts, WatchFacts,
};
use crate::world::Node;

/// Writes and reads a struct of `u64` fields (and others with their own functions), in the
/// order listed, from one list so that the two sides cannot disagree.
macro_rules! wire_struct {
    ($put:ident, $get:ident, $ty:ident { $($f:ident),* $(,)? } $(; $x:ident: $xput:expr, $xget:expr)*) => {
        fn $put(w: &mut Writer, s: &$ty) {
            $( w.u64(s.$f); )*
            $( $xput(w, &s.$x); )*
        }
        fn $get(r: &mut Reader<'_>) -> Result<$ty, EngineError> {
            Ok($ty {
                $( $f: r.u64()?, )*
                $( $x: $xget(r)?, )*
            })
        }
    };
}

wire_struct!(put_host_stats, get_host_stats, HostStats {
    data_packets_sent, data_bytes_sent, retransmitted_packets, retransmitted_bytes, timeouts,
    naks_sent, naks_received, acks_sent, acks_received, data_packets_received,
    out_of_order_dropped, duplicates_received, cnps_received, cnps_sent, ce_received,
    rate_decreases, pause_frames_received, paused_time_ps, pause_frames_sent, xon_frames_sent,
    rx_buffer_dropped, forwarded, relay_dropped, dropped_invalid, corrupted_discarded,
    blackholed, icrc_errors, length_mismatches, qps_failed, latency_sum_ps,
}; latency: |w: &mut Writer, h: &LatencyHistogram| h.write_to(w), LatencyHistogram::read_from);

wire_struct!(put_switch_stats, get_switch_stats, SwitchStats {
    received, no_route, ttl_expired, malformed, pause_frames_received, pause_frames_sent,
    xon_frames_sent, lossless_drops, ecn_marked, peak_buffer_bytes, tx_refused, blackholed,
    fcs_dropped, int_stamped,
}; deadlock_detected_at: |w: &mut Writer, t: &Option<_>| w.opt_time(*t), |r: &mut Reader<'_>| r.opt_time());

wire_struct!(
    put_priority,
    get_priority,
    PriorityStats {
        pause_frames_sent,
        xon_frames_sent,
        pause_frames_received,
        xon_frames_received,
        paused_time_ps,
        ecn_marked,
        dropped_lossy,
        dropped_lossless,
        peak_ingress_bytes,
    }
);

fn put_priorities(w: &mut Writer, p: &[PriorityStats; PRIORITIES]) {
    for s in p {
        put_priority(w, s);
    }
}

fn get_priorities<const N: usize>(
    r: &mut Reader<'_>,
) -> Result<Box<[PriorityStats; N]>, EngineError> {
    let mut p = Box::new([PriorityStats::default(); N]);
    for s in p.iter_mut() {
        *s = get_priority(r)?;
    }
    Ok(p)
}

wire_struct!(put_port, get_port, SwitchPortStats {
    queueing_delay_sum_ps, enqueued, dropped_packets, dropped_bytes, max_queue_bytes, dequeued,
}; queueing_delay: |w: &mut Writer, h: &LatencyHistogram| h.write_to(w), LatencyHistogram::read_from
 ; priorities: put_priorities, get_priorities);

wire_struct!(put_class, get_class, ClassReport {
    packets, bytes, queueing_delay_sum_ps, dropped_packets,
}; name: |w: &mut Writer, s: &String| w.str(s), |r: &mut Reader<'_>| r.string());

fn put_vec<T>(w: &mut Writer, v: &[T], put: impl Fn(&mut Writer, &T)) {
    w.usize(v.len());
    for x in v {
        put(w, x);
    }
}

fn get_vec<T>(
    r: &mut Reader<'_>,
    get: impl Fn(&mut Reader<'_>) -> Result<T, EngineError>,
) -> Result<Vec<T>, EngineError> {
    let n = r.usize()?;
    // Every element takes at least a byte: a longer count means the sides disagree.
    let mut v = Vec::with_capacity(n.min(r.remaining()));
    for _ in 0..n {
        v.push(get(r)?);
    }
    Ok(v)
}

fn put_qp(w: &mut Writer, q: &QpFacts) {
    w.u32(q.peer);
    w.opt_u64(q.final_rate_bps);
    w.u64(q.rate_changes);
    w.u64(q.cuts);
    w.opt_u64(q.min_rate_bps);
    w.opt_u64(q.mean_rate_bps);
    w.usize(q.history_samples);
    w.u64(q.history_resolution_ps);
    put_vec(w, &q.samples, |w, s| {
        w.u64(s[0]);
        w.u64(s[1]);
    });
}

fn get_qp(r: &mut Reader<'_>) -> Result<QpFacts, EngineError> {
    Ok(QpFacts {
        peer: r.u32()?,
        final_rate_bps: r.opt_u64()?,
        rate_changes: r.u64()?,
        cuts: r.u64()?,
        min_rate_bps: r.opt_u64()?,
        mean_rate_bps: r.opt_u64()?,
        history_samples: r.usize()?,
        history_resolution_ps: r.u64()?,
        samples: get_vec(r, |r| Ok([r.u64()?, r.u64()?]))?,
    })
}

fn put_job(w: &mut Writer, j: &JobRecord) {
    w.u64(j.bytes_sent);
    w.usize(j.steps_done);
    put_vec(w, &j.steps, |w, (i, t)| {
        w.u32(*i);
        w.time(*t);
    });
    w.opt_time(j.started_at);
    w.opt_time(j.finished_at);
    w.bool(j.buffer.is_some());
    w.bytes(j.buffer.as_deref().unwrap_or_default());
}

fn get_job(r: &mut Reader<'_>) -> Result<JobRecord, EngineError> {
    Ok(JobRecord {
        bytes_sent: r.u64()?,
        steps_done: r.usize()?,
        steps: get_vec(r, |r| Ok((r.u32()?, r.time()?)))?,
        started_at: r.opt_time()?,
        finished_at: r.opt_time()?,
        buffer: {
            let some = r.bool()?;
            let b = r.bytes()?;
            some.then(|| b.to_vec())
        },
    })
}

fn put_recovery(w: &mut Writer, x: &Recovery) {
    w.u32(x.peer);
    w.u8(x.class);
    w.time(x.start);
    w.opt_time(x.end);
}

fn get_recovery(r: &mut Reader<'_>) -> Result<Recovery, EngineError> {
    Ok(Recovery {
        peer: r.u32()?,
        class: r.u8()?,
        start: r.time()?,
        end: r.opt_time()?,
    })
}

fn put_strings(w: &mut Writer, v: &[String]) {
    put_vec(w, v, |w, s| w.str(s));
}

fn get_strings(r: &mut Reader<'_>) -> Result<Vec<String>, EngineError> {
    get_vec(r, |r| r.string())
}

fn put_host(w: &mut Writer, h: &HostFacts) {
    put_vec(w, &h.received, |w, d| {
        w.u32(d.src);
        w.u32(d.imm);
        w.time(d.delivered_at);
        w.u8(match d.data_ok {
            None => 0,
            Some(false) => 1,
            Some(true) => 2,
        });
    });
    put_vec(w, &h.acked, |w, (tag, t)| {
        w.u64(*tag);
        w.time(*t);
    });
    put_host_stats(w, &h.stats);
    put_vec(w, &h.qp_rates, put_qp);
    w.bool(h.watch.is_some());
    if let Some(x) = &h.watch {
        put_vec(w, &x.messages, |w, (a, b)| {
            w.u64(*a);
            w.u64(*b);
        });
        put_vec(w, &x.recoveries, put_recovery);
    }
    put_vec(w, &h.jobs, put_job);
    put_strings(w, &h.collective_errors);
    w.bool(h.training.is_some());
    if let Some(t) = &h.training {
        put_vec(w, &t.records, |w, x| {
            w.opt_time(x.ready);
            w.opt_time(x.start);
            w.opt_time(x.end);
        });
        put_vec(w, &t.unmatched, |w, &(src, tag, len)| {
            w.u32(src);
            w.u64(tag);
            w.u64(len);
        });
        put_strings(w, &t.errors);
    }
}

/// `built`: the host as built, whose schedule is the one the rank ran.
fn get_host(r: &mut Reader<'_>, built: &Node) -> Result<HostFacts, EngineError> {
    let received = get_vec(r, |r| {
        Ok(Delivery {
            src: r.u32()?,
            imm: r.u32()?,
            delivered_at: r.time()?,
            data_ok: match r.u8()? {
                0 => None,
                x => Some(x == 2),
            },
        })
    })?;
    let acked = get_vec(r, |r| Ok((r.u64()?, r.time()?)))?;
    let stats = get_host_stats(r)?;
    let qp_rates = get_vec(r, get_qp)?;
    let watch = if r.bool()? {
        Some(WatchFacts {
            messages: get_vec(r, |r| Ok((r.u64()?, r.u64()?)))?,
            recoveries: get_vec(r, get_recovery)?,
        })
    } else {
        None
    };
    let jobs = get_vec(r, get_job)?;
    let collective_errors = get_strings(r)?;
    let training = if r.bool()? {
        let records = get_vec(r, |r| {
            Ok(NodeRecord {
                ready: r.opt_time()?,
                start: r.opt_time()?,
                end: r.opt_time()?,
            })
        })?;
        let unmatched = get_vec(r, |r| Ok((r.u32()?, r.u64()?, r.u64()?)))?;
        let errors = get_strings(r)?;
        let nodes = match built {
            Node::Host(h) => h.app.training.as_deref().map(|s| s.shared_nodes()),
            Node::Switch(_) => None,
        }
        .ok_or_else(|| mismatch("a training rank's facts for an actor without a schedule"))?;
        Some(TrainingFacts {
            nodes,
            records,
            unmatched,
            errors,
        })
    } else {
        None
    };
    Ok(HostFacts {
        received,
        acked,
        stats,
        qp_rates,
        watch,
        jobs,
        collective_errors,
        training,
    })
}

fn put_switch(w: &mut Writer, s: &SwitchFacts) {
    put_switch_stats(w, &s.stats);
    w.u64(s.dropped_packets);
    w.usize(s.queued_packets);
    w.u64(s.priority_inversions);
    w.u64(s.paused_time_ps);
    put_vec(w, &s.ports, put_port);
    put_vec(w, &s.classes, |w, c| put_vec(w, c, put_class));
    put_vec(w, &s.blocked, |w, b| {
        w.usize(b.port);
        w.u8(b.priorities);
    });
}

fn get_switch(r: &mut Reader<'_>) -> Result<SwitchFacts, EngineError> {
    Ok(SwitchFacts {
        stats: get_switch_stats(r)?,
        dropped_packets: r.u64()?,
        queued_packets: r.usize()?,
        priority_inversions: r.u64()?,
        paused_time_ps: r.u64()?,
        ports: get_vec(r, get_port)?,
        classes: get_vec(r, |r| get_vec(r, get_class))?,
        blocked: get_vec(r, |r| {
            Ok(Blocked {
                port: r.usize()?,
                priorities: r.u8()?,
            })
        })?,
    })
}

fn mismatch(what: &str) -> EngineError {
    EngineError::Failure(format!("facts gathered from another rank: {what}"))
}

/// Appends `facts` to `w`.
pub fn write(w: &mut Writer, facts: &ActorFacts) {
    match facts {
        ActorFacts::Host(h) => {
            w.u8(0);
            put_host(w, h);
        }
        ActorFacts::Switch(s) => {
            w.u8(1);
            put_switch(w, s);
        }
    }
}

/// Reads back what [`write()`] wrote for the actor `built` (the same actor as this process built
/// it, for what is static).
pub fn read(r: &mut Reader<'_>, built: &Node) -> Result<ActorFacts, EngineError> {
    match r.u8()? {
        0 => Ok(ActorFacts::Host(Box::new(get_host(r, built)?))),
        1 => Ok(ActorFacts::Switch(Box::new(get_switch(r)?))),
        k => Err(mismatch(&format!("unknown kind {k}"))),
    }
}
