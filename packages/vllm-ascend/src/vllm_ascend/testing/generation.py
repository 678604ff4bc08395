"""In-process `vllm.LLM` runs shared by the demo, the LLM worker and the benchmarks.

Callers own their process and set the engine environment (see `engine_env`) before the first
`import vllm`; these functions only build engines and run them.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any, Final

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
) -> dict[str, Any]:
    """Keyword arguments for `vllm.LLM` on the host-CPU platform.

    `compile=False` runs eagerly (fast start-up; the fusion passes do not run).
    `kv_cache_mib` is the KV cache size (the tiny models need a few MiB; None: the host-CPU
    platform's default, what the run needs bounded by the free memory); `log_dir` is where the
    plugin writes its log files.
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
    return kwargs


def generate(
    llm: Any,
    prompts: Sequence[str | Sequence[int]],
    *,
    max_tokens: int = 16,
    logprobs: int | None = None,
) -> tuple[list[dict[str, Any]], float]:
    """Greedy generation of exactly `max_tokens` per prompt (EOS ignored); a prompt is a
    text or its token ids.

    Returns one `{"prompt", "text", "token_ids", "logprobs"}` per prompt (`logprobs` is the
    chosen token's log-probability at each step, or None) and the wall time in seconds.
    """
    from vllm import SamplingParams

    params = SamplingParams(
        temperature=0.0, max_tokens=max_tokens, ignore_eos=True, logprobs=logprobs
    )
    start = time.perf_counter()
    requests = [p if isinstance(p, str) else {"prompt_token_ids": [int(t) for t in p]}
                for p in prompts]
    results = llm.generate(requests, params, use_tqdm=False)
    elapsed = time.perf_counter() - start
    outputs = []
    for prompt, result in zip(prompts, results, strict=True):
        completion = result.outputs[0]
        token_ids = [int(t) for t in completion.token_ids]
        chosen: list[float] | None = None
        if completion.logprobs is not None:
            chosen = [
                float(step[token].logprob)
                for step, token in zip(completion.logprobs, token_ids, strict=True)
            ]
        outputs.append(
            {"prompt": prompt, "text": completion.text, "token_ids": token_ids, "logprobs": chosen}
        )
    return outputs, elapsed
