"""The graph-parameter store of each engine (main, draft and draft-prefill models)."""
# vLLM builds graph wrappers with only (runnable, vllm_config, mode, options): the wrapper and the
# model runner reach the engine's store through the config.

from __future__ import annotations

from typing import TYPE_CHECKING

from vllm_ascend.engine import engine_of

if TYPE_CHECKING:
    from ascend_graph import GraphParamsStore
    from vllm.config import VllmConfig


def graph_params_for(vllm_config: VllmConfig) -> GraphParamsStore:
    """The engine's store, created on first use with every kind the engine captures."""
    return engine_of(vllm_config).graphs
