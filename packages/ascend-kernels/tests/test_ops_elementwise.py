"""``muls_add``: float32 arithmetic and one cast, the same bits on every path.

float32 equals eager ``x * s + y`` bit for bit; bfloat16/float16 equal the single-rounding
definition and stay within the double-rounding error of eager. ``muls_add_out`` may write
over an input itself, never over part of one.
"""

from __future__ import annotations

import pytest
import torch
from ascend_kernels.ops import spec
from ascend_kernels.validation import DeviceMismatchError

A = torch.ops.ascend
muls_add_out = spec("muls_add").out
SHAPES = [(0, 64), (1, 32), (7, 96), (33, 70), (5, 3, 40), (1 << 20,)]
SCALES = [0.37, 0.5, 1.0 / 3.0, -2.5, 1e-3]


def _pair(shape: tuple[int, ...], dtype: torch.dtype, seed: int = 0) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(*shape, generator=g) * 3).to(dtype), torch.randn(*shape, generator=g).to(
        dtype
    )


def _definition(x: torch.Tensor, y: torch.Tensor, scale: float) -> torch.Tensor:
    return (x.float() * scale + y.float()).to(x.dtype)


def _ulp(v: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    info = torch.finfo(dtype)
    magnitude = torch.exp2(torch.floor(torch.log2(v.abs().clamp_min(info.tiny))))
    return info.eps * magnitude


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("scale", SCALES)
def test_float32_equals_eager_bit_for_bit(shape: tuple[int, ...], scale: float) -> None:
    x, y = _pair(shape, torch.float32)
    assert torch.equal(A.muls_add(x, y, scale), x * scale + y)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("scale", SCALES)
def test_half_precision_rounds_once_and_stays_within_eager_rounding(
    dtype: torch.dtype, shape: tuple[int, ...], scale: float
) -> None:
    x, y = _pair(shape, dtype)
    got = A.muls_add(x, y, scale)
    assert torch.equal(got, _definition(x, y, scale))
    # Eager rounds the product to `dtype` first: off by at most half an ulp of the product,
    # plus one rounding of the result.
    eager = x * scale + y
    product = x.float() * scale
    bound = _ulp(product, dtype) / 2 + _ulp(torch.maximum(got.float().abs(), eager.float().abs()),
                                            dtype)
    assert bool(((got.float() - eager.float()).abs() <= bound).all())


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32], ids=str)
@pytest.mark.parametrize("alias", ["fresh", "x", "y"])
def test_out_may_be_an_input(dtype: torch.dtype, alias: str) -> None:
    x, y = _pair((3, 1001), dtype, seed=3)
    expected = _definition(x, y, 0.3) if dtype != torch.float32 else x * 0.3 + y
    out = {"fresh": torch.empty_like(x), "x": x, "y": y}[alias]
    assert muls_add_out(x, y, 0.3, out=out) is out
    assert torch.equal(out, expected)


def test_non_contiguous_inputs_use_their_values() -> None:
    x, y = _pair((64, 32), torch.bfloat16, seed=5)
    got = A.muls_add(x.t(), y.t(), 0.37)
    assert torch.equal(got, _definition(x.t(), y.t(), 0.37))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32], ids=str)
@pytest.mark.parametrize("alias", ["x", "y"])
@pytest.mark.parametrize("shift", [1, 999])  # out starts inside the input: 999 or 1 shared
def test_out_partly_overlapping_an_input_is_refused(dtype: torch.dtype, alias: str,
                                                    shift: int) -> None:
    # Writing out[i] over the input's element i + shift before reading it would give a
    # silently wrong result in a one-pass kernel: a partial overlap is refused.
    buf = _pair((2000,), dtype, seed=4)[0]
    other = _pair((1000,), dtype, seed=5)[1]
    inputs = {"x": (buf[:1000], other), "y": (other, buf[:1000])}[alias]
    before = buf.clone()
    with pytest.raises(ValueError, match=rf"^out must not share memory with {alias} \(only "
                                         rf"being {alias} itself is allowed\)$"):
        muls_add_out(*inputs, 0.3, out=buf[shift:shift + 1000])
    assert torch.equal(buf, before)  # refused before writing anything


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=str)
def test_out_right_after_an_input_in_one_buffer_is_computed(dtype: torch.dtype) -> None:
    buf = _pair((2000,), dtype, seed=6)[0]
    y = _pair((1000,), dtype, seed=7)[1]
    x, out = buf[:1000], buf[1000:]  # adjacent, not overlapping
    expected = _definition(x, y, 0.3) if dtype != torch.float32 else x * 0.3 + y
    assert muls_add_out(x, y, 0.3, out=out) is out
    assert torch.equal(out, expected)


def test_muls_add_names_the_argument_on_another_device() -> None:
    x = torch.ones(4)
    with pytest.raises(DeviceMismatchError, match=r"^y is on meta but x is on cpu;"):
        A.muls_add(x, torch.ones(4, device="meta"), 2.0)


def test_muls_add_golden_rounds_once() -> None:
    out = A.muls_add(torch.tensor([1.0, 2.0]), torch.tensor([3.0, 4.0]), 0.5)
    assert out.tolist() == [3.5, 5.0]
    # (1 + 2^-7) * 1.5 = 1.5 + 3 * 2^-8 is a bfloat16 tie that eager rounds up to 1.5 + 2^-6
    # before the add (giving 2^-6); computed in float32 and cast once the sum is exact.
    x = torch.tensor([1.0 + 2.0**-7], dtype=torch.bfloat16)
    y = torch.tensor([-1.5], dtype=torch.bfloat16)
    assert (x * 1.5 + y).item() == 2.0**-6
    assert A.muls_add(x, y, 1.5).item() == 3 * 2.0**-8
