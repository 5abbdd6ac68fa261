"""``fabemu topo`` and ``fabemu algo export`` from Python."""

from __future__ import annotations

import os
from typing import Any, Dict, List, Optional, Tuple, Union

from . import _native
from ._report import _table, Record
from ._run import Overrides, Scenario, _overrides, _source

__all__ = ["topo", "algo_export", "Topology"]


class Topology:
    """The fabric a scenario builds, as ``fabemu topo`` shows it."""

    def __init__(self, d: Dict[str, Any]) -> None:
        #: The summary as ``fabemu topo`` prints it.
        self.text: str = d["text"]
        #: The fabric's kind: star, ring, leaf-spine, fat-tree, torus, multi-dimensional, ...
        self.fabric: str = d["fabric"]
        #: Dimension sizes, for fabrics with dimensions.
        self.dimensions: Optional[List[int]] = d["dimensions"]
        self.hosts: int = d["hosts"]
        self.switches: int = d["switches"]
        #: Number of links.
        self.link_count: int = d["link_count"]
        #: The least total bandwidth of any host's ports (bits/s).
        self.per_host_bandwidth_bps: int = d["per_host_bandwidth_bps"]
        #: The greatest (equal to the least on regular fabrics).
        self.per_host_bandwidth_max_bps: int = d["per_host_bandwidth_max_bps"]
        #: The most links any route between two hosts takes.
        self.diameter_hops: int = d["diameter_hops"]
        #: Bisection bandwidth bounds (bits/s, one direction); equal when it is exact.
        self.bisection_bps: Tuple[int, int] = (d["bisection_bps_at_least"], d["bisection_bps_at_most"])
        #: The ``--links`` listing.
        self.links_text: str = d["links_text"]
        #: The fabric as a Graphviz graph (``--dot``).
        self.dot: str = d["dot"]
        #: Ignored keys of an ASTRA-sim network file.
        self.warnings: List[str] = d["warnings"]
        self._classes = d["classes"]
        self._links = [
            {"a": a, "b": b, "bandwidth_bps": bw, "latency_ps": lat} for a, b, bw, lat in d["links"]
        ]

    @property
    def classes(self):
        """Links per dimension or tier: count, bandwidth, latency, per-host bandwidth
        (DataFrame, or list of records without pandas)."""
        return _table(self._classes, Record)

    @property
    def links(self):
        """Every link by the names of its ends (as ``faults:`` addresses them), bandwidth and
        latency."""
        return _table(self._links, Record)

    def __str__(self) -> str:
        return self.text

    def __repr__(self) -> str:
        return f"<fabemu.Topology {self.fabric}: {self.hosts} hosts, {self.switches} switches, {self.link_count} links>"


def topo(
    scenario: Scenario = None,
    *,
    set: Overrides = None,
    astra_sim: Union[str, "os.PathLike[str]", None] = None,
) -> Topology:
    """The fabric a scenario (or an ASTRA-sim network file) builds, without running it:
    hosts, switches, links per dimension or tier, per-host bandwidth, diameter, bisection
    bandwidth, the links and a Graphviz graph, as ``fabemu topo``.

    Raises `ScenarioError` for an invalid scenario or network file, ValueError when the
    fabric's routes do not connect every pair of hosts.
    """
    if astra_sim is not None:
        d = _native.topo(None, None, "", [], os.fspath(astra_sim))
    else:
        path, text, name = _source(scenario)
        d = _native.topo(path, text, name, _overrides(set), None)
    return Topology(d)


def algo_export(op: str = "all_reduce", algorithm: str = "ring", *, ranks: int, chunks: int = 1) -> str:
    """A built-in algorithm as MSCCL XML (``fabemu algo export --msccl``), which a scenario's
    ``algorithm: {msccl: FILE}`` reads back.

    Args:
        op: all_reduce, reduce_scatter, all_gather or all_to_all.
        algorithm: the built-in algorithm, as in a scenario (ring, direct,
            halving_doubling, ...).
        ranks: ranks (MSCCL's ngpus), 1 to 4096.
        chunks: pieces the buffer is cut into and pipelined, 1 to 64.

    Raises ValueError with the command line's message for a bad argument.
    """
    return _native.algo_export(op, algorithm, ranks, chunks)
