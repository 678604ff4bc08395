"""``--engine-benchmarks``: also run the `--quick` smoke runs of the benchmarks that measure
whole engines (``ENGINE_BENCHMARKS``: minutes each on the 2-core CI host). Without it they are
deselected, not skipped: they are measurements, run whenever those benchmarks are measured,
and the code they drive (engine runners, phase tables) has its own tests here and in
``tests/integration``."""

from __future__ import annotations

import pytest

ENGINE_MARK = "engine_benchmark"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--engine-benchmarks", action="store_true", default=False,
                     help="also run the smoke runs of the benchmarks that measure engines")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--engine-benchmarks"):
        return
    chosen = [item for item in items if item.get_closest_marker(ENGINE_MARK) is None]
    dropped = [item for item in items if item.get_closest_marker(ENGINE_MARK) is not None]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = chosen
