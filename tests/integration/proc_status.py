"""What a live process's /proc/<pid>/status says, read directly (independent of the plugin)."""

from __future__ import annotations

from pathlib import Path


def _field(pid: int, name: str) -> str:
    text = Path(f"/proc/{pid}/status").read_text()
    (line,) = [x for x in text.splitlines() if x.startswith(f"{name}:")]
    return line.split(":", 1)[1].strip()


def cpus_allowed(pid: int) -> list[int]:
    """`Cpus_allowed_list` of a live process."""
    cpus: list[int] = []
    for part in _field(pid, "Cpus_allowed_list").split(","):
        low, _, high = part.partition("-")
        cpus += range(int(low), int(high or low) + 1)
    return cpus


def parent_pid(pid: int) -> int:
    """`PPid` of a live process."""
    return int(_field(pid, "PPid"))
