//! One emulation from start to end: namespaces up, programs started, the engine paced behind
//! the wall clock, and everything taken down on every way out (the programs end, Ctrl-C, a
//! program or fabemu failing).

use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fabemu_fabric::engine::{CaptureConfig, SampleConfig};

use super::launch::{self, OutputSink, RankEnv, RankExit};
use super::netns::{self, HostNet, Namespaces, NetError};
use super::pace::{self, Clock, Deliver, Inbound, Lateness, Trace};
use super::tap::{self, Tap};
use super::{prepare, CpuUse, Prepared};
use crate::observe::Observed;
use crate::scenario::Source;
use crate::RunError;
use fabemu_fabric::engine::EngineError;
use fabemu_fabric::units::Time;
use nix::sys::resource::UsageWho;

/// What `fabemu emulate` was asked to do.
#[derive(Clone, Debug)]
pub struct EmulateOptions {
    /// Virtual time per wall time (1: real time).
    pub time_scale: f64,
    /// Bytes each host's queue toward the fabric holds.
    pub host_queue: u64,
    /// The command to start once per host (empty: keep the namespaces up until Ctrl-C).
    pub command: Vec<String>,
    /// `MASTER_PORT` given to the ranks.
    pub master_port: u16,
    /// `KEY=VALUE` sysctls set in every namespace before the programs start.
    pub sysctls: Vec<(String, String)>,
    /// Where to write the MPI hostfile and rsh agent (none: not written).
    pub mpi_dir: Option<PathBuf>,
    /// Frames to capture.
    pub capture: Option<CaptureConfig>,
    /// Time series to gather.
    pub sample: Option<SampleConfig>,
}

