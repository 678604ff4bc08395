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
    if name == "serve":
        # The rank report's compiles after ready, the warm-up load included: none.
        compiles = next(t for t in tables if "compiles after ready" in t.title)
        verdict = compiles.columns.index("verdict")
        assert compiles.rows and all(row[verdict] == "pass" for row in compiles.rows)
        assert compiles.notes[0].startswith(
            "compiles, pass-manager runs and captures after ready: 0 (target 0): pass")
    if name == "e2e":
        # --quick runs the real model (SmolLM2: stock and fusion on, 1 round, 4 tokens).
        real = next(t for t in tables if "smollm2" in t.title)
        columns = {column: i for i, column in enumerate(real.columns)}
        for row in real.rows:
            # Below the memory-bound ceiling, with room for a noisy bandwidth sample (a units
            # slip, bits or a missing dtype size, would be 2-8x).
            assert row[columns["ready warm s"]] > 0 and 0 < row[columns["of ceiling"]] < 1.5
