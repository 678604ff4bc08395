"""The benchmark modules import each other without a cycle (function-local imports count)."""

from __future__ import annotations

from pathlib import Path

from tools.import_cycles import import_graph, strongly_connected

BENCHMARKS = Path(__file__).resolve().parents[1]


def test_benchmark_modules_form_no_import_cycle() -> None:
    modules = {f"benchmarks.{path.stem}": path for path in BENCHMARKS.glob("*.py")
               if path.stem != "__init__"}
    assert "benchmarks.bench_e2e" in modules and "benchmarks.e2e_real" in modules
    assert strongly_connected(import_graph(modules)) == []
