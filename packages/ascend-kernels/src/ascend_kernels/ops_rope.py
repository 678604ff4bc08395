"""Rotary embedding and the fused qkv split + per-head RMSNorm + rope references.

``cos_sin_cache`` has vLLM's layout ``[max_position, rotary_dim]``: cos for the
``rotary_dim / 2`` frequencies, then sin. For each head, with ``h = rotary_dim / 2``:
neox pairs ``(x[j], x[j + h])``, gptj pairs ``(x[2j], x[2j + 1])``, and each pair becomes
``(x1 * cos - x2 * sin, x2 * cos + x1 * sin)`` in float32 with one cast at the end. Values past
``rotary_dim`` pass through unchanged. ``q``/``k`` are ``[T, heads * head_size]`` or
``[T, heads, head_size]``; outputs are fresh contiguous tensors of the same shapes.
"""

from __future__ import annotations

import torch

from ascend_kernels.ops_norm import rms_into
from ascend_kernels.out_variants import into_fresh_outputs
from ascend_kernels.row_chunks import Scratch, chunk_rows, chunks, upcast
from ascend_kernels.validation import (
    check_devices,
    check_eps,
    check_floating,
    check_index,
    check_out,
    check_positive,
    check_vector,
)


def check_rope_args(
    positions: torch.Tensor, cos_sin_cache: torch.Tensor, head_size: int, rotary_dim: int
) -> None:
    """Checks shared by the rope ops: index positions, sizes, a float ``cos_sin_cache``."""
    check_index("positions", positions)
    check_positive("head_size", head_size)
    if not (0 < rotary_dim <= head_size and rotary_dim % 2 == 0):
        raise ValueError(
            f"rotary_dim must be even and in (0, head_size={head_size}], got {rotary_dim}"
        )
    if (
        cos_sin_cache.dim() != 2
        or cos_sin_cache.shape[1] != rotary_dim
        or cos_sin_cache.shape[0] == 0
    ):
        raise ValueError(
            f"cos_sin_cache must be [max_position > 0, rotary_dim={rotary_dim}],"
            f" got {list(cos_sin_cache.shape)}"
        )
    check_floating("cos_sin_cache", cos_sin_cache)


def check_heads(t: torch.Tensor, tokens: int, head_size: int, name: str) -> None:
    """``t`` must be a float ``[T, heads * head_size]`` or ``[T, heads, head_size]``."""
    dims = t.dim()
    if dims not in (2, 3) or t.shape[0] != tokens or (
        t.shape[-1] % head_size if dims == 2 else t.shape[-1] != head_size
    ):
        raise ValueError(
            f"{name} must be [T={tokens}, heads * {head_size}] or [T, heads, {head_size}],"
            f" got {list(t.shape)}"
        )
    check_floating(name, t)