/// Why an emulation could not run.
#[derive(Debug, thiserror::Error)]
pub enum EmulateError {
    /// The scenario or the engine.
    #[error("{0}")]
    Run(#[from] RunError),
    /// Namespaces or TAP devices.
    #[error("{0}")]
    Net(#[from] NetError),
    /// Starting the programs.
    #[error("{0}")]
    Launch(#[from] launch::LaunchError),
    /// Anything else at the edge (the runtime, a thread).
    #[error("{0}")]
    Other(String),
}

impl EmulateError {
    /// The exit code: 2 for what the user must fix, 1 otherwise.
    pub fn exit_code(&self) -> u8 {
        match self {
            EmulateError::Run(RunError::Scenario(_)) => 2,
            EmulateError::Net(e) => u8::try_from(e.exit_code()).unwrap_or(1),
            _ => 1,
        }
    }
}

/// How an emulation ended.
pub struct Outcome {
    /// The report, as `run` gives it, with its `emulation` section.
    pub observed: Observed,
    /// Every rank's end, in rank order (empty without a command).
    pub exits: Vec<RankExit>,
    /// True when Ctrl-C ended it.
    pub interrupted: bool,
    /// Stale namespaces of killed runs that were removed first.
    pub removed_stale: Vec<String>,
}

/// Writes delivered frames into the hosts' TAPs.
struct TapDeliver {
    taps: Vec<Arc<Tap>>,
    failed: u64,
}

impl Deliver for TapDeliver {
    fn deliver(&mut self, host: usize, frame: &[u8]) {
        let ok = self.taps.get(host).is_some_and(|t| t.send(frame).is_ok());
        if !ok {
            self.failed += 1;
        }
    }
}

/// Reads the frames the hosts' programs send from their TAPs.
struct TapFrames {
    taps: Vec<Arc<Tap>>,
    buf: Vec<u8>,
}

/// Frames read from one host in one turn of the loop at most, so that the engine keeps up
/// with the others'.
const READ_BURST: usize = 64;

impl pace::Frames for TapFrames {
    fn read(&mut self, room: &[bool], into: &mut Vec<Inbound>) {
        // One look at every interface with room, then reads from those with a frame.
        let open = with_room(&self.taps, room);
        let Ok(ready) = tap::readable(&open, Duration::ZERO) else {
            return;
        };
        for (tap, _) in open.iter().zip(ready).filter(|(_, r)| *r) {
            for _ in 0..READ_BURST {
                // An error (the device gone at teardown) reads as nothing waiting.
                let Ok(Some(n)) = tap.try_recv(&mut self.buf) else {
                    break;
                };
                let at = Instant::now();
                let frame = self.buf.get(..n).map(<[u8]>::to_vec).unwrap_or_default();
                into.push(Inbound {
                    host: tap.rank(),
                    frame,
                    at,
                });
            }
        }
    }

    fn wait(&mut self, room: &[bool], timeout: Duration) {
        let open = with_room(&self.taps, room);
        if tap::readable(&open, timeout).is_err() {
            std::thread::sleep(timeout);
        }
    }
}

/// The interfaces of the hosts with room.
fn with_room<'a>(taps: &'a [Arc<Tap>], room: &[bool]) -> Vec<&'a Tap> {
    taps.iter()
        .zip(room)
        .filter(|(_, &r)| r)
        .map(|(t, _)| &**t)
        .collect()
}

/// The environment variable naming a file into which the emulation writes its [`Trace`] (CSV):
/// every frame's instants, to line up with a program's own stamps.
pub const TRACE_ENV: &str = "FABEMU_EMULATE_TRACE";

/// Runs the emulation `opts` describes on scenario `src`.
pub fn emulate(src: &Source, opts: &EmulateOptions) -> Result<Outcome, EmulateError> {
    netns::check_rights()?;
    let removed_stale = netns::remove_stale()?;
    let prepared = prepare(src, opts.capture.clone(), opts.sample, opts.host_queue)?;
    // Signals, the programs and their output; the interfaces are the pacing loop's.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| EmulateError::Other(format!("cannot start the I/O runtime: {e}")))?;
    // Ctrl-C and SIGTERM are caught from before the first namespace exists: a signal that
    // came in between would end the process with its namespaces left behind.
    let stop = Arc::new(AtomicBool::new(false));
    let interrupted = Arc::new(AtomicBool::new(false));
    catch_signals(&runtime, &stop, &interrupted)?;
    let hosts = host_nets(&prepared);
    let (ns, taps) = Namespaces::create(&hosts)?;
    // From here on `ns` removes the namespaces when dropped, whatever happens.
    configure_namespaces(&ns, &hosts, &prepared.names, opts)?;
    let taps: Vec<Arc<Tap>> = taps.into_iter().map(Arc::new).collect();
    let trace_path = std::env::var_os(TRACE_ENV).map(PathBuf::from);
    let cpu_before = CpuUse::seconds(UsageWho::RUSAGE_SELF);
    let pacer = spawn_pacer(
        prepared,
        taps.clone(),
        Arc::clone(&stop),
        src.scenario.until(),
        opts.time_scale,
        trace_path.is_some(),
    )?;
    let started = Instant::now();
    // The programs, or a wait for Ctrl-C.
    let exits = if opts.command.is_empty() {
        wait_for_ctrl_c(src, &runtime, &ns, &hosts, &stop);
        Vec::new()
    } else {
        run_programs(src, opts, &runtime, &ns, &hosts, &stop)?
    };
    stop.store(true, Ordering::Relaxed);
    let (prepared, paced, failed_writes, trace, pacer_cpu) = pacer
        .join()
        .map_err(|_| EmulateError::Other("the pacing thread failed".into()))?;
    let process_cpu = CpuUse::seconds(UsageWho::RUSAGE_SELF)
        .zip(cpu_before)
        .map(|(b, a)| b - a);
    if let (Some(path), Some(trace)) = (&trace_path, &trace) {
        if let Err(e) = std::fs::write(path, trace.to_csv()) {
            eprintln!("warning: cannot write the trace {}: {e}", path.display());
        }
    }
    let lateness = paced.map_err(RunError::from)?;
    runtime.shutdown_timeout(Duration::from_millis(200));
    drop(taps);
    ns.remove()?;
    if failed_writes > 0 {
        eprintln!("warning: {failed_writes} frames could not be written into their namespaces");
    }
    let mut observed = prepared.finish(src, started.elapsed(), opts.time_scale, lateness)?;
    record_cpu_use(&mut observed, pacer_cpu, process_cpu);
    Ok(Outcome {
        observed,
        exits,
        interrupted: interrupted.load(Ordering::Relaxed),
        removed_stale,
    })
}

/// Sets `stop` and `interrupted` on Ctrl-C or SIGTERM.
fn catch_signals(
    runtime: &tokio::runtime::Runtime,
    stop: &Arc<AtomicBool>,
    interrupted: &Arc<AtomicBool>,
) -> Result<(), EmulateError> {
    use tokio::signal::unix::{signal, SignalKind};
    let _enter = runtime.enter();
    let mut int = signal(SignalKind::interrupt())
        .map_err(|e| EmulateError::Other(format!("cannot catch Ctrl-C: {e}")))?;
    let mut term = signal(SignalKind::terminate())
        .map_err(|e| EmulateError::Other(format!("cannot catch SIGTERM: {e}")))?;
    let stop = Arc::clone(stop);
    let interrupted = Arc::clone(interrupted);
    runtime.spawn(async move {
        tokio::select! {
            _ = int.recv() => {}
            _ = term.recv() => {}
        }
        interrupted.store(true, Ordering::Relaxed);
        stop.store(true, Ordering::Relaxed);
        eprintln!("\nstopping: ending the programs and writing the report");
    });
    Ok(())
}

/// Every host's interface, by rank.
fn host_nets(prepared: &Prepared) -> Vec<HostNet> {
    prepared
        .addrs
        .iter()
        .enumerate()
        .map(|(rank, a)| HostNet {
            rank,
            ip: a.ip,
            prefix_len: 8,
            mac: a.mac,
            mtu: prepared.mtu,
        })
        .collect()
}

/// Sets the asked sysctls in every namespace and writes the MPI files when asked.
fn configure_namespaces(
    ns: &Namespaces,
    hosts: &[HostNet],
    names: &[String],
    opts: &EmulateOptions,
) -> Result<(), EmulateError> {
    for (k, v) in &opts.sysctls {
        for rank in 0..hosts.len() {
            ns.set_sysctl(rank, k, v)?;
        }
    }
    if let Some(dir) = &opts.mpi_dir {
        let ips: Vec<Ipv4Addr> = hosts.iter().map(|h| h.ip).collect();
        let files = launch::write_mpi_files(dir, ns, &ips, names)
            .map_err(|e| EmulateError::Other(format!("cannot write the MPI files: {e}")))?;
        eprintln!(
            "mpirun: --hostfile {} --mca plm_rsh_agent {}",
            files.hostfile.display(),
            files.agent.display()
        );
    }
    Ok(())
}

/// What the pacing thread hands back: the world, how late it ran, the frames that could not be
/// written, the trace and the thread's CPU seconds.
type PacerEnd = (
    Prepared,
    Result<Lateness, EngineError>,
    u64,
    Option<Trace>,
    Option<f64>,
);

/// Starts the engine on a thread of its own, paced behind the wall clock; it sets `stop` when
/// it ends.
fn spawn_pacer(
    mut prepared: Prepared,
    taps: Vec<Arc<Tap>>,
    stop: Arc<AtomicBool>,
    until: Time,
    scale: f64,
    want_trace: bool,
) -> Result<std::thread::JoinHandle<PacerEnd>, EmulateError> {
    std::thread::Builder::new()
        .name("fabemu-pace".into())
        .spawn(move || {
            let hosts = prepared.hosts.clone();
            let buf = vec![0u8; taps.iter().map(|t| t.max_frame_len()).max().unwrap_or(0)];
            let mut frames = TapFrames {
                taps: taps.clone(),
                buf,
            };
            let mut out = TapDeliver { taps, failed: 0 };
            let mut trace = want_trace.then(Trace::new);
            let cpu0 = CpuUse::seconds(UsageWho::RUSAGE_THREAD);
            let clock = Clock::start(scale);
            let r = pace::run(
                &mut prepared.stepper,
                &hosts,
                clock,
                until,
                &mut frames,
                &mut out,
                &stop,
                trace.as_mut(),
            );
            let cpu = CpuUse::seconds(UsageWho::RUSAGE_THREAD)
                .zip(cpu0)
                .map(|(b, a)| b - a);
            // The loop ends when asked or at `until`: let everyone else know.
            stop.store(true, Ordering::Relaxed);
            (prepared, r, out.failed, trace, cpu)
        })
        .map_err(|e| EmulateError::Other(format!("cannot start the pacing thread: {e}")))
}

/// Without a command: tells how to enter the hosts and waits for Ctrl-C.
fn wait_for_ctrl_c(
    src: &Source,
    runtime: &tokio::runtime::Runtime,
    ns: &Namespaces,
    hosts: &[HostNet],
    stop: &AtomicBool,
) {
    eprintln!("emulated hosts are up; enter one with:");
    for (rank, name) in prepared_names(ns, hosts.len()).iter().enumerate() {
        eprintln!(
            "  ip netns exec {name} bash    # {} {}",
            hosts[rank].ip,
            host_name(src, rank)
        );
    }
    eprintln!("Ctrl-C ends the emulation and removes them.");
    runtime.block_on(async {
        while !stop.load(Ordering::Relaxed) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
}

/// Starts the command once per host and waits for every rank to end (ending them when `stop`
/// is set first).
fn run_programs(
    src: &Source,
    opts: &EmulateOptions,
    runtime: &tokio::runtime::Runtime,
    ns: &Namespaces,
    hosts: &[HostNet],
    stop: &AtomicBool,
) -> Result<Vec<RankExit>, EmulateError> {
    let master_addr = hosts.first().map_or(Ipv4Addr::UNSPECIFIED, |h| h.ip);
    let envs: Vec<RankEnv> = (0..hosts.len())
        .map(|rank| RankEnv {
            rank,
            world_size: hosts.len(),
            master_addr,
            master_port: opts.master_port,
            host_name: host_name(src, rank),
        })
        .collect();
    let (program, args) = match opts.command.split_first() {
        Some((p, a)) => (p.clone(), a.to_vec()),
        None => (String::new(), Vec::new()),
    };
    let _enter = runtime.enter();
    let mut ranks = launch::launch(ns, &envs, &program, &args, OutputSink::Terminal)?;
    Ok(runtime.block_on(async {
        loop {
            tokio::select! {
                e = ranks.next_exit() => {
                    if e.is_none() {
                        break;
                    }
                }
                _ = tokio::time::sleep(Duration::from_millis(20)) => {
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                }
            }
        }
        if ranks.all_ended() {
            ranks.wait_all(Duration::from_secs(2)).await
        } else {
            ranks.terminate(Duration::from_secs(2)).await
        }
    }))
}

/// Adds the CPU the emulation used, in all and per frame, to the report's `emulation` section.
fn record_cpu_use(observed: &mut Observed, pacer_cpu: Option<f64>, process_cpu: Option<f64>) {
    if let (Some(emu), Some(pacer_s), Some(process_s)) =
        (observed.report.emulation.as_mut(), pacer_cpu, process_cpu)
    {
        let frames: u64 = emu
            .hosts
            .iter()
            .map(|h| h.stats.frames_in + h.stats.frames_out)
            .sum();
        let per = |s: f64| s * 1e6 / frames.max(1) as f64;
        emu.cpu = Some(CpuUse {
            pacer_s,
            process_s,
            frames,
            per_frame_us: per(process_s),
            pacer_per_frame_us: per(pacer_s),
        });
    }
}

/// The namespaces' names by rank.
fn prepared_names(ns: &Namespaces, n: usize) -> Vec<String> {
    (0..n).map(|r| ns.name(r).to_string()).collect()
}

/// The scenario's name of host `rank` (`h<rank>` in generated fabrics).
fn host_name(src: &Source, rank: usize) -> String {
    crate::world::fabric(src)
        .ok()
        .and_then(|(g, _)| g.hosts().nth(rank).map(|id| g.node(id).name.clone()))
        .unwrap_or_else(|| format!("h{rank}"))
}
