"""The graph runtimes: mode parsing, the recording runtime, the NPU runtime through torch_npu."""

from __future__ import annotations

import types
import weakref

import pytest
import torch
from ascend_graph import (
    GraphWrapper,
    NPUGraphRuntime,
    RecordingRuntime,
    RuntimeMode,
)


def test_npu_runtime_uses_torch_npu_lazily_and_restores_gc(monkeypatch) -> None:
    """Through the seam's torch.npu (calls bound to the real signatures; its graph, like the
    real one, synchronizes and empties the caches on entry): while capturing with gc_disable,
    gc.collect and torch.npu.empty_cache are no-ops; both are back afterwards."""
    import gc

    from ascend_graph import NPUGraphRuntime
    from torch_npu_double.seam import install

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


def scaled(x: torch.Tensor, *, scale: float = 1.0) -> torch.Tensor:
    return x * scale


def test_runtime_mode_parse_accepts_names_and_enums_with_a_name() -> None:
    vllm_like = types.SimpleNamespace(name="full")
    assert RuntimeMode.parse(vllm_like) is RuntimeMode.FULL
    assert RuntimeMode.parse("piecewise") is RuntimeMode.PIECEWISE
    assert RuntimeMode.parse(RuntimeMode.NONE) is RuntimeMode.NONE
    for bad in (types.SimpleNamespace(value="FULL"), 2, None):
        with pytest.raises(ValueError, match="allowed: NONE, PIECEWISE, FULL"):
            RuntimeMode.parse(bad)


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
    from torch_npu_double.seam import install

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
