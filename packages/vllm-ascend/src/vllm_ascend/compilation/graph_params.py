"""The graph-parameter store of each engine (main, draft and draft-prefill models).

vLLM builds graph wrappers with only (runnable, vllm_config, mode, options), and the NPU model
runner that records attention workspaces and binds the attention backend is another object:
both reach the engine's one ``GraphParamsStore`` through :func:`graph_params_for`. This small
registry (keyed by the VllmConfig object) is the only module-level state;
:func:`reset_graph_params` clears it.
"""

from __future__ import annotations

from typing import Any

from vllm_ascend.runtime.per_config import PerConfig

_STORES: PerConfig[Any] = PerConfig()


def graph_params_for(vllm_config: Any) -> Any:
    """The engine's store, created on first use with every kind the engine captures: ``main``,
    plus ``draft`` and ``draft_prefill`` with speculative decoding, for its capture sizes."""
    from ascend_graph import GraphParamsStore

    found = _STORES.get(vllm_config)
    if found is not None:
        return found
    store = GraphParamsStore()
    cc = getattr(vllm_config, "compilation_config", None)
    sizes = list(getattr(cc, "cudagraph_capture_sizes", None) or [])
    store.set("main", sizes)
    if getattr(vllm_config, "speculative_config", None) is not None:
        store.set("draft", sizes)
        store.set("draft_prefill", sizes)
    return _STORES.set(vllm_config, store)


def reset_graph_params() -> None:
    """Forget every engine's store (tests; sleep mode drops captured graphs with them)."""
    _STORES.clear()
