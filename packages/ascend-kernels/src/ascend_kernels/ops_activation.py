"""``silu_and_mul``: the SwiGLU gate of vLLM's ``SiluAndMul``.

For ``x`` of shape ``[..., 2 * d]``: ``out = silu(x[..., :d]) * x[..., d:]``, computed in
float32 with one cast to the input dtype at the end (``silu(a) = a * sigmoid(a)``). In float32
this is eager ``F.silu(a) * b`` bit for bit (for a contiguous gate ``a``); in bfloat16/float16
eager rounds ``silu(a)`` to the input dtype before the product, so the two differ by at most
that rounding.

The NPU adapter maps the op onto ``torch_npu.npu_swiglu(x, dim=-1)``, whose definition is the
same (the first half of the last dim is the gate).
"""

from __future__ import annotations

from types import ModuleType

import torch

from ascend_kernels.out_variants import into_fresh_outputs
from ascend_kernels.row_chunks import Scratch, chunk_rows, chunks
from ascend_kernels.validation import check, check_floating, check_out, overlaps


def silu_and_mul_check(x: torch.Tensor) -> None:
    """Argument checks of ``ascend::silu_and_mul``: a float ``[..., 2 * d]`` with ``d > 0``."""
    check_floating("x", x)
    check(
        x.dim() >= 1 and x.shape[-1] > 0 and x.shape[-1] % 2 == 0,
        f"x must have an even, non-empty last dim [..., 2 * d], got {list(x.shape)}",
    )


def silu_and_mul_out(x: torch.Tensor, *, out: torch.Tensor) -> torch.Tensor:
    """``silu_and_mul`` into a preallocated contiguous ``out`` of shape ``[..., d]``, which
    must not share memory with ``x`` (rows are written while later ones are still to read)."""
    silu_and_mul_check(x)
    d = x.shape[-1] // 2
    check_out("out", out, x, torch.Size((*x.shape[:-1], d)))
    check(not overlaps(out, x), "out must not share memory with x")
    rows = out.numel() // d
    x2, o2 = x.reshape(rows, 2 * d), out.view(rows, d)
    scratch = Scratch(chunk_rows(rows, 2 * d), x.device)
    for start, stop in chunks(rows, 2 * d):
        n = stop - start
        gate = scratch.get("gate", (d,), n).copy_(x2[start:stop, :d])
        up = scratch.get("up", (d,), n).copy_(x2[start:stop, d:])
        act = scratch.get("act", (d,), n)
        torch.ops.aten.silu.out(gate, out=act)
        if x.dtype == torch.float32:
            torch.mul(act, up, out=o2[start:stop])
        else:
            o2[start:stop].copy_(act.mul_(up))
    return out


def silu_and_mul_fake(x: torch.Tensor) -> torch.Tensor:
    """Fake ``ascend::silu_and_mul``: checks ``x``; ``[..., d]`` for ``x`` of ``[..., 2 * d]``."""
    silu_and_mul_check(x)
    return x.new_empty((*x.shape[:-1], x.shape[-1] // 2))


silu_and_mul = into_fresh_outputs(silu_and_mul_out, silu_and_mul_fake)


def npu_silu_and_mul(npu: ModuleType, x: torch.Tensor) -> torch.Tensor:
    """NPU adapter: ``npu_swiglu`` over the last dim (gate first, like vLLM)."""
    out: torch.Tensor = npu.npu_swiglu(x, dim=-1)
    return out
