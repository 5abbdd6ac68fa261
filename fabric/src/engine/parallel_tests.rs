//! The parallel run's ways of ending: cancelled (every thread count stops, no worker left
//! waiting), and a failing worker (its peers released, the root cause reported). The actors are
//! a ring of forwarders that passes frames around forever, so only a cancel or a failure ends it.
//!
//! The bounded waits are hang checks (a run that has not ended after a minute is stuck), never
//! timing assertions.

use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::time::Duration;

use super::*;
use crate::link::Rate;
use crate::packet::Payload;
use crate::units::Bandwidth;

const RING: usize = 8;

/// Forwards every frame to the right; `bomb` panics at the first frame after that time.
struct Fwd {
    bomb: Option<Time>,
}

fn frame() -> Packet {
    match Packet::new(&[0x22; 58], Payload::Timing(200), &[]) {
        Ok(p) => p,
        Err(e) => panic!("{e}"),
    }
}

impl Actor for Fwd {
    fn start(&mut self, ctx: &mut Ctx<'_>) {
        let _ = ctx.transmit(1, frame());
    }
    fn handle(&mut self, event: Event, ctx: &mut Ctx<'_>) {
        if let Event::Packet { packet, .. } = event {
            if self.bomb.is_some_and(|t| ctx.now() >= t) {
                panic!("boom");
            }
            // One frame per actor circulates and serialization is far shorter than the
            // latency, so the port is idle; a refused frame would only end the test sooner.
            let _ = ctx.transmit(1, packet);
        }
    }
}

/// Port 0 is the left neighbour, port 1 the right one; 1 us links.
fn ring(bomb_at: Option<(usize, Time)>) -> (Vec<Fwd>, Wiring) {
    let channel = Channel {
        rate: Rate::new(Bandwidth::from_gbps(100)),
        latency: Time(1_000_000),
    };
    let ports = (0..RING)
        .map(|i| {
            let (left, right) = ((i + RING - 1) % RING, (i + 1) % RING);
            vec![
                PortWiring {
                    peer: left as u32,
                    peer_port: 1,
                    channel,
                },
                PortWiring {
                    peer: right as u32,
                    peer_port: 0,
                    channel,
                },
            ]
        })
        .collect();
    let actors = (0..RING)
        .map(|i| Fwd {
            bomb: bomb_at.and_then(|(a, t)| (a == i).then_some(t)),
        })
        .collect();
    (actors, Wiring { ports })
}

/// Runs the ring on `threads` threads in a thread of its own; `cancel_after` events have been
/// counted, sets the cancel flag. Fails the test when the run has not ended within a minute.
fn run_ring(
    threads: usize,
    bomb_at: Option<(usize, Time)>,
    cancel_after: Option<u64>,
) -> Result<(bool, u64, usize), EngineError> {
    let progress = std::sync::Arc::new(Progress::default());
    let (tx, rx) = mpsc::channel();
    let p = progress.clone();
    std::thread::spawn(move || {
        let (actors, wiring) = ring(bomb_at);
        let cfg = EngineConfig {
            threads,
            ..EngineConfig::default()
        };
        let r = run(actors, &wiring, &cfg, Some(&p))
            .map(|o| (o.cancelled, o.stats.events, o.layout.partitions));
        let _ = tx.send(r);
    });
    for _ in 0..6000 {
        if let Some(n) = cancel_after {
            if progress.events.load(Ordering::Relaxed) >= n {
                progress.cancel.store(true, Ordering::Relaxed);
            }
        }
        match rx.recv_timeout(Duration::from_millis(10)) {
            Ok(r) => return r,
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(e) => panic!("the run's thread died: {e}"),
        }
    }
    panic!("{threads} threads: the run did not end within a minute (hang)");
}

#[test]
fn cancel_stops_every_thread_count() {
    for threads in [1, 2, 4, 8] {
        let r = run_ring(threads, None, Some(200_000));
        let Ok((cancelled, events, parts)) = r else {
            panic!("{threads} threads: {r:?}");
        };
        assert!(cancelled, "{threads} threads");
        assert_eq!(parts, threads);
        // At least the events before the flag was seen (progress counts them in steps).
        assert!(events >= 200_000, "{threads} threads: {events} events");
    }
}

#[test]
fn a_failing_worker_releases_its_peers() {
    for threads in [2, 4, 8] {
        // Actor 5 panics 50 us into the run, in one partition; the others must not wait for it.
        let r = run_ring(threads, Some((5, Time(50_000_000))), None);
        match r {
            Err(EngineError::Failure(m)) => assert!(m.contains("boom"), "{m}"),
            other => panic!("{threads} threads: {other:?}"),
        }
    }
}
