"""AscendGraphWrapper driven by vLLM's CudagraphDispatcher and forward context (FULL and
PIECEWISE), with ascend-graph's recording runtime standing in for NPU graphs.

Every step lands in one event list (the runtime's capture/replay/sync, the runnable's calls
with the capturing flag it saw, the attention backend's parameter updates), so the tests check
what happened and in which order.
"""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any

import pytest
import torch


class RecordingAttention:
    """An attention backend whose impl records ``update_graph_params`` into ``events``."""

    def __init__(self, events: list[tuple[Any, ...]]) -> None:
        outer = self

        class Impl:
            @staticmethod
            def update_graph_params(stream: Any, forward_context: Any, num_tokens: int,
                                    vllm_config: Any, speculative_config: Any = None, *,
                                    draft_attn_metadatas: Any = None,
                                    graph_params: Any = None) -> None:
                outer.seen.append((stream, forward_context, vllm_config, draft_attn_metadatas))
                events.append(("update", num_tokens))

        self.impl = Impl
        self.seen: list[tuple[Any, ...]] = []

    def get_impl_cls(self) -> Any:
        return self.impl


@pytest.fixture
def graph_setup(make_vllm_config: Callable[..., Any]) -> Callable[..., Any]:
    from ascend_graph import RecordingRuntime
    from vllm.config import CompilationMode, CUDAGraphMode
    from vllm.v1.cudagraph_dispatcher import CudagraphDispatcher
    from vllm_ascend.compilation.graph_params import graph_params_for
    from vllm_ascend.compilation.graph_wrapper import AscendGraphWrapper
    from vllm_ascend.process.process_setup import reset_process_setup

    reset_process_setup()

    def build(mode: CUDAGraphMode) -> tuple[Any, ...]:
        cfg = make_vllm_config(max_num_seqs=4)
        cc = cfg.compilation_config
        cc.mode = CompilationMode.VLLM_COMPILE
        cc.cudagraph_mode = mode
        cc.splitting_ops = list(cc._attention_ops)
        cc.cudagraph_capture_sizes, cc.max_cudagraph_capture_size = [1, 2, 4], 4
        dispatcher = CudagraphDispatcher(cfg)
        dispatcher.initialize_cudagraph_keys(mode, 1)
        runtime = RecordingRuntime()
        events = runtime.events
        seen_capturing: list[bool] = []

        def runnable(x: torch.Tensor) -> torch.Tensor:
            from vllm_ascend.base.forward_context import ExtraForwardContext

            seen_capturing.append(bool(ExtraForwardContext(False).capturing))
            events.append(("run", x.shape[0]))
            return x * 2

        runtime_mode = mode.decode_mode() if mode.has_full_cudagraphs() else mode
        wrapper = AscendGraphWrapper(runnable, cfg, runtime_mode, runtime=runtime)
        return cfg, dispatcher, wrapper, events, seen_capturing, graph_params_for(cfg)

    return build


def _step(cfg: Any, dispatcher: Any, wrapper: Any, num_tokens: int, *, uniform: bool) -> Any:
    from vllm.forward_context import set_forward_context

    mode, descriptor = dispatcher.dispatch(num_tokens, uniform_decode=uniform)
    with set_forward_context(None, cfg, cudagraph_runtime_mode=mode,
                             batch_descriptor=descriptor):
        return mode, wrapper(torch.ones(descriptor.num_tokens))


def test_full_graphs_capture_then_update_replay_without_a_host_sync(graph_setup: Any) -> None:
    from vllm.config import CUDAGraphMode

    cfg, dispatcher, wrapper, events, capturing, store = graph_setup(
        CUDAGraphMode.FULL_DECODE_ONLY)
    attention = RecordingAttention(events)
    store.bind_attention(attention, "update-stream")
    workspace = torch.zeros(8)
    store.update_workspaces("main", 2, workspace)

    mode, first = _step(cfg, dispatcher, wrapper, 2, uniform=True)
    assert mode == CUDAGraphMode.FULL
    assert events == [("capture", 0), ("run", 2)] and capturing == [True]
    assert torch.equal(first, torch.full((2,), 2.0))
    # The held workspace became a weak reference after the capture.
    ref = store.get("main").workspaces[2]
    assert not isinstance(ref, torch.Tensor) and ref() is workspace

    mode, again = _step(cfg, dispatcher, wrapper, 2, uniform=True)
    assert mode == CUDAGraphMode.FULL
    assert events[2:] == [("update", 2), ("replay", 0)]  # no ("sync",): no host wait
    assert attention.seen[0][0] == "update-stream" and attention.seen[0][2] is cfg
    assert torch.equal(again, first)

    mode, _ = _step(cfg, dispatcher, wrapper, 3, uniform=False)  # mixed batch: no full graph
    assert mode == CUDAGraphMode.NONE and events[-1] == ("run", 3)
    assert capturing == [True, False]  # the flag is only set while capturing


