"""Edge cases of the RMSNorm ops: chunk tails (also of the fused quant ops built on the norm),
argument checks, out= aliasing.

Expected values are written out (NumPy float64 / float32 formulas, torch's own rms_norm), never
taken from the code under test.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from ascend_kernels.ops import mx as ops_mx
from ascend_kernels.ops import norm as ops_norm
from ascend_kernels.ops import quant as ops_quant
from ascend_kernels.ops import spec
from ascend_kernels.validation import DeviceMismatchError

from .quant_reference import int8_rows
from .random_inputs import seeded_randn

A = torch.ops.ascend

EPS = 1e-6


def _mx_scale_exponents(x: torch.Tensor) -> np.ndarray:
    """floor(log2(amax)) - 8 per 32-value block (finite, non-zero blocks), NumPy float64."""
    a = x.detach().to(torch.float64).numpy()
    width = a.shape[-1]
    blocks = -(-width // 32)
    padded = np.zeros((*a.shape[:-1], blocks * 32))
    padded[..., :width] = a
    amax = np.abs(padded.reshape(*a.shape[:-1], blocks, 32)).max(axis=-1)
    return np.floor(np.log2(amax)) - 8


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_chunk_tails_give_right_values_without_warnings(dtype: torch.dtype) -> None:
    # 7 rows of 40 with 200-element chunks: chunks of 5 rows and a 2-row tail, so every scratch
    # buffer is used once at full and once at partial length (a resized out= warns).
    x = (seeded_randn(7, 40) * 3).to(dtype)
    residual = seeded_randn(7, 40, seed=1).to(dtype)
    weight = (seeded_randn(40, seed=2) + 1).to(dtype)
    summed = x + residual
    expected_norm = torch.nn.functional.rms_norm(summed.float(), (40,), weight.float(), EPS).to(
        dtype
    )
    # The fused ops normalise the unrounded sum (float32 inside, as Ascend's fused kernel).
    fused_norm = torch.nn.functional.rms_norm(
        x.float() + residual.float(), (40,), weight.float(), EPS).to(dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        norm = ops_norm.rms_norm(summed, weight, EPS)
        q, scale = ops_quant.dynamic_quant(x)
        fq, fscale, fres = ops_quant.add_rms_norm_dynamic_quant(x, residual, weight, EPS)
        mq, mscale = ops_mx.dynamic_mx_quant(x)
        nq, nscale, nres = ops_mx.add_rms_norm_dynamic_mx_quant(x, residual, weight, EPS)
    torch.testing.assert_close(norm, expected_norm, rtol=0, atol=0)
    q_ref, scale_ref = int8_rows(x)
    assert np.array_equal(q.numpy(), q_ref)
    assert np.array_equal(scale.numpy(), scale_ref)
    fq_ref, fscale_ref = int8_rows(fused_norm)
    assert np.array_equal(fq.numpy(), fq_ref)
    assert np.array_equal(fscale.numpy(), fscale_ref)
    assert torch.equal(fres, summed) and torch.equal(nres, summed)
    for got_q, got_scale, src in ((mq, mscale, x), (nq, nscale, fused_norm)):
        exps = _mx_scale_exponents(src)
        assert np.array_equal(np.log2(got_scale.float().numpy().astype(np.float64)), exps)
        per_value = np.repeat(np.exp2(exps), 32, axis=-1)[..., :40]
        want = np.clip(src.double().numpy() / per_value, -448, 448)
        got = got_q.float().numpy()
        # e4m3 keeps 3 mantissa bits: within half a unit in the last place of the value.
        assert np.all(np.abs(got - want) <= np.exp2(np.floor(np.log2(np.abs(want) + 1e-30)) - 4))


@pytest.mark.parametrize("name", ["residual", "bias"])
def test_device_mismatch_names_the_argument(name: str) -> None:
    x = seeded_randn(2, 8)
    kwargs = {name: torch.empty(2, 8, device="meta")}
    with pytest.raises(DeviceMismatchError, match=rf"^{name} is on meta but x is on cpu"):
        ops_norm.check_norm_args(x, torch.ones(8), EPS, **kwargs)


def test_add_rms_norm_out_rejects_out_aliasing_residual_out() -> None:
    x = seeded_randn(2, 8)
    shared = torch.empty(2, 8)
    with pytest.raises(ValueError, match=r"^out must not share memory with residual_out$"):
        spec("add_rms_norm").out(x, x.clone(), torch.ones(8), EPS, out=shared, residual_out=shared)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("shift", [1, 31])  # out starts inside x: 31 or 1 elements shared
def test_rms_norm_out_refuses_an_out_that_partly_overlaps_x(dtype: torch.dtype,
                                                             shift: int) -> None:
    buf = seeded_randn(64).to(dtype)
    x, out = buf[:32].view(4, 8), buf[shift:shift + 32].view(4, 8)
    with pytest.raises(ValueError, match=r"^out must not share memory with x$"):
        spec("rms_norm").out(x, torch.ones(8, dtype=dtype), EPS, out=out)


def test_rms_norm_out_accepts_an_out_right_after_x_in_one_buffer() -> None:
    buf = seeded_randn(64)
    x, out = buf[:32].view(4, 8), buf[32:].view(4, 8)  # adjacent, not overlapping
    expected = torch.nn.functional.rms_norm(x.clone(), (8,), eps=EPS)
    spec("rms_norm").out(x, torch.ones(8), EPS, out=out)
    torch.testing.assert_close(out, expected)


def test_rms_norm_golden() -> None:
    w = torch.tensor([1.0, 2.0, 3.0, 4.0])
    out = A.rms_norm(torch.tensor([[2.0, -2.0, 2.0, -2.0], [0.0, 0.0, 0.0, 0.0]]), w, 12.0)
    assert out[0].tolist() == [0.5, -1.0, 1.5, -2.0]  # mean(x^2) = 4, rsqrt(4 + 12) = 0.25
    assert out[1].tolist() == [0.0] * 4
    assert A.rms_norm(torch.zeros(1, 4), w, 1.0).tolist() == [[0.0] * 4]


def test_add_rms_norm_golden_with_bias() -> None:
    x = torch.tensor([[1.0, -3.0, 1.0, -3.0]])
    res = torch.tensor([[1.0, 1.0, 1.0, 1.0]])
    out, res_out = A.add_rms_norm(x, res, torch.ones(4), 12.0, torch.tensor([0.5, 0, 0, 0]))
    assert res_out.tolist() == [[2.0, -2.0, 2.0, -2.0]]
    assert out.tolist() == [[1.0, -0.5, 0.5, -0.5]]  # rsqrt(4 + 12) = 0.25, then + bias


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: A.rms_norm(torch.ones(2, 4), torch.ones(3), 1e-6), "weight must have shape"),
    ],
)
def test_bad_input_is_a_clear_value_error(call: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        call()  # type: ignore[operator]
