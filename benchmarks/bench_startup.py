"""Start-up cost of the plugin hook vs ``import vllm``, each in a fresh interpreter.

Measured inside the child around the statement (interpreter start excluded): wall time,
modules imported, and how many of them are torch / vllm modules. Target for
``import vllm_ascend; vllm_ascend.register()`` (auto mode, no NPU): < 50 ms and no
torch/vllm module.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys

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
    return json.loads(out.stdout.strip().splitlines()[-1])


def run(quick: bool = False) -> list[Table]:
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
    ratio = medians["import vllm"] / max(plugin[2], 1e-6)
    verdict = "PASS" if plugin[2] < TARGET_MS and plugin[4] == 0 and plugin[5] == 0 else "FAIL"
    notes = [
        f"target: register() < {TARGET_MS:.0f} ms with 0 torch / 0 vllm modules -> {verdict}",
        f"import vllm costs {ratio:.0f}x the plugin hook (medians, same run)",
        "time measured inside a fresh interpreter around the statement only",
    ]
    return [Table("Plugin start-up (fresh interpreter, auto mode, no NPU)",
                  ["statement", "runs", "median ms", "modules", "torch modules",
                   "vllm modules"], rows, notes)]
