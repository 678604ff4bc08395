"""Each benchmark runs at its smallest size and produces a non-empty table (timings unchecked).

The engine measurements (``ENGINE_BENCHMARKS``) run with ``--engine-benchmarks`` only (see
``conftest.py``): together they took 640 of this suite's 730 s on the 2-core host.
"""

from __future__ import annotations

import pytest

from benchmarks.__main__ import BENCHMARKS, run_benchmark
from benchmarks.table import Table

# e2e 283 s, startup 121 s, numerics 84 s, profile 81 s, ranks 72 s with --quick (2026-12-06).
ENGINE_BENCHMARKS = ("e2e", "startup", "numerics", "profile", "ranks", "graph-memory")


@pytest.mark.slow
@pytest.mark.parametrize("name", [
    pytest.param(name, marks=pytest.mark.engine_benchmark) if name in ENGINE_BENCHMARKS
    else name for name in sorted(BENCHMARKS)])
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
    if name == "startup":
        check_engine_ready(tables[1], tables[2])


def check_engine_ready(phases: Table, ratios: Table) -> None:
    """--quick's engine-ready tables (the tiny qwen3, stock and plugin, cold and warm): every
    phase measured and within engine ready, the ratios those of the rows, the warm start's
    line read."""
    col = {column: i for i, column in enumerate(phases.columns)}
    rows = {(row[col["engine"]], row[col["start"]]): row for row in phases.rows}
    assert set(rows) == {(e, s) for e in ("stock", "plugin") for s in ("cold", "warm")}
    names = ["import s", "load s", "compile s", "warm-up s"]
    for row in rows.values():
        assert all(row[col[name]] > 0 for name in names), row
        # Rounding to 0.01 s per cell: at most 0.025 s over.
        assert sum(row[col[name]] for name in names) <= row[col["ready s"]] + 0.025, row
    assert rows["plugin", "warm"][col["cache loads"]] > 0
    assert rows["plugin", "cold"][col["cache loads"]] == 0
    [ratio_row] = ratios.rows
    got = dict(zip(ratios.columns, ratio_row, strict=True))

    def cell(engine: str, start: str, name: str) -> float:
        return float(rows[engine, start][col[name]])

    expected = {
        "plugin compile warm/cold": cell("plugin", "warm", "compile s")
        / cell("plugin", "cold", "compile s"),
        "stock compile warm/cold": cell("stock", "warm", "compile s")
        / cell("stock", "cold", "compile s"),
        "warm ready plugin/stock": cell("plugin", "warm", "ready s")
        / cell("stock", "warm", "ready s"),
    }
    for key, value in expected.items():  # the rows are rounded to 0.01 s
        assert got[key] == pytest.approx(value, rel=0.02, abs=0.002), key
    assert got["compile warm <= 0.2x cold"] == (
        "met" if got["plugin compile warm/cold"] <= 0.2 else "NOT MET")
