"""``mrotary_embedding``: multimodal rotary embedding (vLLM's ``MRotaryEmbedding``).

``positions`` is ``[T]`` (text only: exactly ``rotary_embedding``) or ``[3, T]`` (temporal,
height, width positions). With ``[3, T]`` every frequency ``j`` of the ``rotary_dim / 2``
frequencies takes its cos/sin from one of the three position rows:
- sectioned (``interleaved=False``): row 0 for ``j < s0``, row 1 for ``s0 <= j < s0 + s1``,
  row 2 for the rest, with ``mrope_section = [s0, s1, s2]`` and ``s0 + s1 + s2 = rotary_dim / 2``
  (Qwen2-VL, Qwen2.5-VL);
- interleaved (``interleaved=True``): row 1 when ``j % 3 == 1 and j < 3 * s1``, row 2 when
  ``j % 3 == 2 and j < 3 * s2``, else row 0 (Qwen3-VL).
``cos = cos_sin_cache[positions[row(j), t], j]`` and ``sin`` from the second half of the
cache row; the rotation itself is ``rotary_embedding``'s (neox or gptj pairs, float32, one
cast, values past ``rotary_dim`` unchanged). Outputs are fresh tensors shaped like ``q``/``k``.

The NPU adapter uses ``torch_npu.npu_mrope`` for whole-head, sectioned rotation (mode
``"half"`` for neox, ``"interleave"`` for gptj pairs); interleaved sections and partial rotary
run the reference (the kernel defines neither).
"""

from __future__ import annotations

from collections.abc import Sequence
from types import ModuleType

import torch

from ascend_kernels.ops_rope import rope_into
from ascend_kernels.out_variants import into_fresh_outputs
from ascend_kernels.row_chunks import Scratch, chunk_rows, chunks
from ascend_kernels.validation import (
    check,
    check_devices,
    check_floating,
    check_index,
    check_out,
)


def frequency_rows(half: int, mrope_section: Sequence[int], interleaved: bool) -> torch.Tensor:
    """Position row (0, 1 or 2) of each of the ``half`` frequencies, as an int64 tensor."""
    check(
        len(mrope_section) == 3 and all(s >= 0 for s in mrope_section),
        f"mrope_section must be 3 non-negative sizes [t, h, w], got {list(mrope_section)}",
    )
    check(
        sum(mrope_section) == half,
        f"mrope_section {list(mrope_section)} must add up to rotary_dim / 2 = {half}",
    )
    j = torch.arange(half)
    if interleaved:
        rows = torch.zeros(half, dtype=torch.int64)
        rows[(j % 3 == 1) & (j < 3 * mrope_section[1])] = 1
        rows[(j % 3 == 2) & (j < 3 * mrope_section[2])] = 2
        return rows
    t, h, _ = mrope_section
    return (j >= t).to(torch.int64) + (j >= t + h).to(torch.int64)


