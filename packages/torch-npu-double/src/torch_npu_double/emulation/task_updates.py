"""Graph task updates on the emulated device, held to the hardware's rules.

``graph_task_update_begin(stream, handle)`` .. ``graph_task_update_end(stream)`` record the
calls the host issues (they do not run) and check them against the task group's captured
calls: the same kernels in the same order, every tensor argument of the captured shape, and
every tensor the kernel writes (``out``, ``workspace``, in-place arguments) the captured one
(same memory, same shape). A call that allocates its output (a functional kernel: its result
would be freed when the update returns, and the replayed task would write through a dangling
address), an extra or a missing call, or a changed shape is refused, naming the group, the
call and what differed.

The update stream is asynchronous (``update_queue``): a checked update stays in flight on its
stream. ``ExternalEvent.record(update_stream)`` publishes the stream's updates of the task
groups whose capture waited on that event; a replay then runs them with the new parameters.
Any other update lands only after the next replay of its graph, which runs with the previous
parameters: a runtime that forgets the event gets the previous step's tokens.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from torch_npu_double.emulation.graph_errors import GraphReplayError
from torch_npu_double.emulation.graphs import THREAD, TaskGroupHandle
from torch_npu_double.emulation.host_code import is_host_code, run_host_code
from torch_npu_double.emulation.kernel_contracts import bind
from torch_npu_double.emulation.recorded_ops import RecordedOp, snapshot, writes_arguments
from torch_npu_double.emulation.signatures import bound
from torch_npu_double.emulation.update_queue import QUEUE, PendingUpdate


def _tensors_by_name(func: Any, args: tuple[Any, ...],
                     kwargs: dict[str, Any]) -> dict[str, torch.Tensor]:
    named = bind(func._schema, args, kwargs)
    found: dict[str, torch.Tensor] = {}
    for name, value in named.items():
        if isinstance(value, torch.Tensor):
            found[name] = value
        elif isinstance(value, (list, tuple)):
            for i, item in enumerate(value):
                if isinstance(item, torch.Tensor):
                    found[f"{name}[{i}]"] = item
    return found


def _is_view(func: Any) -> bool:
    returns = func._schema.returns
    return bool(returns) and not writes_arguments(func) and all(
        r.alias_info is not None and not r.alias_info.is_write for r in returns)


def _allocates(func: Any) -> bool:
    """Whether ``func`` returns fresh memory (neither writes given tensors nor returns views)."""
    returns = func._schema.returns
    if not returns or writes_arguments(func):
        return False
    return not all(r.alias_info is not None for r in returns)


class TaskUpdate(TorchDispatchMode):
    """Records and checks a task group's calls again (new host parameters) without running
    them; each call returns what its counterpart returned at capture."""

    def __init__(self, group: TaskGroupHandle, stream: Any) -> None:
        super().__init__()
        self.group = group
        self.stream = stream
        self.ops: list[RecordedOp] = []

    def _refuse(self, position: int, func: Any, problem: str) -> GraphReplayError:
        return GraphReplayError(
            f"graph task update of the task group at calls {self.group.start}.."
            f"{self.group.end} refused at call {position} ({func}): {problem}")

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple[Any, ...] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        kwargs = kwargs or {}
        if is_host_code(func):
            # an ascend:: op's adapter (or a wrapper op) re-issues its kernels: check those
            return run_host_code(self, func, args, kwargs)
        if _is_view(func):
            # A view launches no task: it is the host's arithmetic on an address.
            return func(*args, **kwargs)
        position = len(self.ops)
        old = self.group.tasks()
        if _allocates(func):
            raise self._refuse(position, func, "the kernel allocates its output; an update "
                               "must write into the captured outputs (the .out form with the "
                               "captured out and workspace)")
        if position >= len(old):
            raise self._refuse(position, func, f"an extra task: the group captured "
                               f"{len(old)} calls")
        captured = old[position]
        if captured.func is not func:
            raise self._refuse(position, func, f"the group captured {captured.func} there; "
                               "an update must re-issue the captured calls in order")
        self._check_tensors(position, func, captured, args, kwargs)
        self.ops.append(RecordedOp(func, snapshot(args), snapshot(kwargs), captured.outputs,
                                   captured.reruns, captured.out_spec, captured.returned))
        return self.group.graph.outputs_of(captured)

    def _check_tensors(self, position: int, func: Any, captured: RecordedOp,
                       args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        then = _tensors_by_name(func, captured.args, captured.kwargs)
        now = _tensors_by_name(func, args, kwargs)
        if then.keys() != now.keys():
            raise self._refuse(position, func, f"tensor arguments {sorted(now)}; captured "
                               f"{sorted(then)}")
        written = writes_arguments(func)
        for name, tensor in now.items():
            before = then[name]
            if tensor.shape != before.shape:
                raise self._refuse(position, func, f"{name} has shape {list(tensor.shape)}; "
                                   f"captured {list(before.shape)}")
            if name.partition("[")[0] in written and tensor.data_ptr() != before.data_ptr():
                raise self._refuse(position, func, f"{name} (written by the kernel) is at "
                                   f"{tensor.data_ptr():#x}; captured at "
                                   f"{before.data_ptr():#x}: an update must write the "
                                   "captured buffers")


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
    state.update = TaskUpdate(handle, stream)
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
    tasks = group.tasks()
    if len(update.ops) != len(tasks):
        raise GraphReplayError(
            f"graph task update of the task group at calls {group.start}..{group.end} "
            f"re-issued {len(update.ops)} tasks for a task group of {len(tasks)}: a missing "
            f"task ({tasks[len(update.ops)].func}); an update must re-issue every captured "
            "task")

    def apply(ops: list[RecordedOp] = update.ops) -> None:
        positions = [i for i in range(group.start, group.end) if group.graph._ops[i].reruns]
        for i, op in zip(positions, ops, strict=True):
            group.graph._ops[i] = op

    QUEUE.issue(stream, PendingUpdate(group, apply))
