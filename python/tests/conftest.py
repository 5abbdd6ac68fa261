"""Shared set-up: the repository's folders and the command line to compare with.

FABEMU_BIN names the `fabemu` binary (tests/it/python.rs sets it); without it, the release build
in the workspace's target folder is used when it exists.
"""

import json
import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
MALFORMED = ROOT / "tests" / "malformed"


def _bin():
    b = os.environ.get("FABEMU_BIN")
    if b:
        return b
    local = ROOT / "target" / "release" / "fabemu"
    return str(local) if local.is_file() else None


@pytest.fixture(scope="session")
def cli():
    """Runs the command line: cli(*args) -> CompletedProcess (text)."""
    b = _bin()
    if b is None:
        pytest.skip("no fabemu binary (set FABEMU_BIN or build with cargo build --release)")

    def call(*args, cwd=ROOT):
        return subprocess.run([b, *map(str, args)], capture_output=True, text=True, cwd=cwd, timeout=600)

    return call


@pytest.fixture(scope="session")
def cli_json(cli, tmp_path_factory):
    """The command line's JSON report for `fabemu run ARGS`."""

    def call(*args):
        out = tmp_path_factory.mktemp("cli") / "report.json"
        p = cli("run", *args, "--json", out, "--quiet")
        assert p.returncode in (0, 3), p.stderr
        return json.loads(out.read_text())

    return call


def without_host(report):
    """A report without its machine-dependent part."""
    return {k: v for k, v in report.items() if k != "host"}
