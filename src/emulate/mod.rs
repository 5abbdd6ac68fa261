//! Emulation: real programs on the emulated fabric.
//!
//! `fabemu emulate` builds the scenario's world as `run` does, gives every host a Linux network
//! namespace with one Ethernet interface (a TAP whose other end fabemu holds), and carries the
//! frames that programs in those namespaces send through the emulated switches, in real time:
//!
//! ```text
//!  namespace fabemu-<pid>-h0          fabemu                          namespace fabemu-<pid>-h1
//!  program -> eth0 (TAP) --read--> gateway h0 -> switches -> gateway h1 --write--> eth0 -> program
//!                                  \_______ engine (Stepper), paced by the wall clock ______/
//! ```
//!
//! The engine stays what it is everywhere else: deterministic, synchronous, sans-IO. What
//! touches the outside world sits here, at its edge:
//! - [`gateway`]: the actor beside each host that takes real frames in and hands them out;
//! - [`pace`]: the loop that runs the engine behind the wall clock and measures its lateness;
//! - the namespaces and TAP devices, the child processes, signals and teardown.
//!
//! A host keeps one interface whatever its links: on a direct topology (a ring, a torus, a
//! fully connected group) its gateway sends each frame out of the link the NIC's routing picks
//! for its destination, and a frame in transit is relayed at each host on its way by that
//! host's NIC, as built-in frames are; it enters no namespace but its destination's.
//!
//! Emulation is honest, not deterministic: real programs make every run differ. What holds is
//! that their frames cross the fabric by the same rules as simulated ones, and that lateness
//! against the wall clock is measured and reported.

pub mod gateway;
pub mod launch;
pub mod netns;
pub mod pace;
pub mod run;
pub mod tap;

use std::time::Duration;

use fabemu_fabric::engine::{
    ActorId, CaptureConfig, EngineConfig, RunOutput, SampleConfig, Stepper,
};
use fabemu_fabric::host::HostAddr;
use fabemu_topologies::{Graph, NodeKind};
use serde::Serialize;

use self::gateway::{EmuNode, Gateway, GatewayStats};
use self::pace::Lateness;
use std::path::Path;

use crate::scenario::{self, FieldPath, Override, ScenarioError, Source};
use crate::world::{self, Finished, Node};
use crate::RunError;

/// The emulation's part of the report.
#[derive(Clone, Debug, Default, Serialize)]
pub struct EmulationReport {
    /// Wall time per virtual time: virtual time advanced `time_scale` times as fast as the
    /// wall clock.
    pub time_scale: f64,
    /// Per host (rank order): what its gateway counted.
    pub hosts: Vec<HostEmulation>,
    /// Lateness against the wall clock.
    pub lateness: Lateness,
    /// The CPU time fabemu spent on it (absent where it could not be read).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu: Option<CpuUse>,
}

/// The CPU time fabemu spent carrying the programs' frames, for the emulation's cost per frame.
#[derive(Clone, Debug, Default, Serialize)]
pub struct CpuUse {
    /// CPU seconds of the pacing loop's thread (which spins through the last stretch before
    /// each event, so an idle fabric costs it CPU too).
    pub pacer_s: f64,
    /// CPU seconds of the whole fabemu process while the loop ran: the loop, the interfaces'
    /// readers, the programs' launch and output (not the programs themselves).
    pub process_s: f64,
    /// Frames carried: into the fabric plus out of it, over every host.
    pub frames: u64,
    /// `process_s` per frame, microseconds.
    pub per_frame_us: f64,
    /// `pacer_s` per frame, microseconds.
    pub pacer_per_frame_us: f64,
}

impl CpuUse {
    /// CPU seconds (user + system) of `who` so far.
    pub fn seconds(who: nix::sys::resource::UsageWho) -> Option<f64> {
        let u = nix::sys::resource::getrusage(who).ok()?;
        let s = |t: nix::sys::time::TimeVal| t.tv_sec() as f64 + t.tv_usec() as f64 * 1e-6;
        Some(s(u.user_time()) + s(u.system_time()))
    }
}

/// One host's real traffic.
#[derive(Clone, Debug, Serialize)]
pub struct HostEmulation {
    /// The host's name in the scenario.
    pub name: String,
    /// Its IPv4 address.
    pub ip: String,
    /// What its gateway counted.
    #[serde(flatten)]
    pub stats: GatewayStats,
}

/// A world ready to be stepped with real hosts in it.
pub struct Prepared {
    /// The engine, stepped by the pacing loop.
    pub stepper: Stepper<EmuNode>,
    /// Per rank, the host's actor id.
    pub hosts: Vec<ActorId>,
    /// Per rank, the host's address.
    pub addrs: Vec<HostAddr>,
    /// The host's names, per rank.
    pub names: Vec<String>,
    /// The MTU of the hosts' interfaces (`nic.mtu`).
    pub mtu: u32,
    graph: Graph,
    messages: Vec<fabemu_fabric::host::MessageSpec>,
    collectives: Vec<crate::collective::CollectiveInfo>,
    training: Option<crate::training::TrainingInfo>,
}

/// Parses and checks a scenario for emulation: as `run` reads it, except that the workload
/// may be left out (the real programs are the workload).
pub fn load_str(text: &str, file: &str, overrides: Vec<Override>) -> Result<Source, ScenarioError> {
    match scenario::load_str_with(text, file, overrides.clone()) {
        Err(e) if e.message == "missing field `workload`" => {
            let none = Override::parse(NO_WORKLOAD)?;
            let with: Vec<Override> = std::iter::once(none).chain(overrides).collect();
            let mut src = scenario::load_str_with(text, file, with)?;
            src.overrides.retain(|o| o.text != NO_WORKLOAD);
            Ok(src)
        }
        r => r,
    }
}

