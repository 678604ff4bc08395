"""RMSNorm references: ``rms_norm``, ``add_rms_norm`` and the normalisation stage of fused ops.

Definition (float32 throughout, one cast at the end):
``out = x * rsqrt(mean(x**2, -1) + eps) * weight (+ bias)``. ``add_rms_norm`` forms the sum
``x + residual`` in float32 and normalises that float32 sum, as Ascend's fused kernel
(``npu_add_rms_norm``: float32 inside, one cast at the end) and vLLM's native
``fused_add_rms_norm`` do; ``residual_out`` is the sum cast once to the input dtype. So in
bfloat16/float16 ``out`` is not ``rms_norm(residual_out)`` (that reads the rounded sum; the
batch-invariant ``add_rms_norm`` is that composition); in float32 the two are the same.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch

from ascend_kernels.out_variants import into_fresh_outputs
from ascend_kernels.row_chunks import Scratch, as_rows3, chunks, scratch_for, upcast
from ascend_kernels.validation import (
    check,
    check_devices,
    check_eps,
    check_floating,
    check_out,
    check_rows,
    check_same_shape,
    check_vector,
    overlaps,
)


def rms_into(
    src: torch.Tensor,
    w32: torch.Tensor,
    eps: float,
    dst: torch.Tensor,
    ms: torch.Tensor,
    bias32: torch.Tensor | None = None,
) -> None:
    """``dst = src * rsqrt(mean(src**2) + eps) * w32 (+ bias32)`` in float32 (dst != src)."""
    torch.mul(src, src, out=dst)
    torch.mean(dst, dim=-1, keepdim=True, out=ms)
    ms.add_(eps).rsqrt_()
    torch.mul(src, ms, out=dst)
    dst.mul_(w32)
    if bias32 is not None:
        dst.add_(bias32)


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


def rms_norm_check(x: torch.Tensor, weight: torch.Tensor, eps: float) -> None:
    """Argument checks of ``ascend::rms_norm``."""
    check_norm_args(x, weight, eps)


def add_rms_norm_check(
    x: torch.Tensor,
    residual: torch.Tensor,
    weight: torch.Tensor,
    eps: float,
    bias: torch.Tensor | None = None,
) -> None:
    """Argument checks of ``ascend::add_rms_norm``."""
    check_norm_args(x, weight, eps, residual, bias)


def normed_chunks(
    x: torch.Tensor,
    weight: torch.Tensor,
    eps: float,
    scratch: Scratch | None = None,
    *,
    residual: torch.Tensor | None = None,
    residual_out: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
    round_to_dtype: bool = True,
    out: torch.Tensor | None = None,
) -> Iterator[tuple[int, int, torch.Tensor]]:
    """Yield ``(start, stop, y32)`` over row chunks of the (add-)RMSNorm of ``x``.

    ``y32`` is a float32 scratch chunk shaped ``[n, M, H]`` (rows of ``as_rows3(x)``). With
    ``round_to_dtype`` it holds the values the unfused op would have stored in the input dtype,
    so a consumer quantizing it matches the unfused composition bit for bit. When ``residual``
    is given, the float32 sum ``x + residual`` is normalised and ``residual_out``
    (preallocated, contiguous) receives it cast once to the input dtype. With
    ``out`` (preallocated, contiguous, x's shape and dtype) every chunk is also stored there,
    float32 ones directly (no extra copy). The caller has checked the arguments
    (:func:`check_norm_args`).
    """
    x3 = as_rows3(x)
    rows, inner, width = x3.shape
    if scratch is None:
        scratch = scratch_for(x)
    r3 = ro3 = None
    if residual is not None:
        check(residual_out is not None, "residual_out is required with residual")
        assert residual_out is not None
        r3 = as_rows3(residual).reshape(x3.shape)
        ro3 = residual_out.view(x3.shape)
    if out is not None:
        for name, other in (("x", x), ("residual_out", residual_out)):
            check(
                other is None or not overlaps(out, other),
                f"out must not share memory with {name}",
            )
    o3 = None if out is None else out.view(x3.shape)
    direct = o3 is not None and x.dtype == torch.float32
    w32 = weight.to(torch.float32)
    b32 = None if bias is None else bias.to(torch.float32)
    round_needed = round_to_dtype and x.dtype != torch.float32
    for start, stop in chunks(rows, inner * width):
        n = stop - start
        xs = x3[start:stop]
        if r3 is None or ro3 is None:
            src = upcast(xs, scratch, "norm_src")
        elif x.dtype == torch.float32:
            src = torch.add(xs, r3[start:stop], out=ro3[start:stop])
        else:
            # The norm reads the float32 sum, not its stored (rounded) image.
            src = upcast(xs, scratch, "norm_src").add_(r3[start:stop])
            ro3[start:stop].copy_(src)
        dst = (
            o3[start:stop]
            if direct and o3 is not None
            else scratch.get("norm_dst", (inner, width), n)
        )
        ms = scratch.get("norm_ms", (inner, 1), n)
        rms_into(src, w32, eps, dst, ms, b32)
        if o3 is not None and not direct:
            o3[start:stop].copy_(dst)
        if round_needed:
            # Store-and-reload through the input dtype: what the unfused op's output holds.
            rounded = scratch.get("norm_round", (inner, width), n, x.dtype)
            dst.copy_(rounded.copy_(dst))
        yield start, stop, dst


def rms_norm_out(
    x: torch.Tensor,
    weight: torch.Tensor,
    eps: float,
    *,
    out: torch.Tensor,
    bias: torch.Tensor | None = None,
) -> torch.Tensor:
    """``rms_norm`` into a preallocated contiguous ``out`` (shape and dtype of ``x``)."""
    check_norm_args(x, weight, eps, bias=bias)
    check_out("out", out, x)
    for _ in normed_chunks(x, weight, eps, bias=bias, round_to_dtype=False, out=out):
        pass
    return out


def add_rms_norm_out(
    x: torch.Tensor,
    residual: torch.Tensor,
    weight: torch.Tensor,
    eps: float,
    bias: torch.Tensor | None = None,
    *,
    out: torch.Tensor,
    residual_out: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``add_rms_norm`` into preallocated contiguous ``out`` and ``residual_out``."""
    check_norm_args(x, weight, eps, residual, bias)
    check_out("out", out, x)
    check_out("residual_out", residual_out, x)
    for _ in normed_chunks(
        x,
        weight,
        eps,
        residual=residual,
        residual_out=residual_out,
        bias=bias,
        round_to_dtype=False,
        out=out,
    ):
        pass
    return out, residual_out


# The fakes check the arguments and allocate the outputs (also for the reference ops, see
# out_variants), so the reference, the fake and torch.compile reject the same inputs.


def rms_norm_fake(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """Fake ``ascend::rms_norm``: checks the arguments, returns a tensor shaped like ``x``."""
    rms_norm_check(x, weight, eps)
    return _like(x)


def add_rms_norm_fake(
    x: torch.Tensor,
    residual: torch.Tensor,
    weight: torch.Tensor,
    eps: float,
    bias: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Fake ``ascend::add_rms_norm``: checks the arguments; ``(out, residual_out)`` like ``x``."""
    add_rms_norm_check(x, residual, weight, eps, bias)
    return _like(x), _like(x)


def _like(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x, memory_format=torch.contiguous_format)


rms_norm = into_fresh_outputs(rms_norm_out, rms_norm_fake)
add_rms_norm = into_fresh_outputs(add_rms_norm_out, add_rms_norm_fake)
