"""How weights are kept on the device: the fractal-NZ cast decision, the cast, and disposal.

``nz_cast_wanted`` is the pure decision of the existing plugin's ``maybe_trans_nz``
(its ``utils.py``): never for float32 or meta tensors; always on 310P; otherwise
``weight_nz_mode`` 0 never casts, bfloat16/float16 weights cast only with mode 2 and any other
dtype (quantized weights) with mode 1 or 2. ``maybe_trans_nz`` applies it with
``torch_npu.npu_format_cast(w, ACL_FORMAT_FRACTAL_NZ)`` (the NPU seam; tests pass a fake).
On ``soc="cpu"`` (the reference kernels) nothing is cast: the NZ format is an NPU layout.
"""

from __future__ import annotations

import importlib
from types import ModuleType

import torch

from ascend_kernels.capability import SOCS

# torch_npu's format id of the fractal NZ layout (ACL_FORMAT_FRACTAL_NZ).
ACL_FORMAT_FRACTAL_NZ = 29
WEIGHT_NZ_MODES = (0, 1, 2)
_HALF = (torch.bfloat16, torch.float16)


def nz_cast_wanted(
    dtype: torch.dtype, *, weight_nz_mode: int, soc: str, is_meta: bool = False
) -> bool:
    """True when a weight of ``dtype`` is converted to NZ on ``soc`` under ``weight_nz_mode``.

    Raises ``ValueError`` for a mode outside 0, 1, 2 or an unknown SoC.
    """
    if type(weight_nz_mode) is not int or weight_nz_mode not in WEIGHT_NZ_MODES:
        raise ValueError(f"weight_nz_mode must be 0, 1 or 2, got {weight_nz_mode!r}")
    if soc not in SOCS:
        raise ValueError(f"unknown soc {soc!r}; allowed: {', '.join(SOCS)}")
    if soc == "cpu" or is_meta or dtype == torch.float32:
        return False
    if soc == "310P":
        return True
    if weight_nz_mode == 0:
        return False
    if dtype in _HALF:
        return weight_nz_mode == 2
    return True  # quantized weights (int8, int4 packed, fp8, ...)


def maybe_trans_nz(
    weight: torch.Tensor,
    *,
    weight_nz_mode: int,
    soc: str,
    torch_npu: ModuleType | None = None,
) -> torch.Tensor:
    """``weight`` cast to NZ when :func:`nz_cast_wanted` says so, else ``weight`` itself.

    ``torch_npu`` defaults to the installed module, imported only when a cast is needed.
    """
    if not nz_cast_wanted(
        weight.dtype, weight_nz_mode=weight_nz_mode, soc=soc, is_meta=weight.is_meta
    ):
        return weight
    npu = torch_npu if torch_npu is not None else importlib.import_module("torch_npu")
    cast: torch.Tensor = npu.npu_format_cast(weight, ACL_FORMAT_FRACTAL_NZ)
    return cast


def dispose_tensor(t: torch.Tensor) -> None:
    """Release ``t``'s storage: it becomes an empty tensor of the same dtype and device.

    Other tensors that share the old storage (views) keep it alive and keep their values.
    """
    # set_(Tensor) is valid torch API that the type stubs do not list.
    t.set_(torch.empty((0,), dtype=t.dtype, device=t.device))  # type: ignore[call-overload]
