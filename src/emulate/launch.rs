//! The programs of an emulation: one per host, started inside its namespace, with their output
//! prefixed by rank, waited for, and killed as a whole on Ctrl-C or when fabemu fails.
//!
//! # Interface
//! - [`RankEnv`]: what a rank is told through its environment, as torchrun tells it (`RANK`,
//!   `WORLD_SIZE`, `LOCAL_RANK=0`, `LOCAL_WORLD_SIZE=1`, `MASTER_ADDR`, `MASTER_PORT`) plus
//!   `FABEMU_HOST`, the host's name in the scenario, and `GLOO_SOCKET_IFNAME=eth0`.
//! - [`launch`] starts `PROGRAM ARGS...` once per rank (`ip netns exec NS PROGRAM ARGS...`,
//!   each in a process group of its own, stdin from /dev/null), on the current tokio runtime.
//!   Each line a rank writes goes to the [`OutputSink`]: fabemu's own stdout/stderr prefixed
//!   `[rank N] `, or a channel.
//! - [`Ranks::next_exit`] waits for the next rank to end; [`Ranks::wait_all`] for all of them;
//!   both are cancel-safe (use them in `tokio::select!` beside Ctrl-C). [`Ranks::terminate`]
//!   sends SIGTERM to every rank's process group, SIGKILL after a grace period, and returns
//!   every rank's exit status. Dropping [`Ranks`] SIGKILLs the groups of ranks still running.
//! - [`write_mpi_files`]: a hostfile and an rsh agent so that `mpirun` started in rank 0's
//!   namespace launches its daemons in the other hosts' namespaces.
//!
//! A rank's own process group holds it and its children (a shell's pipeline, a launcher's
//! workers), so a signal to the group reaches all of them; the terminal's Ctrl-C reaches only
//! fabemu, which then ends the ranks in order. Anything that left the group (a daemon) is
//! still inside the namespace and dies when the namespaces are removed.

use std::ffi::OsStr;
use std::fmt::Write as _;
use std::io::{self, Write as _};
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::netns::Namespaces;

/// What one rank is told through its environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RankEnv {
    /// `RANK`; also which host (namespace) the rank runs on.
    pub rank: usize,
    /// `WORLD_SIZE`.
    pub world_size: usize,
    /// `MASTER_ADDR`: rank 0's address.
    pub master_addr: Ipv4Addr,
    /// `MASTER_PORT`.
    pub master_port: u16,
    /// `FABEMU_HOST`: the host's name in the scenario.
    pub host_name: String,
}

impl RankEnv {
    /// The environment variables, as torchrun sets them for one process per node.
    pub fn vars(&self) -> Vec<(&'static str, String)> {
        vec![
            ("RANK", self.rank.to_string()),
            ("WORLD_SIZE", self.world_size.to_string()),
            ("LOCAL_RANK", "0".into()),
            ("LOCAL_WORLD_SIZE", "1".into()),
            ("GROUP_RANK", self.rank.to_string()),
            ("MASTER_ADDR", self.master_addr.to_string()),
            ("MASTER_PORT", self.master_port.to_string()),
            ("FABEMU_HOST", self.host_name.clone()),
            // Gloo finds its address from the hostname, which every namespace shares with the
            // machine and which resolves to loopback: each rank would then tell the others to
            // call it at 127.0.0.1. The host's interface is the right one.
            ("GLOO_SOCKET_IFNAME", "eth0".into()),
        ]
    }
}

/// Which of a rank's output streams a line came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    /// Standard output.
    Stdout,
    /// Standard error.
    Stderr,
}

/// One line of a rank's output, without its newline.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RankLine {
    /// The rank that wrote it.
    pub rank: usize,
    /// Where it wrote it.
    pub stream: Stream,
    /// The bytes (not necessarily UTF-8).
    pub line: Vec<u8>,
}

