//! The engine's floor: how fast it moves frames when actors do almost nothing.
//!
//! 64 forwarding actors in a ring of 100 Gb/s, 1 us links, 8 frames injected at each; every
//! actor forwards what it receives to its successor. The figure is the cost of the engine
//! itself (event queue, ports, partitions), to compare with full scenarios, whose actors parse,
//! route and run the transport.
//!
//!     cargo run --release -p fabemu-fabric --example engine_floor -- [THREADS]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: a failure is a panic

use std::collections::VecDeque;
use std::time::Instant;

use fabemu_fabric::engine::{run, Actor, Ctx, EngineConfig, Event, PortWiring, Wiring};
use fabemu_fabric::link::{Channel, EthernetOverhead, Rate};
use fabemu_fabric::packet::{Packet, Payload};
use fabemu_fabric::units::{Bandwidth, Time};

struct Forwarder {
    queue: VecDeque<Packet>,
    inject: usize,
}

impl Forwarder {
    fn pump(&mut self, ctx: &mut Ctx<'_>) {
        if ctx.port_idle(1) {
            if let Some(p) = self.queue.pop_front() {
                let _ = ctx.transmit(1, p);
            }
        }
    }
}

impl Actor for Forwarder {
    fn start(&mut self, ctx: &mut Ctx<'_>) {
        for _ in 0..self.inject {
            if let Ok(p) = Packet::new(&[0u8; 58], Payload::Timing(4096), &[0; 4]) {
                self.queue.push_back(p);
            }
        }
        self.pump(ctx);
    }
    fn handle(&mut self, event: Event, ctx: &mut Ctx<'_>) {
        if let Event::Packet { packet, .. } = event {
            self.queue.push_back(packet);
        }
        self.pump(ctx);
    }
}

fn main() {
    let n = 64usize;
    let threads = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(1);
    let channel = Channel {
        rate: Rate::new(Bandwidth::from_gbps(100)),
        latency: Time::from_us(1),
    };
    // Port 0 faces the predecessor, port 1 the successor.
    let wiring = Wiring {
        ports: (0..n)
            .map(|i| {
                vec![
                    PortWiring {
                        peer: ((i + n - 1) % n) as u32,
                        peer_port: 1,
                        channel,
                    },
                    PortWiring {
                        peer: ((i + 1) % n) as u32,
                        peer_port: 0,
                        channel,
                    },
                ]
            })
            .collect(),
    };
    let actors = (0..n)
        .map(|_| Forwarder {
            queue: VecDeque::new(),
            inject: 8,
        })
        .collect();
    let cfg = EngineConfig {
        threads,
        until: Time::from_us(20_000),
        overhead: EthernetOverhead::default(),
        ..EngineConfig::default()
    };
    let t0 = Instant::now();
    match run(actors, &wiring, &cfg, None) {
        Ok(out) => {
            let s = t0.elapsed().as_secs_f64();
            println!(
                "{} packet-hops, {} events in {s:.3} s: {:.2} M packet-hops/s ({} partitions)",
                out.stats.packet_hops,
                out.stats.events,
                out.stats.packet_hops as f64 / s / 1e6,
                out.layout.partitions
            );
        }
        Err(e) => eprintln!("error: {e}"),
    }
}
