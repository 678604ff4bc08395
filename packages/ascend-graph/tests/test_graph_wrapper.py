"""GraphWrapper / BreakableGraphWrapper / GraphParamsStore with the recording runtime."""

from __future__ import annotations

import weakref

import pytest
import torch
from ascend_graph import (
    BreakableGraphWrapper,
    GraphCaptureError,
    GraphParamsStore,
    GraphWrapper,
    RecordingRuntime,
    RuntimeMode,
    Segment,
    decode_batch_sizes,
)
from ascend_graph.graphs.errors import GraphInputMismatchError


class _Counting:
    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        return x * 2


def test_capture_once_per_key_then_replay_without_calling() -> None:
    runtime, fn = RecordingRuntime(), _Counting()
    wrapper = GraphWrapper(fn, "piecewise", runtime=runtime)
    x8, x16 = torch.ones(8), torch.ones(16)
    first = wrapper.run(8, RuntimeMode.PIECEWISE, x8)
    assert fn.calls == 1 and torch.equal(first, x8 * 2)
    again = wrapper.run(8, RuntimeMode.PIECEWISE, x8)
    assert fn.calls == 1 and again is first  # replayed: the captured output buffer
    wrapper.run(16, RuntimeMode.PIECEWISE, x16)
    wrapper.run(16, RuntimeMode.PIECEWISE, x16)
    assert fn.calls == 2 and wrapper.captures == 2
    assert runtime.events == [("capture", 0), ("replay", 0), ("capture", 1), ("replay", 1)]
    assert isinstance(wrapper.entries[8].output, weakref.ref)  # the pool owns the memory
    assert wrapper.calls == 2 and wrapper.unwrap() is fn  # attributes forward to the runnable
    with pytest.raises(AttributeError, match="no_such"):
        wrapper.no_such  # noqa: B018


def test_other_mode_runs_eagerly_and_full_mode_synchronises() -> None:
    runtime, fn = RecordingRuntime(), _Counting()
    wrapper = GraphWrapper(fn, RuntimeMode.FULL, runtime=runtime,
                           context=lambda: ("bd", "FULL"))  # fmt: skip
    wrapper.run("bd", "PIECEWISE", torch.ones(2))
    wrapper.run("bd", RuntimeMode.NONE, torch.ones(2))
    assert fn.calls == 2 and runtime.events == []
    x = torch.ones(2)
    wrapper(x)
    wrapper(x)
    assert runtime.events == [("capture", 0), ("sync",), ("replay", 0)]
    with pytest.raises(ValueError, match="PIECEWISE or FULL"):
        GraphWrapper(fn, "none", runtime=runtime)
    with pytest.raises(ValueError, match="allowed: NONE, PIECEWISE, FULL"):
        wrapper.run("bd", "graph", x)


def test_replay_recomputes_into_static_buffers_and_debug_checks_addresses() -> None:
    runtime, fn = RecordingRuntime(rerun_on_replay=True), _Counting()
    wrapper = GraphWrapper(fn, "PIECEWISE", runtime=runtime, debug=True)
    static = torch.ones(4)
    out = wrapper.run(4, "PIECEWISE", static)
    static.copy_(torch.full((4,), 5.0))  # new data in the captured input buffer
    assert torch.equal(wrapper.run(4, "PIECEWISE", static), torch.full((4,), 10.0))
    assert wrapper.run(4, "PIECEWISE", static) is out
    with pytest.raises(GraphInputMismatchError, match="other addresses"):
        wrapper.run(4, "PIECEWISE", torch.ones(4))


@pytest.mark.parametrize(
    ("message", "hint"),
    [
        ("ACL error: alloc sq cq fail", "HDK to 25.5.1"),
        ("EE9999 INSUFFICIENT_STREAM_RESOURCES", "capture fewer or smaller sizes"),
        ("error code 207008: stream resource exhausted", "FULL_DECODE_ONLY"),
    ],
)
def test_known_capture_errors_are_translated(message, hint) -> None:
    runtime = RecordingRuntime()
    wrapper = GraphWrapper(_Counting(), "FULL", runtime=runtime)
    runtime.fail_next_capture = RuntimeError(message)
    with pytest.raises(GraphCaptureError, match=hint.split()[0]) as info:
        wrapper.run(1, "FULL", torch.ones(1))
    assert hint.lower() in str(info.value).lower()
    assert isinstance(info.value.__cause__, RuntimeError)


def test_unknown_capture_errors_pass_through() -> None:
    runtime = RecordingRuntime()
    runtime.fail_next_capture = RuntimeError("something else")
    with pytest.raises(RuntimeError, match="something else") as info:
        GraphWrapper(_Counting(), "FULL", runtime=runtime).run(1, "FULL", torch.ones(1))
    assert not isinstance(info.value, GraphCaptureError)


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


