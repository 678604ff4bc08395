"""Batch invariance on the host-CPU platform: a prompt's result does not depend on its batch.

On this CPU, vLLM's fp32 linear layers call `_C.onednn_mm`, which aten-level overrides never
reach; the plugin routes them through ascend-kernels' batch-invariant `linear` itself, and the
kernel call counters show that it did.
"""

from __future__ import annotations

from typing import Any

import pytest
from vllm_ascend.testing.generation import llm_kwargs

PROMPTS = [
    "The capital of France is",
    "Hello, my name is",
    "Numbers: 0 1 2 3 4 5 6 7 8 9 10 100 1000. Punctuation",
    "Once upon a time there was a small model",
    "vLLM serves OpenAI compatible completions and chat completions over HTTP.",
    "A tiny model",
    "Attention, normalization, rotary position embedding, and mixture of experts layers.",
    "The quick brown fox",
]
TARGET = PROMPTS[3]
MAX_TOKENS = 16


@pytest.fixture(scope="module")
def invariant_worker(start_worker, tiny_models) -> Any:
    worker = start_worker("batch-invariant", device="cpu")
    kwargs = llm_kwargs(str(tiny_models.path("qwen3")), compile=False, batch_invariant=True)
    worker.request("load", name="bi", kwargs=kwargs, timeout=300)
    yield worker
    worker.close()


@pytest.mark.timeout(420)
def test_prompt_alone_and_in_a_batch_of_eight_give_identical_tokens_and_logprobs(
    invariant_worker,
) -> None:
    before = invariant_worker.request("call_counts", reset=True)
    assert before["enabled"], "batch-invariant mode is not enabled in the engine process"
    alone = invariant_worker.request(
        "generate", name="bi", prompts=[TARGET], max_tokens=MAX_TOKENS, logprobs=0
    )["outputs"][0]
    counts_alone = invariant_worker.request("call_counts", reset=True)["counts"]
    batch = invariant_worker.request(
        "generate", name="bi", prompts=PROMPTS, max_tokens=MAX_TOKENS, logprobs=0
    )["outputs"]
    counts_batch = invariant_worker.request("call_counts")["counts"]

    in_batch = batch[PROMPTS.index(TARGET)]
    assert len(alone["token_ids"]) == MAX_TOKENS
    assert in_batch["token_ids"] == alone["token_ids"]
    # Bitwise equal, not close: that is what batch invariance promises.
    assert in_batch["logprobs"] == alone["logprobs"]
    # The batch really held different prompts with different continuations.
    assert len({tuple(o["token_ids"]) for o in batch}) > 1

    # The batch-invariant kernels ran: every linear layer of every step went through them.
    assert sum(counts_alone.values()) > 0, counts_alone
    linear_calls = {k: v for k, v in counts_batch.items() if "linear" in k or "matmul" in k}
    assert sum(linear_calls.values()) > 0, counts_batch
