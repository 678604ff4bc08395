"""Environment for running vLLM's engine on this host: in-process, offline, small memory.

The values are returned as a mapping; callers decide where they go (a child process's env, or
`os.environ` of a process they own, before `vllm` is imported).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Final

# Variables that make vLLM start faster or behave reproducibly in tests, demo and benchmarks.
_FIXED: Final[dict[str, str]] = {
    # The engine core runs in the calling process: fusion counts and kernel call counters
    # collected there are the ones the model's passes and kernels produced.
    "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
    # Inductor compiles in this process instead of a pool of worker processes: on a small
    # host the pool adds about 1 GiB per worker and no speed.
    "TORCHINDUCTOR_COMPILE_THREADS": "1",
}

# Dropped: bytecode writing makes vLLM imports 2-3x faster; the legacy KV-cache variable (whole
# GiB) would override the explicit `kv_cache_memory_bytes` that `llm_kwargs` passes.
_DROPPED: Final = ("PYTHONDONTWRITEBYTECODE", "VLLM_CPU_KVCACHE_SPACE")


def engine_env(
    *,
    device: str = "cpu",
    cache_root: str | Path | None = None,
    plugins: str | None = None,
    base: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """Return a full environment (a copy of `base`, default `os.environ`) for a vLLM run.

    `device` becomes `VLLM_ASCEND_DEVICE` ("auto", "npu" or "cpu"); `cache_root` becomes
    `VLLM_CACHE_ROOT` and holds inductor's cache too (`TORCHINDUCTOR_CACHE_DIR`), so a fresh
    directory means a cold compile cache and the passes run;
    `plugins` becomes `VLLM_PLUGINS` when given (comma-separated entry-point names).
    """
    allowed = ("auto", "npu", "cpu")
    if device not in allowed:
        raise ValueError(f"device={device!r} is not allowed; allowed: {', '.join(allowed)}")
    env = dict(os.environ if base is None else base)
    for name in _DROPPED:
        env.pop(name, None)
    env.setdefault("PYTHONPYCACHEPREFIX", str(Path.home() / ".cache" / "vllm-ascend-pycache"))
    env.update(_FIXED)
    env["VLLM_ASCEND_DEVICE"] = device
    if cache_root is not None:
        env["VLLM_CACHE_ROOT"] = str(cache_root)
        # vLLM's standalone inductor compile keeps inductor's FX-graph cache in inductor's own
        # directory (per user, shared by every run on the host): a hit there returns the
        # compiled graph without running the post-grad passes, so no fusion is counted and no
        # graph is dumped, although the graph served is the fused one.
        env["TORCHINDUCTOR_CACHE_DIR"] = str(Path(cache_root) / "inductor")
    if plugins is not None:
        env["VLLM_PLUGINS"] = plugins
    return env
