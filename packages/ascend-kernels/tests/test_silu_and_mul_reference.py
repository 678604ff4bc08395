"""The whole-tensor ``silu_and_mul`` (reference and decomposition) against float64 math."""

from __future__ import annotations

import pytest
import torch
from ascend_kernels.ops.activation import silu_and_mul


@pytest.mark.parametrize(("dtype", "tol"), [(torch.float32, 1e-6), (torch.bfloat16, 1e-2)])
def test_silu_of_first_half_times_second_half(dtype: torch.dtype, tol: float) -> None:
    g = torch.Generator().manual_seed(4)
    x = torch.randn(2, 3, 8, generator=g).to(dtype)  # last dim 8 differs from dims 1 and 2
    out = silu_and_mul(x)
    assert out.dtype == dtype and out.shape == (2, 3, 4)
    x64 = x.double()
    gate = x64[..., :4]
    expected = gate / (1 + torch.exp(-gate)) * x64[..., 4:]
    torch.testing.assert_close(out.double(), expected, rtol=tol, atol=tol)


def test_bf16_rounds_once_from_float32() -> None:
    # Computing in float32 and casting once gives the correctly rounded bf16 of the exact value
    # almost everywhere; computing in bf16 (two roundings) misses it for a large share.
    x = torch.randn(64, 512, generator=torch.Generator().manual_seed(9)).to(torch.bfloat16)
    out = silu_and_mul(x)
    x64 = x.double()
    exact = (x64[..., :256] / (1 + torch.exp(-x64[..., :256])) * x64[..., 256:]).to(torch.bfloat16)
    same = (out == exact).double().mean().item()
    assert same >= 0.99, f"only {same:.3f} of the values are the correctly rounded bf16"
