//! The executor over a toy network that lets ranks drift apart.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};

use super::*;
use crate::plan::{self, Algorithm, Layout, Plan};
use crate::Collective;

/// A toy network: each host's NIC sends one message after another at 1 byte/ps, and a
/// message takes a latency that varies per message (a hash of host and sequence number),
/// so ranks drift out of step and faster peers run ahead of a rank's window.
#[derive(Default)]
struct Net {
    now: u64,
    seq: u64,
    busy: Vec<u64>,
    /// Last delivery per (src, dst): queue pairs deliver in order.
    last: BTreeMap<(u32, u32), u64>,
    /// (time, seq, host, event): event `Ok((src, imm, len, data))` a delivery, `Err(token)`
    /// a timer.
    events: BinaryHeap<Reverse<(u64, u64, u32, Ev)>>,
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Ev {
    Msg(u32, u32, u64, Option<Vec<u8>>),
    Timer(u64),
}

struct Api<'a> {
    net: &'a mut Net,
    host: u32,
}

impl Transport for Api<'_> {
    fn now(&self) -> Time {
        Time(self.net.now)
    }
    fn host(&self) -> u32 {
        self.host
    }
    fn post_send(&mut self, dst: u32, tag: u64, len: u64, data: Option<Bytes>) -> bool {
        let net = &mut *self.net;
        net.seq += 1;
        let start = net.busy[self.host as usize].max(net.now);
        net.busy[self.host as usize] = start + len;
        let jitter = (u64::from(self.host) * 7919 + net.seq * 104_729) % 5_000;
        let last = net.last.entry((self.host, dst)).or_default();
        let at = (start + len + 1_000 + jitter).max(*last);
        *last = at;
        let ev = Ev::Msg(self.host, tag as u32, len, data.map(|b| b.to_vec()));
        net.events.push(Reverse((at, net.seq, dst, ev)));
        true
    }
    fn set_timer(&mut self, at: Time, token: u64) {
        self.net.seq += 1;
        let ev = Ev::Timer(token);
        self.net
            .events
            .push(Reverse((at.0, self.net.seq, self.host, ev)));
    }
}

fn run(jobs: Vec<Vec<Job>>) -> Vec<Vec<JobRecord>> {
    let n = jobs.len();
    let mut net = Net {
        busy: vec![0; n],
        ..Net::default()
    };
    let mut runners: Vec<CollectiveRunner> = jobs
        .into_iter()
        .enumerate()
        .map(|(r, j)| CollectiveRunner::new(r as u32, j))
        .collect();
    for (h, r) in runners.iter_mut().enumerate() {
        r.start(&mut Api {
            net: &mut net,
            host: h as u32,
        });
    }
    while let Some(Reverse((at, _, host, ev))) = net.events.pop() {
        net.now = at;
        let r = &mut runners[host as usize];
        let mut api = Api {
            net: &mut net,
            host,
        };
        match ev {
            Ev::Msg(src, imm, len, data) => r.on_completion(
                Completion::Received {
                    src,
                    imm,
                    len,
                    data: data.map(Bytes::from),
                },
                &mut api,
            ),
            Ev::Timer(t) => r.on_timer(t, &mut api),
        }
    }
    runners
        .into_iter()
        .map(|r| {
            assert!(r.errors.is_empty(), "{:?}", r.errors);
            r.into_records()
        })
        .collect()
}

/// The same ring All-Reduce, its programs listed (compiled) or generated on demand,
/// executed over the toy network: every step completes at the same picosecond and the
/// buffers are equal, in two consecutive jobs, with and without a reduction rate (measured:
/// identical too with the ring window cut to a single step, the window then growing only
/// for arriving messages).
#[test]
fn a_streamed_ring_runs_exactly_like_the_listed_one() {
    // 40 and 100 ranks: 156 and 396 steps per rank, well past the ring's window of 8.
    for n in [2usize, 3, 7, 16, 40, 100] {
        for reduce_rate in [None, Some(Bandwidth::from_gbps(1))] {
            let data = Some(DataSpec {
                dtype: DataType::F32,
                op: ReduceOp::Sum,
            });
            let (listed, streamed) = ring_jobs(n, 1000 + n, data, reduce_rate, 2);
            let (a, b) = (run(listed), run(streamed));
            for (r, (x, y)) in a.iter().zip(&b).enumerate() {
                // Middle ranks of a streamed job keep no step times (by design).
                let timed = r < STREAMED_TIMED_RANKS || r + STREAMED_TIMED_RANKS >= n;
                for (x, y) in x.iter().zip(y) {
                    assert!(x.finished_at.is_some());
                    assert_eq!(x.finished_at, y.finished_at, "n {n} rank {r}");
                    assert_eq!(x.steps_done, y.steps_done, "n {n} rank {r}");
                    assert_eq!(x.bytes_sent, y.bytes_sent, "n {n} rank {r}");
                    assert!(x.buffer == y.buffer, "n {n} rank {r}: buffers differ");
                    if timed {
                        assert_eq!(x.steps, y.steps, "n {n} rank {r}");
                    } else {
                        assert!(y.steps.is_empty());
                    }
                }
            }
        }
    }
}

