//! One run of the engine spread over MPI ranks, printed so that it can be compared with the
//! same run on threads: `mpi_mesh local THREADS` runs in one process, `mpirun -np N mpi_mesh mpi
//! THREADS` over N ranks (rank 0 prints). Both print every actor's final state (a hash of every
//! event it saw, in order) and the engine's counters: the outputs must be identical.
//!
//! The actors are a mesh of forwarders: actor i links to i+1 and i+7 (mod N), with latencies
//! of 1 to 3 us, so a partitioning cuts links of different lengths. Every actor starts with a
//! few frames (data mode, real bytes) and sends one more on a timer; a frame hops from actor to
//! actor, its next port chosen by the forwarder's state, until its hop budget runs out.
//!
//! Build: `cargo build --release -p fabemu-fabric --features mpi --example mpi_mesh`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // example code: a failure is a panic

use bytes::Bytes;
use fabemu_fabric::engine::codec::{Reader, Writer};
use fabemu_fabric::engine::mpi::{self as engine_mpi, ActorState};
use fabemu_fabric::engine::{
    self, Actor, Ctx, EngineConfig, EngineError, Event, PortWiring, RunOutput, Wiring,
};
use fabemu_fabric::link::{Channel, Rate};
use fabemu_fabric::packet::{Packet, Payload};
use fabemu_fabric::units::{Bandwidth, Time};

const ACTORS: usize = 48;
const CHORD: usize = 7;

/// A forwarder: every event goes into `hash`.
struct Fwd {
    id: u32,
    /// Panics at the first frame after this time (to check that a failing rank ends the run).
    bomb: Option<Time>,
    /// Forwards frames for ever (to check that a killed rank ends the run).
    forever: bool,
    hash: u64,
    received: u64,
    refused: u64,
}

fn mix(h: u64, v: u64) -> u64 {
    (h ^ v).wrapping_mul(0x100_0000_01b3).rotate_left(17)
}

fn frame(from: u32, n: u64, hops: u8) -> Packet {
    let body = Bytes::from((0..64u64).map(|i| (i * 7 + n) as u8).collect::<Vec<u8>>());
    let mut header = [0u8; 16];
    header[0] = hops;
    header[1..5].copy_from_slice(&from.to_le_bytes());
    header[5..13].copy_from_slice(&n.to_le_bytes());
    match Packet::new(&header, Payload::data(body), &[0xee; 4]) {
        Ok(p) => p,
        Err(e) => panic!("{e}"),
    }
}

impl Fwd {
    fn send(&mut self, ctx: &mut Ctx<'_>, mut p: Packet) {
        let port = (self.hash % ctx.port_count() as u64) as usize;
        let port = (0..ctx.port_count())
            .map(|k| (port + k) % ctx.port_count())
            .find(|&q| ctx.port_idle(q));
        match port {
            Some(q) => {
                p.header_mut()[15] = p.header()[15].wrapping_add(1);
                if ctx.transmit(q, p).is_err() {
                    self.refused += 1;
                }
            }
            None => self.refused += 1,
        }
    }
}

impl Actor for Fwd {
    fn start(&mut self, ctx: &mut Ctx<'_>) {
        for n in 0..2 {
            let p = frame(self.id, n, 40);
            self.hash = mix(self.hash, n);
            self.send(ctx, p);
        }
        ctx.set_timer(Time(5_000_000 + u64::from(self.id) * 1000), 9);
    }
    fn handle(&mut self, event: Event, ctx: &mut Ctx<'_>) {
        self.hash = mix(self.hash, ctx.now().ps());
        match event {
            Event::Packet { port, packet } => {
                self.received += 1;
                self.hash = mix(self.hash, port as u64);
                for &b in packet.header().iter().chain(packet.trailer()) {
                    self.hash = mix(self.hash, u64::from(b));
                }
                let body = packet.payload().bytes().map_or(0, |b| b.len() as u64);
                self.hash = mix(self.hash, body);
                if self.bomb.is_some_and(|t| ctx.now() >= t) {
                    panic!("actor {} exploded as asked", self.id);
                }
                let hops = packet.header()[0];
                if hops > 0 || self.forever {
                    let mut p = packet;
                    p.header_mut()[0] = hops.saturating_sub(1);
                    self.send(ctx, p);
                }
            }
            Event::TxDone { port } => self.hash = mix(self.hash, 100 + port as u64),
            Event::Timer { token } => {
                self.hash = mix(self.hash, token);
                let p = frame(self.id, token, 25);
                self.send(ctx, p);
            }
            Event::Frame { frame, .. } => ctx.drop_frame(frame),
        }
    }
}

/// The forwarder's state crosses whole: it is three numbers.
struct FwdState;

