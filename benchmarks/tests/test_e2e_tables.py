"""The end-to-end tables' ratios, verdicts and single-stream ceiling, and the profile's
categories (no engines)."""

from __future__ import annotations

import itertools
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import save_file

from benchmarks.bench_e2e import FULL, QUICK, model_table
from benchmarks.bench_profile import median_window
from benchmarks.decode_ceiling import (
    Bandwidth,
    ceiling_tokens_per_s,
    checkpoint_weight_bytes,
    tensor_elements,
    weight_bytes_per_step,
)
from benchmarks.e2e_engines import EngineRun
from benchmarks.e2e_real import REAL_QUICK, pass_sites, real_table
from benchmarks.e2e_rounds import round_order, round_quartiles, round_ratio
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
    def window(linear: float, glue: float, wall: float, calls: dict[str, float]) -> dict[str, Any]:
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


# --- the real model's table and its single-stream ceiling -----------------------------------


def _save_checkpoint(path: Path, shapes: dict[str, tuple[int, ...]], tied: bool) -> Path:
    """A checkpoint directory with bf16 tensors of ``shapes`` (written by safetensors itself)
    and a config saying whether the embeddings are tied."""
    path.mkdir()
    save_file({name: torch.zeros(shape, dtype=torch.bfloat16) for name, shape in
               shapes.items()}, str(path / "model.safetensors"))
    (path / "config.json").write_text(json.dumps({"tie_word_embeddings": tied}))
    return path


def test_weight_bytes_count_tied_embeddings_once_as_the_lm_head() -> None:
    # embedding 10x4 = 40, one projection 4x4 = 16, a norm 4: all read once at 2 bytes.
    counts = {"model.embed_tokens.weight": 40, "model.layers.0.proj.weight": 16,
              "model.norm.weight": 4}
    assert weight_bytes_per_step(counts, 2, tied=True) == (40 + 16 + 4) * 2  # 120
    assert weight_bytes_per_step(counts, 4, tied=True) == (40 + 16 + 4) * 4
    # A stored copy of a tied lm_head is not read a second time.
    assert weight_bytes_per_step({**counts, "lm_head.weight": 40}, 2, tied=True) == 120
    with pytest.raises(ValueError, match=r"untied embeddings but the checkpoint holds no "
                                         r"lm_head\.weight"):
        weight_bytes_per_step(counts, 2, tied=False)
    with pytest.raises(ValueError, match="dtype_bytes=0 must be positive"):
        weight_bytes_per_step(counts, 0, tied=True)


def test_weight_bytes_untied_count_the_lm_head_not_the_embedding_gather() -> None:
    counts = {"model.embed_tokens.weight": 40, "model.layers.0.proj.weight": 16,
              "model.norm.weight": 4, "lm_head.weight": 24}
    assert weight_bytes_per_step(counts, 2, tied=False) == (16 + 4 + 24) * 2  # 88
    with pytest.raises(ValueError, match=r"^tied embeddings but the checkpoint holds no "
                                         r"embed_tokens\.weight"):
        weight_bytes_per_step({"lm_head.weight": 24}, 2, tied=True)


def test_checkpoint_weight_bytes_read_the_safetensors_headers(tmp_path: Path) -> None:
    shapes = {"model.embed_tokens.weight": (10, 4), "model.layers.0.proj.weight": (4, 4),
              "model.norm.weight": (4,)}
    tied = _save_checkpoint(tmp_path / "tied", shapes, tied=True)
    assert tensor_elements(tied) == {"model.embed_tokens.weight": 40,
                                     "model.layers.0.proj.weight": 16, "model.norm.weight": 4}
    assert checkpoint_weight_bytes(tied, 2) == 120
    # No lm_head in the checkpoint: tied whatever the config says (vLLM reuses the embedding).
    no_head = _save_checkpoint(tmp_path / "no-head", shapes, tied=False)
    assert checkpoint_weight_bytes(no_head, 2) == 120
    untied = _save_checkpoint(tmp_path / "untied", {**shapes, "lm_head.weight": (10, 4)},
                              tied=False)
    assert checkpoint_weight_bytes(untied, 2) == (16 + 4 + 40) * 2
    with pytest.raises(FileNotFoundError, match=r"holds no \*\.safetensors file"):
        tensor_elements(tmp_path)


