//! One run spread over MPI ranks (the `mpi` feature), with the same results as one thread.
//!
//! Every rank builds the same world and the same partition plan, for `ranks x threads`
//! partitions; rank `r` runs a contiguous block of them on its own threads, exactly as
//! [`super::run`] does. When the caller knows which actors exchange most of their frames among
//! themselves (a fat-tree's pods, a leaf-spine's leaves with their hosts), it passes them as
//! groups and whole groups go to each rank ([`partition::plan_grouped`]); otherwise the engine's
//! plan is cut into blocks (it lays partitions out in breadth-first order, so neighbouring
//! partitions, which exchange the most frames, tend to share a rank). Only the window boundary
//! changes (the engine's `Exchange`): frames for partitions of other ranks are encoded
//! ([`super::codec`]) and swapped with one `MPI_Alltoallv`, after one `MPI_Alltoall` that
//! carries, with the byte counts, every rank's earliest pending event, halt request and cancel
//! flag, so that all ranks take the same next window. Event keys do not depend on the
//! partitioning (see [`super`]), so every actor sees the same history as in a one-thread run.
//!
//! MPI calls stay on the thread that called [`run`] (`MPI_THREAD_FUNNELED` suffices): the
//! worker closing a window hands the rank's outgoing frames to it and waits for the answer.
//!
//! At the end rank 0 gathers the counters and the actors' final state. Actors are not
//! serialised whole: rank 0 holds every actor as built (it built the whole world), and the
//! caller's [`ActorState`] writes what of an actor's final state it will read, and restores it
//! into the actor as built. Capture and time series are gathered as the threads' are merged:
//! every partition's capture buffer goes to rank 0 whole, which merges them with the same
//! function and so in the same order (time, actor, port, direction, origin); the series are
//! first brought to the interval and length of the whole run (the maximum over all ranks of
//! the interval each partition reached, its traffic's end and the longest busy series: two
//! reductions), each rank takes its actors' missing snapshots itself, and rank 0 lays out what
//! every actor's rank sent.
//!
//! A rank whose run fails prints the error with its rank and aborts the job
//! (`MPI_Abort`): its peers would otherwise wait for it at the next window forever.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

use crossbeam::channel::{bounded, Receiver, Sender};
use mpi::collective::SystemOperation;
use mpi::datatype::{Partition as Parts, PartitionMut};
use mpi::traits::{CommunicatorCollectives, Root};
use mpi::Count;

use super::capture::{self, CaptureBuf};
use super::codec::{Reader, Writer};
use super::exchange::{Bound, Exchange, NextWindow};
use super::parallel;
use super::worker::{Partition, Remote};
use super::{
    partition, sample, Actor, EngineConfig, EngineError, EngineLayout, EngineStats, FaultOutput,
    PortStats, Progress, RunOutput, Wiring,
};
use crate::fault::{FaultCounts, FaultHit};
use crate::units::Time;

/// What of an actor's final state crosses from its rank to rank 0 at the end of a run.
pub trait ActorState<A> {
    /// Writes what the caller reads of `actor` after the run.
    fn save(&self, actor: &A, out: &mut Writer);
    /// Restores what [`ActorState::save`] wrote into `actor`, the same actor as it was built.
    fn restore(&self, actor: &mut A, input: &mut Reader<'_>) -> Result<(), EngineError>;
}

/// How a run spread over ranks went (every rank has it).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RankStats {
    /// This process's rank.
    pub rank: usize,
    /// Ranks in the run.
    pub ranks: usize,
    /// Partitions this rank ran.
    pub partitions: usize,
    /// Frames this rank sent to other ranks.
    pub frames_out: u64,
    /// Bytes of those frames, encoded.
    pub bytes_out: u64,
    /// Frames all ranks sent to other ranks (known on rank 0 only; 0 elsewhere).
    pub frames_crossing: u64,
    /// True when the caller's groups placed the actors ([`partition::plan_grouped`]); false
    /// when the engine's own plan was cut into blocks of partitions.
    pub grouped: bool,
    /// The lookahead: the longest a window can last (ps).
    pub lookahead_ps: u64,
    /// Windows run.
    pub windows: u64,
}

