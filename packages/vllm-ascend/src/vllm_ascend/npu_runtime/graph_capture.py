"""The capture context of NPU graphs for vLLM's model runner, any number of ranks.

vLLM's ``graph_capture`` (``vllm.distributed.parallel_state``) switches to a capture stream
and enters the CUDA communicators' own capture contexts (custom all-reduce buffers); it asserts
that every group with more than one rank has a CUDA or XPU communicator. HCCL needs no such
context: its collectives are device work on the issuing stream, which a graph holds as it is.
So the NPU runtime's capture context is the stream switch alone, and the runner points vLLM's
capture code at it while it captures (``npu_capture_context``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch


@contextlib.contextmanager
def npu_graph_capture(device: torch.device) -> Iterator[Any]:
    """What vLLM's ``graph_capture(device)`` yields, for NPU ranks: a ``GraphCaptureContext``
    whose stream is current inside the block and has waited for the work issued before it."""
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
    """Inside the block vLLM's model runner captures with :func:`npu_graph_capture` (it calls
    the ``graph_capture`` name it imported); the name is restored on exit."""
    from vllm.v1.worker import gpu_model_runner

    original = gpu_model_runner.graph_capture
    gpu_model_runner.graph_capture = npu_graph_capture
    try:
        yield
    finally:
        gpu_model_runner.graph_capture = original
