"""The NPU runtime end to end on the emulated `npu` device (`VLLM_ASCEND_EMULATED_NPUS`).

The platform is `NPUPlatform`, the worker `vllm_ascend.npu_runtime.worker.NPUWorker`, attention
the Ascend backend over `torch.ops.ascend.reshape_and_cache` / `paged_attention` (on the device:
torch_npu's FIA and scatter kernels as the emulation binds them). Expected tokens come from the
host-CPU platform (vLLM's CPU worker and CPU attention kernels) on the same checkpoint, each
prompt generated alone, without chunking or prefix caching: a chunked prefill (a prompt longer than `max_num_batched_tokens`) and a
prefix-cache hit (two prompts sharing three 128-token blocks) must give the same tokens.

The emulated torch_npu has no `_npu_rotary_embedding`, so both engines run vLLM's native rotary
embedding (`-RotaryEmbedding`); every other Ascend custom op is on.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from vllm_ascend.entrypoints.local_engine import llm_kwargs
from vllm_ascend_testing.worker_client import LLMWorker

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

EMULATED = {"VLLM_ASCEND_EMULATED_NPUS": "1"}
NATIVE_ROPE = ["-RotaryEmbedding", "-Llama3RotaryEmbedding"]
MAX_BATCHED = 128  # the chunked prompt is longer than this
SHORT_PROMPTS = ["Hello, my name is", "The capital of France is", "The future of AI is",
                 "Once upon a time"]
MAX_TOKENS = 12


def _long_prompts() -> dict[str, list[int]]:
    """Token-id prompts: one of 300 tokens (3 chunks of 128), and two that share their first
    3 blocks (384 tokens) and then differ."""
    shared = [(i * 37 + 11) % 240 + 5 for i in range(384)]
    return {
        "chunked": [(i * 53 + 7) % 240 + 5 for i in range(300)],
        "prefix_a": [*shared, 17, 23, 42],
        "prefix_b": [*shared, 99, 7, 3, 64, 12],
    }


def _kwargs(model: str, **extra: Any) -> dict[str, Any]:
    kwargs = llm_kwargs(model, compile=False, max_model_len=512, kv_cache_mib=64)
    kwargs["compilation_config"] = {"custom_ops": NATIVE_ROPE}
    kwargs["max_num_batched_tokens"] = MAX_BATCHED
    kwargs["enable_prefix_caching"] = True
    kwargs.update(extra)
    return kwargs


def _run(worker: LLMWorker, name: str, model: str, **extra: Any) -> dict[str, list[list[int]]]:
    worker.request("load", name=name, kwargs=_kwargs(model, **extra), timeout=600)
    runs: dict[str, list[list[int]]] = {}
    answer = worker.request("generate", name=name, prompts=SHORT_PROMPTS, max_tokens=MAX_TOKENS)
    runs["short"] = [o["token_ids"] for o in answer["outputs"]]
    for key, prompt in _long_prompts().items():  # one at a time: prefix_b hits prefix_a's cache
        answer = worker.request("generate", name=name, prompts=[prompt], max_tokens=MAX_TOKENS)
        runs[key] = [answer["outputs"][0]["token_ids"]]
    platform = worker.request("platform")["class"]
    worker.request("unload", name=name)
    return {**runs, "_platform": platform}  # type: ignore[dict-item]


@pytest.fixture(scope="module")
def tiny_runs(tiny_models: Any, start_worker: Callable[..., LLMWorker]) -> dict[str, Any]:
    """Per architecture: the NPU runtime's tokens and the host-CPU platform's."""
    npu = start_worker("npu-runtime-tiny", device="npu", **EMULATED)
    cpu = start_worker("npu-runtime-cpu-reference", device="cpu")
    found: dict[str, Any] = {}
    for arch in ("llama", "qwen3"):
        model = str(tiny_models.path(arch))
        found[arch] = {"npu": _run(npu, f"npu-{arch}", model),
                       # the reference: no chunking, no prefix cache
                       "cpu": _run(cpu, f"cpu-{arch}", model, enable_prefix_caching=False,
                                   max_num_batched_tokens=512)}
    return found


@pytest.mark.parametrize("arch", ["llama", "qwen3"])
def test_the_engine_runs_on_the_npu_platform_with_the_npu_runtime(tiny_runs, arch) -> None:
    assert tiny_runs[arch]["npu"]["_platform"] == "vllm_ascend.platform.npu.NPUPlatform"
    assert tiny_runs[arch]["cpu"]["_platform"] == "vllm_ascend.platform.cpu.AscendCpuPlatform"


@pytest.mark.parametrize("arch", ["llama", "qwen3"])
@pytest.mark.parametrize("case", ["short", "chunked", "prefix_a", "prefix_b"])
def test_npu_runtime_tokens_equal_the_host_cpu_platform(tiny_runs, arch, case) -> None:
    npu, cpu = tiny_runs[arch]["npu"][case], tiny_runs[arch]["cpu"][case]
    assert all(len(t) == MAX_TOKENS for t in npu)
    assert npu == cpu
