"""MoE on the NPU runtime (emulated A2 NPUs): the tiny Qwen3-MoE, greedy, float32.

TP=1 must give Hugging Face transformers' float32 tokens; TP=2 with expert parallelism (each
emulated NPU holding half of the experts) must give TP=1's. On A2 the seed's table picks
ALLGATHER for every forward (EP 2 < 16: no MC2), which the MoE layers count per forward in
the workers (``LLM.collective_rpc(moe_comm_counts)``). Each engine runs in its own interpreter.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]

PROMPTS = ("Hello, my name is", "The capital of France is")
MAX_TOKENS = 6
LAYERS = 2

SNIPPET = """
import json
from vllm import LLM, SamplingParams
from vllm_ascend.ops.moe import moe_comm_counts, reset_moe_comm_counts
from vllm_ascend.entrypoints.local_engine import llm_kwargs


def main():
    kwargs = llm_kwargs({model!r}, compile=False, max_num_seqs=4, max_model_len=128,
                        kv_cache_mib=16)
    kwargs.update(tensor_parallel_size={tp}, enable_expert_parallel={ep})
    llm = LLM(**kwargs)
    llm.collective_rpc(reset_moe_comm_counts)  # start-up forwards are not counted
    params = SamplingParams(max_tokens={max_tokens}, temperature=0, ignore_eos=True)
    outputs = llm.generate({prompts!r}, params)
    print("RESULT " + json.dumps({{"tokens": [list(o.outputs[0].token_ids) for o in outputs],
                                   "counts": llm.collective_rpc(moe_comm_counts)}}),
          flush=True)


if __name__ == "__main__":
    main()
"""


def _run(run_python: Callable[..., Any], model: str, *, tp: int, ep: bool) -> dict[str, Any]:
    code = SNIPPET.format(model=model, tp=tp, ep=ep, max_tokens=MAX_TOKENS,
                          prompts=list(PROMPTS))
    run = run_python(code, timeout=900, device="npu", VLLM_ASCEND_EMULATED_NPUS=str(tp),
                     VLLM_ALLOW_INSECURE_SERIALIZATION="1")
    lines = [ln for ln in run.output.splitlines() if ln.startswith("RESULT ")]
    assert run.returncode == 0 and lines, run.output[-4000:]
    result: dict[str, Any] = json.loads(lines[-1].removeprefix("RESULT "))
    return result


@pytest.fixture(scope="module")
def moe_model(tiny_models: Any) -> str:
    return str(tiny_models.path("qwen3_moe"))


@pytest.fixture(scope="module")
def tp1(run_python: Callable[..., Any], moe_model: str) -> dict[str, Any]:
    return _run(run_python, moe_model, tp=1, ep=False)


def _transformers_tokens(model_dir: str) -> list[list[int]]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    rows = []
    for prompt in PROMPTS:
        ids = tokenizer(prompt, return_tensors="pt")["input_ids"]
        out = model.generate(ids, max_new_tokens=MAX_TOKENS, do_sample=False,
                             eos_token_id=None, pad_token_id=0)
        rows.append(out[0, ids.shape[1]:].tolist())
    return rows


def _forwards(counts: list[dict[str, Any]]) -> dict[int, set[str]]:
    """Per rank, the methods its MoE layers ran (every forward counted, both layers)."""
    return {c["rank"]: {name for name, _, _ in c["calls"]} for c in counts}


def test_npu_moe_tp1_gives_the_tokens_of_transformers(tp1: dict[str, Any],
                                                      moe_model: str) -> None:
    assert tp1["tokens"] == _transformers_tokens(moe_model)
    # one prefill and MAX_TOKENS - 1 decode forwards per layer, all ALLGATHER
    calls = tp1["counts"][0]["calls"]
    assert tp1["counts"][0]["layers"] == LAYERS
    assert {name for name, _, _ in calls} == {"ALLGATHER"}
    assert sum(n for _, _, n in calls) == LAYERS * MAX_TOKENS


def test_npu_moe_expert_parallel_tp2_gives_tp1_tokens_with_allgather(
    run_python: Callable[..., Any], moe_model: str, tp1: dict[str, Any]
) -> None:
    result = _run(run_python, moe_model, tp=2, ep=True)
    assert result["tokens"] == tp1["tokens"]
    assert _forwards(result["counts"]) == {0: {"ALLGATHER"}, 1: {"ALLGATHER"}}
    assert all(sum(n for _, _, n in c["calls"]) == LAYERS * MAX_TOKENS
               for c in result["counts"])
