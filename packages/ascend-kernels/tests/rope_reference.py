"""Rotary-embedding reference math for the rope and mrope kernel tests, written out in float64
independently of ``ascend_kernels``."""

from __future__ import annotations

import torch


def close(got: torch.Tensor, want: torch.Tensor) -> None:
    """Assert a float32 kernel result matches float64 reference math."""
    # float32 kernel against float64 math: a few float32 roundings apart.
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def want_rope(
    x: torch.Tensor, cache: torch.Tensor, pos_of_freq: torch.Tensor, rotary_dim: int, neox: bool
) -> torch.Tensor:
    """``x`` ``[T, H, D]`` rotated in float64; frequency ``j`` of token ``t`` uses cache row
    ``pos_of_freq[t, j]``."""
    half = rotary_dim // 2
    cache64 = cache.double()
    tokens = x.shape[0]
    cos = torch.empty(tokens, 1, half, dtype=torch.float64)
    sin = torch.empty(tokens, 1, half, dtype=torch.float64)
    for t in range(tokens):
        for j in range(half):
            row = int(pos_of_freq[t, j])
            cos[t, 0, j] = cache64[row, j]
            sin[t, 0, j] = cache64[row, half + j]
    x64 = x.double()
    out = x64.clone()
    first = slice(0, half) if neox else slice(0, rotary_dim, 2)
    second = slice(half, rotary_dim) if neox else slice(1, rotary_dim, 2)
    x1, x2 = x64[..., first], x64[..., second]
    out[..., first] = x1 * cos - x2 * sin
    out[..., second] = x2 * cos + x1 * sin
    return out