/// Where the ranks' output lines go.
#[derive(Debug, Clone)]
pub enum OutputSink {
    /// fabemu's stdout / stderr, each line prefixed `[rank N] ` (one write per line, so lines
    /// of different ranks never mix).
    Terminal,
    /// A channel (the order of lines within one stream of one rank is kept).
    Channel(mpsc::UnboundedSender<RankLine>),
}

/// The prefixed form of a line, as [`OutputSink::Terminal`] writes it.
pub fn prefixed(rank: usize, line: &[u8]) -> Vec<u8> {
    let mut out = format!("[rank {rank}] ").into_bytes();
    out.extend_from_slice(line);
    out.push(b'\n');
    out
}

/// Why the ranks could not be started.
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    /// Spawning `ip netns exec` for a rank failed (the ranks started before were killed).
    #[error("cannot start rank {rank} in namespace {namespace}: {source}")]
    Spawn {
        /// The rank.
        rank: usize,
        /// Its namespace.
        namespace: String,
        /// Why.
        #[source]
        source: io::Error,
    },
}

/// A rank's end: its exit code, or the signal that ended it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RankExit {
    /// The rank.
    pub rank: usize,
    /// Its status (`ip netns exec` passes its program's exit code on, and dies of its signal).
    pub status: ExitStatus,
}

/// The running ranks of one launch (see the module doc).
#[derive(Debug)]
pub struct Ranks {
    /// Process group ids (= the pid of each rank's `ip netns exec`, which execs the program).
    groups: Vec<Pid>,
    /// Exit statuses so far, by position.
    exits: Vec<Option<ExitStatus>>,
    /// (position, status) from the waiting tasks.
    ended: mpsc::UnboundedReceiver<(usize, io::Result<ExitStatus>)>,
    /// Rank numbers, by position.
    ranks: Vec<usize>,
    /// The tasks copying output; finished when the ranks (and their children) closed it.
    output: Vec<JoinHandle<()>>,
}

/// Starts `program args...` once per rank in `envs`, inside the rank's namespace, with the
/// rank's environment. Must run inside a tokio runtime (the waits and output copies are tasks
/// on it). If one rank cannot be started, those started before are killed.
pub fn launch<S: AsRef<OsStr>>(
    ns: &Namespaces,
    envs: &[RankEnv],
    program: &str,
    args: &[S],
    sink: OutputSink,
) -> Result<Ranks, LaunchError> {
    let (tx, ended) = mpsc::unbounded_channel();
    let mut ranks = Ranks {
        groups: Vec::with_capacity(envs.len()),
        exits: vec![None; envs.len()],
        ended,
        ranks: envs.iter().map(|e| e.rank).collect(),
        output: Vec::new(),
    };
    for (pos, env) in envs.iter().enumerate() {
        let mut cmd = tokio::process::Command::from(ns.exec_command(env.rank, program, args));
        cmd.envs(env.vars())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // Its own process group: the terminal's SIGINT reaches fabemu only, and killpg
            // reaches the rank with all its children.
            .process_group(0);
        let spawned = cmd.spawn().and_then(|child| {
            let pid = child
                .id()
                .and_then(|p| i32::try_from(p).ok())
                .ok_or_else(|| io::Error::other("spawned child has no pid"))?;
            Ok((child, pid))
        });
        let (mut child, pid) = match spawned {
            Ok(c) => c,
            Err(source) => {
                // `ranks` is dropped here, killing the groups started so far.
                return Err(LaunchError::Spawn {
                    rank: env.rank,
                    namespace: ns.name(env.rank).to_string(),
                    source,
                });
            }
        };
        ranks.groups.push(Pid::from_raw(pid));
        if let Some(out) = child.stdout.take() {
            ranks
                .output
                .push(copy_lines(out, env.rank, Stream::Stdout, sink.clone()));
        }
        if let Some(err) = child.stderr.take() {
            ranks
                .output
                .push(copy_lines(err, env.rank, Stream::Stderr, sink.clone()));
        }
        let tx = tx.clone();
        tokio::spawn(async move {
            let status = child.wait().await;
            let _ = tx.send((pos, status));
        });
    }
    Ok(ranks)
}

