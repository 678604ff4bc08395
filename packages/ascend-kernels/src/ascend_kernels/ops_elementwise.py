"""``muls_add``: ``x * scale + y``, exactly as the eager expression computes it.

Each step rounds to the input dtype like the ``mul`` and ``add`` it replaces, so a fusion pass
never changes a result bit. It works in chunks through one bounded temporary (never one of x's
size). float32 and float16 use cache-sized chunks, so the product never goes through memory.
bfloat16 uses chunks larger than the L2 cache: measured on the benchmark CPU (2 MiB of L2 per
core), torch's bfloat16 ``mul``/``add`` ran about 2x slower writing a buffer that stays in L2
than streaming to memory (float16 and float32 do not show it), so in bfloat16 the product goes
through an 8 MiB temporary, within a few percent of the unfused kernels (see the notes of
benchmarks/bench_kernels.py).
"""

from __future__ import annotations

import torch

from ascend_kernels.out_variants import into_fresh_outputs
from ascend_kernels.row_chunks import Scratch, chunk_rows, chunks
from ascend_kernels.validation import check, check_floating, check_out

# bfloat16 chunks are this many times the default (8 MiB of bfloat16 at the default size):
# larger than L2, see the module docstring.
BF16_CHUNK_MULTIPLE = 8


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
    multiple = BF16_CHUNK_MULTIPLE if x.dtype == torch.bfloat16 else 1
    scratch = Scratch(chunk_rows(total, 1, multiple), x.device)
    for start, stop in chunks(total, 1, multiple):
        tmp = scratch.get("tmp", (), stop - start, x.dtype)
        torch.mul(xf[start:stop], scale, out=tmp)
        torch.add(tmp, yf[start:stop], out=of[start:stop])
    return out


def muls_add_fake(x: torch.Tensor, *_: object) -> torch.Tensor:
    """Fake ``ascend::muls_add`` (and the reference's output allocation): shaped like ``x``."""
    return torch.empty(x.shape, dtype=x.dtype, device=x.device)


muls_add = into_fresh_outputs(muls_add_out, muls_add_fake)