def test_ceiling_is_bandwidth_over_weight_bytes() -> None:
    assert ceiling_tokens_per_s(20e9, 250_000_000) == 80.0
    with pytest.raises(ValueError, match="weight_bytes=0 must be positive"):
        ceiling_tokens_per_s(20e9, 0)
    bandwidth = Bandwidth(samples=[4.0, 1.0, 3.0, 2.0, 5.0])
    assert bandwidth.median() == 3.0 and bandwidth.quartiles() == (2.0, 4.0)
    assert Bandwidth(samples=[7.0]).quartiles() == (7.0, 7.0)


def _real_runs(on_rate: float, on_warm: float) -> dict[str, EngineRun]:
    def run(label: str, rate: float, warm: float) -> EngineRun:
        return EngineRun(label, startup_s=100.0, warm_startup_s=warm,
                         batch_rates=[rate, rate], single_rates=[rate / 4, rate / 4],
                         peak_rss_mib=2000.0, tokens=[[1]])
    return {"stock": run("stock", 100.0, 80.0), "fusion on": run("fusion on", on_rate, on_warm),
            "fusion off": run("fusion off", 100.0, 50.0)}


def test_real_table_rows_give_the_ceiling_fraction_and_warm_ready() -> None:
    # 20 GB/s over 250 MB per step: 80 tokens/s ceiling; fusion on single = 110 / 4 = 27.5.
    bandwidth = Bandwidth(samples=[20e9])
    table = real_table("m", REAL_QUICK, _real_runs(110.0, 48.0), 250_000_000, bandwidth)
    on = dict(zip(table.columns[:9], table.rows[1][:9], strict=True))
    assert table.rows[1][0] == "fusion on"
    assert table.rows[1][3] == 27.5 and table.rows[1][5] == round(27.5 / 80, 3)  # 0.344
    assert table.rows[0][5] == round(25.0 / 80, 3)  # stock single 25: 0.312
    assert on["ready warm s"] == 48.0 and on["warm vs stock"] == 0.6
    assert table.rows[1][2] == 1.1 and table.rows[1][4] == 1.1
    assert any("250.0 MB of weights" in n and "20.00 GB/s" in n and "= 80.0 tokens/s" in n
               for n in table.notes)
    targets = next(n for n in table.notes if n.startswith("Targets (reported)"))
    assert "NOT MET" not in targets  # 1.1x speed and 0.6x warm ready: at the boundary, met
    fusion = next(n for n in table.notes if n.startswith("fusion on / off"))
    assert "batch 1.100x" in fusion and "engine ready warm 0.960x" in fusion  # 48 / 50


@pytest.mark.parametrize(
    ("on_rate", "on_warm", "missed"),
    [(109.9, 48.0, ["batch on/stock", "single on/stock"]),
     (110.0, 48.1, ["warm ready on/stock"])],
)
def test_real_targets_miss_just_past_their_boundary(on_rate: float, on_warm: float,
                                                     missed: list[str]) -> None:
    table = real_table("m", REAL_QUICK, _real_runs(on_rate, on_warm), 250_000_000,
                       Bandwidth(samples=[20e9]))
    targets = next(n for n in table.notes if n.startswith("Targets (reported)"))
    assert targets.count("NOT MET") == len(missed)
    for name in missed:
        assert f"{name} NOT MET" in targets


def test_real_table_without_fusion_off_leaves_the_on_off_note_out() -> None:
    runs = _real_runs(110.0, 48.0)
    del runs["fusion off"]
    table = real_table("m", REAL_QUICK, runs, 250_000_000, Bandwidth(samples=[20e9]))
    assert [row[0] for row in table.rows] == ["stock", "fusion on"]
    assert not any(n.startswith("fusion on / off") for n in table.notes)


def test_pass_sites_name_the_passes_that_rewrote() -> None:
    assert pass_sites({"qknorm_rope": 0, "kv_cache_attention": 1, "muls_add": 2}) == (
        "kv_cache_attention 1, muls_add 2")
    assert pass_sites({"qknorm_rope": 0}) == "none" and pass_sites({}) == "none"
