"""int8 quantization and its add+RMSNorm fusions.

- ``quantize``: ``q = clamp(round(x / scale + offset), -128, 127)`` (static, per tensor or per
  channel), float32 arithmetic, round half to even.
- ``dynamic_quant``: per token (every index but the last dim), ``scale = amax(|x|) / 127`` in
  float32 and ``q = clamp(round(x / scale), -128, 127)``; an all-zero row has scale 0 and q 0.
- The fused ops quantize the add+RMSNorm output as stored in the input dtype, so each equals
  ``add_rms_norm`` followed by the quantizer bit for bit.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

import torch

from ascend_kernels.npu_contract import (
    HALF,
    NORM_QUANT_OFFSET_DTYPES,
    QUANTIZE_OFFSET_DTYPES,
    kernel_rows,
    offset_for_kernel,
    per_gamma,
    same_dtype,
    scale_for_kernel,
)
from ascend_kernels.ops.norm import add_rms_norm32, check_norm, stored
from ascend_kernels.ops.spec import Arguments, OpSpec, like
from ascend_kernels.validation import check_devices, check_floating, check_rows

F32 = torch.float32


def check_static_params(x: torch.Tensor, scale: torch.Tensor, offset: torch.Tensor) -> None:
    """``scale`` (floating) and ``offset`` (floating or integer): 1 value or one per channel."""
    width = x.shape[-1]
    for name, t in (("scale", scale), ("offset", offset)):
        numel = t.numel()
        if numel != 1 and numel != width:
            raise ValueError(
                f"{name} must hold 1 value (per tensor) or {width} (per channel), got {numel}"
            )
    check_floating("scale", scale)
    if offset.dtype == torch.bool or offset.is_complex():
        raise ValueError(f"offset must be a floating or integer tensor, got {offset.dtype}")


def check_x(a: Arguments) -> None:
    """A float ``x`` with a non-empty last dim (the dynamic quantizers)."""
    check_floating("x", a["x"])
    check_rows("x", a["x"])


def check_quantize(a: Arguments) -> None:
    """``quantize``: ``x`` and its static ``scale``/``offset`` on one device."""
    check_devices(("x", a["x"]), ("scale", a["scale"]), ("offset", a["offset"]))
    check_x(a)
    check_static_params(a["x"], a["scale"], a["offset"])


def check_add_rms_norm_quant(a: Arguments) -> None:
    """``add_rms_norm_quant``: the norm's arguments and the static quant parameters."""
    check_devices(("x", a["x"]), ("scale", a["scale"]), ("offset", a["offset"]))
    check_norm(a)
    check_static_params(a["x"], a["scale"], a["offset"])


def quant32(src32: torch.Tensor, scale: torch.Tensor, offset: torch.Tensor) -> torch.Tensor:
    """``int8(clamp(round(src32 / scale + offset)))`` with float32 scale and offset."""
    s32, o32 = scale.to(F32).reshape(-1), offset.to(F32).reshape(-1)
    return (src32 / s32 + o32).round().clamp(-128.0, 127.0).to(torch.int8)


