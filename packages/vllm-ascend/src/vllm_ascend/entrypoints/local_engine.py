"""An in-process vLLM engine on this host: its environment and `vllm.LLM` arguments."""

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
    """A full environment (a copy of `base`, default `os.environ`) for a vLLM run.

    `device` -> `VLLM_ASCEND_DEVICE`; `cache_root` -> `VLLM_CACHE_ROOT` and inductor's cache
    (fresh: a cold compile); `plugins` -> `VLLM_PLUGINS`; `roots` checks the bytecode folder.
    """
    # PYTHONPYCACHEPREFIX is checked as a root: bytecode is code, so a refused folder is replaced.
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
    """The `additional_config` for a run: fusion, batch invariance, log directory, `extra` keys."""
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

    `compile=False` runs eagerly; `kv_cache_mib` None: the platform's default; `log_dir`: the
    plugin's log files; `max_num_batched_tokens` None: vLLM's default.
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
