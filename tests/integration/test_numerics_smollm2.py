"""Numerics of the real model (SmolLM2-135M-Instruct) against independent references.

bf16: a fixed public-domain text (``benchmarks/data/pride_and_prejudice_ch1.txt``, 1,470
tokens) scored teacher-forced (``prompt_logprobs``) by three compiled engines: stock vLLM for
CPU with no plugin, the plugin with its fusion passes on, and off. Reference: transformers in
float32. The plugin with fusion on must be at least as close to the reference as stock vLLM and
as the plugin with fusion off (mean |delta logprob| no larger, top-1 agreement no smaller):
fusion makes numerics no worse; it need not give the unfused graph's bf16 bits.

float32: 16 chat prompts x 32 greedy tokens from the plugin's compiled engine with fusion on
equal, token for token, transformers' float32 greedy tokens (fusion on and off giving the same
tokens is test_fusion_e2e's, on the tiny models).

Each engine runs in its own worker process with a fresh compile cache, two at a time (one
inductor compile thread each on the 2-core host), started once per module.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from vllm_ascend.entrypoints.local_engine import llm_kwargs
from vllm_ascend_testing.teacher_forced import (
    Closeness,
    TokenScores,
    compare,
    reference_scores,
)
from vllm_ascend_testing.worker_client import LLMWorker

TEXT = Path(__file__).parents[2] / "benchmarks" / "data" / "pride_and_prejudice_ch1.txt"
MAX_MODEL_LEN = 2048
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

pytestmark = [pytest.mark.slow, pytest.mark.timeout(2400)]

# Engine label -> (make_env keyword arguments, fusion, dtype).
BF16_ENGINES: dict[str, tuple[dict[str, Any], bool]] = {
    "stock": ({"device": "auto", "plugins": "none"}, False),
    "fusion on": ({"device": "cpu"}, True),
    "fusion off": ({"device": "cpu"}, False),
}


def _run_engine(start: Callable[..., LLMWorker], model: Path, log_dir: str, label: str,
                env_kw: dict[str, Any], fusion: bool, dtype: str,
                request: Callable[[LLMWorker, str], dict[str, Any]]) -> dict[str, Any]:
    slug = f"{label.replace(' ', '-')}-{dtype}"
    worker = start(slug, **env_kw)
    kwargs = llm_kwargs(str(model), fusion=fusion, dtype=dtype, max_model_len=MAX_MODEL_LEN,
                        max_num_seqs=16, kv_cache_mib=256, log_dir=log_dir)
    try:
        worker.request("load", name=slug, kwargs=kwargs, timeout=1800)
        return request(worker, slug)
    finally:
        worker.close()


@pytest.fixture(scope="module")
def text_ids(smollm2_dir: Path) -> list[int]:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(smollm2_dir))
    ids = tokenizer(TEXT.read_text(encoding="utf-8"), add_special_tokens=False)["input_ids"]
    return [int(t) for t in ids]


@pytest.fixture(scope="module")
def chat_ids(smollm2_dir: Path) -> list[list[int]]:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(smollm2_dir))
    return [[int(t) for t in tokenizer.apply_chat_template(
        [{"role": "user", "content": question}], add_generation_prompt=True, tokenize=True,
        return_dict=True)["input_ids"]] for question in CHAT_QUESTIONS]


@pytest.fixture(scope="module")
def engine_results(
    smollm2_dir: Path, start_worker: Callable[..., LLMWorker], ascend_log_dir: str,
    text_ids: list[int], chat_ids: list[list[int]],
) -> Iterator[dict[tuple[str, str], dict[str, Any]]]:
    """Per (label, dtype): the bf16 engines' teacher-forced scores of the text, the float32
    plugin engines' greedy tokens of the chat prompts. Two engines at a time."""

    def scores(worker: LLMWorker, name: str) -> dict[str, Any]:
        return worker.request("prompt_logprobs", name=name, token_ids=text_ids, timeout=1800)

    def greedy(worker: LLMWorker, name: str) -> dict[str, Any]:
        return worker.request("generate", name=name, prompts=chat_ids,
                              max_tokens=GREEDY_TOKENS, timeout=1800)

    jobs: dict[tuple[str, str], tuple[Any, ...]] = {
        (label, "bfloat16"): (label, env_kw, fusion, "bfloat16", scores)
        for label, (env_kw, fusion) in BF16_ENGINES.items()
    }
    jobs[("fusion on", "float32")] = ("fusion on", {"device": "cpu"}, True, "float32", greedy)
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {key: pool.submit(_run_engine, start_worker, smollm2_dir, ascend_log_dir,
                                    *job) for key, job in jobs.items()}
        yield {key: future.result() for key, future in futures.items()}


@pytest.fixture(scope="module")
def closeness(engine_results: dict[tuple[str, str], dict[str, Any]], smollm2_dir: Path,
              text_ids: list[int]) -> dict[str, Closeness]:
    reference = reference_scores(smollm2_dir, text_ids)
    return {label: compare(TokenScores(engine_results[(label, "bfloat16")]["chosen"],
                                       engine_results[(label, "bfloat16")]["top1"]), reference)
            for label in BF16_ENGINES}


def test_the_text_is_long_enough_and_scored_at_every_position(closeness, text_ids) -> None:
    assert len(text_ids) >= 1000
    assert {c.positions for c in closeness.values()} == {len(text_ids) - 1}


def _report(closeness: dict[str, Closeness]) -> str:
    return "; ".join(f"{label}: mean |delta| {c.mean_abs_delta:.4f}, top-1 "
                     f"{100 * c.top1_agreement:.2f}%" for label, c in closeness.items())


def test_bf16_fusion_on_is_at_least_as_close_to_float32_as_stock_vllm(closeness) -> None:
    on, stock = closeness["fusion on"], closeness["stock"]
    assert on.mean_abs_delta <= stock.mean_abs_delta, _report(closeness)
    assert on.top1_agreement >= stock.top1_agreement, _report(closeness)


def test_bf16_fusion_on_is_at_least_as_close_to_float32_as_fusion_off(closeness) -> None:
    on, off = closeness["fusion on"], closeness["fusion off"]
    assert on.mean_abs_delta <= off.mean_abs_delta, _report(closeness)
    assert on.top1_agreement >= off.top1_agreement, _report(closeness)


def test_float32_fusion_on_gives_transformers_greedy_tokens(
    engine_results, smollm2_dir: Path, chat_ids: list[list[int]]
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
    on = [o["token_ids"] for o in engine_results[("fusion on", "float32")]["outputs"]]
    assert on == reference
