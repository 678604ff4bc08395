"""Property tests (hypothesis): quantizer invariants and fused == composition on random shapes."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

A = torch.ops.ascend
shapes = st.tuples(st.integers(0, 9), st.integers(1, 100))
dtypes = st.sampled_from([torch.float32, torch.bfloat16])


def _rand(shape: tuple[int, int], seed: int, dtype: torch.dtype, scale: float) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(*shape, generator=g) * scale).to(dtype)


@settings(max_examples=40, deadline=None)
@given(shape=shapes, seed=st.integers(0, 2**16), log_scale=st.integers(-30, 30))
def test_dynamic_quant_invariants(shape: tuple[int, int], seed: int, log_scale: int) -> None:
    x = _rand(shape, seed, torch.float32, 2.0**log_scale)
    q, scale = A.dynamic_quant(x)
    assert q.abs().max().item() <= 127 if q.numel() else True
    assert torch.isfinite(scale).all() and (scale >= 0).all()
    # Dequantized values are within half a step (plus float32 slack) of the input.
    err = (q.float() * scale.unsqueeze(-1) - x).abs()
    assert torch.all(err <= scale.unsqueeze(-1) * 0.5001 + 1e-30)


@settings(max_examples=40, deadline=None)
@given(shape=shapes, seed=st.integers(0, 2**16), log_scale=st.integers(-60, 60))
def test_dynamic_mx_quant_invariants(shape: tuple[int, int], seed: int, log_scale: int) -> None:
    x = _rand(shape, seed, torch.float32, 2.0**log_scale)
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


@pytest.mark.parametrize("op", ["add_rms_norm_dynamic_quant", "add_rms_norm_dynamic_mx_quant"])
@settings(max_examples=25, deadline=None)
@given(shape=shapes, seed=st.integers(0, 2**16), dtype=dtypes)
def test_fused_equals_composition_on_random_shapes(
    op: str, shape: tuple[int, int], seed: int, dtype: torch.dtype
) -> None:
    x, r = _rand(shape, seed, dtype, 4.0), _rand(shape, seed + 1, dtype, 1.0)
    w = _rand((1, shape[1]), seed + 2, dtype, 1.0)[0]
    fused = getattr(A, op)(x, r, w, 1e-6)
    y, summed = A.add_rms_norm(x, r, w, 1e-6)
    quant = A.dynamic_quant if op == "add_rms_norm_dynamic_quant" else A.dynamic_mx_quant
    for got, want in zip(fused, (*quant(y), summed), strict=True):
        assert torch.equal(got.view(torch.uint8), want.view(torch.uint8))


def test_mx_non_finite_block_gets_the_nan_scale() -> None:
    x = torch.zeros(1, 64)
    x[0, 3] = float("inf")
    x[0, 40] = 1.0
    q, scale = A.dynamic_mx_quant(x)
    assert scale.view(torch.uint8).tolist() == [[255, 119]]
    assert torch.isnan(q.float()[0, :32]).all() and q.float()[0, 40] == 256.0
