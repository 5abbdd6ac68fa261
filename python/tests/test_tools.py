"""fabemu.topo and fabemu.algo_export against `fabemu topo` and `fabemu algo export`."""

import pytest

import fabemu
from conftest import EXAMPLES, ROOT


@pytest.mark.parametrize("name", ["torus", "leaf_spine", "fat_tree", "multi_dim", "astra_sim"])
def test_topo_prints_what_the_cli_prints(name, cli):
    path = EXAMPLES / f"{name}.yaml"
    p = cli("topo", path, "--links")
    assert p.returncode == 0, p.stderr
    t = fabemu.topo(path)
    assert t.text + t.links_text == p.stdout
    assert t.link_count == len(t.links) and t.hosts > 0


def test_topo_with_overrides_and_dot(cli, tmp_path):
    path = EXAMPLES / "torus.yaml"
    dot = tmp_path / "f.dot"
    p = cli("topo", path, "--set", "topology.torus.dims=[2, 2]", "--dot", dot)
    assert p.returncode == 0, p.stderr
    t = fabemu.topo(path, set={"topology.torus.dims": [2, 2]})
    assert t.text == p.stdout and t.dot == dot.read_text()
    assert (t.hosts, t.dimensions) == (4, [2, 2])
    lo, hi = t.bisection_bps
    assert 0 < lo <= hi


def test_topo_of_an_astra_sim_file(cli):
    files = sorted((EXAMPLES / "astra-sim").rglob("*.yml")) + sorted((EXAMPLES / "astra-sim").rglob("*.yaml"))
    if not files:
        pytest.skip("no ASTRA-sim network file among the examples")
    p = cli("topo", "--astra-sim", files[0])
    assert p.returncode == 0, p.stderr
    assert fabemu.topo(astra_sim=files[0]).text == p.stdout


def test_topo_errors_are_scenario_errors():
    with pytest.raises(fabemu.ScenarioError, match="--set topology.torus.dims"):
        fabemu.topo(EXAMPLES / "torus.yaml", set={"topology.torus.dims": "x"})


@pytest.mark.parametrize("op,algorithm,ranks,chunks", [("all_reduce", "ring", 4, 1), ("all_gather", "direct", 8, 2)])
def test_algo_export_writes_what_the_cli_writes(op, algorithm, ranks, chunks, cli):
    p = cli("algo", "export", "--msccl", "--op", op, "--algorithm", algorithm, "--ranks", ranks, "--chunks", chunks)
    assert p.returncode == 0, p.stderr
    assert fabemu.algo_export(op, algorithm, ranks=ranks, chunks=chunks) == p.stdout


def test_algo_export_errors(cli):
    p = cli("algo", "export", "--msccl", "--ranks", "0")
    with pytest.raises(ValueError) as e:
        fabemu.algo_export(ranks=0)
    assert "error: " + str(e.value) in p.stderr
