"""``torch_npu`` kernels on the emulated device: the real schemas, computed by the ``ascend``
references.

Each kernel is ``define``d from the schema recorded from the wheel (``libtorch_npu.so``, and
the ATB ops torch_npu registers from ``op_plugin.atb``) in a scratch ``torch.library``
namespace, so the dispatcher rejects a call the real library would (arity, keyword-only
arguments, keyword names, types). The ``PrivateUse1`` implementation maps the kernel's
arguments back onto the matching ``ascend_kernels`` reference (the whole-tensor definition
the ``ascend`` op's NPU adapter is checked against) and computes with it; a CPU tensor where
the kernel needs ``npu`` ones raises, as on hardware. Kernels whose math is not emulated yet
raise ``NotImplementedError`` after binding.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

import torch

from vllm_ascend_testing.npu_emulation.record import load_record

NAMESPACE = "torch_npu_emulated"


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
    """``ascend::add_rms_norm``: rms_norm(x1 + x2), its rstd and x1 + x2."""
    a, g = _flat_norm(x1, gamma)
    b, _ = _flat_norm(x2, gamma)
    y, summed = _reference("norm").add_rms_norm(a, b, g, epsilon)
    return (y.reshape(x1.shape), _rstd(summed.reshape(x1.shape), gamma, epsilon),
            summed.reshape(x1.shape))


def npu_swiglu(input: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """``ascend::silu_and_mul`` along ``dim``: silu(first half) * second half."""
    moved = input.movedim(dim, -1)
    out: torch.Tensor = _reference("activation").silu_and_mul(moved)
    return out.movedim(-1, dim).contiguous()


def _npu_rotary_embedding(positions: torch.Tensor, query: torch.Tensor, key: torch.Tensor,
                          head_size: int, cos_sin_cache: torch.Tensor,
                          is_neox_style: bool) -> None:
    """ATB's rope, in place on 2-D ``[T, heads * head_size]`` query/key: ``ascend::
    rotary_embedding`` over whole heads (``rotary_dim`` is the cache's width)."""
    rotary_dim = cos_sin_cache.shape[-1]
    if rotary_dim != head_size:
        raise NotImplementedError(
            "the emulated _npu_rotary_embedding rotates whole heads only (cos_sin_cache "
            f"width {rotary_dim}, head_size {head_size})")
    q, k = _reference("rope").rotary_embedding(positions, query, key, cos_sin_cache,
                                               head_size, rotary_dim, is_neox_style)
    query.copy_(q)
    key.copy_(k)


def npu_scatter_pa_kv_cache(key: torch.Tensor, value: torch.Tensor, key_cache: torch.Tensor,
                            value_cache: torch.Tensor, slot_mapping: torch.Tensor, *,
                            compress_lens: torch.Tensor | None = None,
                            compress_seq_offsets: torch.Tensor | None = None,
                            seq_lens: torch.Tensor | None = None,
                            cache_mode: str | None = "PA_NZ") -> None:
    """``ascend::reshape_and_cache`` of the first ``len(slot_mapping)`` rows
    (``cache_mode="Norm"``: caches ``[num_blocks, block_size, kv_heads, head_size]``)."""
    if cache_mode != "Norm" or compress_lens is not None or seq_lens is not None:
        raise NotImplementedError(
            "the emulated npu_scatter_pa_kv_cache runs cache_mode='Norm' without compression "
            f"only (got cache_mode={cache_mode!r})")
    n = slot_mapping.shape[0]
    _reference("attention").reshape_and_cache(key[:n], value[:n], key_cache, value_cache,
                                              slot_mapping)


def npu_fused_infer_attention_score(query: torch.Tensor, key: torch.Tensor,
                                    value: torch.Tensor, **kw: Any) -> tuple[torch.Tensor, ...]:
    """Paged TND attention, causal bottom-right aligned (``sparse_mode=3``), GQA:
    ``ascend::paged_attention`` with ``actual_seq_lengths`` as the query ends and
    ``actual_seq_lengths_kv`` as the sequence lengths; rows past the last end are zeros."""
    layout = kw["input_layout"]
    if layout != "TND" or kw.get("block_table") is None or kw["sparse_mode"] != 3:
        raise NotImplementedError(
            "the emulated npu_fused_infer_attention_score runs input_layout='TND' with a "
            f"block_table and sparse_mode=3 only (got {layout!r}, sparse_mode="
            f"{kw['sparse_mode']})")
    heads, kv_heads = kw["num_heads"], kw["num_key_value_heads"] or kw["num_heads"]
    block_size, head_size = kw["block_size"], query.shape[-1]
    k_cache = key.view(key.shape[0], block_size, kv_heads, head_size)
    v_cache = value.view(value.shape[0], block_size, kv_heads, head_size)
    out = _reference("attention").paged_attention(
        query.view(query.shape[0], heads, head_size), k_cache, v_cache, kw["block_table"],
        list(kw["actual_seq_lengths"]), list(kw["actual_seq_lengths_kv"]), kw["scale"])
    lse = torch.zeros(1, dtype=torch.float32, device=query.device)
    return out.view(query.shape), lse


#: The kernels with emulated math, by torch_npu name.
IMPLEMENTATIONS: dict[str, Callable[..., Any]] = {
    "npu_rms_norm": npu_rms_norm,
    "npu_add_rms_norm": npu_add_rms_norm,
    "npu_swiglu": npu_swiglu,
    "_npu_rotary_embedding": _npu_rotary_embedding,
    "npu_scatter_pa_kv_cache": npu_scatter_pa_kv_cache,
    "npu_fused_infer_attention_score": npu_fused_infer_attention_score,
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


def _kernel(op: str) -> Callable[..., Any]:
    compute = IMPLEMENTATIONS.get(op)

    def run(*args: Any, **kwargs: Any) -> Any:
        for tensor in _tensors(args, kwargs):
            if tensor.device.type != "npu":
                raise RuntimeError(
                    f"torch_npu.{op}: expected all tensors on npu, got a {tensor.device} "
                    f"tensor of shape {tuple(tensor.shape)}")
        if compute is None:
            raise NotImplementedError(f"torch_npu.{op} is bound to its real schema but its math "
                                      "is not emulated yet")
        return compute(*args, **kwargs)

    return run


def register(library: torch.library.Library) -> dict[str, Callable[..., Any]]:
    """Define every recorded kernel in ``library`` and return ``torch_npu.<op>`` callables."""
    ops: dict[str, Callable[..., Any]] = {}
    packet = getattr(torch.ops, library.ns)
    for op, schema in sorted(recorded_schemas().items()):
        library.define(re.sub(r"^\w+", op, schema))
        kernel = _kernel(op)
        library.impl(op, kernel, "PrivateUse1")
        library.impl(op, kernel, "CPU")
        ops[op] = getattr(packet, op).default
    return ops


def add_to(tnpu: ModuleType, library: torch.library.Library) -> None:
    """Put the kernels on ``torch_npu`` under their real names."""
    for op, fn in register(library).items():
        setattr(tnpu, op, fn)
