"""``torch_npu`` kernels on the emulated device: the real schemas, computed by the ``ascend``
references.

Each kernel is ``define``d from the schema recorded from the wheel (``libtorch_npu.so``, and
the ATB ops torch_npu registers from ``op_plugin.atb``) in a scratch ``torch.library``
namespace, so the dispatcher rejects a call the real library would (arity, keyword-only
arguments, keyword names, types). The ``PrivateUse1`` implementation maps the kernel's
arguments back onto the matching ``ascend_kernels`` reference (the whole-tensor definition
the ``ascend`` op's NPU adapter is checked against) and computes with it; a CPU tensor where
the kernel needs ``npu`` ones raises, as on hardware. Before computing, each kernel checks
the constraints recorded with it from the wheel's docs (``kernel_contracts``) and its family's
documented limits (``kernels_attention``, ``kernels_rope``). Kernels whose math is not
emulated yet raise ``NotImplementedError`` after binding.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

import torch

from torch_npu_double.emulation import (
    kernels_attention,
    kernels_moe,
    kernels_quant,
    kernels_rope,
)
from torch_npu_double.emulation.kernel_contracts import (
    bind,
    check_recorded,
    refuse,
    require_dtype,
)
from torch_npu_double.record import load_record

NAMESPACE = "torch_npu_emulated"
NORM_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
NORM_SOURCE = "doc torch_npu-npu_add_rms_norm.md: float16, bfloat16, float32"


def _reference(name: str) -> ModuleType:
    """``ascend_kernels.ops.<name>`` (the references), imported at the first kernel call, never
    during the install: ascend_kernels registers its NPU adapters when it is first imported and
    ``torch_npu`` imports then (as on a host with the real torch_npu, which torch loads before
    anything else), so importing it before the emulated ``torch_npu`` is in ``sys.modules``
    would leave every ``ascend`` op on its reference for the whole process."""
    return importlib.import_module(f"ascend_kernels.ops.{name}")


def _rstd(x: torch.Tensor, gamma: torch.Tensor, eps: float) -> torch.Tensor:
    """The kernels' second output: ``1 / sqrt(mean(x^2) + eps)`` over gamma's dims, float32."""
    dims = tuple(range(x.dim() - gamma.dim(), x.dim()))
    xf = x.float()
    return torch.rsqrt(xf.pow(2).mean(dim=dims, keepdim=True) + eps)


def _flat_norm(x: torch.Tensor, gamma: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``x`` and ``gamma`` with gamma's dims flattened into one (the reference's last dim)."""
    width = gamma.numel()
    return x.reshape(*x.shape[: x.dim() - gamma.dim()], width), gamma.reshape(width)


def npu_rms_norm(input: torch.Tensor, gamma: torch.Tensor,
                 epsilon: float = 1e-6) -> tuple[torch.Tensor, ...]:
    """``ascend::rms_norm`` over gamma's dims; and rstd (float32)."""
    x, g = _flat_norm(input, gamma)
    y = _reference("norm").rms_norm(x, g, epsilon)
    return y.reshape(input.shape), _rstd(input, gamma, epsilon)


def npu_add_rms_norm(x1: torch.Tensor, x2: torch.Tensor, gamma: torch.Tensor,
                     epsilon: float = 1e-6) -> tuple[torch.Tensor, ...]:
    """``ascend::add_rms_norm``: rms_norm(x1 + x2) and its rstd, both of the float32 sum, and
    x1 + x2 rounded once to the inputs' dtype."""
    for name, t in (("x1", x1), ("x2", x2), ("gamma", gamma)):
        require_dtype("npu_add_rms_norm", name, t, NORM_DTYPES, NORM_SOURCE)
    if not x1.dtype == x2.dtype == gamma.dtype:
        raise refuse("npu_add_rms_norm", f"x1 {x1.dtype}, x2 {x2.dtype}, gamma {gamma.dtype}"
                     " differ (stricter reading: one dtype for all three)", NORM_SOURCE)
    a, g = _flat_norm(x1, gamma)
    b, _ = _flat_norm(x2, gamma)
    y, summed = _reference("norm").add_rms_norm(a, b, g, epsilon)
    # rstd of the float32 sum the norm used, not of the sum rounded to x's dtype
    sum32 = x1.float() + x2.float()
    return y.reshape(x1.shape), _rstd(sum32, gamma, epsilon), summed.reshape(x1.shape)


