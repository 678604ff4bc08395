"""The int8 quantization kernels on the emulated device: ``npu_quantize``,
``npu_dynamic_quant``, ``npu_format_cast`` and ``npu_quant_matmul``.

Math: the ``ascend`` references (``quant32`` / ``dynamic_quant32``), and for the matmul an
exact int32 accumulation of int8 x int8, then the documented dequantization
``(x1 @ x2 + int32 bias) * scale [* pertoken_scale] (+ float bias)`` in float32 and one cast
to ``output_dtype``. Limits: the wheel's ``_op_plugin_docs.py`` (``npu_quant_matmul`` at
lines 4953-5040, the A2/A3 rows of its dtype table), each listed with its quote in the
harness README ("Enforced contracts"); where the docs are silent the stricter reading is
taken and the message says so. ``WeightFormats`` remembers which storages
``npu_format_cast`` made fractal NZ, so a test can see what the runtime cast.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

import torch

from torch_npu_double.emulation.kernel_contracts import refuse, require_dtype

ND, NZ = 2, 29  # torch_npu's ACL_FORMAT_ND and ACL_FORMAT_FRACTAL_NZ
QMM = "npu_quant_matmul"
QMM_DOC = "torch_npu docs npu_quant_matmul (_op_plugin_docs.py:4953-5040)"
QMM_MAX_DIM = 65535  # "x1与x2最后一维的shape大小不能超过65535"
#: torch's ScalarType ids (the record's dtype_enum): the dispatcher passes a dtype as its id.
_OUTPUTS = {1: torch.int8, 3: torch.int32, 4: torch.int64, 5: torch.float16, 6: torch.float32,
            7: torch.float64, 15: torch.bfloat16}
#: output dtype -> the scale dtypes and float bias dtypes its A2/A3 table column allows.
_SCALES = {
    torch.float16: ((torch.int64, torch.float32), (torch.float16, torch.float32)),
    torch.bfloat16: ((torch.float32, torch.bfloat16), (torch.bfloat16, torch.float32)),
    torch.int8: ((torch.int64, torch.float32), ()),
}
_LOW_32 = 0xFFFFFFFF


class WeightFormats:
    """Storages ``npu_format_cast`` turned fractal NZ on one emulated install."""

    def __init__(self) -> None:
        self._nz: dict[int, tuple[int, ...]] = {}

    def mark(self, t: torch.Tensor) -> None:
        self._nz[t.untyped_storage().data_ptr()] = tuple(t.shape)

    def is_nz(self, t: torch.Tensor) -> bool:
        return self._nz.get(t.untyped_storage().data_ptr()) == tuple(t.shape)

    def count(self) -> int:
        return len(self._nz)


def _dtype(value: Any) -> Any:
    return value if isinstance(value, torch.dtype) else _OUTPUTS.get(value, value)


def _quant_ref() -> Any:
    # Imported at the first call, as kernels._reference explains.
    return importlib.import_module("ascend_kernels.ops.quant")


def npu_quantize(input: torch.Tensor, scales: torch.Tensor, zero_points: torch.Tensor | None,
                 dtype: Any, axis: int = 1, div_mode: bool = True) -> torch.Tensor:
    """int8 ``round(x / scales + zero_points)`` (div_mode) or ``round(x * scales + ...)``
    along the last axis; only the int8 output (``torch.qint8``) is emulated."""
    src = "torch_npu docs npu_quantize"
    if dtype not in (torch.qint8, 12):
        raise refuse("npu_quantize", f"dtype {dtype} is not emulated; torch.qint8 only", src)
    if axis not in (-1, input.dim() - 1):
        raise refuse("npu_quantize", f"axis {axis}: only the last axis is emulated", src)
    width = input.shape[-1]
    for name, t in (("scales", scales), ("zero_points", zero_points)):
        if t is not None and (t.dim() != 1 or t.numel() not in (1, width)):
            raise refuse("npu_quantize", f"{name} has shape {list(t.shape)}; allowed: [1] or "
                         f"[{width}] (stricter reading: one value or one per channel)", src)
    if not div_mode and zero_points is not None and (
            zero_points.shape != scales.shape or zero_points.dtype != scales.dtype):
        raise refuse("npu_quantize", "with div_mode=False zero_points must match scales in "
                     "shape and dtype", src + " (:11343)")
    offset = zero_points if zero_points is not None else torch.zeros(1, device=input.device)
    s = scales.float() if div_mode else 1.0 / scales.float()
    out: torch.Tensor = _quant_ref().quant32(input.float(), s, offset)
    return out


def npu_dynamic_quant(input: torch.Tensor, smooth_scales: torch.Tensor | None = None,
                      group_index: torch.Tensor | None = None, dst_type: Any = None,
                      quant_mode: str = "pertoken",
                      dst_type_max: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token symmetric int8 of the last dim: ``(q, float32 scale [rows])``."""
    src = "torch_npu docs npu_dynamic_quant"
    if smooth_scales is not None or group_index is not None:
        raise refuse("npu_dynamic_quant", "smooth_scales/group_index are not emulated", src)
    if dst_type not in (None, 1, torch.int8) or quant_mode != "pertoken":
        raise refuse("npu_dynamic_quant", f"dst_type {dst_type}, quant_mode {quant_mode!r}: "
                     "only int8 per token is emulated", src)
    q, scale = _quant_ref().dynamic_quant32(input.float())
    return q, scale