/// A ring All-Reduce of `count` 4-byte elements on `n` ranks, `copies` jobs per rank one
/// after another: the listed programs and the streamed ones (per rank).
fn ring_jobs(
    n: usize,
    count: usize,
    data: Option<DataSpec>,
    reduce_rate: Option<Bandwidth>,
    copies: usize,
) -> (Vec<Vec<Job>>, Vec<Vec<Job>>) {
    let plan = Plan {
        op: Collective::AllReduce,
        ranks: n,
        count,
        root: 0,
        layout: Layout::Flat(Algorithm::Ring),
        chunks: 1,
        chunks_in_flight: 0,
    };
    let listed = plan::compile(&plan).unwrap();
    let gens = plan::stream(&plan).unwrap();
    let job = |program: Program, stream: Option<StepGen>| Job {
        program,
        start: JobStart::AfterPrevious,
        elem_bytes: 4,
        data,
        reduce_rate,
        hosts: None,
        class: 0,
        stream,
    };
    (
        (0..n)
            .map(|r| vec![job(listed[r].clone(), None); copies])
            .collect(),
        (0..n)
            .map(|r| vec![job(gens[r].header(), Some(gens[r])); copies])
            .collect(),
    )
}

/// Blocks longer than [`MAX_WRITE`] go as several writes and are put back together before
/// the receive applies them: a streamed ring (timing mode, uneven blocks, and even blocks
/// of 4 GiB, too long for [`RingProgress`]'s 32 bits; with and without a reduction rate) still
/// runs exactly like the listed one.
#[test]
fn a_streamed_ring_of_several_writes_per_message_runs_like_the_listed_one() {
    for n in [2usize, 3] {
        for reduce_rate in [None, Some(Bandwidth::from_gbps(100))] {
            for count in [n * (1 << 28) + 1, n << 30] {
                // 4-byte elements: every block is about 1 GiB + 1 element (two writes), or
                // exactly 4 GiB (four writes).
                let (listed, streamed) = ring_jobs(n, count, None, reduce_rate, 1);
                let (a, b) = (run(listed), run(streamed));
                assert_eq!(a, b, "n {n}");
                assert!(a.iter().all(|r| r[0].finished_at.is_some()));
            }
        }
    }
}

/// Past the 2048 jobs an 11-bit job field held: 2100 small All-Reduces one after another on
/// 3 ranks, listed and streamed, in data mode. Every job finishes with the same buffer as the
/// first (the same inputs reduce to the same values), so no message of job 2048 and beyond
/// was taken for an earlier job's.
#[test]
fn jobs_past_the_old_slot_boundary_run_and_reduce_correctly() {
    let copies = 2100;
    let data = Some(DataSpec {
        dtype: DataType::F32,
        op: ReduceOp::Sum,
    });
    let (listed, streamed) = ring_jobs(3, 12, data, None, copies);
    for jobs in [listed, streamed] {
        let records = run(jobs);
        for (r, rank) in records.iter().enumerate() {
            assert_eq!(rank.len(), copies);
            let first = rank[0].buffer.clone();
            assert!(first.is_some());
            for (j, rec) in rank.iter().enumerate() {
                assert!(rec.finished_at.is_some(), "rank {r} job {j} did not finish");
                assert_eq!(rec.buffer, first, "rank {r} job {j}");
            }
            // One after another: each job starts when the previous one finished here.
            for w in rank.windows(2) {
                assert!(w[1].started_at >= w[0].finished_at);
            }
        }
    }
}

/// A job whose channels its messages cannot name is an error from the start, not messages
/// delivered to the wrong channel.
#[test]
fn a_channel_beyond_the_immediate_is_an_error() {
    let (mut listed, _) = ring_jobs(2, 8, None, None, 1);
    for s in &mut listed[0][0].program.steps {
        if let StepKind::Send { channel, .. } | StepKind::Recv { channel, .. } = &mut s.kind {
            *channel = MAX_CHANNELS;
        }
    }
    let r = CollectiveRunner::new(0, listed[0].clone());
    assert_eq!(
        r.errors,
        vec![ExecError::TooManyChannels {
            rank: 0,
            job: 0,
            channel: MAX_CHANNELS
        }]
    );
}
