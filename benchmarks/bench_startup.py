"""Start-up: the plugin hook vs ``import vllm``, then engine ready cold and warm by phase.

Part 1, the plugin hook, each statement in a fresh interpreter: measured inside the child
around the statement (interpreter start excluded): wall time, modules imported, and how many
of them are torch / vllm modules. Target for ``import vllm_ascend; vllm_ascend.register()``
(auto mode, no NPU): < 50 ms and no torch/vllm module.

Part 2, engine ready (``startup_engines``): stock vLLM CPU and the plugin, cold and warm (a
reused ``VLLM_CACHE_ROOT``), phases import / load / compile / warm-up, on the tiny models and the
real model SmolLM2-135M-Instruct. ``--quick``: the quick-size tiny qwen3 only, one repeat.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.table import Table

TARGET_MS = 50.0

_CHILD = """
import json, sys, time
before = set(sys.modules)
t = time.perf_counter()
{stmt}
ms = (time.perf_counter() - t) * 1000
new = set(sys.modules) - before
top = lambda m: m.split(".")[0]
print(json.dumps({{"ms": ms, "modules": len(new),
                   "torch": sum(top(m) == "torch" for m in new),
                   "vllm": sum(top(m) == "vllm" for m in new)}}))
"""

CASES = {
    "import vllm_ascend; vllm_ascend.register()":
        "import vllm_ascend\nresult = vllm_ascend.register()",
    "import vllm": "import vllm",
}


def _measure(stmt: str) -> dict[str, float]:
    env = dict(os.environ, VLLM_ASCEND_DEVICE="auto")
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.setdefault("PYTHONPYCACHEPREFIX", "/tmp/pycache")
    out = subprocess.run([sys.executable, "-c", _CHILD.format(stmt=stmt)], env=env,
                         capture_output=True, text=True, check=True, timeout=300)
    result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def run(quick: bool = False, model_dir: str | Path | None = None,
        models: list[str] | None = None, rounds: int | None = None) -> list[Table]:
    """The plugin hook's table, then the engine-ready tables (``engine_ready``)."""
    return [hook_table(quick), *engine_ready(quick, model_dir, models, rounds)]


def engine_ready(quick: bool, model_dir: str | Path | None = None,
                 models: list[str] | None = None, rounds: int | None = None) -> list[Table]:
    """Engine ready cold and warm by phase for ``models`` (names of ``bench_e2e.MODELS``;
    default all, quick: qwen3 alone) at the e2e sizes (quick: the quick size, 1 repeat; full:
    3 repeats; ``rounds``: that many repeats); the real model from ``model_dir`` or the
    plugin's SmolLM2 checkpoint."""
    from benchmarks.bench_e2e import ARCHES, FULL, MODELS, QUICK, REAL_MODEL, default_model_dir
    from benchmarks.startup_engines import measure_starts, startup_tables

    chosen = list(models) if models else (["qwen3"] if quick else list(MODELS))
    unknown = [name for name in chosen if name not in MODELS]
    if unknown:
        raise ValueError(f"models {unknown}: allowed are {', '.join(MODELS)}")
    size, repeats = (QUICK, 1) if quick else (FULL, 3)
    if rounds is not None:
        repeats = rounds
    real_dir = None
    if REAL_MODEL in chosen:  # first: a missing model package fails before any engine runs
        real_dir = Path(model_dir) if model_dir is not None else default_model_dir()
    starts = []
    with tempfile.TemporaryDirectory(prefix="bench-startup-") as tmp:
        for name in chosen:
            if name in ARCHES:
                from vllm_ascend.checkpoints.tiny_models import make_tiny_model

                model = make_tiny_model(
                    name, Path(tmp) / name, layers=size.layers, hidden=size.hidden,
                    heads=size.heads, kv_heads=size.kv_heads, head_dim=64, dtype="bfloat16")
            else:
                assert real_dir is not None
                model = real_dir
            starts += measure_starts(name, model, Path(tmp) / f"{name}-starts", repeats)
    return startup_tables(starts, repeats)


def hook_table(quick: bool) -> Table:
    """Median of N runs per case (N=3 quick, 7 full; ``import vllm`` 1 quick, 3 full)."""
    rows = []
    medians: dict[str, float] = {}
    for label, stmt in CASES.items():
        n = (3 if quick else 7) if "vllm_ascend" in label else (1 if quick else 3)
        runs = [_measure(stmt) for _ in range(n)]
        ms = statistics.median(r["ms"] for r in runs)
        medians[label] = ms
        last = runs[-1]
        rows.append([label, n, round(ms, 2), int(last["modules"]), int(last["torch"]),
                     int(last["vllm"])])
    plugin = rows[0]
    plugin_ms = medians[next(iter(CASES))]
    ratio = medians["import vllm"] / max(plugin_ms, 1e-6)
    verdict = "PASS" if plugin_ms < TARGET_MS and plugin[4] == 0 and plugin[5] == 0 else "FAIL"
    notes = [
        f"target: register() < {TARGET_MS:.0f} ms with 0 torch / 0 vllm modules -> {verdict}",
        f"import vllm costs {ratio:.0f}x the plugin hook (medians, same run)",
        "time measured inside a fresh interpreter around the statement only",
    ]
    return Table("Plugin start-up (fresh interpreter, auto mode, no NPU)",
                 ["statement", "runs", "median ms", "modules", "torch modules",
                  "vllm modules"], rows, notes)
