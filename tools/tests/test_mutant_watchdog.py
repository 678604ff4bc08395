"""tools/mutant_watchdog.py: hung mutant processes get mutmut's timeout signal, others do not."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator

import mutant_watchdog
import pytest
from mutant_watchdog import Sample, Watchdog, mutant_processes


@pytest.fixture
def hung_mutant() -> Iterator[subprocess.Popen[bytes]]:
    """A real child of this process titled like a mutmut worker, asleep (no CPU progress)."""
    proc = subprocess.Popen(["bash", "-c", 'exec -a "mutmut: pkg.mod.x_f__mutmut_7" sleep 60'])
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()


def _wait_titled(root: int) -> dict[int, Sample]:
    for _ in range(2000):  # until bash has exec'd the titled sleep (a few ms)
        found = mutant_processes(root)
        if found:
            return found
    raise AssertionError("the titled child never appeared")


def test_finds_titled_descendants_only(hung_mutant: subprocess.Popen[bytes]) -> None:
    found = _wait_titled(os.getpid())
    assert list(found) == [hung_mutant.pid]
    assert found[hung_mutant.pid].title == "pkg.mod.x_f__mutmut_7"
    assert found[hung_mutant.pid].state in ("S", "R")
    assert mutant_processes(hung_mutant.pid) == {}  # descendants only, not the root


def test_hung_mutant_exits_as_mutmut_timeout(hung_mutant: subprocess.Popen[bytes]) -> None:
    watchdog = Watchdog(idle_limit_s=300)
    found = _wait_titled(os.getpid())
    assert watchdog.check(found, now=1000.0) == []  # first sight: the clock starts
    assert watchdog.check(found, now=1299.0) == []  # just below the limit
    assert watchdog.check(found, now=1300.0) == ["pkg.mod.x_f__mutmut_7"]
    # SIGXCPU: mutmut's stats map exit status -24 to "timeout"
    assert hung_mutant.wait(timeout=30) == -signal.SIGXCPU


def _sample(ticks: int, state: str = "S") -> dict[int, Sample]:
    return {42: Sample("m.x_f__mutmut_1", ticks, state)}


def test_cpu_progress_or_a_stop_restarts_the_idle_clock() -> None:
    sent: list[tuple[int, int]] = []
    watchdog = Watchdog(idle_limit_s=10, send=lambda pid, sig: sent.append((pid, sig)))
    assert watchdog.check(_sample(5), now=0.0) == []
    assert watchdog.check(_sample(6), now=9.0) == []  # it used CPU: idle since 9
    assert watchdog.check(_sample(6, "T"), now=18.0) == []  # stopped by the user: since 18
    assert watchdog.check(_sample(6), now=27.0) == []
    assert sent == []
    assert watchdog.check(_sample(6), now=28.0) == ["m.x_f__mutmut_1"]
    assert sent == [(42, signal.SIGXCPU)]
    assert watchdog.check(_sample(6), now=29.0) == []  # signalled once, then watched afresh


def test_a_process_that_ended_is_forgotten_and_not_reported() -> None:
    def gone(pid: int, sig: int) -> None:
        raise ProcessLookupError(pid)

    watchdog = Watchdog(idle_limit_s=1, send=gone)
    watchdog.check(_sample(3), now=0.0)
    assert watchdog.check(_sample(3), now=5.0) == []
    watchdog.check({}, now=6.0)
    assert watchdog.check(_sample(3), now=6.5) == []  # a new pid 42: its clock starts again


@pytest.mark.parametrize("limit", [0.0, -1.0])
def test_idle_limit_must_be_positive(limit: float) -> None:
    with pytest.raises(ValueError, match=f"idle_limit_s must be > 0 seconds, got {limit}"):
        mutant_watchdog.Watchdog(limit)
