"""Rotary embedding and the fused qkv split + per-head RMSNorm + rope.

``cos_sin_cache`` has vLLM's layout ``[max_position, rotary_dim]``: cos for the
``rotary_dim / 2`` frequencies, then sin. For each head, with ``h = rotary_dim / 2``:
neox pairs ``(x[j], x[j + h])``, gptj pairs ``(x[2j], x[2j + 1])``, and each pair becomes
``(x1 * cos - x2 * sin, x2 * cos + x1 * sin)`` in float32 with one cast at the end. Values past
``rotary_dim`` pass through unchanged. ``q``/``k`` are ``[T, heads * head_size]`` or
``[T, heads, head_size]``; outputs are fresh contiguous tensors of the same shapes.
"""

from __future__ import annotations

from types import ModuleType

import torch

from ascend_kernels.npu_contract import mrope_rotary_supported
from ascend_kernels.ops.norm import _rms32, stored
from ascend_kernels.ops.spec import Arguments, OpSpec, rows_of
from ascend_kernels.validation import (
    check_devices,
    check_eps,
    check_floating,
    check_index,
    check_positive,
    check_vector,
)

F32 = torch.float32


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


def check_rotary_embedding(a: Arguments) -> None:
    """``rotary_embedding`` (position values: checked where the cache rows are gathered)."""
    q, k, positions, cache = a["q"], a["k"], a["positions"], a["cos_sin_cache"]
    check_devices(("q", q), ("positions", positions), ("k", k), ("cos_sin_cache", cache))
    check_rope_args(positions, cache, a["head_size"], a["rotary_dim"])
    tokens = positions.numel()
    check_heads(q, tokens, a["head_size"], "q")
    check_heads(k, tokens, a["head_size"], "k")


def check_split_qkv_rmsnorm_rope(a: Arguments) -> None:
    """``split_qkv_rmsnorm_rope`` (position values: checked where the cache rows are
    gathered)."""
    qkv, positions, head_size = a["qkv"], a["positions"], a["head_size"]
    q_size, kv_size = a["q_size"], a["kv_size"]
    check_devices(*((name, a[name]) for name in (
        "qkv", "q_weight", "k_weight", "positions", "cos_sin_cache", "q_bias", "k_bias")))
    check_rope_args(positions, a["cos_sin_cache"], head_size, a["rotary_dim"])
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
    for name in ("q_weight", "k_weight", "q_bias", "k_bias"):
        if a[name] is not None:
            check_vector(name, a[name], head_size)
    check_eps(a["eps"])


