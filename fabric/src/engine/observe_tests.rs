//! Capture and sampling on a three-actor chain with a known queue: a source sends N frames
//! back to back over 100 Gb/s to a forwarder whose next link runs at 50 Gb/s, so the
//! forwarder's queue grows by one frame every two serialization times.

use std::collections::VecDeque;

use super::*;
use crate::link::Rate;
use crate::packet::Payload;
use crate::units::Bandwidth;

const N: usize = 40;
const FRAME: usize = 1000;
/// Serialization of one frame (1000 B + 24 B Ethernet overhead) at 100 Gb/s (80 ps per byte).
const S: u64 = 1024 * 80;
const LAT: u64 = 1_000_000;

enum Node {
    Source { left: usize },
    Fwd { queue: VecDeque<Packet> },
    Sink,
}

fn frame() -> Packet {
    match Packet::new(&[0x11; 58], Payload::Timing((FRAME - 58) as u32), &[]) {
        Ok(p) => p,
        Err(e) => panic!("{e}"),
    }
}

impl Node {
    fn pump(&mut self, ctx: &mut Ctx<'_>) {
        match self {
            Node::Source { left } if *left > 0 && ctx.port_idle(0) => {
                *left -= 1;
                let _ = ctx.transmit(0, frame());
            }
            Node::Fwd { queue } if ctx.port_idle(1) => {
                if let Some(p) = queue.pop_front() {
                    let _ = ctx.transmit(1, p);
                }
            }
            _ => {}
        }
    }
}

impl Actor for Node {
    fn start(&mut self, ctx: &mut Ctx<'_>) {
        self.pump(ctx);
    }
    fn handle(&mut self, event: Event, ctx: &mut Ctx<'_>) {
        if let (Event::Packet { packet, .. }, Node::Fwd { queue }) = (event, &mut *self) {
            queue.push_back(packet);
        }
        self.pump(ctx);
    }
    fn sample(&self, out: &mut Vec<u64>) {
        if let Node::Fwd { queue } = self {
            out.push(queue.len() as u64);
        }
    }
}

fn chain() -> (Vec<Node>, Wiring) {
    let ch = |gbps| Channel {
        rate: Rate::new(Bandwidth::from_gbps(gbps)),
        latency: Time(LAT),
    };
    let w = |peer, peer_port, gbps| PortWiring {
        peer,
        peer_port,
        channel: ch(gbps),
    };
    let wiring = Wiring {
        ports: vec![
            vec![w(1, 0, 100)],
            vec![w(0, 0, 100), w(2, 0, 50)],
            vec![w(1, 1, 50)],
        ],
    };
    let nodes = vec![
        Node::Source { left: N },
        Node::Fwd {
            queue: VecDeque::new(),
        },
        Node::Sink,
    ];
    (nodes, wiring)
}

fn observed(threads: usize, interval: u64) -> RunOutput<Node> {
    let (nodes, wiring) = chain();
    let cfg = EngineConfig {
        threads,
        capture: Some(CaptureConfig {
            ports: vec![(1, 0), (1, 1)],
            ..CaptureConfig::default()
        }),
        sample: Some(SampleConfig {
            interval: Time(interval),
            max_buckets: None,
        }),
        ..EngineConfig::default()
    };
    match run(nodes, &wiring, &cfg, None) {
        Ok(o) => o,
        Err(e) => panic!("{e}"),
    }
}

/// Frame i reaches the forwarder at a_i = (i+1)S + LAT and starts leaving at d_i = a_0 + 2iS
/// (the 50 Gb/s port is busy from the first arrival on). Just before T the queue holds the
/// frames that arrived but have not started leaving.
fn depth_closed_form(t: u64) -> u64 {
    let a0 = S + LAT;
    let arrived = (0..N as u64).filter(|&i| a0 + i * S < t).count();
    let left = (0..N as u64).filter(|&i| a0 + 2 * i * S < t).count();
    (arrived - left) as u64
}

