"""Whole-tensor plain-torch decompositions of the ``torch.ops.ascend.*`` ops, for compilers.

The reference implementations walk cache-sized row chunks with preallocated scratch buffers,
which is right for eager calls and opaque to a compiler. These functions state the same
arithmetic once over whole tensors, in ops a compiler can trace and fuse with its neighbours
(:mod:`ascend_kernels.inductor_lowering` gives them to inductor). They follow the operator
namespace's rule exactly as the references do: float32 compute, one cast to the input dtype at
the end; a fused op rounds an intermediate to the input dtype only where its reference does
(:func:`stored`; ``add_rms_norm`` normalises its float32 sum unrounded, as Ascend's fused
kernel does).

They take the op's arguments in schema order, check nothing (the op's fake implementation has
already checked shapes when the graph was traced) and return fresh tensors.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

F32 = torch.float32


def stored(t32: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``t32`` as the float32 image of its value stored in ``dtype`` (a no-op for float32)."""
    if dtype == F32:
        return t32
    return t32.to(dtype).to(F32)


def _rms32(x32: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    ms = (x32 * x32).mean(dim=-1, keepdim=True)
    return x32 * torch.rsqrt(ms + eps) * w.to(F32)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """``ascend::rms_norm``."""
    return _rms32(x.to(F32), weight, eps).to(x.dtype)


def add_rms_norm(
    x: torch.Tensor,
    residual: torch.Tensor,
    weight: torch.Tensor,
    eps: float,
    bias: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``ascend::add_rms_norm``: the sum is formed in float32, normalised unrounded, and
    stored once in the input dtype as ``residual_out``."""
    sum32 = x.to(F32) + residual.to(F32)
    summed = sum32.to(x.dtype)
    # The norm reads the float32 sum recomputed from x and residual, not the stored sum: a
    # compiler then reduces and normalises each row in one loop.
    y32 = _rms32(sum32, weight, eps)
    if bias is not None:
        y32 = y32 + bias.to(F32)
    return y32.to(x.dtype), summed


def _heads(t: torch.Tensor, tokens: int, head_size: int) -> torch.Tensor:
    return t.reshape(tokens, -1, head_size)


def _rotate(
    x32: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, rotary_dim: int, is_neox: bool,
    dtype: torch.dtype,
) -> torch.Tensor:
    """Rope of ``x32`` ``[T, heads, head]`` with float32 ``cos``/``sin`` ``[T, 1, rotary/2]``,
    stored in ``dtype``.

    neox is written as one elementwise expression over the rotated columns,
    ``x * [cos, cos] + [-x2, x1] * [sin, sin]`` (the same float32 operations, in the same
    order, as ``x1 * cos - x2 * sin`` and ``x2 * cos + x1 * sin``): a compiler then computes
    each output head in the loop that reduces its norm, with no store of the halves between.
    """
    half = rotary_dim // 2
    if is_neox:
        pairs = torch.unflatten(x32[..., :rotary_dim], -1, (2, half))  # [..., (x1, x2), half]
        first = torch.arange(2, device=x32.device)[:, None] == 0
        swapped = pairs.flip(-2)  # (x2, x1)
        turned = torch.where(first, -swapped, swapped)  # (-x2, x1)
        rotated = (pairs * cos[..., None, :] + turned * sin[..., None, :]).to(dtype).flatten(-2)
    else:
        x1, x2 = x32[..., 0:rotary_dim:2], x32[..., 1:rotary_dim:2]
        o1 = (x1 * cos - x2 * sin).to(dtype)
        o2 = (x2 * cos + x1 * sin).to(dtype)
        rotated = torch.stack([o1, o2], dim=-1).flatten(-2)  # the pairs interleaved again
    if rotary_dim < x32.shape[-1]:
        rotated = torch.cat([rotated, x32[..., rotary_dim:].to(dtype)], dim=-1)
    result: torch.Tensor = rotated
    return result


def _cos_sin(
    positions: torch.Tensor, cos_sin_cache: torch.Tensor, rotary_dim: int
) -> tuple[torch.Tensor, torch.Tensor]:
    rows = cos_sin_cache.index_select(0, positions.reshape(-1)).to(F32)
    half = rotary_dim // 2
    return rows[:, None, :half], rows[:, None, half:rotary_dim]


def rotary_embedding(
    positions: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    cos_sin_cache: torch.Tensor,
    head_size: int,
    rotary_dim: int,
    is_neox: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``ascend::rotary_embedding``: outputs shaped like ``q`` and ``k``."""
    tokens = positions.numel()
    cos, sin = _cos_sin(positions, cos_sin_cache, rotary_dim)
    outs = []
    for t in (q, k):
        rotated = _rotate(_heads(t, tokens, head_size).to(F32), cos, sin, rotary_dim, is_neox,
                          t.dtype)
        outs.append(rotated.reshape(t.shape))
    return outs[0], outs[1]


def _norm_heads32(
    src: torch.Tensor, weight: torch.Tensor, eps: float, bias: torch.Tensor | None
) -> torch.Tensor:
    """Per-head RMSNorm stored in ``src``'s dtype, then the bias added in that dtype."""
    normed = stored(_rms32(src.to(F32), weight, eps), src.dtype)
    if bias is not None:
        normed = stored(normed + bias.to(F32), src.dtype)
    return normed


def split_qkv_rmsnorm_rope(
    qkv: torch.Tensor,
    q_weight: torch.Tensor,
    k_weight: torch.Tensor,
    positions: torch.Tensor,
    cos_sin_cache: torch.Tensor,
    q_size: int,
    kv_size: int,
    head_size: int,
    rotary_dim: int,
    is_neox: bool,
    eps: float,
    q_bias: torch.Tensor | None = None,
    k_bias: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``ascend::split_qkv_rmsnorm_rope``: split, per-head norm (stored), rope; ``v`` copied."""
    tokens = qkv.shape[0]
    q, k, v = torch.split(qkv, [q_size, kv_size, kv_size], dim=-1)
    cos, sin = _cos_sin(positions, cos_sin_cache, rotary_dim)
    outs = []
    for t, w, b, width in ((q, q_weight, q_bias, q_size), (k, k_weight, k_bias, kv_size)):
        normed = _norm_heads32(_heads(t, tokens, head_size), w, eps, b)
        rotated = _rotate(normed, cos, sin, rotary_dim, is_neox, qkv.dtype)
        outs.append(rotated.reshape(tokens, width))
    return outs[0], outs[1], v.clone(memory_format=torch.contiguous_format)


def muls_add(x: torch.Tensor, y: torch.Tensor, scale: float) -> torch.Tensor:
    """``ascend::muls_add``: ``x * scale + y`` in float32, one cast."""
    return (x.to(F32) * scale + y.to(F32)).to(x.dtype)


def silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    """``ascend::silu_and_mul``: ``silu(x[..., :d]) * x[..., d:]`` in float32, one cast."""
    d = x.shape[-1] // 2
    x32 = x.to(F32)
    # silu of a contiguous gate, as the reference computes it (a strided view takes torch's
    # non-vectorised path, which rounds some values differently)
    gate = torch.nn.functional.silu(x32[..., :d].contiguous())
    return (gate * x32[..., d:]).to(x.dtype)


# Op name -> decomposition, for the ops that host-CPU model graphs hold.
DECOMPOSITIONS: dict[str, Callable[..., Any]] = {
    "rms_norm": rms_norm,
    "add_rms_norm": add_rms_norm,
    "rotary_embedding": rotary_embedding,
    "split_qkv_rmsnorm_rope": split_qkv_rmsnorm_rope,
    "muls_add": muls_add,
    "silu_and_mul": silu_and_mul,
}
