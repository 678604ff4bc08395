"""MX (microscaling) fp8 quantization and its RMSNorm fusions.

``dynamic_mx_quant(x)`` splits the last dim into blocks of 32 values (the last block may be
partial) and gives each block one power-of-two scale stored as ``float8_e8m0fnu``
(OCP MX v1.0, e4m3 elements): ``scale = 2 ** (floor(log2(amax(|block|))) - 8)`` where 8 is the
largest exponent of e4m3, clamped to the e8m0 range [2**-127, 2**127]; an all-zero block gets
2**-127 and zeros, a block holding inf or NaN gets the NaN scale. Elements are
``x / scale`` saturated to +-448 and rounded to ``float8_e4m3fn`` (nearest, ties to even).
Shapes: ``q`` like ``x``; ``scale`` is ``x.shape[:-1] + (ceil(H / 32),)``. The fused ops
quantize the (add-)RMSNorm output as stored in the input dtype.
"""

from __future__ import annotations

from types import ModuleType

import torch

from ascend_kernels.ops.norm import _rms32, add_rms_norm32, check_norm, stored
from ascend_kernels.ops.quant import check_x
from ascend_kernels.ops.spec import Arguments, OpSpec, like, rows_of

F32 = torch.float32
E4M3 = torch.float8_e4m3fn
E8M0 = torch.float8_e8m0fnu
BLOCK = 32
E4M3_MAX = 448.0
E4M3_EMAX = 8
MX_MAX_DIMS = 7


def num_blocks(width: int) -> int:
    """Number of 32-value blocks covering ``width`` values (works on SymInts)."""
    return (width + BLOCK - 1) // BLOCK


def mx32(src32: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(q, scale)``: float32 rows ``[..., H]`` as e4m3 values and e8m0 block scales."""
    width = src32.shape[-1]
    nb = num_blocks(width)
    # Zero padding never changes a block's amax; the padded tail is dropped on output.
    padded = torch.nn.functional.pad(src32, (0, nb * BLOCK - width))
    blocks = torch.unflatten(padded, -1, (nb, BLOCK))
    amax = blocks.abs().amax(dim=-1)
    # Biased float32 exponent of amax = floor(log2(amax)) + 127 (0 for zero/subnormal, 255 for
    # inf/NaN); the e8m0 biased scale exponent is that minus e4m3's emax.
    exp = torch.bitwise_right_shift(amax.view(torch.int32), 23)
    biased = torch.where(exp == 255, 255, (exp - E4M3_EMAX).clamp(min=0))
    scale = biased.to(torch.uint8).view(E8M0)
    q = (blocks / scale.to(F32).unsqueeze(-1)).clamp(-E4M3_MAX, E4M3_MAX).to(E4M3)
    return q.flatten(-2)[..., :width].contiguous(), scale


def dynamic_mx_quant(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``ascend::dynamic_mx_quant``."""
    return mx32(x.to(F32))


def rms_norm_dynamic_mx_quant(
    x: torch.Tensor, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """``ascend::rms_norm_dynamic_mx_quant``: ``rms_norm`` then ``dynamic_mx_quant``."""
    return mx32(stored(_rms32(x.to(F32), weight, eps), x.dtype))


def add_rms_norm_dynamic_mx_quant(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``ascend::add_rms_norm_dynamic_mx_quant``: ``add_rms_norm`` then ``dynamic_mx_quant``."""
    y32, summed = add_rms_norm32(x, residual, weight, eps)
    q, scale = mx32(stored(y32, x.dtype))
    return q, scale, summed


def _trim_mx_scale(scale: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    # The kernels return the e8m0 scale bytes as uint8 ("float8_e8m0fnu, actually returned as
    # uint8" in torch_npu's docs) with the block axis padded to pairs; our schema's scale is
    # float8_e8m0fnu (same bytes) with ceil(H / 32) blocks.
    flat = scale.reshape(*x.shape[:-1], -1)
    return flat[..., :num_blocks(x.shape[-1])].contiguous().view(E8M0)


def npu_dynamic_mx_quant(npu: ModuleType, a: Arguments) -> tuple[torch.Tensor, torch.Tensor]:
    """NPU: ``npu_dynamic_mx_quant -> (y, mxscale)``; 1-7 dims, and float32 only with at
    least one whole block (H >= 32)."""
    x = a["x"]
    if x.dtype == torch.float32 and x.shape[-1] < BLOCK:
        return dynamic_mx_quant(x)
    rows = x if x.dim() <= MX_MAX_DIMS else x.reshape(-1, x.shape[-1])
    q, scale = npu.npu_dynamic_mx_quant(rows, dst_type=E4M3)
    return q.reshape(x.shape), _trim_mx_scale(scale, x)


def npu_add_rms_norm_dynamic_mx_quant(
    npu: ModuleType, a: Arguments
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """NPU: ``npu_add_rms_norm_dynamic_mx_quant -> (y, x1 + x2, mxscale)``."""
    out = npu.npu_add_rms_norm_dynamic_mx_quant(
        a["x"], a["residual"], a["weight"], epsilon=a["eps"], dst_type=E4M3
    )
    return out[0], _trim_mx_scale(out[2], a["x"]), out[1]


def npu_rms_norm_dynamic_mx_quant(
    npu: ModuleType, a: Arguments
) -> tuple[torch.Tensor, torch.Tensor]:
    """NPU: ``npu_rms_norm_dynamic_mx_quant -> (y, mxscale)``."""
    out = npu.npu_rms_norm_dynamic_mx_quant(a["x"], a["weight"], epsilon=a["eps"], dst_type=E4M3)
    return out[0], _trim_mx_scale(out[1], a["x"])


def _q_scale(a: Arguments) -> tuple[torch.Tensor, torch.Tensor]:
    x = a["x"]
    return rows_of(x, x.shape[-1], E4M3), rows_of(x, num_blocks(x.shape[-1]), E8M0)


SPECS = (
    OpSpec(
        "dynamic_mx_quant",
        "(Tensor x) -> (Tensor q, Tensor scale)",
        check_x, dynamic_mx_quant, fake=_q_scale, npu=npu_dynamic_mx_quant,
        out_names=("out", "scale_out"),
    ),
    OpSpec(
        "add_rms_norm_dynamic_mx_quant",
        "(Tensor x, Tensor residual, Tensor weight, float eps)"
        " -> (Tensor q, Tensor scale, Tensor residual_out)",
        check_norm, add_rms_norm_dynamic_mx_quant, fake=lambda a: (*_q_scale(a), like(a["x"])),
        npu=npu_add_rms_norm_dynamic_mx_quant,
        out_names=("out", "scale_out", "residual_out"),
    ),
    OpSpec(
        "rms_norm_dynamic_mx_quant",
        "(Tensor x, Tensor weight, float eps) -> (Tensor q, Tensor scale)",
        check_norm, rms_norm_dynamic_mx_quant, fake=_q_scale, npu=npu_rms_norm_dynamic_mx_quant,
        out_names=("out", "scale_out"),
    ),
)
