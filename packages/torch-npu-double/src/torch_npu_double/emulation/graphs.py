"""``torch.npu``'s graph APIs on the emulated device, with real capture and replay semantics.

Capture records, through a dispatch mode over the whole capture, the kernels the host issues
on ``npu`` tensors: torch_npu kernels and ATen ops, with the tensors they read and wrote. Host
code around them (``host_code``: the ``ascend::`` ops' NPU adapters, vLLM's and this project's
wrapper ops, higher-order ops) runs once, at capture, and is recorded as the kernels it
issued. Replay re-executes that list on the same tensors, without running any Python of the
caller: a runtime that feeds a replay a new input tensor or forgets to update an attention
parameter gets the stale answer it would get on hardware. Host-op counting: ``host_ops``.

What the emulation enforces, as the device does:

- inside a capture, a host read (``.item()``, ``bool(t)``, ``nonzero``, a device-to-host
  copy), a ``synchronize()`` of the device, a stream or an event, and a host-to-device copy
  from pageable (not pinned) memory are refused with the real capture's error ("operation not
  allowed in capture"), which the product's capture-error classification recognises;
- a replay leaves no new device memory behind (its intermediate results land in the tensors
  the capture allocated from the graph's pool) and cannot run while a capture is open;
- ``graph_task_group_begin``/``end`` during capture delimit a task group and return its
  handle; an ``ExternalEvent.wait``/``reset`` captured before it is the group's event; task
  updates and their asynchrony are ``task_updates`` and ``update_queue``: a replay runs a
  group with an update only when the group's event was recorded on the update stream after
  it, and a replay that reaches a captured wait on an event nothing recorded waits (resumes
  at the record), as the device's stream does.

Capture failures can be injected (``fail_next_capture``) to test how the runtime reports them.
"""

from __future__ import annotations

import functools
import itertools
import threading
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_unflatten

from torch_npu_double.emulation.capture_rules import (
    NOT_ALLOWED,
    copies_pageable,
    reads_host,
)
from torch_npu_double.emulation.graph_errors import (
    CAPTURE_FAILURES,
    GraphCaptureNotAllowed,
    GraphReplayError,
)
from torch_npu_double.emulation.host_code import is_host_code, npu_tensors, run_host_code
from torch_npu_double.emulation.recorded_ops import EventNode, RecordedOp, record
from torch_npu_double.emulation.signatures import bound
from torch_npu_double.emulation.update_queue import QUEUE

_POOL_IDS = itertools.count(1)
_aten = torch.ops.aten


def refuse_blocked(what: str) -> None:
    """Raise when a replay waits on an event nothing recorded: ``what`` would never return."""
    if QUEUE.blocked():
        raise GraphReplayError(
            f"{what} behind a replay that waits on an ExternalEvent nothing recorded: on the "
            "device it never returns (record the event on the update stream after each task "
            "update)")


def host_waits(what: str, event: bool = False) -> None:
    """A ``synchronize()``: refused inside a capture or behind a blocked replay, else
    counted (``host_ops.HostOpCounter``: ``syncs``, or ``event_waits`` for an event's)."""
    refuse_in_capture(what)
    refuse_blocked(what)
    if event:
        THREAD.state.event_waits += 1
    else:
        THREAD.state.synchronizes += 1


def refuse_in_capture(what: str) -> None:
    """Raise the capture's refusal of ``what`` when this thread is capturing."""
    if THREAD.state.graph is not None:
        raise GraphCaptureNotAllowed(f"{what} during NPU graph capture: {NOT_ALLOWED}")


class _Capture(TorchDispatchMode):
    """Runs each op once (the capture's own execution) and appends it to the graph; host code
    (``host_code``) is expanded into the device ops it issues, so a replay runs none of it."""

    supports_higher_order_operators = True

    def __init__(self, graph: NPUGraph) -> None:
        super().__init__()
        self.graph = graph

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple[Any, ...] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        kwargs = kwargs or {}
        if is_host_code(func):
            return run_host_code(self, func, args, kwargs)
        inputs = npu_tensors((args, kwargs))
        if inputs and reads_host(func, args, kwargs):
            raise GraphCaptureNotAllowed(
                f"{func} reads npu memory on the host during NPU graph capture (a graph cannot "
                f"wait for the host): {NOT_ALLOWED}")
        if copies_pageable(func, args, kwargs):
            raise GraphCaptureNotAllowed(
                f"{func} copies pageable (not pinned) host memory to the npu during NPU graph "
                f"capture (the graph would read freed host memory): {NOT_ALLOWED}")
        out = func(*args, **kwargs)
        if inputs or npu_tensors(out):
            self.graph._ops.append(record(func, args, kwargs, out))
        return out