def _heads(t: torch.Tensor, tokens: int, head_size: int) -> torch.Tensor:
    # The head count from the width (not -1), so that zero tokens reshape too.
    width = t.shape[-1] if t.dim() == 2 else t.shape[-2] * t.shape[-1]
    return t.reshape(tokens, width // head_size, head_size)


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


def gather_rows(cache: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """``cache.index_select(0, index)``; an index outside the cache is a ``ValueError``."""
    try:
        return cache.index_select(0, index)
    except IndexError as exc:
        # Checked here rather than up front: finding the bad value needs the data, and the
        # happy path then costs nothing extra (the NPU adapters do not check it, see README).
        raise ValueError(
            f"positions must lie in [0, {cache.shape[0]}) (the rows of cos_sin_cache),"
            f" got values in [{int(index.min())}, {int(index.max())}]"
        ) from exc


def _cos_sin(
    positions: torch.Tensor, cos_sin_cache: torch.Tensor, rotary_dim: int
) -> tuple[torch.Tensor, torch.Tensor]:
    rows = gather_rows(cos_sin_cache, positions.reshape(-1)).to(F32)
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


def npu_rotary_embedding(npu: ModuleType, a: Arguments) -> tuple[torch.Tensor, torch.Tensor]:
    """NPU: ``npu_mrope`` in rope mode (1-D positions, section ``[0, 0, 0]``) with the call's
    own ``cos_sin_cache``; fresh outputs.

    Not ATB's ``_npu_rotary_embedding``: it keeps process-wide static cos/sin caches filled on
    its first call and never refreshed (a second engine, or a model with another cache, would
    rotate with the first one's) and takes float16/bfloat16 only (op-plugin ``RopeAtb.cpp``;
    upstream moved A2/A3 to ``npu_mrope``). ``npu_mrope`` takes float32 too; a rotary size it
    does not document (a multiple of 32 for half types, of 16 for float32) and partial rotary
    run the reference.
    """
    positions, q, k, head_size = a["positions"], a["q"], a["k"], a["head_size"]
    rotary_dim = a["rotary_dim"]
    if rotary_dim != head_size or not mrope_rotary_supported(q.dtype, rotary_dim):
        return rotary_embedding(**a)
    tokens = positions.numel()
    q_rot, k_rot = npu.npu_mrope(
        positions.reshape(tokens), q.reshape(tokens, -1), k.reshape(tokens, -1),
        a["cos_sin_cache"], head_size, mrope_section=[0, 0, 0],
        rotary_mode="half" if a["is_neox"] else "interleave",
    )
    return q_rot.reshape(q.shape), k_rot.reshape(k.shape)


#: The arguments ``split_qkv_rmsnorm_rope`` passes on to ``rotary_embedding`` as they are.
ROPE_ARGUMENTS = ("positions", "cos_sin_cache", "head_size", "rotary_dim", "is_neox")


def npu_split_qkv_rmsnorm_rope(
    npu: ModuleType, a: Arguments
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """NPU: torch_npu has no single kernel: per-head ``npu_rms_norm`` (+ bias), then the rope
    kernel."""
    qkv, head_size, eps = a["qkv"], a["head_size"], a["eps"]
    q_size, kv_size = a["q_size"], a["kv_size"]
    tokens = qkv.shape[0]
    q, k, v = qkv.split([q_size, kv_size, kv_size], dim=-1)
    q_n = npu.npu_rms_norm(q.reshape(tokens, -1, head_size), a["q_weight"], epsilon=eps)[0]
    k_n = npu.npu_rms_norm(k.reshape(tokens, -1, head_size), a["k_weight"], epsilon=eps)[0]
    if a["q_bias"] is not None:
        q_n = q_n + a["q_bias"]
    if a["k_bias"] is not None:
        k_n = k_n + a["k_bias"]
    rope = {name: a[name] for name in ROPE_ARGUMENTS}
    q_rot, k_rot = npu_rotary_embedding(
        npu, {**rope, "q": q_n.reshape(tokens, q_size), "k": k_n.reshape(tokens, kv_size)}
    )
    return q_rot, k_rot, v.contiguous()


def fake_q_k(a: Arguments) -> tuple[torch.Tensor, torch.Tensor]:
    """Fresh contiguous outputs shaped like ``q`` and ``k``."""
    q, k = a["q"], a["k"]
    return q.new_empty(q.shape), k.new_empty(k.shape)


def _fake_split(a: Arguments) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    qkv = a["qkv"]
    return (rows_of(qkv, a["q_size"], qkv.dtype), rows_of(qkv, a["kv_size"], qkv.dtype),
            rows_of(qkv, a["kv_size"], qkv.dtype))


SPECS = (
    OpSpec(
        "rotary_embedding",
        "(Tensor positions, Tensor q, Tensor k, Tensor cos_sin_cache, int head_size,"
        " int rotary_dim, bool is_neox) -> (Tensor q_out, Tensor k_out)",
        check_rotary_embedding, rotary_embedding, fake=fake_q_k, npu=npu_rotary_embedding,
        decompose=True,
        out_names=("q_out", "k_out"),
    ),
    OpSpec(
        "split_qkv_rmsnorm_rope",
        "(Tensor qkv, Tensor q_weight, Tensor k_weight, Tensor positions,"
        " Tensor cos_sin_cache, int q_size, int kv_size, int head_size, int rotary_dim,"
        " bool is_neox, float eps, Tensor? q_bias=None, Tensor? k_bias=None)"
        " -> (Tensor q, Tensor k, Tensor v)",
        check_split_qkv_rmsnorm_rope, split_qkv_rmsnorm_rope, fake=_fake_split,
        npu=npu_split_qkv_rmsnorm_rope, decompose=True, out_names=("q_out", "k_out", "v_out"),
    ),
)
