//! Quiet transmits ([`Ctx::transmit_then`] without a completion): the completion comes only
//! when asked for, and then at exactly the time and place in the event order a plain
//! [`Ctx::transmit`]'s would have had (its key is reserved at transmit time), so an actor that
//! skips completions it does not need sees every other event in the same order.

use super::*;
use crate::link::Rate;
use crate::packet::Payload;
use crate::units::Bandwidth;

/// How the sender (actor 0) transmits; actor 1 only receives.
#[derive(Clone, Copy, PartialEq)]
enum Mode {
    /// Three frames back to back with `transmit`, each sent on the previous one's completion.
    Loud,
    /// The same frames with `transmit_then(.., more)`: a completion only while more remain.
    Quiet,
    /// One quiet frame; a timer at `ask` asks for its completion, one at `after` (armed
    /// after the transmit) fires at the completion's time.
    Ask {
        ask: u64,
        after: u64,
    },
    Sink,
}

struct Node {
    mode: Mode,
    left: u32,
    log: Vec<(u64, &'static str)>,
}

fn frame() -> Packet {
    match Packet::new(&[0x22; 58], Payload::Timing(200), &[]) {
        Ok(p) => p,
        Err(e) => panic!("{e}"),
    }
}

impl Node {
    fn send(&mut self, ctx: &mut Ctx<'_>) {
        if self.left == 0 {
            return;
        }
        self.left -= 1;
        let r = match self.mode {
            Mode::Loud => ctx.transmit(0, frame()),
            _ => ctx.transmit_then(0, frame(), self.left > 0),
        };
        assert!(r.is_ok());
    }
}

impl Actor for Node {
    fn start(&mut self, ctx: &mut Ctx<'_>) {
        self.send(ctx);
        if let Mode::Ask { ask, after } = self.mode {
            ctx.set_timer(Time(after), 1);
            ctx.set_timer(Time(ask), 0);
        }
    }
    fn handle(&mut self, event: Event, ctx: &mut Ctx<'_>) {
        let now = ctx.now().ps();
        match event {
            Event::Packet { .. } => self.log.push((now, "packet")),
            Event::Frame { frame, .. } => {
                ctx.drop_frame(frame);
                self.log.push((now, "packet"));
            }
            Event::TxDone { .. } => {
                self.log.push((now, "tx_done"));
                self.send(ctx);
            }
            Event::Timer { token: 0 } => {
                self.log.push((now, "ask"));
                ctx.want_tx_done(0);
                // Asking twice queues one completion.
                ctx.want_tx_done(0);
            }
            Event::Timer { .. } => self.log.push((now, "after")),
        }
    }
}

fn run_pair(mode: Mode) -> Vec<(u64, &'static str)> {
    let channel = Channel {
        rate: Rate::new(Bandwidth::from_gbps(100)),
        latency: Time(1_000_000),
    };
    let wiring = Wiring {
        ports: vec![
            vec![PortWiring {
                peer: 1,
                peer_port: 0,
                channel,
            }],
            vec![PortWiring {
                peer: 0,
                peer_port: 0,
                channel,
            }],
        ],
    };
    let left = if matches!(mode, Mode::Ask { .. }) {
        1
    } else {
        3
    };
    let actors = vec![
        Node {
            mode,
            left,
            log: Vec::new(),
        },
        Node {
            mode: Mode::Sink,
            left: 0,
            log: Vec::new(),
        },
    ];
    let out = match run(actors, &wiring, &EngineConfig::default(), None) {
        Ok(o) => o,
        Err(e) => panic!("{e}"),
    };
    let mut log: Vec<_> = out.actors.into_iter().flat_map(|a| a.log).collect();
    log.sort_by_key(|&(t, _)| t);
    log
}

#[test]
fn quiet_transmits_skip_only_the_unneeded_completion() {
    let loud = run_pair(Mode::Loud);
    let quiet = run_pair(Mode::Quiet);
    // The loud run's last completion (nothing more to send) is the only event missing.
    let mut expected = loud.clone();
    let last_done = expected.iter().rposition(|&(_, e)| e == "tx_done").unwrap();
    expected.remove(last_done);
    assert_eq!(quiet, expected);
    assert_eq!(loud.iter().filter(|&&(_, e)| e == "packet").count(), 3);
}

#[test]
fn an_asked_for_completion_keeps_its_reserved_place() {
    // The frame's serialization time, from the loud run's first completion.
    let done = run_pair(Mode::Loud)
        .iter()
        .find(|&&(_, e)| e == "tx_done")
        .map(|&(t, _)| t)
        .unwrap();
    // Asked mid-frame: the completion comes at `done`, before the timer armed (after the
    // transmit) for the same time, as a plain transmit's completion would.
    let asked = run_pair(Mode::Ask {
        ask: done / 2,
        after: done,
    });
    let sender: Vec<_> = asked.iter().filter(|&&(_, e)| e != "packet").collect();
    assert_eq!(
        sender,
        vec![&(done / 2, "ask"), &(done, "tx_done"), &(done, "after")]
    );
    // Asked once the frame is on the wire: nothing comes.
    let late = run_pair(Mode::Ask {
        ask: done + 1,
        after: done,
    });
    assert!(late.iter().all(|&(_, e)| e != "tx_done"));
}