/// The result of [`run`]: the run's output on rank 0 (`None` on the others) and how the ranks
/// shared it.
pub struct MpiOutput<A> {
    /// What [`super::run`] returns, on rank 0.
    pub output: Option<RunOutput<A>>,
    /// This rank's share.
    pub ranks: RankStats,
}

/// A window closing: this rank's bound and its frames for each rank.
type Request = (Bound, Vec<Writer>);
/// The answer: the bound of all ranks and the frames for each local partition.
type Answer = Result<(Bound, Vec<Vec<Remote>>), EngineError>;

/// The workers' side of the exchange: keeps frames for other ranks, and closes a window through
/// the thread that owns MPI.
struct Proxy {
    owner: Vec<usize>,
    local: Vec<Option<usize>>,
    posted: Mutex<Vec<Writer>>,
    requests: Sender<Request>,
    answers: Receiver<Answer>,
    /// Frames posted (for the ranks' statistics).
    frames: AtomicU64,
}

impl Exchange for Proxy {
    fn local(&self, part: usize) -> Option<usize> {
        self.local.get(part).copied().flatten()
    }

    fn post(&self, part: usize, frames: Vec<Remote>) {
        let mut posted = self.posted.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(w) = self.owner.get(part).and_then(|&r| posted.get_mut(r)) {
            self.frames
                .fetch_add(frames.len() as u64, Ordering::Relaxed);
            for f in &frames {
                w.u32(part as u32);
                w.remote(f);
            }
        }
    }

    fn close(
        &self,
        mine: Bound,
        deliver: &mut dyn FnMut(usize, Vec<Remote>),
    ) -> Result<Bound, EngineError> {
        let outs = {
            let mut posted = self.posted.lock().unwrap_or_else(PoisonError::into_inner);
            let fresh = (0..posted.len()).map(|_| Writer::default()).collect();
            std::mem::replace(&mut *posted, fresh)
        };
        let gone = || EngineError::Failure("the MPI thread of this rank stopped".into());
        self.requests.send((mine, outs)).map_err(|_| gone())?;
        let (all, frames) = self.answers.recv().map_err(|_| gone())??;
        for (i, f) in frames.into_iter().enumerate() {
            if !f.is_empty() {
                deliver(i, f);
            }
        }
        Ok(all)
    }
}

/// The MPI side of the exchange, on the thread that called [`run`].
struct Ranks<'c, C> {
    comm: &'c C,
    size: usize,
    local: Vec<Option<usize>>,
    n_local: usize,
    frames_out: u64,
    bytes_out: u64,
}

fn counts(lens: impl Iterator<Item = u64>) -> Result<(Vec<Count>, Vec<Count>), EngineError> {
    let big = || EngineError::Failure("more than 2 GiB of frames for one rank in a window".into());
    let mut c = Vec::new();
    let mut d = Vec::new();
    let mut at: Count = 0;
    for l in lens {
        let l = Count::try_from(l).map_err(|_| big())?;
        c.push(l);
        d.push(at);
        at = at.checked_add(l).ok_or_else(big)?;
    }
    Ok((c, d))
}

