"""Shared fixtures: a HostFacts builder and a CLI runner."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pytest
from ascend_topology import HostFacts
from ascend_topology.cli import main

FactsBuilder = Callable[..., HostFacts]


def _build(
    *,
    soc: str = "A2",
    numa: Mapping[int, Sequence[int]],
    allowed: Sequence[int] | None = None,
    affinity: Mapping[int, Sequence[int]] | None = None,
    npus: int | None = None,
    running: Sequence[int] | None = None,
    visible: Sequence[int] | None = None,
    threads_per_core: int = 1,
) -> HostFacts:
    affinity = dict(affinity or {})
    count = npus if npus is not None else len(affinity)
    all_cpus = sorted(c for cpus in numa.values() for c in cpus)
    return HostFacts(
        soc=soc,
        numa={n: tuple(c) for n, c in numa.items()},
        allowed_cpus=tuple(all_cpus if allowed is None else sorted(allowed)),
        chip_map={i: {0: i} for i in range(count)},
        running_npus=tuple(range(count) if running is None else running),
        affinity={n: tuple(c) for n, c in affinity.items()},
        threads_per_core=threads_per_core,
        visible_devices=None if visible is None else tuple(visible),
        source="test",
    )


@pytest.fixture
def make_facts() -> FactsBuilder:
    """Build HostFacts from plain lists: ``make_facts(numa={0: range(8)}, npus=2)``."""
    return _build


@pytest.fixture
def run_cli(capsys: pytest.CaptureFixture[str]) -> Callable[..., tuple[int, str, str]]:
    """Run ``ascend-topology`` in-process: returns (exit status, stdout, stderr)."""

    def run(*argv: Any) -> tuple[int, str, str]:
        status = main([str(a) for a in argv])
        out, err = capsys.readouterr()
        return status, out, err

    return run
