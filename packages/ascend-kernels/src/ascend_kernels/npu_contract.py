"""What the torch_npu kernels accept, and how our arguments are brought into that form.

The constraints are the ones torch-npu documents (``torch_npu/_op_plugin_docs.py`` of the
wheel; recorded in ``torch_npu_double/torch_npu-<version>.json``, which the tests' fake kernels
enforce). Every decision here reads only dtypes and shapes, never tensor values, so it costs
no device sync and is stable under graph capture. Where an argument cannot be converted
exactly, the adapter runs the reference implementation instead (``None`` below).
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

import torch

HALF = (torch.float16, torch.bfloat16)
# npu_quantize (div_mode=True, A2/A3): scales float32/bf16; zero_points int8/uint8/int32/bf16.
QUANTIZE_SCALE_DTYPES = (torch.float32, torch.bfloat16)
QUANTIZE_OFFSET_DTYPES = (torch.int8, torch.uint8, torch.int32, torch.bfloat16)
# npu_add_rms_norm_quant: scales1 float32/bf16, zero_points1 int32/bf16, both gamma-shaped.
NORM_QUANT_OFFSET_DTYPES = (torch.int32, torch.bfloat16)
# Integer offsets that widen to int32 without changing a value.
_WIDEN_TO_INT32 = (torch.int8, torch.uint8, torch.int16)
# npu_rms_norm / npu_dynamic_quant / npu_add_rms_norm_dynamic_quant take 2-8 dims.
MIN_DIMS, MAX_DIMS = 2, 8
# npu_mrope: rotary_dim must be a multiple of 32 for fp16/bf16, of 16 for float32.
MROPE_MULTIPLE = {torch.float16: 32, torch.bfloat16: 32, torch.float32: 16}


def kernel_rows(x: torch.Tensor) -> torch.Tensor:
    """``x`` with 2-8 dims for the norm/quant kernels: other ranks become ``[rows, H]``."""
    if MIN_DIMS <= x.dim() <= MAX_DIMS:
        return x
    return x.reshape(-1, x.shape[-1])


def scale_for_kernel(scale: torch.Tensor) -> torch.Tensor:
    """A quant scale in a kernel dtype: float16 widens to float32 (exact)."""
    return scale if scale.dtype in QUANTIZE_SCALE_DTYPES else scale.to(torch.float32)


def offset_for_kernel(
    offset: torch.Tensor, allowed: tuple[torch.dtype, ...]
) -> torch.Tensor | None:
    """``offset`` in one of the kernel's ``allowed`` dtypes, or ``None`` when only a lossy
    conversion would get it there (float16/float32 offsets would round to bf16, int64 could
    wrap in int32)."""
    if offset.dtype in allowed:
        return offset
    if offset.dtype in _WIDEN_TO_INT32 and torch.int32 in allowed:
        return offset.to(torch.int32)
    return None


def per_gamma(t: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """A per-tensor (1 value) or per-channel scale/offset as a ``weight``-shaped tensor."""
    if t.numel() == 1:
        return t.reshape(1).expand(weight.shape).contiguous()
    return t.reshape(weight.shape)


def same_dtype(*tensors: torch.Tensor | None) -> bool:
    """Whether the given (non-None) tensors share one dtype (the kernels' gamma/beta rule)."""
    dtypes = {t.dtype for t in tensors if t is not None}
    return len(dtypes) <= 1


def mrope_rotary_supported(dtype: torch.dtype, rotary_dim: int) -> bool:
    """npu_mrope's documented rotary_dim rule for inputs of ``dtype``."""
    multiple = MROPE_MULTIPLE.get(dtype)
    return multiple is not None and rotary_dim % multiple == 0


def atb_load_error(npu: ModuleType) -> Any:
    """The error torch_npu recorded when NNAL's ATB library (``libatb.so``) did not load, or
    ``None``. torch_npu keeps it in ``op_plugin.atb._atb_ops.NNAL_EX`` and raises it from
    every ATB op (``_npu_rotary_embedding``); a torch_npu without that module has no lazy
    ATB loader, so its ops are taken to be there."""
    owner: Any = npu
    for name in ("op_plugin", "atb", "_atb_ops"):
        owner = getattr(owner, name, None)
        if owner is None:
            return None
    return getattr(owner, "NNAL_EX", None)