impl<C: CommunicatorCollectives> Ranks<'_, C> {
    /// Closes a window for all ranks: see the module documentation.
    fn close(&mut self, mine: Bound, outs: Vec<Writer>) -> Answer {
        let mut head = Vec::with_capacity(4 * self.size);
        for w in &outs {
            head.extend([
                w.buf.len() as u64,
                mine.next,
                mine.halt,
                u64::from(mine.cancel),
            ]);
        }
        let mut heads = vec![0u64; 4 * self.size];
        self.comm.all_to_all_into(&head[..], &mut heads[..]);
        let mut all = Bound::IDLE;
        for h in heads.chunks_exact(4) {
            all = all.meet(Bound {
                next: h[1],
                halt: h[2],
                cancel: h[3] != 0,
            });
        }
        let (sc, sd) = counts(outs.iter().map(|w| w.buf.len() as u64))?;
        let (rc, rd) = counts(heads.chunks_exact(4).map(|h| h[0]))?;
        let mut send: Vec<u8> = outs.into_iter().flat_map(|w| w.buf).collect();
        self.bytes_out += send.len() as u64;
        let total: usize = rc.iter().map(|&c| c as usize).sum();
        // Never an empty buffer: its dangling address (1) is OpenMPI's `MPI_IN_PLACE`. The
        // extra byte is outside every count.
        send.push(0);
        let mut recv = vec![0u8; total + 1];
        {
            let s = Parts::new(&send[..], sc, sd);
            let mut r = PartitionMut::new(&mut recv[..], rc, rd);
            self.comm.all_to_all_varcount_into(&s, &mut r);
        }
        let mut frames: Vec<Vec<Remote>> = (0..self.n_local).map(|_| Vec::new()).collect();
        let mut rd = Reader::new(&recv[..total]);
        while !rd.is_empty() {
            let part = rd.u32()? as usize;
            let f = rd.remote()?;
            match self.local.get(part).copied().flatten() {
                Some(l) => frames[l].push(f),
                None => {
                    return Err(EngineError::Failure(format!(
                        "a frame for partition {part} reached a rank that does not run it"
                    )))
                }
            }
        }
        Ok((all, frames))
    }
}

