"""Rules of the graph wrappers and runtimes at their boundaries (complements
test_graph_wrappers.py): counters, pass-through of keyword arguments, what is kept strongly or
weakly, the exact error messages, and the bounds of the size helpers."""

from __future__ import annotations

import types
import weakref

import pytest
import torch
from ascend_graph import (
    BreakableGraphWrapper,
    GraphCaptureError,
    GraphParamsStore,
    GraphWrapper,
    NPUGraphRuntime,
    RecordingRuntime,
    RuntimeMode,
    Segment,
    decode_batch_sizes,
    translate_capture_error,
)
from ascend_graph.graphs.errors import GraphInputMismatchError
from ascend_graph.graphs.params import GraphParams


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


def test_a_new_params_store_has_no_attention_backend_until_one_is_bound() -> None:
    store = GraphParamsStore()
    assert store.attention is None and store.kinds() == []
    store.bind_attention("backend", "stream")
    assert store.attention == ("backend", "stream")
    store.reset()
    assert store.attention is None


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


def test_runtime_mode_parse_accepts_names_and_enums_with_a_name() -> None:
    vllm_like = types.SimpleNamespace(name="full")
    assert RuntimeMode.parse(vllm_like) is RuntimeMode.FULL
    assert RuntimeMode.parse("piecewise") is RuntimeMode.PIECEWISE
    assert RuntimeMode.parse(RuntimeMode.NONE) is RuntimeMode.NONE
    for bad in (types.SimpleNamespace(value="FULL"), 2, None):
        with pytest.raises(ValueError, match="allowed: NONE, PIECEWISE, FULL"):
            RuntimeMode.parse(bad)


@pytest.mark.parametrize(
    ("message", "translated"),
    [
        ("The stream resources are insufficient", True),
        ("error 207008 while creating a stream", True),
        ("error 207008", False),  # the code alone, without streams: something else
        ("stream destroyed", False),
    ],
)
def test_stream_exhaustion_is_recognised(message, translated) -> None:
    result = translate_capture_error(RuntimeError(message))
    assert (result is not None) == translated
    if translated:
        assert isinstance(result, GraphCaptureError) and "207008" in str(result)


def test_decode_batch_sizes_bounds() -> None:
    assert decode_batch_sizes([1, 2, 3], 0, 1) == [1]  # max_num_seqs at its minimum
    message = r"^num_speculative_tokens must be >= 0 and max_num_seqs > 0, got {} and {}$"
    for spec, seqs in ((-1, 4), (0, 0), (-1, 0)):
        with pytest.raises(ValueError, match=message.format(spec, seqs)):
            decode_batch_sizes([1], spec, seqs)


def test_graph_params_for_sizes_start_empty_per_size() -> None:
    params = GraphParams.for_sizes([2, 1, 2])
    assert params.events == {1: [], 2: []} and params.handles == {1: [], 2: []}
    assert params.attn_params == {1: [], 2: []} and params.workspaces == {1: None, 2: None}
    params.handles[1].append("h")
    assert params.handles[2] == [] and params.attn_params[1] == []  # separate lists
    for bad in (True, 0, -1, 1.0):
        with pytest.raises(ValueError, match="capture sizes must be positive integers"):
            GraphParams.for_sizes([bad])


def test_recording_runtime_counts_replays_and_keeps_non_tensors() -> None:
    runtime = RecordingRuntime(rerun_on_replay=True)
    graph = runtime.new_graph()
    assert runtime.graphs == [graph]
    out = runtime.capture(graph, scaled, (torch.ones(2),), {"scale": 2.0}, None)
    runtime.replay(graph)
    runtime.replay(graph)
    assert graph.replays == 2 and torch.equal(out, torch.full((2,), 2.0))
    ref = runtime.weak_ref((out, 3, "tag"))
    assert isinstance(ref[0], weakref.ref) and ref[1:] == (3, "tag")
    assert runtime.resolve(ref)[0] is out
    del out, graph
    runtime.graphs.clear()
    with pytest.raises(RuntimeError, match=r"^a captured graph output was freed while still "
                                           r"replayed$"):  # fmt: skip
        runtime.resolve(ref)


def test_npu_runtime_weak_ref_and_capture_arguments(monkeypatch) -> None:
    from tools.npu_seam import install

    fake = install(monkeypatch)
    try:
        assert NPUGraphRuntime().gc_disable is False
        strong = NPUGraphRuntime()
        x = torch.ones(2)
        assert strong.weak_ref(x) is x
        marked = NPUGraphRuntime(weak_ref_fn=lambda t: ("weak", t))
        assert marked.weak_ref(x) == ("weak", x)
        graph = marked.new_graph()
        out = marked.capture(graph, scaled, (x,), {"scale": 4.0}, "pool")
        assert fake.npu.called("graph") == [{"npu_graph": graph, "pool": "pool"}]
        assert graph.pool == "pool" and graph.captures == 1 and torch.equal(out, x * 4)
    finally:
        fake.close()


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
