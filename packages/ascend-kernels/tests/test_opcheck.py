"""torch.library.opcheck for every op (float32, bfloat16, int8 offsets), static and dynamic."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from ascend_kernels import OP_NAMES

A = torch.ops.ascend


def sample_args(op: str, dtype: torch.dtype) -> tuple[Any, ...]:
    """Small inputs for ``op`` in activation dtype ``dtype`` (odd sizes on purpose)."""
    g = torch.Generator().manual_seed(0)

    def rand(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=g).to(dtype)

    x, res, w, b = rand(5, 70), rand(5, 70), rand(70), rand(70)
    scale, offset = torch.tensor([0.05]), torch.tensor([1.0])
    pos = torch.tensor([0, 3, 1, 7, 2])
    cache = rand(8, 32)
    table: dict[str, tuple[Any, ...]] = {
        "rms_norm": (x, w, 1e-6),
        "add_rms_norm": (x, res, w, 1e-6, b),
        "quantize": (x, scale, offset),
        "dynamic_quant": (x,),
        "add_rms_norm_quant": (x, res, w, scale, offset, 1e-6, b),
        "add_rms_norm_dynamic_quant": (x, res, w, 1e-6, None),
        "dynamic_mx_quant": (x,),
        "add_rms_norm_dynamic_mx_quant": (x, res, w, 1e-6),
        "rms_norm_dynamic_mx_quant": (x, w, 1e-6),
        "rotary_embedding": (pos, rand(5, 4 * 48), rand(5, 2, 48), cache, 48, 32, True),
        "split_qkv_rmsnorm_rope": (
            rand(5, 8 * 48),
            rand(48),
            rand(48),
            pos,
            cache,
            4 * 48,
            2 * 48,
            48,
            32,
            False,
            1e-6,
            rand(48),
            rand(48),
        ),
        "muls_add": (x, res, 0.25),
        "bgmv_expand": (
            rand(5, 8),
            rand(3, 16, 8),
            torch.tensor([0, 1, -1, 2, 0]),
            rand(5, 40),
            8,
            16,
        ),
        "sgmv_expand": (
            rand(5, 8),
            rand(3, 16, 8),
            torch.tensor([2, 0]),
            torch.tensor([2, 3]),
            rand(5, 40),
            24,
            16,
        ),
        "silu_and_mul": (rand(5, 2 * 35),),
        "mrotary_embedding": (
            torch.tensor([[0, 3, 1, 7, 2], [1, 1, 0, 2, 5], [4, 0, 6, 1, 3]]),
            rand(5, 4 * 48),
            rand(5, 2, 48),
            cache,
            48,
            32,
            [4, 6, 6],
            True,
            False,
        ),
    }
    return table[op]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("op", OP_NAMES)
def test_opcheck(op: str, dtype: torch.dtype) -> None:
    # The four default checks include test_aot_dispatch_dynamic (symbolic shapes).
    torch.library.opcheck(getattr(A, op).default, sample_args(op, dtype))


def test_opcheck_quantize_with_int8_offset() -> None:
    x = torch.randn(3, 33)
    torch.library.opcheck(
        A.quantize.default, (x, torch.tensor([0.1]), torch.tensor([3], dtype=torch.int8))
    )


def test_compile_with_dynamic_shapes_matches_eager() -> None:
    def block(x: torch.Tensor, res: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, ...]:
        q, scale, r = A.add_rms_norm_dynamic_quant(x, res, w, 1e-6)
        mq, ms = A.dynamic_mx_quant(r)
        return q, scale, r, mq.float(), ms.float(), A.muls_add(r, x, 0.5)

    compiled = torch.compile(block, backend="eager", dynamic=True, fullgraph=True)
    for rows, hidden in ((3, 40), (6, 72)):
        args = (torch.randn(rows, hidden), torch.randn(rows, hidden), torch.randn(hidden))
        for got, want in zip(compiled(*args), block(*args), strict=True):
            assert torch.equal(got, want)
