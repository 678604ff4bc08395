"""int8 quantization references and their add+RMSNorm fusions.

- ``quantize``: ``q = clamp(round(x / scale + offset), -128, 127)`` (static, per tensor or per
  channel), float32 arithmetic, round half to even.
- ``dynamic_quant``: per token (every index but the last dim), ``scale = amax(|x|) / 127`` in
  float32 and ``q = clamp(round(x / scale), -128, 127)``; an all-zero row has scale 0 and q 0.
- The fused ops quantize the add+RMSNorm output as stored in the input dtype, so each equals
  ``add_rms_norm`` followed by the quantizer bit for bit.
"""

from __future__ import annotations

from functools import partial

import torch

from ascend_kernels.ops_norm import check_norm_args, normed_chunks
from ascend_kernels.out_variants import into_fresh_outputs
from ascend_kernels.row_chunks import RowSource, as_rows3, float32_chunks, scratch_for
from ascend_kernels.validation import check_devices, check_floating, check_out, check_rows


def quant_into(
    src32: torch.Tensor,
    scale32: torch.Tensor,
    offset32: torch.Tensor,
    q: torch.Tensor,
    tmp: torch.Tensor,
) -> None:
    """``q = int8(clamp(round(src32 / scale32 + offset32)))`` via the float32 ``tmp``."""
    torch.div(src32, scale32, out=tmp)
    tmp.add_(offset32).round_().clamp_(-128.0, 127.0)
    q.copy_(tmp)


def dynamic_quant_into(
    src32: torch.Tensor,
    q: torch.Tensor,
    scale: torch.Tensor,
    tmp: torch.Tensor,
    col: torch.Tensor,
) -> None:
    """Per-row symmetric int8: ``scale = amax/127`` into ``scale`` (shape of ``col`` minus 1)."""
    torch.abs(src32, out=tmp)
    torch.amax(tmp, dim=-1, keepdim=True, out=col)
    col.div_(127.0)
    scale.copy_(col.squeeze(-1))
    # An all-zero row divides by 1 instead of 0, giving q = 0 and no NaN.
    col.masked_fill_(col == 0.0, 1.0)
    torch.div(src32, col, out=tmp)
    tmp.round_().clamp_(-128.0, 127.0)
    q.copy_(tmp)


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


def quantize_check(x: torch.Tensor, scale: torch.Tensor, offset: torch.Tensor) -> None:
    """Argument checks of ``ascend::quantize``."""
    check_devices(("x", x), ("scale", scale), ("offset", offset))
    check_floating("x", x)
    check_rows("x", x)
    check_static_params(x, scale, offset)


def dynamic_quant_check(x: torch.Tensor) -> None:
    """Argument checks of ``ascend::dynamic_quant``."""
    check_floating("x", x)
    check_rows("x", x)


def add_rms_norm_quant_check(
    x: torch.Tensor,
    residual: torch.Tensor,
    weight: torch.Tensor,
    scale: torch.Tensor,
    offset: torch.Tensor,
    eps: float,
    bias: torch.Tensor | None = None,
) -> None:
    """Argument checks of ``ascend::add_rms_norm_quant``."""
    check_devices(("x", x), ("scale", scale), ("offset", offset))
    check_norm_args(x, weight, eps, residual, bias)
    check_static_params(x, scale, offset)


def add_rms_norm_dynamic_quant_check(
    x: torch.Tensor,
    residual: torch.Tensor,
    weight: torch.Tensor,
    eps: float,
    bias: torch.Tensor | None = None,
) -> None:
    """Argument checks of ``ascend::add_rms_norm_dynamic_quant``."""
    check_norm_args(x, weight, eps, residual, bias)


