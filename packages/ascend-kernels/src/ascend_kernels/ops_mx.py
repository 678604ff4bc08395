"""MX (microscaling) fp8 quantization references and their RMSNorm fusions.

``dynamic_mx_quant(x)`` splits the last dim into blocks of 32 values (the last block may be
partial) and gives each block one power-of-two scale stored as ``float8_e8m0fnu``
(OCP MX v1.0, e4m3 elements): ``scale = 2 ** (floor(log2(amax(|block|))) - 8)`` where 8 is the
largest exponent of e4m3, clamped to the e8m0 range [2**-127, 2**127]; an all-zero block gets
2**-127 and zeros, a block holding inf or NaN gets the NaN scale. Elements are
``x / scale`` saturated to +-448 and rounded to ``float8_e4m3fn`` (nearest, ties to even).
Shapes: ``q`` like ``x``; ``scale`` is ``x.shape[:-1] + (ceil(H / 32),)``.
"""

from __future__ import annotations

from functools import partial

import torch

from ascend_kernels.ops_norm import check_norm_args, normed_chunks
from ascend_kernels.out_variants import into_fresh_outputs
from ascend_kernels.row_chunks import RowSource, Scratch, as_rows3, float32_chunks, scratch_for
from ascend_kernels.validation import check_floating, check_out, check_rows

BLOCK = 32
E4M3_MAX = 448.0
E4M3_EMAX = 8


def num_blocks(width: int) -> int:
    """Number of 32-value blocks covering ``width`` values (works on SymInts)."""
    return (width + BLOCK - 1) // BLOCK


def mx_into(
    src32: torch.Tensor, q: torch.Tensor, scale_bytes: torch.Tensor, scratch: Scratch
) -> None:
    """Quantize float32 rows ``src32`` ``[n, M, H]`` into ``q`` (e4m3) and ``scale_bytes`` (uint8).

    ``scale_bytes`` is the e8m0 encoding (biased exponent) viewed as uint8, ``[n, M, blocks]``.
    """
    n, inner, width = src32.shape
    nb = num_blocks(width)
    if width % BLOCK:
        # Zero padding never changes a block's amax; the padded tail is dropped on output.
        padded = scratch.get("mx_pad", (inner, nb * BLOCK), n)
        padded[..., width:].zero_()
        padded[..., :width].copy_(src32)
        blocks = padded.view(n, inner, nb, BLOCK)
    else:
        blocks = src32.reshape(n, inner, nb, BLOCK)
    tmp = scratch.get("mx_tmp", (inner, nb, BLOCK), n)
    amax = scratch.get("mx_amax", (inner, nb), n)
    exp = scratch.get("mx_exp", (inner, nb), n, torch.int32)
    torch.abs(blocks, out=tmp)
    torch.amax(tmp, dim=-1, out=amax)
    # Biased float32 exponent of amax = floor(log2(amax)) + 127 (0 for zero/subnormal, 255 for
    # inf/NaN); the e8m0 biased scale exponent is that minus e4m3's emax.
    torch.bitwise_right_shift(amax.view(torch.int32), 23, out=exp)
    non_finite = exp == 255
    exp.sub_(E4M3_EMAX).clamp_(min=0)
    exp.masked_fill_(non_finite, 255)
    scale_bytes.copy_(exp)
    amax.copy_(scale_bytes.view(torch.float8_e8m0fnu))
    torch.div(blocks, amax.unsqueeze(-1), out=tmp)
    tmp.clamp_(-E4M3_MAX, E4M3_MAX)
    q.copy_(tmp.view(n, inner, nb * BLOCK)[..., :width])


def dynamic_mx_quant_check(x: torch.Tensor) -> None:
    """Argument checks of ``ascend::dynamic_mx_quant``."""
    check_floating("x", x)
    check_rows("x", x)


def rms_norm_dynamic_mx_quant_check(x: torch.Tensor, weight: torch.Tensor, eps: float) -> None:
    """Argument checks of ``ascend::rms_norm_dynamic_mx_quant``."""
    check_norm_args(x, weight, eps)


def add_rms_norm_dynamic_mx_quant_check(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
) -> None:
    """Argument checks of ``ascend::add_rms_norm_dynamic_mx_quant``."""
    check_norm_args(x, weight, eps, residual)


