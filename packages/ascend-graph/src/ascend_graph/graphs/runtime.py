"""The device-graph runtime protocol, its NPU implementation and a recording one for tests.

A runtime creates graphs, runs a callable under capture, replays, synchronises, and turns
outputs into references that do not own device memory (the graph pool owns it).
"""

from __future__ import annotations

import contextlib
import enum
import gc
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import torch
from torch.utils._pytree import tree_map


class RuntimeMode(enum.Enum):
    """Graph runtime modes, named as vLLM's CUDAGraphMode values."""

    NONE = "NONE"
    PIECEWISE = "PIECEWISE"
    FULL = "FULL"

    @classmethod
    def parse(cls, value: Any) -> RuntimeMode:
        """From a RuntimeMode, a name ("full"), or any enum with a matching `.name`."""
        if isinstance(value, cls):
            return value
        name = value if isinstance(value, str) else getattr(value, "name", None)
        if isinstance(name, str) and name.upper() in cls.__members__:
            return cls[name.upper()]
        raise ValueError(
            f"runtime mode {value!r} is not understood; allowed: {', '.join(cls.__members__)}"
        )


@runtime_checkable
class GraphRuntime(Protocol):
    """What the graph wrappers need from a device graph API."""

    def new_graph(self) -> Any: ...

    def capture(
        self, graph: Any, fn: Callable[..., Any], args: tuple[Any, ...],
        kwargs: dict[str, Any], pool: Any,
    ) -> Any: ...  # fmt: skip

    def replay(self, graph: Any) -> None: ...

    def synchronize(self) -> None: ...

    def weak_ref(self, value: Any) -> Any: ...

    def resolve(self, ref: Any) -> Any: ...


class NPUGraphRuntime:
    """torch.npu graphs; torch_npu is imported on first use only.

    `weak_ref_fn` makes a tensor that aliases memory without owning it (vLLM's
    `weak_ref_tensors` on the NPU platform); without one, outputs are held strongly.
    `gc_disable` turns `gc.collect` and `torch.npu.empty_cache` into no-ops while capturing
    (many captures otherwise spend most of their time collecting); both are restored after.
    """

    def __init__(
        self, *, weak_ref_fn: Callable[[Any], Any] | None = None, gc_disable: bool = False
    ) -> None:
        self.weak_ref_fn = weak_ref_fn
        self.gc_disable = gc_disable

    @staticmethod
    def _npu() -> Any:
        import torch_npu  # noqa: F401  (installs torch.npu)

        return torch.npu  # type: ignore[attr-defined]

    def graph_pool(self) -> Any:
        return self._npu().graph_pool_handle()

    def new_graph(self) -> Any:
        return self._npu().NPUGraph()

    def capture(
        self, graph: Any, fn: Callable[..., Any], args: tuple[Any, ...],
        kwargs: dict[str, Any], pool: Any,
    ) -> Any:  # fmt: skip
        npu = self._npu()
        with self._no_gc(npu), npu.graph(graph, pool=pool):
            return fn(*args, **kwargs)

    @contextlib.contextmanager
    def _no_gc(self, npu: Any) -> Iterator[None]:
        if not self.gc_disable:
            yield
            return
        saved_collect, saved_empty = gc.collect, npu.empty_cache
        gc.collect, npu.empty_cache = (lambda *a, **k: 0), (lambda: None)
        try:
            yield
        finally:
            gc.collect, npu.empty_cache = saved_collect, saved_empty

    def replay(self, graph: Any) -> None:
        graph.replay()

    def synchronize(self) -> None:
        self._npu().current_stream().synchronize()

    def weak_ref(self, value: Any) -> Any:
        return value if self.weak_ref_fn is None else self.weak_ref_fn(value)

    def resolve(self, ref: Any) -> Any:
        return ref


@dataclass
class RecordingGraph:
    """A fake device graph: remembers what was captured; owns the outputs like a pool."""

    graph_id: int
    fn: Callable[..., Any] | None = None
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)
    output: Any = None
    replays: int = 0


class RecordingRuntime:
    """Test runtime: records ("capture", id) / ("replay", id) / ("sync",) in `events`.

    Capture runs the callable. Replay does not, unless `rerun_on_replay` (then the captured
    callable runs again on the captured inputs and its results are copied into the captured
    outputs, which is what a device replay does to its static buffers). `fail_next_capture`
    makes the next capture raise that exception (to test error translation).
    """

    def __init__(self, *, rerun_on_replay: bool = False) -> None:
        self.rerun_on_replay = rerun_on_replay
        self.events: list[tuple[Any, ...]] = []
        self.graphs: list[RecordingGraph] = []
        self.fail_next_capture: BaseException | None = None

    def new_graph(self) -> RecordingGraph:
        graph = RecordingGraph(len(self.graphs))
        self.graphs.append(graph)
        return graph

    def capture(
        self, graph: RecordingGraph, fn: Callable[..., Any], args: tuple[Any, ...],
        kwargs: dict[str, Any], pool: Any,
    ) -> Any:  # fmt: skip
        self.events.append(("capture", graph.graph_id))
        if self.fail_next_capture is not None:
            exc, self.fail_next_capture = self.fail_next_capture, None
            raise exc
        graph.fn, graph.args, graph.kwargs = fn, args, kwargs
        graph.output = fn(*args, **kwargs)
        return graph.output

    def replay(self, graph: RecordingGraph) -> None:
        self.events.append(("replay", graph.graph_id))
        graph.replays += 1
        if self.rerun_on_replay and graph.fn is not None:
            fresh = graph.fn(*graph.args, **graph.kwargs)
            tree_map(_copy_into, graph.output, fresh)

    def synchronize(self) -> None:
        self.events.append(("sync",))

    def weak_ref(self, value: Any) -> Any:
        return tree_map(lambda t: weakref.ref(t) if isinstance(t, torch.Tensor) else t, value)

    def resolve(self, ref: Any) -> Any:
        def deref(r: Any) -> Any:
            if not isinstance(r, weakref.ref):
                return r
            tensor = r()
            if tensor is None:
                raise RuntimeError("a captured graph output was freed while still replayed")
            return tensor

        return tree_map(deref, ref, is_leaf=lambda x: isinstance(x, weakref.ref))


def _copy_into(static: Any, fresh: Any) -> Any:
    if isinstance(static, torch.Tensor):
        static.copy_(fresh)
    return static
