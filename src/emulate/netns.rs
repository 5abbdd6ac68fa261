//! Network namespaces for emulated hosts: create, configure, find what a killed run left, remove.
//!
//! Every emulated host gets a Linux network namespace of its own with one Ethernet interface,
//! `eth0`, which is a TAP device whose file descriptor fabemu holds (see [`Tap`]): what the
//! programs in the namespace send is read from that descriptor, and what fabemu writes into it
//! arrives at `eth0` as if it had come off the wire.
//!
//! # Interface
//! - [`check_rights`]: can this process create namespaces and TAPs at all (root or
//!   `CAP_NET_ADMIN` + `CAP_SYS_ADMIN`, a usable `/dev/net/tun`, the `ip` command of iproute2)?
//!   The error names what is missing.
//! - [`Namespaces::create`] makes one namespace per [`HostNet`] and returns the TAPs, one per
//!   host, in the order of the hosts. [`Namespaces::remove`] (or dropping it) deletes them and
//!   kills whatever still runs inside.
//! - [`stale`] / [`remove_stale`]: namespaces that a fabemu process left when it was killed.
//! - [`Namespaces::exec_command`] prepares `ip netns exec NS PROGRAM ARGS...`;
//!   [`Namespaces::set_sysctl`] sets a per-namespace sysctl (`net.ipv4.tcp_ecn`, ...).
//!
//! # Names
//! Namespaces are named `fabemu-<pid>-h<rank>` ([`NETNS_PREFIX`], the pid of the fabemu process
//! that made them, the host's rank). A process that makes more than one set of namespaces (tests)
//! names the later sets `fabemu-<pid>.<set>-h<rank>`. The pid lets a later run tell its own
//! namespaces from those of a run that was killed (`kill -9` leaves namespaces behind, because a
//! namespace lives on as long as its name is mounted under `/var/run/netns`; the TAP devices do
//! not outlive the process, they vanish with its file descriptors).
//!
//! # How an interface is set up
//! The TAP is created in fabemu's own namespace under a temporary unique name (layer 2, no
//! packet-information header, no offloads: the kernel segments and checksums in software, so
//! every frame read is a complete frame of at most MTU + 14 bytes with correct checksums), then
//! moved into its namespace (`ip link set DEV netns NS`; the descriptor stays valid), where it is
//! renamed `eth0` and given the host's MAC, MTU and address. IPv6 is disabled in the namespace
//! before the link comes up (no router solicitations, no MLD), every other host gets a permanent
//! neighbour entry (no ARP crosses the fabric) and, when it is outside the host's prefix, a
//! /32 route on `eth0`. All of this is done by iproute2 in batches: one `ip` for all namespaces,
//! one `ip` for all moves, one `ip netns exec` per namespace, run concurrently.
//!
//! Deleting a namespace deletes the TAP in it; reads and writes on its descriptor then fail.

use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;
use std::io::{self, Write as _};
use std::net::Ipv4Addr;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};

use super::tap::Tap;

/// Prefix of every namespace fabemu creates: `fabemu-<pid>-h<rank>`.
pub const NETNS_PREFIX: &str = "fabemu-";

/// Where iproute2 mounts named namespaces (ip-netns(8)).
const NETNS_RUN_DIR: &str = "/var/run/netns";

/// The interface name every host sees.
pub const HOST_IFNAME: &str = "eth0";

/// Linux capability numbers (linux/capability.h).
const CAP_NET_ADMIN: u32 = 12;
const CAP_SYS_ADMIN: u32 = 21;

/// How one emulated host's interface is configured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostNet {
    /// The host's rank (0..n−1); its namespace is `fabemu-<pid>-h<rank>`.
    pub rank: usize,
    /// The host's IPv4 address.
    pub ip: Ipv4Addr,
    /// Prefix length of the address on `eth0` (hosts outside it get a /32 route).
    pub prefix_len: u8,
    /// The MAC address of `eth0`.
    pub mac: [u8; 6],
    /// The MTU of `eth0` (IP bytes; frames are up to MTU + 14 bytes).
    pub mtu: u32,
}

