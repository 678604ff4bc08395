"""A W8A8 tiny model through vLLM on the host-CPU platform: the "ascend" quantization method
puts `ascend.quantize` / `ascend.dynamic_quant` into the compiled graphs, and the norm_quant
pass fuses them with the preceding `ascend.add_rms_norm`.

The tiny llama's "mixed" scheme: q/k/v/o_proj W8A8 (static), gate/up_proj W8A8_DYNAMIC,
down_proj FLOAT. With two decoder layers the fusable sites are the layer-1 input norm before
qkv_proj (static) and both post-attention norms before gate_up_proj (dynamic); the layer-0
input norm has no residual (`rms_norm`), o_proj follows attention, the final norm feeds the
float lm_head. Each engine compiles with a fresh cache in its own worker process.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import pytest
from vllm_ascend.entrypoints.local_engine import llm_kwargs
from vllm_ascend_testing.graph_dump import count_ops_in_dump, inductor_debug_env
from vllm_ascend_testing.tiny_quant_models import make_tiny_quant_model

PROMPTS = ("Hello, my name is", "The capital of France is", "Once upon a time")
MAX_TOKENS = 8
NUM_LAYERS = 2
OPS = ("ascend.quantize", "ascend.dynamic_quant", "ascend.add_rms_norm", "ascend.rms_norm",
       "ascend.add_rms_norm_quant", "ascend.add_rms_norm_dynamic_quant")
# Calls in the dumped graphs of the whole model, per run.
EXPECTED_OPS = {
    "fused": {"ascend.quantize": 3, "ascend.dynamic_quant": 0, "ascend.add_rms_norm": 1,
              "ascend.rms_norm": 1, "ascend.add_rms_norm_quant": 1,
              "ascend.add_rms_norm_dynamic_quant": 2},
    "unfused": {"ascend.quantize": 4, "ascend.dynamic_quant": 2, "ascend.add_rms_norm": 4,
                "ascend.rms_norm": 1, "ascend.add_rms_norm_quant": 0,
                "ascend.add_rms_norm_dynamic_quant": 0},
}  # fmt: skip

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


@dataclass
class QuantRun:
    outputs: list[dict[str, Any]]
    report: dict[str, int]
    ops: dict[str, int]


@pytest.fixture(scope="module")
def quant_runs(
    start_worker: Callable[..., Any],
    tmp_path_factory: pytest.TempPathFactory,
    ascend_log_dir: str,
) -> dict[str, QuantRun]:
    model = make_tiny_quant_model(
        "llama", tmp_path_factory.mktemp("quant_model") / "llama_w8a8", scheme="mixed",
        layers=NUM_LAYERS,
    )  # fmt: skip
    settings = {"fused": True, "unfused": False}
    dumps = {name: tmp_path_factory.mktemp(f"quant_dump_{name}") for name in settings}
    workers = {name: start_worker(f"quant-{name}", device="cpu", **inductor_debug_env(dumps[name]))
               for name in settings}  # fmt: skip

    def drive(name: str) -> QuantRun:
        worker = workers[name]
        # No `quantization=` argument: config.json's quantization_config selects "ascend".
        kwargs = llm_kwargs(str(model), fusion=settings[name], log_dir=ascend_log_dir)
        worker.request("load", name=name, kwargs=kwargs, timeout=400)
        answer = worker.request("generate", name=name, prompts=list(PROMPTS),
                                max_tokens=MAX_TOKENS)
        report = worker.request("fusion_report")["report"]
        worker.close()
        return QuantRun(answer["outputs"], report, count_ops_in_dump(dumps[name], OPS))

    # The two engines compile at once, one core each (inductor compiles with one thread).
    with ThreadPoolExecutor(max_workers=len(settings)) as pool:
        return dict(zip(settings, pool.map(drive, settings), strict=True))


def test_quantized_model_generates_the_same_tokens_fused_and_unfused(quant_runs) -> None:
    fused = [o["token_ids"] for o in quant_runs["fused"].outputs]
    unfused = [o["token_ids"] for o in quant_runs["unfused"].outputs]
    assert all(len(tokens) == MAX_TOKENS for tokens in fused)
    assert fused == unfused


def test_fusion_report_counts_norm_quant_sites(quant_runs) -> None:
    assert quant_runs["fused"].report.get("norm_quant") == 1 + NUM_LAYERS
    assert quant_runs["unfused"].report.get("norm_quant", 0) == 0


@pytest.mark.parametrize("run", ["fused", "unfused"])
def test_dumped_graphs_hold_the_quantization_ops(quant_runs, run: str) -> None:
    assert quant_runs[run].ops == EXPECTED_OPS[run]
