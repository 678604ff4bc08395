"""RMSNorm: ``rms_norm`` and ``add_rms_norm``, and the float32 helpers the fused ops share.

Definition (float32 throughout, one cast at the end):
``out = x * rsqrt(mean(x**2, -1) + eps) * weight (+ bias)``. ``add_rms_norm`` forms the sum
``x + residual`` in float32 and normalises that float32 sum, as Ascend's fused kernel
(``npu_add_rms_norm``: float32 inside, one cast at the end) and vLLM's native
``fused_add_rms_norm`` do; ``residual_out`` is the sum cast once to the input dtype. So in
bfloat16/float16 ``out`` is not ``rms_norm(residual_out)`` (that reads the rounded sum; the
batch-invariant ``add_rms_norm`` is that composition); in float32 the two are the same. A fused
op rounds an intermediate to the input dtype only where its reference does (:func:`stored`).
"""

from __future__ import annotations

from types import ModuleType

import torch

from ascend_kernels.npu_contract import kernel_rows, same_dtype
from ascend_kernels.ops.spec import Arguments, OpSpec, like
from ascend_kernels.validation import (
    check_devices,
    check_eps,
    check_floating,
    check_rows,
    check_same_shape,
    check_vector,
)

F32 = torch.float32


def check_norm_args(
    x: torch.Tensor,
    weight: torch.Tensor,
    eps: float,
    residual: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
) -> None:
    """The (add-)RMSNorm arguments: same device, float ``x`` with a non-empty last dim H,
    ``weight``/``bias`` ``[H]``, ``residual`` like ``x``, finite ``eps > 0``."""
    check_devices(("x", x), ("weight", weight), ("residual", residual), ("bias", bias))
    check_floating("x", x)
    check_rows("x", x)
    width = x.shape[-1]
    check_vector("weight", weight, width)
    if bias is not None:
        check_vector("bias", bias, width)
    if residual is not None:
        check_same_shape("residual", residual, x)
    check_eps(eps)


def check_norm(a: Arguments) -> None:
    """:func:`check_norm_args` on an op's arguments (``residual``/``bias`` when it has them)."""
    check_norm_args(a["x"], a["weight"], a["eps"], a.get("residual"), a.get("bias"))


def stored(t32: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``t32`` as the float32 image of its value stored in ``dtype`` (a no-op for float32)."""
    if dtype == F32:
        return t32
    return t32.to(dtype).to(F32)


def _rms32(x32: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    ms = (x32 * x32).mean(dim=-1, keepdim=True)
    return x32 * torch.rsqrt(ms + eps) * w.to(F32)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """``ascend::rms_norm``."""
    return _rms32(x.to(F32), weight, eps).to(x.dtype)


def add_rms_norm32(
    x: torch.Tensor,
    residual: torch.Tensor,
    weight: torch.Tensor,
    eps: float,
    bias: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(y32, residual_out)``: the (add-)RMSNorm output in float32 (bias added), before its
    one cast, and the sum stored once in the input dtype."""
    sum32 = x.to(F32) + residual.to(F32)
    summed = sum32.to(x.dtype)
    # The norm reads the float32 sum recomputed from x and residual, not the stored sum: a
    # compiler then reduces and normalises each row in one loop.
    y32 = _rms32(sum32, weight, eps)
    if bias is not None:
        y32 = y32 + bias.to(F32)
    return y32, summed


def add_rms_norm(
    x: torch.Tensor,
    residual: torch.Tensor,
    weight: torch.Tensor,
    eps: float,
    bias: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``ascend::add_rms_norm``: the sum is formed in float32, normalised unrounded, and
    stored once in the input dtype as ``residual_out``."""
    y32, summed = add_rms_norm32(x, residual, weight, eps, bias)
    return y32.to(x.dtype), summed


def npu_rms_norm(npu: ModuleType, a: Arguments) -> torch.Tensor:
    """NPU: ``npu_rms_norm -> (y, rstd)``; gamma must have x's dtype."""
    x, weight = a["x"], a["weight"]
    if not same_dtype(x, weight):
        return rms_norm(**a)
    out: torch.Tensor = npu.npu_rms_norm(kernel_rows(x), weight, epsilon=a["eps"])[0]
    return out.reshape(x.shape)


def npu_add_rms_norm(npu: ModuleType, a: Arguments) -> tuple[torch.Tensor, torch.Tensor]:
    """NPU: ``npu_add_rms_norm -> (y, rstd, x1 + x2)``; no bias input, so it is added after."""
    x, weight, bias = a["x"], a["weight"], a["bias"]
    if not same_dtype(x, weight):
        return add_rms_norm(**a)
    y, _, residual_out = npu.npu_add_rms_norm(
        kernel_rows(x), kernel_rows(a["residual"]), weight, epsilon=a["eps"]
    )
    y, residual_out = y.reshape(x.shape), residual_out.reshape(x.shape)
    if bias is not None:
        y = y + bias
    return y, residual_out


def batch_invariant_add_rms_norm(a: Arguments) -> tuple[torch.Tensor, torch.Tensor]:
    """Batch-invariant ``add_rms_norm``: the sum stored in the input dtype, then
    ``ascend::rms_norm`` of it (bias added after), as two ops: no fused kernel whose
    reduction may depend on the batch. ``out`` reads the rounded sum (module docstring)."""
    summed = a["x"] + a["residual"]
    out = torch.ops.ascend.rms_norm(summed, a["weight"], a["eps"])
    bias = a["bias"]
    return (out if bias is None else out + bias), summed


SPECS = (
    OpSpec(
        "rms_norm",
        "(Tensor x, Tensor weight, float eps) -> Tensor",
        check_norm, rms_norm, fake=lambda a: like(a["x"]), npu=npu_rms_norm, decompose=True,
    ),
    OpSpec(
        "add_rms_norm",
        "(Tensor x, Tensor residual, Tensor weight, float eps, Tensor? bias=None)"
        " -> (Tensor out, Tensor residual_out)",
        check_norm, add_rms_norm, fake=lambda a: (like(a["x"]), like(a["x"])),
        npu=npu_add_rms_norm, batch_invariant=batch_invariant_add_rms_norm, decompose=True,
        out_names=("out", "residual_out"),
    ),
)
