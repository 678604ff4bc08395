"""GraphParamsStore and decode_batch_sizes: per-size parameters, full-graph updates, bounds."""

from __future__ import annotations

import weakref

import pytest
import torch
from ascend_graph import (
    GraphParamsStore,
    decode_batch_sizes,
)
from ascend_graph.graphs.params import GraphParams


def test_graph_params_store_and_full_graph_update() -> None:
    store = GraphParamsStore()
    params = store.set("main", [4, 1, 2])
    assert list(params.workspaces) == [1, 2, 4] and params.events[4] == []
    with pytest.raises(ValueError, match="already set"):
        store.set("main", [1])
    store.update_workspaces("draft", 4, torch.ones(1))  # unset kind: ignored
    workspace = torch.ones(3)
    store.update_workspaces("main", 4, workspace)
    store.weak_ref_workspaces(weakref.ref)
    assert store.get("main").workspaces[4]() is workspace
    assert store.get("draft") is None
    with pytest.raises(ValueError, match="main, draft, draft_prefill"):
        store.get("eagle")

    calls = []

    class _Impl:
        @staticmethod
        def update_graph_params(*args, **kwargs):
            calls.append((args, kwargs))

    class _Backend:
        @staticmethod
        def get_impl_cls():
            return _Impl

    store.update_full_graph_params(_Backend, "stream", "ctx", 8, "cfg", "spec",
                                   draft_attn_metadatas=["m"])  # fmt: skip
    assert calls == [(("stream", "ctx", 8, "cfg", "spec"),
                      {"draft_attn_metadatas": ["m"], "graph_params": store})]


def test_decode_batch_sizes() -> None:
    assert decode_batch_sizes([1, 2, 4, 8, 16, 32], 1, 8) == [2, 4, 8, 16]
    assert decode_batch_sizes([1, 2, 4, 8], 0, 4) == [1, 2, 4]
    with pytest.raises(ValueError, match="positive integers"):
        decode_batch_sizes([0, 2], 0, 4)


def test_a_new_params_store_has_no_attention_backend_until_one_is_bound() -> None:
    store = GraphParamsStore()
    assert store.attention is None and store.kinds() == []
    store.bind_attention("backend", "stream")
    assert store.attention == ("backend", "stream")
    store.reset()
    assert store.attention is None


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