/// [`load_str`] of the scenario in file `path`.
pub fn load_file(path: &Path, overrides: Vec<Override>) -> Result<Source, ScenarioError> {
    let text =
        fabemu_workload::input::read_text_limited(path, scenario::MAX_SCENARIO_BYTES, "a scenario")
            .map_err(|e| ScenarioError {
                file: path.display().to_string(),
                line: None,
                column: None,
                field: String::new(),
                message: format!("cannot read the scenario: {e}"),
            })?;
    load_str(&text, &path.display().to_string(), overrides)
}

/// The workload of a scenario that names none.
const NO_WORKLOAD: &str = "workload={}";

/// Builds the scenario's world with a gateway beside every host, each queueing at most
/// `queue_bytes` of its program's frames.
pub fn prepare(
    src: &Source,
    capture: Option<CaptureConfig>,
    sample: Option<SampleConfig>,
    queue_bytes: u64,
) -> Result<Prepared, RunError> {
    let w = world::build(src)?;
    let g = &w.graph;
    let mut hosts = Vec::new();
    let mut addrs = Vec::new();
    let mut names = Vec::new();
    let mut actors = Vec::with_capacity(w.actors.len());
    let max_frame = src.scenario.nic.mtu.bytes() + tap::ETH_HEADER_LEN as u64;
    for (id, node) in w.actors.into_iter().enumerate() {
        let gn = g.node(id);
        if gn.kind != NodeKind::Host {
            actors.push(EmuNode::Other(node));
            continue;
        }
        let rank = hosts.len() as u32;
        let addr = *w.directory.get(rank).ok_or_else(|| {
            src.error_at(
                &FieldPath::root(),
                format!("host `{}` has no address", gn.name),
            )
        })?;
        hosts.push(id as ActorId);
        addrs.push(addr);
        names.push(gn.name.clone());
        actors.push(EmuNode::Host(
            node,
            Box::new(Gateway::new(
                addr.ip,
                g.ports(id).len(),
                queue_bytes,
                max_frame,
            )),
        ));
    }
    let cfg = EngineConfig {
        threads: 1,
        until: src.scenario.until(),
        overhead: src.scenario.ethernet,
        capture,
        sample,
        faults: w.faults,
    };
    let stepper = Stepper::new(actors, &w.wiring, &cfg)?;
    Ok(Prepared {
        stepper,
        hosts,
        addrs,
        names,
        mtu: u32::try_from(src.scenario.nic.mtu.bytes()).unwrap_or(u32::MAX),
        graph: w.graph,
        messages: w.messages,
        collectives: w.collectives,
        training: w.training,
    })
}

impl Prepared {
    /// Ends the run where it stands and reports on it as `run` does, with the emulation's
    /// section.
    pub fn finish(
        self,
        src: &Source,
        wall: Duration,
        time_scale: f64,
        lateness: Lateness,
    ) -> Result<crate::observe::Observed, RunError> {
        let Prepared {
            stepper,
            addrs,
            names,
            graph,
            messages,
            collectives,
            training,
            ..
        } = self;
        let out = stepper.finish()?;
        let stats: Vec<GatewayStats> = out
            .actors
            .iter()
            .filter_map(|a| a.gateway().map(Gateway::stats))
            .collect();
        let RunOutput {
            actors,
            port_stats,
            stats: engine_stats,
            layout,
            capture,
            samples,
            cancelled,
            faults,
        } = out;
        let output = RunOutput {
            actors: actors
                .into_iter()
                .map(EmuNode::into_node)
                .collect::<Vec<Node>>(),
            port_stats,
            stats: engine_stats,
            layout,
            capture: None,
            samples: None,
            cancelled,
            faults,
        };
        let fin = Finished {
            graph,
            messages,
            collectives,
            training,
            flow_limits: Vec::new(),
            output,
        };
        let mut report = crate::report::build(src, &fin, 1, wall);
        report.emulation = Some(EmulationReport {
            time_scale,
            hosts: stats
                .into_iter()
                .zip(addrs.iter().zip(names))
                .map(|(stats, (a, name))| HostEmulation {
                    name,
                    ip: a.ip.to_string(),
                    stats,
                })
                .collect(),
            lateness,
            cpu: None,
        });
        Ok(crate::observe::Observed {
            report,
            finished: fin,
            capture,
            samples,
            facts: None,
        })
    }
}

/// A warning when the emulation fell behind the wall clock: deliveries at p99 later than
/// [`pace::LATE`], named with the real traffic's rate at which it happened.
pub fn lateness_warning(emu: &EmulationReport) -> Option<String> {
    let d = emu.lateness.delivery.as_ref()?;
    let late_ps = pace::LATE.as_nanos() as u64 * 1000;
    if d.p99_ps <= late_ps {
        return None;
    }
    let frames: u64 = emu.hosts.iter().map(|h| h.stats.frames_in).sum();
    let bytes: u64 = emu.hosts.iter().map(|h| h.stats.bytes_in).sum();
    let secs = emu.lateness.wall_s.max(1e-9);
    Some(format!(
        "the emulation fell behind the wall clock: deliveries late by {:.0} us at p99 ({:.0} us max; \
         {} frames over {:.0} us) at {:.0} frames/s ({:.3} Gb/s) of real traffic; a lower \
         --time-scale slows the fabric so that it keeps up",
        d.p99_ps as f64 / 1e6,
        d.max_ps as f64 / 1e6,
        emu.lateness.late_frames,
        pace::LATE.as_micros(),
        frames as f64 / secs,
        bytes as f64 * 8.0 / secs / 1e9,
    ))
}