def test_piecewise_graphs_replay_without_parameter_updates(graph_setup: Any) -> None:
    from vllm.config import CUDAGraphMode

    cfg, dispatcher, wrapper, events, capturing, store = graph_setup(CUDAGraphMode.PIECEWISE)
    store.bind_attention(RecordingAttention(events), None)
    for num_tokens in (3, 3, 1):
        mode, _ = _step(cfg, dispatcher, wrapper, num_tokens, uniform=False)
        assert mode == CUDAGraphMode.PIECEWISE
    assert events == [("capture", 0), ("run", 4), ("replay", 0), ("capture", 1), ("run", 1)]
    assert capturing == [True, True]
    assert len(wrapper.entries) == 2


def test_full_replay_without_a_bound_attention_backend_is_one_clear_error(
    graph_setup: Any,
) -> None:
    from vllm.config import CUDAGraphMode

    cfg, dispatcher, wrapper, events, _, _ = graph_setup(CUDAGraphMode.FULL_DECODE_ONLY)
    _step(cfg, dispatcher, wrapper, 1, uniform=True)
    with pytest.raises(RuntimeError, match=r"bind_attention\(attn_backend, update_stream\)"):
        _step(cfg, dispatcher, wrapper, 1, uniform=True)
    assert ("replay", 0) not in events


def test_the_store_holds_every_model_kind_of_the_engine(make_vllm_config: Any) -> None:
    from vllm_ascend.compilation.graph_params import graph_params_for
    from vllm_ascend.engine.registry import reset_engines

    reset_engines()
    cfg = make_vllm_config()
    cfg.compilation_config.cudagraph_capture_sizes = [1, 8]
    store = graph_params_for(cfg)
    assert store is graph_params_for(cfg) and store.kinds() == ["main"]
    assert sorted(store.get("main").workspaces) == [1, 8]
    drafting = types.SimpleNamespace(compilation_config=cfg.compilation_config,
                                     speculative_config=object())
    assert graph_params_for(drafting).kinds() == ["main", "draft", "draft_prefill"]
    reset_engines()  # a fresh process: a new engine for the config, with a new store
    assert graph_params_for(cfg) is not store


def test_capture_outside_the_capture_phase_is_refused(graph_setup: Any) -> None:
    from vllm.compilation import monitor
    from vllm.config import CUDAGraphMode

    cfg, dispatcher, wrapper, events, _, _ = graph_setup(CUDAGraphMode.PIECEWISE)
    monitor.set_cudagraph_capturing_enabled(False)
    try:
        with pytest.raises(RuntimeError, match="inappropriate time"):
            _step(cfg, dispatcher, wrapper, 2, uniform=False)
    finally:
        monitor.set_cudagraph_capturing_enabled(True)
    assert not any(e[0] == "run" for e in events)


def test_graph_wrapper_captures_per_batch_descriptor(make_vllm_config) -> None:
    from ascend_graph import RecordingRuntime
    from vllm.config import CUDAGraphMode
    from vllm.forward_context import BatchDescriptor
    from vllm_ascend.compilation.graph_wrapper import AscendGraphWrapper, forward_context_key

    calls = []

    def runnable(x):
        calls.append(x.shape[0])
        return x + 1

    runnable.tag = "model"
    state = {"key": (BatchDescriptor(num_tokens=4), CUDAGraphMode.PIECEWISE)}
    runtime = RecordingRuntime()
    wrapper = AscendGraphWrapper(runnable, make_vllm_config(), CUDAGraphMode.PIECEWISE,
                                 runtime=runtime, context=lambda: state["key"])
    x = torch.zeros(4)
    wrapper(x)
    wrapper(x)
    assert calls == [4] and len(wrapper.entries) == 1  # captured once, then replayed
    state["key"] = (BatchDescriptor(num_tokens=4), CUDAGraphMode.NONE)
    wrapper(x)
    assert calls == [4, 4]  # other modes run the runnable directly
    assert wrapper.tag == "model" and wrapper.unwrap() is runnable
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        _ = wrapper.nope
    assert forward_context_key() == (None, "NONE")
