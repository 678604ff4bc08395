"""The MX quantization ops (OCP microscaling, e4m3 values + e8m0 scales): edge cases and
argument checks. Expected values are written out, never taken from the code under test."""

from __future__ import annotations

import pytest
import torch
from ascend_kernels.ops import mx as ops_mx
from ascend_kernels.ops import spec
from hypothesis import given, settings
from hypothesis import strategies as st

from .quant_reference import assert_fused_equals_composition
from .random_inputs import RANDOM_DTYPES, RANDOM_SHAPES, rand_scaled, seeded_randn

EPS = 1e-6


A = torch.ops.ascend


def test_mx_saturates_both_signs_to_448() -> None:
    # amax 1.9 -> scale 2**(0 - 8); 1.9 * 256 = 486.4 lies above e4m3's largest value 448.
    x = torch.tensor([[1.9, -1.9, 1.0, -0.5] + [0.0] * 28])
    q, scale = ops_mx.dynamic_mx_quant(x)
    assert scale.float().tolist() == [[2.0**-8]]
    assert q.float()[0, :4].tolist() == [448.0, -448.0, 256.0, -128.0]


def test_add_rms_norm_mx_quant_out_checks_the_residual() -> None:
    x = seeded_randn(4, 64)
    with pytest.raises(ValueError, match=r"^residual must match x"):
        spec("add_rms_norm_dynamic_mx_quant").out(
            x,
            torch.ones(4, 65),
            torch.ones(64),
            EPS,
            out=torch.empty(4, 64, dtype=torch.float8_e4m3fn),
            scale_out=torch.empty(4, 2, dtype=torch.float8_e8m0fnu),
            residual_out=torch.empty(4, 64),
        )


def test_dynamic_mx_quant_block_scales_with_partial_last_block() -> None:
    x = torch.zeros(2, 40)
    # Row 0, block 0 (32 values): amax 1.0 -> floor(log2) 0 -> scale 2**(0 - 8).
    x[0, :5] = torch.tensor([1.0, 0.5, -0.25, 2.0**-8, 0.0])
    # Row 0, block 1 (partial, 8 values): amax 480 -> scale 2**(8 - 8) = 1; saturate at 448;
    # 17 and 19 are ties in e4m3 (step 2 in [16, 32)) -> 16 and 20 (even mantissa).
    x[0, 32:38] = torch.tensor([480.0, 449.0, 17.0, -17.0, 19.0, -480.0])
    # Row 1: block 0 amax 3.0 -> floor(log2 3) = 1 -> scale 2**-7; block 1 all zero.
    x[1, 0:2] = torch.tensor([3.0, -1.0])
    q, scale = A.dynamic_mx_quant(x)
    assert q.dtype == torch.float8_e4m3fn and q.shape == (2, 40)
    assert scale.dtype == torch.float8_e8m0fnu and scale.shape == (2, 2)
    # e8m0 stores the biased exponent: 2**-8 -> 119, 2**0 -> 127, 2**-7 -> 120, zero -> 0.
    assert scale.view(torch.uint8).tolist() == [[119, 127], [120, 0]]
    assert scale.float().tolist() == [[2.0**-8, 1.0], [2.0**-7, 2.0**-127]]
    qf = q.float()
    assert qf[0, :5].tolist() == [256.0, 128.0, -64.0, 1.0, 0.0]
    assert qf[0, 32:40].tolist() == [448.0, 448.0, 16.0, -16.0, 20.0, -448.0, 0.0, 0.0]
    assert qf[1, :2].tolist() == [384.0, -128.0]
    assert torch.all(qf[1, 2:] == 0)
    assert not torch.isnan(qf).any()


def test_dynamic_mx_quant_bf16_matches_float32_on_exact_values() -> None:
    x = torch.randn(3, 70).mul(16).bfloat16()
    q16, s16 = A.dynamic_mx_quant(x)
    q32, s32 = A.dynamic_mx_quant(x.float())
    assert torch.equal(q16.view(torch.uint8), q32.view(torch.uint8))
    assert torch.equal(s16.view(torch.uint8), s32.view(torch.uint8))


@settings(max_examples=40, deadline=None)
@given(shape=RANDOM_SHAPES, seed=st.integers(0, 2**16), log_scale=st.integers(-60, 60))
def test_dynamic_mx_quant_invariants(shape: tuple[int, int], seed: int, log_scale: int) -> None:
    x = rand_scaled(shape, seed, torch.float32, 2.0**log_scale)
    q, scale = A.dynamic_mx_quant(x)
    qf, sf = q.float(), scale.float()
    assert not torch.isnan(qf).any() and (qf.abs() <= 448).all()
    per_value = sf.repeat_interleave(32, dim=-1)[..., : x.shape[-1]]
    # Power-of-two scales; e4m3 keeps 3 mantissa bits: relative error <= 2**-4 (or subnormal),
    # except values in (448, 512) * scale, which the OCP rule saturates to 448 * scale.
    assert torch.all(torch.frexp(sf[sf > 0])[0] == 0.5)
    err = (qf * per_value - x).abs()
    saturation = (x.abs() - 448 * per_value).clamp_min(0)
    assert torch.all(err <= x.abs() * 2.0**-4 + per_value * 2.0**-9 + saturation)


@pytest.mark.parametrize("op", ["add_rms_norm_dynamic_mx_quant"])
@settings(max_examples=25, deadline=None)
@given(shape=RANDOM_SHAPES, seed=st.integers(0, 2**16), dtype=RANDOM_DTYPES)
def test_fused_equals_composition_on_random_shapes(
    op: str, shape: tuple[int, int], seed: int, dtype: torch.dtype
) -> None:
    assert_fused_equals_composition(op, shape, seed, dtype)


def test_mx_non_finite_block_gets_the_nan_scale() -> None:
    x = torch.zeros(1, 64)
    x[0, 3] = float("inf")
    x[0, 40] = 1.0
    q, scale = A.dynamic_mx_quant(x)
    assert scale.view(torch.uint8).tolist() == [[255, 119]]
    assert torch.isnan(q.float()[0, :32]).all() and q.float()[0, 40] == 256.0
