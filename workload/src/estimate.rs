//! An iteration composed from the times of its pieces, as DistSim does (Lu et al. 2023): the
//! traces of a few ranks (one pipeline of the built-in model: the other replicas run the same
//! work on groups of the same shape) are played in virtual time with each compute node timed
//! by the device, and each collective and message taking a time the caller gives (measured
//! once on the fabric and reused for every node of the same shape and size). No fabric is
//! run, so thousands of strategies can be screened in the time one runs in full.
//!
//! The rules are the scheduler's ([`crate::scheduler`]): a node starts when its dependencies
//! are done; compute nodes take their stream (GPU or CPU) one at a time, the earliest in the
//! trace first; collectives run beside compute, those of one communicator one at a time in
//! trace order unless `concurrent`; a send takes its message's time; a receive finishes
//! when it is posted and its message has arrived.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap, VecDeque};

use fabemu_fabric::units::Time;

use crate::trace::{CollKind, Op, RankTrace};

/// Communication whose time the caller gives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Comm<'a> {
    /// A collective on a communicator group.
    Collective {
        /// The operation.
        kind: CollKind,
        /// Its size, as nccl-tests counts it.
        bytes: u64,
        /// The group's name.
        group: &'a str,
    },
    /// A point-to-point message between two ranks.
    Message {
        /// The sender's rank.
        from: usize,
        /// The receiver's rank.
        to: usize,
        /// Its size.
        bytes: u64,
    },
}

/// The composed iteration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Estimate {
    /// When the last node of any rank finished.
    pub finish: Time,
    /// Communication while no compute stream ran, summed over the ranks.
    pub exposed: Time,
}

/// An error: a rank, one of its nodes, and what is wrong.
pub type EstimateError = String;

/// Per rank: its compute nodes ready per stream (GPU 0, CPU 1), and when each stream frees.
struct Streams {
    ready: [BTreeSet<usize>; 2],
    busy: [bool; 2],
}

/// Plays `ranks` (global rank and trace) with `compute` timing compute and memory nodes and
/// `comm` timing communication. `concurrent`: collectives of one communicator may overlap.
pub fn estimate(
    ranks: &[(usize, RankTrace)],
    compute: &dyn Fn(&Op) -> Result<Time, String>,
    comm: &mut dyn FnMut(Comm<'_>) -> Result<Time, String>,
    concurrent: bool,
) -> Result<Estimate, EstimateError> {
    let index: BTreeMap<usize, usize> = ranks.iter().enumerate().map(|(i, r)| (r.0, i)).collect();
    // Dependencies and children per rank, with a communicator's collectives in trace order.
    let mut pending: Vec<Vec<usize>> = Vec::with_capacity(ranks.len());
    let mut children: Vec<Vec<Vec<usize>>> = Vec::with_capacity(ranks.len());
    for (_, t) in ranks {
        let mut deps: Vec<Vec<usize>> = t
            .nodes
            .iter()
            .map(|n| n.deps.iter().map(|&d| d as usize).collect())
            .collect();
        if !concurrent {
            let mut last: BTreeMap<&str, usize> = BTreeMap::new();
            for (i, n) in t.nodes.iter().enumerate() {
                if let Op::Collective { group: Some(g), .. } = &n.op {
                    if let Some(prev) = last.insert(g.as_str(), i) {
                        if !deps[i].contains(&prev) {
                            deps[i].push(prev);
                        }
                    }
                }
            }
        }
        let mut ch = vec![Vec::new(); t.nodes.len()];
        for (i, d) in deps.iter().enumerate() {
            for &p in d {
                let Some(c) = ch.get_mut(p) else {
                    return Err(format!("{}: node {i} depends on a missing node", t.file));
                };
                c.push(i);
            }
        }
        pending.push(deps.iter().map(Vec::len).collect());
        children.push(ch);
    }
    let mut s = Sim {
        ranks,
        index,
        events: BinaryHeap::new(),
        seq: 0,
        streams: ranks
            .iter()
            .map(|_| Streams {
                ready: [BTreeSet::new(), BTreeSet::new()],
                busy: [false; 2],
            })
            .collect(),
        arrivals: BTreeMap::new(),
        waiting: BTreeMap::new(),
        compute_spans: vec![Vec::new(); ranks.len()],
        comm_spans: vec![Vec::new(); ranks.len()],
        done: 0,
    };
    for (r, p) in pending.iter().enumerate() {
        for (i, &n) in p.iter().enumerate() {
            if n == 0 {
                s.ready(r, i, Time::ZERO, compute, comm)?;
            }
        }
    }
    let mut finish = Time::ZERO;
    while let Some(Reverse((now, _, r, i, what))) = s.events.pop() {
        finish = finish.max(now);
        match what {
            Event::Done => {}
            Event::StreamFree(k) => {
                s.streams[r].busy[k] = false;
            }
        }
        if let Event::Done = what {
            s.done += 1;
            for c in std::mem::take(&mut children[r][i]) {
                pending[r][c] -= 1;
                if pending[r][c] == 0 {
                    s.ready(r, c, now, compute, comm)?;
                }
            }
        }
        s.dispatch(r, now, compute)?;
    }
    let total: usize = ranks.iter().map(|(_, t)| t.nodes.len()).sum();
    if s.done != total {
        return Err(format!(
            "{} of {total} nodes never finished (a receive without its send?)",
            total - s.done
        ));
    }
    let exposed = (0..ranks.len())
        .map(|r| exposed(&mut s.comm_spans[r], &mut s.compute_spans[r]))
        .fold(Time::ZERO, |a, b| a + b);
    Ok(Estimate { finish, exposed })
}

/// What an event does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Event {
    /// The node finished.
    Done,
    /// A compute stream (0 GPU, 1 CPU) is free again.
    StreamFree(usize),
}

