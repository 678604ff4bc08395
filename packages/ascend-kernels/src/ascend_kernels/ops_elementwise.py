"""``muls_add``: ``x * scale + y``, exactly as the eager expression computes it.

Each of the two steps rounds to the input dtype, like the ``mul`` and ``add`` it replaces, so a
fusion pass never changes a result bit; the fused version only skips the temporary's round trip
through memory by working on cache-sized chunks.
"""

from __future__ import annotations

import torch

from ascend_kernels.row_chunks import Scratch, chunk_rows, chunks
from ascend_kernels.validation import check, check_floating


def muls_add_out(
    x: torch.Tensor, y: torch.Tensor, scale: float, *, out: torch.Tensor
) -> torch.Tensor:
    """``muls_add`` into a preallocated contiguous ``out`` (shape and dtype of ``x``)."""
    check_floating("x", x)
    check(
        y.shape == x.shape and y.dtype == x.dtype,
        f"y must match x (shape {list(x.shape)}, {x.dtype}), got {list(y.shape)}, {y.dtype}",
    )
    check(out.shape == x.shape and out.is_contiguous(), "out must be contiguous and shaped like x")
    xf, yf, of = x.reshape(-1), y.reshape(-1), out.view(-1)
    total = xf.shape[0]
    scratch = Scratch(chunk_rows(total, 1), x.device)
    for start, stop in chunks(total, 1):
        tmp = scratch.get("tmp", (), stop - start, x.dtype)
        torch.mul(xf[start:stop], scale, out=tmp)
        torch.add(tmp, yf[start:stop], out=of[start:stop])
    return out


def muls_add(x: torch.Tensor, y: torch.Tensor, scale: float) -> torch.Tensor:
    """Reference ``ascend::muls_add``."""
    return muls_add_out(x, y, scale, out=torch.empty(x.shape, dtype=x.dtype, device=x.device))


def muls_add_fake(x: torch.Tensor, y: torch.Tensor, scale: float) -> torch.Tensor:
    """Fake ``ascend::muls_add``."""
    return torch.empty(x.shape, dtype=x.dtype, device=x.device)
