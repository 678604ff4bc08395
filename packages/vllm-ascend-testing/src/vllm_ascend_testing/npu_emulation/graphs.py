"""``torch.npu``'s graph APIs on the emulated device, with real capture and replay semantics.

Capture records every operation dispatched on ``npu`` tensors (a dispatch mode over the whole
capture: the model's Python runs once), with the tensors it read and wrote. Replay re-executes
that list on the same tensors, without running any Python of the caller: a runtime that feeds
a replay a new input tensor or forgets to refresh an attention parameter gets the stale answer
it would get on hardware. Host-op counting: ``host_ops``.

What the emulation enforces, as the device does:

- a host read during capture (``.item()``, a device-to-host copy, ``nonzero``) is refused with
  the error a real capture reports (an operation not allowed in capture);
- a replay leaves no new device memory behind (its intermediate results land in the tensors
  the capture allocated from the graph's pool) and cannot run while a capture is open;
- ``graph_task_group_begin``/``end`` during capture delimit a task group (the attention call of
  one layer) and return its handle; ``graph_task_update_begin(stream, handle)``/``end`` record
  the same calls again with new host parameters and replace the group's recorded calls with
  them (their outputs stay the captured tensors); a parameter the runtime did not update
  replays with its captured value.

Capture failures can be injected (``fail_next_capture``) to test how the runtime reports them.
"""

from __future__ import annotations

import itertools
import threading
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_map, tree_unflatten

from vllm_ascend_testing.npu_emulation.graph_errors import (
    CAPTURE_FAILURES,
    GraphCaptureNotAllowed,
    GraphReplayError,
)
from vllm_ascend_testing.npu_emulation.host_code import is_host_code, npu_tensors, run_host_code
from vllm_ascend_testing.npu_emulation.signatures import bound

_POOL_IDS = itertools.count(1)
_aten = torch.ops.aten

#: Ops that read device data on the host (the host must wait for the device).
_HOST_READS = {_aten._local_scalar_dense.default, _aten.nonzero.default,
               _aten.masked_select.default, _aten.unique_consecutive.default,
               _aten._unique2.default}


def _snapshot(value: Any) -> Any:
    """``value`` with its containers rebuilt (a host list captured by value, as the device
    bakes it into the task; the tensors themselves are kept: the graph reads their memory)."""
    return tree_map(lambda x: x, value)


@dataclass
class RecordedOp:
    """One device operation of a graph: the op, its arguments and the tensors it wrote."""

    func: Any
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    outputs: list[Any]
    reruns: bool  # False for a view: it computes nothing, its output already aliases
    out_spec: Any = None

    def run(self) -> None:
        if not self.reruns:
            return
        result = self.func(*self.args, **self.kwargs)
        fresh, _ = tree_flatten(result)
        for captured, new in zip(self.outputs, fresh, strict=False):
            if isinstance(captured, torch.Tensor) and captured is not new:
                captured.copy_(new)


