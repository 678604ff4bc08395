"""vLLM's static-graph wrapper for the NPU platform, over ascend-graph's GraphWrapper."""
# FULL graphs have the attention backend refresh the step's parameters before replay, without a host
# synchronisation (streams and events order them); PIECEWISE graphs hold no attention.

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator
from typing import Any

from vllm_ascend.base.forward_context import ExtraForwardContext
from vllm_ascend.engine import engine_of
from vllm_ascend.engine.capture_tally import record_capture


def forward_context_key() -> tuple[Any, Any]:
    """(batch descriptor, runtime mode) of the current vLLM forward context."""
    from vllm.forward_context import get_forward_context, is_forward_context_available

    if not is_forward_context_available():
        return None, "NONE"
    ctx = get_forward_context()
    return ctx.batch_descriptor, ctx.cudagraph_runtime_mode


def npu_weak_ref_tensors(value: Any) -> Any:
    """Tensors (also in tuples/lists) as torch_npu weak references that do not own memory."""
    import torch
    import torch_npu  # the NPU runtime only

    if isinstance(value, torch.Tensor):
        return torch_npu._C._weak_ref_tensor(value)
    if isinstance(value, (list, tuple)):
        return type(value)(npu_weak_ref_tensors(v) for v in value)
    return value


def _forward_fields(vllm_config: Any) -> Any:
    """The Ascend fields of the current forward context (None outside one)."""
    from vllm.forward_context import is_forward_context_available

    if not is_forward_context_available():
        return None
    return ExtraForwardContext(bool(getattr(vllm_config, "use_v2_model_runner", False)))


class AscendGraphWrapper:
    """Capture/replay one runnable per batch descriptor in its runtime mode (vLLM's signature)."""

    def __init__(
        self,
        runnable: Callable[..., Any],
        vllm_config: Any,
        runtime_mode: Any,
        cudagraph_options: Any = None,
        *,
        use_eagle: bool = False,
        runtime: Any = None,
        context: Callable[[], tuple[Any, Any]] = forward_context_key,
    ) -> None:
        from ascend_graph import GraphWrapper, NPUGraphRuntime

        self.vllm_config = vllm_config
        self.cudagraph_options = cudagraph_options
        self.use_eagle = use_eagle
        self.engine = engine_of(vllm_config)
        self.params = self.engine.graphs
        pool = None
        if runtime is None:
            from vllm.platforms import current_platform

            gc_disable = bool(getattr(cudagraph_options, "gc_disable", False))
            runtime = NPUGraphRuntime(weak_ref_fn=npu_weak_ref_tensors, gc_disable=gc_disable)
            pool = current_platform.get_global_graph_pool()
        self.runtime = runtime
        self.runtime_mode = runtime_mode
        self._wrapper = GraphWrapper(
            runnable, runtime_mode, runtime=runtime, context=context, pool=pool,
            debug=os.environ.get("VLLM_LOGGING_LEVEL", "") == "DEBUG",
            weak_ref_output=getattr(cudagraph_options, "weak_ref_output", True),
            sync_before_full_replay=False,  # done in _before_full_replay (EAGLE skips it)
            params=self.params, on_capture=self._count_capture,
            capture_scope=self._capturing, before_full_replay=self._before_full_replay,
        )
        self.engine.graph_wrappers.add(self)

    @property
    def graph_pool(self) -> Any:
        """The memory pool captures allocate from (vLLM's name for it)."""
        return self._wrapper.pool

    @graph_pool.setter
    def graph_pool(self, pool: Any) -> None:
        self._wrapper.pool = pool

    @property
    def runnable(self) -> Callable[..., Any]:
        return self._wrapper.runnable

    @property
    def entries(self) -> dict[Any, Any]:
        return self._wrapper.entries

    def unwrap(self) -> Callable[..., Any]:
        return self._wrapper.unwrap()

    def clear(self) -> None:
        self._wrapper.clear()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._wrapper(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        wrapper = self.__dict__.get("_wrapper")
        if wrapper is not None and hasattr(wrapper.runnable, name):
            return getattr(wrapper.runnable, name)
        raise AttributeError(f"{type(self).__name__} and its runnable have no attribute {name!r}")

    @contextlib.contextmanager
    def _capturing(self, key: Any) -> Iterator[None]:
        """A capture's scope: vLLM's check, the forward context's flag, its log line and tally."""
        from vllm.compilation.monitor import validate_cudagraph_capturing_enabled

        validate_cudagraph_capturing_enabled()
        # After ready: logged once, or an error in strict mode.
        mode = getattr(self.runtime_mode, "name", self.runtime_mode)
        self.engine.ready.note(
            "captures", f"{mode} num_tokens={getattr(key, 'num_tokens', key)} (a new shape)")
        fields = _forward_fields(self.vllm_config)
        before = fields.capturing if fields is not None else None
        if fields is not None:
            fields.capturing = True
        start = time.perf_counter()
        try:
            yield
        finally:
            if fields is not None:
                fields.capturing = before
        record_capture(self.engine.captures, key, self.runtime_mode, time.perf_counter() - start)

    @staticmethod
    def _count_capture(key: Any) -> None:
        from vllm.compilation.counter import compilation_counter

        compilation_counter.num_cudagraph_captured += 1

    def _before_full_replay(self, key: Any) -> None:
        from vllm.forward_context import get_forward_context

        fields = _forward_fields(self.vllm_config)
        is_draft = fields is not None and bool(fields.is_draft_model)
        # No host synchronisation here: the attention backend orders its update stream after
        # the work already queued (replay i-1) on the device, and the replay after the update
        # through the events its captured task groups wait on.
        if self.params.attention is None:
            raise RuntimeError(
                "a FULL graph is about to replay but no attention backend is bound to the "
                "engine's graph parameters: the NPU model runner must call "
                "vllm_ascend.engine.engine_of(vllm_config).graphs"
                ".bind_attention(attn_backend, update_stream) before capturing full graphs"
            )
        attn_backend, update_stream = self.params.attention
        self.params.update_full_graph_params(
            attn_backend, update_stream, get_forward_context() if fields else None, key.num_tokens,
            self.vllm_config, self.vllm_config.speculative_config,
            draft_attn_metadatas=fields.draft_attn_metadatas if is_draft else None,
        )
