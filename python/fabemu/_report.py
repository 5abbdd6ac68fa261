"""The report of a run as typed objects and, when pandas is installed, DataFrames.

Every figure comes from the JSON report the engine wrote (``Report.json`` is that dict,
exactly as ``fabemu run --json`` writes it); this module only gives it names, types and
tables.
"""

from __future__ import annotations

import json
import keyword
from typing import Any, Dict, Iterable, List, Optional, Type, TypeVar

__all__ = [
    "Report",
    "Record",
    "ScenarioInfo",
    "Totals",
    "Invariants",
    "HostInfo",
    "Collective",
    "Message",
    "Link",
    "Direction",
    "LinkClass",
    "Percentiles",
    "Breakdown",
    "RankBreakdown",
    "Training",
]


def _pandas():
    """pandas, or None when it is not installed."""
    try:
        import pandas
    except ImportError:
        return None
    return pandas


class Record:
    """One object of the report: its JSON fields as attributes.

    A field whose name is a Python keyword gets a trailing underscore (``class`` ->
    ``class_``). ``to_dict()`` gives the JSON object back.
    """

    _nested: Dict[str, Type["Record"]] = {}

    def __init__(self, data: Dict[str, Any]) -> None:
        self._data = data
        for key, value in data.items():
            cls = self._nested.get(key)
            if cls is not None and isinstance(value, dict):
                value = cls(value)
            attr = key + "_" if keyword.iskeyword(key) else key
            # Tables are properties of their own (DataFrames or records).
            if not isinstance(getattr(type(self), attr, None), property):
                setattr(self, attr, value)

    def to_dict(self) -> Dict[str, Any]:
        """The JSON object this record was made from."""
        return self._data

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other._data == self._data  # type: ignore[attr-defined]

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={v!r}" for k, v in self._data.items())
        return f"{type(self).__name__}({fields})"


R = TypeVar("R", bound=Record)


def _table(rows: Iterable[Dict[str, Any]], cls: Type[R], flatten: bool = False):
    """`rows` as a DataFrame when pandas is installed (nested objects flattened to
    ``outer_inner`` columns when `flatten`), else as a list of `cls`."""
    rows = list(rows)
    pd = _pandas()
    if pd is None:
        return [cls(r) for r in rows]
    if not rows:
        # An empty table still has its columns, so selecting them works.
        return pd.DataFrame(columns=_fields(cls))
    if flatten:
        return pd.json_normalize(rows, sep="_")
    return pd.DataFrame(rows)


def _fields(cls: Type[Record]) -> List[str]:
    """The JSON fields `cls` declares, base classes first."""
    names: List[str] = []
    for c in reversed(cls.__mro__):
        for n in getattr(c, "__annotations__", {}):
            if n.startswith("_"):
                continue
            key = n[:-1] if n.endswith("_") and keyword.iskeyword(n[:-1]) else n
            if key not in names:
                names.append(key)
    return names


class ScenarioInfo(Record):
    """What was run."""

    name: Optional[str]
    seed: int
    mode: str
    fidelity: str
    hosts: int
    switches: int
    links: int
    fabric: str
    overrides: List[str]


class Totals(Record):
    """Totals over the run (times in picoseconds)."""

    messages: int
    messages_completed: int
    bytes_delivered: int
    data_packets_sent: int
    control_packets_sent: int
    packet_hops: int
    drops: int
    lossless_drops: int
    xoff_frames_sent: int
    xon_frames_sent: int
    ecn_marked: int
    cnps_sent: int
    paused_time_ps: int
    retransmitted_packets: int
    retransmitted_bytes: int
    timeouts: int
    events: int
    simulated_time_ps: int
    completion_time_ps: int
    mean_packet_latency_ps: int


class Invariants(Record):
    """The invariant checks: `ok` unless a lossless fabric dropped a frame, a collective
    delivered wrong data, or a transfer never finished (the command line exits 3)."""

    ok: bool
    violations: List[str]


class HostInfo(Record):
    """Figures that depend on the machine and the thread count (never compare these)."""

    wall_time_s: float
    threads: int
    partitions: int
    lookahead_ps: Optional[int]
    windows: int
    events_per_second: float
    packet_hops_per_second: float