/// A task copying a rank's output stream, line by line, into the sink.
fn copy_lines<R>(from: R, rank: usize, stream: Stream, sink: OutputSink) -> JoinHandle<()>
where
    R: AsyncRead + Unpin + Send + 'static,
{
    tokio::spawn(async move {
        let mut reader = BufReader::new(from);
        let mut line = Vec::new();
        loop {
            line.clear();
            match reader.read_until(b'\n', &mut line).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
            if line.last() == Some(&b'\n') {
                line.pop();
            }
            match &sink {
                OutputSink::Terminal => {
                    let bytes = prefixed(rank, &line);
                    // One write_all under the lock per line: lines never interleave. A closed
                    // terminal only loses the output.
                    let _ = match stream {
                        Stream::Stdout => io::stdout().lock().write_all(&bytes),
                        Stream::Stderr => io::stderr().lock().write_all(&bytes),
                    };
                }
                OutputSink::Channel(tx) => {
                    let _ = tx.send(RankLine {
                        rank,
                        stream,
                        line: line.clone(),
                    });
                }
            }
        }
    })
}

impl Ranks {
    /// How many ranks were started.
    pub fn len(&self) -> usize {
        self.groups.len()
    }

    /// Whether no rank was started.
    pub fn is_empty(&self) -> bool {
        self.groups.is_empty()
    }

    /// The process group of each rank (its leader's pid), in launch order.
    pub fn process_groups(&self) -> Vec<i32> {
        self.groups.iter().map(|p| p.as_raw()).collect()
    }

    /// Whether every rank has ended.
    pub fn all_ended(&self) -> bool {
        self.exits.iter().all(Option::is_some)
    }

    /// Waits for the next rank to end and returns it; `None` once all have. Cancel-safe.
    pub async fn next_exit(&mut self) -> Option<RankExit> {
        if self.all_ended() {
            return None;
        }
        loop {
            let (pos, status) = self.ended.recv().await?;
            let status = match status {
                Ok(s) => s,
                // Waiting failed (never seen in practice): count the rank as killed.
                Err(_) => std::os::unix::process::ExitStatusExt::from_raw(Signal::SIGKILL as i32),
            };
            if self.exits[pos].is_none() {
                self.exits[pos] = Some(status);
                return Some(RankExit {
                    rank: self.ranks[pos],
                    status,
                });
            }
        }
    }

    /// Waits until every rank has ended, then (for at most `drain`) until their output is
    /// copied, and returns every rank's status in launch order. Cancel-safe.
    pub async fn wait_all(&mut self, drain: Duration) -> Vec<RankExit> {
        while self.next_exit().await.is_some() {}
        self.drain_output(drain).await;
        self.exits()
    }

    /// Every rank's status in launch order (ranks still running are left out).
    pub fn exits(&self) -> Vec<RankExit> {
        self.exits
            .iter()
            .zip(&self.ranks)
            .filter_map(|(s, &rank)| s.map(|status| RankExit { rank, status }))
            .collect()
    }

    /// Waits up to `limit` for the output copies (a rank's leftover children may hold its
    /// pipes open; their output after that is not copied).
    async fn drain_output(&mut self, limit: Duration) {
        let tasks = std::mem::take(&mut self.output);
        let all = async {
            for t in tasks {
                let _ = t.await;
            }
        };
        let _ = tokio::time::timeout(limit, all).await;
    }

    /// Sends `signal` to the process group of every rank (also of ended ranks: children they
    /// left in their group go too).
    fn signal_groups(&self, signal: Signal) {
        for &g in &self.groups {
            // ESRCH: the group is empty already.
            let _ = killpg(g, signal);
        }
    }