/// Runs `actors` wired by `wiring` over the ranks of `comm`, `cfg.threads` threads each; every
/// rank calls it with the same actors, wiring, configuration and `groups` (the group of each
/// actor, see [`partition::plan_grouped`]; `None`, or groups that cannot be used, leave the
/// placement to the engine's plan). Rank 0 gets the output that
/// [`super::run`] would give with any thread count (actors restored through `state`); the
/// others `None`. Capture and sampling give what [`super::run`] gives with one thread.
///
/// A rank whose run fails prints the error naming the rank and aborts all ranks.
pub fn run<A, C, S>(
    actors: Vec<A>,
    wiring: &Wiring,
    cfg: &EngineConfig,
    progress: Option<&Progress>,
    comm: &C,
    state: &S,
    groups: Option<&[u32]>,
) -> Result<MpiOutput<A>, EngineError>
where
    A: Actor,
    C: CommunicatorCollectives,
    S: ActorState<A>,
{
    super::check_world(actors.len(), wiring)?;
    let rank = comm.rank() as usize;
    let size = comm.size() as usize;
    match run_rank(
        actors, wiring, cfg, progress, comm, state, groups, rank, size,
    ) {
        Ok(out) => Ok(out),
        Err(e) => {
            eprintln!("fabemu: MPI rank {rank} of {size} failed: {e}; aborting all ranks");
            comm.abort(3)
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn run_rank<A, C, S>(
    actors: Vec<A>,
    wiring: &Wiring,
    cfg: &EngineConfig,
    progress: Option<&Progress>,
    comm: &C,
    state: &S,
    groups: Option<&[u32]>,
    rank: usize,
    size: usize,
) -> Result<MpiOutput<A>, EngineError>
where
    A: Actor,
    C: CommunicatorCollectives,
    S: ActorState<A>,
{
    let place = Placement::new(wiring, groups, size, cfg.threads.max(1), rank);
    let n_actors = actors.len();
    let (mut mine, built, grace) = split_partitions(actors, wiring, &place, cfg, rank);
    let default_progress = Progress::default();
    let progress = progress.unwrap_or(&default_progress);
    let mut ranks = Ranks {
        comm,
        size,
        local: place.local.clone(),
        n_local: place.n_local,
        frames_out: 0,
        bytes_out: 0,
    };
    let (windows, cancelled) = if mine.is_empty() {
        exchange_until_finished(&mut ranks, cfg, grace, place.plan.lookahead, progress)?
    } else {
        run_local_partitions(&mut mine, &mut ranks, &place, cfg, progress)?
    };
    let observed = pack_observed(comm, &mut mine, cfg);
    let (part, gathered) = pack_rank_part(mine, cfg, ranks.frames_out, rank, state, &observed);
    let mut rank_stats = RankStats {
        rank,
        ranks: size,
        partitions: place.n_local,
        frames_out: ranks.frames_out,
        bytes_out: ranks.bytes_out,
        frames_crossing: 0,
        grouped: place.grouped,
        lookahead_ps: place.plan.lookahead.ps(),
        windows,
    };
    let Some((lens, all)) = gather_at_root(comm, rank, size, &part)? else {
        return Ok(MpiOutput {
            output: None,
            ranks: rank_stats,
        });
    };
    let mut slots: super::Slots<A> = (0..n_actors).map(|_| None).collect();
    for (gid, a, ports) in gathered {
        slots[gid as usize] = Some((a, ports));
    }
    for p in built {
        for (gid, a, ports) in p.into_actors() {
            slots[gid as usize] = Some((a, ports));
        }
    }
    let g = unpack_rank_parts(&lens, &all, &mut slots, cfg, state)?;
    rank_stats.frames_crossing = g.frames_crossing;
    let capture = cfg
        .capture
        .as_ref()
        .map(|cc| capture::merge(g.capture, cc, cfg.until));
    let samples = g
        .samples
        .map(|(interval, buckets, series)| sample::lay_out(series, interval, buckets, n_actors));
    let (actors_out, port_stats) = super::in_id_order(slots)?;
    Ok(MpiOutput {
        output: Some(RunOutput {
            actors: actors_out,
            port_stats,
            stats: g.stats,
            layout: EngineLayout {
                partitions: place.plan.parts,
                lookahead: place.plan.lookahead,
                windows,
            },
            capture,
            samples,
            cancelled,
            faults: g.faults,
        }),
        ranks: rank_stats,
    })
}

/// Which rank runs which partition, the same on every rank.
struct Placement {
    plan: partition::Plan,
    /// The rank of every partition.
    owner: Vec<usize>,
    /// Of every partition, its index among this rank's partitions (`None`: another rank's).
    local: Vec<Option<usize>>,
    /// Partitions this rank runs.
    n_local: usize,
    /// True when the caller's groups placed the actors.
    grouped: bool,
}

impl Placement {
    fn new(
        wiring: &Wiring,
        groups: Option<&[u32]>,
        size: usize,
        threads: usize,
        rank: usize,
    ) -> Placement {
        let grouped = groups.and_then(|g| partition::plan_grouped(wiring, g, size, threads));
        let is_grouped = grouped.is_some();
        let (plan, owner) = grouped.unwrap_or_else(|| {
            let plan = partition::plan(wiring, size * threads);
            // Contiguous blocks of partitions per rank (with fewer partitions than ranks, some
            // ranks have none and only take part in the windows' exchanges).
            let owner = (0..plan.parts).map(|p| p * size / plan.parts).collect();
            (plan, owner)
        });
        let mut local = vec![None; plan.parts];
        let mut n_local = 0;
        for (p, &r) in owner.iter().enumerate() {
            if r == rank {
                local[p] = Some(n_local);
                n_local += 1;
            }
        }
        Placement {
            plan,
            owner,
            local,
            n_local,
            grouped: is_grouped,
        }
    }
}

/// Builds every partition and keeps this rank's (and, on rank 0, the others' as built, to
/// restore their final state into), with the halt grace.
#[allow(clippy::type_complexity)]
fn split_partitions<A: Actor>(
    actors: Vec<A>,
    wiring: &Wiring,
    place: &Placement,
    cfg: &EngineConfig,
    rank: usize,
) -> (Vec<Partition<A>>, Vec<Partition<A>>, u64) {
    let (mut mine, theirs): (Vec<_>, Vec<_>) = Partition::build(actors, wiring, &place.plan, cfg)
        .into_iter()
        .enumerate()
        .partition(|(p, _)| place.owner[*p] == rank);
    let grace = mine
        .first()
        .or(theirs.first())
        .map_or(1, |(_, p)| p.state.halt_grace);
    let built: Vec<Partition<A>> = if rank == 0 {
        theirs.into_iter().map(|(_, p)| p).collect()
    } else {
        drop(theirs);
        Vec::new()
    };
    let mine: Vec<Partition<A>> = mine.drain(..).map(|(_, p)| p).collect();
    (mine, built, grace)
}

/// A rank with nothing to run takes part in every window's exchange until the others finish
/// (passing on a cancel it gets): the windows run and whether the run was cancelled.
fn exchange_until_finished<C: CommunicatorCollectives>(
    ranks: &mut Ranks<'_, C>,
    cfg: &EngineConfig,
    grace: u64,
    lookahead: Time,
    progress: &Progress,
) -> Result<(u64, bool), EngineError> {
    let mut windows = 0;
    loop {
        let outs = (0..ranks.size).map(|_| Writer::default()).collect();
        let mine = Bound {
            cancel: progress.cancel.load(Ordering::Relaxed),
            ..Bound::IDLE
        };
        let (all, _) = ranks.close(mine, outs)?;
        match all.next_window(cfg.until, grace, lookahead) {
            NextWindow::Until(_) => windows += 1,
            NextWindow::Finished => return Ok((windows, false)),
            NextWindow::Cancelled => return Ok((windows, true)),
        }
    }
}

/// Runs this rank's partitions on worker threads while this thread closes the windows over MPI:
/// the windows run and whether the run was cancelled.
fn run_local_partitions<A: Actor, C: CommunicatorCollectives>(
    mine: &mut [Partition<A>],
    ranks: &mut Ranks<'_, C>,
    place: &Placement,
    cfg: &EngineConfig,
    progress: &Progress,
) -> Result<(u64, bool), EngineError> {
    let (requests, serve) = bounded::<Request>(1);
    let (answer, answers) = bounded::<Answer>(1);
    let proxy = Proxy {
        owner: place.owner.clone(),
        local: place.local.clone(),
        posted: Mutex::new((0..ranks.size).map(|_| Writer::default()).collect()),
        requests,
        answers,
        frames: AtomicU64::new(0),
    };
    let lookahead = place.plan.lookahead;
    let cores = std::thread::available_parallelism().map_or(1, |c| c.get());
    let frames_out = AtomicU64::new(0);
    let end = std::thread::scope(|s| {
        let parts = mine;
        let counted = &frames_out;
        let runner = s.spawn(move || {
            let r = parallel::run_parallel(parts, lookahead, cfg.until, cores, progress, &proxy);
            counted.store(proxy.frames.load(Ordering::Relaxed), Ordering::Relaxed);
            // Dropping the proxy ends the loop below.
            drop(proxy);
            r
        });
        while let Ok((bound, outs)) = serve.recv() {
            let a = ranks.close(bound, outs);
            if answer.send(a).is_err() {
                break;
            }
        }
        runner
            .join()
            .unwrap_or_else(|_| Err(EngineError::Failure("a worker thread panicked".into())))
    })?;
    ranks.frames_out = frames_out.into_inner();
    Ok((end.windows, end.cancelled))
}

/// This rank's capture buffers and time series for rank 0 (empty when neither is asked). The
/// series are brought to the run's interval and length first, which every rank takes part in.
fn pack_observed<A: Actor, C: CommunicatorCollectives>(
    comm: &C,
    mine: &mut [Partition<A>],
    cfg: &EngineConfig,
) -> Writer {
    let mut w = Writer::default();
    if cfg.capture.is_some() {
        let bufs: Vec<CaptureBuf> = mine
            .iter_mut()
            .filter_map(|p| p.state.capture.take())
            .collect();
        w.usize(bufs.len());
        for b in &bufs {
            b.write_to(&mut w);
        }
    }
    if let Some(sc) = &cfg.sample {
        let max = |mine: [u64; 3]| {
            let mut all = [0u64; 3];
            comm.all_reduce_into(&mine[..], &mut all[..], SystemOperation::max());
            all
        };
        let end = mine
            .iter()
            .map(|p| p.stats().end_time.ps())
            .max()
            .unwrap_or(0);
        let [reached, traffic_end] = sample::reach(mine);
        let [reached, traffic_end, end] = max([reached, traffic_end, end]);
        let (interval, end) = sample::interval_for(sc, [reached, traffic_end], Time(end));
        let [longest, ..] = max([sample::coarsen_all(mine, interval) as u64, 0, 0]);
        let buckets = (longest as usize).max(sample::buckets_for(end, interval));
        let series = sample::finish_all(mine, interval, buckets);
        w.u64(interval);
        w.usize(buckets);
        w.usize(series.len());
        for s in &series {
            sample::write_series(&mut w, s);
        }
    }
    w
}

/// This rank's part for rank 0: its counters and what [`pack_observed`] wrote, then (on the
/// other ranks) its actors' final state; rank 0 keeps its own actors whole.
#[allow(clippy::type_complexity)]
fn pack_rank_part<A: Actor, S: ActorState<A>>(
    mine: Vec<Partition<A>>,
    cfg: &EngineConfig,
    frames_out: u64,
    rank: usize,
    state: &S,
    observed: &Writer,
) -> (Writer, Vec<(u32, A, Vec<PortStats>)>) {
    let mut stats = EngineStats::default();
    for p in &mine {
        stats.absorb(&p.stats());
    }
    let mut faults = FaultOutput::empty(cfg.faults.entries);
    for p in &mine {
        p.state.fault_counts(&mut faults);
    }
    let mut w = Writer::default();
    put_stats(&mut w, &stats, frames_out);
    put_faults(&mut w, &faults);
    w.buf.extend_from_slice(&observed.buf);
    let mut gathered: Vec<(u32, A, Vec<PortStats>)> = Vec::new();
    for p in mine {
        for (gid, actor, ports) in p.into_actors() {
            if rank == 0 {
                gathered.push((gid, actor, ports));
            } else {
                w.u32(gid);
                w.usize(ports.len());
                for s in &ports {
                    put_port(&mut w, s);
                }
                state.save(&actor, &mut w);
            }
        }
    }
    (w, gathered)
}

/// Gathers every rank's part at rank 0: there, the length of each and all of them in rank
/// order; `None` on the other ranks.
#[allow(clippy::type_complexity)]
fn gather_at_root<C: CommunicatorCollectives>(
    comm: &C,
    rank: usize,
    size: usize,
    part: &Writer,
) -> Result<Option<(Vec<u64>, Vec<u8>)>, EngineError> {
    let root = comm.process_at_rank(0);
    let len = part.buf.len() as u64;
    if rank != 0 {
        root.gather_into(&len);
        root.gather_varcount_into(&part.buf[..]);
        return Ok(None);
    }
    let mut lens = vec![0u64; size];
    root.gather_into_root(&len, &mut lens[..]);
    let (c, d) = counts(lens.iter().copied())?;
    let mut all = vec![0u8; lens.iter().sum::<u64>() as usize];
    {
        let mut r = PartitionMut::new(&mut all[..], c, d);
        root.gather_varcount_into_root(&part.buf[..], &mut r);
    }
    Ok(Some((lens, all)))
}

/// What rank 0 gathers of all ranks besides the actors.
struct Gathered {
    stats: EngineStats,
    faults: FaultOutput,
    frames_crossing: u64,
    /// Every partition's capture buffer (empty without capture).
    capture: Vec<CaptureBuf>,
    /// The run's interval, buckets and every actor's series, when sampled.
    samples: Option<(u64, usize, Vec<sample::ActorSeries>)>,
}

/// Reads every rank's part, rank 0's first: sums the counters, collects the capture buffers
/// and series, and restores the other ranks' actors into `slots`.
fn unpack_rank_parts<A, S: ActorState<A>>(
    lens: &[u64],
    all: &[u8],
    slots: &mut super::Slots<A>,
    cfg: &EngineConfig,
    state: &S,
) -> Result<Gathered, EngineError> {
    let mut g = Gathered {
        stats: EngineStats::default(),
        faults: FaultOutput::empty(cfg.faults.entries),
        frames_crossing: 0,
        capture: Vec::new(),
        samples: None,
    };
    let mut at = 0;
    for &len in lens {
        let part = all.get(at..at + len as usize).unwrap_or_default();
        at += len as usize;
        let mut rd = Reader::new(part);
        let (s, f) = get_stats(&mut rd)?;
        g.stats.absorb(&s);
        g.frames_crossing += f;
        get_faults(&mut rd, &mut g.faults)?;
        if let Some(cc) = &cfg.capture {
            for _ in 0..rd.usize()? {
                g.capture.push(CaptureBuf::read_from(&mut rd, cc)?);
            }
        }
        if cfg.sample.is_some() {
            let (interval, buckets) = (rd.u64()?, rd.usize()?);
            let (_, _, series) = g
                .samples
                .get_or_insert_with(|| (interval, buckets, Vec::new()));
            for _ in 0..rd.usize()? {
                series.push(sample::read_series(&mut rd)?);
            }
        }
        while !rd.is_empty() {
            let gid = rd.u32()? as usize;
            let Some(Some((actor, ports))) = slots.get_mut(gid) else {
                return Err(EngineError::Failure(format!("actor {gid} gathered twice")));
            };
            let n = rd.usize()?;
            ports.clear();
            for _ in 0..n {
                ports.push(get_port(&mut rd)?);
            }
            state.restore(actor, &mut rd)?;
        }
    }
    g.faults.settle();
    Ok(g)
}

fn put_stats(w: &mut Writer, s: &EngineStats, frames_out: u64) {
    w.u64(s.events);
    w.u64(s.packet_hops);
    w.u64(s.end_time.ps());
    w.bool(s.stopped_at_limit);
    w.u64(s.halted_at.map_or(u64::MAX, Time::ps));
    w.u64(frames_out);
}

fn get_stats(r: &mut Reader<'_>) -> Result<(EngineStats, u64), EngineError> {
    let events = r.u64()?;
    let packet_hops = r.u64()?;
    let end_time = Time(r.u64()?);
    let stopped_at_limit = r.bool()?;
    let halted_at = match r.u64()? {
        u64::MAX => None,
        t => Some(Time(t)),
    };
    let frames = r.u64()?;
    Ok((
        EngineStats {
            events,
            packet_hops,
            end_time,
            stopped_at_limit,
            halted_at,
        },
        frames,
    ))
}

fn put_counts(w: &mut Writer, c: &FaultCounts) {
    w.u64(c.lost);
    w.u64(c.corrupted);
}

fn get_counts(r: &mut Reader<'_>) -> Result<FaultCounts, EngineError> {
    Ok(FaultCounts {
        lost: r.u64()?,
        corrupted: r.u64()?,
    })
}

fn put_faults(w: &mut Writer, f: &FaultOutput) {
    w.usize(f.entries.len());
    for c in &f.entries {
        put_counts(w, c);
    }
    w.usize(f.ports.len());
    for ((a, p), c) in &f.ports {
        w.u32(*a);
        w.usize(*p);
        put_counts(w, c);
    }
    w.usize(f.hits.len());
    for h in &f.hits {
        w.u32(h.entry);
        w.u32(u32::from(h.owner));
        w.u32(u32::from(h.peer));
        w.u32(h.class);
        w.u64(h.at.ps());
    }
}

fn get_faults(r: &mut Reader<'_>, f: &mut FaultOutput) -> Result<(), EngineError> {
    let n = r.usize()?;
    for i in 0..n {
        let c = get_counts(r)?;
        if let Some(e) = f.entries.get_mut(i) {
            e.lost += c.lost;
            e.corrupted += c.corrupted;
        }
    }
    for _ in 0..r.usize()? {
        let a = r.u32()?;
        let p = r.usize()?;
        f.ports.push(((a, p), get_counts(r)?));
    }
    for _ in 0..r.usize()? {
        f.hits.push(FaultHit {
            entry: r.u32()?,
            owner: r.u32()?.into(),
            peer: r.u32()?.into(),
            class: r.u32()?,
            at: Time(r.u64()?),
        });
    }
    Ok(())
}

fn put_port(w: &mut Writer, s: &PortStats) {
    w.u64(s.tx_packets);
    w.u64(s.tx_frame_bytes);
    w.u64(s.tx_wire_bytes);
    w.u64(s.busy.ps());
}

fn get_port(r: &mut Reader<'_>) -> Result<PortStats, EngineError> {
    Ok(PortStats {
        tx_packets: r.u64()?,
        tx_frame_bytes: r.u64()?,
        tx_wire_bytes: r.u64()?,
        busy: Time(r.u64()?),
    })
}