def _format_cast(formats: WeightFormats) -> Callable[..., torch.Tensor]:
    def npu_format_cast(input: torch.Tensor, acl_format: int, customize_dtype: Any = None,
                        input_dtype: Any = None) -> torch.Tensor:
        """A copy of ``input`` in ``acl_format`` (ND or fractal NZ; the bytes stay row-major
        in the emulation, the format is remembered)."""
        src = "torch_npu docs npu_format_cast; stricter reading: ND (2) and NZ (29) only"
        if acl_format not in (ND, NZ):
            raise refuse("npu_format_cast", f"acl_format {acl_format} is not emulated", src)
        if acl_format == NZ and input.dim() < 2:
            raise refuse("npu_format_cast", f"NZ needs at least 2 dims, got {input.dim()}", src)
        out = input.contiguous().clone()
        if acl_format == NZ:
            formats.mark(out)
        return out

    return npu_format_cast


def _scale_values(scale: torch.Tensor) -> torch.Tensor:
    """float32 scales; an int64 scale holds the float32 bits in its low 32 bits (the form
    ``npu_trans_quant_param`` makes; stricter reading: no offset bits above them)."""
    if scale.dtype != torch.int64:
        return scale.float()
    if bool((scale >> 32).any()):
        raise refuse(QMM, "scale int64 has bits above the low 32 set; only a plain float32 "
                     "bit pattern is emulated (stricter reading)", QMM_DOC)
    low = scale & _LOW_32
    return torch.where(low >= 2**31, low - 2**32, low).to(torch.int32).view(torch.float32)


