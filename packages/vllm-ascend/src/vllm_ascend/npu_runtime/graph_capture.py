"""The capture context of NPU graphs for vLLM's model runner, any number of ranks."""
# vLLM's graph_capture asserts a CUDA/XPU communicator per group; HCCL collectives are stream work a
# graph holds as it is, so the stream switch alone is the context.

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from vllm.distributed.parallel_state import GraphCaptureContext


@contextlib.contextmanager
def npu_graph_capture(device: torch.device) -> Iterator[GraphCaptureContext]:
    """vLLM's ``graph_capture(device)`` for NPU ranks: a context whose stream is current."""
    from vllm.distributed.parallel_state import GraphCaptureContext

    npu: Any = torch.npu  # type: ignore[attr-defined]
    stream = npu.Stream(device=device)
    current = npu.current_stream()
    if current != stream:
        stream.wait_stream(current)
    with npu.stream(stream):
        yield GraphCaptureContext(stream)


@contextlib.contextmanager
def npu_capture_context() -> Iterator[None]:
    """Point the model runner's ``graph_capture`` at :func:`npu_graph_capture` in the block."""
    from vllm.v1.worker import gpu_model_runner

    original = gpu_model_runner.graph_capture
    gpu_model_runner.graph_capture = npu_graph_capture
    try:
        yield
    finally:
        gpu_model_runner.graph_capture = original