def dynamic_quant32(src32: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-row symmetric int8 of float32 rows: ``(q, scale = amax / 127)``."""
    col = src32.abs().amax(dim=-1, keepdim=True) / 127.0
    # An all-zero row divides by 1 instead of 0, giving q = 0 and no NaN.
    divisor = torch.where(col == 0.0, 1.0, col)
    q = (src32 / divisor).round().clamp(-128.0, 127.0).to(torch.int8)
    return q, col.squeeze(-1)


def quantize(x: torch.Tensor, scale: torch.Tensor, offset: torch.Tensor) -> torch.Tensor:
    """``ascend::quantize``."""
    return quant32(x.to(F32), scale, offset)


def dynamic_quant(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``ascend::dynamic_quant``."""
    return dynamic_quant32(x.to(F32))


def add_rms_norm_quant(
    x: torch.Tensor,
    residual: torch.Tensor,
    weight: torch.Tensor,
    scale: torch.Tensor,
    offset: torch.Tensor,
    eps: float,
    bias: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``ascend::add_rms_norm_quant``: ``add_rms_norm`` then ``quantize``."""
    y32, summed = add_rms_norm32(x, residual, weight, eps, bias)
    return quant32(stored(y32, x.dtype), scale, offset), summed


def add_rms_norm_dynamic_quant(
    x: torch.Tensor,
    residual: torch.Tensor,
    weight: torch.Tensor,
    eps: float,
    bias: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``ascend::add_rms_norm_dynamic_quant``: ``add_rms_norm`` then ``dynamic_quant``."""
    y32, summed = add_rms_norm32(x, residual, weight, eps, bias)
    q, scale = dynamic_quant32(stored(y32, x.dtype))
    return q, scale, summed


def npu_quantize(npu: ModuleType, a: Arguments) -> torch.Tensor:
    """NPU: ``npu_quantize`` with div_mode=True, ``round(x / scale + offset)``; axis -1
    covers per-tensor and per-channel."""
    zero_points = offset_for_kernel(a["offset"], QUANTIZE_OFFSET_DTYPES)
    if zero_points is None:
        return quantize(**a)
    out: torch.Tensor = npu.npu_quantize(
        a["x"], scale_for_kernel(a["scale"]).reshape(-1), zero_points.reshape(-1), torch.qint8,
        -1, True,
    )
    return out


def npu_dynamic_quant(npu: ModuleType, a: Arguments) -> tuple[torch.Tensor, torch.Tensor]:
    """NPU: ``npu_dynamic_quant -> (int8 y, float32 per-token scale)``; fp16/bf16 only."""
    x = a["x"]
    if x.dtype not in HALF:
        return dynamic_quant(x)
    q, scale = npu.npu_dynamic_quant(kernel_rows(x))
    return q.reshape(x.shape), scale.reshape(x.shape[:-1])


def _norm_kwargs(a: Arguments, **extra: Any) -> dict[str, Any]:
    # The fused norm+quant kernels take eps as `epsilon` and the optional bias as `beta`.
    kwargs: dict[str, Any] = {"epsilon": a["eps"], **extra}
    if a["bias"] is not None:
        kwargs["beta"] = a["bias"]
    return kwargs


def npu_add_rms_norm_quant(npu: ModuleType, a: Arguments) -> tuple[torch.Tensor, torch.Tensor]:
    """NPU: ``npu_add_rms_norm_quant -> (y1, y2, x1 + x2)``; fp16/bf16 x, gamma-shaped
    scales1 (float32 or bf16) and zero_points1 (int32 or bf16)."""
    x, weight = a["x"], a["weight"]
    zero_points = offset_for_kernel(a["offset"], NORM_QUANT_OFFSET_DTYPES)
    if x.dtype not in HALF or zero_points is None or not same_dtype(x, weight, a["bias"]):
        return add_rms_norm_quant(**a)
    out = npu.npu_add_rms_norm_quant(
        kernel_rows(x), kernel_rows(a["residual"]), weight,
        per_gamma(scale_for_kernel(a["scale"]), weight), per_gamma(zero_points, weight),
        **_norm_kwargs(a),
    )  # fmt: skip
    return out[0].reshape(x.shape), out[2].reshape(x.shape)


def npu_add_rms_norm_dynamic_quant(
    npu: ModuleType, a: Arguments
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """NPU: ``-> (y1, y2, x1 + x2, scale1, scale2)``; output_mask asks for the first
    quantization only. fp16/bf16 x with 2-8 dims, gamma and beta in x's dtype."""
    x, weight = a["x"], a["weight"]
    if x.dtype not in HALF or not same_dtype(x, weight, a["bias"]):
        return add_rms_norm_dynamic_quant(**a)
    kwargs = _norm_kwargs(a, output_mask=[True, False])
    out = npu.npu_add_rms_norm_dynamic_quant(
        kernel_rows(x), kernel_rows(a["residual"]), weight, **kwargs
    )
    return out[0].reshape(x.shape), out[3].reshape(x.shape[:-1]), out[2].reshape(x.shape)


def _q(a: Arguments) -> torch.Tensor:
    return like(a["x"], torch.int8)


def _scale(a: Arguments) -> torch.Tensor:
    x: torch.Tensor = a["x"]
    return x.new_empty(x.shape[:-1], dtype=F32)


SPECS = (
    OpSpec(
        "quantize",
        "(Tensor x, Tensor scale, Tensor offset) -> Tensor",
        check_quantize, quantize, fake=_q, npu=npu_quantize,
    ),
    OpSpec(
        "dynamic_quant",
        "(Tensor x) -> (Tensor q, Tensor scale)",
        check_x, dynamic_quant, fake=lambda a: (_q(a), _scale(a)), npu=npu_dynamic_quant,
        out_names=("out", "scale_out"),
    ),
    OpSpec(
        "add_rms_norm_quant",
        "(Tensor x, Tensor residual, Tensor weight, Tensor scale, Tensor offset,"
        " float eps, Tensor? bias=None) -> (Tensor q, Tensor residual_out)",
        check_add_rms_norm_quant, add_rms_norm_quant, fake=lambda a: (_q(a), like(a["x"])),
        npu=npu_add_rms_norm_quant,
        out_names=("out", "residual_out"),
    ),
    OpSpec(
        "add_rms_norm_dynamic_quant",
        "(Tensor x, Tensor residual, Tensor weight, float eps, Tensor? bias=None)"
        " -> (Tensor q, Tensor scale, Tensor residual_out)",
        check_norm, add_rms_norm_dynamic_quant,
        fake=lambda a: (_q(a), _scale(a), like(a["x"])), npu=npu_add_rms_norm_dynamic_quant,
        out_names=("out", "scale_out", "residual_out"),
    ),
)
