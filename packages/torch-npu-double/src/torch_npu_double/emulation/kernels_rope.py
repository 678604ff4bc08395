"""The emulated rotary kernels: ATB's ``_npu_rotary_embedding`` (with its process-wide static
caches) and ``npu_mrope``.

ATB rope (op-plugin ``op_plugin/ops/atb/RopeAtb.cpp``; CANN ATB RopeOperation): query/key
float16 or bfloat16 only; ``static at::Tensor cosCache, sinCache`` filled on the first call
(``if (!cosCache.defined())``) and never refreshed, so a later call with another
``cos_sin_cache`` silently rotates with the first one; a static sequence-length tensor made
again by a host-to-device copy whenever the token count changes.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

import torch

from torch_npu_double.emulation.kernel_contracts import refuse, require_dtype

ATB_ROPE = "_npu_rotary_embedding"
ATB_SOURCE = "op-plugin op_plugin/ops/atb/RopeAtb.cpp; CANN ATB RopeOperation"


class AtbRopeStatics:
    """The ATB rope's ``static`` tensors: one set per process, like the real op's (owned by
    the installed device; ``reset`` only for a test that needs a fresh process's state)."""

    def __init__(self) -> None:
        self.cos_sin: torch.Tensor | None = None
        self.tokens: int | None = None

    def reset(self) -> None:
        self.cos_sin, self.tokens = None, None


def atb_rotary_embedding(statics: AtbRopeStatics,
                         capturing: Callable[[], bool]) -> Callable[..., None]:
    """``_npu_rotary_embedding`` over ``statics``; ``capturing()`` says whether an NPU graph
    capture is open (the sequence-length tensor's host copy cannot be captured)."""

    def rope(positions: torch.Tensor, query: torch.Tensor, key: torch.Tensor, head_size: int,
             cos_sin_cache: torch.Tensor, is_neox_style: bool) -> None:
        for name, t in (("query", query), ("key", key)):
            require_dtype(ATB_ROPE, name, t, (torch.float16, torch.bfloat16),
                          f"{ATB_SOURCE}: query/key float16 or bfloat16")
        tokens = positions.numel()
        if statics.tokens != tokens:
            if capturing():
                raise refuse(ATB_ROPE, f"the token count changed ({statics.tokens} -> {tokens}) "
                                       "inside an NPU graph capture: the op re-creates its "
                                       "static sequence-length tensor by a pageable "
                                       "host-to-device copy: operation not allowed in capture",
                             ATB_SOURCE)
            statics.tokens = tokens
        if statics.cos_sin is None:
            statics.cos_sin = cos_sin_cache.detach().clone()
        cache = statics.cos_sin
        rotary_dim = cache.shape[-1]
        if rotary_dim != head_size:
            raise NotImplementedError(
                f"the emulated {ATB_ROPE} rotates whole heads only (first cos_sin_cache width "
                f"{rotary_dim}, head_size {head_size})")
        rope_ref = importlib.import_module("ascend_kernels.ops.rope")
        q, k = rope_ref.rotary_embedding(positions, query, key, cache.to(cos_sin_cache.dtype),
                                         head_size, rotary_dim, is_neox_style)
        query.copy_(q)
        key.copy_(k)

    return rope


def npu_mrope(positions: torch.Tensor, query: torch.Tensor, key: torch.Tensor,
              cos_sin_cache: torch.Tensor, head_size: int, *,
              mrope_section: list[int] | None = None, rotary_mode: str | None = "half",
              cache_mode: str | None = "default") -> tuple[torch.Tensor, torch.Tensor]:
    """``ascend::mrotary_embedding`` over whole heads (``rotary_dim`` = the cache's width)."""
    if rotary_mode not in ("half", "interleave") or cache_mode != "default":
        raise NotImplementedError(f"the emulated npu_mrope runs rotary_mode half/interleave "
                                  f"with cache_mode 'default' (got {rotary_mode!r}, "
                                  f"{cache_mode!r})")
    rotary_dim = cos_sin_cache.shape[1]
    if rotary_dim != head_size:
        raise NotImplementedError("the emulated npu_mrope rotates whole heads only")
    section: Any = list(mrope_section) if mrope_section is not None else [0, 0, 0]
    mrope_ref = importlib.import_module("ascend_kernels.ops.mrope")
    q, k = mrope_ref.mrotary_embedding(positions, query, key, cos_sin_cache, head_size,
                                       rotary_dim, section, rotary_mode == "half", False)
    return q, k
