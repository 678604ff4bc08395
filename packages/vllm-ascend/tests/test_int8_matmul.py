"""The int8 matmul against hand-computed integer references."""

from __future__ import annotations

import pytest
import torch
from vllm_ascend.quantization.int8_matmul import int8_linear

X = [[0.30, -0.52, 0.11, 0.0], [1.0, 0.25, -0.75, 0.5]]


QW = [[1, -2, 3, 4], [-5, 6, 7, -8], [127, -128, 0, 1]]


def _ref_linear(qx, sx, ox, qw, sw, ow):
    """Spelled-out integer reference: y[m][n] = sx[m] * sw[n] * sum_k (qx-ox)(qw-ow)."""
    return [
        [sx[m] * sw[n] * sum((qx[m][k] - ox) * (qw[n][k] - ow[n]) for k in range(len(qw[n])))
         for n in range(len(qw))]
        for m in range(len(qx))
    ]  # fmt: skip


def test_int8_linear_matches_integer_reference_with_offsets() -> None:
    qx = [[33, -49, 14, 3], [103, 28, -72, 53]]
    got = int8_linear(
        torch.tensor(qx, dtype=torch.int8), torch.tensor([0.01]),
        torch.tensor(QW, dtype=torch.int8), torch.tensor([0.5, 0.25, 0.125]),
        x_offset=torch.tensor([3.0]), w_offset=torch.tensor([0.0, 1.0, -2.0]),
        bias=torch.tensor([1.0, 0.0, -1.0]), out_dtype=torch.float64,
    )  # fmt: skip
    ref = _ref_linear(qx, [0.01, 0.01], 3, QW, [0.5, 0.25, 0.125], [0, 1, -2])
    ref = [[v + b for v, b in zip(row, [1.0, 0.0, -1.0], strict=True)] for row in ref]
    assert got.dtype == torch.float64
    torch.testing.assert_close(got, torch.tensor(ref, dtype=torch.float64), rtol=1e-6, atol=1e-6)
    # By hand: 0.01 * 0.5 * (30*1 + (-52)(-2) + 11*3 + 0*4) + bias 1.0 = 0.835 + 1.0
    assert got[0, 0].item() == pytest.approx(1.835, abs=1e-6)


def test_int8_linear_rejects_float_operands() -> None:
    with pytest.raises(TypeError, match="int8 operands"):
        int8_linear(torch.zeros(1, 4), torch.ones(1), torch.zeros(2, 4, dtype=torch.int8),
                    torch.ones(2))