/// Why namespaces or TAPs could not be made, configured or removed.
#[derive(Debug, thiserror::Error)]
pub enum NetError {
    /// This process may not create namespaces or TAPs (exit code 2).
    #[error("fabemu emulate cannot create network namespaces here: missing {missing}")]
    Rights {
        /// What is missing, for the user.
        missing: String,
    },
    /// The hosts given are inconsistent (exit code 2).
    #[error("invalid hosts for emulation: {0}")]
    Hosts(String),
    /// An `ip` command failed.
    #[error("`{command}` failed: {detail}")]
    Command {
        /// The command line (batch commands: the first lines of the batch).
        command: String,
        /// Its exit status and standard error.
        detail: String,
    },
    /// A system call or file operation failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The error.
        #[source]
        source: io::Error,
    },
}

impl NetError {
    /// The exit code the CLI uses: 2 for what the user must fix (rights, hosts), 1 otherwise.
    pub fn exit_code(&self) -> i32 {
        match self {
            NetError::Rights { .. } | NetError::Hosts(_) => 2,
            NetError::Command { .. } | NetError::Io { .. } => 1,
        }
    }

    fn io(what: impl Into<String>, source: io::Error) -> Self {
        NetError::Io {
            what: what.into(),
            source,
        }
    }
}

/// Checks that this process can create namespaces and TAP devices; the error names everything
/// that is missing (capabilities, `/dev/net/tun`, the `ip` command).
pub fn check_rights() -> Result<(), NetError> {
    let mut missing = Vec::new();
    match effective_capabilities() {
        Ok(caps) => {
            let lacking: Vec<&str> = [
                (CAP_NET_ADMIN, "CAP_NET_ADMIN"),
                (CAP_SYS_ADMIN, "CAP_SYS_ADMIN"),
            ]
            .iter()
            .filter(|(bit, _)| caps & (1u64 << bit) == 0)
            .map(|(_, name)| *name)
            .collect();
            if !lacking.is_empty() {
                missing.push(format!(
                    "the capabilities {} (CapEff is {caps:#x}; run as root, e.g. with sudo)",
                    lacking.join(" and ")
                ));
            }
        }
        Err(e) => missing.push(format!(
            "a readable CapEff in /proc/self/status to check for CAP_NET_ADMIN ({e})"
        )),
    }
    if let Err(e) = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/net/tun")
    {
        missing.push(format!("a usable /dev/net/tun ({e})"));
    }
    match Command::new("ip").arg("-V").output() {
        Ok(out) if out.status.success() => {}
        Ok(out) => missing.push(format!(
            "a working `ip` command (`ip -V` exited with {})",
            out.status
        )),
        Err(e) => missing.push(format!(
            "the `ip` command of iproute2 ({e}; install the iproute2 package)"
        )),
    }
    if missing.is_empty() {
        Ok(())
    } else {
        Err(NetError::Rights {
            missing: missing.join("; "),
        })
    }
}

/// The effective capability mask of this process (`CapEff` in `/proc/self/status`).
fn effective_capabilities() -> io::Result<u64> {
    let status = std::fs::read_to_string("/proc/self/status")?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "no CapEff line"))
}

/// Every named network namespace (the entries of `/var/run/netns`).
fn existing_namespaces() -> Vec<String> {
    let Ok(dir) = std::fs::read_dir(NETNS_RUN_DIR) else {
        return Vec::new();
    };
    let mut names: Vec<String> = dir
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().into_string().ok())
        .collect();
    names.sort();
    names
}

/// The pid that created a fabemu namespace, from its name (`fabemu-<pid>-h..` or
/// `fabemu-<pid>.<set>-h..`); `None` for names that are not fabemu's.
pub fn owner_pid(name: &str) -> Option<i32> {
    let rest = name.strip_prefix(NETNS_PREFIX)?;
    let end = rest.find(|c: char| !c.is_ascii_digit())?;
    let tail = &rest[end..];
    if !(tail.starts_with("-h") || tail.starts_with('.')) {
        return None;
    }
    rest[..end].parse().ok()
}