@dataclass
class TaskGroupHandle:
    """``torch_npu._C._NPUTaskGroupHandle``: the recorded calls ``start..end`` of a graph."""

    graph: NPUGraph
    start: int
    end: int
    event: Any = None  # the ExternalEvent whose captured wait precedes the group

    def ops(self) -> list[Any]:
        return self.graph._ops[self.start:self.end]

    def tasks(self) -> list[RecordedOp]:
        """The group's calls that launch work (views launch none)."""
        return [op for op in self.ops() if op.reruns]


@dataclass
class _CaptureState:
    """The capture open on this thread and the task group / update in progress."""

    graph: NPUGraph | None = None
    mode: _Capture | None = None
    group_start: int | None = None
    last_wait: Any = None  # the event of the last captured wait outside a task group
    update: Any = None  # task_updates.TaskUpdate in progress
    replaying: bool = False
    replays: int = 0
    synchronizes: int = 0  # synchronize() calls of the device and of streams
    event_waits: int = 0  # Event.synchronize() calls


class _ThreadState(threading.local):
    def __init__(self) -> None:
        self.state = _CaptureState()


THREAD = _ThreadState()


class NPUGraph:
    """``torch_npu.npu.NPUGraph``: capture records, replay re-executes the record."""

    #: Set to a key of ``CAPTURE_FAILURES`` to make the next ``capture_begin`` fail with the
    #: real runtime's message (class-wide: the runtime creates its graphs itself).
    fail_next_capture: str | None = None

    @bound("NPUGraph")
    def __init__(self) -> None:
        self._pool: tuple[int, int] | None = None
        self._ops: list[Any] = []  # RecordedOp and EventNode
        self._captured = False
        self._suspended: int | None = None
        self._before = 0
        self.replays = 0
        self.allocated_during_capture = 0

    # ------------------------------------------------------------ capture
    @bound("NPUGraph.capture_begin")
    def capture_begin(self, pool: Any = None, capture_error_mode: str = "global") -> None:
        failure, NPUGraph.fail_next_capture = NPUGraph.fail_next_capture, None
        if failure is not None:
            raise RuntimeError(CAPTURE_FAILURES[failure])
        state = THREAD.state
        if state.graph is not None:
            raise RuntimeError("capture_begin: another NPU graph is capturing on this thread")
        if self._captured:
            raise RuntimeError("capture_begin on an NPUGraph that holds a capture; reset() it")
        self._pool = (int(pool[0]), int(pool[1])) if pool is not None else (0, next(_POOL_IDS))
        self._ops = []
        self._allocated_at_begin = _allocated()
        state.graph, state.mode = self, _Capture(self)
        state.last_wait = None
        state.mode.__enter__()

    @bound("NPUGraph.capture_end")
    def capture_end(self) -> None:
        state = THREAD.state
        if state.graph is not self or state.mode is None:
            raise RuntimeError("capture_end without capture_begin on this graph")
        state.mode.__exit__(None, None, None)
        state.graph = state.mode = None
        if state.group_start is not None:
            state.group_start = None
            raise RuntimeError("capture ended inside a graph task group "
                               "(graph_task_group_begin without graph_task_group_end)")
        self._captured = True
        self.allocated_during_capture = _allocated() - self._allocated_at_begin

    def _abort_capture(self) -> None:
        state = THREAD.state
        if state.graph is self and state.mode is not None:
            state.mode.__exit__(None, None, None)
        state.graph = state.mode = None
        state.group_start = None
        self._ops = []

    def outputs_of(self, op: RecordedOp) -> Any:
        """What recorded ``op`` returned at capture (a view is derived again from its
        captured arguments; an in-place op returns what it returned then)."""
        if op.returned is not None:
            return op.returned
        if op.reruns and all(o is not None for o in op.outputs):
            return tree_unflatten(op.outputs, op.out_spec)
        return op.args[0] if op.reruns else op.func(*op.args, **op.kwargs)

    # ------------------------------------------------------------ replay
    @bound("NPUGraph.replay")
    def replay(self) -> None:
        if not self._captured:
            raise GraphReplayError("replay of an NPUGraph that was never captured")
        if THREAD.state.graph is not None:
            raise GraphReplayError("replay while an NPU graph is capturing")
        if QUEUE.blocked():
            raise GraphReplayError(
                "replay behind a replay that waits on an ExternalEvent nothing recorded: on "
                "the device the stream hangs (record the event on the update stream after "
                "each task update)")
        THREAD.state.replays += 1
        self.replays += 1
        self._before = _allocated()
        self._run_from(0)

    def _run_from(self, index: int) -> None:
        state = THREAD.state
        state.replaying = True
        try:
            with torch.inference_mode():
                for i in range(index, len(self._ops)):
                    op = self._ops[i]
                    if isinstance(op, EventNode):
                        if op.action == "wait" and not op.event.recorded:
                            self._suspended = i
                            QUEUE.suspend(op.event, functools.partial(self._resume, i))
                            return
                        op.apply()
                    else:
                        op.run()
        finally:
            state.replaying = False
        QUEUE.land_late(self)
        left = _allocated() - self._before
        if left:
            raise GraphReplayError(
                f"the replay left {left} bytes of new npu memory allocated: a graph replays "
                "on the memory it captured")

    def _resume(self, index: int) -> None:
        self._suspended = None
        self._run_from(index)

    @property
    def waiting(self) -> bool:
        """Whether a replay is suspended at a captured ``ExternalEvent`` wait."""
        return self._suspended is not None

    @bound("NPUGraph.reset")
    def reset(self) -> None:
        QUEUE.drop(self)
        self._ops = []
        self._captured = False
        self._pool = None

    @bound("NPUGraph.pool")
    def pool(self) -> tuple[int, int] | None:
        return self._pool

    @bound("NPUGraph.update")
    def update(self, cpu_update_input: Any) -> None:
        raise NotImplementedError("NPUGraph.update (the graph-level host-input update) is not "
                                  "emulated; the runtime uses graph_task_update_begin/end")

    @property
    def recorded_ops(self) -> list[Any]:
        """The recorded device operations, in order (for tests and host-op counts)."""
        return list(self._ops)


