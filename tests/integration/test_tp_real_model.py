"""Tensor parallelism on the real SmolLM2 checkpoint (float32, eager): the ranks together give
the single rank's greedy tokens.

SmolLM2-135M has 9 query heads and 3 KV heads, so the sizes vLLM accepts are 1 and 3 (it
refuses 2: the heads must divide evenly); TP=3 is the many-rank run this model allows.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from vllm_ascend.entrypoints.local_engine import llm_kwargs
from vllm_ascend_testing.worker_client import LLMWorker, WorkerError

QUESTIONS = ("What is the capital of France?", "How many days are in a week?",
             "Write one sentence about the sea.")
MAX_TOKENS = 8

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


def _chat_prompts(model: Path) -> list[str]:
    """The questions rendered by the checkpoint's chat template (transformers' own)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(model))
    return [tokenizer.apply_chat_template([{"role": "user", "content": q}], tokenize=False,
                                          add_generation_prompt=True) for q in QUESTIONS]


def _greedy(worker: LLMWorker, name: str, kwargs: dict[str, Any],
            prompts: list[str]) -> list[list[int]]:
    try:
        worker.request("load", name=name, kwargs=kwargs, timeout=800)
        answer = worker.request("generate", name=name, prompts=prompts, max_tokens=MAX_TOKENS,
                                timeout=300)
    finally:
        worker.close()
    return [o["token_ids"] for o in answer["outputs"]]


def test_smollm2_tp3_gives_the_greedy_tokens_of_tp1(
    smollm2_dir: Path, start_worker: Callable[..., LLMWorker], ascend_log_dir: str,
) -> None:
    prompts = _chat_prompts(smollm2_dir)
    runs = {}
    for tp in (1, 3):
        kwargs = llm_kwargs(str(smollm2_dir), compile=False, max_num_seqs=len(prompts),
                            log_dir=ascend_log_dir)
        kwargs["tensor_parallel_size"] = tp
        # vLLM's automatic OpenMP binding wants a NUMA node per rank (this host has one) and
        # the plugin's plan needs a CPU per rank: the three ranks share the host's CPUs.
        env = {"VLLM_CPU_OMP_THREADS_BIND": "nobind"} if tp > 1 else {}
        runs[tp] = (start_worker(f"smollm2-tp{tp}", device="cpu", shared_inductor=True,
                                 **env), kwargs)
    # Both engines at once: each start is mostly loading, on its own processes.
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {tp: pool.submit(_greedy, worker, f"smollm2-tp{tp}", kwargs, prompts)
                   for tp, (worker, kwargs) in runs.items()}
        tokens = {tp: future.result() for tp, future in futures.items()}
    assert all(len(t) == MAX_TOKENS for t in tokens[1])
    assert tokens[3] == tokens[1]


def test_smollm2_tp2_is_refused_with_vllms_head_count_rule(
    smollm2_dir: Path, start_worker: Callable[..., LLMWorker], ascend_log_dir: str,
) -> None:
    kwargs = llm_kwargs(str(smollm2_dir), compile=False, log_dir=ascend_log_dir)
    kwargs["tensor_parallel_size"] = 2
    worker = start_worker("smollm2-tp2", device="cpu", shared_inductor=True)
    with pytest.raises(WorkerError, match=r"attention heads \(9\) must be divisible by tensor "
                                          r"parallel size \(2\)"):
        _greedy(worker, "smollm2-tp2", kwargs, ["Hello"])