impl ActorState<Fwd> for FwdState {
    fn save(&self, a: &Fwd, out: &mut Writer) {
        out.u64(a.hash);
        out.u64(a.received);
        out.u64(a.refused);
    }
    fn restore(&self, a: &mut Fwd, input: &mut Reader<'_>) -> Result<(), EngineError> {
        a.hash = input.u64()?;
        a.received = input.u64()?;
        a.refused = input.u64()?;
        Ok(())
    }
}

fn mesh(bomb: Option<Time>, forever: bool) -> (Vec<Fwd>, Wiring) {
    let channel = |us: u64| Channel {
        rate: Rate::new(Bandwidth::from_gbps(100)),
        latency: Time(us * 1_000_000),
    };
    let mut ports: Vec<Vec<PortWiring>> = vec![Vec::new(); ACTORS];
    for a in 0..ACTORS {
        for (step, us) in [(1, 1 + (a as u64 % 3)), (CHORD, 3)] {
            let b = (a + step) % ACTORS;
            let (pa, pb) = (ports[a].len(), ports[b].len());
            ports[a].push(PortWiring {
                peer: b as u32,
                peer_port: pb,
                channel: channel(us),
            });
            ports[b].push(PortWiring {
                peer: a as u32,
                peer_port: pa,
                channel: channel(us),
            });
        }
    }
    let actors = (0..ACTORS as u32)
        .map(|id| Fwd {
            id,
            // The last actor: it runs on the last rank.
            bomb: bomb.filter(|_| id as usize == ACTORS - 1),
            forever,
            hash: u64::from(id),
            received: 0,
            refused: 0,
        })
        .collect();
    (actors, Wiring { ports })
}

fn print(out: &RunOutput<Fwd>) {
    let s = &out.stats;
    println!(
        "events {} hops {} end {} limit {} halted {:?}",
        s.events,
        s.packet_hops,
        s.end_time.ps(),
        s.stopped_at_limit,
        s.halted_at
    );
    for (a, ports) in out.actors.iter().zip(&out.port_stats) {
        let p: Vec<String> = ports
            .iter()
            .map(|p| format!("{}/{}/{}", p.tx_packets, p.tx_wire_bytes, p.busy.ps()))
            .collect();
        println!(
            "actor {} hash {:016x} rx {} refused {} ports {}",
            a.id,
            a.hash,
            a.received,
            a.refused,
            p.join(" ")
        );
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let mode = args.next().unwrap_or_default();
    let threads: usize = args.next().and_then(|t| t.parse().ok()).unwrap_or(1);
    // A limit in the middle of the traffic: the run stops there with events pending.
    let until: Option<u64> = args.next().and_then(|t| t.parse().ok());
    // `MESH_BOMB_PS`: the last actor panics after that time; `MESH_FOREVER`: frames never
    // stop; `MESH_PID_DIR`: every rank writes its process id there (a file per rank).
    let bomb = std::env::var("MESH_BOMB_PS")
        .ok()
        .and_then(|t| t.parse().ok())
        .map(Time);
    let forever = std::env::var_os("MESH_FOREVER").is_some();
    let (actors, wiring) = mesh(bomb, forever);
    let cfg = EngineConfig {
        threads,
        until: until.map_or(Time::NEVER, Time),
        ..EngineConfig::default()
    };
    match mode.as_str() {
        "local" => match engine::run(actors, &wiring, &cfg, None) {
            Ok(out) => print(&out),
            Err(e) => panic!("{e}"),
        },
        "mpi" => {
            // Ranks wait for each other at every window: by default OpenMPI spins meanwhile, which
            // on shared cores takes the time the rank being waited for needs (40x slower at np 2 on
            // a loaded 2-core machine). Yield instead, unless told otherwise.
            if std::env::var_os("OMPI_MCA_mpi_yield_when_idle").is_none() {
                std::env::set_var("OMPI_MCA_mpi_yield_when_idle", "1");
            }
            let Some((universe, _)) = mpi::initialize_with_threading(mpi::Threading::Funneled)
            else {
                panic!("MPI was initialized already");
            };
            let world = mpi::topology::Communicator::duplicate(&universe.world());
            if let Some(dir) = std::env::var_os("MESH_PID_DIR") {
                let rank = mpi::topology::Communicator::rank(&world);
                let path = std::path::Path::new(&dir).join(format!("rank{rank}"));
                if let Err(e) = std::fs::write(path, std::process::id().to_string()) {
                    panic!("{e}");
                }
            }
            match engine_mpi::run(actors, &wiring, &cfg, None, &world, &FwdState, None) {
                Ok(o) => {
                    if let Some(out) = o.output {
                        print(&out);
                        eprintln!(
                            "ranks {} partitions {} windows {} frames crossing ranks {}",
                            o.ranks.ranks,
                            out.layout.partitions,
                            out.layout.windows,
                            o.ranks.frames_crossing
                        );
                    }
                }
                Err(e) => panic!("{e}"),
            }
        }
        _ => panic!("usage: mpi_mesh local|mpi THREADS [UNTIL_PS]"),
    }
}
