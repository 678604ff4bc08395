"""The NPU implementation of every ``ascend::*`` op: torch_npu kernels, adapted once.

Each adapter takes the ``torch_npu`` module as its first argument (so tests pass a fake that
records calls) and maps our schema onto the kernel: argument names and order, and which of the
kernel's outputs are ours, in which order. ``register(torch_npu)`` binds the module and
registers the adapters under the NPU dispatch key (PrivateUse1), where they take precedence
over the reference implementations. Ops without a torch_npu kernel (the LoRA expand ops, which
come from vllm-ascend's compiled extension) keep the reference implementation.

The adapters also bring the arguments into the form the kernels document (``npu_contract``):
quant scales/offsets converted to the kernel's dtypes and shapes, ranks the kernels do not
take flattened to rows, MX scales (returned as ``uint8``) viewed as ``float8_e8m0fnu``. A call
no kernel can run exactly (float32 activations of the fp16/bf16-only kernels, offsets only a
lossy cast would convert, rotary sizes npu_mrope rejects, a missing ATB library) runs the
reference implementation instead, on the same device.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from types import ModuleType
from typing import Any

import torch

from ascend_kernels import ops_activation, ops_mrope, ops_rope
from ascend_kernels.npu_contract import (
    HALF,
    NORM_QUANT_OFFSET_DTYPES,
    QUANTIZE_OFFSET_DTYPES,
    atb_load_error,
    kernel_rows,
    offset_for_kernel,
    per_gamma,
    same_dtype,
    scale_for_kernel,
)
from ascend_kernels.registration import reference_impl
from ascend_kernels.schemas import NAMESPACE

E4M3 = torch.float8_e4m3fn
E8M0 = torch.float8_e8m0fnu
MX_BLOCK, MX_MAX_DIMS = 32, 7
logger = logging.getLogger(__name__)


def rms_norm(npu: ModuleType, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    # npu_rms_norm -> (y, rstd); gamma must have x's dtype.
    if not same_dtype(x, weight):
        return reference_impl("rms_norm")(x, weight, eps)  # type: ignore[no-any-return]
    out: torch.Tensor = npu.npu_rms_norm(kernel_rows(x), weight, epsilon=eps)[0]
    return out.reshape(x.shape)


def add_rms_norm(
    npu: ModuleType,
    x: torch.Tensor,
    residual: torch.Tensor,
    weight: torch.Tensor,
    eps: float,
    bias: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    # npu_add_rms_norm -> (y, rstd, x1 + x2); it has no bias input, so the bias is added after.
    if not same_dtype(x, weight):
        return reference_impl("add_rms_norm")(x, residual, weight, eps, bias)  # type: ignore[no-any-return]
    y, _, residual_out = npu.npu_add_rms_norm(
        kernel_rows(x), kernel_rows(residual), weight, epsilon=eps
    )
    y, residual_out = y.reshape(x.shape), residual_out.reshape(x.shape)
    if bias is not None:
        y = y + bias
    return y, residual_out


def quantize(
    npu: ModuleType, x: torch.Tensor, scale: torch.Tensor, offset: torch.Tensor
) -> torch.Tensor:
    # div_mode=True: round(x / scale + offset); axis -1 covers per-tensor and per-channel.
    zero_points = offset_for_kernel(offset, QUANTIZE_OFFSET_DTYPES)
    if zero_points is None:
        return reference_impl("quantize")(x, scale, offset)  # type: ignore[no-any-return]
    out: torch.Tensor = npu.npu_quantize(
        x, scale_for_kernel(scale).reshape(-1), zero_points.reshape(-1), torch.qint8, -1, True
    )
    return out


def dynamic_quant(npu: ModuleType, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    # npu_dynamic_quant -> (int8 y, float32 per-token scale); fp16/bf16 input only.
    if x.dtype not in HALF:
        return reference_impl("dynamic_quant")(x)  # type: ignore[no-any-return]
    q, scale = npu.npu_dynamic_quant(kernel_rows(x))
    return q.reshape(x.shape), scale.reshape(x.shape[:-1])


def _norm_kwargs(eps: float, bias: torch.Tensor | None, **extra: Any) -> dict[str, Any]:
    # The fused norm+quant kernels take eps as `epsilon` and the optional bias as `beta`.
    kwargs: dict[str, Any] = {"epsilon": eps, **extra}
    if bias is not None:
        kwargs["beta"] = bias
    return kwargs


def add_rms_norm_quant(
    npu: ModuleType,
    x: torch.Tensor,
    residual: torch.Tensor,
    weight: torch.Tensor,
    scale: torch.Tensor,
    offset: torch.Tensor,
    eps: float,
    bias: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    # npu_add_rms_norm_quant -> (y1, y2, x1 + x2); fp16/bf16 x, gamma-shaped scales1 (float32
    # or bf16) and zero_points1 (int32 or bf16).
    zero_points = offset_for_kernel(offset, NORM_QUANT_OFFSET_DTYPES)
    if x.dtype not in HALF or zero_points is None or not same_dtype(x, weight, bias):
        ref = reference_impl("add_rms_norm_quant")
        return ref(x, residual, weight, scale, offset, eps, bias)  # type: ignore[no-any-return]
    out = npu.npu_add_rms_norm_quant(
        kernel_rows(x), kernel_rows(residual), weight,
        per_gamma(scale_for_kernel(scale), weight), per_gamma(zero_points, weight),
        **_norm_kwargs(eps, bias),
    )  # fmt: skip
    return out[0].reshape(x.shape), out[2].reshape(x.shape)


def add_rms_norm_dynamic_quant(
    npu: ModuleType,
    x: torch.Tensor,
    residual: torch.Tensor,
    weight: torch.Tensor,
    eps: float,
    bias: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    # -> (y1, y2, x1 + x2, scale1, scale2); output_mask asks for the first quantization only.
    # fp16/bf16 x with 2-8 dims, gamma and beta in x's dtype.
    if x.dtype not in HALF or not same_dtype(x, weight, bias):
        ref = reference_impl("add_rms_norm_dynamic_quant")
        return ref(x, residual, weight, eps, bias)  # type: ignore[no-any-return]
    kwargs = _norm_kwargs(eps, bias, output_mask=[True, False])
    out = npu.npu_add_rms_norm_dynamic_quant(
        kernel_rows(x), kernel_rows(residual), weight, **kwargs
    )
    return out[0].reshape(x.shape), out[3].reshape(x.shape[:-1]), out[2].reshape(x.shape)


def dynamic_mx_quant(npu: ModuleType, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    # -> (y, mxscale); the kernel pads the block axis to pairs, our schema keeps ceil(H / 32).
    # It takes 1-7 dims, and float32 only with at least one whole block (H >= 32).
    if x.dtype == torch.float32 and x.shape[-1] < MX_BLOCK:
        return reference_impl("dynamic_mx_quant")(x)  # type: ignore[no-any-return]
    rows = x if x.dim() <= MX_MAX_DIMS else x.reshape(-1, x.shape[-1])
    q, scale = npu.npu_dynamic_mx_quant(rows, dst_type=E4M3)
    return q.reshape(x.shape), _trim_mx_scale(scale, x)


def add_rms_norm_dynamic_mx_quant(
    npu: ModuleType, x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    # -> (y, x1 + x2, mxscale)
    out = npu.npu_add_rms_norm_dynamic_mx_quant(x, residual, weight, epsilon=eps, dst_type=E4M3)
    return out[0], _trim_mx_scale(out[2], x), out[1]


def rms_norm_dynamic_mx_quant(
    npu: ModuleType, x: torch.Tensor, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    # -> (y, mxscale)
    out = npu.npu_rms_norm_dynamic_mx_quant(x, weight, epsilon=eps, dst_type=E4M3)
    return out[0], _trim_mx_scale(out[1], x)


def _trim_mx_scale(scale: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    # The kernels return the e8m0 scale bytes as uint8 ("float8_e8m0fnu, actually returned as
    # uint8" in torch_npu's docs); our schema's scale is float8_e8m0fnu (same bytes).
    blocks = (x.shape[-1] + 31) // 32
    flat = scale.reshape(*x.shape[:-1], -1)
    return flat[..., :blocks].contiguous().view(E8M0)


def rotary_embedding(
    npu: ModuleType,
    positions: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    cos_sin_cache: torch.Tensor,
    head_size: int,
    rotary_dim: int,
    is_neox: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    if rotary_dim != head_size or atb_load_error(npu) is not None:
        # The kernel rotates whole heads; partial rotary stays on the reference (any device),
        # and so does everything without NNAL's ATB library (the kernel is an ATB op).
        q_rot, k_rot = ops_rope.rotary_embedding(
            positions, q, k, cos_sin_cache, head_size, rotary_dim, is_neox
        )
        return q_rot, k_rot
    # _npu_rotary_embedding rotates 2-D [T, heads * head_size] query/key in place: give it
    # fresh copies so the op stays functional.
    tokens = positions.numel()
    q_out = q.reshape(tokens, -1).clone(memory_format=torch.contiguous_format)
    k_out = k.reshape(tokens, -1).clone(memory_format=torch.contiguous_format)
    npu._npu_rotary_embedding(positions, q_out, k_out, head_size, cos_sin_cache, is_neox)
    return q_out.view(q.shape), k_out.view(k.shape)


def split_qkv_rmsnorm_rope(
    npu: ModuleType,
    qkv: torch.Tensor,
    q_weight: torch.Tensor,
    k_weight: torch.Tensor,
    positions: torch.Tensor,
    cos_sin_cache: torch.Tensor,
    q_size: int,
    kv_size: int,
    head_size: int,
    rotary_dim: int,
    is_neox: bool,
    eps: float,
    q_bias: torch.Tensor | None = None,
    k_bias: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    # torch_npu has no single kernel: per-head npu_rms_norm (+ bias) then the rope kernel.
    tokens = qkv.shape[0]
    q, k, v = qkv.split([q_size, kv_size, kv_size], dim=-1)  # type: ignore[no-untyped-call]
    q_n = npu.npu_rms_norm(q.reshape(tokens, -1, head_size), q_weight, epsilon=eps)[0]
    k_n = npu.npu_rms_norm(k.reshape(tokens, -1, head_size), k_weight, epsilon=eps)[0]
    if q_bias is not None:
        q_n = q_n + q_bias
    if k_bias is not None:
        k_n = k_n + k_bias
    q_rot, k_rot = rotary_embedding(
        npu,
        positions,
        q_n.reshape(tokens, q_size),
        k_n.reshape(tokens, kv_size),
        cos_sin_cache,
        head_size,
        rotary_dim,
        is_neox,
    )
    return q_rot, k_rot, v.contiguous()


def muls_add(npu: ModuleType, x: torch.Tensor, y: torch.Tensor, scale: float) -> torch.Tensor:
    # One aclnnAdd with alpha: y + scale * x.
    return torch.add(y, x, alpha=scale)


ADAPTERS: dict[str, Callable[..., Any]] = {
    "rms_norm": rms_norm,
    "add_rms_norm": add_rms_norm,
    "quantize": quantize,
    "dynamic_quant": dynamic_quant,
    "add_rms_norm_quant": add_rms_norm_quant,
    "add_rms_norm_dynamic_quant": add_rms_norm_dynamic_quant,
    "dynamic_mx_quant": dynamic_mx_quant,
    "add_rms_norm_dynamic_mx_quant": add_rms_norm_dynamic_mx_quant,
    "rms_norm_dynamic_mx_quant": rms_norm_dynamic_mx_quant,
    "rotary_embedding": rotary_embedding,
    "split_qkv_rmsnorm_rope": split_qkv_rmsnorm_rope,
    "muls_add": muls_add,
    # Adapters of the ops added for vLLM CustomOps live beside their references.
    "silu_and_mul": ops_activation.npu_silu_and_mul,
    "mrotary_embedding": ops_mrope.npu_mrotary_embedding,
}


def register(torch_npu: ModuleType, dispatch_key: str = "PrivateUse1") -> torch.library.Library:
    """Register every adapter bound to ``torch_npu`` under ``dispatch_key``.

    Each adapter first runs the op's argument checks (``<op>_check``, shared with the reference
    and the fake), so bad input gets the same ``ValueError`` on every device. Returns the
    library; keep it alive (``_destroy()`` removes the registrations).
    """
    from ascend_kernels.registration import check_impl

    error = atb_load_error(torch_npu)
    if error is not None:
        logger.warning(
            "torch_npu's ATB ops are unavailable (%s): ascend::rotary_embedding and"
            " ascend::split_qkv_rmsnorm_rope rotate with the reference implementation", error,
        )
    lib = torch.library.Library(NAMESPACE, "IMPL")  # type: ignore[no-untyped-call]
    for op, adapter in ADAPTERS.items():
        lib.impl(op, _checked(check_impl(op), functools.partial(adapter, torch_npu)), dispatch_key)  # type: ignore[no-untyped-call]
    return lib


def _checked(
    check: Callable[..., None] | None, kernel: Callable[..., Any]
) -> Callable[..., Any]:
    if check is None:
        return kernel

    def checked_kernel(*args: Any, **kwargs: Any) -> Any:
        check(*args, **kwargs)
        return kernel(*args, **kwargs)

    return checked_kernel
