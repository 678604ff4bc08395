"""Two in-process engines built in turn in one process (an RL trainer's vLLM next to its own
``torch.compile``d code; the tests' and benchmarks' engines): each has its own Ascend engine
object, its own ready watch, fusion report and rank report. The first, strict
(``forbid_compile_after_ready``) and ready before the second starts, neither counts nor
refuses the second's compiles or the user's own ``torch.compile``. (A freed engine's release
of its stores and callbacks: tests/test_engine_registry.py.)"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
import torch

pytestmark = pytest.mark.timeout(900)

PROMPTS = ["w1 w2 w3 w4", "w7 w8"]
STRICT = {"ascend_compilation_config": {"forbid_compile_after_ready": True}}


@pytest.fixture(autouse=True)
def _fresh_process_setup() -> Iterator[None]:
    """The suite's per-test reset would drop the module's engines between tests: here the
    process holds its engines for the whole module, as a real one does."""
    yield


def _llm(model: Any, cache_root: Any, **kwargs: Any) -> Any:
    from vllm import LLM

    # A fresh compile-cache root: every engine compiles (runs its passes) in this process.
    old = os.environ.get("VLLM_CACHE_ROOT")
    os.environ["VLLM_CACHE_ROOT"] = str(cache_root)
    try:
        return LLM(model=str(model), dtype="float32", max_model_len=128, max_num_seqs=4,
                   max_num_batched_tokens=128, gpu_memory_utilization=0.05, seed=0, **kwargs)
    finally:
        if old is None:
            del os.environ["VLLM_CACHE_ROOT"]
        else:
            os.environ["VLLM_CACHE_ROOT"] = old


def _greedy(llm: Any, prompts: list[str] = PROMPTS) -> list[list[int]]:
    from vllm import SamplingParams

    outs = llm.generate(prompts, SamplingParams(max_tokens=6, temperature=0), use_tqdm=False)
    return [list(o.outputs[0].token_ids) for o in outs]


def _rank_report(llm: Any) -> dict[str, Any]:
    from vllm_ascend.worker_duties.rank_report import build_rank_report

    return build_rank_report(llm.llm_engine.vllm_config, rank=0, local_rank=0, binding=None,
                             stage="serving")


@pytest.fixture(scope="module")
def engines(tiny_qwen3_weights: Any, ascend_cpu_platform: Any,
            tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The strict engine, ready and served, then a second engine (fusion on, not strict)
    built and served in the same process; what the first reported before the second."""
    from vllm_ascend.engine import engine_of

    strict = _llm(tiny_qwen3_weights, tmp_path_factory.mktemp("cache_a"),
                  additional_config=STRICT)
    strict_tokens = _greedy(strict)
    first = engine_of(strict.llm_engine.vllm_config)
    assert first.ready.ready and first.ready.strict
    before = _rank_report(strict)
    second = _llm(tiny_qwen3_weights, tmp_path_factory.mktemp("cache_b"))  # raised before
    second_tokens = _greedy(second)
    return {"strict": strict, "second": second, "first": first, "before": before,
            "strict_tokens": strict_tokens, "second_tokens": second_tokens}


def test_each_engine_has_its_own_object_and_watch(engines: dict[str, Any]) -> None:
    from vllm_ascend.engine import AscendEngine, engine_of

    one = engine_of(engines["strict"].llm_engine.vllm_config)
    two = engine_of(engines["second"].llm_engine.vllm_config)
    assert isinstance(one, AscendEngine) and one is engines["first"] and two is not one
    assert one.soc == two.soc == "cpu"
    assert one.config.ascend_compilation_config.forbid_compile_after_ready is True
    assert two.config.ascend_compilation_config.forbid_compile_after_ready is False
    assert one.ready is not two.ready and one.fusion is not two.fusion
    # Its own start-up: the model's compile (vLLM's AOT compile) and its pass-manager runs.
    assert two.ready.ready and two.ready.as_report()["compiles"]["count"] >= 1
    assert two.ready.pass_runs >= 1 and one.ready.pass_runs >= 1


def test_the_second_engine_changes_none_of_the_first_engines_counts(
        engines: dict[str, Any]) -> None:
    before, after = engines["before"], _rank_report(engines["strict"])
    assert before["compiles"]["count"] >= 1 and before["pass_runs"] >= 1
    for key in ("compiles", "pass_runs", "after_ready", "captures", "fusion", "fusion_sites"):
        assert after[key] == before[key], key
    assert after["after_ready"] == {"compiles": 0, "pass_runs": 0, "captures": 0,
                                    "causes": []}
    # The strict engine still serves, with the tokens it gave before the second existed.
    assert _greedy(engines["strict"]) == engines["strict_tokens"]


def test_fusion_and_rank_reports_are_per_engine(engines: dict[str, Any]) -> None:
    from vllm_ascend.compilation.pass_manager import fusion_report

    one = fusion_report(engines["strict"].llm_engine.vllm_config)
    two = fusion_report(engines["second"].llm_engine.vllm_config)
    # One fused q/k norm + rope and one KV-cache write + attention per layer (2 layers), for
    # each engine: its own, not the sum of the process's engines.
    assert one["qknorm_rope"] >= 2 and one["kv_cache_attention"] >= 2
    assert one == two == engines["before"]["fusion"]
    assert _rank_report(engines["second"])["fusion"] == two


def test_the_users_own_compile_works_and_is_not_the_engines(engines: dict[str, Any]) -> None:
    watch = engines["first"].ready
    counted = (watch.compiles, dict(watch.after_ready))
    frames = int(torch._dynamo.utils.counters["frames"]["ok"])
    out = torch.compile(lambda x: x * 2 + 1)(torch.ones(3))
    assert out.tolist() == [3.0, 3.0, 3.0]
    assert int(torch._dynamo.utils.counters["frames"]["ok"]) - frames == 1  # it compiled
    assert (watch.compiles, dict(watch.after_ready)) == counted
