"""Checks the topology fuzz tests apply to whatever a parser or loader makes of fuzzed input:
either a sane result or a one-line-per-problem ``TopologyError``, nothing else."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from ascend_topology import (
    MAX_CPU_ID,
    SOCS,
    RecordedHostError,
    TopologyError,
    load_recorded_host,
    plan,
)

T = TypeVar("T")


def result_or_error(parse: Callable[[], T]) -> T | None:
    """``parse()``'s result, or None when it raised a one-line ``TopologyError``; any other
    exception fails the test."""
    try:
        return parse()
    except TopologyError as exc:
        assert exc.problems and all(p and "\n" not in p for p in exc.problems)
        return None


def check_recorded_host(folder: Path) -> None:
    """Load ``folder`` as a recorded host and plan it: either one-line problems, or facts with
    CPU ids in range and a plan that gives each CPU to at most one NPU."""
    try:
        facts = load_recorded_host(folder)
    except RecordedHostError as exc:
        assert exc.problems and all(p and "\n" not in p for p in exc.problems)
        return
    assert facts.soc in SOCS and 1 <= facts.threads_per_core <= 8
    every = [*facts.allowed_cpus, *(c for cpus in facts.numa.values() for c in cpus),
             *(c for cpus in facts.affinity.values() for c in cpus)]
    assert all(type(c) is int and 0 <= c <= MAX_CPU_ID for c in every)
    result = plan(facts)
    used = [c for p in result.npus for c in p.cpus]
    assert len(used) == len(set(used)) and set(used) <= set(facts.allowed_cpus)
    assert result.ok == (not result.problems and bool(result.npus))
    data = json.loads(result.to_json())
    assert all(type(c) is int for e in data["npus"] for c in e["cpus"])

