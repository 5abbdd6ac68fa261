//! The operating-system side of `fabemu emulate`: namespaces with TAPs, real traffic between
//! them, teardown on every path, and the programs launched in them.
//!
//! These tests need root (CAP_NET_ADMIN, CAP_SYS_ADMIN, /dev/net/tun, iproute2). Under CI
//! (`CI=true`) they must run, and fail if they cannot; elsewhere they skip, saying why. The
//! fabric is stood in for by a byte-copying loop between the TAPs (by destination MAC), so what
//! is checked here is the plumbing: that real ICMP, UDP and TCP work across it, that nothing
//! but IPv4 leaves a host, and that nothing is left behind. Everything a test makes is removed
//! by guards (the `Namespaces`' drop kills what runs inside), also when an assertion fails.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: a failure is a panic

use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fabemu::emulate::netns::{self, HostNet, Namespaces, NetError};
use fabemu::emulate::tap::{readable, Tap};

/// Whether the test can run: true with the rights; a failure under CI without them; else a
/// skip, printed.
fn rights() -> bool {
    match netns::check_rights() {
        Ok(()) => true,
        Err(e) if std::env::var("CI").is_ok_and(|v| v == "true") => {
            panic!("CI must run the namespace tests, but: {e}")
        }
        Err(e) => {
            eprintln!("skipped (not allowed to create namespaces here): {e}");
            false
        }
    }
}

/// Hosts 10.0.0.(i+1)/24 with the addressing plan's MACs 02:00:00:00:00:(i+1).
fn hosts(n: usize, mtu: u32) -> Vec<HostNet> {
    (0..n)
        .map(|i| HostNet {
            rank: i,
            ip: Ipv4Addr::new(10, 0, 0, i as u8 + 1),
            prefix_len: 24,
            mac: [2, 0, 0, 0, 0, i as u8 + 1],
            mtu,
        })
        .collect()
}

/// What the stand-in fabric saw.
#[derive(Default)]
struct Seen {
    frames: AtomicUsize,
    /// Ethertypes of frames that were not IPv4.
    not_ipv4: Mutex<Vec<u16>>,
    /// Frames longer than the sender's MTU + 14, or for an unknown MAC.
    bad: Mutex<Vec<String>>,
}

/// The stand-in fabric: a thread reads every TAP and copies each frame into the TAP whose MAC
/// is the frame's destination (broadcasts to every other TAP). Stopped when dropped.
struct Forwarder {
    seen: Arc<Seen>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Forwarder {
    fn start(taps: Vec<Tap>) -> Forwarder {
        let seen = Arc::new(Seen::default());
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (seen, stop) = (seen.clone(), stop.clone());
            std::thread::spawn(move || {
                let by_mac: HashMap<[u8; 6], &Tap> = taps.iter().map(|t| (t.mac(), t)).collect();
                let all: Vec<&Tap> = taps.iter().collect();
                // Longer than any frame may be, so an oversized one would show.
                let mut buf = vec![0u8; 70_000];
                while !stop.load(Ordering::Relaxed) {
                    readable(&all, Duration::from_millis(10)).unwrap();
                    for tap in &taps {
                        while let Ok(Some(n)) = tap.try_recv(&mut buf) {
                            forward(tap, &buf[..n], &by_mac, &seen);
                        }
                    }
                }
            })
        };
        Forwarder {
            seen,
            stop,
            thread: Some(thread),
        }
    }
}

/// Copies one frame `from` sent to the TAP it is addressed to, noting anything amiss.
fn forward(from: &Tap, frame: &[u8], by_mac: &HashMap<[u8; 6], &Tap>, seen: &Seen) {
    let n = frame.len();
    seen.frames.fetch_add(1, Ordering::Relaxed);
    if n > from.max_frame_len() || n < 14 {
        seen.bad
            .lock()
            .unwrap()
            .push(format!("{n}-byte frame from rank {}", from.rank()));
        return;
    }
    let ethertype = u16::from_be_bytes([frame[12], frame[13]]);
    if ethertype != 0x0800 {
        seen.not_ipv4.lock().unwrap().push(ethertype);
    }
    let dst: [u8; 6] = frame[..6].try_into().unwrap();
    if dst == [0xff; 6] {
        for other in by_mac.values().filter(|o| o.rank() != from.rank()) {
            let _ = other.send(frame);
        }
    } else if let Some(to) = by_mac.get(&dst) {
        to.send(frame).unwrap();
    } else {
        seen.bad
            .lock()
            .unwrap()
            .push(format!("frame for unknown MAC {dst:02x?}"));
    }
}

