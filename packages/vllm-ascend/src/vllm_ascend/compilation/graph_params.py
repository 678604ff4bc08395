"""The graph-parameter store of each engine (main, draft and draft-prefill models).

vLLM builds graph wrappers with only (runnable, vllm_config, mode, options), and the NPU model
runner that records attention workspaces and binds the attention backend is another object:
both reach the engine's one ``GraphParamsStore`` through :func:`graph_params_for`, which is
``engine_of(vllm_config).graphs``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from vllm_ascend.engine import engine_of

if TYPE_CHECKING:
    from ascend_graph import GraphParamsStore
    from vllm.config import VllmConfig


def graph_params_for(vllm_config: VllmConfig) -> GraphParamsStore:
    """The engine's store (created on first use with every kind the engine captures:
    ``main``, plus ``draft`` and ``draft_prefill`` with speculative decoding)."""
    return engine_of(vllm_config).graphs