def mrotary_embedding_check(
    positions: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    cos_sin_cache: torch.Tensor,
    head_size: int,
    rotary_dim: int,
    mrope_section: Sequence[int],
    is_neox: bool = True,
    interleaved: bool = False,
) -> int:
    """Validate every argument (devices, shapes, dtypes, sections); returns the token count.

    Run by the reference, the fake and the NPU adapter alike (README "Error contract"); it
    takes all of the op's arguments, the two layout flags have no invalid value.
    """
    check_devices(("q", q), ("positions", positions), ("k", k), ("cos_sin_cache", cos_sin_cache))
    check(head_size > 0, f"head_size must be positive, got {head_size}")
    check(
        0 < rotary_dim <= head_size and rotary_dim % 2 == 0,
        f"rotary_dim must be even and in (0, head_size={head_size}], got {rotary_dim}",
    )
    check_floating("cos_sin_cache", cos_sin_cache)
    check(
        cos_sin_cache.dim() == 2 and cos_sin_cache.shape[0] > 0
        and cos_sin_cache.shape[1] == rotary_dim,
        f"cos_sin_cache must be [max_position > 0, rotary_dim={rotary_dim}],"
        f" got {list(cos_sin_cache.shape)}",
    )
    check_index("positions", positions)
    check(
        positions.dim() == 1 or (positions.dim() == 2 and positions.shape[0] == 3),
        f"positions must be [T] or [3, T], got {list(positions.shape)}",
    )
    if positions.dim() == 2:
        frequency_rows(rotary_dim // 2, mrope_section, False)  # checks the section sizes
    tokens = int(positions.shape[-1])
    check_floating("q", q)
    check_floating("k", k)
    _heads(q, tokens, head_size, "q")
    _heads(k, tokens, head_size, "k")
    return tokens


def _heads(t: torch.Tensor, tokens: int, head_size: int, name: str) -> torch.Tensor:
    """``t`` as ``[T, heads, head_size]`` (from ``[T, heads * head_size]`` or itself)."""
    shaped = t.dim() in (2, 3) and t.shape[0] == tokens
    width = t.shape[-1] * (t.shape[-2] if t.dim() == 3 else 1) if shaped else 0
    check(
        shaped
        and width > 0
        and width % head_size == 0
        and (t.dim() == 2 or t.shape[-1] == head_size),
        f"{name} must be [T={tokens}, heads * {head_size}] or [T, heads, {head_size}],"
        f" got {list(t.shape)}",
    )
    return t if t.dim() == 3 else t.reshape(tokens, width // head_size, head_size)


def mrotary_embedding_out(
    positions: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    cos_sin_cache: torch.Tensor,
    head_size: int,
    rotary_dim: int,
    mrope_section: Sequence[int],
    is_neox: bool,
    interleaved: bool,
    *,
    q_out: torch.Tensor,
    k_out: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``mrotary_embedding`` into preallocated contiguous ``q_out``/``k_out``."""
    tokens = mrotary_embedding_check(
        positions, q, k, cos_sin_cache, head_size, rotary_dim, mrope_section
    )
    half = rotary_dim // 2
    pos = positions.reshape(1, tokens) if positions.dim() == 1 else positions
    limit = cos_sin_cache.shape[0]
    if tokens and not bool(((pos >= 0) & (pos < limit)).all()):
        # Needs the data, so the reference checks it here (the NPU kernel does not: README).
        raise ValueError(
            f"positions must lie in [0, {limit}) (the rows of cos_sin_cache), got values in"
            f" [{int(pos.min())}, {int(pos.max())}]"
        )
    if positions.dim() == 1:
        rows = torch.zeros(half, dtype=torch.int64)
    else:
        rows = frequency_rows(half, mrope_section, interleaved)
    rows = rows.to(cos_sin_cache.device)
    freq = torch.arange(half, device=cos_sin_cache.device)
    q3 = _heads(q, tokens, head_size, "q")
    k3 = _heads(k, tokens, head_size, "k")
    check_out("q_out", q_out, q)
    check_out("k_out", k_out, k)
    qo3, ko3 = q_out.view(q3.shape), k_out.view(k3.shape)
    per_token = (q3.shape[1] + k3.shape[1]) * head_size
    scratch = Scratch(chunk_rows(tokens, per_token), q.device)
    for start, stop in chunks(tokens, per_token):
        n = stop - start
        # [n, half] cache rows chosen per frequency, then the cos and sin columns.
        chosen = pos[:, start:stop].index_select(0, rows).t()
        cos = scratch.get("cos", (1, half), n)
        sin = scratch.get("sin", (1, half), n)
        cos[:, 0].copy_(cos_sin_cache[chosen, freq])
        sin[:, 0].copy_(cos_sin_cache[chosen, freq + half])
        rope_into(cos, sin, q3[start:stop], qo3[start:stop], rotary_dim, is_neox, scratch, "q")
        rope_into(cos, sin, k3[start:stop], ko3[start:stop], rotary_dim, is_neox, scratch, "k")
    return q_out, k_out


def mrotary_embedding_fake(
    positions: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    cos_sin_cache: torch.Tensor,
    head_size: int,
    rotary_dim: int,
    mrope_section: Sequence[int],
    *_: object,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Fake ``ascend::mrotary_embedding``: checks the arguments; shaped like ``q`` and ``k``."""
    mrotary_embedding_check(positions, q, k, cos_sin_cache, head_size, rotary_dim, mrope_section)
    return (
        torch.empty(q.shape, dtype=q.dtype, device=q.device),
        torch.empty(k.shape, dtype=k.dtype, device=k.device),
    )


mrotary_embedding = into_fresh_outputs(mrotary_embedding_out, mrotary_embedding_fake)


def npu_mrotary_embedding(
    npu: ModuleType,
    positions: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    cos_sin_cache: torch.Tensor,
    head_size: int,
    rotary_dim: int,
    mrope_section: Sequence[int],
    is_neox: bool,
    interleaved: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    """NPU adapter: ``npu_mrope`` on 2-D copies (section ``[0, 0, 0]`` for text positions)."""
    if rotary_dim != head_size or (interleaved and positions.dim() == 2):
        q_rot, k_rot = mrotary_embedding(
            positions, q, k, cos_sin_cache, head_size, rotary_dim, mrope_section, is_neox,
            interleaved,
        )
        return q_rot, k_rot
    tokens = positions.shape[-1]
    section = [0, 0, 0] if positions.dim() == 1 else [int(s) for s in mrope_section]
    q_rot, k_rot = npu.npu_mrope(
        positions.contiguous(),
        q.reshape(tokens, -1).contiguous(),
        k.reshape(tokens, -1).contiguous(),
        cos_sin_cache.contiguous(),
        head_size,
        mrope_section=section,
        rotary_mode="half" if is_neox else "interleave",
    )
    return q_rot.reshape(q.shape), k_rot.reshape(k.shape)
