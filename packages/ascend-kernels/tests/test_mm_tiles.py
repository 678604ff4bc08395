"""Batch-invariant ``mm``: argument errors, result dtype/device, and one fixed-shape mm per tile."""

from __future__ import annotations

import re
from typing import Any

import pytest
import torch
from ascend_kernels import batch_invariant
from torch.utils._python_dispatch import TorchDispatchMode


class _CountMm(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.shapes: list[tuple[int, ...]] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if func.overloadpacket is torch.ops.aten.mm:
            self.shapes.append(tuple(args[0].shape))
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize(
    ("a_shape", "b_shape"),
    [((2, 3), (4, 5)), ((2, 3, 4), (3, 5)), ((2, 3), (3,))],
)
def test_mismatched_operands_name_both_shapes(
    a_shape: tuple[int, ...], b_shape: tuple[int, ...]
) -> None:
    a, b = torch.zeros(a_shape), torch.zeros(b_shape)
    message = f"mm needs [M, K] @ [K, N], got {list(a_shape)} @ {list(b_shape)}"
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        batch_invariant.mm(a, b)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_reduced_precision_operands_give_that_dtype(dtype: torch.dtype) -> None:
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(5, 7, generator=g), torch.randn(7, 3, generator=g)
    out = batch_invariant.mm(a.to(dtype), b.to(dtype))
    assert out.dtype == dtype and out.shape == (5, 3)
    expected = a.to(dtype).double() @ b.to(dtype).double()
    torch.testing.assert_close(out.double(), expected, rtol=2e-2, atol=2e-2)


def test_mixed_dtypes_compute_in_the_promoted_dtype() -> None:
    g = torch.Generator().manual_seed(1)
    a, b = torch.randn(4, 6, generator=g), torch.randn(6, 2, generator=g).bfloat16()
    out = batch_invariant.mm(a, b)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out.double(), a.double() @ b.double(), rtol=1e-5, atol=1e-5)


def test_result_stays_on_the_operands_device() -> None:
    tile = batch_invariant.TILE_M
    a = torch.empty(2 * tile + 3, 4, device="meta")
    b = torch.empty(4, 3, device="meta")
    out = batch_invariant.mm(a, b)
    assert out.device.type == "meta" and out.shape == (2 * tile + 3, 3)


def test_one_full_tile_mm_per_tile_of_rows() -> None:
    tile = batch_invariant.TILE_M
    g = torch.Generator().manual_seed(2)
    a, b = torch.randn(2 * tile + 1, 5, generator=g), torch.randn(5, 3, generator=g)
    with _CountMm() as counter:
        out = batch_invariant.mm(a, b)
    assert counter.shapes == [(tile, 5)] * 3
    torch.testing.assert_close(out.double(), a.double() @ b.double(), rtol=1e-5, atol=1e-5)
