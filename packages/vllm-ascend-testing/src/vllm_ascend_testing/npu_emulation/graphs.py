"""``torch.npu``'s graph APIs on the emulated device, bound to the recorded signatures.

Capture and replay are not emulated yet: ``capture_begin`` raises, and nothing is ever
capturing. The emulated graph of issue 34 (record the operations dispatched on ``npu``
tensors during capture, replay that list on the same storage) replaces ``NPUGraph`` here;
the device's boxed fallback is the single place every ``npu`` operation passes through.
"""

from __future__ import annotations

import itertools
from typing import Any

from vllm_ascend_testing.npu_emulation.signatures import bound

_POOL_IDS = itertools.count(1)


class GraphCaptureNotEmulated(RuntimeError):
    """NPU graph capture was asked for and the emulation does not provide it yet."""


class NPUGraph:
    """``torch_npu.npu.NPUGraph`` (capture not emulated yet)."""

    @bound("NPUGraph")
    def __init__(self) -> None:
        self._pool: tuple[int, int] | None = None

    @bound("NPUGraph.capture_begin")
    def capture_begin(self, pool: Any = None, capture_error_mode: str = "global") -> None:
        raise GraphCaptureNotEmulated(
            "NPU graph capture is not emulated yet; run with enforce_eager=True "
            "(cudagraph_mode NONE) on the emulated device")

    @bound("NPUGraph.capture_end")
    def capture_end(self) -> None:
        raise GraphCaptureNotEmulated("capture_end without a capture")

    @bound("NPUGraph.replay")
    def replay(self) -> None:
        raise GraphCaptureNotEmulated("replay of a graph that was never captured")

    @bound("NPUGraph.reset")
    def reset(self) -> None:
        self._pool = None

    @bound("NPUGraph.pool")
    def pool(self) -> tuple[int, int] | None:
        return self._pool

    @bound("NPUGraph.update")
    def update(self, cpu_update_input: Any) -> None:
        raise GraphCaptureNotEmulated("update of a graph that was never captured")


class graph:
    """``torch_npu.npu.graph``, the capture context (capture not emulated yet)."""

    @bound("graph")
    def __init__(self, npu_graph: NPUGraph, pool: Any = None, stream: Any = None,
                 auto_dispatch_capture: bool = False,
                 capture_error_mode: str = "global") -> None:
        self.npu_graph = npu_graph
        self.pool = pool
        self.capture_error_mode = capture_error_mode

    def __enter__(self) -> None:
        self.npu_graph.capture_begin(self.pool, capture_error_mode=self.capture_error_mode)

    def __exit__(self, *exc: object) -> None:
        self.npu_graph.capture_end()


@bound("graph_pool_handle")
def graph_pool_handle() -> tuple[int, int]:
    return (0, next(_POOL_IDS))


@bound("is_current_stream_capturing")
def is_current_stream_capturing() -> bool:
    return False


@bound("graph_task_group_begin")
def graph_task_group_begin(stream: Any) -> None:
    raise GraphCaptureNotEmulated("graph task groups need a capture")


@bound("graph_task_group_end")
def graph_task_group_end(stream: Any) -> Any:
    raise GraphCaptureNotEmulated("graph task groups need a capture")


@bound("graph_task_update_begin")
def graph_task_update_begin(stream: Any, handle: Any) -> None:
    raise GraphCaptureNotEmulated("graph task updates need a captured graph")


@bound("graph_task_update_end")
def graph_task_update_end(stream: Any) -> None:
    raise GraphCaptureNotEmulated("graph task updates need a captured graph")
