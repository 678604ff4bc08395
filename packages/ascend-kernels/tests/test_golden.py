"""Hand-computed golden values for the unfused ops (what a wrong reference cannot fake)."""

from __future__ import annotations

import math

import pytest
import torch

A = torch.ops.ascend
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


def _cache(rows: list[list[float]]) -> torch.Tensor:
    return torch.tensor(rows, dtype=torch.float32)


def test_rope_on_known_angles_neox_and_gptj() -> None:
    # rotary_dim 4: [cos0, cos1, sin0, sin1]; position 0 = no rotation, 1 = (90deg, 0deg).
    cache = _cache([[1, 1, 0, 0], [0, 1, 1, 0]])
    q = torch.tensor([[1.0, 2.0, 3.0, 4.0], [1.0, 2.0, 3.0, 4.0]])
    k = q * 10
    pos = torch.tensor([0, 1])
    qn, kn = A.rotary_embedding(pos, q, k, cache, 4, 4, True)
    # neox pairs (x0, x2), (x1, x3): pair 0 rotated by 90deg: (1, 3) -> (-3, 1).
    assert qn.tolist() == [[1, 2, 3, 4], [-3, 2, 1, 4]]
    assert kn.tolist() == [[10, 20, 30, 40], [-30, 20, 10, 40]]
    qg, _ = A.rotary_embedding(pos, q, k, cache, 4, 4, False)
    # gptj pairs (x0, x1), (x2, x3): pair 0 rotated by 90deg: (1, 2) -> (-2, 1).
    assert qg.tolist() == [[1, 2, 3, 4], [-2, 1, 3, 4]]


def test_rope_partial_rotary_dim_passes_the_tail_through() -> None:
    cache = _cache([[0, 1, 1, 0]])
    q = torch.tensor([[1.0, 2.0, 3.0, 4.0, 5.0, 6.0] * 2])  # 2 heads of 6, rotary_dim 4
    qn, _ = A.rotary_embedding(torch.tensor([0]), q, q.clone(), cache, 6, 4, True)
    assert qn.tolist() == [[-3, 2, 1, 4, 5, 6] * 2]


def test_rope_general_angle_and_3d_input() -> None:
    theta = 0.3
    cache = _cache([[math.cos(theta), math.sin(theta)]])
    q = torch.tensor([[[2.0, 1.0]]])  # [T=1, heads=1, head_size=2]
    qn, kn = A.rotary_embedding(torch.tensor([0]), q, q.view(1, 2), cache, 2, 2, True)
    expected = [2 * math.cos(theta) - math.sin(theta), math.cos(theta) + 2 * math.sin(theta)]
    assert qn.shape == (1, 1, 2) and kn.shape == (1, 2)
    assert torch.allclose(qn.view(2), torch.tensor(expected), atol=1e-6)


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


def test_muls_add_golden_rounds_once() -> None:
    out = A.muls_add(torch.tensor([1.0, 2.0]), torch.tensor([3.0, 4.0]), 0.5)
    assert out.tolist() == [3.5, 5.0]
    # (1 + 2^-7) * 1.5 = 1.5 + 3 * 2^-8 is a bfloat16 tie that eager rounds up to 1.5 + 2^-6
    # before the add (giving 2^-6); computed in float32 and cast once the sum is exact.
    x = torch.tensor([1.0 + 2.0**-7], dtype=torch.bfloat16)
    y = torch.tensor([-1.5], dtype=torch.bfloat16)
    assert (x * 1.5 + y).item() == 2.0**-6
    assert A.muls_add(x, y, 1.5).item() == 3 * 2.0**-8


def test_bgmv_expand_golden_is_functional() -> None:
    x = torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    weight = torch.tensor([[[1.0, 0.0], [0.0, 1.0]], [[1.0, 1.0], [2.0, 0.0]]])  # [2, 2, 2]
    y = torch.zeros(3, 5)
    y_before = y.clone()
    out = A.bgmv_expand(x, weight, torch.tensor([0, 1, -1]), y, 1, 2)
    assert torch.equal(y, y_before)
    assert out.tolist() == [[0, 1, 2, 0, 0], [0, 7, 6, 0, 0], [0, 0, 0, 0, 0]]


def test_sgmv_expand_expands_sequences() -> None:
    x = torch.ones(3, 2)
    weight = torch.stack([torch.eye(2), 2 * torch.eye(2)])
    y = torch.ones(3, 2)
    out = A.sgmv_expand(x, weight, torch.tensor([1, 0]), torch.tensor([1, 2]), y, 0, 2)
    assert out.tolist() == [[3, 3], [2, 2], [2, 2]]
    assert y.tolist() == [[1, 1]] * 3


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: A.rms_norm(torch.ones(2, 4), torch.ones(3), 1e-6), "weight must have shape"),
        (lambda: A.quantize(torch.ones(2, 4), torch.ones(3), torch.ones(1)), "scale must hold"),
        (lambda: A.dynamic_quant(torch.ones(2, 4, dtype=torch.int32)), "x must be float32"),
        (
            lambda: A.rotary_embedding(
                torch.zeros(2, dtype=torch.long),
                torch.ones(2, 8),
                torch.ones(2, 8),
                torch.ones(4, 3),
                8,
                3,
                True,
            ),
            "rotary_dim must be even",
        ),
        (
            lambda: A.split_qkv_rmsnorm_rope(
                torch.ones(2, 10),
                torch.ones(4),
                torch.ones(4),
                torch.zeros(2, dtype=torch.long),
                torch.ones(4, 4),
                4,
                4,
                4,
                4,
                True,
                1e-6,
            ),
            "qkv must be",
        ),
        (
            lambda: A.bgmv_expand(
                torch.ones(2, 3),
                torch.ones(1, 4, 3),
                torch.zeros(2, dtype=torch.long),
                torch.ones(2, 6),
                4,
                4,
            ),
            "must lie within",
        ),
        (
            lambda: A.sgmv_expand(
                torch.ones(3, 2),
                torch.ones(1, 2, 2),
                torch.tensor([0]),
                torch.tensor([2]),
                torch.ones(3, 2),
                0,
                2,
            ),
            "must sum to the token count",
        ),
    ],
)
def test_bad_input_is_a_clear_value_error(call: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        call()  # type: ignore[operator]


def test_out_helpers_reject_a_wrong_preallocated_output() -> None:
    from ascend_kernels.ops import spec

    x = torch.randn(4, 64)
    with pytest.raises(ValueError, match="out must be a contiguous"):
        spec("rms_norm").out(x, torch.ones(64), 1e-6, out=torch.empty(64, 4).t())
    with pytest.raises(ValueError, match=r"scale_out must be a contiguous torch\.float32"):
        spec("dynamic_quant").out(
            x, out=torch.empty(4, 64, dtype=torch.int8), scale_out=torch.empty(4, 1)
        )
    with pytest.raises(ValueError, match=r"scale_out must be a contiguous torch\.float8_e8m0fnu"):
        spec("dynamic_mx_quant").out(
            x, out=torch.empty(4, 64, dtype=torch.float8_e4m3fn), scale_out=torch.empty(4, 2)
        )


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
