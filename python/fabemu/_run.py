"""Running one scenario: arguments as Python likes them, the engine in Rust."""

from __future__ import annotations

import json
import os
import time
import warnings
from typing import Any, Callable, Iterable, List, Mapping, Optional, Tuple, Union

from . import _native
from ._report import Report

__all__ = ["run", "check", "Progress", "Interrupted", "InvariantWarning", "Scenario", "Overrides"]

#: A scenario: a path to a YAML file, YAML text, a dict (the YAML's structure), or None for
#: the embedded quickstart.
Scenario = Union[str, "os.PathLike[str]", Mapping[str, Any], None]
#: Overrides as the command line's ``--set``: ``{"nic.cc": "dcqcn", "seed": 3}`` (a string
#: value is read as YAML, like the text after ``=``; other values are converted), or a list of
#: ``"PATH=VALUE"`` strings.
Overrides = Union[Mapping[str, Any], Iterable[str], None]


class Interrupted(KeyboardInterrupt):
    """Ctrl-C stopped a run. ``report`` holds what it had done: every figure covers the run
    up to the moment it stopped (``report.interrupted`` is True then)."""

    def __init__(self, report: Report) -> None:
        super().__init__("run interrupted: the report covers the run up to there")
        #: The partial report.
        self.report = report


class InvariantWarning(RuntimeWarning):
    """A run finished but an invariant failed (the command line exits 3): a lossless fabric
    dropped a frame, a collective delivered wrong data, or a transfer never finished. The
    report says which in ``report.invariants.violations``."""


class Progress:
    """How far a running scenario has got, as passed to a progress callback."""

    __slots__ = ("sim_time_ps", "events", "end_ps", "elapsed_s")

    def __init__(self, sim_time_ps: int, events: int, end_ps: Optional[int], elapsed_s: float) -> None:
        #: Simulated time reached, picoseconds.
        self.sim_time_ps = sim_time_ps
        #: Events handled so far.
        self.events = events
        #: Where the run stops (the scenario's ``until``), when it sets one.
        self.end_ps = end_ps
        #: Wall-clock seconds since the run started.
        self.elapsed_s = elapsed_s

    @property
    def fraction(self) -> Optional[float]:
        """Share of the run done, when its end is known."""
        if not self.end_ps:
            return None
        return min(1.0, self.sim_time_ps / self.end_ps)

    def __repr__(self) -> str:
        return f"Progress(sim_time_ps={self.sim_time_ps}, events={self.events}, end_ps={self.end_ps}, elapsed_s={self.elapsed_s:.2f})"


def _source(scenario: Scenario) -> Tuple[Optional[str], Optional[str], str]:
    """(path, text, name) for the native module."""
    if scenario is None:
        return None, None, "<embedded quickstart>"
    if isinstance(scenario, Mapping):
        # JSON is YAML.
        return None, json.dumps(scenario), "<dict>"
    if isinstance(scenario, os.PathLike):
        return os.fspath(scenario), None, os.fspath(scenario)
    if isinstance(scenario, str):
        one_line = "\n" not in scenario
        if one_line and (os.path.isfile(scenario) or scenario.strip().endswith((".yaml", ".yml"))):
            return scenario, None, scenario
        return None, scenario, "<string>"
    raise TypeError(f"scenario: expected a path, YAML text, a dict or None, not {type(scenario).__name__}")


def _overrides(set: Overrides) -> List[str]:
    if set is None:
        return []
    if isinstance(set, Mapping):
        out = []
        for path, value in set.items():
            if isinstance(value, str):
                text = value
            elif isinstance(value, os.PathLike):
                text = json.dumps(os.fspath(value))
            else:
                text = json.dumps(value)
            out.append(f"{path}={text}")
        return out
    if isinstance(set, str):
        return [set]
    return [str(s) for s in set]


def _tqdm_callback() -> Optional[Tuple[Callable[[Progress], None], Callable[[], None]]]:
    """A tqdm bar that appears after a second, or None when tqdm is not installed."""
    try:
        from tqdm.auto import tqdm
    except ImportError:
        return None
    bar = None

    def update(p: Progress) -> None:
        nonlocal bar
        if p.elapsed_s < 1.0:
            return
        if bar is None:
            # With a known end the bar counts simulated microseconds, else events.
            total = p.end_ps / 1e6 if p.end_ps else None
            unit = " us simulated" if total else " events"
            bar = tqdm(total=total, unit=unit, unit_scale=total is None, desc="fabemu", leave=False)
        if p.end_ps:
            bar.set_postfix_str(f"{p.events / max(p.elapsed_s, 1e-9) / 1e6:.2f} M events/s", refresh=False)
            bar.update(min(p.sim_time_ps, p.end_ps) / 1e6 - bar.n)
        else:
            bar.set_postfix_str(f"simulated {p.sim_time_ps / 1e6:.3f} us", refresh=False)
            bar.update(p.events - bar.n)

    def close() -> None:
        if bar is not None:
            bar.close()

    return update, close


