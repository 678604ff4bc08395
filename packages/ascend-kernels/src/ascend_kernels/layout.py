"""Host-side helpers for the NPU's fractal NZ weight layout (16x16 blocks, 16x32 for int8)."""

from __future__ import annotations

import torch

from ascend_kernels.validation import check

BLOCK = 16


def _round_up(value: int, multiple: int) -> int:
    """Smallest multiple of ``multiple`` that is >= ``value``."""
    return (value + multiple - 1) // multiple * multiple


def nd_to_nz_2d(t: torch.Tensor) -> torch.Tensor:
    """2-D ``[R, C]`` -> contiguous ``[1, ceil16(C)/16, ceil16(R), 16]`` (zero padded).

    ``out[0, j, r, k] == padded[r, 16 * j + k]``.
    """
    check(t.dim() == 2, f"nd_to_nz_2d needs a 2-D tensor, got shape {list(t.shape)}")
    rows, cols = t.shape
    rows16, cols16 = _round_up(rows, BLOCK), _round_up(cols, BLOCK)
    padded = torch.nn.functional.pad(t, (0, cols16 - cols, 0, rows16 - rows))
    return padded.reshape(1, rows16, cols16 // BLOCK, BLOCK).transpose(1, 2).contiguous()


def nd_to_nz_spec(mask: torch.Tensor) -> torch.Tensor:
    """Attention mask ``[T, S]`` -> ``[1, ceil16(S)/16, ceil16(T), 16]`` (a permuted view)."""
    check(mask.dim() == 2, f"nd_to_nz_spec needs a 2-D mask, got shape {list(mask.shape)}")
    tokens, seq = mask.shape
    tokens16, seq16 = _round_up(tokens, BLOCK), _round_up(seq, BLOCK)
    padded = torch.zeros((1, tokens16, seq16), dtype=mask.dtype, device=mask.device)
    padded[0, :tokens, :seq] = mask
    return padded.reshape(1, tokens16, seq16 // BLOCK, BLOCK).permute(0, 2, 1, 3)


def trans_nd_to_nz(x: torch.Tensor) -> torch.Tensor:
    """``[..., a, b]`` -> ``[..., b / b0, a / a0, a0, b0]`` with blocks 16x16 (16x32 for int8).

    No padding: ``a`` and ``b`` must already be multiples of the block.
    """
    check(x.dim() >= 2, f"trans_nd_to_nz needs at least 2 dims, got shape {list(x.shape)}")
    a0, b0 = (16, 32) if x.dtype == torch.int8 else (16, 16)
    *batch, a, b = x.shape
    check(
        a % a0 == 0 and b % b0 == 0,
        f"trans_nd_to_nz needs the last two dims to be multiples of ({a0}, {b0}) for"
        f" {x.dtype}, got ({a}, {b})",
    )
    nb = len(batch)
    blocked = x.reshape(*batch, a // a0, a0, b // b0, b0)
    return blocked.permute(*range(nb), nb + 2, nb, nb + 1, nb + 3)


def aligned_16(t: torch.Tensor) -> torch.Tensor:
    """Pad dim 0 with zeros up to a multiple of 16; an aligned tensor is returned as is."""
    check(t.dim() >= 1, "aligned_16 needs at least one dim")
    rows = t.shape[0]
    target = _round_up(rows, BLOCK)
    if target == rows:
        return t
    out = torch.zeros((target, *t.shape[1:]), dtype=t.dtype, device=t.device)
    out[:rows] = t
    return out
