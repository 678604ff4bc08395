"""Batch-invariant kernels: a row's result never depends on how many rows share its batch.

- ``reduce_sum`` sums in a fixed pairwise tree (padded to a power of two), per row.
- ``mm``/``matmul``/``linear``/``addmm``/``bmm`` run the GEMM on fixed ``[TILE_M, K]`` row tiles
  copied into one zero-padded buffer, so the library always sees the same shapes and strides
  and picks the same kernel and reduction order whatever the batch size.
- ``softmax``/``log_softmax`` use ``reduce_sum`` for the normaliser.
- ``ascend::`` ops whose ``OpSpec`` has a ``batch_invariant`` variant run it instead
  (``add_rms_norm``: the plain add followed by ``ascend::rms_norm``, no fused kernel).

``enable_batch_invariant_mode()`` registers these for the aten and ``ascend`` ops on the active
device's dispatch key (``PrivateUse1`` with torch_npu, else ``CPU``);
``disable_batch_invariant_mode()`` destroys those libraries, which restores the previous kernels
exactly. ``linear``/``matmul`` are
also plain functions for callers that bypass aten (vLLM's CPU linear uses ``_C.onednn_mm``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch

from ascend_kernels.ops import NAMESPACE, SPECS, OpSpec
from ascend_kernels.ops.spec import Arguments
from ascend_kernels.validation import check

TILE_M = 16
_REDUCED = (torch.bfloat16, torch.float16)


class BatchInvariantState:
    """The mode's state: the override libraries (aten's and the ``ascend`` ops', when enabled)
    and per-kernel call counts."""

    def __init__(self) -> None:
        self.libraries: list[torch.library.Library] = []
        self.counts: dict[str, int] = {}

    def count(self, name: str) -> None:
        self.counts[name] = self.counts.get(name, 0) + 1


_state = BatchInvariantState()


def call_counts() -> dict[str, int]:
    """Calls per batch-invariant kernel since the last ``reset_call_counts()``."""
    return dict(_state.counts)


def reset_call_counts() -> None:
    """Zero every call counter."""
    _state.counts.clear()


# ---------------------------------------------------------------- reductions and softmax
def _tree_sum_last(x: torch.Tensor) -> torch.Tensor:
    """Sum over the last dim in a fixed pairwise order (independent of the other dims)."""
    length = x.shape[-1]
    if length == 0:
        return x.new_zeros(x.shape[:-1])
    width = 1 << (length - 1).bit_length()
    if width != length:
        padded = x.new_zeros((*x.shape[:-1], width))
        padded[..., :length] = x
        x = padded
    while width > 1:
        width //= 2
        x = x[..., :width] + x[..., width:]
    return x[..., 0]


def _dims(x: torch.Tensor, dim: int | Sequence[int] | None) -> list[int]:
    if dim is None:
        return list(range(x.dim()))
    dims = [dim] if isinstance(dim, int) else list(dim)
    if not dims:  # aten: an empty dim list reduces every dim
        return list(range(x.dim()))
    return sorted({d % max(x.dim(), 1) for d in dims})


def reduce_sum(
    x: torch.Tensor,
    dim: int | Sequence[int] | None = None,
    keepdim: bool = False,
    *,
    dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """``torch.sum`` with a fixed reduction order per output element."""
    _state.count("reduce_sum")
    if dtype is not None:
        x = x.to(dtype)
    out_dtype = x.dtype if x.is_floating_point() or x.is_complex() else torch.int64
    if x.dim() == 0:
        return x.to(out_dtype).clone()
    dims = _dims(x, dim)
    keep = [d for d in range(x.dim()) if d not in dims]
    work = x.permute(*keep, *dims)
    # The reduced size is given, not -1: with an empty kept dim -1 would be ambiguous.
    work = work.reshape(*[x.shape[d] for d in keep], math.prod(x.shape[d] for d in dims))
    acc_dtype = torch.float32 if out_dtype in _REDUCED else out_dtype
    result = _tree_sum_last(work.to(acc_dtype)).to(out_dtype)
    if keepdim:
        shape = [1 if d in dims else x.shape[d] for d in range(x.dim())]
        result = result.reshape(shape)
    return result


def softmax(x: torch.Tensor, dim: int, half_to_float: bool = False) -> torch.Tensor:
    """Softmax along ``dim`` computed in float32 with a fixed-order normaliser."""
    _state.count("softmax")
    out_dtype = torch.float32 if half_to_float else x.dtype
    moved = x.movedim(dim, -1).to(torch.float32)
    shifted = moved - moved.amax(dim=-1, keepdim=True)
    exp = shifted.exp()
    result = exp / _tree_sum_last(exp).unsqueeze(-1)
    return result.to(out_dtype).movedim(-1, dim).contiguous()


def log_softmax(x: torch.Tensor, dim: int, half_to_float: bool = False) -> torch.Tensor:
    """Log-softmax along ``dim`` computed in float32 with a fixed-order normaliser."""
    _state.count("log_softmax")
    out_dtype = torch.float32 if half_to_float else x.dtype
    moved = x.movedim(dim, -1).to(torch.float32)
    shifted = moved - moved.amax(dim=-1, keepdim=True)
    result = shifted - _tree_sum_last(shifted.exp()).log().unsqueeze(-1)
    return result.to(out_dtype).movedim(-1, dim).contiguous()


# ---------------------------------------------------------------- matmul family
def _mm_tiles(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    check(
        a.dim() == 2 and b.dim() == 2 and a.shape[1] == b.shape[0],
        f"mm needs [M, K] @ [K, N], got {list(a.shape)} @ {list(b.shape)}",
    )
    rows, inner = a.shape
    dtype = torch.result_type(a, b)
    out = torch.empty((rows, b.shape[1]), dtype=dtype, device=a.device)
    if rows == 0:
        return out
    b = b.to(dtype)  # same weight -> same strides; only M must not vary
    tile = torch.zeros((TILE_M, inner), dtype=dtype, device=a.device)
    tile_out = torch.empty((TILE_M, b.shape[1]), dtype=dtype, device=a.device)
    for start in range(0, rows, TILE_M):
        stop = min(start + TILE_M, rows)
        n = stop - start
        tile[:n].copy_(a[start:stop])
        if n < TILE_M:
            tile[n:].zero_()
        torch.mm(tile, b, out=tile_out)  # the mm.out overload is never overridden
        out[start:stop].copy_(tile_out[:n])
    return out


def mm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Batch-invariant ``torch.mm``."""
    _state.count("mm")
    return _mm_tiles(a, b)