/// Whether a process with this pid exists (signal 0 reaches it, or exists but is not ours).
fn pid_alive(pid: i32) -> bool {
    use nix::errno::Errno;
    match nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None) {
        Ok(()) => true,
        Err(Errno::ESRCH) => false,
        Err(_) => true,
    }
}

/// fabemu namespaces whose creating process no longer exists (left by a killed run).
pub fn stale() -> Vec<String> {
    existing_namespaces()
        .into_iter()
        .filter(|n| owner_pid(n).is_some_and(|pid| pid > 0 && !pid_alive(pid)))
        .collect()
}

/// Removes the namespaces [`stale`] finds (killing any process still inside them) and returns
/// their names.
pub fn remove_stale() -> Result<Vec<String>, NetError> {
    let names = stale();
    delete_namespaces(&names)?;
    Ok(names)
}

/// Pids of the processes whose network namespace is one of `names` (as `ip netns pids` finds
/// them: the namespace file's inode against every `/proc/PID/ns/net`).
fn pids_in(names: &[String]) -> Vec<i32> {
    let wanted: HashSet<(u64, u64)> = names
        .iter()
        .filter_map(|n| std::fs::metadata(Path::new(NETNS_RUN_DIR).join(n)).ok())
        .map(|m| (m.dev(), m.ino()))
        .collect();
    if wanted.is_empty() {
        return Vec::new();
    }
    let Ok(proc_dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    proc_dir
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let pid: i32 = e.file_name().to_str()?.parse().ok()?;
            let m = std::fs::metadata(e.path().join("ns/net")).ok()?;
            wanted.contains(&(m.dev(), m.ino())).then_some(pid)
        })
        .collect()
}

/// Kills every process inside the namespaces, then deletes those of them that exist.
fn delete_namespaces(names: &[String]) -> Result<(), NetError> {
    let existing: HashSet<String> = existing_namespaces().into_iter().collect();
    let names: Vec<&String> = names.iter().filter(|n| existing.contains(*n)).collect();
    if names.is_empty() {
        return Ok(());
    }
    let owned: Vec<String> = names.iter().map(|n| n.to_string()).collect();
    // A process left inside would keep the namespace (and the programs) alive after its name is
    // gone, where nothing could find it any more.
    for pid in pids_in(&owned) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    let mut batch = String::new();
    for n in &names {
        let _ = writeln!(batch, "netns delete {n}");
    }
    // -force: go on after a failed line, so that one failure leaves no other namespace behind.
    run_ip(&["-force", "-batch", "-"], &batch)
}

/// Runs `ip ARGS` with `stdin` as its standard input; an error carries its stderr.
fn run_ip(args: &[&str], stdin: &str) -> Result<(), NetError> {
    let child = Command::new("ip")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| NetError::io("cannot run `ip`", e))?;
    finish(child, &format!("ip {}", args.join(" ")), stdin)
}

