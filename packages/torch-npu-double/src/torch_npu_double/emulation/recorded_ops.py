"""What a graph capture holds: the recorded kernels (``RecordedOp``) and captured
``ExternalEvent`` operations (``EventNode``), and which arguments a kernel writes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch.utils._pytree import tree_flatten, tree_map

from torch_npu_double.emulation.kernels import UNMARKED_WRITES
from torch_npu_double.emulation.update_queue import QUEUE


def snapshot(value: Any) -> Any:
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
    returned: Any = None  # what an in-place / out= op returned (its written arguments)

    def run(self) -> None:
        if not self.reruns:
            return
        result = self.func(*self.args, **self.kwargs)
        fresh, _ = tree_flatten(result)
        for captured, new in zip(self.outputs, fresh, strict=False):
            if isinstance(captured, torch.Tensor) and captured is not new:
                captured.copy_(new)


def writes_arguments(func: Any) -> tuple[str, ...]:
    """The arguments ``func`` writes: alias-annotated ones, and those of ``UNMARKED_WRITES``
    (an ``.out`` kernel whose recorded schema takes a plain ``Tensor[] out``)."""
    schema = func._schema
    marked = tuple(a.name for a in schema.arguments
                   if a.alias_info is not None and a.alias_info.is_write)
    name = schema.name.partition("::")[2] + (f".{schema.overload_name}"
                                             if schema.overload_name else "")
    return marked + UNMARKED_WRITES.get(name, ())


def record(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> RecordedOp:
    schema = func._schema
    writes = bool(writes_arguments(func))
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
    return RecordedOp(func, snapshot(args), snapshot(kwargs), outputs,
                      reruns=writes or not views_only, out_spec=spec,
                      returned=out if writes else None)


@dataclass
class EventNode:
    """A captured ``ExternalEvent`` operation: ``wait`` (the stream waits until the event is
    recorded), ``reset`` or ``record``."""

    event: Any
    action: str
    reruns: bool = False
    outputs: tuple[()] = ()

    def apply(self) -> None:
        if self.action == "reset":
            self.event.recorded = False
        elif self.action == "record":
            self.event.recorded = True
            QUEUE.resume(self.event)
