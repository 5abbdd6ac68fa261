//! The Python package (`python/`): builds its wheel with maturin, installs it into a virtual
//! environment under the target folder, and runs the pytest suite in `python/tests`, which
//! compares the package's results and errors with this build's command line.
//!
//! The environment is made on first use (`python3 -m venv`, then maturin, pytest, pandas, tqdm,
//! matplotlib and dask[distributed] from PyPI) and kept for later runs. Outside CI (`CI` is not `true`),
//! a machine without Python 3.9+, venv or PyPI skips this test with the reason printed; in CI
//! that is a failure. The extension is built in the workspace's target folder, so the library
//! it links is mostly compiled already.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: a failure is a panic

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// What the suite needs besides the wheel.
const PACKAGES: &[&str] = &[
    "maturin>=1.5,<2",
    "pytest",
    "pandas",
    "tqdm",
    "matplotlib",
    "dask[distributed]",
];

fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true")
}

/// Fails in CI, else skips with `why`.
fn cannot(why: &str) {
    if in_ci() {
        panic!("the Python package cannot be tested: {why}");
    }
    eprintln!("skipped: the Python package cannot be tested here: {why}");
}

fn run(cmd: &mut Command) -> Result<Output, String> {
    let shown = format!("{cmd:?}");
    match cmd.output() {
        Ok(o) if o.status.success() => Ok(o),
        Ok(o) => Err(format!(
            "{shown} failed ({}):\n{}\n{}",
            o.status,
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        )),
        Err(e) => Err(format!("{shown}: {e}")),
    }
}

fn target_dir(root: &Path) -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .map(|p| if p.is_absolute() { p } else { root.join(p) })
        .unwrap_or_else(|| root.join("target"))
}

/// The virtual environment with the packages, made if missing; Err says why it cannot be.
fn environment(target: &Path) -> Result<PathBuf, String> {
    let venv = target.join("python-venv");
    let python = venv.join("bin").join("python");
    if !python.is_file() {
        let version = run(Command::new("python3").args([
            "-c",
            "import sys; assert sys.version_info >= (3, 9), sys.version",
        ]));
        version.map_err(|e| format!("no python3 3.9 or later: {e}"))?;
        run(Command::new("python3").arg("-m").arg("venv").arg(&venv))
            .map_err(|e| format!("cannot make a virtual environment: {e}"))?;
    }
    let have = run(Command::new(&python).args([
        "-c",
        "import maturin, pytest, pandas, tqdm, matplotlib, distributed",
    ]));
    if have.is_err() {
        run(Command::new(&python)
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
            ])
            .args(PACKAGES))
        .map_err(|e| format!("cannot install {PACKAGES:?} with pip: {e}"))?;
    }
    Ok(python)
}

#[test]
fn python_package() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let target = target_dir(root);
    let python = match environment(&target) {
        Ok(p) => p,
        Err(why) => return cannot(&why),
    };
    let wheels = tempfile::tempdir().unwrap();
    // The release profile, as `pip install ./python` builds it.
    let built = run(Command::new(&python)
        .args(["-m", "maturin", "build", "--release", "--quiet", "-m"])
        .arg(root.join("python").join("Cargo.toml"))
        .arg("-i")
        .arg(&python)
        .arg("-o")
        .arg(wheels.path())
        .env("CARGO_TARGET_DIR", &target));
    if let Err(e) = built {
        panic!("the wheel does not build: {e}");
    }
    let wheel = std::fs::read_dir(wheels.path())
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|x| x == "whl"))
        .expect("maturin wrote no wheel");
    let name = wheel.file_name().unwrap().to_string_lossy().to_string();
    assert!(name.contains("abi3"), "not an abi3 wheel: {name}");
    run(Command::new(&python)
        .args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
        ])
        .args(["--force-reinstall", "--no-deps"])
        .arg(&wheel))
    .unwrap();
    // Any working directory: the tests find the examples themselves.
    let status = Command::new(&python)
        .args(["-m", "pytest", "-q", "-p", "no:cacheprovider"])
        .arg(root.join("python").join("tests"))
        .current_dir(root)
        .env("FABEMU_BIN", env!("CARGO_BIN_EXE_fabemu"))
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .status()
        .unwrap();
    assert!(status.success(), "the Python tests failed: {status}");
}
