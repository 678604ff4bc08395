"""Batch invariance on the host-CPU platform: a prompt's result does not depend on its batch.

On this CPU, vLLM's fp32 linear layers call `_C.onednn_mm`, which aten-level overrides never
reach; the plugin routes them through ascend-kernels' batch-invariant `linear` itself, and the
kernel call counters show that it did. Checked eagerly, and compiled (Ascend compile backend,
every fusion pass on) with the prompt alone and inside batches of 2..16.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from vllm_ascend.entrypoints.local_engine import llm_kwargs
from vllm_ascend_testing.graph_dump import count_ops_in_dump, inductor_debug_env, transformed_graphs

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
def invariant_worker(start_worker, tiny_models, ascend_log_dir: str) -> Any:
    worker = start_worker("batch-invariant", device="cpu", shared_inductor=True)
    kwargs = llm_kwargs(
        str(tiny_models.path("qwen3")), compile=False, batch_invariant=True, log_dir=ascend_log_dir
    )
    worker.request("load", name="bi", kwargs=kwargs, timeout=300)
    yield worker
    worker.close()


# What each fusion pass leaves in the graph (fused op) and takes out of it (ops it replaces).
FUSED_OPS = {"qknorm_rope": "ascend.split_qkv_rmsnorm_rope",
             "kv_cache_attention": "vllm_ascend.attention_with_kv_update"}
REPLACED_OPS = ("ascend.rotary_embedding", "vllm.unified_kv_cache_update")


def _code_mentions(dump_dir: Path, op: str) -> int:
    """Mentions of ``torch.ops.<op>`` in the dumped graphs' code, comments left out: the KV
    update is wrapped in ``auto_functionalized(op, ...)``, so it is an argument, not a call."""
    needle = f"torch.ops.{op}."
    return sum(line.split("#", 1)[0].count(needle)
               for path in transformed_graphs(dump_dir)
               for line in path.read_text(encoding="utf-8").splitlines())


@pytest.fixture(scope="module")
def compiled_dump_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("bi_compiled_graphs")


@pytest.fixture(scope="module")
def compiled_invariant_worker(
    start_worker, tiny_models, ascend_log_dir: str, compiled_dump_dir: Path
) -> Any:
    # A fresh compile cache (start_worker's default), so the passes run in this process and
    # its fusion report covers this engine; inductor dumps the graphs the passes produced.
    worker = start_worker("batch-invariant-compiled", device="cpu",
                          **inductor_debug_env(compiled_dump_dir))
    kwargs = llm_kwargs(
        str(tiny_models.path("qwen3")), compile=True, fusion=True, batch_invariant=True,
        max_num_seqs=16, log_dir=ascend_log_dir,
    )
    worker.request("load", name="bic", kwargs=kwargs, timeout=600)
    yield worker
    worker.close()


def _alone_and_in_batch(worker: Any, logprobs: int | None) -> tuple[dict, dict, list]:
    alone = worker.request(
        "generate", name="bi", prompts=[TARGET], max_tokens=MAX_TOKENS, logprobs=logprobs
    )["outputs"][0]
    batch = worker.request(
        "generate", name="bi", prompts=PROMPTS, max_tokens=MAX_TOKENS, logprobs=logprobs
    )["outputs"]
    return alone, batch[PROMPTS.index(TARGET)], batch


@pytest.mark.timeout(300)
def test_prompt_alone_and_in_a_batch_of_eight_gives_identical_tokens(invariant_worker) -> None:
    before = invariant_worker.request("call_counts", reset=True)
    assert before["enabled"], "batch-invariant mode is not enabled in the engine process"
    alone, in_batch, batch = _alone_and_in_batch(invariant_worker, logprobs=None)
    counts = invariant_worker.request("call_counts", reset=True)["counts"]

    assert len(alone["token_ids"]) == MAX_TOKENS
    assert in_batch["token_ids"] == alone["token_ids"]
    # The batch really held different prompts with different continuations.
    assert len({tuple(o["token_ids"]) for o in batch}) > 1
    # The batch-invariant linear ran for every linear layer of every step: 4 projections per
    # decoder layer (qkv, o, gate_up, down) plus the LM head, once per step and per call.
    per_step = 4 * 2 + 1
    steps = 2 * MAX_TOKENS  # the call alone and the batched call
    assert counts.get("linear", 0) >= per_step * steps, counts


@pytest.mark.timeout(300)
def test_prompt_alone_and_in_a_batch_of_eight_gives_identical_logprobs(invariant_worker) -> None:
    alone, in_batch, _ = _alone_and_in_batch(invariant_worker, logprobs=0)
    assert in_batch["token_ids"] == alone["token_ids"]
    assert len(alone["logprobs"]) == MAX_TOKENS
    # Bitwise equal, not close: that is what batch invariance promises.
    assert in_batch["logprobs"] == alone["logprobs"]


@pytest.mark.timeout(600)
def test_compiled_with_every_fusion_pass_a_prompt_alone_and_in_batches_of_2_to_16_gives_identical_logprobs(  # noqa: E501
        compiled_invariant_worker) -> None:
    worker = compiled_invariant_worker
    worker.request("call_counts", reset=True)
    alone = worker.request("generate", name="bic", prompts=[TARGET], max_tokens=MAX_TOKENS,
                           logprobs=0)["outputs"][0]
    assert len(alone["logprobs"]) == MAX_TOKENS
    # The compiled graphs call the batch-invariant linear (not inductor's GEMM) for every
    # linear layer: 4 per decoder layer (qkv, o, gate_up, down) plus the LM head, every step.
    counts = worker.request("call_counts", reset=True)["counts"]
    assert counts.get("linear", 0) >= (4 * 2 + 1) * MAX_TOKENS, counts
    others = [p for p in PROMPTS if p != TARGET] * 3
    for size in range(2, 17):
        # The target at a different position in each batch.
        batch = others[:size - 1]
        position = size // 2
        batch.insert(position, TARGET)
        outputs = worker.request("generate", name="bic", prompts=batch, max_tokens=MAX_TOKENS,
                                 logprobs=0)["outputs"]
        got = outputs[position]
        assert got["token_ids"] == alone["token_ids"], size
        assert got["logprobs"] == alone["logprobs"], size  # bitwise, not close


@pytest.mark.timeout(600)
def test_compiled_batch_invariant_engine_fuses_qknorm_rope_and_kv_cache_attention_per_layer(
        compiled_invariant_worker, tiny_models, compiled_dump_dir: Path) -> None:
    """Batch-invariant mode keeps the fusion passes' sites: every decoder layer's q/k norm +
    RoPE and KV-cache write + attention are fused in every compiled graph."""
    worker = compiled_invariant_worker
    worker.request("generate", name="bic", prompts=PROMPTS[:2], max_tokens=2)
    report = worker.request("fusion_report")["report"]
    config = json.loads((tiny_models.path("qwen3") / "config.json").read_text())
    layers = int(config["num_hidden_layers"])
    # The decoder's graphs are those calling the linear layers (inductor also compiles small
    # graphs outside the decoder); each holds every layer once.
    linear = "vllm_ascend.batch_invariant_linear"
    graphs = sum(f"torch.ops.{linear}." in path.read_text(encoding="utf-8")
                 for path in transformed_graphs(compiled_dump_dir))
    assert graphs >= 1
    in_graphs = count_ops_in_dump(compiled_dump_dir, [*FUSED_OPS.values(), linear])
    for name, op in FUSED_OPS.items():
        assert report.get(name, 0) == layers * graphs, (name, report)
        assert in_graphs[op] == layers * graphs, (op, in_graphs)
    for op in REPLACED_OPS:
        assert _code_mentions(compiled_dump_dir, op) == 0, op
    # The fused graphs still call the batch-invariant linear (qkv, o, gate_up, down per layer;
    # the LM head runs outside the graph), not inductor's GEMM.
    assert in_graphs[linear] == 4 * layers * graphs, in_graphs