/// Feeds `stdin` to a spawned command and waits for it; an error names the command, the first
/// lines of its input and its stderr.
fn finish(mut child: std::process::Child, command: &str, stdin: &str) -> Result<(), NetError> {
    if let Some(mut input) = child.stdin.take() {
        // A command that fails early closes its input: its exit status says why.
        let _ = input.write_all(stdin.as_bytes());
    }
    let out = child
        .wait_with_output()
        .map_err(|e| NetError::io(format!("waiting for `{command}`"), e))?;
    if out.status.success() {
        return Ok(());
    }
    let head: Vec<&str> = stdin.lines().take(3).collect();
    let command = if head.is_empty() {
        command.to_string()
    } else {
        format!("{command} <<< {}", head.join("; "))
    };
    Err(NetError::Command {
        command,
        detail: format!(
            "{}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ),
    })
}

/// `aa:bb:cc:dd:ee:ff`.
pub fn format_mac(mac: &[u8; 6]) -> String {
    mac.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// Sets in a process that made several sets of namespaces (the first is set 0).
static NEXT_SET: AtomicUsize = AtomicUsize::new(0);

/// Namespace name of `rank` in set `set` of process `pid`.
fn namespace_name(pid: u32, set: usize, rank: usize) -> String {
    if set == 0 {
        format!("{NETNS_PREFIX}{pid}-h{rank}")
    } else {
        format!("{NETNS_PREFIX}{pid}.{set}-h{rank}")
    }
}

/// Whether `ip` lies inside `net/prefix_len`.
fn on_link(net: Ipv4Addr, prefix_len: u8, ip: Ipv4Addr) -> bool {
    let mask = match prefix_len {
        0 => 0,
        p => u32::MAX << (32 - u32::from(p.min(32))),
    };
    u32::from(net) & mask == u32::from(ip) & mask
}

/// The `ip -batch` that turns a moved-in TAP into the host's `eth0`.
fn host_batch(tmp_name: &str, host: &HostNet, all: &[HostNet]) -> String {
    let mut b = String::new();
    let _ = writeln!(b, "link set dev {tmp_name} name {HOST_IFNAME}");
    let _ = writeln!(
        b,
        "link set dev {HOST_IFNAME} address {} mtu {}",
        format_mac(&host.mac),
        host.mtu
    );
    let _ = writeln!(
        b,
        "addr add {}/{} dev {HOST_IFNAME}",
        host.ip, host.prefix_len
    );
    let _ = writeln!(b, "link set dev lo up");
    let _ = writeln!(b, "link set dev {HOST_IFNAME} up");
    // Neighbour entries after the link is up: bringing a link up or down flushes its table.
    for other in all.iter().filter(|o| o.rank != host.rank) {
        let _ = writeln!(
            b,
            "neigh replace {} lladdr {} dev {HOST_IFNAME} nud permanent",
            other.ip,
            format_mac(&other.mac)
        );
        if !on_link(host.ip, host.prefix_len, other.ip) {
            let _ = writeln!(b, "route replace {}/32 dev {HOST_IFNAME}", other.ip);
        }
    }
    b
}

/// Shell run by `ip netns exec NS sh -c` before the interface batch: IPv6 off for every device
/// (`all`) and every device that appears later (`default`), so that `eth0` never sends router
/// solicitations, MLD reports or DAD probes; then iproute2 reads the batch from stdin.
const CONFIGURE_SH: &str = "for c in all default; do \
     f=/proc/sys/net/ipv6/conf/$c/disable_ipv6; \
     [ ! -e $f ] || echo 1 > $f || exit 1; \
     done; exec ip -batch -";

/// Counter for temporary TAP names, unique within the process.
static NEXT_TAP: AtomicUsize = AtomicUsize::new(0);

/// The namespaces of one emulation; removed by [`Namespaces::remove`] or on drop.
#[derive(Debug)]
pub struct Namespaces {
    /// Namespace names by rank position (the order of the hosts given to `create`).
    names: Vec<String>,
    /// Rank -> index in `names`.
    index: HashMap<usize, usize>,
    /// Set once removed, so that drop does nothing more.
    removed: bool,
}

impl Namespaces {
    /// Creates a namespace and a TAP for every host, configured as the module doc says. The
    /// TAPs come back in the order of `hosts`. On any failure, everything made so far is
    /// removed before the error returns.
    pub fn create(hosts: &[HostNet]) -> Result<(Namespaces, Vec<Tap>), NetError> {
        validate(hosts)?;
        let pid = std::process::id();
        let set = NEXT_SET.fetch_add(1, Ordering::Relaxed);
        let names: Vec<String> = hosts
            .iter()
            .map(|h| namespace_name(pid, set, h.rank))
            .collect();
        // A namespace with our pid and set that we did not make was left by a killed process
        // that had our pid before.
        delete_namespaces(&names)?;
        let ns = Namespaces {
            index: hosts.iter().enumerate().map(|(i, h)| (h.rank, i)).collect(),
            names,
            removed: false,
        };
        // From here on, dropping `ns` (an early return) removes what was made.
        let mut batch = String::new();
        for n in &ns.names {
            let _ = writeln!(batch, "netns add {n}");
        }
        run_ip(&["-batch", "-"], &batch)?;

        let mut taps = Vec::with_capacity(hosts.len());
        let mut batch = String::new();
        for (host, name) in hosts.iter().zip(&ns.names) {
            let tmp = format!(
                "fe{pid:x}t{:x}",
                NEXT_TAP.fetch_add(1, Ordering::Relaxed) & 0xf_ffff
            );
            let tap = Tap::create(&tmp, host, name)?;
            let _ = writeln!(batch, "link set dev {tmp} netns {name}");
            taps.push(tap);
        }
        run_ip(&["-batch", "-"], &batch)?;

        // One configuring process per namespace, all running at once.
        let mut running = Vec::with_capacity(hosts.len());
        for ((host, name), tap) in hosts.iter().zip(&ns.names).zip(&taps) {
            let child = Command::new("ip")
                .args(["netns", "exec", name, "sh", "-c", CONFIGURE_SH])
                .stdin(Stdio::piped())
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .map_err(|e| NetError::io("cannot run `ip netns exec`", e))?;
            running.push((child, name, host_batch(tap.initial_name(), host, hosts)));
        }
        let mut first_error = None;
        for (child, name, batch) in running {
            let r = finish(child, &format!("ip netns exec {name} sh -c '...'"), &batch);
            if let Err(e) = r {
                first_error.get_or_insert(e);
            }
        }
        match first_error {
            Some(e) => Err(e),
            None => Ok((ns, taps)),
        }
    }

    /// The namespace of host `rank`. Panics on a rank that was not given to `create` (a
    /// programming error, not input).
    #[allow(clippy::panic)]
    pub fn name(&self, rank: usize) -> &str {
        match self.index.get(&rank) {
            Some(&i) => &self.names[i],
            None => panic!("no namespace for rank {rank}"),
        }
    }

    /// All namespace names, in the order of the hosts given to `create`.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// `ip netns exec NS PROGRAM ARGS...` for host `rank`, ready to be configured further
    /// (environment, stdio) and spawned; `tokio::process::Command::from` turns it into an
    /// async one.
    pub fn exec_command<I, S>(&self, rank: usize, program: &str, args: I) -> Command
    where
        I: IntoIterator<Item = S>,
        S: AsRef<std::ffi::OsStr>,
    {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", self.name(rank), program])
            .args(args);
        cmd
    }

    /// Sets the sysctl `key` (dotted, e.g. `net.ipv4.tcp_ecn`) to `value` inside host `rank`'s
    /// namespace (the `net.*` sysctls are per namespace).
    pub fn set_sysctl(&self, rank: usize, key: &str, value: &str) -> Result<(), NetError> {
        if key.is_empty()
            || !key
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c))
        {
            return Err(NetError::Hosts(format!("invalid sysctl name {key:?}")));
        }
        let path = format!("/proc/sys/{}", key.replace('.', "/"));
        let child = self
            .exec_command(rank, "sh", ["-c", "cat > \"$0\"", path.as_str()])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| NetError::io("cannot run `ip netns exec`", e))?;
        finish(
            child,
            &format!("ip netns exec {} sysctl {key}={value}", self.name(rank)),
            value,
        )
    }

    /// Deletes every namespace (killing whatever still runs inside). The TAPs in them are
    /// deleted with them: their descriptors fail from then on.
    pub fn remove(mut self) -> Result<(), NetError> {
        self.removed = true;
        delete_namespaces(&self.names)
    }
}

