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
run the reference (the kernel defines neither), as do rotary sizes the kernel rejects
(``rotary_dim`` a multiple of 32 for fp16/bf16, of 16 for float32).
"""

from __future__ import annotations

from collections.abc import Sequence
from types import ModuleType

import torch

from ascend_kernels.npu_contract import mrope_rotary_supported
from ascend_kernels.ops_rope import check_heads, check_rope_args, heads_view, rope_into
from ascend_kernels.out_variants import into_fresh_outputs
from ascend_kernels.row_chunks import Scratch, chunk_rows, chunks
from ascend_kernels.validation import check, check_devices, check_out


def _check_section(half: int, mrope_section: Sequence[int]) -> None:
    check(
        len(mrope_section) == 3 and all(s >= 0 for s in mrope_section),
        f"mrope_section must be 3 non-negative sizes [t, h, w], got {list(mrope_section)}",
    )
    check(
        sum(mrope_section) == half,
        f"mrope_section {list(mrope_section)} must add up to rotary_dim / 2 = {half}",
    )


def frequency_rows(half: int, mrope_section: Sequence[int], interleaved: bool) -> torch.Tensor:
    """Position row (0, 1 or 2) of each of the ``half`` frequencies, as an int64 tensor."""
    _check_section(half, mrope_section)
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
    is_neox: bool,
    interleaved: bool,
) -> None:
    """Argument checks of ``ascend::mrotary_embedding`` (position values: checked where the
    cache rows are gathered, as ``rotary_embedding`` does)."""
    check_devices(("q", q), ("positions", positions), ("k", k), ("cos_sin_cache", cos_sin_cache))
    check(
        positions.dim() == 1 or (positions.dim() == 2 and positions.shape[0] == 3),
        f"positions must be [T] or [3, T], got {list(positions.shape)}",
    )
    check_rope_args(positions, cos_sin_cache, head_size, rotary_dim)
    tokens = positions.shape[-1]
    check_heads(q, tokens, head_size, "q")
    check_heads(k, tokens, head_size, "k")
    if positions.dim() == 2:
        _check_section(rotary_dim // 2, mrope_section)


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
    mrotary_embedding_check(
        positions, q, k, cos_sin_cache, head_size, rotary_dim, mrope_section, is_neox, interleaved
    )
    tokens = positions.shape[-1]
    half = rotary_dim // 2
    pos = positions.reshape(1, tokens) if positions.dim() == 1 else positions
    if positions.dim() == 1:
        rows = torch.zeros(half, dtype=torch.int64)
    else:
        rows = frequency_rows(half, mrope_section, interleaved)
    rows = rows.to(cos_sin_cache.device)
    freq = torch.arange(half, device=cos_sin_cache.device)
    q3 = heads_view(q, tokens, head_size)
    k3 = heads_view(k, tokens, head_size)
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
        _gather(cos_sin_cache, chosen, freq, cos[:, 0], sin[:, 0])
        rope_into(cos, sin, q3[start:stop], qo3[start:stop], rotary_dim, is_neox, scratch, "q")
        rope_into(cos, sin, k3[start:stop], ko3[start:stop], rotary_dim, is_neox, scratch, "k")
    return q_out, k_out


def _gather(
    cache: torch.Tensor, chosen: torch.Tensor, freq: torch.Tensor, cos: torch.Tensor,
    sin: torch.Tensor,
) -> None:
    """``cos[t, j] = cache[chosen[t, j], j]`` and ``sin`` from the second half of the row."""
    width = cache.shape[1]
    flat = cache.reshape(-1)
    # Flat indices rather than ``cache[chosen, freq]``: a negative position then fails here
    # instead of silently wrapping around to the last rows.
    at = chosen * width + freq
    try:
        cos.copy_(flat.index_select(0, at.reshape(-1)).view(at.shape))
        sin.copy_(flat.index_select(0, (at + width // 2).reshape(-1)).view(at.shape))
    except IndexError as exc:
        raise ValueError(
            f"positions must lie in [0, {cache.shape[0]}) (the rows of cos_sin_cache),"
            f" got values in [{int(chosen.min())}, {int(chosen.max())}]"
        ) from exc


def mrotary_embedding_fake(
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
    """Fake ``ascend::mrotary_embedding``: checks the arguments; outputs shaped like q and k."""
    mrotary_embedding_check(
        positions, q, k, cos_sin_cache, head_size, rotary_dim, mrope_section, is_neox, interleaved
    )
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
    if (
        rotary_dim != head_size
        or (interleaved and positions.dim() == 2)
        or not mrope_rotary_supported(q.dtype, rotary_dim)
    ):
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
