"""``muls_add``: ``x * scale + y`` computed in float32 with one cast to the input dtype.

That is the operator namespace's rule (every ``ascend::`` op computes in float32 and casts to
the input dtype once, at the end), and what the NPU kernel computes. In float32 it equals eager
``x * s + y`` bit for bit; in bfloat16 and float16 it differs from eager (which rounds the
product to the input dtype before the add) by at most one rounding step, and is the more
accurate of the two.

Contiguous CPU bfloat16 runs the one-pass C loop of :mod:`ascend_kernels.native_loops` (read x
and y once, write out once); everything else, and bfloat16 when no C compiler is available,
works in cache-sized float32 chunks that give the same bits.
"""

from __future__ import annotations

import torch

from ascend_kernels import native_loops
from ascend_kernels.out_variants import into_fresh_outputs
from ascend_kernels.row_chunks import Scratch, chunk_rows, chunks
from ascend_kernels.validation import (
    check_devices,
    check_floating,
    check_no_partial_overlap,
    check_out,
    check_same_shape,
)


def muls_add_check(x: torch.Tensor, y: torch.Tensor, scale: float) -> None:
    """Argument checks of ``ascend::muls_add``: float ``x``, ``y`` like ``x``, same device."""
    check_devices(("x", x), ("y", y))
    check_floating("x", x)
    check_same_shape("y", y, x)


def muls_add_out(
    x: torch.Tensor, y: torch.Tensor, scale: float, *, out: torch.Tensor
) -> torch.Tensor:
    """``muls_add`` into a preallocated contiguous ``out`` (shape and dtype of ``x``); ``out``
    may be ``x`` or ``y`` itself but must not overlap either in part (``ValueError``)."""
    muls_add_check(x, y, scale)
    check_out("out", out, x)
    check_no_partial_overlap("out", out, ("x", x), ("y", y))
    if x.dtype == torch.bfloat16 and x.device.type == "cpu" and x.numel() > 0:
        loop = native_loops.default_loops().muls_add_bf16()
        if loop is not None:
            loop(x.contiguous(), y.contiguous(), out, scale)
            return out
    return muls_add_chunked_out(x, y, scale, out=out)


def muls_add_chunked_out(
    x: torch.Tensor, y: torch.Tensor, scale: float, *, out: torch.Tensor
) -> torch.Tensor:
    """The torch path of :func:`muls_add_out`: float32 chunks that stay in cache."""
    xf, yf, of = x.reshape(-1), y.reshape(-1), out.view(-1)
    total = xf.shape[0]
    scratch = Scratch(chunk_rows(total, 1), x.device)
    for start, stop in chunks(total, 1):
        acc = scratch.get("acc", (), stop - start, torch.float32)
        if x.dtype == torch.float32:
            torch.mul(xf[start:stop], scale, out=acc)
        else:  # a reduced-precision mul would round the product to x's dtype
            acc.copy_(xf[start:stop]).mul_(scale)
        torch.add(acc, yf[start:stop], out=of[start:stop])
    return out


def muls_add_fake(x: torch.Tensor, y: torch.Tensor, scale: float) -> torch.Tensor:
    """Fake ``ascend::muls_add`` (and the reference's output allocation): checks the
    arguments, returns a tensor shaped like ``x``."""
    muls_add_check(x, y, scale)
    return torch.empty(x.shape, dtype=x.dtype, device=x.device)


muls_add = into_fresh_outputs(muls_add_out, muls_add_fake)