impl Drop for Namespaces {
    fn drop(&mut self) {
        if !self.removed {
            if let Err(e) = delete_namespaces(&self.names) {
                tracing::warn!("removing the emulation's namespaces: {e}");
            }
        }
    }
}

/// Ranks unique, prefixes and MTUs sensible, addresses and MACs unique.
fn validate(hosts: &[HostNet]) -> Result<(), NetError> {
    if hosts.is_empty() {
        return Err(NetError::Hosts("no hosts".into()));
    }
    let mut ranks = HashSet::new();
    let mut ips = HashSet::new();
    let mut macs = HashSet::new();
    for h in hosts {
        if !ranks.insert(h.rank) {
            return Err(NetError::Hosts(format!("rank {} appears twice", h.rank)));
        }
        if !ips.insert(h.ip) {
            return Err(NetError::Hosts(format!("address {} appears twice", h.ip)));
        }
        if !macs.insert(h.mac) {
            return Err(NetError::Hosts(format!(
                "MAC {} appears twice",
                format_mac(&h.mac)
            )));
        }
        if h.prefix_len > 32 {
            return Err(NetError::Hosts(format!(
                "prefix length {} of rank {} is over 32",
                h.prefix_len, h.rank
            )));
        }
        // 68 is IPv4's minimum MTU (RFC 791); a TAP accepts up to 65521.
        if !(68..=65_521).contains(&h.mtu) {
            return Err(NetError::Hosts(format!(
                "MTU {} of rank {} is outside 68..=65521",
                h.mtu, h.rank
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owner_pid_reads_both_name_forms_and_nothing_else() {
        assert_eq!(owner_pid("fabemu-1234-h0"), Some(1234));
        assert_eq!(owner_pid("fabemu-77.3-h12"), Some(77));
        assert_eq!(owner_pid("fabemu-x-h0"), None);
        assert_eq!(owner_pid("fabemu-12"), None);
        assert_eq!(owner_pid("fabemu-12-x"), None);
        assert_eq!(owner_pid("other-12-h0"), None);
        assert_eq!(namespace_name(42, 0, 3), "fabemu-42-h3");
        assert_eq!(owner_pid(&namespace_name(42, 5, 3)), Some(42));
    }

    #[test]
    fn on_link_masks_the_prefix() {
        let a = Ipv4Addr::new(10, 0, 0, 1);
        assert!(on_link(a, 24, Ipv4Addr::new(10, 0, 0, 200)));
        assert!(!on_link(a, 24, Ipv4Addr::new(10, 0, 1, 1)));
        assert!(on_link(a, 8, Ipv4Addr::new(10, 3, 2, 1)));
        assert!(on_link(a, 0, Ipv4Addr::new(192, 168, 0, 1)));
        assert!(!on_link(a, 32, Ipv4Addr::new(10, 0, 0, 2)));
    }

    #[test]
    fn host_batch_has_neighbours_and_routes_only_off_link() {
        let h = |rank: usize, ip: [u8; 4]| HostNet {
            rank,
            ip: Ipv4Addr::from(ip),
            prefix_len: 24,
            mac: [2, 0, 0, 0, 0, rank as u8 + 1],
            mtu: 1500,
        };
        let hosts = [
            h(0, [10, 0, 0, 1]),
            h(1, [10, 0, 0, 2]),
            h(2, [10, 0, 1, 1]),
        ];
        let b = host_batch("tmp0", &hosts[0], &hosts);
        assert!(b.contains("link set dev tmp0 name eth0\n"));
        assert!(b.contains("address 02:00:00:00:00:01 mtu 1500"));
        assert!(b.contains("addr add 10.0.0.1/24 dev eth0"));
        assert!(
            b.contains("neigh replace 10.0.0.2 lladdr 02:00:00:00:00:02 dev eth0 nud permanent")
        );
        assert!(b.contains("neigh replace 10.0.1.1 lladdr 02:00:00:00:00:03"));
        assert!(!b.contains("10.0.0.1 lladdr"));
        assert!(b.contains("route replace 10.0.1.1/32 dev eth0"));
        assert!(!b.contains("route replace 10.0.0.2"));
        assert!(validate(&hosts).is_ok());
        let mut dup = hosts.to_vec();
        dup[2].ip = dup[1].ip;
        assert!(matches!(validate(&dup), Err(NetError::Hosts(_))));
    }
}
