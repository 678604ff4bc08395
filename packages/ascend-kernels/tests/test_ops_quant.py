"""The int8 quantization ops (quantize, dynamic_quant, the fused norm+quant ops): edge cases,
argument checks and scales. Expected values are written out in NumPy, never taken from the code
under test."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from ascend_kernels.ops import quant as ops_quant
from ascend_kernels.ops import spec
from ascend_kernels.registration import fake_impl
from hypothesis import given, settings
from hypothesis import strategies as st

from .exact_messages import Message, exact_message_test
from .quant_reference import assert_fused_equals_composition, int8_rows
from .random_inputs import RANDOM_DTYPES, RANDOM_SHAPES, rand_scaled, seeded_randn

EPS = 1e-6


A = torch.ops.ascend


def test_dynamic_quant_of_strided_heads() -> None:
    # Two of three heads: rows cannot be flattened to [N, 1, H], so the kernel sees [T, 2, H].
    buf = seeded_randn(5, 3, 16) * 4
    x = buf[:, :2, :]
    q, scale = ops_quant.dynamic_quant(x)
    q_ref, scale_ref = int8_rows(x)
    assert q.shape == (5, 2, 16) and scale.shape == (5, 2)
    assert np.array_equal(q.numpy(), q_ref)
    assert np.array_equal(scale.numpy(), scale_ref)


def test_dynamic_quant_of_a_row_whose_scale_underflows() -> None:
    # amax = 2**-149 (the smallest subnormal): amax / 127 rounds to 0 in float32, so the scale
    # is 0 and the row quantizes like an all-zero row instead of dividing by zero.
    tiny = math.ldexp(1.0, -149)
    x = torch.tensor([[tiny, 0.0, -tiny], [1.0, -2.0, 0.5]])
    q, scale = ops_quant.dynamic_quant(x)
    assert scale[0].item() == 0.0
    assert q[0].tolist() == [0, 0, 0]
    assert q[1].tolist() == [64, -127, 32]


def test_scale_outputs_are_float32_whatever_the_default_dtype() -> None:
    x, weight = seeded_randn(3, 8), torch.ones(8)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        _, scale = A.dynamic_quant(x.to("meta"))  # the fake implementation
        _, fake_scale, _ = A.add_rms_norm_dynamic_quant(*(t.to("meta") for t in (x, x, weight)),
                                                        EPS)
        _, real_scale = ops_quant.dynamic_quant(x)
    finally:
        torch.set_default_dtype(previous)
    assert scale.dtype == fake_scale.dtype == real_scale.dtype == torch.float32
    assert np.array_equal(real_scale.numpy(), int8_rows(x)[1])


def test_add_rms_norm_dynamic_quant_rejects_a_bias_of_the_wrong_width() -> None:
    x, bad = seeded_randn(4, 8), torch.ones(9)
    args = (x, x.clone(), torch.ones(8), EPS, bad)
    match = r"^bias must have shape \[8\]"
    with pytest.raises(ValueError, match=match):
        A.add_rms_norm_dynamic_quant(*args)
    with pytest.raises(ValueError, match=match):
        fake_impl("add_rms_norm_dynamic_quant")(*args)
    with pytest.raises(ValueError, match=match):
        spec("add_rms_norm_dynamic_quant").out(
            *args,
            out=torch.empty(4, 8, dtype=torch.int8),
            scale_out=torch.empty(4),
            residual_out=torch.empty(4, 8),
        )


DTYPES = [torch.float32, torch.bfloat16]


@pytest.mark.parametrize("dtype", DTYPES)
def test_quantize_rounds_half_to_even_and_saturates(dtype: torch.dtype) -> None:
    x = torch.tensor([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 3.0, 200.0, -200.0], dtype=dtype)
    q = A.quantize(x, torch.tensor([1.0]), torch.tensor([0.0]))
    assert q.dtype == torch.int8
    assert q.tolist() == [0, 2, 2, 0, -2, -2, 3, 127, -128]


def test_quantize_divides_by_scale_then_adds_offset() -> None:
    x = torch.tensor([1.0, 2.0, -3.0, 4.0, 1000.0])
    # x / 2 + 0.5 = [1.0, 1.5, -1.0, 2.5, 500.5] -> [1, 2, -1, 2, 127]
    q = A.quantize(x, torch.tensor([2.0]), torch.tensor([0.5]))
    assert q.tolist() == [1, 2, -1, 2, 127]


def test_quantize_accepts_int8_offset_and_per_channel_scale() -> None:
    x = torch.tensor([[4.0, 4.0], [-4.0, 9.0]])
    q = A.quantize(x, torch.tensor([2.0, 4.0]), torch.tensor([1, -1], dtype=torch.int8))
    assert q.tolist() == [[3, 0], [-1, 1]]  # 9/4 - 1 = 1.25 -> 1


@pytest.mark.parametrize("dtype", DTYPES)
def test_dynamic_quant_per_token_scale_and_zero_rows(dtype: torch.dtype) -> None:
    x = torch.tensor(
        [
            [127.0, -63.5, 0.5, 1.5, -2.5, 64.5],
            [0.0, 0.0, 0.0, 0.0, 0.0, 0.0],
            [254.0, 1.0, 3.0, -5.0, 0.0, -254.0],
        ],
        dtype=dtype,
    )
    q, scale = A.dynamic_quant(x)
    assert scale.dtype == torch.float32 and scale.tolist() == [1.0, 0.0, 2.0]
    assert q.tolist() == [
        [127, -64, 0, 2, -2, 64],  # ties to even: -63.5 -> -64, 0.5 -> 0, 64.5 -> 64
        [0, 0, 0, 0, 0, 0],  # all-zero row: scale 0, q 0, no NaN
        [127, 0, 2, -2, 0, -127],
    ]


def test_dynamic_quant_keeps_leading_dims() -> None:
    q, scale = A.dynamic_quant(torch.ones(2, 3, 4))
    assert q.shape == (2, 3, 4) and scale.shape == (2, 3)
    assert torch.all(q == 127) and torch.allclose(scale, torch.full((2, 3), 1 / 127))


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: A.quantize(torch.ones(2, 4), torch.ones(3), torch.ones(1)), "scale must hold"),
        (lambda: A.dynamic_quant(torch.ones(2, 4, dtype=torch.int32)), "x must be float32"),
    ],
)
def test_bad_input_is_a_clear_value_error(call: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        call()  # type: ignore[operator]


def test_quantize_rows_and_head_views_without_warnings() -> None:
    # Expected: NumPy in float32 (the op's arithmetic), rint = round half to even. Any torch
    # warning (e.g. a scratch buffer of the wrong shape resized by an out= op) is an error.
    import warnings

    import numpy as np

    g = torch.Generator().manual_seed(21)
    qkv = torch.randn(9, 4 * 70, generator=g) * 4
    rows, heads = qkv[:, :70].contiguous(), qkv[:, :140].view(9, 2, 70)  # heads: strided
    scale, offset = torch.tensor([0.05]), torch.tensor([1.0])
    for x in (rows, heads):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            q = A.quantize(x, scale, offset)
        want = np.clip(np.rint(x.numpy() / np.float32(0.05) + np.float32(1.0)), -128, 127)
        assert q.dtype == torch.int8 and q.shape == x.shape
        assert q.tolist() == want.astype(np.int8).tolist()


I64 = torch.int64


MESSAGES: list[Message] = [
    ("scale numel", lambda v: A.quantize(torch.ones(2, 4), torch.ones(3), torch.ones(1)),
     ValueError, "scale must hold 1 value (per tensor) or 4 (per channel), got 3"),
    ("offset dtype", lambda v: A.quantize(torch.ones(2, 4), torch.ones(1),
                                          torch.ones(1, dtype=torch.bool)),
     ValueError, "offset must be a floating or integer tensor, got torch.bool"),
]


test_exact_message = exact_message_test(MESSAGES)


@settings(max_examples=40, deadline=None)
@given(shape=RANDOM_SHAPES, seed=st.integers(0, 2**16), log_scale=st.integers(-30, 30))
def test_dynamic_quant_invariants(shape: tuple[int, int], seed: int, log_scale: int) -> None:
    x = rand_scaled(shape, seed, torch.float32, 2.0**log_scale)
    q, scale = A.dynamic_quant(x)
    assert q.abs().max().item() <= 127 if q.numel() else True
    assert torch.isfinite(scale).all() and (scale >= 0).all()
    # Dequantized values are within half a step (plus float32 slack) of the input.
    err = (q.float() * scale.unsqueeze(-1) - x).abs()
    assert torch.all(err <= scale.unsqueeze(-1) * 0.5001 + 1e-30)


@pytest.mark.parametrize("op", ["add_rms_norm_dynamic_quant"])
@settings(max_examples=25, deadline=None)
@given(shape=RANDOM_SHAPES, seed=st.integers(0, 2**16), dtype=RANDOM_DTYPES)
def test_fused_equals_composition_on_random_shapes(
    op: str, shape: tuple[int, int], seed: int, dtype: torch.dtype
) -> None:
    assert_fused_equals_composition(op, shape, seed, dtype)