/// An event at its time: (time, sequence, rank index, node, event).
type Scheduled = (Time, u64, usize, usize, Event);

/// A message on its way: (from rank, to rank, tag).
type Key = (usize, usize, u64);

struct Sim<'a> {
    ranks: &'a [(usize, RankTrace)],
    index: BTreeMap<usize, usize>,
    /// (time, sequence, rank index, node, event), earliest first.
    events: BinaryHeap<Reverse<Scheduled>>,
    seq: u64,
    streams: Vec<Streams>,
    /// Messages sent and not yet received: when each was sent and arrives.
    arrivals: BTreeMap<Key, VecDeque<(Time, Time)>>,
    /// Receives posted before their message: (rank index, node, posted at).
    waiting: BTreeMap<Key, VecDeque<(usize, usize, Time)>>,
    compute_spans: Vec<Vec<(Time, Time)>>,
    comm_spans: Vec<Vec<(Time, Time)>>,
    done: usize,
}

impl Sim<'_> {
    fn at(&mut self, t: Time, r: usize, i: usize, e: Event) {
        self.seq += 1;
        self.events.push(Reverse((t, self.seq, r, i, e)));
    }

    /// Node `i` of rank index `r` has its dependencies done at `now`.
    fn ready(
        &mut self,
        r: usize,
        i: usize,
        now: Time,
        compute: &dyn Fn(&Op) -> Result<Time, String>,
        comm: &mut dyn FnMut(Comm<'_>) -> Result<Time, String>,
    ) -> Result<(), EstimateError> {
        let (rank, t) = &self.ranks[r];
        let node = &t.nodes[i];
        let err = |e: String| format!("{}: node {}: {e}", t.file, node.id);
        match &node.op {
            Op::Compute { cpu, .. } => {
                self.streams[r].ready[usize::from(*cpu)].insert(i);
                self.dispatch(r, now, compute)?;
            }
            Op::Memory { .. } => {
                self.streams[r].ready[0].insert(i);
                self.dispatch(r, now, compute)?;
            }
            Op::Marker { duration } => {
                self.at(now + duration.unwrap_or(Time::ZERO), r, i, Event::Done)
            }
            Op::Collective { kind, bytes, group } => {
                let d = comm(Comm::Collective {
                    kind: *kind,
                    bytes: *bytes,
                    group: group.as_deref().unwrap_or(""),
                })
                .map_err(err)?;
                self.comm_spans[r].push((now, now + d));
                self.at(now + d, r, i, Event::Done);
            }
            Op::Send { peer, bytes, tag } => {
                let to = *peer as usize;
                let d = comm(Comm::Message {
                    from: *rank,
                    to,
                    bytes: *bytes,
                })
                .map_err(err)?;
                self.comm_spans[r].push((now, now + d));
                self.at(now + d, r, i, Event::Done);
                let key = (*rank, to, *tag);
                match self.waiting.get_mut(&key).and_then(VecDeque::pop_front) {
                    Some((rr, ii, posted)) => self.received(rr, ii, posted, (now, now + d)),
                    None => self
                        .arrivals
                        .entry(key)
                        .or_default()
                        .push_back((now, now + d)),
                }
            }
            Op::Recv { peer, tag, .. } => {
                let from = *peer as usize;
                if !self.index.contains_key(&from) {
                    return Err(err(format!("its sender, rank {from}, is not played")));
                }
                let key = (from, *rank, *tag);
                match self.arrivals.get_mut(&key).and_then(VecDeque::pop_front) {
                    Some(msg) => self.received(r, i, now, msg),
                    None => self.waiting.entry(key).or_default().push_back((r, i, now)),
                }
            }
        }
        Ok(())
    }

    /// A receive posted at `posted` takes the message sent at `sent` arriving at `arrives`:
    /// it communicates from when both were there.
    fn received(&mut self, r: usize, i: usize, posted: Time, (sent, arrives): (Time, Time)) {
        let end = arrives.max(posted);
        self.comm_spans[r].push((posted.max(sent), end));
        self.at(end, r, i, Event::Done);
    }

    /// Starts the earliest ready compute node on each free stream of rank index `r`.
    fn dispatch(
        &mut self,
        r: usize,
        now: Time,
        compute: &dyn Fn(&Op) -> Result<Time, String>,
    ) -> Result<(), EstimateError> {
        for k in 0..2 {
            if self.streams[r].busy[k] {
                continue;
            }
            let Some(i) = self.streams[r].ready[k].pop_first() else {
                continue;
            };
            let t = &self.ranks[r].1;
            let d = compute(&t.nodes[i].op)
                .map_err(|e| format!("{}: node {}: {e}", t.file, t.nodes[i].id))?;
            self.streams[r].busy[k] = true;
            self.compute_spans[r].push((now, now + d));
            // The node's children are ready before the stream picks its next node.
            self.at(now + d, r, i, Event::Done);
            self.at(now + d, r, i, Event::StreamFree(k));
        }
        Ok(())
    }
}