def _q_like(x: torch.Tensor) -> torch.Tensor:
    return torch.empty(x.shape, dtype=torch.float8_e4m3fn, device=x.device)


def _mx_scale_like(x: torch.Tensor) -> torch.Tensor:
    shape = (*x.shape[:-1], num_blocks(x.shape[-1]))
    return torch.empty(shape, dtype=torch.float8_e8m0fnu, device=x.device)


def _mx_quant_rows(
    x: torch.Tensor, source: RowSource, out: torch.Tensor, scale_out: torch.Tensor
) -> None:
    """MX quantization of every chunk of ``source`` (rows of ``x``) into the outputs."""
    check_out("out", out, x, dtype=torch.float8_e4m3fn)
    scale_shape = torch.Size((*x.shape[:-1], num_blocks(x.shape[-1])))
    check_out("scale_out", scale_out, x, scale_shape, torch.float8_e8m0fnu)
    x3 = as_rows3(x)
    rows, inner, width = x3.shape
    q3 = out.view(x3.shape)
    s3 = scale_out.view(torch.uint8).view(rows, inner, num_blocks(width))
    scratch = scratch_for(x)
    for start, stop, src32 in source(scratch):
        mx_into(src32, q3[start:stop], s3[start:stop], scratch)


def dynamic_mx_quant_out(
    x: torch.Tensor, *, out: torch.Tensor, scale_out: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """``dynamic_mx_quant`` into preallocated contiguous ``out`` and ``scale_out``."""
    dynamic_mx_quant_check(x)
    _mx_quant_rows(x, partial(float32_chunks, x), out, scale_out)
    return out, scale_out


def rms_norm_dynamic_mx_quant_out(
    x: torch.Tensor,
    weight: torch.Tensor,
    eps: float,
    *,
    out: torch.Tensor,
    scale_out: torch.Tensor,
    residual: torch.Tensor | None = None,
    residual_out: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Fused (add-)RMSNorm + MX quant into preallocated outputs."""
    check_norm_args(x, weight, eps, residual)
    if residual is not None:
        if residual_out is None:
            raise ValueError("residual_out is required with residual")
        check_out("residual_out", residual_out, x)
    normed = partial(normed_chunks, x, weight, eps, residual=residual, residual_out=residual_out)
    _mx_quant_rows(x, normed, out, scale_out)
    return out, scale_out


def add_rms_norm_dynamic_mx_quant_out(
    x: torch.Tensor,
    residual: torch.Tensor,
    weight: torch.Tensor,
    eps: float,
    *,
    out: torch.Tensor,
    scale_out: torch.Tensor,
    residual_out: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Fused ``add_rms_norm_dynamic_mx_quant`` into preallocated outputs."""
    rms_norm_dynamic_mx_quant_out(
        x, weight, eps, out=out, scale_out=scale_out, residual=residual, residual_out=residual_out
    )
    return out, scale_out, residual_out


# The fakes check the arguments and allocate the outputs (also for the reference ops, see
# out_variants), so the reference, the fake and torch.compile reject the same inputs.


def dynamic_mx_quant_fake(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Fake ``ascend::dynamic_mx_quant``."""
    dynamic_mx_quant_check(x)
    return _q_like(x), _mx_scale_like(x)


def rms_norm_dynamic_mx_quant_fake(
    x: torch.Tensor, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Fake ``ascend::rms_norm_dynamic_mx_quant``."""
    rms_norm_dynamic_mx_quant_check(x, weight, eps)
    return _q_like(x), _mx_scale_like(x)


def add_rms_norm_dynamic_mx_quant_fake(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Fake ``ascend::add_rms_norm_dynamic_mx_quant``."""
    add_rms_norm_dynamic_mx_quant_check(x, residual, weight, eps)
    return _q_like(x), _mx_scale_like(x), torch.empty(x.shape, dtype=x.dtype, device=x.device)


dynamic_mx_quant = into_fresh_outputs(dynamic_mx_quant_out, dynamic_mx_quant_fake)
rms_norm_dynamic_mx_quant = into_fresh_outputs(
    rms_norm_dynamic_mx_quant_out, rms_norm_dynamic_mx_quant_fake
)
add_rms_norm_dynamic_mx_quant = into_fresh_outputs(
    add_rms_norm_dynamic_mx_quant_out, add_rms_norm_dynamic_mx_quant_fake
)
