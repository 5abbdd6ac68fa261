//! Held frames ([`Event::Frame`], [`Ctx::transmit_frame`], [`Ctx::transmit_frame_len`]): a
//! chain of forwarders that keep the frames they queue in the engine's slab must see the same
//! events, at the same times, with the same bytes, as forwarders that take every packet out
//! and transmit it again — for any thread count (frames that cross partitions leave the slab
//! for the outbox) — and every frame must be given back (no slot stays held).

use std::collections::VecDeque;

use super::*;
use crate::link::Rate;
use crate::packet::Payload;
use crate::units::Bandwidth;

/// Frames the source sends.
const FRAMES: u8 = 40;
/// Forwarders between source and sink.
const HOPS: usize = 5;

enum Role {
    /// Sends `FRAMES` frames back to back on port 0, numbered in their first header byte.
    Source { left: u8 },
    /// Port 0 faces the source, port 1 the sink: queues what arrives on 0 and sends it on 1,
    /// adding 1 to the frame's second header byte. `hold` keeps frames in the slab; every
    /// third frame is taken out and held again, and frame 7 is dropped.
    Fwd {
        hold: bool,
        held: VecDeque<Frame>,
        owned: VecDeque<Packet>,
    },
    /// Logs every arrival: (time, first two header bytes).
    Sink,
}

struct Node {
    role: Role,
    log: Vec<(u64, u8, u8)>,
    /// Most frames held in the partition after any event of this actor, and the count after
    /// its last event.
    most_held: usize,
    last_held: usize,
}

fn frame(n: u8) -> Packet {
    let mut h = [0u8; 58];
    h[0] = n;
    match Packet::new(&h, Payload::Timing(900), &[]) {
        Ok(p) => p,
        Err(e) => panic!("{e}"),
    }
}

