"""The report's typed parts, with and without pandas."""

import pytest

import fabemu
import fabemu._report as rep
from conftest import EXAMPLES


@pytest.fixture(scope="module")
def report():
    return fabemu.run(EXAMPLES / "msccl.yaml", progress=False)


@pytest.fixture(scope="module")
def training():
    return fabemu.run(EXAMPLES / "training.yaml", progress=False)


def test_records_without_pandas(report, monkeypatch):
    monkeypatch.setattr(rep, "_pandas", lambda: None)
    colls = report.collectives
    assert isinstance(colls, list) and isinstance(colls[0], fabemu.Collective)
    assert colls[0].op == "all_reduce" and colls[0].to_dict() == report.json["collectives"][0]
    links = report.links
    assert isinstance(links[0], fabemu.Link) and isinstance(links[0].a_to_b, fabemu.Direction)
    assert links[0].class_ == report.json["links"][0]["class"]
    classes = report.link_classes
    assert isinstance(classes[0], fabemu.LinkClass)
    lat = report.latency
    assert isinstance(lat["packet_one_way"], fabemu.Percentiles)
    assert lat["packet_one_way"].p50_ps <= lat["packet_one_way"].p99_ps


def test_typed_parts(report):
    assert isinstance(report.scenario, fabemu.ScenarioInfo) and report.scenario.name == "msccl-allreduce"
    assert isinstance(report.totals, fabemu.Totals) and report.totals.events == report.json["totals"]["events"]
    assert report.invariants.ok and report.invariants.violations == []
    assert report.host.threads == 1
    assert report.training is None and report.faults is None
    assert not report.interrupted
    assert report.version == fabemu.__version__


def test_dataframes(report):
    pd = pytest.importorskip("pandas")
    df = report.collectives
    assert isinstance(df, pd.DataFrame) and len(df) == len(report.json["collectives"])
    # The nccl-tests columns.
    for col in ["op", "size_bytes", "count", "type", "redop", "time_us", "algbw_gbps", "busbw_gbps", "wrong"]:
        assert col in df.columns
    assert (df["wrong"] == 0).all()
    links = report.links
    assert {"a", "b", "class", "a_to_b_tx_packets", "b_to_a_utilization"} <= set(links.columns)
    assert links["a_to_b_tx_packets"].sum() + links["b_to_a_tx_packets"].sum() == report.totals.packet_hops
    assert report.link_classes["links"].sum() == report.scenario.links
    assert list(report.latency.columns) == ["count", "min_ps", "p50_ps", "p90_ps", "p99_ps", "p999_ps", "max_ps"]
    assert len(report.messages.columns) > 0  # no messages, but the columns are there
    assert len(report.nics) == report.scenario.hosts


def test_training_breakdown_and_metrics(training):
    t = training.training
    assert isinstance(t, fabemu.Training)
    m = t.metrics
    assert m["ranks"] == t.ranks and m["iteration_time_us"] == pytest.approx(m["iteration_time_ps"] / 1e6)
    assert isinstance(t.overall, fabemu.Breakdown)
    assert m["compute_ps"] == t.overall.compute_ps
    b = t.breakdown
    pd = pytest.importorskip("pandas")
    assert isinstance(b, pd.DataFrame) and len(b) == t.ranks
    # Per-rank parts add up to the overall breakdown.
    for k in ["compute_ps", "exposed_comm_ps", "hidden_comm_ps", "idle_ps"]:
        assert b[k].sum() == getattr(t.overall, k)
    assert len(t.collective_kinds) > 0 and len(t.collectives) > 0


def test_headline(report):
    h = report.headline()
    busbw = [c["busbw_gbps"] for c in report.json["collectives"]]
    assert h["busbw_gbps"] == pytest.approx(sum(busbw) / len(busbw))
    assert h["completion_time_ps"] == report.totals.completion_time_ps
    assert h["invariants_ok"] is True


def test_help_is_useful():
    doc = fabemu.run.__doc__
    for word in ["scenario", "set", "fidelity", "seed", "threads", "out", "pcap", "progress", "ScenarioError", "Interrupted"]:
        assert word in doc
    assert "Executor" in fabemu.sweep.__doc__
