//! A stepped run is the batch run cut anywhere: the same events in the same order, whatever
//! the step boundaries; and an actor woken between steps gets its event at the time asked
//! (or at the time reached, if that is later).

use super::*;
use crate::link::Rate;
use crate::packet::Payload;
use crate::units::Bandwidth;

/// Two actors ping-ponging a frame `left` times, each logging what it sees.
struct Pong {
    left: u32,
    log: Vec<(u64, u64)>,
}

fn frame(len: u32) -> Packet {
    match Packet::new(&[0x22; 58], Payload::Timing(len), &[]) {
        Ok(p) => p,
        Err(e) => panic!("{e}"),
    }
}

impl Actor for Pong {
    fn start(&mut self, ctx: &mut Ctx<'_>) {
        if ctx.id() == 0 {
            assert!(ctx.transmit(0, frame(100)).is_ok());
            ctx.set_timer(Time::from_us(3), 7);
        }
    }
    fn handle(&mut self, event: Event, ctx: &mut Ctx<'_>) {
        let now = ctx.now().ps();
        match event {
            Event::Packet { .. } => {
                self.log.push((now, 1));
                if self.left > 0 {
                    self.left -= 1;
                    assert!(ctx.transmit(0, frame(100 + self.left)).is_ok());
                }
            }
            Event::Frame { frame, .. } => ctx.drop_frame(frame),
            Event::TxDone { .. } => self.log.push((now, 2)),
            Event::Timer { token } => self.log.push((now, 100 + token)),
        }
    }
}

fn world() -> (Vec<Pong>, Wiring) {
    let ch = Channel {
        rate: Rate::new(Bandwidth(10_000_000_000)),
        latency: Time::from_ns(700),
    };
    let wiring = Wiring {
        ports: vec![
            vec![PortWiring {
                peer: 1,
                peer_port: 0,
                channel: ch,
            }],
            vec![PortWiring {
                peer: 0,
                peer_port: 0,
                channel: ch,
            }],
        ],
    };
    let actors = (0..2)
        .map(|_| Pong {
            left: 20,
            log: vec![],
        })
        .collect();
    (actors, wiring)
}

#[test]
fn stepping_anywhere_gives_the_batch_run() {
    let (actors, wiring) = world();
    let cfg = EngineConfig::default();
    let batch = run(actors, &wiring, &cfg, None).unwrap();
    for step_ps in [1u64, 333, 10_000, 1_000_000, 1 << 40] {
        let (actors, wiring) = world();
        let mut s = Stepper::new(actors, &wiring, &cfg).unwrap();
        let mut t = 0;
        while s.next_event().is_some() {
            t += step_ps;
            s.run_until(Time(t)).unwrap();
            assert_eq!(s.reached(), Time(t));
        }
        let out = s.finish().unwrap();
        assert_eq!(out.stats.events, batch.stats.events, "step {step_ps}");
        assert_eq!(out.stats.end_time, batch.stats.end_time);
        assert_eq!(out.port_stats, batch.port_stats);
        for (a, b) in out.actors.iter().zip(&batch.actors) {
            assert_eq!(a.log, b.log, "step {step_ps}");
        }
    }
}

#[test]
fn a_wake_comes_at_its_time_or_at_the_time_reached() {
    let (actors, wiring) = world();
    let mut s = Stepper::new(actors, &wiring, &EngineConfig::default()).unwrap();
    s.run_until(Time::from_us(2)).unwrap();
    // In the future: at that time; in the past: at the time reached.
    assert_eq!(s.wake(1, Time::from_us(5), 1), Some(Time::from_us(5)));
    assert_eq!(s.wake(1, Time::from_us(1), 2), Some(Time::from_us(2)));
    assert_eq!(s.wake(9, Time::from_us(1), 2), None);
    s.run_until(Time::from_us(100)).unwrap();
    let log = &s.actor(1).unwrap().log;
    assert!(log.contains(&(Time::from_us(5).ps(), 101)));
    assert!(log.contains(&(Time::from_us(2).ps(), 102)));
    // The timer actor 0 armed at start fired once, at 3 us.
    let log0 = &s.actor_mut(0).unwrap().log;
    assert_eq!(log0.iter().filter(|e| e.1 == 107).count(), 1);
    assert!(s.next_event().is_none());
}