/// Time covered by `comm` and not by `compute` (both lists of spans, sorted here).
fn exposed(comm: &mut [(Time, Time)], compute: &mut [(Time, Time)]) -> Time {
    let a = union(comm);
    let b = union(compute);
    let total: u64 = a.iter().map(|(s, e)| e.0 - s.0).sum();
    let (mut overlap, mut j) = (0u64, 0usize);
    for &(s, e) in &a {
        while j < b.len() && b[j].1 <= s {
            j += 1;
        }
        let mut k = j;
        while k < b.len() && b[k].0 < e {
            overlap += e.min(b[k].1).0 - s.max(b[k].0).0;
            k += 1;
        }
    }
    Time(total - overlap)
}

/// The spans merged into disjoint ones, in order.
fn union(spans: &mut [(Time, Time)]) -> Vec<(Time, Time)> {
    spans.sort_unstable();
    let mut out: Vec<(Time, Time)> = Vec::with_capacity(spans.len());
    for &(s, e) in spans.iter() {
        match out.last_mut() {
            Some(last) if s <= last.1 => last.1 = last.1.max(e),
            _ => out.push((s, e)),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::TraceNode;

    fn node(id: u64, op: Op, deps: &[u32]) -> TraceNode {
        TraceNode {
            id,
            name: String::new(),
            op,
            deps: deps.to_vec(),
        }
    }

    fn work(us: u64) -> Op {
        Op::Compute {
            cpu: false,
            duration: Some(Time::from_us(us)),
            num_ops: None,
            tensor_bytes: None,
        }
    }

    fn timed(op: &Op) -> Result<Time, String> {
        match op {
            Op::Compute { duration, .. } => Ok(duration.unwrap_or(Time::ZERO)),
            _ => Ok(Time::ZERO),
        }
    }

    #[test]
    fn two_stages_wait_for_the_message_and_overlap_the_collective() {
        // Rank 0: compute 100 us, send (10 us), then a 50 us collective beside 30 us of
        // compute. Rank 1: receive, compute 100 us.
        let r0 = RankTrace {
            file: "r0".into(),
            version: String::new(),
            nodes: vec![
                node(0, work(100), &[]),
                node(
                    1,
                    Op::Send {
                        peer: 1,
                        bytes: 8,
                        tag: 7,
                    },
                    &[0],
                ),
                node(
                    2,
                    Op::Collective {
                        kind: CollKind::AllReduce,
                        bytes: 64,
                        group: Some("dp".into()),
                    },
                    &[0],
                ),
                node(3, work(30), &[0]),
            ],
        };
        let r1 = RankTrace {
            file: "r1".into(),
            version: String::new(),
            nodes: vec![
                node(
                    0,
                    Op::Recv {
                        peer: 0,
                        bytes: 8,
                        tag: 7,
                    },
                    &[],
                ),
                node(1, work(100), &[0]),
            ],
        };
        let mut comm = |c: Comm<'_>| {
            Ok(match c {
                Comm::Collective { .. } => Time::from_us(50),
                Comm::Message { .. } => Time::from_us(10),
            })
        };
        let e = estimate(&[(0, r0), (1, r1)], &timed, &mut comm, false).unwrap();
        // Rank 1 finishes at 100 + 10 + 100 us.
        assert_eq!(e.finish, Time::from_us(210));
        // Rank 0 exposes 50 - 30 = 20 us after its compute (the send overlaps it too);
        // rank 1's receive from the send at 100 us to 110 us is all exposed.
        assert_eq!(e.exposed, Time::from_us(30));
    }
}
