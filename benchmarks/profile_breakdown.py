"""The ``profile`` benchmark's breakdown of one profiled generation into categories.

The engine's worker (``op_profile`` of ``vllm_ascend_testing.llm_worker``) returns, per chain of
op names (the op, then its ancestors), the summed self CPU time and the call count;
:func:`breakdown` puts each chain in one category (see :func:`category`) and gives milliseconds
per engine step, plus the calls per step of the ops worth naming.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

# Category of an op by its name; a node inherits the category of its nearest categorised
# ancestor, so e.g. the aten ops a Python reference kernel calls count as that kernel's time.
LINEAR = ("_C::onednn_mm", "aten::mm", "aten::addmm", "aten::linear", "aten::matmul")
ATTENTION = ("vllm::unified_attention_with_output", "vllm::unified_kv_cache_update",
             "vllm_ascend::attention_with_kv_update",
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


def breakdown(ops: Iterable[Sequence[Any]], steps: int) -> dict[str, Any]:
    """Self time per category in ms per step, and calls per step of the ascend/linear ops and
    the compiled graphs; ``ops`` holds ``(chain of names, self us, calls)`` triples."""
    totals = dict.fromkeys(CATEGORIES, 0.0)
    calls: dict[str, float] = {}
    for chain, self_us, count in ops:
        totals[category(chain)] += self_us / 1000.0
        name = chain[0]
        if name.startswith("ascend::") or name in LINEAR or name.startswith(GRAPH):
            calls[name] = calls.get(name, 0) + count
    return {
        "ms_per_step": {name: value / steps for name, value in totals.items()},
        "calls_per_step": {name: count / steps for name, count in sorted(calls.items())},
    }