class Collective(Record):
    """One collective of the workload: a row of the nccl-tests table."""

    op: str
    algorithm: str
    ranks: int
    size_bytes: int
    count: int
    type: str
    redop: str
    root: Optional[int]
    chunks: int
    start_ps: int
    end_ps: Optional[int]
    time_us: Optional[float]
    algbw_gbps: Optional[float]
    busbw_gbps: Optional[float]
    wrong: Optional[int]
    finished_ranks: int
    bytes_sent: int
    rank_finish_ps: List[Optional[int]]


class Message(Record):
    """One message of the workload and its fate."""

    tag: int
    src: str
    dst: str
    size_bytes: int
    start_ps: int
    delivered_ps: Optional[int]
    acked_ps: Optional[int]
    completion_time_ps: Optional[int]
    goodput_gbps: Optional[float]
    data_ok: Optional[bool]


class Direction(Record):
    """One direction of a link."""

    tx_packets: int
    tx_wire_bytes: int
    utilization: float


class Link(Record):
    """A link and its two directions."""

    _nested = {"a_to_b": Direction, "b_to_a": Direction}
    a: str
    b: str
    class_: str
    bandwidth_bps: int
    latency_ps: int
    a_to_b: Direction
    b_to_a: Direction


class LinkClass(Record):
    """The links of one dimension (``dim0``, ...) or tier over the run."""

    class_: str
    links: int
    capacity_bps: int
    tx_wire_bytes: int
    utilization: float


class Percentiles(Record):
    """A latency distribution, in picoseconds."""

    count: int
    min_ps: int
    p50_ps: int
    p90_ps: int
    p99_ps: int
    p999_ps: int
    max_ps: int


class Breakdown(Record):
    """Where a training iteration's time went (picoseconds)."""

    compute_ps: int
    exposed_comm_ps: int
    hidden_comm_ps: int
    idle_ps: int


class RankBreakdown(Breakdown):
    """One rank's share of a training iteration."""

    rank: int
    host: int
    finish_ps: Optional[int]
    nodes: int


class Training(Record):
    """A training workload's iteration (``workload.chakra``)."""

    _nested = {"overall": Breakdown}
    traces: str
    ranks: int
    iteration_time_ps: Optional[int]
    iteration_time_us: Optional[float]
    iterations_ps: List[int]
    mean_iteration_ps: Optional[int]
    overall: Breakdown
    critical_path: Optional[Dict[str, Any]]
    waiting: List[str]

    @property
    def breakdown(self):
        """Per rank: compute, exposed and hidden communication, idle time (DataFrame or list
        of `RankBreakdown`)."""
        return _table(self._data["per_rank"], RankBreakdown)

    @property
    def collective_kinds(self):
        """Per collective kind: count, bytes, time, bus bandwidth."""
        return _table(self._data["collective_kinds"], Record)

    @property
    def communicators(self):
        """Per communicator (process group): ranks, hosts, count, bytes, time."""
        return _table(self._data["communicators"], Record)

    @property
    def collectives(self):
        """Every collective the traces ran, as the nccl-tests table."""
        return _table(self._data["collectives"], Collective)

    @property
    def metrics(self) -> Dict[str, Any]:
        """The headline figures: iteration time (ps and us), mean over iterations, ranks, and
        the overall breakdown."""
        d = self._data
        out = {
            "ranks": d["ranks"],
            "iteration_time_ps": d["iteration_time_ps"],
            "iteration_time_us": d["iteration_time_us"],
            "mean_iteration_ps": d["mean_iteration_ps"],
            "iterations": len(d["iterations_ps"]),
        }
        out.update(d["overall"])
        return out


