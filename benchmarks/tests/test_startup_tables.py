"""The engine-ready tables: phases and remainder per start, ratios and target verdicts from the
rows, medians over repeats, the warm-start line read from a worker log (no engines)."""

from __future__ import annotations

import pytest

from benchmarks.startup_engines import (
    PHASES,
    Start,
    median_start,
    startup_tables,
    warm_line_count,
)


def _start(engine: str, start: str, compile_s: float, ready: float, model: str = "m",
           loaded: int | None = None) -> Start:
    return Start(model, engine, start,
                 {"import": 4.0, "load": 1.0, "compile": compile_s, "warm_up": 0.5}, ready,
                 loaded)


def _starts(plugin_warm_compile: float, plugin_warm_ready: float) -> list[Start]:
    return [
        _start("stock", "cold", 20.0, 40.0),
        _start("stock", "warm", 5.0, 20.0),
        _start("plugin", "cold", 25.0, 50.0),
        _start("plugin", "warm", plugin_warm_compile, plugin_warm_ready, loaded=3),
    ]


def test_phase_table_has_every_phase_and_the_remainder_of_engine_ready() -> None:
    phases, _ = startup_tables(_starts(5.0, 12.0), repeats=1)
    assert phases.columns[3:9] == ["import s", "load s", "compile s", "warm-up s", "other s",
                                   "ready s"]
    rows = {(row[1], row[2]): row for row in phases.rows}
    assert set(rows) == {(e, s) for e in ("stock", "plugin") for s in ("cold", "warm")}
    # plugin cold: 50 - (4 + 1 + 25 + 0.5)
    assert rows["plugin", "cold"][3:9] == [4.0, 1.0, 25.0, 0.5, 19.5, 50.0]
    assert rows["plugin", "warm"][9] == 3 and rows["plugin", "cold"][9] == 0
    assert rows["stock", "warm"][9] == ""  # stock loads no plugin: no line to read


def test_ratios_come_from_the_rows_and_the_targets_hold_at_their_boundaries() -> None:
    # warm compile 5 / cold 25 = 0.2 exactly; warm ready 12 / stock warm 20 = 0.6 exactly
    _, ratios = startup_tables(_starts(5.0, 12.0), repeats=1)
    row = dict(zip(ratios.columns, ratios.rows[0], strict=True))
    assert row["plugin compile warm/cold"] == 0.2
    assert row["stock compile warm/cold"] == 0.25  # 5 / 20
    assert row["warm ready plugin/stock"] == 0.6
    assert row["cold ready plugin/stock"] == 1.25  # 50 / 40
    assert row["compile warm <= 0.2x cold"] == "met"
    assert row["warm ready <= 0.6x stock"] == "met"
    _, ratios = startup_tables(_starts(5.1, 12.1), repeats=1)
    row = dict(zip(ratios.columns, ratios.rows[0], strict=True))
    assert row["compile warm <= 0.2x cold"] == "NOT MET"
    assert row["warm ready <= 0.6x stock"] == "NOT MET"


def test_one_ratio_row_per_model() -> None:
    starts = _starts(5.0, 12.0) + [
        _start(e, s, 10.0, 30.0, model="other") for e in ("stock", "plugin")
        for s in ("cold", "warm")]
    _, ratios = startup_tables(starts, repeats=1)
    assert [row[0] for row in ratios.rows] == ["m", "other"]
    assert ratios.rows[1][1:5] == [1.0, 1.0, 1.0, 1.0]


def test_median_start_takes_each_phase_median_over_repeats() -> None:
    runs = [_start("plugin", "warm", c, r, loaded=n)
            for c, r, n in ((1.0, 9.0, 3), (3.0, 7.0, 2), (2.0, 8.0, 3))]
    median = median_start(runs)
    assert median.phases["compile"] == 2.0 and median.ready_s == 8.0
    assert set(median.phases) == set(PHASES)
    assert median.loaded == 2  # the fewest any repeat loaded


@pytest.mark.parametrize(("log", "count"), [
    ("INFO x\n", None),
    ("(MainProcess) INFO 12-05 [warm_start.py:9] warm start: loaded 7 compiled artifacts from "
     "/tmp/c/torch_compile_cache/abc/rank_0_0/backbone in 0.84 s\n", 7),
])
def test_warm_line_count_reads_the_plugins_line(log: str, count: int | None) -> None:
    assert warm_line_count(log) == count