def test_graph_params_store_and_full_graph_update() -> None:
    store = GraphParamsStore()
    params = store.set("main", [4, 1, 2])
    assert list(params.workspaces) == [1, 2, 4] and params.events[4] == []
    with pytest.raises(ValueError, match="already set"):
        store.set("main", [1])
    store.update_workspaces("draft", 4, torch.ones(1))  # unset kind: ignored
    workspace = torch.ones(3)
    store.update_workspaces("main", 4, workspace)
    store.weak_ref_workspaces(weakref.ref)
    assert store.get("main").workspaces[4]() is workspace
    assert store.get("draft") is None
    with pytest.raises(ValueError, match="main, draft, draft_prefill"):
        store.get("eagle")

    calls = []

    class _Impl:
        @staticmethod
        def update_graph_params(*args, **kwargs):
            calls.append((args, kwargs))

    class _Backend:
        @staticmethod
        def get_impl_cls():
            return _Impl

    store.update_full_graph_params(_Backend, "stream", "ctx", 8, "cfg", "spec",
                                   draft_attn_metadatas=["m"])  # fmt: skip
    assert calls == [(("stream", "ctx", 8, "cfg", "spec"), {"draft_attn_metadatas": ["m"]})]


def test_capture_scope_and_full_replay_hook_run_in_order() -> None:
    import contextlib

    runtime = RecordingRuntime()
    events = runtime.events

    @contextlib.contextmanager
    def scope(key):
        events.append(("enter", key))
        yield
        events.append(("exit", key))

    def model(x: torch.Tensor) -> torch.Tensor:
        events.append(("run",))
        return x + 1

    full = GraphWrapper(model, "full", runtime=runtime, capture_scope=scope,
                        before_full_replay=lambda key: events.append(("update", key)),
                        on_capture=lambda key: events.append(("captured", key)))
    full.run(4, "FULL", torch.ones(4))
    full.run(4, "FULL", torch.ones(4))
    assert events == [("enter", 4), ("capture", 0), ("run",), ("exit", 4), ("captured", 4),
                      ("sync",), ("update", 4), ("replay", 0)]
    events.clear()
    piece = GraphWrapper(model, "piecewise", runtime=runtime,
                         before_full_replay=lambda key: events.append(("update", key)))
    piece.run(2, "PIECEWISE", torch.ones(2))
    piece.run(2, "PIECEWISE", torch.ones(2))
    assert events == [("capture", 1), ("run",), ("replay", 1)]  # no hook for piecewise
    store = GraphParamsStore()
    store.bind_attention("backend", "stream")
    assert store.attention == ("backend", "stream")
    store.set("draft", [1])
    assert store.kinds() == ["draft"]
    store.reset()
    assert store.attention is None and store.kinds() == []


def test_decode_batch_sizes() -> None:
    assert decode_batch_sizes([1, 2, 4, 8, 16, 32], 1, 8) == [2, 4, 8, 16]
    assert decode_batch_sizes([1, 2, 4, 8], 0, 4) == [1, 2, 4]
    with pytest.raises(ValueError, match="positive integers"):
        decode_batch_sizes([0, 2], 0, 4)


def test_npu_runtime_uses_torch_npu_lazily_and_restores_gc(monkeypatch) -> None:
    """Through the seam's torch.npu (calls bound to the real signatures; its graph, like the
    real one, synchronizes and empties the caches on entry): while capturing with gc_disable,
    gc.collect and torch.npu.empty_cache are no-ops; both are back afterwards."""
    import gc

    from ascend_graph import NPUGraphRuntime

    from tools.npu_seam import install

    fake = install(monkeypatch)
    collected: list[int] = []
    monkeypatch.setattr(gc, "collect", lambda *a, **k: collected.append(1) or 0)
    recording_collect = gc.collect
    api = fake.npu

    def body(x):
        gc.collect()  # what a capture of many graphs would otherwise pay for
        torch.npu.empty_cache()
        return x + 1

    try:
        runtime = NPUGraphRuntime(gc_disable=True)
        pool = runtime.graph_pool()
        wrapper = GraphWrapper(body, "FULL", runtime=runtime, pool=pool)
        x = torch.ones(2)
        assert torch.equal(wrapper.run(1, "FULL", x), x + 1)
        wrapper.run(1, "FULL", x)
        assert collected == [] and api.called("empty_cache") == []  # suppressed in capture
        assert api.called("graph") == [{"npu_graph": api.called("graph")[0]["npu_graph"],
                                         "pool": pool}]
        graph = api.called("graph")[0]["npu_graph"]
        assert (graph.captures, graph.replays) == (1, 1)
        assert api.current_stream().synchronized == 1
        assert gc.collect is recording_collect and torch.npu.empty_cache() is None
        assert api.called("empty_cache") == [{}]  # restored after the capture
    finally:
        fake.close()


def test_missing_attribute_is_named_with_the_runnable() -> None:
    fn = _Counting()
    wrapper = GraphWrapper(fn, "piecewise", runtime=RecordingRuntime())
    assert wrapper.calls == 0  # forwarded to the runnable
    with pytest.raises(AttributeError) as info:
        wrapper.no_such_attribute  # noqa: B018
    assert str(info.value) == f"neither GraphWrapper nor {fn!r} has attribute 'no_such_attribute'"
