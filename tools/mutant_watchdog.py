"""Hung mutants: a wall-clock guard next to mutmut's CPU-time limit.

mutmut limits each mutant's *CPU* time (SIGXCPU, counted as a timeout). A mutant that deadlocks
(e.g. a forked child waiting on a lock its parent's threads held at fork time) uses no CPU and
so would hold its worker forever. The watchdog treats a mutant process that has made no CPU
progress for ``idle_limit_s`` seconds as hung and sends it the same SIGXCPU, so mutmut records
the same "timeout" verdict its own limit gives. A stopped process (state ``T``/``t``, e.g.
paused by the user while the machine is needed elsewhere) is not idle: its clock restarts.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

TITLE_PREFIX = "mutmut: "  # mutmut sets a mutant worker's process title to this + mutant name


@dataclass(frozen=True)
class Sample:
    """One look at a mutant process: its title, CPU ticks (user + system) and state letter."""

    title: str
    cpu_ticks: int
    state: str


def _stat_fields(pid: int) -> list[str]:
    # The command name in field 2 may hold spaces or parentheses: split after the last ')'.
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def _parent(pid: int) -> int:
    return int(_stat_fields(pid)[1])


def mutant_processes(root_pid: int, proc: Path = Path("/proc")) -> dict[int, Sample]:
    """The live mutant processes that descend from ``root_pid`` (the ``mutmut run`` process)."""
    found: dict[int, Sample] = {}
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        try:
            raw = (entry / "cmdline").read_bytes().split(b"\0", 1)[0]
            title = raw.decode(errors="replace").strip()
            if not title.startswith(TITLE_PREFIX):
                continue
            fields = _stat_fields(pid)
            ancestor = int(fields[1])
            while ancestor > 1 and ancestor != root_pid:
                ancestor = _parent(ancestor)
        except (OSError, ValueError, IndexError):  # the process ended while being read
            continue
        if ancestor == root_pid:
            found[pid] = Sample(title.removeprefix(TITLE_PREFIX), int(fields[11]) + int(fields[12]),
                                fields[0])
    return found


class Watchdog:
    """Remembers when each mutant process last used CPU; signals the ones idle too long."""

    def __init__(self, idle_limit_s: float,
                 send: Callable[[int, int], None] = os.kill) -> None:
        if idle_limit_s <= 0:
            raise ValueError(f"idle_limit_s must be > 0 seconds, got {idle_limit_s}")
        self.idle_limit_s = idle_limit_s
        self._send = send
        self._progress: dict[int, tuple[int, float]] = {}  # pid -> (CPU ticks, since when)

    def check(self, samples: Mapping[int, Sample], now: float) -> list[str]:
        """Signal every sampled mutant idle for at least the limit; their mutant names."""
        hung: list[str] = []
        for pid, sample in samples.items():
            last = self._progress.get(pid)
            if last is None or sample.state in ("T", "t") or sample.cpu_ticks != last[0]:
                self._progress[pid] = (sample.cpu_ticks, now)
                continue
            if now - last[1] >= self.idle_limit_s:
                try:
                    self._send(pid, signal.SIGXCPU)
                except ProcessLookupError:  # it ended on its own meanwhile
                    pass
                else:
                    hung.append(sample.title)
                self._progress.pop(pid)
        for pid in set(self._progress) - set(samples):
            del self._progress[pid]
        return hung


def guard(root_pid: int, idle_limit_s: float, stop: threading.Event,
          report: Callable[[str], None], poll_s: float = 5.0) -> None:
    """Poll the mutants of ``root_pid`` until ``stop`` is set (run in a thread)."""
    import time

    watchdog = Watchdog(idle_limit_s)
    while not stop.wait(poll_s):
        for name in watchdog.check(mutant_processes(root_pid), time.monotonic()):
            report(f"mutant {name} made no CPU progress for {idle_limit_s:.0f} s (hung): "
                   "sent SIGXCPU, recorded as a timeout")
