"""The graph-parameter store of each engine (main, draft and draft-prefill models).

vLLM builds graph wrappers with only (runnable, vllm_config, mode, options), and the NPU model
runner that records attention workspaces and binds the attention backend is another object:
both reach the engine's one ``GraphParamsStore`` through :func:`graph_params_for`, kept per
VllmConfig object by the process setup.
"""

from __future__ import annotations

from typing import Any

from vllm_ascend.runtime.per_config import PerConfig


class GraphParamsStores(PerConfig[Any]):
    """Each engine's ``GraphParamsStore``, held by the process setup."""


def graph_params_for(vllm_config: Any) -> Any:
    """The engine's store, created on first use with every kind the engine captures: ``main``,
    plus ``draft`` and ``draft_prefill`` with speculative decoding, for its capture sizes."""
    from ascend_graph import GraphParamsStore

    from vllm_ascend.runtime.process_setup import current_process_setup

    stores = current_process_setup().state(GraphParamsStores)
    found = stores.get(vllm_config)
    if found is not None:
        return found
    store = GraphParamsStore()
    cc = getattr(vllm_config, "compilation_config", None)
    sizes = list(getattr(cc, "cudagraph_capture_sizes", None) or [])
    store.set("main", sizes)
    if getattr(vllm_config, "speculative_config", None) is not None:
        store.set("draft", sizes)
        store.set("draft_prefill", sizes)
    return stores.set(vllm_config, store)

