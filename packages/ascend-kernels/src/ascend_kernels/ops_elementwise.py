"""``muls_add``: ``x * scale + y``, exactly as the eager expression computes it.

Each step rounds to the input dtype like the ``mul`` and ``add`` it replaces, so a fusion pass
never changes a result bit. It works on cache-sized chunks so the product never goes through
memory and no temporary tensor is allocated. (Measured on this CPU: torch's bfloat16 ``mul``
writing a cache-resident chunk runs slower than streaming to a fresh tensor, so in bfloat16 with
preallocated outputs the chunked form does not beat the two whole-tensor kernels; see
benchmarks/README.md.)
"""

from __future__ import annotations

import torch

from ascend_kernels.row_chunks import Scratch, chunk_rows, chunks
from ascend_kernels.validation import check, check_floating, check_out


def muls_add_out(
    x: torch.Tensor, y: torch.Tensor, scale: float, *, out: torch.Tensor
) -> torch.Tensor:
    """``muls_add`` into a preallocated contiguous ``out`` (shape and dtype of ``x``)."""
    check_floating("x", x)
    check(
        y.shape == x.shape and y.dtype == x.dtype,
        f"y must match x (shape {list(x.shape)}, {x.dtype}), got {list(y.shape)}, {y.dtype}",
    )
    check_out("out", out, x.shape, x.dtype)
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