def _record(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> RecordedOp:
    schema = func._schema
    writes = any(a.alias_info is not None and a.alias_info.is_write for a in schema.arguments)
    outputs, spec = tree_flatten(out)
    # A return that *may* alias (``to``, ``reshape``, ``contiguous``) is a view only when it
    # does share an input's memory; otherwise it computed a copy the replay must redo.
    inputs = {t.untyped_storage().data_ptr() for t in tree_flatten((args, kwargs))[0]
              if isinstance(t, torch.Tensor)}
    views_only = bool(outputs) and all(
        r.alias_info is not None for r in schema.returns) and all(
        not isinstance(o, torch.Tensor) or o.untyped_storage().data_ptr() in inputs
        for o in outputs)
    if views_only or writes:
        # In-place / out= ops write their arguments (rerun on them); views compute nothing.
        outputs = [None] * len(outputs)
    return RecordedOp(func, _snapshot(args), _snapshot(kwargs), outputs,
                      reruns=writes or not views_only, out_spec=spec)


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
        if inputs and _reads_host(func, args, kwargs):
            raise GraphCaptureNotAllowed(
                f"{func} reads npu memory on the host during NPU graph capture: operation not "
                "allowed in capture (a graph cannot wait for the host)")
        out = func(*args, **kwargs)
        if inputs or npu_tensors(out):
            self.graph._ops.append(_record(func, args, kwargs, out))
        return out


def _reads_host(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    if func in _HOST_READS:
        return True
    if func is _aten._to_copy.default:
        device = kwargs.get("device")
        return device is not None and torch.device(device).type == "cpu"
    if func in (_aten.copy_.default, _aten._copy_from.default):
        return isinstance(args[0], torch.Tensor) and args[0].device.type == "cpu"
    return False


class _Update(TorchDispatchMode):
    """Records a task group's calls again (new host parameters) without running them; each
    op returns the outputs its counterpart produced at capture."""

    def __init__(self, group: TaskGroupHandle) -> None:
        super().__init__()
        self.group = group
        self.ops: list[RecordedOp] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple[Any, ...] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        kwargs = kwargs or {}
        position = len(self.ops)
        old = self.group.ops()
        if position >= len(old) or old[position].func is not func:
            want = old[position].func if position < len(old) else "nothing"
            raise GraphReplayError(
                f"graph task update issued {func} as call {position} of a task group that "
                f"captured {want} there: an update must re-issue the captured calls in order")
        captured = old[position]
        self.ops.append(RecordedOp(func, _snapshot(args), _snapshot(kwargs), captured.outputs,
                                   captured.reruns, captured.out_spec))
        return self.group.graph._outputs_of(position + self.group.start)


@dataclass
class TaskGroupHandle:
    """``torch_npu._C._NPUTaskGroupHandle``: the recorded calls ``start..end`` of a graph."""

    graph: NPUGraph
    start: int
    end: int

    def ops(self) -> list[RecordedOp]:
        return self.graph._ops[self.start:self.end]


@dataclass
class _CaptureState:
    """The capture open on this thread and the task group / update in progress."""

    graph: NPUGraph | None = None
    mode: _Capture | None = None
    group_start: int | None = None
    update: _Update | None = None
    replaying: bool = False
    replays: int = 0


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
        self._ops: list[RecordedOp] = []
        self._captured = False
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

    def _outputs_of(self, index: int) -> Any:
        """What recorded op ``index`` returned at capture (a view is derived again from its
        captured arguments; an in-place op returns its first argument)."""
        op = self._ops[index]
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
        before = _allocated()
        state = THREAD.state
        state.replaying = True
        try:
            with torch.inference_mode():
                for op in self._ops:
                    op.run()
        finally:
            state.replaying = False
        state.replays += 1
        left = _allocated() - before
        if left:
            raise GraphReplayError(
                f"the replay left {left} bytes of new npu memory allocated: a graph replays "
                "on the memory it captured")
        self.replays += 1

    @bound("NPUGraph.reset")
    def reset(self) -> None:
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
    def recorded_ops(self) -> list[RecordedOp]:
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
    handle = TaskGroupHandle(state.graph, state.group_start, len(state.graph._ops))
    state.group_start = None
    return handle


@bound("graph_task_update_begin")
def graph_task_update_begin(stream: Any, handle: Any) -> None:
    state = THREAD.state
    if not isinstance(handle, TaskGroupHandle):
        raise TypeError(f"graph_task_update_begin: expected a task group handle from "
                        f"graph_task_group_end, got {type(handle).__name__}")
    if state.graph is not None:
        raise RuntimeError("graph_task_update_begin while a graph is capturing")
    if state.update is not None:
        raise RuntimeError("graph_task_update_begin inside an open task update")
    state.update = _Update(handle)
    state.update.__enter__()


@bound("graph_task_update_end")
def graph_task_update_end(stream: Any) -> None:
    state = THREAD.state
    update = state.update
    if update is None:
        raise RuntimeError("graph_task_update_end without graph_task_update_begin")
    update.__exit__(None, None, None)
    state.update = None
    group = update.group
    if len(update.ops) != group.end - group.start:
        raise GraphReplayError(
            f"graph task update re-issued {len(update.ops)} calls for a task group of "
            f"{group.end - group.start}: an update must re-issue every captured call")
    group.graph._ops[group.start:group.end] = update.ops