def bmm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Batch-invariant ``torch.bmm``: each matrix of the batch on its own."""
    _state.count("bmm")
    check(
        a.dim() == 3 and b.dim() == 3 and a.shape[0] == b.shape[0],
        f"bmm needs [B, M, K] @ [B, K, N], got {list(a.shape)} @ {list(b.shape)}",
    )
    dtype = torch.result_type(a, b)
    out = torch.empty((a.shape[0], a.shape[1], b.shape[2]), dtype=dtype, device=a.device)
    for i in range(a.shape[0]):
        out[i].copy_(_mm_tiles(a[i], b[i]))
    return out


def addmm(
    bias: torch.Tensor, a: torch.Tensor, b: torch.Tensor, *, beta: float = 1, alpha: float = 1
) -> torch.Tensor:
    """Batch-invariant ``torch.addmm``: ``beta * bias + alpha * (a @ b)``."""
    _state.count("addmm")
    product = _mm_tiles(a, b)
    if alpha != 1:
        product = product * alpha
    if beta == 0:
        return product
    return product + (bias if beta == 1 else bias * beta)


def matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Batch-invariant ``torch.matmul`` (1-D, 2-D and broadcast batched operands)."""
    _state.count("matmul")
    squeeze_front = a.dim() == 1
    squeeze_back = b.dim() == 1
    a2 = a.unsqueeze(0) if squeeze_front else a
    b2 = b.unsqueeze(-1) if squeeze_back else b
    if b2.dim() == 2:
        lead = a2.shape[:-1]
        result = _mm_tiles(a2.reshape(-1, a2.shape[-1]), b2).reshape(*lead, b2.shape[-1])
    else:
        batch = torch.broadcast_shapes(a2.shape[:-2], b2.shape[:-2])  # type: ignore[no-untyped-call]
        a3 = a2.expand(*batch, *a2.shape[-2:]).reshape(-1, *a2.shape[-2:])
        b3 = b2.expand(*batch, *b2.shape[-2:]).reshape(-1, *b2.shape[-2:])
        dtype = torch.result_type(a3, b3)
        result = torch.empty((a3.shape[0], a3.shape[1], b3.shape[2]), dtype=dtype, device=a.device)
        for i in range(a3.shape[0]):
            result[i].copy_(_mm_tiles(a3[i], b3[i]))
        result = result.reshape(*batch, a3.shape[1], b3.shape[2])
    # Front first: for two vectors [1, 1] -> [1] -> [] (the other order fails on the 1-D rest).
    if squeeze_front:
        result = result.squeeze(-2)
    if squeeze_back:
        result = result.squeeze(-1)
    return result


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """Batch-invariant ``torch.nn.functional.linear``: ``x @ weight.T (+ bias)``."""
    _state.count("linear")
    lead = x.shape[:-1]
    out = _mm_tiles(x.reshape(-1, x.shape[-1]), weight.t())
    if bias is not None:
        out = out + bias
    return out.reshape(*lead, weight.shape[0])


