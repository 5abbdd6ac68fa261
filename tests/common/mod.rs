//! Helpers shared by the end-to-end tests.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use fabemu::{load_str, run_source, Report};

/// Runs a scenario given as YAML text on `threads` threads through the library.
pub fn run_yaml(yaml: &str, threads: usize) -> Report {
    let src = match load_str(yaml, "<test>") {
        Ok(s) => s,
        Err(e) => panic!("scenario rejected: {e}\n{yaml}"),
    };
    match run_source(&src, threads, None) {
        Ok(r) => r,
        Err(e) => panic!("run failed: {e}"),
    }
}

/// A path inside a fresh temporary directory of its own, which is deleted with everything in
/// it when this is dropped (also when the test panics), so tests leave nothing behind in the
/// system temp dir. Hold it until the end of the test: the binary reads and writes the path
/// while it runs. Derefs to the path.
pub struct TempPath {
    dir: tempfile::TempDir,
    path: PathBuf,
}

impl TempPath {
    /// The temporary directory that holds the path (and is deleted with it).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Writes `text` to the file `name` beside the path (in the same directory, so a scenario
    /// can name it relative to itself) and returns its path, deleted with this one.
    pub fn write_beside(&self, name: &str, text: &str) -> PathBuf {
        let path = self.dir().join(name);
        if let Err(e) = std::fs::write(&path, text) {
            panic!("cannot write {}: {e}", path.display());
        }
        path
    }
}

impl std::ops::Deref for TempPath {
    type Target = Path;

    fn deref(&self) -> &Path {
        &self.path
    }
}

impl AsRef<Path> for TempPath {
    fn as_ref(&self) -> &Path {
        &self.path
    }
}

/// So it goes straight into `Command::arg`, as a `PathBuf` would.
impl AsRef<std::ffi::OsStr> for TempPath {
    fn as_ref(&self) -> &std::ffi::OsStr {
        self.path.as_os_str()
    }
}

/// A fresh, empty temporary directory named `fabemu-{prefix}-XXXXXX`; the path is the
/// directory itself.
pub fn temp_dir(prefix: &str) -> TempPath {
    let dir = match tempfile::Builder::new()
        .prefix(&format!("fabemu-{prefix}-"))
        .tempdir()
    {
        Ok(d) => d,
        Err(e) => panic!("cannot create a temporary directory: {e}"),
    };
    let path = dir.path().to_path_buf();
    TempPath { dir, path }
}

/// The path `name` inside a fresh temporary directory `fabemu-{prefix}-XXXXXX`; nothing is
/// created at the path itself (e.g. an `--out` directory the binary must create).
pub fn temp_path(prefix: &str, name: &str) -> TempPath {
    let mut t = temp_dir(prefix);
    t.path = t.path.join(name);
    t
}

/// Writes `yaml` to the file `name` in a fresh temporary directory; the file and directory are
/// deleted when the returned path is dropped.
pub fn temp_scenario(name: &str, yaml: &str) -> TempPath {
    let t = temp_path("test", name);
    if let Err(e) = std::fs::write(&t.path, yaml) {
        panic!("cannot write {}: {e}", t.path.display());
    }
    t
}

/// Runs the `fabemu` binary with `args`.
pub fn fabemu(args: &[&str]) -> Output {
    match Command::new(env!("CARGO_BIN_EXE_fabemu"))
        .args(args)
        .output()
    {
        Ok(o) => o,
        Err(e) => panic!("cannot run fabemu: {e}"),
    }
}

/// The JSON report of the scenario file at `path` run on `threads` threads (which must exit
/// 0), without its `host` object (wall clock, thread count): what determinism tests compare.
pub fn report_json(path: &str, threads: &str) -> serde_json::Value {
    let out = fabemu(&["run", path, "--threads", threads, "--json", "-", "--quiet"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut v: serde_json::Value = match serde_json::from_slice(&out.stdout) {
        Ok(v) => v,
        Err(e) => panic!("the JSON report does not parse: {e}"),
    };
    if let Some(o) = v.as_object_mut() {
        o.remove("host");
    }
    v
}

/// Picoseconds per byte at 100 Gb/s.
pub const PS_PER_BYTE_100G: u64 = 80;

/// Ethernet's per-frame overhead on the wire: FCS 4 + preamble/SFD 8 + inter-frame gap 12.
pub const ETH_OVERHEAD: u64 = 24;

/// Header bytes of a RoCEv2 RDMA WRITE packet, by position in its message: Ethernet 14 +
/// IPv4 20 + UDP 8 + BTH 12 (= 54), plus RETH 16 on the first packet and ImmDt 4 on the last.
pub fn write_header_len(first: bool, last: bool) -> u64 {
    54 + if first { 16 } else { 0 } + if last { 4 } else { 0 }
}

/// Wire bytes of every packet of a `len`-byte message with path MTU `mtu` (the payload
/// padded to 4 bytes, ICRC 4 bytes).
pub fn message_wire_bytes(len: u64, mtu: u64) -> Vec<u64> {
    let n = len.div_ceil(mtu).max(1);
    (0..n)
        .map(|i| {
            let payload = (len - i * mtu).min(mtu);
            let frame = write_header_len(i == 0, i + 1 == n) + payload.next_multiple_of(4) + 4;
            frame.max(60) + ETH_OVERHEAD
        })
        .collect()
}

/// True when tshark runs. Outside CI a missing tshark skips the test with a printed reason, so
/// a fresh checkout's test command passes; under CI (`CI=true`) the test must run, so it fails.
pub fn has_tshark() -> bool {
    if Command::new("tshark").arg("-v").output().is_ok() {
        return true;
    }
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "tshark is missing; under CI the capture tests must run (Debian: apt-get install tshark)"
    );
    eprintln!("skipped: tshark is not installed (Debian: apt-get install tshark)");
    false
}