impl Node {
    fn pump(&mut self, ctx: &mut Ctx<'_>) {
        if !ctx.port_idle(if matches!(self.role, Role::Source { .. }) {
            0
        } else {
            1
        }) {
            return;
        }
        match &mut self.role {
            Role::Source { left } if *left > 0 => {
                let n = FRAMES - *left;
                *left -= 1;
                assert_eq!(ctx.transmit(0, frame(n)), Ok(()));
            }
            Role::Fwd { held, owned, .. } => {
                if let Some(f) = held.pop_front() {
                    let more = !held.is_empty();
                    // Every other frame leaves by the length its sender kept
                    // (`transmit_frame_len`, the slot unread): the run must not tell.
                    let sent = if held.len() % 2 == 0 {
                        ctx.transmit_frame_len(1, f, frame(0).frame_len() as u32, more)
                    } else {
                        ctx.transmit_frame(1, f, more)
                    };
                    assert_eq!(sent, Ok(()));
                } else if let Some(p) = owned.pop_front() {
                    assert_eq!(ctx.transmit(1, p), Ok(()));
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
        let now = ctx.now().ps();
        match (event, &mut self.role) {
            (Event::Frame { frame, .. }, Role::Fwd { held, .. }) => {
                let Some(p) = ctx.frame_mut(&frame) else {
                    panic!("a held frame without its packet");
                };
                let n = p.header()[0];
                p.header_mut()[1] += 1;
                if n == 7 {
                    ctx.drop_frame(frame);
                } else if n % 3 == 0 {
                    let p = ctx.take_frame(frame).expect("held frame");
                    held.push_back(ctx.hold(p));
                } else {
                    held.push_back(frame);
                }
            }
            (Event::Packet { mut packet, .. }, Role::Fwd { owned, .. }) => {
                let n = packet.header()[0];
                packet.header_mut()[1] += 1;
                if n != 7 {
                    owned.push_back(packet);
                }
            }
            (Event::Packet { packet, .. }, Role::Sink) => {
                self.log.push((now, packet.header()[0], packet.header()[1]));
            }
            (Event::Frame { frame, .. }, _) => panic!("{frame:?} for an actor that takes packets"),
            _ => {}
        }
        self.pump(ctx);
        self.most_held = self.most_held.max(ctx.held_frames());
        self.last_held = ctx.held_frames();
    }
    fn holds_frames(&self) -> bool {
        matches!(self.role, Role::Fwd { hold: true, .. })
    }
}

/// Source, `HOPS` forwarders (holding frames when `hold`), sink, in a line. The source's link
/// is 4x the others' rate, so frames queue at the first forwarder.
fn run_chain(hold: bool, threads: usize) -> (Vec<(u64, u8, u8)>, usize, usize, u64) {
    let n = HOPS + 2;
    let ch = |gbps| Channel {
        rate: Rate::new(Bandwidth::from_gbps(gbps)),
        latency: Time(1_000_000),
    };
    let ports = (0..n)
        .map(|i| {
            let left = PortWiring {
                peer: i as u32 - 1,
                peer_port: usize::from(i > 1),
                channel: ch(if i == 1 { 400 } else { 100 }),
            };
            let right = PortWiring {
                peer: i as u32 + 1,
                peer_port: 0,
                channel: ch(if i == 0 { 400 } else { 100 }),
            };
            match i {
                0 => vec![right],
                i if i == n - 1 => vec![left],
                _ => vec![left, right],
            }
        })
        .collect();
    let actors = (0..n)
        .map(|i| Node {
            role: match i {
                0 => Role::Source { left: FRAMES },
                i if i == n - 1 => Role::Sink,
                _ => Role::Fwd {
                    hold,
                    held: VecDeque::new(),
                    owned: VecDeque::new(),
                },
            },
            log: Vec::new(),
            most_held: 0,
            last_held: 0,
        })
        .collect();
    let cfg = EngineConfig {
        threads,
        ..EngineConfig::default()
    };
    let out = match run(actors, &Wiring { ports }, &cfg, None) {
        Ok(o) => o,
        Err(e) => panic!("{e}"),
    };
    let most = out.actors.iter().map(|a| a.most_held).max().unwrap_or(0);
    let last = out.actors.iter().map(|a| a.last_held).max().unwrap_or(0);
    let log = out.actors.into_iter().flat_map(|a| a.log).collect();
    (log, most, last, out.stats.packet_hops)
}

#[test]
fn held_frames_move_as_owned_packets_do_for_any_thread_count() {
    let (owned, most, _, hops) = run_chain(false, 1);
    assert_eq!(most, 0, "actors that take packets hold nothing");
    // Every frame but number 7 arrives, counted once per forwarder.
    assert_eq!(owned.len(), usize::from(FRAMES) - 1);
    assert!(owned
        .iter()
        .all(|&(_, n, hops)| n != 7 && hops == HOPS as u8));
    // Source to first forwarder: all; every later link: all but the dropped one.
    assert_eq!(
        hops,
        u64::from(FRAMES) + (u64::from(FRAMES) - 1) * HOPS as u64
    );
    for threads in [1, 2, 3, 7] {
        let (held, most, last, hops2) = run_chain(true, threads);
        assert_eq!(held, owned, "{threads} threads");
        assert_eq!(hops2, hops, "{threads} threads");
        // Frames queue at the first forwarder (its link in is 4x faster than its link out).
        assert!(most > 1, "{threads} threads: at most {most} held");
        assert_eq!(last, 0, "{threads} threads: every frame given back");
    }
}

/// Receives one frame and tries to send it on a busy port: the frame is dropped and its slot
/// freed.
struct Busy {
    got: Option<Result<(), TransmitError>>,
    held_after: usize,
}

impl Actor for Busy {
    fn start(&mut self, ctx: &mut Ctx<'_>) {
        if ctx.id() == 0 {
            let _ = ctx.transmit(0, frame(1));
        }
    }
    fn handle(&mut self, event: Event, ctx: &mut Ctx<'_>) {
        if let Event::Frame { frame: f, .. } = event {
            if ctx.id() == 1 && self.got.is_none() {
                // Occupy the port, then try to send the frame on it too.
                let _ = ctx.transmit(0, frame(9));
                self.got = Some(ctx.transmit_frame(0, f, false));
                self.held_after = ctx.held_frames();
            } else {
                ctx.drop_frame(f);
            }
        }
    }
    fn holds_frames(&self) -> bool {
        true
    }
}

#[test]
fn a_refused_held_frame_is_freed() {
    let channel = Channel {
        rate: Rate::new(Bandwidth::from_gbps(100)),
        latency: Time(1_000),
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
    let actors = (0..2)
        .map(|_| Busy {
            got: None,
            held_after: usize::MAX,
        })
        .collect();
    let out = match run(actors, &wiring, &EngineConfig::default(), None) {
        Ok(o) => o,
        Err(e) => panic!("{e}"),
    };
    let b = &out.actors[1];
    assert_eq!(b.got, Some(Err(TransmitError::Busy)));
    assert_eq!(b.held_after, 0);
}
