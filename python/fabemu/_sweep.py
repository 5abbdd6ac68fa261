"""Sweeps: one scenario under many sets of overrides, run in parallel on any
``concurrent.futures.Executor`` (a local process pool by default; Dask's
``Client.get_executor()`` or Ray's spread it over a cluster)."""

from __future__ import annotations

import itertools
import os
from concurrent.futures import Executor, ProcessPoolExecutor
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

from ._run import Scenario, _source

__all__ = ["sweep", "grid_points"]


def grid_points(grid: Union[Mapping[str, Sequence[Any]], Iterable[Mapping[str, Any]]]) -> List[Dict[str, Any]]:
    """The override dicts a sweep runs: the cartesian product of a ``{path: [values]}`` grid
    (the last path varying fastest), or a list of override dicts as given."""
    if isinstance(grid, Mapping):
        keys = list(grid)
        for k in keys:
            if isinstance(grid[k], (str, bytes)) or not isinstance(grid[k], Iterable):
                raise TypeError(f"grid[{k!r}]: expected a list of values, not {grid[k]!r}")
        return [dict(zip(keys, values)) for values in itertools.product(*(list(grid[k]) for k in keys))]
    points = [dict(p) for p in grid]
    for p in points:
        if not isinstance(p, dict):
            raise TypeError("grid: expected a dict of lists or a list of override dicts")
    return points


def _portable(scenario: Scenario) -> Tuple[Any, Optional[str]]:
    """The scenario in a form any worker can load: a file is sent as its text with its absolute
    path as name (so relative paths in it still resolve, on a shared file system)."""
    path, text, name = _source(scenario)
    if path is None:
        return scenario, None
    absolute = os.path.abspath(path)
    with open(absolute, encoding="utf-8") as f:
        return f.read(), absolute


def _run_point(scenario: Any, name: Optional[str], overrides: Dict[str, Any], options: Dict[str, Any]) -> Dict[str, Any]:
    """Runs one point (in a worker) and returns its headline figures."""
    from ._run import _execute

    source = (None, scenario, name) if name is not None else _source(scenario)
    report = _execute(
        source,
        overrides,
        options.get("fidelity"),
        options.get("seed"),
        options.get("threads", 1),
        None,
        None,
        False,
    )
    out = report.headline()
    if options.get("reports"):
        out["report"] = report.json
    return out


def sweep(
    scenario: Scenario,
    grid: Union[Mapping[str, Sequence[Any]], Iterable[Mapping[str, Any]]],
    *,
    executor: Optional[Executor] = None,
    fidelity: Optional[str] = None,
    seed: Optional[int] = None,
    threads: int = 1,
    reports: bool = False,
):
    """Run `scenario` once per point of `grid`, in parallel, and tabulate the results.

    Args:
        scenario: as for `run` (a path, YAML text, a dict).
        grid: ``{override path: [values]}`` for the cartesian product of the values (e.g.
            ``{"workload.collectives[0].size": ["1MiB", "16MiB"], "topology.kind": [...]}``),
            or a list of override dicts, one per run. Paths and values are ``--set``'s.
        executor: any ``concurrent.futures.Executor``: ``distributed.Client(...).
            get_executor()`` runs the sweep on a Dask cluster. Default: a local process pool
            with one process per CPU.
        fidelity, seed, threads: as for `run`, for every point.
        reports: also return each run's whole report (its ``json`` dict) in a ``report``
            column.

    Returns:
        A pandas DataFrame (a list of dicts without pandas), one row per point in grid order:
        the overrides as columns, then each run's headline figures (`Report.headline`:
        completion time, events, drops, the collectives' mean algbw and busbw, the training
        iteration time, whether the invariants held).

    Raises:
        ScenarioError: a point's scenario is invalid (the first such point, in grid order).
    """
    points = grid_points(grid)
    portable, name = _portable(scenario)
    options: Dict[str, Any] = {"threads": threads}
    if fidelity is not None:
        options["fidelity"] = fidelity
    if seed is not None:
        options["seed"] = seed
    if reports:
        options["reports"] = True
    own = executor is None
    if own:
        executor = ProcessPoolExecutor(max_workers=max(1, min(len(points), os.cpu_count() or 1)))
    try:
        futures = [executor.submit(_run_point, portable, name, p, options) for p in points]
        results = [f.result() for f in futures]
    finally:
        if own:
            executor.shutdown(wait=True, cancel_futures=True)
    rows = [{**p, **r} for p, r in zip(points, results)]
    try:
        import pandas as pd
    except ImportError:
        return rows
    return pd.DataFrame(rows)