def check(scenario: Scenario, *, set: Overrides = None, fidelity: Optional[str] = None, seed: Optional[int] = None) -> None:
    """Load and check a scenario without running it.

    Raises `ScenarioError` with the command line's located message (file, line, column,
    field) when the scenario or an override is invalid; warns about ignored keys of an
    ASTRA-sim network file.
    """
    path, text, name = _source(scenario)
    for w in _native.check(path, text, name, _overrides(set), seed, fidelity):
        warnings.warn(w, stacklevel=2)


def run(
    scenario: Scenario = None,
    *,
    set: Overrides = None,
    fidelity: Optional[str] = None,
    seed: Optional[int] = None,
    threads: int = 1,
    out: Union[str, "os.PathLike[str]", None] = None,
    pcap: Union[str, "os.PathLike[str]", None] = None,
    progress: Union[Callable[[Progress], Any], bool, None] = None,
) -> Report:
    """Run a scenario and return its report, as ``fabemu run`` does.

    Args:
        scenario: a YAML file's path (str or ``pathlib.Path``), YAML text, a dict with the
            YAML's structure, or None for the embedded quickstart. Relative paths inside a
            file are relative to its folder; inside text or a dict, to the working directory.
        set: overrides, the command line's ``--set``: ``{"nic.cc": "dcqcn",
            "workload.collectives[0].size": "64MiB"}`` (string values are YAML, other values
            are converted) or ``["nic.cc=dcqcn", ...]``. Applied in order before validation.
        fidelity: ``"packet"`` (every frame) or ``"flow"`` (messages as max-min fair flows),
            overriding the scenario's.
        seed: overrides the scenario's seed.
        threads: worker threads; changes speed only, never results. More than the CPUs this
            process may use are reduced to those, with a warning.
        out: a directory for report.json, summary.txt, time series (CSV) and plots, as
            ``--out``.
        pcap: write the frames the NICs sent and received to this file (pcapng when it ends in
            ``.pcapng``), as ``--pcap``.
        progress: a callable given a `Progress` about ten times a second (raise in it to stop
            the run), False for none, or None (default) for a tqdm bar after a second when
            tqdm is installed.

    Returns:
        The `Report`. Its ``json`` equals what ``fabemu run --json`` writes.

    Raises:
        ScenarioError: the scenario or an override is invalid; ``str(e)`` is the command
            line's message (file, line and column, field, what is wrong).
        Interrupted: Ctrl-C stopped the run (a ``KeyboardInterrupt``); ``e.report`` holds the
            partial report. The engine's threads have all ended when it is raised.
        ValueError: an option is invalid (an unwritable ``out`` or ``pcap``, ``pcap`` at flow
            fidelity).
        OSError: an output file could not be written after the run.

    The GIL is released while the engine runs. A run whose invariants fail (the command line
    exits 3) returns its report and warns with `InvariantWarning`.
    """
    return _execute(_source(scenario), set, fidelity, seed, threads, out, pcap, progress)


def _execute(
    source: Tuple[Optional[str], Optional[str], str],
    set: Overrides,
    fidelity: Optional[str],
    seed: Optional[int],
    threads: int,
    out: Union[str, "os.PathLike[str]", None],
    pcap: Union[str, "os.PathLike[str]", None],
    progress: Union[Callable[[Progress], Any], bool, None],
) -> Report:
    """`run` on a scenario already told apart as (path, text, name)."""
    path, text, name = source
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ValueError(f"threads must be a positive int, not {threads!r}")
    close: Optional[Callable[[], None]] = None
    user: Optional[Callable[[Progress], Any]] = None
    if callable(progress):
        user = progress
    elif progress is None:
        tq = _tqdm_callback()
        if tq is not None:
            user, close = tq
    callback = None
    if user is not None:
        t0 = time.monotonic()

        def callback(sim_time_ps: int, events: int, end_ps: Optional[int]) -> None:
            user(Progress(sim_time_ps, events, end_ps, time.monotonic() - t0))

    try:
        r = _native.run(
            path,
            text,
            name,
            _overrides(set),
            seed,
            fidelity,
            threads,
            os.fspath(out) if out is not None else None,
            os.fspath(pcap) if pcap is not None else None,
            callback,
        )
    finally:
        if close is not None:
            close()
    for w in r["warnings"]:
        warnings.warn(w, stacklevel=3)
    report = Report(r["json"], r["summary"])
    if r["keyboard_interrupt"]:
        raise Interrupted(report)
    if not report.invariants.ok and not report.interrupted:
        warnings.warn(
            "invariant violated: " + "; ".join(report.invariants.violations),
            InvariantWarning,
            stacklevel=3,
        )
    return report
