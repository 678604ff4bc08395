"""Expert parallelism on the host-CPU platform: tiny Qwen3-MoE, greedy, float32.

TP=2 with ``enable_expert_parallel=True`` (compiled) and TP=2 without it (eager) must give
the tokens of TP=1, which must give the tokens of Hugging Face transformers. Each engine runs
in its own interpreter; the MoE layers' counts of (communication method, tokens) per forward
come back from the worker processes through ``LLM.collective_rpc``. The host-CPU decision
row: with EP, a forward of at most ``max_num_seqs`` tokens (decode) runs ALLGATHER, a larger
one (prefill) ALLTOALL; without EP every forward is ALLGATHER (no communication in the op).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

PROMPTS = (
    "Hello, my name is",
    "The capital of France is",
    "The future of AI is",
    "Once upon a time",
)
MAX_TOKENS = 8
MAX_NUM_SEQS = 4  # the decode budget of the host-CPU row: 4 tokens -> ALLGATHER, 5 -> ALLTOALL
SINGLE = PROMPTS[:1]  # a one-sequence batch: its decode forwards hold 1 token (rank 1 owns none)
# Each worker on its own CPU (explicit binding keeps working with the per-rank binding work).
TP2_ENV = {"VLLM_CPU_OMP_THREADS_BIND": "0|1"}

SNIPPET = """
import json
from vllm import LLM
from vllm_ascend.ops.moe import moe_comm_counts, reset_moe_comm_counts
from vllm_ascend.entrypoints.local_engine import llm_kwargs
from vllm_ascend_testing.generation import generate

kwargs = llm_kwargs({model!r}, compile={compile}, max_num_seqs={max_num_seqs},
                    max_model_len=128, kv_cache_mib=16)
kwargs.update(tensor_parallel_size={tp}, enable_expert_parallel={ep})
llm = LLM(**kwargs)
llm.collective_rpc(reset_moe_comm_counts)  # start-up and warm-up forwards are not counted
runs = [generate(llm, prompts, max_tokens={max_tokens})[0] for prompts in ({all!r}, {one!r})]
tokens = [[o["token_ids"] for o in outputs] for outputs in runs]
counts = llm.collective_rpc(moe_comm_counts)
print("RESULT " + json.dumps({{"tokens": tokens, "counts": counts}}), flush=True)
"""


def _run(run_python: Callable[..., Any], model: str, *, tp: int, ep: bool, compile: bool,
         timeout: float) -> dict[str, Any]:
    code = SNIPPET.format(model=model, compile=compile, max_num_seqs=MAX_NUM_SEQS, tp=tp, ep=ep,
                          max_tokens=MAX_TOKENS, all=list(PROMPTS), one=list(SINGLE))
    run = run_python(code, timeout=timeout, **(TP2_ENV if tp == 2 else {}))
    # vLLM's shutdown may log after the result line: look for it by its marker
    lines = [ln for ln in run.output.splitlines() if ln.startswith("RESULT ")]
    assert run.returncode == 0 and lines, run.output[-4000:]
    result: dict[str, Any] = json.loads(lines[-1].removeprefix("RESULT "))
    return result


def _prompt_tokens(model: str, prompts: tuple[str, ...]) -> int:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model)
    return sum(len(tokenizer(p)["input_ids"]) for p in prompts)


def _expected_calls(model: str) -> list[list[Any]]:
    """[method, tokens, forwards x 2 layers] of the two generate calls with expert parallelism
    (sorted like the op's counts): one prefill forward each, then MAX_TOKENS - 1 decode
    forwards."""
    layers = 2
    calls: dict[tuple[str, int], int] = {}
    for prompts in (PROMPTS, SINGLE):
        for tokens, forwards in ((_prompt_tokens(model, prompts), 1),
                                 (len(prompts), MAX_TOKENS - 1)):
            method = "ALLTOALL" if tokens > MAX_NUM_SEQS else "ALLGATHER"
            calls[(method, tokens)] = calls.get((method, tokens), 0) + forwards * layers
    return [[m, t, n] for (m, t), n in sorted(calls.items())]


@pytest.fixture(scope="module")
def moe_model(tiny_models: Any) -> str:
    return str(tiny_models.path("qwen3_moe"))


@pytest.fixture(scope="module")
def tp1(run_python: Callable[..., Any], moe_model: str) -> dict[str, Any]:
    return _run(run_python, moe_model, tp=1, ep=False, compile=False, timeout=400)


def test_tp1_gives_the_tokens_of_transformers(tp1: dict[str, Any], moe_model: str) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(moe_model)
    model = AutoModelForCausalLM.from_pretrained(moe_model, dtype=torch.float32).eval()
    expected = []
    for prompts in (PROMPTS, SINGLE):
        rows = []
        for prompt in prompts:
            ids = tokenizer(prompt, return_tensors="pt")["input_ids"]
            out = model.generate(ids, max_new_tokens=MAX_TOKENS, do_sample=False,
                                 eos_token_id=None, pad_token_id=0)
            rows.append(out[0, ids.shape[1]:].tolist())
        expected.append(rows)
    assert tp1["tokens"] == expected
    # without EP nothing is exchanged: vLLM's own kernel runs and no forward is counted
    assert tp1["counts"] == [{"rank": 0, "layers": 2, "calls": []}]


def test_expert_parallel_tp2_gives_tp1_tokens_with_both_methods(
    run_python: Callable[..., Any], moe_model: str, tp1: dict[str, Any]
) -> None:
    # Compiled: the MoE op runs inside vLLM's graphs (eager TP=2 MoE is the test below's).
    result = _run(run_python, moe_model, tp=2, ep=True, compile=True, timeout=1200)
    assert result["tokens"] == tp1["tokens"]
    calls = _expected_calls(moe_model)
    # prefill forwards ran ALLTOALL, decode forwards (4 and 1 tokens) ALLGATHER, on both ranks
    assert {c[0] for c in calls} == {"ALLGATHER", "ALLTOALL"}
    assert ["ALLGATHER", 1, 2 * (MAX_TOKENS - 1)] in calls
    assert result["counts"] == [{"rank": r, "layers": 2, "calls": calls} for r in (0, 1)]


def test_tp2_without_expert_parallel_gives_tp1_tokens(
    run_python: Callable[..., Any], moe_model: str, tp1: dict[str, Any]
) -> None:
    result = _run(run_python, moe_model, tp=2, ep=False, compile=False, timeout=600)
    assert result["tokens"] == tp1["tokens"]
    assert result["counts"] == [{"rank": r, "layers": 2, "calls": []} for r in (0, 1)]

