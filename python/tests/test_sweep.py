"""Sweeps: the cartesian product of overrides on any executor, equal to separate CLI runs."""

import json
from concurrent.futures import ThreadPoolExecutor

import pytest

import fabemu
from conftest import EXAMPLES

MSCCL = EXAMPLES / "msccl.yaml"
GRID = {"seed": [1, 2, 3, 4], "workload.collectives[1].chunks": [1, 2]}


def test_grid_points():
    assert fabemu.grid_points({"a": [1, 2], "b": ["x", "y"]}) == [
        {"a": 1, "b": "x"},
        {"a": 1, "b": "y"},
        {"a": 2, "b": "x"},
        {"a": 2, "b": "y"},
    ]
    assert fabemu.grid_points([{"a": 1}, {"b": 2}]) == [{"a": 1}, {"b": 2}]
    with pytest.raises(TypeError):
        fabemu.grid_points({"a": "1MiB"})


def cli_rows(cli_json, points):
    rows = []
    for p in points:
        args = []
        for k, v in p.items():
            args += ["--set", f"{k}={v}"]
        report = fabemu.Report(json.dumps(cli_json(MSCCL, *args)), "")
        rows.append({**p, **report.headline()})
    return rows


def as_rows(df):
    return df.to_dict("records") if hasattr(df, "to_dict") else df


def test_sweep_on_the_default_process_pool(cli_json):
    points = fabemu.grid_points(GRID)[:4]
    df = fabemu.sweep(MSCCL, points)
    assert as_rows(df) == cli_rows(cli_json, points)


def test_sweep_on_any_executor_with_reports():
    with ThreadPoolExecutor(2) as ex:
        df = fabemu.sweep(MSCCL, {"workload.collectives[1].chunks": [1, 2]}, executor=ex, reports=True)
    rows = as_rows(df)
    assert [r["workload.collectives[1].chunks"] for r in rows] == [1, 2]
    assert all(r["invariants_ok"] and r["report"]["collectives"] for r in rows)
    # Pipelining in chunks changes the ring's time, not the MSCCL algorithm's.
    a, b = (r["report"]["collectives"] for r in rows)
    assert a[0] == b[0] and a[4]["time_us"] != b[4]["time_us"]


def test_sweep_raises_the_first_bad_point():
    with pytest.raises(fabemu.ScenarioError, match="--set workload.collectives.1..chunks"):
        fabemu.sweep(MSCCL, {"workload.collectives[1].chunks": [1, "many"]}, executor=ThreadPoolExecutor(1))


def test_sweep_on_a_dask_cluster_equals_cli_runs(cli_json):
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        with distributed.Client(cluster) as client:
            df = fabemu.sweep(MSCCL, GRID, executor=client.get_executor())
            workers = len(client.scheduler_info()["workers"])
    assert workers == 2
    points = fabemu.grid_points(GRID)
    assert len(points) == 8
    assert as_rows(df) == cli_rows(cli_json, points)
