"""ModelSlim W8A8 and W8A8_DYNAMIC checkpoints end to end: the greedy tokens of the host-CPU
platform and of the NPU runtime (emulated `npu`, eager) equal an independent reference
(`vllm_ascend_testing.w8a8_reference`: transformers with each quantized linear computed from
the checkpoint's tensors by ModelSlim's formulas in float32).

The tiny checkpoints are written in ModelSlim's tensor names and dtypes
(`vllm_ascend_testing.tiny_quant_models`): static W8A8 layers carry `input_scale`,
`input_offset`, `quant_bias` and `deq_scale` only (no `weight_scale`), so a runtime ignoring
`deq_scale` or `quant_bias` cannot give the reference's tokens. The "mixed" scheme holds
every kind of linear layer (static W8A8 attention, W8A8_DYNAMIC gate/up, FLOAT down_proj).
The host-CPU checkpoint is float32 (float32 `deq_scale`), the NPU one float16 (ModelSlim's
int64 `deq_scale`; `npu_quant_matmul` outputs float16 or bfloat16). One engine per platform.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from vllm_ascend.entrypoints.local_engine import llm_kwargs
from vllm_ascend_testing.tiny_quant_models import make_tiny_quant_model
from vllm_ascend_testing.w8a8_reference import reference_greedy
from vllm_ascend_testing.worker_client import LLMWorker

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

PROMPTS = [[1, 5, 9, 20, 33], [3, 4], [200, 17, 64, 8, 121, 90, 7]]
MAX_TOKENS = 8
#: checkpoint -> (scheme, dtype) per platform
CHECKPOINTS = {
    "cpu": {"mixed": ("mixed", "float32")},
    "npu": {"mixed": ("mixed", "float16")},
}


def _generate(worker: LLMWorker, name: str, model: Path, dtype: str) -> list[list[int]]:
    kwargs = llm_kwargs(str(model), compile=False, dtype=dtype, max_model_len=128,
                        kv_cache_mib=16)
    worker.request("load", name=name, kwargs=kwargs, timeout=600)
    answer = worker.request("generate", name=name, prompts=PROMPTS, max_tokens=MAX_TOKENS)
    worker.request("unload", name=name)
    return [o["token_ids"] for o in answer["outputs"]]


def _runs(platform: str, start_worker: Callable[..., LLMWorker], root: Path) -> dict[str, Any]:
    """Per checkpoint of ``platform``: the engine's tokens and the reference's."""
    env = {"VLLM_ASCEND_EMULATED_NPUS": "1"} if platform == "npu" else {}
    worker = start_worker(f"w8a8-{platform}", device=platform, shared_inductor=True, **env)
    found: dict[str, Any] = {}
    for name, (scheme, dtype) in CHECKPOINTS[platform].items():
        model = make_tiny_quant_model("llama", root / f"{platform}-{name}", scheme=scheme,
                                      layers=1, dtype=dtype)
        found[name] = {
            "engine": _generate(worker, f"{platform}-{name}", model, dtype),
            "reference": reference_greedy(model, PROMPTS, MAX_TOKENS, dtype=dtype),
        }
    found["_platform"] = worker.request("platform")["class"]
    worker.close()
    return found


@pytest.fixture(scope="module")
def cpu_runs(start_worker: Callable[..., LLMWorker],
             tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return _runs("cpu", start_worker, tmp_path_factory.mktemp("w8a8_cpu"))


@pytest.fixture(scope="module")
def npu_runs(start_worker: Callable[..., LLMWorker],
             tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return _runs("npu", start_worker, tmp_path_factory.mktemp("w8a8_npu"))


@pytest.mark.parametrize("name", list(CHECKPOINTS["cpu"]))
def test_host_cpu_platform_gives_the_w8a8_reference_tokens(cpu_runs, name: str) -> None:
    assert cpu_runs["_platform"] == "vllm_ascend.platform.cpu.AscendCpuPlatform"
    run = cpu_runs[name]
    assert all(len(tokens) == MAX_TOKENS for tokens in run["engine"])
    assert run["engine"] == run["reference"]


@pytest.mark.parametrize("name", list(CHECKPOINTS["npu"]))
def test_npu_runtime_gives_the_w8a8_reference_tokens(npu_runs, name: str) -> None:
    assert npu_runs["_platform"] == "vllm_ascend.platform.npu.NPUPlatform"
    run = npu_runs[name]
    assert all(len(tokens) == MAX_TOKENS for tokens in run["engine"])
    assert run["engine"] == run["reference"]
