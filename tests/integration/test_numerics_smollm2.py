"""Numerics of the real model (SmolLM2-135M-Instruct) against transformers.

float32: 16 chat prompts x 32 greedy tokens from the plugin's compiled engine with fusion on
equal, token for token, transformers' float32 greedy tokens (fusion on and off giving the same
tokens is test_fusion_e2e's, on the tiny models). The engine runs in its own worker process with
a fresh compile cache.

bf16 closeness to float32 (a fixed text scored teacher-forced by stock vLLM and the plugin with
fusion on and off) is a measurement with targets: ``python -m benchmarks numerics``, its table
in ``benchmarks/README.md``. The bf16 error of each fused op is bounded by the op's own tests.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from vllm_ascend.entrypoints.local_engine import llm_kwargs
from vllm_ascend_testing.worker_client import LLMWorker

GREEDY_TOKENS = 32
CHAT_QUESTIONS = (
    "What is the capital of France?",
    "Name three primary colors.",
    "How many days are in a week?",
    "What is two plus two?",
    "Write a haiku about the sea.",
    "Who wrote Romeo and Juliet?",
    "What do bees make?",
    "Give me a synonym for happy.",
    "What is the boiling point of water in Celsius?",
    "Explain what a noun is in one sentence.",
    "What color is the sky on a clear day?",
    "List two fruits that are red.",
    "What is the largest planet in the solar system?",
    "Translate 'thank you' into French.",
    "Why do we need sleep?",
    "Suggest a name for a pet cat.",
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]


@pytest.fixture(scope="module")
def chat_ids(smollm2_dir: Path) -> list[list[int]]:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(smollm2_dir))
    return [[int(t) for t in tokenizer.apply_chat_template(
        [{"role": "user", "content": question}], add_generation_prompt=True, tokenize=True,
        return_dict=True)["input_ids"]] for question in CHAT_QUESTIONS]


@pytest.fixture(scope="module")
def engine_greedy(smollm2_dir: Path, start_worker: Callable[..., LLMWorker],
                  ascend_log_dir: str, chat_ids: list[list[int]]) -> dict[str, Any]:
    """The plugin's compiled float32 engine with fusion on: greedy tokens of the chat prompts."""
    worker = start_worker("fusion-on-float32", device="cpu")
    kwargs = llm_kwargs(str(smollm2_dir), fusion=True, dtype="float32", max_model_len=2048,
                        max_num_seqs=16, kv_cache_mib=256, log_dir=ascend_log_dir)
    try:
        worker.request("load", name="smollm2", kwargs=kwargs, timeout=900)
        return worker.request("generate", name="smollm2", prompts=chat_ids,
                              max_tokens=GREEDY_TOKENS, timeout=900)
    finally:
        worker.close()


def test_float32_fusion_on_gives_transformers_greedy_tokens(
    engine_greedy: dict[str, Any], smollm2_dir: Path, chat_ids: list[list[int]]
) -> None:
    import torch
    from transformers import AutoModelForCausalLM, GenerationConfig

    model = AutoModelForCausalLM.from_pretrained(
        str(smollm2_dir), dtype=torch.float32, attn_implementation="eager").eval()
    model.generation_config = GenerationConfig(
        do_sample=False, max_new_tokens=GREEDY_TOKENS, eos_token_id=None, pad_token_id=0)
    reference = []
    with torch.no_grad():
        for ids in chat_ids:
            out = model.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids),
                                                                               dtype=torch.long))
            reference.append(out[0, len(ids):].tolist())
    assert len(reference) >= 16 and all(len(t) == GREEDY_TOKENS for t in reference)
    on = [o["token_ids"] for o in engine_greedy["outputs"]]
    assert on == reference
