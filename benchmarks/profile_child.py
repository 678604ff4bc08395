"""Child process of the ``profile`` benchmark: one engine, profiled windows on request.

Run as ``python -m benchmarks.profile_child REQUEST_JSON`` with the engine's environment
already set by the parent (``bench_profile``). It builds a `vllm.LLM` in-process, warms it up
at both batch sizes and prints ``READY``. Then each line ``single`` or ``batch`` on its stdin
runs the torch profiler around one greedy generation of that workload, classifies every
profiled op's self time (see :func:`category`) and answers one ``WINDOW`` JSON line:
milliseconds per engine step in each category, op call counts and the window's wall time. The
parent asks its engines in turn, so every engine's windows share the host's weather.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterable
from typing import Any

# Category of an op by its name; a node inherits the category of its nearest categorised
# ancestor, so e.g. the aten ops a Python reference kernel calls count as that kernel's time.
LINEAR = ("_C::onednn_mm", "aten::mm", "aten::addmm", "aten::linear", "aten::matmul")
ATTENTION = ("vllm::unified_attention_with_output", "vllm::unified_kv_cache_update",
             "_C::cpu_attention_with_kv_cache", "_C::cpu_attn_reshape_and_cache")
GRAPH = "## Call CompiledFxGraph"
CATEGORIES = (
    "linear layers",
    "attention + KV cache",
    "MoE experts",
    "ascend ops: Python reference glue",
    "ascend ops: aten kernels inside",
    "inductor kernels + graph glue",
    "outside the model graph",
)


def category(names: Iterable[str]) -> str:
    """The category of an op given its name and its ancestors' names (innermost first)."""
    chain = list(names)
    for i, name in enumerate(chain):
        if name.startswith("ascend::"):
            return ("ascend ops: Python reference glue" if i == 0
                    else "ascend ops: aten kernels inside")
        if name in LINEAR:
            return "linear layers"
        if name in ATTENTION:
            return "attention + KV cache"
        if "moe" in name.lower() or "expert" in name.lower():
            return "MoE experts"
        if name.startswith(GRAPH):
            return "inductor kernels + graph glue"
    return "outside the model graph"


def _chain(event: Any) -> list[str]:
    names = []
    while event is not None:
        names.append(event.name)
        event = event.cpu_parent
    return names


def breakdown(events: Any, steps: int) -> dict[str, Any]:
    """Self time per category in ms per step, and calls per step of the ascend/linear ops."""
    totals = dict.fromkeys(CATEGORIES, 0.0)
    calls: dict[str, float] = {}
    for event in events:
        totals[category(_chain(event))] += event.self_cpu_time_total / 1000.0
        name = event.name
        if name.startswith("ascend::") or name in LINEAR or name.startswith(GRAPH):
            calls[event.name] = calls.get(event.name, 0) + 1
    return {
        "ms_per_step": {name: value / steps for name, value in totals.items()},
        "calls_per_step": {name: count / steps for name, count in sorted(calls.items())},
    }


def main(argv: list[str]) -> int:
    request = json.loads(argv[0])
    from torch.profiler import ProfilerActivity, profile
    from vllm import LLM, SamplingParams

    llm = LLM(**request["kwargs"])
    prompts: list[str] = request["prompts"]
    batches = {"single": prompts[:1], "batch": prompts}
    params = SamplingParams(temperature=0.0, max_tokens=request["max_tokens"], ignore_eos=True)
    for batch in batches.values():
        llm.generate(batch, params, use_tqdm=False)  # warm-up at this batch size
    print("READY", flush=True)
    for line in sys.stdin:
        workload = line.strip()
        if workload not in batches:
            raise SystemExit(f"profile_child: unknown workload {workload!r}; "
                             f"allowed: {', '.join(batches)}")
        start = time.perf_counter()
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            llm.generate(batches[workload], params, use_tqdm=False)
        wall_ms = (time.perf_counter() - start) * 1000.0 / request["max_tokens"]
        found = breakdown(prof.events(), request["max_tokens"])
        found["wall_ms_per_step"] = wall_ms
        print("WINDOW " + json.dumps(found), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
