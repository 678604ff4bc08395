"""An in-process vLLM engine on this host (the demo's; the tests and benchmarks use it too).

`engine_env` is the environment for it (in-process, offline, small memory), returned as a
mapping: callers decide where it goes (a child process's env, or `os.environ` of a process they
own, before `vllm` is imported). `llm_kwargs` are the `vllm.LLM` arguments for the host-CPU
platform with the Ascend fusion passes on or off.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from vllm_ascend.base.trusted_roots import TrustedRoots

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
    roots: TrustedRoots | None = None,
) -> dict[str, str]:
    """Return a full environment (a copy of `base`, default `os.environ`) for a vLLM run.

    `device` becomes `VLLM_ASCEND_DEVICE` ("auto", "npu" or "cpu"); `cache_root` becomes
    `VLLM_CACHE_ROOT` and holds inductor's cache too (`TORCHINDUCTOR_CACHE_DIR`), so a fresh
    directory means a cold compile cache and the passes run;
    `plugins` becomes `VLLM_PLUGINS` when given (comma-separated entry-point names).
    `PYTHONPYCACHEPREFIX` (the caller's, else the user's cache's) is the bytecode folder
    `roots` (default: a fresh `TrustedRoots`) checked: bytecode is code, so a refused folder
    is replaced by a private one or dropped (`TrustedRoots.bytecode_prefix`).
    """
    allowed = ("auto", "npu", "cpu")
    if device not in allowed:
        raise ValueError(f"device={device!r} is not allowed; allowed: {', '.join(allowed)}")
    env = dict(os.environ if base is None else base)
    for name in _DROPPED:
        env.pop(name, None)
    # In the user's cache (the stand-in home's when there is no home) unless the caller set one.
    prefix = (TrustedRoots() if roots is None else roots).bytecode_prefix(env)
    if prefix is None:
        env.pop("PYTHONPYCACHEPREFIX", None)
    else:
        env["PYTHONPYCACHEPREFIX"] = str(prefix)
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


# The Ascend pass switches (ascend_config's `ascend_compilation_config` keys).
FUSION_SWITCHES: Final = (
    "fuse_norm_quant", "fuse_qknorm_rope", "fuse_muls_add", "fuse_kv_cache_attention",
)


def additional_config(
    *,
    fusion: bool = True,
    batch_invariant: bool = False,
    log_dir: str | None = None,
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The `additional_config` for a run: fusion passes and batch invariance on or off, the
    directory of the plugin's log files (default: the plugin's own), then `extra` keys."""
    config: dict[str, Any] = {"ascend_compilation_config": dict.fromkeys(FUSION_SWITCHES, fusion)}
    if batch_invariant:
        config["rl_config"] = {"enabled": True, "enable_batch_invariant": True}
    if log_dir is not None:
        config["ascend_log_path"] = log_dir
    config.update(extra or {})
    return config


def llm_kwargs(
    model: str,
    *,
    fusion: bool = True,
    compile: bool = True,
    batch_invariant: bool = False,
    dtype: str = "float32",
    max_model_len: int = 512,
    max_num_seqs: int = 8,
    seed: int = 0,
    kv_cache_mib: int | None = 64,
    log_dir: str | None = None,
    max_num_batched_tokens: int | None = None,
) -> dict[str, Any]:
    """Keyword arguments for `vllm.LLM` on the host-CPU platform.

    `compile=False` runs eagerly (fast start-up; the fusion passes do not run).
    `kv_cache_mib` is the KV cache size (the tiny models need a few MiB; None: the host-CPU
    platform's default, what the run needs bounded by the free memory); `log_dir` is where the
    plugin writes its log files; `max_num_batched_tokens` bounds a step's tokens (None: vLLM's
    default, 4096 on the CPU), and with it the warm-up's dummy batch.
    """
    kwargs: dict[str, Any] = {
        "model": model,
        "dtype": dtype,
        "max_model_len": max_model_len,
        "max_num_seqs": max_num_seqs,
        "enforce_eager": not compile,
        "seed": seed,
        "additional_config": additional_config(
            fusion=fusion, batch_invariant=batch_invariant, log_dir=log_dir
        ),
    }
    if kv_cache_mib is not None:
        kwargs["kv_cache_memory_bytes"] = kv_cache_mib * 1024 * 1024
    if max_num_batched_tokens is not None:
        kwargs["max_num_batched_tokens"] = max_num_batched_tokens
    return kwargs
