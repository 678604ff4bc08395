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

from ascend_kernels.ops.spec import Arguments, OpSpec, rows_of
from ascend_kernels.validation import check, check_floating

F32 = torch.float32


def check_silu_and_mul(a: Arguments) -> None:
    """``silu_and_mul``: a float ``[..., 2 * d]`` with ``d > 0``."""
    x = a["x"]
    check_floating("x", x)
    check(
        x.dim() >= 1 and x.shape[-1] > 0 and x.shape[-1] % 2 == 0,
        f"x must have an even, non-empty last dim [..., 2 * d], got {list(x.shape)}",
    )


def silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    """``ascend::silu_and_mul``: ``silu(x[..., :d]) * x[..., d:]`` in float32, one cast."""
    d = x.shape[-1] // 2
    x32 = x.to(F32)
    # silu of a contiguous gate (a strided view takes torch's non-vectorised path, which
    # rounds some values differently)
    gate = torch.nn.functional.silu(x32[..., :d].contiguous())
    return (gate * x32[..., d:]).to(x.dtype)


def npu_silu_and_mul(npu: ModuleType, a: Arguments) -> torch.Tensor:
    """NPU: ``npu_swiglu`` over the last dim (gate first, like vLLM)."""
    out: torch.Tensor = npu.npu_swiglu(a["x"], dim=-1)
    return out


SPECS = (
    OpSpec(
        "silu_and_mul", "(Tensor x) -> Tensor",
        check_silu_and_mul, silu_and_mul, npu=npu_silu_and_mul, decompose=True,
        fake=lambda a: rows_of(a["x"], a["x"].shape[-1] // 2, a["x"].dtype),
    ),
)
