"""Each benchmark runs at its smallest size and produces a non-empty table (timings unchecked)."""

from __future__ import annotations

import pytest

from benchmarks.__main__ import BENCHMARKS, run_benchmark


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(BENCHMARKS))
def test_benchmark_runs_quick(name: str) -> None:
    tables = run_benchmark(name, quick=True)
    assert tables, f"{name} returned no table"
    for table in tables:
        assert table.rows, f"{name}: table {table.title!r} has no rows"
        assert all(len(row) == len(table.columns) for row in table.rows)
        assert table.to_markdown().startswith("### ")
