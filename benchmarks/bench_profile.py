"""Where an engine step's time goes: stock vLLM CPU vs the host-CPU platform, by category.

Each engine of ``e2e_engines`` (fresh compile cache) runs in its own child process
(``benchmarks.profile_child``) on the end-to-end benchmark's dense model; the torch profiler
records a single-stream and a batched greedy generation (least disturbed of a few windows) and
every op's self time is put in one category (linear layers, attention, the ascend ops' Python
reference glue and the aten kernels it calls, inductor's generated kernels with their graph
glue, everything outside the model graph). The table gives milliseconds per engine step; the
profiler's own overhead inflates every column alike, so compare engines, not absolutes.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.bench_e2e import FULL, PROMPTS, QUICK, Size
from benchmarks.e2e_engines import engine_setup
from benchmarks.profile_child import CATEGORIES
from benchmarks.table import Table

LABELS = ("stock", "fusion on", "fusion off")


def profile_engine(label: str, model: Path, root: Path, max_tokens: int, repeats: int
                   ) -> dict[str, Any]:
    """Run one engine's profile in a child process; its parsed JSON result."""
    env, kwargs = engine_setup(label, model, root, max_num_seqs=len(PROMPTS))
    request = {"kwargs": kwargs, "prompts": PROMPTS, "max_tokens": max_tokens,
               "repeats": repeats}
    log = root / f"profile-{label.replace(' ', '-')}.log"
    with log.open("w") as out:
        proc = subprocess.run(
            [sys.executable, "-m", "benchmarks.profile_child", json.dumps(request)],
            env=env, stdout=subprocess.PIPE, stderr=out, text=True, timeout=3600, check=False,
        )
    for line in proc.stdout.splitlines():
        if line.startswith("PROFILE "):
            result: dict[str, Any] = json.loads(line.removeprefix("PROFILE "))
            return result
    raise RuntimeError(f"profile of {label!r} failed (exit {proc.returncode}); log: {log}")


def profile_tables(size: Size, results: dict[str, dict[str, Any]]) -> list[Table]:
    """One table per workload: ms per step by category, per engine."""
    tables = []
    for workload in ("single", "batch"):
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
    from vllm_ascend.testing.tiny_models import make_tiny_model

    size = QUICK if quick else FULL
    with tempfile.TemporaryDirectory(prefix="bench-profile-") as tmp:
        root = Path(tmp)
        model = make_tiny_model(
            "qwen3", root / "qwen3", layers=size.layers, hidden=size.hidden, heads=size.heads,
            kv_heads=size.kv_heads, head_dim=64, dtype="bfloat16",
        )
        # quick (a smoke run of the code path): stock and fusion on only.
        labels = LABELS[:2] if quick else LABELS
        results = {label: profile_engine(label, model, root / "run", size.max_tokens,
                                         repeats=2 if quick else 3)
                   for label in labels}
    return profile_tables(size, results)
