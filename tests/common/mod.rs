//! Helpers shared by the end-to-end tests.
#![allow(dead_code)]

use std::path::PathBuf;
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

/// Writes `yaml` to a fresh temporary file and returns its path.
pub fn temp_scenario(name: &str, yaml: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("fabemu-test-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&dir);
    let path = dir.join(name);
    if let Err(e) = std::fs::write(&path, yaml) {
        panic!("cannot write {}: {e}", path.display());
    }
    path
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

/// Wire bytes of every packet of a `len`-byte message with path MTU `mtu` (ICRC 4 bytes).
pub fn message_wire_bytes(len: u64, mtu: u64) -> Vec<u64> {
    let n = len.div_ceil(mtu).max(1);
    (0..n)
        .map(|i| {
            let payload = (len - i * mtu).min(mtu);
            let frame = write_header_len(i == 0, i + 1 == n) + payload + 4;
            frame.max(60) + ETH_OVERHEAD
        })
        .collect()
}
