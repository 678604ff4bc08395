"""vLLM's static-graph wrapper for the NPU platform, over ascend-graph's GraphWrapper.

The capture key and runtime mode come from vLLM's forward context (the batch descriptor and
``cudagraph_runtime_mode`` that vLLM's dispatcher set for this step).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any


def forward_context_key() -> tuple[Any, Any]:
    """(batch descriptor, runtime mode) of the current vLLM forward context."""
    from vllm.forward_context import get_forward_context, is_forward_context_available

    if not is_forward_context_available():
        return None, "NONE"
    ctx = get_forward_context()
    return ctx.batch_descriptor, ctx.cudagraph_runtime_mode


class AscendGraphWrapper:
    """Capture/replay one runnable per batch descriptor in its runtime mode (vLLM signature)."""

    def __init__(
        self,
        runnable: Callable[..., Any],
        vllm_config: Any,
        runtime_mode: Any,
        cudagraph_options: Any = None,
        *,
        runtime: Any = None,
        context: Callable[[], tuple[Any, Any]] = forward_context_key,
    ) -> None:
        from ascend_graph import GraphWrapper, NPUGraphRuntime

        self.vllm_config = vllm_config
        self.cudagraph_options = cudagraph_options
        weak = getattr(cudagraph_options, "weak_ref_output", True)
        self._wrapper = GraphWrapper(
            runnable, runtime_mode, runtime=runtime if runtime is not None else NPUGraphRuntime(),
            context=context, debug=os.environ.get("VLLM_LOGGING_LEVEL", "") == "DEBUG",
            weak_ref_output=weak,
        )

    @property
    def runnable(self) -> Callable[..., Any]:
        return self._wrapper.runnable

    @property
    def entries(self) -> dict[Any, Any]:
        return self._wrapper.entries

    def unwrap(self) -> Callable[..., Any]:
        return self._wrapper.unwrap()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._wrapper(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        wrapper = self.__dict__.get("_wrapper")
        if wrapper is not None and hasattr(wrapper.runnable, name):
            return getattr(wrapper.runnable, name)
        raise AttributeError(f"{type(self).__name__} and its runnable have no attribute {name!r}")