def _allocated() -> int:
    return int(torch.npu.memory_allocated())  # type: ignore[attr-defined]


class graph:
    """``torch_npu.npu.graph``, the capture context."""

    @bound("graph")
    def __init__(self, npu_graph: NPUGraph, pool: Any = None, stream: Any = None,
                 auto_dispatch_capture: bool = False,
                 capture_error_mode: str = "global") -> None:
        self.npu_graph = npu_graph
        self.pool = pool
        self.stream = stream
        self.capture_error_mode = capture_error_mode

    def __enter__(self) -> None:
        torch.npu.synchronize()  # type: ignore[attr-defined]
        self.npu_graph.capture_begin(self.pool, capture_error_mode=self.capture_error_mode)

    def __exit__(self, exc_type: object, *exc: object) -> None:
        if exc_type is not None:
            self.npu_graph._abort_capture()
            return
        self.npu_graph.capture_end()


@bound("graph_pool_handle")
def graph_pool_handle() -> tuple[int, int]:
    return (0, next(_POOL_IDS))


@bound("is_current_stream_capturing")
def is_current_stream_capturing() -> bool:
    return THREAD.state.graph is not None


@bound("graph_task_group_begin")
def graph_task_group_begin(stream: Any) -> None:
    state = THREAD.state
    if state.graph is None:
        raise RuntimeError("graph_task_group_begin outside an NPU graph capture")
    if state.group_start is not None:
        raise RuntimeError("graph_task_group_begin inside an open task group")
    state.group_start = len(state.graph._ops)


@bound("graph_task_group_end")
def graph_task_group_end(stream: Any) -> TaskGroupHandle:
    state = THREAD.state
    if state.graph is None or state.group_start is None:
        raise RuntimeError("graph_task_group_end without graph_task_group_begin in a capture")
    handle = TaskGroupHandle(state.graph, state.group_start, len(state.graph._ops),
                             state.last_wait)
    state.group_start = None
    state.last_wait = None
    return handle


def capture_event(event: Any, action: str) -> bool:
    """Put ``event``'s ``action`` into the graph this thread captures; False if none is."""
    state = THREAD.state
    if state.graph is None:
        return False
    state.graph._ops.append(EventNode(event, action))
    if action == "wait" and state.group_start is None:
        state.last_wait = event
    return True