def _static_params(scale: torch.Tensor, offset: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return scale.to(torch.float32).reshape(-1), offset.to(torch.float32).reshape(-1)


def _int8_like(x: torch.Tensor) -> torch.Tensor:
    return torch.empty(x.shape, dtype=torch.int8, device=x.device)


def _scale_like(x: torch.Tensor) -> torch.Tensor:
    return torch.empty(x.shape[:-1], dtype=torch.float32, device=x.device)


def _static_quant_rows(
    x: torch.Tensor,
    source: RowSource,
    scale: torch.Tensor,
    offset: torch.Tensor,
    out: torch.Tensor,
) -> None:
    """Static int8 quantization of every chunk of ``source`` (rows of ``x``) into ``out``."""
    check_out("out", out, x, dtype=torch.int8)
    s32, o32 = _static_params(scale, offset)
    q3 = out.view(as_rows3(x).shape)
    scratch = scratch_for(x)
    for start, stop, src32 in source(scratch):
        tmp = scratch.get("tmp", tuple(src32.shape[1:]), stop - start)
        quant_into(src32, s32, o32, q3[start:stop], tmp)


def _dynamic_quant_rows(
    x: torch.Tensor, source: RowSource, out: torch.Tensor, scale_out: torch.Tensor
) -> None:
    """Per-row dynamic int8 quantization of every chunk of ``source`` (rows of ``x``)."""
    check_out("out", out, x, dtype=torch.int8)
    check_out("scale_out", scale_out, x, x.shape[:-1], torch.float32)
    x3 = as_rows3(x)
    q3 = out.view(x3.shape)
    s2 = scale_out.view(x3.shape[:2])
    scratch = scratch_for(x)
    for start, stop, src32 in source(scratch):
        n, inner, width = src32.shape
        tmp = scratch.get("tmp", (inner, width), n)
        col = scratch.get("col", (inner, 1), n)
        dynamic_quant_into(src32, q3[start:stop], s2[start:stop], tmp, col)


def quantize_out(
    x: torch.Tensor, scale: torch.Tensor, offset: torch.Tensor, *, out: torch.Tensor
) -> torch.Tensor:
    """``quantize`` into a preallocated contiguous int8 ``out``."""
    quantize_check(x, scale, offset)
    _static_quant_rows(x, partial(float32_chunks, x), scale, offset, out)
    return out


def dynamic_quant_out(
    x: torch.Tensor, *, out: torch.Tensor, scale_out: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """``dynamic_quant`` into preallocated contiguous ``out`` (int8) and ``scale_out``."""
    dynamic_quant_check(x)
    _dynamic_quant_rows(x, partial(float32_chunks, x), out, scale_out)
    return out, scale_out


def add_rms_norm_quant_out(
    x: torch.Tensor,
    residual: torch.Tensor,
    weight: torch.Tensor,
    scale: torch.Tensor,
    offset: torch.Tensor,
    eps: float,
    bias: torch.Tensor | None = None,
    *,
    out: torch.Tensor,
    residual_out: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Fused ``add_rms_norm_quant`` into preallocated ``out`` (int8) and ``residual_out``."""
    add_rms_norm_quant_check(x, residual, weight, scale, offset, eps, bias)
    check_out("residual_out", residual_out, x)
    normed = partial(
        normed_chunks, x, weight, eps, residual=residual, residual_out=residual_out, bias=bias
    )
    _static_quant_rows(x, normed, scale, offset, out)
    return out, residual_out


def add_rms_norm_dynamic_quant_out(
    x: torch.Tensor,
    residual: torch.Tensor,
    weight: torch.Tensor,
    eps: float,
    bias: torch.Tensor | None = None,
    *,
    out: torch.Tensor,
    scale_out: torch.Tensor,
    residual_out: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Fused ``add_rms_norm_dynamic_quant`` into preallocated outputs."""
    add_rms_norm_dynamic_quant_check(x, residual, weight, eps, bias)
    check_out("residual_out", residual_out, x)
    normed = partial(
        normed_chunks, x, weight, eps, residual=residual, residual_out=residual_out, bias=bias
    )
    _dynamic_quant_rows(x, normed, out, scale_out)
    return out, scale_out, residual_out


# The fakes check the arguments and allocate the outputs (also for the reference ops, see
# out_variants), so the reference, the fake and torch.compile reject the same inputs.


def quantize_fake(x: torch.Tensor, scale: torch.Tensor, offset: torch.Tensor) -> torch.Tensor:
    """Fake ``ascend::quantize``."""
    quantize_check(x, scale, offset)
    return _int8_like(x)


def dynamic_quant_fake(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Fake ``ascend::dynamic_quant``."""
    dynamic_quant_check(x)
    return _int8_like(x), _scale_like(x)


def add_rms_norm_quant_fake(
    x: torch.Tensor,
    residual: torch.Tensor,
    weight: torch.Tensor,
    scale: torch.Tensor,
    offset: torch.Tensor,
    eps: float,
    bias: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Fake ``ascend::add_rms_norm_quant``."""
    add_rms_norm_quant_check(x, residual, weight, scale, offset, eps, bias)
    return _int8_like(x), torch.empty(x.shape, dtype=x.dtype, device=x.device)


def add_rms_norm_dynamic_quant_fake(
    x: torch.Tensor,
    residual: torch.Tensor,
    weight: torch.Tensor,
    eps: float,
    bias: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Fake ``ascend::add_rms_norm_dynamic_quant``."""
    add_rms_norm_dynamic_quant_check(x, residual, weight, eps, bias)
    return _int8_like(x), _scale_like(x), torch.empty(x.shape, dtype=x.dtype, device=x.device)


quantize = into_fresh_outputs(quantize_out, quantize_fake)
dynamic_quant = into_fresh_outputs(dynamic_quant_out, dynamic_quant_fake)
add_rms_norm_quant = into_fresh_outputs(add_rms_norm_quant_out, add_rms_norm_quant_fake)
add_rms_norm_dynamic_quant = into_fresh_outputs(
    add_rms_norm_dynamic_quant_out, add_rms_norm_dynamic_quant_fake
)
