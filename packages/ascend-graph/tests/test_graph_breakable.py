"""BreakableGraphWrapper: segments captured once and replayed in order, pool keys, errors."""

from __future__ import annotations

import pytest
import torch
from ascend_graph import (
    BreakableGraphWrapper,
    GraphCaptureError,
    RecordingRuntime,
    Segment,
)


def test_breakable_segments_capture_once_and_replay_in_order() -> None:
    runtime = RecordingRuntime(rerun_on_replay=True)
    log = runtime.events

    def comm(x):
        log.append(("eager", "comm"))
        return x + 100  # e.g. an all-reduce: always eager, returns a fresh tensor

    segments = [
        Segment("pre", lambda x: (x * 2, x + 1)),
        Segment("comm", lambda a, b: comm(a + b), capturable=False),
        Segment("post", lambda y: y * 3),
    ]
    wrapper = BreakableGraphWrapper(segments, runtime=runtime, context=lambda: 4)
    x = torch.ones(4)
    assert torch.equal(wrapper(x), (x * 2 + x + 1 + 100) * 3)
    log.clear()
    x.copy_(torch.full((4,), 2.0))
    out = wrapper(x)
    assert torch.equal(out, torch.full((4,), (4 + 3 + 100) * 3.0))
    assert log == [("replay", 0), ("eager", "comm"), ("replay", 1)]
    assert torch.equal(wrapper.run(None, torch.ones(4)), torch.full((4,), 312.0))
    with pytest.raises(ValueError, match="unique names"):
        BreakableGraphWrapper([segments[0], segments[0]], runtime=runtime)


def test_breakable_wrapper_pool_keys_and_replay_counts() -> None:
    pools = []

    class _PoolRecorder(RecordingRuntime):
        def capture(self, graph, fn, args, kwargs, pool):
            pools.append(pool)
            return super().capture(graph, fn, args, kwargs, pool)

    runtime = _PoolRecorder()
    wrapper = BreakableGraphWrapper([Segment("only", lambda x: x * 2)], runtime=runtime,
                                    pool="pool")  # fmt: skip
    x = torch.ones(2)
    assert wrapper(x) is not None and runtime.events == []  # no context: eager, no key
    assert wrapper.captured_keys() == []
    first = wrapper.run("k", x)
    wrapper.run("k", x)
    wrapper.run("k", x)
    assert pools == ["pool"] and wrapper.captured_keys() == ["k"]
    assert wrapper.states["k"].segments["only"].replays == 2
    assert wrapper.run("k", x) is first
    with pytest.raises(ValueError, match=r"^segment 'only' got 2 inputs on replay, 1 at capture$"):
        wrapper.run("k", x, x)


def test_breakable_wrapper_translates_capture_errors_and_copies_only_tensors() -> None:
    runtime = RecordingRuntime()
    wrapper = BreakableGraphWrapper([Segment("s", lambda x, n: x * n)], runtime=runtime)
    runtime.fail_next_capture = RuntimeError("alloc sq cq fail")
    with pytest.raises(GraphCaptureError, match="HDK"):
        wrapper.run("k", torch.ones(1), 2)
    runtime.fail_next_capture = RuntimeError("other")
    with pytest.raises(RuntimeError, match=r"^other$"):
        wrapper.run("j", torch.ones(1), 2)
    static = torch.ones(1)
    wrapper.run("i", static, 2)
    wrapper.run("i", torch.full((1,), 7.0), 3)  # the int is not a buffer: left as captured
    assert torch.equal(static, torch.full((1,), 7.0))
