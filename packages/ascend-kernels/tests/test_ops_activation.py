"""``silu_and_mul``: the reference and decomposition against float64 math (SwiGLU written out),
its argument checks, and its NPU adapter through the recording fake ``torch_npu``."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
from ascend_kernels.ops.activation import silu_and_mul

A = torch.ops.ascend


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



# ---------------------------------------------------------------- silu_and_mul
def _silu64(v: float) -> float:
    return v / (1.0 + math.exp(-v))


def test_silu_and_mul_golden_values_written_out() -> None:
    x = torch.tensor([[1.0, -2.0, 3.0, 0.5], [0.0, 10.0, -7.0, 2.0]])
    got = A.silu_and_mul(x)
    want = [
        [_silu64(1.0) * 3.0, _silu64(-2.0) * 0.5],  # 2.1931757..., -0.1192029...
        [_silu64(0.0) * -7.0, _silu64(10.0) * 2.0],  # 0, 19.9990920...
    ]
    assert got.shape == (2, 2) and got.dtype == torch.float32
    assert torch.allclose(got.double(), torch.tensor(want, dtype=torch.float64), atol=1e-6)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_silu_and_mul_rounds_once_in_reduced_precision(dtype: torch.dtype) -> None:
    g = torch.Generator().manual_seed(3)
    x = (4 * torch.randn(7, 3, 2 * 33, generator=g)).to(dtype)
    got = A.silu_and_mul(x)
    once = A.silu_and_mul(x.float()).to(dtype)  # float32 compute, one cast
    assert got.shape == (7, 3, 33) and got.dtype == dtype
    assert torch.equal(got, once)


def _eager_swiglu(x: torch.Tensor) -> torch.Tensor:
    # Eager silu on the strided half may take a scalar path that differs in the last ulp
    # from its vectorised one; a contiguous gate is the reference arithmetic.
    d = x.shape[-1] // 2
    return torch.nn.functional.silu(x[..., :d].contiguous()) * x[..., d:]


def test_silu_and_mul_float32_equals_eager_swiglu_bitwise() -> None:
    x = torch.randn(37, 2 * 129, generator=torch.Generator().manual_seed(0))
    assert torch.equal(A.silu_and_mul(x), _eager_swiglu(x))


def test_silu_and_mul_many_rows_and_none() -> None:
    x = torch.randn(50, 2 * 9, generator=torch.Generator().manual_seed(1))
    assert torch.equal(A.silu_and_mul(x), _eager_swiglu(x))
    assert A.silu_and_mul(torch.empty(0, 8)).shape == (0, 4)


@pytest.mark.parametrize(
    ("x", "message"),
    [
        (torch.ones(3, 5),
         r"^x must have an even, non-empty last dim \[\.\.\., 2 \* d\], got \[3, 5\]$"),
        (torch.ones(3, 0), "^x must have an even, non-empty last dim"),
        (torch.ones(1), "^x must have an even, non-empty last dim"),  # d would be 0.5
        (torch.tensor(2.0), "^x must have an even, non-empty last dim"),
        (torch.ones(3, 4, dtype=torch.int32), "^x must be float32, bfloat16 or float16"),
    ],
)
def test_silu_and_mul_bad_input(x: torch.Tensor, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        A.silu_and_mul(x)


# ---------------------------------------------------------------- NPU adapters (fake torch_npu)
# The fake kernels of torch_npu_double.seam: the real npu_swiglu / npu_mrope schemas (mrope_section
# and rotary_mode are keyword-only), outputs shaped by the wheel's meta functions.
def test_silu_and_mul_maps_to_npu_swiglu(fake_npu_on_cpu: Any) -> None:
    x = torch.randn(3, 8).to(torch.bfloat16)
    out = A.silu_and_mul(x)
    assert fake_npu_on_cpu.kernels.names() == ["npu_swiglu"]
    (arg,), kwargs = fake_npu_on_cpu.calls[0].args, fake_npu_on_cpu.calls[0].kwargs
    assert arg is x and kwargs == {"dim": -1}
    assert out.shape == (3, 4) and torch.equal(out, fake_npu_on_cpu.calls[0].outputs)


def test_silu_and_mul_boundary_shapes_are_accepted() -> None:
    # 1-D input (the smallest rank) and an empty middle dim: shapes from the math, values eager.
    x = torch.tensor([1.0, -2.0, 3.0, 0.5])
    assert torch.equal(A.silu_and_mul(x), _eager_swiglu(x))
    torch.testing.assert_close(A.silu_and_mul(torch.ones(2)), torch.tensor([_silu64(1.0)]))
    assert A.silu_and_mul(torch.empty(2, 0, 4)).shape == (2, 0, 2)


def test_silu_and_mul_out_names_a_wrong_out() -> None:
    from ascend_kernels.ops import spec

    x = torch.randn(3, 8)
    with pytest.raises(ValueError, match=r"^out must be a contiguous torch.float32 tensor of shape"
                                         r" \[3, 4\], got torch.float32 \[3, 8\]"):
        spec("silu_and_mul").out(x, out=torch.empty(3, 8))
    out = torch.empty(3, 4)
    assert spec("silu_and_mul").out(x, out=out) is out
    assert torch.equal(out, _eager_swiglu(x))


@pytest.mark.parametrize("start", [1, 3_000_000])  # out starts inside x: behind or ahead
def test_silu_and_mul_out_refuses_an_out_that_shares_memory_with_x(start: int) -> None:
    # With out ahead of x in one buffer, rows of out overwrote rows of x not yet read: a
    # silently wrong result over many chunks. Refused, like the other _out ops.
    from ascend_kernels.ops import spec

    buf = torch.randn(6_400_000 + start)
    x = buf[:6_400_000].view(100_000, 64)
    before = buf.clone()
    with pytest.raises(ValueError, match=r"^out must not share memory with x$"):
        spec("silu_and_mul").out(x, out=buf[start:start + 3_200_000].view(100_000, 32))
    assert torch.equal(buf, before)
    whole = torch.cat([x.reshape(-1), torch.empty(3_200_000)])  # out right after x: allowed
    x, out = whole[:6_400_000].view(100_000, 64), whole[6_400_000:].view(100_000, 32)
    assert torch.equal(spec("silu_and_mul").out(x, out=out), _eager_swiglu(x))
