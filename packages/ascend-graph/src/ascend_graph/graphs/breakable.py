"""`BreakableGraphWrapper`: a forward split into captured and eager segments.

Communication and data-dependent branches cannot live inside a device graph; they become eager
segments between captured ones. Segment i receives the outputs of segment i-1 (a tuple is
spread as arguments). A captured segment reads its inputs from the tensors it was captured
with, so on replay new input tensors are copied into those static buffers first.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from ascend_graph.graphs.errors import translate_capture_error
from ascend_graph.graphs.runtime import GraphRuntime


@dataclass(frozen=True)
class Segment:
    """One step of the forward: captured in a graph, or always run eagerly."""

    name: str
    fn: Callable[..., Any]
    capturable: bool = True


@dataclass
class _Captured:
    graph: Any
    inputs: tuple[Any, ...]
    output: Any
    replays: int = 0


@dataclass
class _KeyState:
    segments: dict[str, _Captured] = field(default_factory=dict)


def _as_args(value: Any) -> tuple[Any, ...]:
    return value if isinstance(value, tuple) else (value,)


class BreakableGraphWrapper:
    """Captures each capturable segment once per key; replays them in order with the eager
    segments in between. `context` (optional) returns the key for `__call__`; a None key
    runs every segment eagerly."""

    def __init__(
        self,
        segments: Sequence[Segment],
        *,
        runtime: GraphRuntime,
        context: Callable[[], Any] | None = None,
        pool: Any = None,
    ) -> None:
        names = [s.name for s in segments]
        if not segments or len(set(names)) != len(names):
            raise ValueError(f"segments need unique names and at least one segment, got {names}")
        self.segments = tuple(segments)
        self.runtime = runtime
        self.context = context
        self.pool = pool
        self.states: dict[Any, _KeyState] = {}

    def __call__(self, *args: Any) -> Any:
        key = self.context() if self.context is not None else None
        return self.run(key, *args)

    def captured_keys(self) -> list[Any]:
        return list(self.states)

    def run(self, key: Any, *args: Any) -> Any:
        """Run the segments in order for `key` (None: all eager)."""
        state = None if key is None else self.states.setdefault(key, _KeyState())
        values: tuple[Any, ...] = args
        result: Any = None
        for segment in self.segments:
            if state is None or not segment.capturable:
                result = segment.fn(*values)
            else:
                result = self._captured(state, segment, values)
            values = _as_args(result)
        return result

    def _captured(self, state: _KeyState, segment: Segment, values: tuple[Any, ...]) -> Any:
        captured = state.segments.get(segment.name)
        if captured is None:
            graph = self.runtime.new_graph()
            try:
                output = self.runtime.capture(graph, segment.fn, values, {}, self.pool)
            except Exception as exc:
                translated = translate_capture_error(exc)
                if translated is not None:
                    raise translated from exc
                raise
            state.segments[segment.name] = _Captured(graph, values, output)
            return output
        if len(values) != len(captured.inputs):
            raise ValueError(
                f"segment {segment.name!r} got {len(values)} inputs on replay, "
                f"{len(captured.inputs)} at capture"
            )
        for static, new in zip(captured.inputs, values, strict=True):
            if isinstance(static, torch.Tensor) and new is not static:
                static.copy_(new)
        self.runtime.replay(captured.graph)
        captured.replays += 1
        return captured.output
