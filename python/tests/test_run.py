"""fabemu.run against the command line: the same reports, the same errors."""

import json
import os
import warnings

import pytest

import fabemu
from conftest import EXAMPLES, MALFORMED, ROOT, without_host

EXAMPLE_FILES = sorted(EXAMPLES.glob("*.yaml"))


def test_there_are_examples():
    assert len(EXAMPLE_FILES) >= 10


@pytest.mark.parametrize("path", EXAMPLE_FILES, ids=lambda p: p.stem)
def test_every_example_equals_the_cli_json(path, cli_json):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", fabemu.InvariantWarning)
        report = fabemu.run(path, progress=False)
    assert without_host(report.json) == without_host(cli_json(path))


def test_overrides_seed_and_fidelity_as_the_cli(cli_json):
    path = EXAMPLES / "leaf_spine.yaml"
    sets = {"seed": 7, "workload.all_to_all.size": "64KiB"}
    report = fabemu.run(str(path), set=sets, fidelity="flow", progress=False)
    expected = cli_json(path, "--set", "seed=7", "--set", "workload.all_to_all.size=64KiB", "--fidelity", "flow")
    assert without_host(report.json) == without_host(expected)
    assert report.scenario.fidelity == "flow"
    assert report.scenario.overrides == ["seed=7", "workload.all_to_all.size=64KiB"]
    # The same overrides as --set strings.
    again = fabemu.run(path, set=["seed=7", "workload.all_to_all.size=64KiB"], fidelity="flow", progress=False)
    assert without_host(again.json) == without_host(expected)


def test_seed_argument_as_the_cli(cli_json):
    path = EXAMPLES / "dcqcn.yaml"
    assert without_host(fabemu.run(path, seed=11, progress=False).json) == without_host(cli_json(path, "--seed", "11"))


def test_yaml_text_and_dict_give_the_file_report():
    path = EXAMPLES / "star.yaml"
    text = path.read_text()
    by_file = without_host(fabemu.run(path, progress=False).json)
    assert without_host(fabemu.run(text, progress=False).json) == by_file


def test_dict_scenario():
    scenario = {
        "name": "two-hosts",
        "topology": {"star": {"hosts": 2, "bandwidth": "100Gbps", "latency": "1us"}},
        "workload": {"messages": [{"src": "h0", "dst": "h1", "size": "64KiB"}]},
    }
    r = fabemu.run(scenario, progress=False)
    assert r.scenario.name == "two-hosts"
    assert r.totals.messages_completed == 1
    assert r.totals.bytes_delivered == 64 * 1024


def test_quickstart_is_the_default(cli_json):
    assert fabemu.quickstart() == (EXAMPLES / "quickstart.yaml").read_text()


@pytest.mark.parametrize("path", sorted(MALFORMED.glob("*.yaml")), ids=lambda p: p.stem)
def test_bad_scenarios_raise_the_cli_message(path, cli):
    p = cli("run", path, "--quiet")
    assert p.returncode == 2, p.stderr
    line = next(l for l in p.stderr.splitlines() if l.startswith("error: "))
    with pytest.raises(ValueError) as e:
        fabemu.run(path, progress=False)
    assert str(e.value) == line[len("error: "):]
    if isinstance(e.value, fabemu.ScenarioError):
        err = e.value
        assert err.file == str(path)
        assert str(err).startswith(err.file)
        if err.line is not None:
            assert str(err).startswith(f"{err.file}:{err.line}:{err.column}")
        assert err.message in str(err)


def test_scenario_error_parts():
    with pytest.raises(fabemu.ScenarioError) as e:
        fabemu.run("name: x\ntopology:\n  star: {hosts: 2, bandwidth: fast, latency: 1us}\n", progress=False)
    err = e.value
    assert isinstance(err, ValueError)
    assert (err.file, err.line, err.field) == ("<string>", 3, "topology.star.bandwidth")
    assert str(err).startswith("<string>:3:")
    with pytest.raises(fabemu.ScenarioError) as e:
        fabemu.run(EXAMPLES / "star.yaml", set={"nic.mtu": "huge"}, progress=False)
    assert e.value.file == "--set nic.mtu"
    assert e.value.line is None


def test_fidelity_flow_refuses_faults(cli, tmp_path):
    path = tmp_path / "faulty.yaml"
    path.write_text((EXAMPLES / "star.yaml").read_text() + "faults:\n  - {link: [h1, s0], loss: 0.01}\n")
    p = cli("run", path, "--fidelity", "flow", "--quiet")
    assert p.returncode == 2, p.stderr
    with pytest.raises(fabemu.ScenarioError) as e:
        fabemu.run(path, fidelity="flow", progress=False)
    assert "error: " + str(e.value) in p.stderr
    assert str(e.value).startswith("--fidelity flow: ")


def test_bad_arguments():
    with pytest.raises(ValueError, match="fidelity"):
        fabemu.run(EXAMPLES / "star.yaml", fidelity="fluid", progress=False)
    with pytest.raises(ValueError, match="threads"):
        fabemu.run(EXAMPLES / "star.yaml", threads=0, progress=False)
    with pytest.raises(TypeError):
        fabemu.run(42, progress=False)


def test_threads_never_change_results():
    path = EXAMPLES / "leaf_spine.yaml"
    one = fabemu.run(path, threads=1, progress=False)
    two = fabemu.run(path, threads=2, progress=False)
    assert without_host(one.json) == without_host(two.json)
    assert two.host.threads in (1, 2)


def test_out_and_pcap_write_the_cli_files(tmp_path):
    out = tmp_path / "out"
    pcap = tmp_path / "frames.pcap"
    r = fabemu.run(EXAMPLES / "star.yaml", out=out, pcap=pcap, progress=False)
    written = json.loads((out / "report.json").read_text())
    assert without_host(written) == without_host(r.json)
    assert (out / "summary.txt").read_text() == r.summary == str(r)
    # pcap: the classic magic number, and more than the header.
    data = pcap.read_bytes()
    assert data[:4] in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1") and len(data) > 24
    with pytest.raises(ValueError, match="cannot write"):
        fabemu.run(EXAMPLES / "star.yaml", pcap=tmp_path / "missing" / "x.pcap", progress=False)