    /// Ends every rank: SIGTERM to each process group, SIGKILL to all after `grace` (at once
    /// if every rank ended sooner: their children may not have), then waits (up to 2 s) until
    /// the groups are empty. Returns every rank's status in launch order.
    pub async fn terminate(&mut self, grace: Duration) -> Vec<RankExit> {
        self.signal_groups(Signal::SIGTERM);
        let gentle = async { while self.next_exit().await.is_some() {} };
        let _ = tokio::time::timeout(grace, gentle).await;
        self.signal_groups(Signal::SIGKILL);
        while self.next_exit().await.is_some() {}
        // Killed children that left their shell are reaped by init, not by us: wait (briefly)
        // until no group has a process, zombies included, so that none is left when this returns.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(2);
        while self.groups.iter().any(|&g| killpg(g, None).is_ok())
            && tokio::time::Instant::now() < deadline
        {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        self.drain_output(Duration::from_millis(500)).await;
        self.exits()
    }
}

impl Drop for Ranks {
    fn drop(&mut self) {
        // Best effort, without waiting: the groups of ranks not known to have ended.
        for (g, exit) in self.groups.iter().zip(&self.exits) {
            if exit.is_none() {
                let _ = killpg(*g, Signal::SIGKILL);
            }
        }
    }
}

/// The files [`write_mpi_files`] wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MpiFiles {
    /// One line per host: `IP slots=1`, in rank order.
    pub hostfile: PathBuf,
    /// An executable rsh agent: `AGENT [OPTIONS] HOST COMMAND...` runs `COMMAND...` (joined
    /// with spaces and run by `sh -c`, as ssh does) inside HOST's namespace, HOST being an
    /// address, a host name or a namespace name.
    pub agent: PathBuf,
}

/// Writes `hostfile` and `rsh-agent` into `dir` for hosts with addresses `ips` and scenario
/// names `host_names`, by rank (index i is rank i). `mpirun --mca plm_rsh_agent AGENT
/// --hostfile HOSTFILE ...` started in rank 0's namespace then starts its daemons in the
/// other hosts' namespaces, and they talk over the emulated fabric.
pub fn write_mpi_files(
    dir: &Path,
    ns: &Namespaces,
    ips: &[Ipv4Addr],
    host_names: &[String],
) -> io::Result<MpiFiles> {
    let mut hostfile = String::new();
    for ip in ips {
        let _ = writeln!(hostfile, "{ip} slots=1");
    }
    let hostfile_path = dir.join("hostfile");
    std::fs::write(&hostfile_path, hostfile)?;

    let mut cases = String::new();
    for (rank, ip) in ips.iter().enumerate() {
        let name = ns.name(rank);
        let mut patterns = vec![ip.to_string(), name.to_string()];
        if let Some(h) = host_names.get(rank) {
            if !h.is_empty()
                && h.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c))
            {
                patterns.push(h.clone());
            }
        }
        let _ = writeln!(cases, "  {}) ns={name} ;;", patterns.join("|"));
    }
    let script = format!(
        r#"#!/bin/sh
# rsh agent of a fabemu emulation: runs a command inside an emulated host's network namespace,
# as `ssh HOST COMMAND...` runs it on a remote host (ssh options are skipped; the command words
# are joined with spaces and run by sh -c). For mpirun: --mca plm_rsh_agent THIS_FILE.
while [ $# -gt 0 ]; do
  case "$1" in
    -[bcDEeFIiJLlmOoPpQRSWw]) shift 2 ;;
    -*) shift ;;
    *) break ;;
  esac
done
if [ $# -lt 1 ]; then echo "usage: $0 [ssh options] HOST COMMAND..." >&2; exit 255; fi
host=$1; shift
case "$host" in
{cases}  *) echo "$0: $host is not an emulated host" >&2; exit 255 ;;
esac
exec ip netns exec "$ns" sh -c "$*"
"#
    );
    let agent_path = dir.join("rsh-agent");
    std::fs::write(&agent_path, script)?;
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&agent_path, std::fs::Permissions::from_mode(0o755))?;
    Ok(MpiFiles {
        hostfile: hostfile_path,
        agent: agent_path,
    })
}