def _check_quant_matmul(x1: torch.Tensor, x2: torch.Tensor, scale: torch.Tensor,
                        offset: torch.Tensor | None, pertoken_scale: torch.Tensor | None,
                        bias: torch.Tensor | None, out: Any) -> None:
    require_dtype(QMM, "x1", x1, (torch.int8,), QMM_DOC + ": int8 (int32 int4 not emulated)")
    require_dtype(QMM, "x2", x2, (torch.int8,), QMM_DOC + ": x2 dtype as x1")
    for name, t in (("x1", x1), ("x2", x2)):
        if not 2 <= t.dim() <= 6:
            raise refuse(QMM, f"{name} has {t.dim()} dims; allowed: 2-6", QMM_DOC)
    k, n, m = x1.shape[-1], x2.shape[-1], x1.shape[-2]
    if x2.shape[-2] != k:
        raise refuse(QMM, f"x2 is {list(x2.shape)}; it must be [..., K={k}, N] for x1 "
                     f"{list(x1.shape)} (stricter reading: no transposed x2)", QMM_DOC)
    if max(k, n) > QMM_MAX_DIM:
        raise refuse(QMM, f"K={k}, N={n}: the last dims may not exceed {QMM_MAX_DIM}", QMM_DOC)
    if not isinstance(out, torch.dtype) or out not in _SCALES:
        allowed = "int8, float16, bfloat16 (int32 output not emulated)"
        raise refuse(QMM, f"output_dtype {out} is not allowed; allowed: {allowed}", QMM_DOC)
    scales: tuple[torch.dtype, ...] = _SCALES[out][0]
    float_biases = _SCALES[out][1]
    if pertoken_scale is not None:
        if out == torch.int8:
            raise refuse(QMM, "pertoken_scale with an int8 output is not in the A2/A3 table",
                         QMM_DOC)
        scales = (torch.float32,) if out == torch.float16 else (torch.float32, torch.bfloat16)
        require_dtype(QMM, "pertoken_scale", pertoken_scale, (torch.float32,), QMM_DOC)
        if pertoken_scale.dim() != 1 or pertoken_scale.numel() != m:
            raise refuse(QMM, f"pertoken_scale has shape {list(pertoken_scale.shape)}; it "
                         f"must be 1-D (m,) = ({m},)", QMM_DOC)
    elif out == torch.float16 and scale.dtype == torch.bfloat16:
        raise refuse(QMM, "float16 output takes an int64 or float32 scale", QMM_DOC)
    require_dtype(QMM, "scale", scale, scales, QMM_DOC + f", for {out} output")
    if scale.dim() != 1 or scale.numel() not in (1, n):
        raise refuse(QMM, f"scale has shape {list(scale.shape)}; it must be 1-D (t,), t=1 or "
                     f"n={n}", QMM_DOC)
    if offset is not None:
        if out != torch.int8:
            raise refuse(QMM, "offset is allowed with an int8 output only", QMM_DOC)
        require_dtype(QMM, "offset", offset, (torch.float32,), QMM_DOC)
    if bias is not None:
        require_dtype(QMM, "bias", bias, (torch.int32, *float_biases), QMM_DOC + f", {out}")
        if bias.dim() not in (1, 2) or bias.shape[-1] != n or bias.numel() != n:
            raise refuse(QMM, f"bias has shape {list(bias.shape)}; allowed (n,) or (1, n) "
                         f"with n={n} (stricter reading: no batched bias)", QMM_DOC)


def _quant_matmul(formats: WeightFormats) -> Callable[..., torch.Tensor]:
    def npu_quant_matmul(x1: torch.Tensor, x2: torch.Tensor, scale: torch.Tensor,
                         offset: torch.Tensor | None = None,
                         pertoken_scale: torch.Tensor | None = None,
                         bias: torch.Tensor | None = None, output_dtype: Any = None,
                         x1_dtype: Any = None, x2_dtype: Any = None,
                         pertoken_scale_dtype: Any = None, scale_dtype: Any = None,
                         group_sizes: Any = None, y_scale: Any = None) -> torch.Tensor:
        """int8 x int8 -> int32, dequantized per channel (and per token)."""
        extras = {"x1_dtype": x1_dtype, "x2_dtype": x2_dtype, "group_sizes": group_sizes,
                  "pertoken_scale_dtype": pertoken_scale_dtype, "scale_dtype": scale_dtype,
                  "y_scale": y_scale}
        given = [name for name, value in extras.items() if value is not None]
        if given:
            raise refuse(QMM, f"{', '.join(given)} not emulated (int8 x int8 only)", QMM_DOC)
        out = torch.int8 if output_dtype is None else _dtype(output_dtype)
        _check_quant_matmul(x1, x2, scale, offset, pertoken_scale, bias, out)
        acc = torch.matmul(x1.to(torch.int32), x2.to(torch.int32))  # exact int32 sums
        if bias is not None and bias.dtype == torch.int32:
            acc = acc + bias.reshape(-1)
        y = acc.to(torch.float32) * _scale_values(scale)
        if pertoken_scale is not None:
            y = y * pertoken_scale.reshape(-1, 1)
        if bias is not None and bias.dtype != torch.int32:
            y = y + bias.float().reshape(-1)
        if out == torch.int8:
            if offset is not None:
                y = y + offset.float()
            return y.round().clamp(-128, 127).to(torch.int8)
        return y.to(out)

    return npu_quant_matmul


def implementations(formats: WeightFormats) -> dict[str, Callable[..., Any]]:
    """The quantization kernels of one install (the NZ formats it remembers: ``formats``)."""
    return {
        "npu_quantize": npu_quantize,
        "npu_dynamic_quant": npu_dynamic_quant,
        "npu_format_cast": _format_cast(formats),
        QMM: _quant_matmul(formats),
    }
