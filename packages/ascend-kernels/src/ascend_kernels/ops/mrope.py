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
from ascend_kernels.ops.rope import (
    _heads,
    _rotate,
    check_heads,
    check_rope_args,
    fake_q_k,
    gather_rows,
)
from ascend_kernels.ops.spec import Arguments, OpSpec
from ascend_kernels.validation import check, check_devices

F32 = torch.float32


def _check_section(half: int, mrope_section: Sequence[int]) -> None:
    check(
        len(mrope_section) == 3 and all(s >= 0 for s in mrope_section),
        f"mrope_section must be 3 non-negative sizes [t, h, w], got {list(mrope_section)}",
    )
    check(
        sum(mrope_section) == half,
        f"mrope_section {list(mrope_section)} must add up to rotary_dim / 2 = {half}",
    )


def frequency_rows(half: int, mrope_section: Sequence[int], interleaved: bool,
                   device: torch.device | None = None) -> torch.Tensor:
    """Position row (0, 1 or 2) of each of the ``half`` frequencies, as an int64 tensor."""
    _check_section(half, mrope_section)
    j = torch.arange(half, device=device)
    if interleaved:
        one = (j % 3 == 1) & (j < 3 * mrope_section[1])
        two = (j % 3 == 2) & (j < 3 * mrope_section[2])
        return one.to(torch.int64) + 2 * two.to(torch.int64)
    t, h, _ = mrope_section
    return (j >= t).to(torch.int64) + (j >= t + h).to(torch.int64)


def check_mrotary_embedding(a: Arguments) -> None:
    """``mrotary_embedding`` (position values: checked where the cache rows are gathered, as
    ``rotary_embedding`` does)."""
    q, k, positions, cache = a["q"], a["k"], a["positions"], a["cos_sin_cache"]
    check_devices(("q", q), ("positions", positions), ("k", k), ("cos_sin_cache", cache))
    check(
        positions.dim() == 1 or (positions.dim() == 2 and positions.shape[0] == 3),
        f"positions must be [T] or [3, T], got {list(positions.shape)}",
    )
    check_rope_args(positions, cache, a["head_size"], a["rotary_dim"])
    tokens = positions.shape[-1]
    check_heads(q, tokens, a["head_size"], "q")
    check_heads(k, tokens, a["head_size"], "k")
    if positions.dim() == 2:
        _check_section(a["rotary_dim"] // 2, a["mrope_section"])


def mrotary_embedding(
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
    """``ascend::mrotary_embedding``: outputs shaped like ``q`` and ``k``."""
    tokens = positions.shape[-1]
    half = rotary_dim // 2
    width = cos_sin_cache.shape[1]
    device = cos_sin_cache.device
    if positions.dim() == 1:
        pos = positions.reshape(1, tokens)
        rows = torch.zeros(half, dtype=torch.int64, device=device)
    else:
        pos = positions
        rows = frequency_rows(half, mrope_section, interleaved, device)
    # [T, half]: the position each frequency of each token takes its cos/sin from, as a flat
    # index into the cache (so a negative position fails instead of wrapping around).
    chosen = pos.index_select(0, rows).t()
    at = (chosen * width + torch.arange(half, device=device)).reshape(-1)
    flat = cos_sin_cache.reshape(-1, 1)
    try:
        cos = gather_rows(flat, at).view(tokens, 1, half).to(F32)
        sin = gather_rows(flat, at + width // 2).view(tokens, 1, half).to(F32)
    except ValueError as exc:
        raise ValueError(
            f"positions must lie in [0, {cos_sin_cache.shape[0]}) (the rows of cos_sin_cache),"
            f" got values in [{int(chosen.min())}, {int(chosen.max())}]"
        ) from exc.__cause__
    outs = []
    for t in (q, k):
        rotated = _rotate(_heads(t, tokens, head_size).to(F32), cos, sin, rotary_dim, is_neox,
                          t.dtype)
        outs.append(rotated.reshape(t.shape))
    return outs[0], outs[1]


def npu_mrotary_embedding(npu: ModuleType, a: Arguments) -> tuple[torch.Tensor, torch.Tensor]:
    """NPU: ``npu_mrope`` on 2-D copies (section ``[0, 0, 0]`` for text positions)."""
    positions, q, k, head_size = a["positions"], a["q"], a["k"], a["head_size"]
    if (
        a["rotary_dim"] != head_size
        or (a["interleaved"] and positions.dim() == 2)
        or not mrope_rotary_supported(q.dtype, a["rotary_dim"])
    ):
        return mrotary_embedding(**a)
    tokens = positions.shape[-1]
    section = [0, 0, 0] if positions.dim() == 1 else [int(s) for s in a["mrope_section"]]
    q_rot, k_rot = npu.npu_mrope(
        positions.contiguous(),
        q.reshape(tokens, -1).contiguous(),
        k.reshape(tokens, -1).contiguous(),
        a["cos_sin_cache"].contiguous(),
        head_size,
        mrope_section=section,
        rotary_mode="half" if a["is_neox"] else "interleave",
    )
    return q_rot.reshape(q.shape), k_rot.reshape(k.shape)


SPECS = (
    OpSpec(
        "mrotary_embedding",
        "(Tensor positions, Tensor q, Tensor k, Tensor cos_sin_cache, int head_size,"
        " int rotary_dim, int[] mrope_section, bool is_neox, bool interleaved)"
        " -> (Tensor q_out, Tensor k_out)",
        check_mrotary_embedding, mrotary_embedding, fake=fake_q_k, npu=npu_mrotary_embedding,
        out_names=("q_out", "k_out"),
    ),
)