def npu_swiglu(input: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """``ascend::silu_and_mul`` along ``dim``: silu(first half) * second half."""
    moved = input.movedim(dim, -1)
    out: torch.Tensor = _reference("activation").silu_and_mul(moved)
    return out.movedim(-1, dim).contiguous()


#: The kernels with emulated math, by torch_npu name (``name.overload`` for an overload);
#: ATB rope is added per install (``register``: its static caches belong to the device).
IMPLEMENTATIONS: dict[str, Callable[..., Any]] = {
    "npu_rms_norm": npu_rms_norm,
    "npu_add_rms_norm": npu_add_rms_norm,
    "npu_swiglu": npu_swiglu,
    "npu_mrope": kernels_rope.npu_mrope,
    "npu_scatter_pa_kv_cache": kernels_attention.scatter_pa_kv_cache,
    "npu_fused_infer_attention_score": kernels_attention.fused_infer_attention_score,
    "npu_fused_infer_attention_score.out": kernels_attention.fused_infer_attention_score_out,
    "_npu_fused_infer_attention_score_get_max_workspace": kernels_attention.get_max_workspace,
    **kernels_moe.IMPLEMENTATIONS,
}

#: Arguments a kernel writes although its recorded schema marks no alias (``.out`` takes
#: ``Tensor[] out``, and uses ``workspace`` as its scratch memory): graph captures and task
#: updates treat them as the kernel's outputs.
UNMARKED_WRITES: dict[str, tuple[str, ...]] = {
    "npu_fused_infer_attention_score.out": ("out", "workspace"),
}


def recorded_schemas() -> dict[str, str]:
    """Every kernel schema in the record: torch_npu's and the ATB ops' (the emulated host has
    NNAL, so ``torch_npu.op_plugin.atb`` would load them)."""
    record = load_record()
    schemas = {op: entry["schema"] for op, entry in record["ops"].items()
               if entry["library"] in ("torch_npu", "atb")}
    return schemas | dict(record["kernel_schemas"])


def _tensors(args: Sequence[Any], kwargs: dict[str, Any]) -> list[torch.Tensor]:
    found: list[torch.Tensor] = []
    for value in [*args, *kwargs.values()]:
        if isinstance(value, torch.Tensor):
            found.append(value)
        elif isinstance(value, (list, tuple)):
            found.extend(v for v in value if isinstance(v, torch.Tensor))
    return found


def _kernel(op: str, compute: Callable[..., Any] | None,
            constraints: list[dict[str, Any]], schema: Any) -> Callable[..., Any]:
    def run(*args: Any, **kwargs: Any) -> Any:
        for tensor in _tensors(args, kwargs):
            if tensor.device.type != "npu":
                raise RuntimeError(
                    f"torch_npu.{op}: expected all tensors on npu, got a {tensor.device} "
                    f"tensor of shape {tuple(tensor.shape)}")
        # The dispatcher passes what the caller gave; the kernels get every argument by name.
        named = bind(schema(), args, kwargs)
        check_recorded(op, constraints, named)
        if compute is None:
            raise NotImplementedError(f"torch_npu.{op} is bound to its real schema but its math "
                                      "is not emulated yet")
        return compute(**named)

    return run


def _overload(packet: Any, op: str) -> Any:
    name, _, overload = op.partition(".")
    return getattr(getattr(packet, name), overload or "default")


def register(library: torch.library.Library, statics: kernels_rope.AtbRopeStatics,
             capturing: Callable[[], bool]) -> dict[str, Any]:
    """Define every recorded kernel in ``library`` and return ``torch_npu.<op>`` callables
    (the op's overload packet, so ``torch_npu.X.out`` is the ``.out`` overload, as in the
    real ``torch_npu.X = torch.ops.npu.X``). ``capturing()``: whether this thread captures
    an NPU graph (for the kernels whose host side a capture refuses)."""
    packet = getattr(torch.ops, library.ns)
    implementations = IMPLEMENTATIONS | {
        kernels_rope.ATB_ROPE: kernels_rope.atb_rotary_embedding(statics, capturing)}
    # The quantization kernels (their NZ weight formats belong to this install).
    implementations |= kernels_quant.implementations(kernels_quant.WeightFormats())
    constraints = {op: entry.get("constraints", []) for op, entry in load_record()["ops"].items()}
    names: set[str] = set()
    for op, schema in sorted(recorded_schemas().items()):
        library.define(re.sub(r"^[\w.]+", op, schema))
        kernel = _kernel(op, implementations.get(op), constraints.get(op, []),
                         lambda op=op: _overload(packet, op)._schema)
        library.impl(op, kernel, "PrivateUse1")
        library.impl(op, kernel, "CPU")
        names.add(op.partition(".")[0])
    return {name: getattr(packet, name) for name in sorted(names)}


def add_to(tnpu: ModuleType, library: torch.library.Library,
           statics: kernels_rope.AtbRopeStatics, capturing: Callable[[], bool]) -> None:
    """Put the kernels on ``torch_npu`` under their real names."""
    for op, fn in register(library, statics, capturing).items():
        setattr(tnpu, op, fn)
