"""Where an engine step's time goes: stock vLLM CPU vs the host-CPU platform, by category.

Each engine of ``e2e_engines`` (fresh compile cache, its own worker process) runs the
end-to-end benchmark's dense model. All engines stay up and the torch profiler records their
single-stream and batched greedy generations in turn (``round_order``, as ``e2e`` times them),
so a slow spell of the shared host lands on every engine alike; each figure is the median over
an engine's windows. Every op's self time is put in one category (``profile_breakdown``:
linear layers, attention, the ascend ops' Python reference glue and the aten kernels it calls,
inductor's generated kernels with their graph glue, everything outside the model graph). The
table gives milliseconds per engine step; the profiler's own overhead inflates every column
alike, so compare engines, not absolutes.
"""

from __future__ import annotations

import statistics
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.bench_e2e import FULL, PROMPTS, QUICK, Size
from benchmarks.e2e_engines import Engine
from benchmarks.e2e_rounds import round_order
from benchmarks.profile_breakdown import CATEGORIES, breakdown
from benchmarks.table import Table

LABELS = ("stock", "fusion on", "fusion off")


WORKLOADS = ("single", "batch")


def window(engine: Engine, workload: str, max_tokens: int) -> dict[str, Any]:
    """One profiled greedy generation of ``workload`` ("single" or "batch") by ``engine``."""
    prompts = PROMPTS[:1] if workload == "single" else PROMPTS
    answer = engine.worker.request("profile", name="e2e", prompts=prompts,
                                   max_tokens=max_tokens, timeout=1800)
    found = breakdown(answer["ops"], max_tokens)
    found["wall_ms_per_step"] = float(answer["elapsed_s"]) * 1000.0 / max_tokens
    return found


def median_window(windows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per-figure medians over an engine's windows of one workload."""
    med = statistics.median
    return {
        "ms_per_step": {name: med([w["ms_per_step"][name] for w in windows])
                        for name in windows[0]["ms_per_step"]},
        "calls_per_step": {name: med([w["calls_per_step"].get(name, 0.0) for w in windows])
                           for name in sorted({n for w in windows for n in w["calls_per_step"]})},
        "wall_ms_per_step": med([w["wall_ms_per_step"] for w in windows]),
    }


def profile_interleaved(labels: tuple[str, ...], model: Path, root: Path, max_tokens: int,
                        rounds: int) -> dict[str, dict[str, Any]]:
    """Start each engine alone, then profile them in turn for ``rounds``; per engine and
    workload, the median window."""
    engines: list[Engine] = []
    try:
        for label in labels:
            engine = Engine(label, model, root, max_num_seqs=len(PROMPTS))
            engines.append(engine)
            engine.start()
            engine.generate(PROMPTS, max_tokens)  # warm-up at the batch size
        windows: dict[tuple[str, str], list[dict[str, Any]]] = {}
        for r in range(rounds):
            for workload in WORKLOADS:
                for engine in round_order(engines, r):
                    windows.setdefault((engine.run.label, workload), []).append(
                        window(engine, workload, max_tokens))
    finally:
        for engine in engines:
            engine.close()
    return {label: {workload: median_window(windows[label, workload])
                    for workload in WORKLOADS} for label in labels}


def profile_tables(size: Size, results: dict[str, dict[str, Any]]) -> list[Table]:
    """One table per workload: ms per step by category, per engine."""
    tables = []
    for workload in WORKLOADS:
        rows: list[list[Any]] = []
        for name in (*CATEGORIES, "wall time per step (profiled)"):
            row: list[Any] = [name]
            for label in results:
                found = results[label][workload]
                value = (found["wall_ms_per_step"] if name.startswith("wall")
                         else found["ms_per_step"][name])
                row.append(round(value, 3))
            rows.append(row)
        calls: list[str] = []
        for label, result in results.items():
            per_step = result[workload]["calls_per_step"]
            counts = ", ".join(f"{op} {n:g}" for op, n in per_step.items())
            calls.append(f"{label}: {counts}")
        notes = [
            f"{workload}: {'1 prompt' if workload == 'single' else f'{len(PROMPTS)} prompts'}, "
            f"{size.max_tokens} greedy tokens; {size.layers}-layer bf16 Qwen3-style model "
            f"(hidden {size.hidden}, {size.heads} heads / {size.kv_heads} KV heads).",
            "Medians over each engine's profiled windows; the engines were profiled in turn, "
            "window by window, so the host's slow spells fall on all of them alike.",
            "Self CPU time per category (ms per engine step); an op inherits its nearest "
            "categorised ancestor (the aten ops inside an ascend reference op count as that "
            "op). 'inductor kernels + graph glue' is the self time of the compiled graphs: "
            "their generated C++ kernels plus the Python wrapper code around them.",
            "Calls per step: " + " | ".join(calls),
        ]
        columns = ["category (ms / step)", *results]
        tables.append(Table(f"Profile of one engine step: {workload}", columns, rows, notes))
    return tables


def run(quick: bool = False) -> list[Table]:
    """Profile stock, fusion on and fusion off on the dense end-to-end model."""
    from vllm_ascend.checkpoints.tiny_models import make_tiny_model

    size = QUICK if quick else FULL
    with tempfile.TemporaryDirectory(prefix="bench-profile-") as tmp:
        root = Path(tmp)
        model = make_tiny_model(
            "qwen3", root / "qwen3", layers=size.layers, hidden=size.hidden, heads=size.heads,
            kv_heads=size.kv_heads, head_dim=64, dtype="bfloat16",
        )
        # quick (a smoke run of the code path): stock and fusion on only.
        labels = LABELS[:2] if quick else LABELS
        results = profile_interleaved(labels, model, root / "run", size.max_tokens,
                                      rounds=2 if quick else 12)
    return profile_tables(size, results)
