"""GraphWrapper with the recording runtime: capture once, replay, address checks, its errors."""

from __future__ import annotations

import weakref

import pytest
import torch
from ascend_graph import (
    GraphCaptureError,
    GraphParamsStore,
    GraphWrapper,
    RecordingRuntime,
    RuntimeMode,
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






def test_missing_attribute_is_named_with_the_runnable() -> None:
    fn = _Counting()
    wrapper = GraphWrapper(fn, "piecewise", runtime=RecordingRuntime())
    assert wrapper.calls == 0  # forwarded to the runnable
    with pytest.raises(AttributeError) as info:
        wrapper.no_such_attribute  # noqa: B018
    assert str(info.value) == f"neither GraphWrapper nor {fn!r} has attribute 'no_such_attribute'"


def scaled(x: torch.Tensor, *, scale: float = 1.0) -> torch.Tensor:
    return x * scale


def test_keywords_reach_the_runnable_and_replays_are_counted() -> None:
    runtime = RecordingRuntime(rerun_on_replay=True)
    wrapper = GraphWrapper(scaled, "PIECEWISE", runtime=runtime,
                           context=lambda: (8, "PIECEWISE"))  # fmt: skip
    x = torch.ones(8)
    assert torch.equal(wrapper(x, scale=3.0), x * 3)  # capture
    assert torch.equal(wrapper.run(None, "PIECEWISE", x, scale=5.0), x * 5)  # no key: eager
    wrapper(x, scale=3.0)
    assert torch.equal(wrapper(x, scale=3.0), x * 3)  # replays recompute with the keywords
    assert wrapper.entries[8].key == 8 and wrapper.entries[8].replays == 2
    assert runtime.graphs[0].replays == 2


def test_strong_outputs_capture_callback_and_no_address_check_by_default() -> None:
    captured_keys: list[object] = []
    store = GraphParamsStore()
    store.set("main", [4])
    store.update_workspaces("main", 4, torch.ones(2))
    runtime = RecordingRuntime()
    wrapper = GraphWrapper(lambda x: x + 1, "FULL", runtime=runtime, weak_ref_output=False,
                           params=store, on_capture=captured_keys.append)  # fmt: skip
    out = wrapper.run(("decode", 4), "FULL", torch.ones(4))
    assert captured_keys == [("decode", 4)]
    assert wrapper.entries[("decode", 4)].output is out  # held strongly
    assert isinstance(store.get("main").workspaces[4], weakref.ref)  # the runtime's weak ref
    assert wrapper.run(("decode", 4), "FULL", torch.zeros(4)) is out  # other address: no check
    # a structured output held strongly comes back as the very object captured
    pair = GraphWrapper(lambda x: (x + 1, [x * 2]), "FULL", runtime=runtime,
                        weak_ref_output=False)  # fmt: skip
    first = pair.run(1, "FULL", torch.ones(2))
    assert pair.run(1, "FULL", torch.ones(2)) is first
    assert torch.equal(first[0], torch.full((2,), 2.0)) and torch.equal(first[1][0], first[0])


def test_address_check_names_the_moved_arguments() -> None:
    wrapper = GraphWrapper(lambda a, b: a + b, "PIECEWISE", runtime=RecordingRuntime(),
                           debug=True)  # fmt: skip
    a, b = torch.ones(2), torch.ones(2)
    wrapper.run(2, "PIECEWISE", a, b)
    wrapper.run(2, "PIECEWISE", a, b)  # same tensors: fine
    with pytest.raises(GraphInputMismatchError) as moved:
        wrapper.run(2, "PIECEWISE", a, torch.ones(2))
    assert str(moved.value) == (
        "graph for key 2 replayed with tensor inputs at other addresses than at capture "
        "(tensor arguments [1]): the replay would read stale buffers. Copy new data into the "
        "captured input tensors."
    )
    with pytest.raises(GraphInputMismatchError, match=r"\(tensor arguments count changed\)"):
        wrapper.run(2, "PIECEWISE", a, b, torch.ones(2))


def test_wrapper_errors_are_exact() -> None:
    with pytest.raises(ValueError, match=r"^GraphWrapper needs runtime_mode PIECEWISE or FULL, "
                                         r"not NONE$"):  # fmt: skip
        GraphWrapper(scaled, RuntimeMode.NONE, runtime=RecordingRuntime())
    wrapper = GraphWrapper(scaled, "FULL", runtime=RecordingRuntime())
    message = (r"^GraphWrapper was built without a context function; call run\(key, mode, "
               r"\*args\) or pass context=lambda: \(key, mode\)$")  # fmt: skip
    with pytest.raises(RuntimeError, match=message):
        wrapper(torch.ones(1))
    bare = GraphWrapper.__new__(GraphWrapper)  # no runnable yet (e.g. while unpickling)
    with pytest.raises(AttributeError, match="has attribute 'anything'"):
        bare.anything  # noqa: B018
