"""bench_serve's compiles-after-ready table: built from the rank reports, one row per rank, the
verdict "pass" only with no compile, pass-manager run or capture after ready, and an error
when no report says it was ready."""

from __future__ import annotations

from typing import Any

import pytest

from benchmarks.bench_serve import AFTER_READY_COLUMNS, after_ready_table


def _report(*, compiles: int = 0, pass_runs: int = 0, captures: int = 0,
            causes: tuple[str, ...] = ()) -> dict[str, Any]:
    """A rank report as the worker writes it: 3 compiles (1.5 s) and 2 pass-manager runs at
    start-up, then the post-ready counts given."""
    return {
        "stage": "serving" if compiles + pass_runs + captures else "warmed_up",
        "ready": True,
        "compiles": {"count": 3 + compiles, "seconds": 1.5, "dynamo": 2 + compiles, "aot": 1},
        "pass_runs": 2 + pass_runs,
        "after_ready": {"compiles": compiles, "pass_runs": pass_runs, "captures": captures,
                        "causes": list(causes)},
    }


def _column(table: Any, name: str) -> list[Any]:
    index = AFTER_READY_COLUMNS.index(name)
    return [row[index] for row in table.rows]


def test_no_event_after_ready_is_a_pass_with_start_up_totals() -> None:
    table = after_ready_table({(0, 0): _report()})
    assert _column(table, "compiles at start-up") == [3]
    assert _column(table, "pass-manager runs at start-up") == [2]
    assert _column(table, "compiles after ready") == [0]
    assert _column(table, "verdict") == ["pass"]
    assert table.notes[0].startswith(
        "compiles, pass-manager runs and captures after ready: 0 (target 0): pass")


@pytest.mark.parametrize("kind", ["compiles", "pass_runs", "captures"])
def test_one_event_after_ready_of_any_kind_fails_and_names_its_cause(kind: str) -> None:
    table = after_ready_table({(0, 0): _report(), (0, 1): _report(**{kind: 1},
                                                                   causes=("new shape 7",))})
    assert _column(table, "verdict") == ["pass", "FAIL"]
    assert _column(table, "compiles at start-up") == [3, 3]  # post-ready ones not included
    assert table.notes[0].startswith(
        "compiles, pass-manager runs and captures after ready: 1 (target 0): FAIL")
    assert table.notes[1:] == ["after ready: dp0 rank1: new shape 7"]


def test_missing_reports_or_counts_are_errors_not_a_pass() -> None:
    with pytest.raises(RuntimeError, match="no rank report was written"):
        after_ready_table({})
    started = {"stage": "device", "ready": False}
    with pytest.raises(RuntimeError, match="dp0-rank0 has no post-ready count"):
        after_ready_table({(0, 0): started})
