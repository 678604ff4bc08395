"""The end-to-end table's ratios and verdicts, and the profile's categories (no engines)."""

from __future__ import annotations

import itertools
from collections import Counter

import pytest

from benchmarks.bench_e2e import (
    FULL,
    QUICK,
    model_table,
    round_order,
    round_quartiles,
    round_ratio,
)
from benchmarks.bench_profile import median_window
from benchmarks.e2e_engines import EngineRun
from benchmarks.profile_breakdown import breakdown, category


def _run(label: str, rate: float, startup: float = 10.0, rss: float = 1000.0,
         tokens: list[list[int]] | None = None) -> EngineRun:
    return EngineRun(label, startup_s=startup, batch_rates=[rate, rate * 2],
                     single_rates=[rate / 10, rate / 5], peak_rss_mib=rss,
                     tokens=tokens if tokens is not None else [[1, 2]])


def _targets(table_notes: list[str]) -> str:
    return next(note for note in table_notes if note.startswith("Targets:"))


def test_round_orders_balance_positions_and_predecessors() -> None:
    engines = ["stock", "on", "off"]
    orders = [tuple(round_order(engines, r)) for r in range(6)]
    assert sorted(orders) == sorted(itertools.permutations(engines))
    # Each engine in each position twice, and directly after each other engine twice.
    assert Counter((i, e) for o in orders for i, e in enumerate(o)) == {
        (i, e): 2 for i in range(3) for e in engines}
    assert Counter(pair for o in orders for pair in itertools.pairwise(o)) == {
        pair: 2 for pair in itertools.permutations(engines, 2)}
    assert [round_order(engines, r) for r in range(6, 12)] == [list(o) for o in orders]
    assert FULL.rounds % 6 == 0
    assert [round_order(["a", "b"], r) for r in range(4)] == [
        ["a", "b"], ["b", "a"], ["b", "a"], ["a", "b"]]


def test_round_ratio_is_the_median_of_per_round_ratios() -> None:
    assert round_ratio([2.0, 4.0, 9.0], [1.0, 2.0, 3.0]) == 2.0  # ratios 2, 2, 3
    assert round_ratio([1.0, 3.0], [1.0, 1.0]) == 2.0  # even count: mean of the middle two
    with pytest.raises(ValueError):
        round_ratio([1.0], [1.0, 2.0])  # one ratio per round, nothing dropped silently


def test_round_quartiles_are_the_inclusive_quartiles_of_per_round_ratios() -> None:
    # ratios 1, 2, 3, 4, 5 (out of order): quartiles at positions 1 and 3 of 0..4
    assert round_quartiles([3.0, 10.0, 2.0, 12.0, 3.0], [3.0, 2.0, 1.0, 3.0, 1.0]) == (2.0, 4.0)
    # ratios 1 and 2: a quarter and three quarters of the way between them
    assert round_quartiles([1.0, 4.0], [1.0, 2.0]) == (1.25, 1.75)
    assert round_quartiles([3.0], [2.0]) == (1.5, 1.5)  # one round: no spread
    with pytest.raises(ValueError):
        round_quartiles([1.0], [1.0, 2.0])


def test_the_notes_give_the_ratio_spread_per_round() -> None:
    runs = {"stock": _run("stock", 100.0), "fusion on": _run("fusion on", 100.0),
            "fusion off": _run("fusion off", 100.0)}
    runs["fusion on"].batch_rates = [100.0, 220.0]  # ratios 1.0 and 1.1 to stock's 100, 200
    notes = model_table("qwen3", QUICK, runs).notes
    spread = next(note for note in notes if note.startswith("Per-round ratio quartiles"))
    assert "on/stock batch 1.025-1.075" in spread and "on/off batch 1.025-1.075" in spread
    assert ", single 1.000-1.000" in spread


def test_targets_are_met_at_the_boundary() -> None:
    runs = {"stock": _run("stock", 100.0), "fusion on": _run("fusion on", 100.0, rss=1100.0),
            "fusion off": _run("fusion off", 100.0)}
    table = model_table("qwen3", QUICK, runs)
    targets = _targets(table.notes)
    assert "NOT MET" not in targets  # 1.0x speed, 1.1x RSS, equal start-up: all met
    on_row = table.rows[1]
    assert on_row[0] == "fusion on" and on_row[2] == 1.0 and on_row[8] == 1.1