# ---------------------------------------------------------------- aten overrides
def _sum_all(x: torch.Tensor, *, dtype: torch.dtype | None = None) -> torch.Tensor:
    return reduce_sum(x, None, False, dtype=dtype)


def _sum_dims(
    x: torch.Tensor,
    dim: Sequence[int] | None,
    keepdim: bool = False,
    *,
    dtype: torch.dtype | None = None,
) -> torch.Tensor:
    return reduce_sum(x, dim, keepdim, dtype=dtype)


def _addmm(
    bias: torch.Tensor, a: torch.Tensor, b: torch.Tensor, *, beta: float = 1, alpha: float = 1
) -> torch.Tensor:
    return addmm(bias, a, b, beta=beta, alpha=alpha)


ATEN_OVERRIDES = {
    "mm": mm,
    "bmm": bmm,
    "addmm": _addmm,
    "matmul": matmul,
    "linear": linear,
    "_softmax": softmax,
    "_log_softmax": log_softmax,
    "sum": _sum_all,
    "sum.dim_IntList": _sum_dims,
}


def _active_dispatch_key() -> str:
    from ascend_kernels.npu_loader import npu_registration

    return "PrivateUse1" if npu_registration.loaded else "CPU"


def _counted(spec: OpSpec, variant: Callable[[Arguments], Any]) -> Callable[..., Any]:
    """``spec``'s batch-invariant ``variant`` as its op (checks first), counted by op name."""

    def run(a: Arguments) -> Any:
        _state.count(spec.name)
        return variant(a)

    return spec.checked_bound(run)


def enable_batch_invariant_mode(dispatch_key: str | None = None) -> None:
    """Route the aten matmul family, softmax and sum to the batch-invariant kernels, and every
    ``ascend`` op with a ``batch_invariant`` variant in its ``OpSpec`` to that variant.

    ``dispatch_key`` defaults to the active device's key. Enabling twice is a no-op.
    """
    if _state.libraries:
        return
    key = dispatch_key or _active_dispatch_key()
    aten = torch.library.Library("aten", "IMPL")  # type: ignore[no-untyped-call]
    for name, fn in ATEN_OVERRIDES.items():
        aten.impl(name, fn, key)  # type: ignore[no-untyped-call]
    ops = torch.library.Library(NAMESPACE, "IMPL")  # type: ignore[no-untyped-call]
    for spec in SPECS.values():
        variant = spec.batch_invariant
        if variant is not None:
            ops.impl(spec.name, _counted(spec, variant), key)  # type: ignore[no-untyped-call]
    _state.libraries = [aten, ops]


def disable_batch_invariant_mode() -> None:
    """Remove the overrides; the previous kernels are back exactly. Also the reset."""
    for library in _state.libraries:
        library._destroy()  # type: ignore[no-untyped-call]
    _state.libraries = []


def is_batch_invariant_mode_enabled() -> bool:
    """True between ``enable_batch_invariant_mode()`` and ``disable_...()``."""
    return bool(_state.libraries)
