"""Live processes read from /proc (Linux): a process tree by parent pid, a session's members.

A process is named by `ProcessId` (pid and start time), so a pid the kernel reused for an
unrelated process later does not count as the same process. Zombies count as gone: they run
nothing and hold no resources but their table entry.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

PROC = Path("/proc")


@dataclass(frozen=True)
class ProcessId:
    """One process: its pid and its start time (clock ticks after boot, /proc/PID/stat)."""

    pid: int
    start_ticks: int


@dataclass(frozen=True)
class ProcessInfo:
    """What /proc/PID/stat says about one live (not zombie) process."""

    id: ProcessId
    ppid: int
    pgid: int
    sid: int
    state: str
    name: str


def parse_stat(text: str) -> ProcessInfo:
    """A /proc/PID/stat line. The command name sits in parentheses and may itself hold spaces
    and parentheses, so the fields are counted from the last ')'."""
    head, _, tail = text.rpartition(")")
    pid_text, _, name = head.partition(" (")
    fields = tail.split()
    # fields[0] is field 3 of proc(5): state, ppid, pgrp, session, ..., starttime (field 22).
    return ProcessInfo(
        id=ProcessId(int(pid_text), int(fields[19])),
        ppid=int(fields[1]),
        pgid=int(fields[2]),
        sid=int(fields[3]),
        state=fields[0],
        name=name,
    )


def process_info(pid: int, proc: Path = PROC) -> ProcessInfo | None:
    """The process `pid`, or None when it is gone or a zombie."""
    try:
        info = parse_stat((proc / str(pid) / "stat").read_text())
    except (OSError, ValueError, IndexError):
        return None
    return None if info.state in ("Z", "X") else info


def live_processes(proc: Path = PROC) -> list[ProcessInfo]:
    """Every live (not zombie) process visible in `proc`, by pid."""
    found = []
    for entry in sorted(proc.iterdir(), key=lambda e: (len(e.name), e.name)):
        if entry.name.isdigit():
            info = process_info(int(entry.name), proc)
            if info is not None:
                found.append(info)
    return found


def process_tree(root: int, proc: Path = PROC) -> list[ProcessInfo]:
    """`root` and all its live descendants (by parent pid), root first; [] when it is gone."""
    everything = live_processes(proc)
    by_parent: dict[int, list[ProcessInfo]] = {}
    for info in everything:
        by_parent.setdefault(info.ppid, []).append(info)
    top = next((info for info in everything if info.id.pid == root), None)
    if top is None:
        return []
    tree, frontier = [top], [top]
    while frontier:
        children = [c for p in frontier for c in by_parent.get(p.id.pid, [])]
        tree += children
        frontier = children
    return tree


def session_members(sid: int, proc: Path = PROC) -> list[ProcessInfo]:
    """Live processes of session `sid` (a process started with a new session keeps everything
    it starts in that session unless they call setsid themselves)."""
    return [info for info in live_processes(proc) if info.sid == sid]


def still_alive(processes: list[ProcessInfo], proc: Path = PROC) -> list[ProcessInfo]:
    """The ones of `processes` that still run (same pid and start time, not a zombie)."""
    alive = []
    for info in processes:
        now = process_info(info.id.pid, proc)
        if now is not None and now.id == info.id:
            alive.append(info)
    return alive


def leftovers(processes: list[ProcessInfo], sid: int, timeout: float, interval: float = 0.2,
              proc: Path = PROC) -> list[ProcessInfo]:
    """What still runs of `processes` and of session `sid` after up to `timeout` seconds (a
    killed process disappears from /proc a moment after its parent saw it exit)."""
    deadline = time.monotonic() + timeout
    while True:
        alive = still_alive(processes, proc)
        ids = {info.id for info in alive}
        alive += [info for info in session_members(sid, proc) if info.id not in ids]
        if not alive or time.monotonic() >= deadline:
            return alive
        time.sleep(interval)
