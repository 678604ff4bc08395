"""`GraphWrapper`: capture one device graph per caller-supplied key, replay it afterwards."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

import torch

from ascend_graph.graphs.errors import GraphInputMismatchError, translate_capture_error
from ascend_graph.graphs.params import GraphParamsStore
from ascend_graph.graphs.runtime import GraphRuntime, RuntimeMode

#: Returns (key, runtime mode) for the current call, e.g. vLLM's batch descriptor and
#: cudagraph runtime mode read from its forward context.
ContextFn = Callable[[], tuple[Any, Any]]


@dataclass
class GraphEntry:
    """One captured graph: its key, the graph, a weak reference to its output."""

    key: Any
    graph: Any = None
    output: Any = None
    input_addresses: list[int] | None = None
    replays: int = 0


def tensor_addresses(args: tuple[Any, ...]) -> list[int]:
    return [a.data_ptr() for a in args if isinstance(a, torch.Tensor)]


class GraphWrapper:
    """Wraps a runnable; in its runtime mode, the first call per key captures a graph and
    later calls replay it without calling the runnable. Calls in another mode (or NONE) run
    the runnable directly (warm-up, profiling, wrappers nested for another mode).

    Outputs are kept as weak references (the graph pool owns the memory); in `debug` mode a
    replay checks that tensor arguments sit at the captured addresses. Known NPU capture
    failures raise `GraphCaptureError` saying what to change.

    Hooks for the caller (all take the key): `capture_scope` returns a context manager the
    capture runs in (e.g. one that marks the forward context as capturing); `before_full_replay`
    runs before each replay of a FULL graph, after the optional synchronisation (e.g. to hand
    the attention backend this step's parameters); `on_capture` runs after each capture.
    """

    def __init__(
        self,
        runnable: Callable[..., Any],
        runtime_mode: Any,
        *,
        runtime: GraphRuntime,
        context: ContextFn | None = None,
        pool: Any = None,
        debug: bool = False,
        weak_ref_output: bool = True,
        sync_before_full_replay: bool = True,
        params: GraphParamsStore | None = None,
        on_capture: Callable[[Any], None] | None = None,
        capture_scope: Callable[[Any], AbstractContextManager[Any]] | None = None,
        before_full_replay: Callable[[Any], None] | None = None,
    ) -> None:
        mode = RuntimeMode.parse(runtime_mode)
        if mode is RuntimeMode.NONE:
            raise ValueError("GraphWrapper needs runtime_mode PIECEWISE or FULL, not NONE")
        self.runnable = runnable
        self.runtime_mode = mode
        self.runtime = runtime
        self.context = context
        self.pool = pool
        self.debug = debug
        self.weak_ref_output = weak_ref_output
        # A full graph reads attention parameters that the next step may already be
        # updating (async scheduling): wait for the previous replay first.
        self.sync_before_full_replay = sync_before_full_replay
        self.params = params
        self.on_capture = on_capture
        self.capture_scope = capture_scope
        self.before_full_replay = before_full_replay
        self.entries: dict[Any, GraphEntry] = {}
        self.captures = 0

    def __getattr__(self, name: str) -> Any:
        # Only reached for attributes the wrapper lacks: forward to the runnable.
        runnable = self.__dict__.get("runnable")
        if runnable is not None and hasattr(runnable, name):
            return getattr(runnable, name)
        raise AttributeError(f"neither GraphWrapper nor {runnable!r} has attribute {name!r}")

    def unwrap(self) -> Callable[..., Any]:
        return self.runnable

    def clear(self) -> None:
        """Drop every captured graph (e.g. before the device memory is released)."""
        self.entries.clear()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.context is None:
            raise RuntimeError(
                "GraphWrapper was built without a context function; call "
                "run(key, mode, *args) or pass context=lambda: (key, mode)"
            )
        key, mode = self.context()
        return self.run(key, mode, *args, **kwargs)

    def run(self, key: Any, mode: Any, *args: Any, **kwargs: Any) -> Any:
        """Capture (first call for `key`) or replay; other modes run the runnable."""
        mode = RuntimeMode.parse(mode)
        if mode is RuntimeMode.NONE or mode is not self.runtime_mode or key is None:
            return self.runnable(*args, **kwargs)
        entry = self.entries.get(key)
        if entry is None:
            entry = self.entries[key] = GraphEntry(key)
        if entry.graph is None:
            return self._capture(entry, args, kwargs)
        if self.debug:
            self._check_addresses(entry, args)
        if self.runtime_mode is RuntimeMode.FULL:
            if self.sync_before_full_replay:
                self.runtime.synchronize()
            if self.before_full_replay is not None:
                self.before_full_replay(key)
        self.runtime.replay(entry.graph)
        entry.replays += 1
        return self.runtime.resolve(entry.output) if self.weak_ref_output else entry.output

    def _capture(self, entry: GraphEntry, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        entry.input_addresses = tensor_addresses(args)
        graph = self.runtime.new_graph()
        scope = self.capture_scope(entry.key) if self.capture_scope else contextlib.nullcontext()
        try:
            with scope:
                output = self.runtime.capture(graph, self.runnable, args, kwargs, self.pool)
        except Exception as exc:
            translated = translate_capture_error(exc)
            if translated is not None:
                raise translated from exc
            raise
        if self.params is not None:
            self.params.weak_ref_workspaces(self.runtime.weak_ref)
        entry.output = self.runtime.weak_ref(output) if self.weak_ref_output else output
        entry.graph = graph
        self.captures += 1
        if self.on_capture is not None:
            self.on_capture(entry.key)
        return output

    def _check_addresses(self, entry: GraphEntry, args: tuple[Any, ...]) -> None:
        now = tensor_addresses(args)
        if now != entry.input_addresses:
            moved = [
                i
                for i, (a, b) in enumerate(zip(now, entry.input_addresses or [], strict=False))
                if a != b
            ]
            raise GraphInputMismatchError(
                f"graph for key {entry.key!r} replayed with tensor inputs at other addresses "
                f"than at capture (tensor arguments {moved or 'count changed'}): the replay "
                "would read stale buffers. Copy new data into the captured input tensors."
            )