impl Drop for Forwarder {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Runs `python3 -c SCRIPT ARGS` in host `rank`'s namespace; returns (success, stdout, stderr).
async fn python(
    ns: &Namespaces,
    rank: usize,
    script: &str,
    args: &[&str],
) -> (bool, String, String) {
    let mut all = vec!["-c", script];
    all.extend_from_slice(args);
    let mut cmd = tokio::process::Command::from(ns.exec_command(rank, "python3", all));
    cmd.stdin(Stdio::null()).kill_on_drop(true);
    let out = tokio::time::timeout(Duration::from_secs(60), cmd.output())
        .await
        .expect("python in a namespace took over 60 s")
        .expect("python3 runs");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// ICMP echo over a raw socket, as `ping -c N -W 1 DST` does (no ping binary needed): exits 0
/// when all N echoes came back with their payload.
const PING: &str = r#"
import os, socket, struct, sys, time
dst, n = sys.argv[1], int(sys.argv[2])
s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
def csum(b):
    if len(b) % 2: b += b'\0'
    t = sum(struct.unpack('!%dH' % (len(b) // 2), b))
    t = (t >> 16) + (t & 0xffff); t += t >> 16
    return ~t & 0xffff
ident, ok = os.getpid() & 0xffff, 0
for seq in range(n):
    payload = b'fabemu%02d' % seq * 7
    c = csum(struct.pack('!BBHHH', 8, 0, 0, ident, seq) + payload)
    s.sendto(struct.pack('!BBHHH', 8, 0, c, ident, seq) + payload, (dst, 0))
    deadline = time.time() + 1
    while (left := deadline - time.time()) > 0:
        s.settimeout(left)
        try: data, addr = s.recvfrom(4096)
        except socket.timeout: break
        ihl = (data[0] & 15) * 4
        t, _, _, i, sq = struct.unpack('!BBHHH', data[ihl:ihl + 8])
        if t == 0 and i == ident and sq == seq and addr[0] == dst and data[ihl + 8:] == payload:
            ok += 1
            break
print(ok)
sys.exit(0 if ok == n else 1)
"#;

/// UDP echo server: answers one datagram with its payload upper-cased, then exits.
const UDP_SERVER: &str = r#"
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(('0.0.0.0', int(sys.argv[1])))
s.settimeout(30)
data, addr = s.recvfrom(2048)
s.sendto(data.upper(), addr)
print(addr[0])
"#;

/// UDP client: sends until the upper-cased echo comes back (the server may start later).
const UDP_CLIENT: &str = r#"
import socket, sys, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(0.2)
msg = b'hello from ' + sys.argv[3].encode()
for _ in range(100):
    s.sendto(msg, (sys.argv[1], int(sys.argv[2])))
    try: data, addr = s.recvfrom(2048)
    except socket.timeout: continue
    print(data.decode(), addr[0]); sys.exit(0 if data == msg.upper() else 1)
sys.exit(2)
"#;

/// TCP sink: accepts one connection, prints the byte count and SHA-256 of what it read.
const TCP_SERVER: &str = r#"
import hashlib, socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(('0.0.0.0', int(sys.argv[1]))); s.listen(1); s.settimeout(30)
c, _ = s.accept(); c.settimeout(30); h = hashlib.sha256(); n = 0
while (b := c.recv(65536)):
    h.update(b); n += len(b)
print(n, h.hexdigest())
"#;

/// TCP source: connects (retrying while the sink starts) and sends N seeded random bytes;
/// prints their count and SHA-256.
const TCP_CLIENT: &str = r#"
import hashlib, random, socket, sys, time
data = random.Random(7).randbytes(int(sys.argv[3]))
for _ in range(100):
    try: c = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=30); break
    except OSError: time.sleep(0.1)
else: sys.exit(2)
c.sendall(data); c.close()
print(len(data), hashlib.sha256(data).hexdigest())
"#;

/// The interface names in fabemu's own namespace.
fn root_links() -> String {
    let out = std::process::Command::new("ip")
        .args(["-o", "link", "show"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Asserts that the namespaces and the TAPs are gone: no namespace of that name, no device of
/// the TAPs' first names in this namespace, and the TAPs' descriptors fail (their devices were
/// deleted with the namespaces; the kernel does that asynchronously, hence the wait).
fn assert_gone(names: &[String], taps: &[Tap]) {
    let existing = std::fs::read_dir("/var/run/netns")
        .map(|d| {
            d.filter_map(|e| e.ok()?.file_name().into_string().ok())
                .collect::<Vec<_>>()
        })
        .unwrap_or_default();
    for n in names {
        assert!(!existing.contains(n), "namespace {n} is still there");
    }
    let links = root_links();
    for t in taps {
        assert!(
            !links.contains(&format!(": {}:", t.initial_name())),
            "{} left in the root namespace",
            t.initial_name()
        );
        let deadline = Instant::now() + Duration::from_secs(10);
        let frame = [0u8; 60];
        while t.send(&frame).is_ok() {
            assert!(
                Instant::now() < deadline,
                "the TAP of rank {} still accepts frames",
                t.rank()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn icmp_udp_and_tcp_cross_the_taps() {
    if !rights() {
        return;
    }
    let started = Instant::now();
    let (ns, taps) = Namespaces::create(&hosts(3, 1500)).unwrap();
    eprintln!("3 namespaces made in {:?}", started.elapsed());
    let fwd = Forwarder::start(taps);

    // ICMP both ways between two pairs.
    for (from, to) in [(0, "10.0.0.3"), (2, "10.0.0.1"), (1, "10.0.0.3")] {
        let (ok, out, err) = python(&ns, from, PING, &[to, "3"]).await;
        assert!(ok, "ping from rank {from} to {to}: {out} {err}");
        assert_eq!(out.trim(), "3");
    }

    // A UDP exchange: the server sees the client's address, the client the reply.
    let server = {
        let mut cmd = tokio::process::Command::from(ns.exec_command(
            1,
            "python3",
            ["-c", UDP_SERVER, "5001"],
        ));
        cmd.stdout(Stdio::piped()).kill_on_drop(true);
        cmd.spawn().unwrap()
    };
    let (ok, out, err) = python(&ns, 0, UDP_CLIENT, &["10.0.0.2", "5001", "rank0"]).await;
    assert!(ok, "UDP client: {out} {err}");
    assert_eq!(out.trim(), "HELLO FROM RANK0 10.0.0.2");
    let server = server.wait_with_output().await.unwrap();
    assert!(server.status.success());
    assert_eq!(String::from_utf8_lossy(&server.stdout).trim(), "10.0.0.1");

    // 4 MB of TCP: every segment must fit the MTU (no offloads) and carry a correct checksum
    // (the receiving kernel drops a bad one, and the transfer would stall).
    let sink = {
        let mut cmd = tokio::process::Command::from(ns.exec_command(
            2,
            "python3",
            ["-c", TCP_SERVER, "5002"],
        ));
        cmd.stdout(Stdio::piped()).kill_on_drop(true);
        cmd.spawn().unwrap()
    };
    let (ok, sent, err) = python(&ns, 0, TCP_CLIENT, &["10.0.0.3", "5002", "4000000"]).await;
    assert!(ok, "TCP client: {sent} {err}");
    let got = sink.wait_with_output().await.unwrap();
    assert_eq!(String::from_utf8_lossy(&got.stdout).trim(), sent.trim());
    assert!(sent.starts_with("4000000 "));
    let frames = fwd.seen.frames.load(Ordering::Relaxed);
    // 4 MB in segments of at most 1448 bytes, plus ACKs.
    assert!(frames > 4_000_000 / 1448, "only {frames} frames crossed");
    assert_eq!(*fwd.seen.bad.lock().unwrap(), Vec::<String>::new());
    assert_eq!(*fwd.seen.not_ipv4.lock().unwrap(), Vec::<u16>::new());
    drop(fwd);
    ns.remove().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_host_sends_nothing_and_is_configured_as_asked() {
    if !rights() {
        return;
    }
    let hs = hosts(2, 9000);
    let (ns, taps) = Namespaces::create(&hs).unwrap();
    // The frames of bringing the links up (IPv6 would send router solicitations, MLD reports
    // and DAD probes within this second) and of an idle second after.
    let fwd = Forwarder::start(taps);
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(*fwd.seen.not_ipv4.lock().unwrap(), Vec::<u16>::new());
    assert_eq!(
        fwd.seen.frames.load(Ordering::Relaxed),
        0,
        "an idle host sent frames"
    );

    let show = |rank: usize, what: &[&str]| {
        let mut args = vec!["-n", ns.name(rank)];
        args.extend_from_slice(what);
        let out = std::process::Command::new("ip")
            .args(&args)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let link = show(0, &["-o", "link", "show", "eth0"]);
    assert!(
        link.contains("mtu 9000") && link.contains("link/ether 02:00:00:00:00:01"),
        "{link}"
    );
    assert!(link.contains("UP"), "{link}");
    let addr = show(0, &["-o", "addr", "show"]);
    assert!(
        addr.contains("inet 10.0.0.1/24") && !addr.contains("inet6"),
        "{addr}"
    );
    let neigh = show(0, &["neigh", "show", "dev", "eth0"]);
    assert_eq!(neigh.trim(), "10.0.0.2 lladdr 02:00:00:00:00:02 PERMANENT");
    let (ok, v6, err) = python(
        &ns,
        1,
        "print(open('/proc/sys/net/ipv6/conf/eth0/disable_ipv6').read())",
        &[],
    )
    .await;
    assert!(ok && v6.trim() == "1", "{v6} {err}");

    // A per-namespace sysctl.
    ns.set_sysctl(1, "net.ipv4.tcp_ecn", "1").unwrap();
    let read = "print(open('/proc/sys/net/ipv4/tcp_ecn').read())";
    assert_eq!(python(&ns, 1, read, &[]).await.1.trim(), "1");
    assert_ne!(
        python(&ns, 0, read, &[]).await.1.trim(),
        "1",
        "the sysctl leaked to rank 0"
    );
    assert!(ns.set_sysctl(0, "net.ipv4.no_such_key", "1").is_err());
    assert!(matches!(
        ns.set_sysctl(0, "../../etc/x", "1"),
        Err(NetError::Hosts(_))
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remove_drop_and_a_failed_create_leave_nothing() {
    if !rights() {
        return;
    }
    // remove
    let (ns, taps) = Namespaces::create(&hosts(2, 1500)).unwrap();
    let names = ns.names().to_vec();
    let mut cmd = ns.exec_command(0, "sleep", ["600"]);
    let mut sleeper = cmd.spawn().unwrap();
    // Wait until it is inside (`ip netns exec` has switched namespaces).
    let own = std::fs::read_link("/proc/self/ns/net").unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::fs::read_link(format!("/proc/{}/ns/net", sleeper.id())).unwrap() == own {
        assert!(
            Instant::now() < deadline,
            "the sleeper never entered its namespace"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    ns.remove().unwrap();
    // The program inside was killed with its namespace, not left running unreachable.
    let status = sleeper.wait().unwrap();
    assert!(!status.success());
    assert_gone(&names, &taps);

    // drop
    let (ns, taps) = Namespaces::create(&hosts(4, 1500)).unwrap();
    let names = ns.names().to_vec();
    drop(ns);
    assert_gone(&names, &taps);

    // A create that fails half-way: the kernel refuses a multicast MAC on rank 2's eth0, after
    // every namespace was made and every TAP moved.
    let mut hs = hosts(4, 1500);
    hs[2].mac = [1, 0, 0x5e, 0, 0, 1];
    let err = Namespaces::create(&hs).unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("01:00:5e:00:00:01"), "{msg}");
    assert_eq!(err.exit_code(), 1);
    // The message names the namespace (`ip netns exec NAME`) and the TAP (`link set dev TMP`).
    let word_after = |key: &str| {
        msg.split(key)
            .nth(1)
            .and_then(|r| r.split_whitespace().next())
            .unwrap()
            .to_string()
    };
    let failed = word_after("ip netns exec ");
    let tmp = word_after("link set dev ");
    assert!(failed.ends_with("-h2"), "{msg}");
    let set: Vec<String> = (0..4)
        .map(|r| failed.replace("-h2", &format!("-h{r}")))
        .collect();
    let left = netns_list();
    assert!(
        set.iter().all(|n| !left.contains(n)),
        "left after a failed create: {set:?} in {left:?}"
    );
    assert!(
        !root_links().contains(&format!(": {tmp}:")),
        "TAP {tmp} left behind"
    );
}

fn netns_list() -> Vec<String> {
    std::fs::read_dir("/var/run/netns")
        .map(|d| {
            d.filter_map(|e| e.ok()?.file_name().into_string().ok())
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn invalid_hosts_are_refused_before_anything_is_made() {
    let mut hs = hosts(2, 1500);
    hs[1].ip = hs[0].ip;
    let err = Namespaces::create(&hs).unwrap_err();
    assert!(
        matches!(err, NetError::Hosts(_)) && err.exit_code() == 2,
        "{err}"
    );
    let mut hs = hosts(2, 1500);
    hs[0].mtu = 67;
    assert!(matches!(Namespaces::create(&hs), Err(NetError::Hosts(_))));
    assert!(matches!(Namespaces::create(&[]), Err(NetError::Hosts(_))));
}

/// Not a test of its own: the process `remove_stale_cleans_up_after_a_killed_process` starts
/// and kills. It makes two namespaces, says their names and waits to be killed.
#[test]
#[ignore = "helper process of remove_stale_cleans_up_after_a_killed_process"]
fn helper_make_namespaces_and_wait() {
    if std::env::var("FABEMU_TEST_HELPER").as_deref() != Ok("1") {
        return;
    }
    let rt = tokio::runtime::Runtime::new().unwrap();
    let _in_rt = rt.enter();
    let (ns, _taps) = Namespaces::create(&hosts(2, 1500)).unwrap();
    println!("READY {}", ns.names().join(" "));
    std::thread::sleep(Duration::from_secs(120));
}

#[test]
fn remove_stale_cleans_up_after_a_killed_process() {
    use std::io::BufRead;
    if !rights() {
        return;
    }
    // A process that made namespaces, killed with SIGKILL: no drop ran.
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "helper_make_namespaces_and_wait",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("FABEMU_TEST_HELPER", "1")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let ready = lines
        // libtest prints `test NAME ... ` before the helper's own output, on the same line.
        .find_map(|l| {
            l.ok()?
                .split_once("READY ")
                .map(|(_, names)| names.to_string())
        })
        .expect("the helper made its namespaces");
    child.kill().unwrap();
    child.wait().unwrap();
    let killed: Vec<String> = ready.split(' ').map(str::to_string).collect();
    assert_eq!(killed.len(), 2);
    assert!(
        killed
            .iter()
            .all(|n| netns::owner_pid(n) == Some(child.id() as i32)),
        "{killed:?}"
    );

    // One made by hand for a pid that is not alive, one for a live pid (ours).
    let mut gone = std::process::Command::new("true").spawn().unwrap();
    gone.wait().unwrap();
    let dead = format!("fabemu-{}-h0", gone.id());
    let live = format!("fabemu-{}.999999-h0", std::process::id());
    struct ByHand(Vec<String>);
    impl Drop for ByHand {
        fn drop(&mut self) {
            for n in &self.0 {
                let _ = std::process::Command::new("ip")
                    .args(["netns", "delete", n])
                    .output();
            }
        }
    }
    let _by_hand = ByHand(vec![dead.clone(), live.clone()]);
    for n in [&dead, &live] {
        assert!(std::process::Command::new("ip")
            .args(["netns", "add", n])
            .status()
            .unwrap()
            .success());
    }

    let stale = netns::stale();
    for n in killed.iter().chain([&dead]) {
        assert!(stale.contains(n), "{n} not seen as stale in {stale:?}");
    }
    assert!(!stale.contains(&live));
    let removed = netns::remove_stale().unwrap();
    // (Another process's remove_stale may have taken some first; what counts is that they
    // are gone.)
    assert!(removed
        .iter()
        .all(|n| stale.contains(n) || netns::owner_pid(n).is_some()));
    let left = netns_list();
    for n in killed.iter().chain([&dead]) {
        assert!(!left.contains(n), "{n} survived remove_stale");
    }
    assert!(
        left.contains(&live),
        "remove_stale removed a live process's namespace"
    );
    // The killed process's TAPs died with its descriptors.
    assert!(!root_links().contains(&format!("fe{:x}t", child.id())));
}

mod launching {
    use super::*;
    use fabemu::emulate::launch::{self, OutputSink, RankEnv, Stream};

    fn envs(n: usize) -> Vec<RankEnv> {
        (0..n)
            .map(|rank| RankEnv {
                rank,
                world_size: n,
                master_addr: Ipv4Addr::new(10, 0, 0, 1),
                master_port: 29500,
                host_name: format!("h{rank}"),
            })
            .collect()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn ranks_get_their_environment_their_namespace_and_prefixed_output() {
        if !rights() {
            return;
        }
        let (ns, _taps) = Namespaces::create(&hosts(3, 1500)).unwrap();
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let script = "echo $RANK $WORLD_SIZE $LOCAL_RANK $LOCAL_WORLD_SIZE $MASTER_ADDR $MASTER_PORT $FABEMU_HOST \
                      $(cat /sys/class/net/eth0/address); echo err$RANK >&2; exit $((RANK + 4))";
        let mut ranks = launch::launch(
            &ns,
            &envs(3),
            "sh",
            &["-c", script],
            OutputSink::Channel(tx),
        )
        .unwrap();
        assert_eq!(ranks.len(), 3);
        let exits = ranks.wait_all(Duration::from_secs(5)).await;
        let codes: Vec<(usize, Option<i32>)> =
            exits.iter().map(|e| (e.rank, e.status.code())).collect();
        assert_eq!(codes, vec![(0, Some(4)), (1, Some(5)), (2, Some(6))]);
        let mut lines = Vec::new();
        while let Ok(l) = rx.try_recv() {
            lines.push(l);
        }
        for rank in 0..3 {
            let out: Vec<String> = lines
                .iter()
                .filter(|l| l.rank == rank && l.stream == Stream::Stdout)
                .map(|l| String::from_utf8_lossy(&l.line).into_owned())
                .collect();
            assert_eq!(
                out,
                vec![format!(
                    "{rank} 3 0 1 10.0.0.1 29500 h{rank} 02:00:00:00:00:0{}",
                    rank + 1
                )]
            );
            let err: Vec<&[u8]> = lines
                .iter()
                .filter(|l| l.rank == rank && l.stream == Stream::Stderr)
                .map(|l| &l.line[..])
                .collect();
            assert_eq!(err, vec![format!("err{rank}").as_bytes()]);
        }
        assert_eq!(launch::prefixed(2, b"hi"), b"[rank 2] hi\n");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn terminate_ends_every_rank_and_its_children() {
        if !rights() {
            return;
        }
        let (ns, _taps) = Namespaces::create(&hosts(2, 1500)).unwrap();
        // Rank 0 ends on SIGTERM but leaves a child in its group; rank 1 ignores SIGTERM.
        let script =
            r#"if [ $RANK = 0 ]; then sleep 300 & sleep 300; else trap "" TERM; sleep 300; fi"#;
        let mut ranks =
            launch::launch(&ns, &envs(2), "sh", &["-c", script], OutputSink::Terminal).unwrap();
        // Give the shells time to start their children.
        tokio::time::sleep(Duration::from_millis(500)).await;
        let cancelled = tokio::select! {
            _ = ranks.wait_all(Duration::from_secs(1)) => false,
            _ = tokio::time::sleep(Duration::from_millis(200)) => true,
        };
        assert!(cancelled, "the ranks ended by themselves");
        let started = Instant::now();
        let exits = ranks.terminate(Duration::from_secs(1)).await;
        assert_eq!(exits.len(), 2);
        assert!(exits.iter().all(|e| !e.status.success()), "{exits:?}");
        assert!(started.elapsed() < Duration::from_secs(10));
        // Nothing of either group is left: a signal to the group finds no process.
        for g in ranks.process_groups() {
            let r = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(g), None);
            assert_eq!(
                r,
                Err(nix::errno::Errno::ESRCH),
                "process group {g} still has processes"
            );
        }
        assert!(ranks.next_exit().await.is_none());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_rsh_agent_runs_commands_in_the_named_host() {
        if !rights() {
            return;
        }
        let hs = hosts(3, 1500);
        let (ns, _taps) = Namespaces::create(&hs).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let ips: Vec<Ipv4Addr> = hs.iter().map(|h| h.ip).collect();
        let names: Vec<String> = (0..3).map(|r| format!("h{r}")).collect();
        let files = launch::write_mpi_files(dir.path(), &ns, &ips, &names).unwrap();
        assert_eq!(
            std::fs::read_to_string(&files.hostfile).unwrap(),
            "10.0.0.1 slots=1\n10.0.0.2 slots=1\n10.0.0.3 slots=1\n"
        );
        let agent = files.agent.to_str().unwrap();
        // As mpirun in rank 0's namespace calls it: ssh options, a host, a command line in words.
        let run = |args: &[&str]| {
            let out = ns.exec_command(0, agent, args).output().unwrap();
            (
                out.status.code(),
                String::from_utf8_lossy(&out.stdout).into_owned(),
            )
        };
        assert_eq!(
            run(&["-x", "10.0.0.2", "cat", "/sys/class/net/eth0/address"]),
            (Some(0), "02:00:00:00:00:02\n".into())
        );
        assert_eq!(
            run(&["h2", "echo", "a;", "echo", "$((1+1))"]),
            (Some(0), "a\n2\n".into())
        );
        assert_eq!(run(&[ns.name(0), "exit", "3"]).0, Some(3));
        assert_eq!(run(&["10.0.0.9", "true"]).0, Some(255));
    }
}