class Report:
    """The report of one run.

    ``json`` is the report as ``fabemu run --json`` writes it (a dict). The other attributes
    give its parts names and types: tables (collectives, messages, links, link_classes,
    latency, nics, switches) are pandas DataFrames when pandas is installed and lists of
    typed records otherwise; the rest are typed records. ``str(report)`` is the summary the
    command line prints.
    """

    def __init__(self, report_json: str, summary: str) -> None:
        #: The report as a dict, field for field what ``fabemu run --json`` writes.
        self.json: Dict[str, Any] = json.loads(report_json)
        #: The text summary the command line prints.
        self.summary: str = summary

    def __str__(self) -> str:
        return self.summary

    def __repr__(self) -> str:
        s = self.scenario
        state = "interrupted" if self.interrupted else ("ok" if self.invariants.ok else "invariants violated")
        return (
            f"<fabemu.Report {s.name or 'unnamed'!r}: {s.hosts} hosts, "
            f"{len(self.json['collectives'])} collectives, {len(self.json['messages'])} messages, {state}>"
        )

    @property
    def interrupted(self) -> bool:
        """True when the run was stopped (Ctrl-C) before it finished: figures cover the run up
        to then."""
        return bool(self.json.get("interrupted", False))

    @property
    def version(self) -> str:
        """The fabemu version that ran it."""
        return self.json["fabemu_version"]

    @property
    def scenario(self) -> ScenarioInfo:
        """What was run: name, seed, mode, fidelity, sizes, fabric kind, overrides."""
        return ScenarioInfo(self.json["scenario"])

    @property
    def totals(self) -> Totals:
        """Totals over the run."""
        return Totals(self.json["totals"])

    @property
    def invariants(self) -> Invariants:
        """The invariant checks."""
        return Invariants(self.json["invariants"])

    @property
    def host(self) -> HostInfo:
        """Machine- and thread-dependent figures."""
        return HostInfo(self.json["host"])

    @property
    def collectives(self):
        """Per collective of the workload: the nccl-tests table (op, size, time, algbw,
        busbw, ...)."""
        return _table(self.json["collectives"], Collective)

    @property
    def messages(self):
        """Per message of the workload: sizes, times, goodput."""
        return _table(self.json["messages"], Message)

    @property
    def links(self):
        """Per link: its ends, class, bandwidth, latency and both directions' counters (as
        ``a_to_b_tx_packets``, ... columns in a DataFrame)."""
        pd = _pandas()
        if pd is None:
            return [Link(r) for r in self.json["links"]]
        return _table(self.json["links"], Link, flatten=True)

    @property
    def link_classes(self):
        """Per dimension (``dim0``, ``dim1``, ...) or tier: links, capacity, bytes and
        utilization."""
        return _table(self.json["link_classes"], LinkClass)

    @property
    def latency(self):
        """Latency percentiles (picoseconds) of message completion, packet one-way latency and
        switch queueing delay: a DataFrame indexed by metric, or a dict of `Percentiles`
        (None where nothing was measured)."""
        lat = self.json["latency"]
        pd = _pandas()
        if pd is None:
            return {k: (Percentiles(v) if v is not None else None) for k, v in lat.items()}
        rows = {k: v for k, v in lat.items() if v is not None}
        return pd.DataFrame.from_dict(rows, orient="index")

    @property
    def nics(self):
        """Per host, its NIC's counters."""
        return _table(self.json["nics"], Record, flatten=True)

    @property
    def switches(self):
        """Per switch, its counters (ports nested)."""
        return _table(self.json["switches"], Record)

    @property
    def training(self) -> Optional[Training]:
        """The training iteration (only with ``workload.chakra``)."""
        t = self.json.get("training")
        return Training(t) if t is not None else None

    @property
    def faults(self) -> Optional[Dict[str, Any]]:
        """What the injected faults did (only with ``faults:``)."""
        return self.json.get("faults")

    def headline(self) -> Dict[str, Any]:
        """The figures a sweep tabulates: completion time, events, drops, retransmissions,
        the collectives' mean algbw and busbw (nccl-tests' "Avg bus bandwidth") and their
        summed time, the training iteration time, and whether the invariants held."""
        t = self.json["totals"]
        out: Dict[str, Any] = {
            "completion_time_ps": t["completion_time_ps"],
            "simulated_time_ps": t["simulated_time_ps"],
            "events": t["events"],
            "messages_completed": t["messages_completed"],
            "bytes_delivered": t["bytes_delivered"],
            "drops": t["drops"],
            "retransmitted_packets": t["retransmitted_packets"],
            "ecn_marked": t["ecn_marked"],
            "xoff_frames_sent": t["xoff_frames_sent"],
        }
        colls = self.json["collectives"]
        if colls:
            def mean(key):
                vals = [c[key] for c in colls if c.get(key) is not None]
                return sum(vals) / len(vals) if vals else None

            times = [c["time_us"] for c in colls if c.get("time_us") is not None]
            out["collectives"] = len(colls)
            out["collective_time_us"] = sum(times) if times else None
            out["algbw_gbps"] = mean("algbw_gbps")
            out["busbw_gbps"] = mean("busbw_gbps")
        tr = self.json.get("training")
        if tr is not None:
            out["iteration_time_us"] = tr["iteration_time_us"]
        out["invariants_ok"] = self.json["invariants"]["ok"]
        out["interrupted"] = self.interrupted
        return out
