"""The NPU graphs' memory and the KV cache it leaves, with vLLM's default capture sizes.

SmolLM2-135M-Instruct (bfloat16) starts on the NPU runtime over emulated NPUs in the default
graph mode (FULL_AND_PIECEWISE) with vLLM's default capture sizes (no
``cudagraph_capture_sizes``, no ``--max-num-seqs``). The worker's log gives what the runtime
took from the KV cache's share for the graphs before sizing it (the per-token estimate), vLLM's
own extrapolation (each further graph as large as the second), what the captures held, and the
KV blocks. The blocks vLLM's extrapolation would have left are the share less that figure, in
blocks of the same size. Also: the engine-ready seconds (start-up with default sizes).
Target: KV blocks with the runtime's estimate >= 1.5x those with vLLM's extrapolation.
``--tp N`` runs N ranks on N emulated NPUs (a rank count whose graph mode is NONE reports no
graph memory). ``--quick``: capture sizes 1, 2, 4, 8 only.
"""

from __future__ import annotations

import re
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.table import Table

TARGET = 1.5
DTYPE = "bfloat16"
QUICK_SIZES = [1, 2, 4, 8]
_SHARE = re.compile(r"taken from the KV cache's share of (\d+) bytes")
_REPORT = re.compile(
    r"the captures hold .* \((\d+) bytes\); estimated before the KV cache was sized: .* "
    r"\((\d+) bytes; vLLM's extrapolation .*, (\d+) bytes\); the KV cache has (\d+) blocks "
    r"of (\d+) bytes")
_MODE = re.compile(r"NPU graphs: cudagraph_mode (\w+), capture sizes \[([\d, ]*)\]")

GIB = float(1 << 30)


def parse_log(text: str) -> dict[str, Any] | None:
    """The first rank's graph-memory figures in a worker log (bytes and blocks), or None when
    the engine captured no graphs."""
    share, report, mode = _SHARE.search(text), _REPORT.search(text), _MODE.search(text)
    if share is None or report is None:
        return None
    measured, estimate, vllm_estimate, blocks, block_bytes = map(int, report.groups())
    kv_share = int(share.group(1))
    return {"mode": mode.group(1) if mode else "?",
            "sizes": len(mode.group(2).split(",")) if mode else 0,
            "measured": measured, "estimate": estimate, "vllm_estimate": vllm_estimate,
            "blocks": blocks, "block_bytes": block_bytes,
            "vllm_blocks": max(kv_share - vllm_estimate, 0) // block_bytes}


def run(quick: bool = False, model_dir: str | Path | None = None,
        tp: int | None = None) -> list[Table]:
    """One table row per rank count (``tp``, default 1)."""
    from vllm_ascend.checkpoints import smollm2_checkpoint
    from vllm_ascend.entrypoints.local_engine import engine_env, llm_kwargs
    from vllm_ascend_testing.worker_client import LLMWorker

    model = str(model_dir or smollm2_checkpoint())
    ranks = tp or 1
    rows: list[list[Any]] = []
    notes: list[str] = []
    with tempfile.TemporaryDirectory(prefix="bench-graph-memory-") as tmp:
        root = Path(tmp)
        env = engine_env(device="npu", cache_root=root / "cache")
        env["VLLM_ASCEND_EMULATED_NPUS"] = str(ranks)
        log_path = root / "graph-memory.log"
        with LLMWorker(env, log_path) as worker:
            kwargs = llm_kwargs(model, compile=True, dtype=DTYPE, max_model_len=512,
                                kv_cache_mib=None)
            kwargs.pop("max_num_seqs", None)  # vLLM's default, and so its default sizes
            kwargs["tensor_parallel_size"] = ranks
            if quick:
                kwargs["compilation_config"] = {"cudagraph_capture_sizes": QUICK_SIZES}
            loaded = worker.request("load", name="g", kwargs=kwargs, timeout=3600)
            answer = worker.request("generate", name="g", prompts=["The sea is"], max_tokens=4)
            worker.request("unload", name="g")
        found = parse_log(log_path.read_text(errors="replace"))
    startup = round(float(loaded["startup_s"]), 1)
    if found is None:
        rows.append([ranks, "NONE", 0, "-", "-", "-", "-", "-", "-", startup])
        notes.append(f"TP={ranks}: no graphs captured (graph mode NONE): no graph memory")
    else:
        ratio = found["blocks"] / max(found["vllm_blocks"], 1)
        rows.append([ranks, found["mode"], found["sizes"],
                     round(found["vllm_estimate"] / GIB, 2), round(found["estimate"] / GIB, 2),
                     round(found["measured"] / GIB, 2), found["vllm_blocks"], found["blocks"],
                     round(ratio, 2), startup])
        notes.append(f"target: KV blocks >= {TARGET}x those with vLLM's extrapolation; "
                     f"{ratio:.2f}x: {'met' if ratio >= TARGET else 'missed'}")
    notes.append(f"answered: {answer['outputs'][0]['token_ids']!r}")
    return [Table(
        f"Graph memory and KV blocks, default capture sizes (SmolLM2-135M {DTYPE}, emulated NPU)",
        ["TP", "graph mode", "sizes", "vLLM estimate GiB", "estimate GiB", "measured GiB",
         "KV blocks (vLLM estimate)", "KV blocks", "ratio", "start-up s"],
        rows, notes)]