#[test]
fn queue_depth_snapshots_match_the_closed_form() {
    let interval = S / 3 + 7; // not aligned with the frames, on purpose
    let out = observed(1, interval);
    let Some(s) = &out.samples else {
        panic!("no samples")
    };
    assert_eq!(s.interval, Time(interval));
    assert_eq!(s.values[1].width, 1);
    assert_eq!(s.values[0].width, 0);
    assert!(s.buckets as u64 * interval > out.stats.end_time.ps());
    let mut max = 0;
    for k in 0..s.buckets {
        let want = depth_closed_form(k as u64 * interval);
        assert_eq!(s.values[1].at(k), &[want], "snapshot {k}");
        max = max.max(want);
    }
    // Just after the last arrival, (N-1)S after the first, N/2 frames have started leaving.
    assert_eq!(max, N as u64 / 2, "the queue peaks when the source stops");
}

#[test]
fn busy_time_per_bucket_is_exact() {
    let interval = 100_000;
    let out = observed(1, interval);
    let Some(s) = &out.samples else {
        panic!("no samples")
    };
    // The source's port is busy over [0, N·S) exactly.
    let busy = &s.busy_ps[0][0];
    let end = N as u64 * S;
    for (k, &b) in busy.iter().enumerate() {
        let (lo, hi) = (k as u64 * interval, (k as u64 + 1) * interval);
        let want = hi.min(end).saturating_sub(lo);
        assert_eq!(b, want, "bucket {k}");
    }
    assert_eq!(busy.iter().sum::<u64>(), out.port_stats[0][0].busy.ps());
    assert_eq!(
        s.busy_ps[1][1].iter().sum::<u64>(),
        out.port_stats[1][1].busy.ps()
    );
}

#[test]
fn capture_sees_both_directions_at_the_right_times() {
    let out = observed(1, 1_000_000);
    let Some(c) = &out.capture else {
        panic!("no capture")
    };
    assert_eq!(c.seen, 2 * N as u64);
    assert_eq!(c.frames.len(), 2 * N);
    assert_eq!(c.dropped, 0);
    let a0 = S + LAT;
    let ins: Vec<u64> = c
        .frames
        .iter()
        .filter(|f| f.direction == CaptureDirection::In)
        .map(|f| f.time.ps())
        .collect();
    let outs: Vec<u64> = c
        .frames
        .iter()
        .filter(|f| f.direction == CaptureDirection::Out)
        .map(|f| f.time.ps())
        .collect();
    let want_in: Vec<u64> = (0..N as u64).map(|i| a0 + i * S).collect();
    let want_out: Vec<u64> = (0..N as u64).map(|i| a0 + 2 * i * S).collect();
    assert_eq!(ins, want_in);
    assert_eq!(outs, want_out);
    assert!(c.frames.windows(2).all(|w| w[0] <= w[1]));
    assert!(c
        .frames
        .iter()
        .all(|f| f.actor == 1 && f.orig_len == FRAME as u32 && f.data.len() == 58));
}

#[test]
fn capture_and_series_do_not_depend_on_threads() {
    let one = observed(1, 50_000);
    let three = observed(3, 50_000);
    assert!(three.layout.partitions > 1);
    assert_eq!(one.capture, three.capture);
    assert_eq!(one.samples, three.samples);
    assert_eq!(one.stats, three.stats);
}

#[test]
fn adaptive_interval_ends_within_the_bucket_limit() {
    let (nodes, wiring) = chain();
    let cfg = EngineConfig {
        threads: 2,
        sample: Some(SampleConfig {
            interval: Time(1),
            max_buckets: Some(100),
        }),
        ..EngineConfig::default()
    };
    let out = match run(nodes, &wiring, &cfg, None) {
        Ok(o) => o,
        Err(e) => panic!("{e}"),
    };
    let Some(s) = &out.samples else {
        panic!("no samples")
    };
    // end ≈ 2·LAT + 2·N·S ≈ 8.6 us (the last frame's arrival): 100 ns buckets give 87 of
    // them, and one more whose snapshot shows the drained queue.
    assert_eq!(s.interval, Time(100_000));
    assert_eq!(s.buckets as u64, out.stats.end_time.ps() / 100_000 + 2);
    for k in 0..s.buckets {
        assert_eq!(s.values[1].at(k), &[depth_closed_form(k as u64 * 100_000)]);
    }
    assert_eq!(
        s.busy_ps[1][1].iter().sum::<u64>(),
        out.port_stats[1][1].busy.ps()
    );
}