def heads_view(t: torch.Tensor, tokens: int, head_size: int) -> torch.Tensor:
    """A checked ``t`` as ``[T, heads, head_size]`` (a view)."""
    return t if t.dim() == 3 else t.view(tokens, t.shape[-1] // head_size, head_size)


def rotary_embedding_check(
    positions: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    cos_sin_cache: torch.Tensor,
    head_size: int,
    rotary_dim: int,
    is_neox: bool,
) -> None:
    """Argument checks of ``ascend::rotary_embedding`` (position values: see ``_cos_sin``)."""
    check_devices(("q", q), ("positions", positions), ("k", k), ("cos_sin_cache", cos_sin_cache))
    check_rope_args(positions, cos_sin_cache, head_size, rotary_dim)
    tokens = positions.numel()
    check_heads(q, tokens, head_size, "q")
    check_heads(k, tokens, head_size, "k")


def split_qkv_rmsnorm_rope_check(
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
) -> None:
    """Argument checks of ``ascend::split_qkv_rmsnorm_rope`` (position values: ``_cos_sin``)."""
    check_devices(
        ("qkv", qkv), ("q_weight", q_weight), ("k_weight", k_weight), ("positions", positions),
        ("cos_sin_cache", cos_sin_cache), ("q_bias", q_bias), ("k_bias", k_bias),
    )
    check_rope_args(positions, cos_sin_cache, head_size, rotary_dim)
    check_positive("q_size", q_size)
    check_positive("kv_size", kv_size)
    if q_size % head_size or kv_size % head_size:
        raise ValueError(
            f"q_size ({q_size}) and kv_size ({kv_size}) must be multiples of"
            f" head_size ({head_size})"
        )
    check_floating("qkv", qkv)
    if qkv.dim() != 2 or qkv.shape[1] != q_size + 2 * kv_size:
        raise ValueError(
            f"qkv must be [T, q_size + 2 * kv_size = {q_size + 2 * kv_size}],"
            f" got {list(qkv.shape)}"
        )
    tokens = qkv.shape[0]
    if positions.numel() != tokens:
        raise ValueError(f"positions must hold T={tokens} values, got {positions.numel()}")
    for name, t in (
        ("q_weight", q_weight),
        ("k_weight", k_weight),
        ("q_bias", q_bias),
        ("k_bias", k_bias),
    ):
        if t is not None:
            check_vector(name, t, head_size)
    check_eps(eps)


def rope_into(
    cos32: torch.Tensor,
    sin32: torch.Tensor,
    x: torch.Tensor,
    out: torch.Tensor,
    rotary_dim: int,
    is_neox: bool,
    scratch: Scratch,
    tag: str,
) -> None:
    """Rotate ``x`` ``[n, heads, head_size]`` into ``out``; cos/sin are ``[n, 1, rotary_dim/2]``."""
    n, heads, head_size = x.shape
    half = rotary_dim // 2
    if is_neox:
        x1, x2 = x[..., :half], x[..., half:rotary_dim]
        o1, o2 = out[..., :half], out[..., half:rotary_dim]
    else:
        x1, x2 = x[..., 0:rotary_dim:2], x[..., 1:rotary_dim:2]
        o1, o2 = out[..., 0:rotary_dim:2], out[..., 1:rotary_dim:2]
    a = scratch.get(f"{tag}_a", (heads, half), n)
    b = scratch.get(f"{tag}_b", (heads, half), n)
    torch.mul(x1, cos32, out=a)
    torch.mul(x2, sin32, out=b)
    o1.copy_(a.sub_(b))
    torch.mul(x2, cos32, out=a)
    torch.mul(x1, sin32, out=b)
    o2.copy_(a.add_(b))
    if rotary_dim < head_size:
        out[..., rotary_dim:].copy_(x[..., rotary_dim:])


def _cos_sin(
    cos_sin_cache: torch.Tensor, positions: torch.Tensor, scratch: Scratch, n: int
) -> tuple[torch.Tensor, torch.Tensor]:
    rotary_dim = cos_sin_cache.shape[1]
    half = rotary_dim // 2
    cs = scratch.get("cos_sin", (rotary_dim,), n)
    try:
        cs.copy_(cos_sin_cache.index_select(0, positions))
    except IndexError as exc:
        # Checked here rather than up front: finding the bad value needs the data, and the
        # happy path then costs nothing extra (the NPU adapters do not check it, see README).
        raise ValueError(
            f"positions must lie in [0, {cos_sin_cache.shape[0]}) (the rows of cos_sin_cache),"
            f" got values in [{int(positions.min())}, {int(positions.max())}]"
        ) from exc
    return cs[:, None, :half], cs[:, None, half:]


def rotary_embedding_out(
    positions: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    cos_sin_cache: torch.Tensor,
    head_size: int,
    rotary_dim: int,
    is_neox: bool,
    *,
    q_out: torch.Tensor,
    k_out: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``rotary_embedding`` into preallocated contiguous ``q_out``/``k_out`` (shapes of q/k)."""
    rotary_embedding_check(positions, q, k, cos_sin_cache, head_size, rotary_dim, is_neox)
    pos = positions.reshape(-1)
    tokens = pos.shape[0]
    q3 = heads_view(q, tokens, head_size)
    k3 = heads_view(k, tokens, head_size)
    check_out("q_out", q_out, q)
    check_out("k_out", k_out, k)
    qo3, ko3 = q_out.view(q3.shape), k_out.view(k3.shape)
    per_token = (q3.shape[1] + k3.shape[1]) * head_size
    scratch = Scratch(chunk_rows(tokens, per_token), q.device)
    for start, stop in chunks(tokens, per_token):
        cos, sin = _cos_sin(cos_sin_cache, pos[start:stop], scratch, stop - start)
        rope_into(cos, sin, q3[start:stop], qo3[start:stop], rotary_dim, is_neox, scratch, "q")
        rope_into(cos, sin, k3[start:stop], ko3[start:stop], rotary_dim, is_neox, scratch, "k")
    return q_out, k_out


def _norm_heads(
    src: torch.Tensor,
    w32: torch.Tensor,
    eps: float,
    bias: torch.Tensor | None,
    scratch: Scratch,
    tag: str,
) -> torch.Tensor:
    """Per-head RMSNorm of ``src`` ``[n, heads, head_size]`` stored in its dtype (+ bias after)."""
    n, heads, head_size = src.shape
    src32 = upcast(src, scratch, f"{tag}_src")
    dst = scratch.get(f"{tag}_dst", (heads, head_size), n)
    ms = scratch.get(f"{tag}_ms", (heads, 1), n)
    rms_into(src32, w32, eps, dst, ms)
    normed = dst
    if src.dtype != torch.float32:
        normed = scratch.get(f"{tag}_normed", (heads, head_size), n, src.dtype).copy_(dst)
    if bias is not None:
        # The replaced graph adds the bias to the stored norm output, in the model dtype.
        normed.add_(bias)
    return normed


def split_qkv_rmsnorm_rope_out(
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
    *,
    q_out: torch.Tensor,
    k_out: torch.Tensor,
    v_out: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``split_qkv_rmsnorm_rope`` into preallocated contiguous ``q_out``, ``k_out``, ``v_out``.

    Equals: split ``qkv`` into ``[q_size, kv_size, kv_size]``; ``rms_norm`` each head of q and
    k (weights ``[head_size]``; optional bias added to the norm output); ``rotary_embedding``.
    """
    split_qkv_rmsnorm_rope_check(
        qkv, q_weight, k_weight, positions, cos_sin_cache, q_size, kv_size, head_size,
        rotary_dim, is_neox, eps, q_bias, k_bias,
    )
    pos = positions.reshape(-1)
    tokens = qkv.shape[0]
    qh, kh = q_size // head_size, kv_size // head_size
    for name, t, width in (
        ("q_out", q_out, q_size),
        ("k_out", k_out, kv_size),
        ("v_out", v_out, kv_size),
    ):
        check_out(name, t, qkv, torch.Size((tokens, width)))
    v_out.copy_(qkv[:, q_size + kv_size :])
    qw32, kw32 = q_weight.to(torch.float32), k_weight.to(torch.float32)
    qo3, ko3 = q_out.view(tokens, qh, head_size), k_out.view(tokens, kh, head_size)
    per_token = (qh + kh) * head_size
    scratch = Scratch(chunk_rows(tokens, per_token), qkv.device)
    for start, stop in chunks(tokens, per_token):
        n = stop - start
        rows = qkv[start:stop]
        q_in = rows[:, :q_size].view(n, qh, head_size)
        k_in = rows[:, q_size : q_size + kv_size].view(n, kh, head_size)
        q_n = _norm_heads(q_in, qw32, eps, q_bias, scratch, "q")
        k_n = _norm_heads(k_in, kw32, eps, k_bias, scratch, "k")
        cos, sin = _cos_sin(cos_sin_cache, pos[start:stop], scratch, n)
        rope_into(cos, sin, q_n, qo3[start:stop], rotary_dim, is_neox, scratch, "qr")
        rope_into(cos, sin, k_n, ko3[start:stop], rotary_dim, is_neox, scratch, "kr")
    return q_out, k_out, v_out


def rotary_embedding_fake(
    positions: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    cos_sin_cache: torch.Tensor,
    head_size: int,
    rotary_dim: int,
    is_neox: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Fake ``ascend::rotary_embedding``: checks the arguments; outputs shaped like q and k."""
    rotary_embedding_check(positions, q, k, cos_sin_cache, head_size, rotary_dim, is_neox)
    return (
        torch.empty(q.shape, dtype=q.dtype, device=q.device),
        torch.empty(k.shape, dtype=k.dtype, device=k.device),
    )


def split_qkv_rmsnorm_rope_fake(
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
    """Fake ``ascend::split_qkv_rmsnorm_rope``: checks the arguments; ``[T, q]``, ``[T, kv]`` x2."""
    split_qkv_rmsnorm_rope_check(
        qkv, q_weight, k_weight, positions, cos_sin_cache, q_size, kv_size, head_size,
        rotary_dim, is_neox, eps, q_bias, k_bias,
    )
    tokens = qkv.shape[0]
    return (
        qkv.new_empty((tokens, q_size)),
        qkv.new_empty((tokens, kv_size)),
        qkv.new_empty((tokens, kv_size)),
    )


rotary_embedding = into_fresh_outputs(rotary_embedding_out, rotary_embedding_fake)
split_qkv_rmsnorm_rope = into_fresh_outputs(split_qkv_rmsnorm_rope_out, split_qkv_rmsnorm_rope_fake)
