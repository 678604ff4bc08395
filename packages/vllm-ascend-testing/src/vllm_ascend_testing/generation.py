"""Greedy generation with an in-process `vllm.LLM`, for the LLM worker and the benchmarks.

Callers own their process and set the engine environment
(`vllm_ascend.entrypoints.local_engine.engine_env`) before the first `import vllm`; the engine's
arguments come from `vllm_ascend.entrypoints.local_engine.llm_kwargs`.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any


def generate(
    llm: Any,
    prompts: Sequence[str | Sequence[int]],
    *,
    max_tokens: int = 16,
    logprobs: int | None = None,
    extra_args: dict[str, Any] | None = None,
) -> tuple[list[dict[str, Any]], float]:
    """Greedy generation of exactly `max_tokens` per prompt (EOS ignored); a prompt is a
    text or its token ids.

    `extra_args` become the requests' `SamplingParams.extra_args` (read by logits processors).
    Returns one `{"prompt", "text", "token_ids", "logprobs"}` per prompt (`logprobs` is the
    chosen token's log-probability at each step, or None) and the wall time in seconds.
    """
    from vllm import SamplingParams

    params = SamplingParams(
        temperature=0.0, max_tokens=max_tokens, ignore_eos=True, logprobs=logprobs,
        extra_args=extra_args,
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
