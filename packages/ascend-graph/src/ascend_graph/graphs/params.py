"""Per-capture-size graph parameters for the main, draft and draft-prefill models.

Owned by one `GraphParamsStore` object (the model runner's), never by module singletons.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

GRAPH_KINDS: tuple[str, ...] = ("main", "draft", "draft_prefill")


@dataclass
class GraphParams:
    """What full-graph replays need per capture size (token count)."""

    events: dict[int, list[Any]] = field(default_factory=dict)
    workspaces: dict[int, Any] = field(default_factory=dict)
    handles: dict[int, list[Any]] = field(default_factory=dict)
    attn_params: dict[int, list[Any]] = field(default_factory=dict)

    @classmethod
    def for_sizes(cls, capture_sizes: Iterable[int]) -> GraphParams:
        sizes = sorted({_size(s) for s in capture_sizes})
        return cls(
            events={s: [] for s in sizes},
            workspaces=dict.fromkeys(sizes),
            handles={s: [] for s in sizes},
            attn_params={s: [] for s in sizes},
        )


def _size(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"capture sizes must be positive integers, got {value!r}")
    return value


def _kind(kind: str) -> str:
    if kind not in GRAPH_KINDS:
        raise ValueError(f"graph kind {kind!r} is unknown; allowed: {', '.join(GRAPH_KINDS)}")
    return kind


class GraphParamsStore:
    """The GraphParams of each model kind, set once per kind, and the attention backend (with
    its update stream) that refreshes them before a full graph replays."""

    def __init__(self) -> None:
        self._params: dict[str, GraphParams] = {}
        self.attention: tuple[Any, Any] | None = None

    def bind_attention(self, attn_backend: Any, update_stream: Any) -> None:
        """Name the attention backend whose ``update_graph_params`` full replays call."""
        self.attention = (attn_backend, update_stream)

    def kinds(self) -> list[str]:
        """The kinds set so far, in ``GRAPH_KINDS`` order."""
        return [k for k in GRAPH_KINDS if k in self._params]

    def set(self, kind: str, capture_sizes: Iterable[int]) -> GraphParams:
        if _kind(kind) in self._params:
            raise ValueError(f"graph params for {kind!r} are already set; call reset() first")
        self._params[kind] = GraphParams.for_sizes(capture_sizes)
        return self._params[kind]

    def get(self, kind: str) -> GraphParams | None:
        return self._params.get(_kind(kind))

    def update_workspaces(self, kind: str, num_tokens: int, workspace: Any) -> None:
        """Record the attention workspace of a size (ignored while `kind` is unset)."""
        params = self._params.get(_kind(kind))
        if params is not None:
            params.workspaces[num_tokens] = workspace

    def weak_ref_workspaces(self, weak_ref: Any) -> None:
        """Replace every held workspace by `weak_ref(workspace)` (after a capture)."""
        for params in self._params.values():
            for size, ws in params.workspaces.items():
                if ws is not None:
                    params.workspaces[size] = weak_ref(ws)

    def update_full_graph_params(
        self,
        attn_backend: Any,
        update_stream: Any,
        forward_context: Any,
        num_tokens: int,
        vllm_config: Any,
        speculative_config: Any = None,
        draft_attn_metadatas: Any = None,
    ) -> None:
        """Hand the attention backend the per-replay parameters before a full graph replays
        (with this store, which holds what its captures recorded)."""
        attn_backend.get_impl_cls().update_graph_params(
            update_stream,
            forward_context,
            num_tokens,
            vllm_config,
            speculative_config,
            draft_attn_metadatas=draft_attn_metadatas,
            graph_params=self,
        )

    def reset(self) -> None:
        self._params.clear()
        self.attention = None


def decode_batch_sizes(
    capture_sizes: Iterable[int], num_speculative_tokens: int, max_num_seqs: int
) -> list[int]:
    """Capture sizes a static decode kernel is built for: between q_len = 1 + speculative
    tokens and max_num_seqs * q_len (inclusive), sorted."""
    if num_speculative_tokens < 0 or max_num_seqs <= 0:
        raise ValueError(
            "num_speculative_tokens must be >= 0 and max_num_seqs > 0, got "
            f"{num_speculative_tokens} and {max_num_seqs}"
        )
    q_len = 1 + num_speculative_tokens
    return sorted({s for s in map(_size, capture_sizes) if q_len <= s <= max_num_seqs * q_len})