@pytest.mark.parametrize(
    ("on", "missed"),
    [
        (_run("fusion on", 99.0), ["batch on/stock", "single on/stock"]),
        (_run("fusion on", 100.0, rss=1101.0), ["peak RSS on/stock"]),
        (_run("fusion on", 100.0, startup=10.01), ["engine ready on/stock"]),
        # bf16 tokens of fusion on and off may differ (numerics: `benchmarks numerics`).
        (_run("fusion on", 100.0, tokens=[[1, 3]]), []),
    ],
)
def test_each_target_misses_just_past_its_boundary(on: EngineRun, missed: list[str]) -> None:
    # fusion off at 0.99x stock: on/off holds (>= 1.0) in every case.
    runs = {"stock": _run("stock", 100.0), "fusion on": on, "fusion off": _run("fusion off", 99.0)}
    targets = _targets(model_table("qwen3", QUICK, runs).notes)
    assert targets.count("NOT MET") == len(missed)
    for name in missed:
        assert f"{name} NOT MET" in targets


def test_profile_categories_follow_the_nearest_categorised_ancestor() -> None:
    assert category(["ascend::rms_norm", "## Call CompiledFxGraph x ##"]) == (
        "ascend ops: Python reference glue")
    assert category(["aten::mul", "ascend::rms_norm", "## Call CompiledFxGraph x ##"]) == (
        "ascend ops: aten kernels inside")
    assert category(["aten::item", "_C::onednn_mm"]) == "linear layers"
    assert category(["_C::cpu_attention_with_kv_cache"]) == "attention + KV cache"
    # the fused op's own Python time counts as attention too (fusion on)
    assert category(["vllm_ascend::attention_with_kv_update"]) == "attention + KV cache"
    assert category(["_C::cpu_fused_moe", "## Call CompiledFxGraph x ##"]) == "MoE experts"
    assert category(["aten::empty", "## Call CompiledFxGraph x ##"]) == (
        "inductor kernels + graph glue")
    assert category(["aten::argmax"]) == "outside the model graph"


def test_profile_figures_are_medians_over_the_windows() -> None:
    def window(linear: float, glue: float, wall: float, calls: dict[str, float]) -> dict:
        return {"ms_per_step": {"linear layers": linear, "outside the model graph": glue},
                "calls_per_step": calls, "wall_ms_per_step": wall}

    windows = [window(3.0, 0.5, 9.0, {"_C::onednn_mm": 33.0, "ascend::rms_norm": 2.0}),
               window(1.0, 0.7, 5.0, {"_C::onednn_mm": 33.0, "ascend::silu_and_mul": 1.0}),
               window(2.0, 0.1, 7.5, {"_C::onednn_mm": 33.0, "ascend::rms_norm": 2.0})]
    assert median_window(windows) == {
        "ms_per_step": {"linear layers": 2.0, "outside the model graph": 0.5},
        # A call missing from a window counts as none there.
        "calls_per_step": {"_C::onednn_mm": 33.0, "ascend::rms_norm": 2.0,
                           "ascend::silu_and_mul": 0.0},
        "wall_ms_per_step": 7.5,
    }
    assert median_window(windows[:2])["wall_ms_per_step"] == 7.0


def test_breakdown_sums_self_time_per_category_and_calls_per_step() -> None:
    graph = "## Call CompiledFxGraph x ##"
    ops = [
        (["_C::onednn_mm", graph], 3000.0, 66),
        (["aten::item", "_C::onednn_mm", graph], 200.0, 66),  # inside a linear: linear time
        (["ascend::rms_norm", graph], 500.0, 4),
        (["aten::mul", "ascend::rms_norm", graph], 300.0, 4),
        ([graph], 1000.0, 2),
        (["aten::argmax"], 100.0, 2),
    ]
    found = breakdown(ops, steps=2)
    assert found["ms_per_step"] == {
        "linear layers": 1.6, "attention + KV cache": 0.0, "MoE experts": 0.0,
        "ascend ops: Python reference glue": 0.25, "ascend ops: aten kernels inside": 0.15,
        "inductor kernels + graph glue": 0.5, "outside the model graph": 0.05,
    }
    # Only the ops worth naming are counted, by their own name (not an ancestor's).
    assert found["calls_per_step"] == {graph: 1.0, "_C::onednn_mm": 33.0,
                                       "ascend::rms_norm": 2.0}
