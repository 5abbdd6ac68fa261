"""fabemu: packet-level emulation of ML training-cluster networks, from Python.

Hosts with RoCE NICs and programmable switches exchange real frames in deterministic virtual
time; the same scenario and seed give the same report on any machine and thread count. This
package calls the library the ``fabemu`` command line calls:

>>> import fabemu
>>> r = fabemu.run("examples/ring.yaml", set={"workload.collectives[0].size": "4MiB"})
>>> r.collectives[["op", "size_bytes", "time_us", "busbw_gbps"]]   # with pandas
>>> df = fabemu.sweep("examples/ring.yaml", {"workload.collectives[0].size": ["1MiB", "16MiB"]})

`run` returns a `Report`; `sweep` runs many overrides in parallel on any
``concurrent.futures.Executor`` (Dask, Ray); `topo` and `algo_export` are ``fabemu topo`` and
``fabemu algo export``. Bad input raises `ScenarioError` with the command line's message.
"""

from ._native import ScenarioError, __version__, quickstart
from ._report import (
    Breakdown,
    Collective,
    Direction,
    HostInfo,
    Invariants,
    Link,
    LinkClass,
    Message,
    Percentiles,
    RankBreakdown,
    Record,
    Report,
    ScenarioInfo,
    Totals,
    Training,
)
from ._run import Interrupted, InvariantWarning, Progress, check, run
from ._sweep import grid_points, sweep
from ._tools import Topology, algo_export, topo

ScenarioError.__module__ = "fabemu"

__all__ = [
    "run",
    "check",
    "sweep",
    "grid_points",
    "topo",
    "algo_export",
    "quickstart",
    "Report",
    "Progress",
    "Interrupted",
    "InvariantWarning",
    "ScenarioError",
    "Topology",
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
    "__version__",
]
