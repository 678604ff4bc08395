"""The per-layer KV cache of the Ascend backend: ``(2, num_blocks, block_size, num_kv_heads,
head_size)``, a view of vLLM's ``[B, H, N, 2*D]`` allocation.
"""

from __future__ import annotations

import torch

BLOCK_SIZE = 128  # the block size FIA's paged attention takes (block_size 128 on A2/A3)


def kv_cache_shape(num_blocks: int, block_size: int, num_kv_heads: int,
                   head_size: int) -> tuple[int, int, int, int, int]:
    """The per-layer cache shape: keys and values outermost."""
    return (2, num_blocks, block_size, num_kv_heads, head_size)


def split_kv_view(view: torch.Tensor) -> torch.Tensor:
    """vLLM's ``[B, H, N, 2*D]`` layer view re-viewed as ``(2, B, N, H, D)`` over the same memory;
    ValueError when that memory is not one dense region."""
    if view.dim() != 4 or view.shape[-1] % 2:
        raise ValueError(f"expected a [blocks, heads, block_size, 2*head_size] KV cache view, "
                         f"got shape {tuple(view.shape)}")
    blocks, heads, block_size, both = view.shape
    if any(s < 0 for s in view.stride()):
        raise ValueError(f"KV cache view with negative strides {view.stride()}")
    span = 1 + sum((n - 1) * s for n, s in zip(view.shape, view.stride(), strict=True))
    if span != view.numel():
        raise ValueError(
            f"the KV cache layout interleaves layers (a layer's view {tuple(view.shape)} with "
            f"strides {view.stride()} spans {span} elements for {view.numel()}); the Ascend "
            "backend needs a layer-outermost layout such as VLLM_KV_CACHE_LAYOUT=LBNHC"
        )
    shape = kv_cache_shape(blocks, block_size, heads, both // 2)
    return torch.as_strided(view, shape, _contiguous_strides(shape), view.storage_offset())


def _contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    strides = []
    step = 1
    for size in reversed(shape):
        strides.append(step)
        step *= size
    return tuple(reversed(strides))
