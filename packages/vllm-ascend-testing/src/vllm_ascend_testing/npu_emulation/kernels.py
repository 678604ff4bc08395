"""``torch_npu`` kernels on the emulated device: the real schemas, computed in torch.

Each kernel is ``define``d from the schema recorded from the wheel's ``libtorch_npu.so`` in a
scratch ``torch.library`` namespace, so the dispatcher rejects a call the real library would
(arity, keyword-only arguments, keyword names, types). The ``PrivateUse1`` implementation
computes the result; a CPU tensor where the kernel needs ``npu`` ones raises, as on hardware.
Kernels whose math is not emulated yet raise ``NotImplementedError`` after binding.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

import torch
import torch.nn.functional as F

from vllm_ascend_testing.npu_emulation.record import load_record

NAMESPACE = "torch_npu_emulated"


def _rms_norm(x: torch.Tensor, gamma: torch.Tensor, eps: float) -> tuple[torch.Tensor, ...]:
    dims = tuple(range(x.dim() - gamma.dim(), x.dim()))
    xf = x.float()
    rstd = torch.rsqrt(xf.pow(2).mean(dim=dims, keepdim=True) + eps)
    return (xf * rstd * gamma.float()).to(x.dtype), rstd


def npu_rms_norm(input: torch.Tensor, gamma: torch.Tensor,
                 epsilon: float = 1e-6) -> tuple[torch.Tensor, ...]:
    """y = x / sqrt(mean(x^2) + eps) * gamma over gamma's dims; and rstd (float32)."""
    return _rms_norm(input, gamma, epsilon)


def npu_add_rms_norm(x1: torch.Tensor, x2: torch.Tensor, gamma: torch.Tensor,
                     epsilon: float = 1e-6) -> tuple[torch.Tensor, ...]:
    """rms_norm(x1 + x2), its rstd and x1 + x2."""
    x = x1 + x2
    y, rstd = _rms_norm(x, gamma, epsilon)
    return y, rstd, x


def npu_swiglu(input: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """silu(first half) * second half along ``dim``."""
    a, b = input.chunk(2, dim=dim)
    return (F.silu(a.float()) * b.float()).to(input.dtype)


def npu_scatter_pa_kv_cache(key: torch.Tensor, value: torch.Tensor, key_cache: torch.Tensor,
                            value_cache: torch.Tensor, slot_mapping: torch.Tensor, *,
                            compress_lens: torch.Tensor | None = None,
                            compress_seq_offsets: torch.Tensor | None = None,
                            seq_lens: torch.Tensor | None = None,
                            cache_mode: str | None = "PA_NZ") -> None:
    """Row i of key/value goes to block ``slot // block_size``, offset ``slot % block_size``
    (``cache_mode="Norm"``: caches ``[num_blocks, block_size, kv_heads, head_size]``)."""
    if cache_mode != "Norm" or compress_lens is not None or seq_lens is not None:
        raise NotImplementedError(
            "the emulated npu_scatter_pa_kv_cache runs cache_mode='Norm' without compression "
            f"only (got cache_mode={cache_mode!r})")
    block_size = key_cache.shape[1]
    slots = slot_mapping.long()
    n = slots.shape[0]
    keep = slots >= 0
    rows = torch.arange(n, device=slots.device)[keep]
    slots = slots[keep]
    kc = key_cache.view(-1, *key_cache.shape[2:])
    vc = value_cache.view(-1, *value_cache.shape[2:])
    del block_size
    kc.index_copy_(0, slots, key[:n][rows].to(kc.dtype))
    vc.index_copy_(0, slots, value[:n][rows].to(vc.dtype))


def npu_fused_infer_attention_score(query: torch.Tensor, key: torch.Tensor,
                                    value: torch.Tensor, **kw: Any) -> tuple[torch.Tensor, ...]:
    """Paged TND attention, causal bottom-right aligned (``sparse_mode=3``), GQA, in float32.

    Query token j of sequence b (``q_len_b`` tokens) sees KV positions
    ``0 .. seq_lens[b] - q_len_b + j``; rows at or past the last query end are zeros.
    """
    layout = kw["input_layout"]
    if layout != "TND" or kw.get("block_table") is None or kw["sparse_mode"] != 3:
        raise NotImplementedError(
            "the emulated npu_fused_infer_attention_score runs input_layout='TND' with a "
            f"block_table and sparse_mode=3 only (got {layout!r}, sparse_mode="
            f"{kw['sparse_mode']})")
    block_table: torch.Tensor = kw["block_table"]
    q_ends = list(kw["actual_seq_lengths"])
    kv_lens = list(kw["actual_seq_lengths_kv"])
    heads, kv_heads = kw["num_heads"], kw["num_key_value_heads"] or kw["num_heads"]
    block_size, scale = kw["block_size"], kw["scale"]
    head_size = query.shape[-1]
    k_cache = key.view(key.shape[0], block_size, kv_heads, head_size)
    v_cache = value.view(value.shape[0], block_size, kv_heads, head_size)
    out = torch.zeros(query.shape, dtype=torch.float32, device=query.device)
    group = heads // kv_heads
    start = 0
    for b, end in enumerate(q_ends):
        q_len, kv_len = end - start, kv_lens[b]
        if q_len <= 0:
            start = end
            continue
        blocks = block_table[b, : (kv_len + block_size - 1) // block_size].long()
        k = k_cache[blocks].reshape(-1, kv_heads, head_size)[:kv_len].float()
        v = v_cache[blocks].reshape(-1, kv_heads, head_size)[:kv_len].float()
        k = k.repeat_interleave(group, dim=1).transpose(0, 1)
        v = v.repeat_interleave(group, dim=1).transpose(0, 1)
        q = query[start:end].float().transpose(0, 1)
        scores = torch.matmul(q, k.transpose(1, 2)) * scale
        q_pos = torch.arange(q_len, device=query.device).unsqueeze(1) + (kv_len - q_len)
        kv_pos = torch.arange(kv_len, device=query.device).unsqueeze(0)
        scores = scores.masked_fill(kv_pos > q_pos, float("-inf"))
        out[start:end] = torch.matmul(torch.softmax(scores, dim=-1), v).transpose(0, 1)
        start = end
    lse = torch.zeros(1, dtype=torch.float32, device=query.device)
    return out.to(query.dtype), lse


#: The kernels with emulated math, by torch_npu name.
IMPLEMENTATIONS: dict[str, Callable[..., Any]] = {
    "npu_rms_norm": npu_rms_norm,
    "npu_add_rms_norm": npu_add_rms_norm,
    "npu_swiglu": npu_swiglu,
    "npu_scatter_pa_kv_cache": npu_scatter_pa_kv_cache,
    "npu_fused_infer_attention_score": npu_fused_infer_attention_score,
}


def recorded_schemas() -> dict[str, str]:
    """Every torch_npu kernel schema in the record (ATB ops excluded: they need NNAL)."""
    record = load_record()
    schemas = {op: entry["schema"] for op, entry in record["ops"].items()
               if entry["library"] == "torch_npu"}
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
