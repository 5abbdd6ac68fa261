"""Control of a running scenario: Ctrl-C, progress, the GIL, threads left behind."""

import os
import signal
import threading
import time

import pytest

import fabemu
from conftest import EXAMPLES

# The embedded quickstart: 64 hosts, about 5 s of work, so there is time to interrupt it.
LONG = None


def os_threads():
    return len(os.listdir("/proc/self/task"))


def threads_back_to(n, within=2.0):
    """Whether the process is down to `n` OS threads within `within` seconds (a thread that
    has finished its work may take a moment to be torn down)."""
    deadline = time.monotonic() + within
    while os_threads() > n and time.monotonic() < deadline:
        time.sleep(0.01)
    return os_threads() == n


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="needs /proc")
def test_ctrl_c_stops_the_run_with_a_partial_report():
    before = os_threads()
    timer = threading.Timer(0.5, lambda: os.kill(os.getpid(), signal.SIGINT))
    t0 = time.monotonic()
    timer.start()
    with pytest.raises(KeyboardInterrupt) as e:
        fabemu.run(LONG, threads=2, progress=False)
    wall = time.monotonic() - t0
    timer.join()
    assert isinstance(e.value, fabemu.Interrupted)
    report = e.value.report
    assert report.interrupted and report.json["interrupted"] is True
    # Stopped early: some events were handled, and far from all of them.
    assert 0 < report.totals.events
    assert wall < 4.0, wall
    # Every engine thread has ended by the time the exception is raised.
    assert threads_back_to(before)


def test_progress_callback_sees_the_run_move():
    seen = []
    r = fabemu.run(LONG, progress=seen.append)
    assert len(seen) >= 3
    times = [p.sim_time_ps for p in seen]
    assert times == sorted(times) and times[-1] > 0
    assert seen[-1].events <= r.totals.events
    assert all(p.end_ps is None for p in seen)  # the quickstart sets no `until`


def test_progress_knows_the_end_when_until_is_set():
    seen = []
    # The quickstart stopped after 1 ms of simulated time.
    # Its larger collectives cannot finish by then: the invariants say so.
    with pytest.warns(fabemu.InvariantWarning, match="never finished"):
        r = fabemu.run(LONG, set={"until": "1ms"}, progress=seen.append)
    assert seen and all(p.end_ps == 10**9 for p in seen)
    assert all(0.0 <= p.fraction <= 1.0 for p in seen)
    assert r.totals.simulated_time_ps <= 10**9


class Stop(Exception):
    pass


def test_a_raising_callback_stops_the_run():
    before = os_threads() if os.path.isdir("/proc/self/task") else None
    t0 = time.monotonic()

    def stop(p):
        if p.elapsed_s > 0.3:
            raise Stop()

    with pytest.raises(Stop):
        fabemu.run(LONG, progress=stop)
    assert time.monotonic() - t0 < 4.0
    if before is not None:
        assert threads_back_to(before)


def test_the_gil_is_released_while_the_engine_runs():
    done = threading.Event()
    result = {}

    def work():
        result["report"] = fabemu.run(LONG, progress=False)
        done.set()

    worker = threading.Thread(target=work)
    last = time.monotonic()
    worst = 0.0
    ticks = 0
    worker.start()
    while not done.is_set():
        now = time.monotonic()
        worst = max(worst, now - last)
        last = now
        ticks += 1
        time.sleep(0.001)
    worker.join()
    assert result["report"].totals.events > 0
    # This thread kept running the whole time: never held off for long.
    assert ticks > 100
    assert worst < 0.5, worst


def test_invariant_failures_warn():
    # A data-mode collective with a payload that cannot finish by `until`: a transfer that
    # never finished is an invariant violation (the command line exits 3).
    with pytest.warns(fabemu.InvariantWarning, match="invariant violated"):
        r = fabemu.run(EXAMPLES / "star.yaml", set={"until": "10us"}, progress=False)
    assert not r.invariants.ok and r.invariants.violations
