"""NZ layout helpers: the exact shapes and values of the FRACTAL_NZ layout, written out."""

from __future__ import annotations

import pytest
import torch
from ascend_kernels import (
    aligned_16,
    nd_to_nz_2d,
    nd_to_nz_spec,
    trans_nd_to_nz,
)

from .exact_messages import Message, exact_message_test


@pytest.mark.parametrize(
    ("shape", "expected"),
    [((32, 64), (1, 4, 32, 16)), ((30, 62), (1, 4, 32, 16)), ((8, 12), (1, 1, 16, 16))],
)
def test_nd_to_nz_2d_shapes(shape: tuple[int, int], expected: tuple[int, ...]) -> None:
    out = nd_to_nz_2d(torch.randn(*shape))
    assert out.shape == expected and out.is_contiguous()


def test_nd_to_nz_2d_values() -> None:
    t = torch.arange(1, 9, dtype=torch.float32).reshape(2, 4)
    out = nd_to_nz_2d(t)
    expected = torch.zeros(1, 1, 16, 16)
    expected[0, 0, :2, :4] = t
    assert torch.equal(out, expected)
    src = torch.randn(30, 62)
    nz = nd_to_nz_2d(src)
    padded = torch.zeros(32, 64)
    padded[:30, :62] = src
    for j in (0, 3):
        for r in (0, 17, 31):
            for k in (0, 5, 15):
                assert nz[0, j, r, k] == padded[r, 16 * j + k]


def test_nd_to_nz_spec() -> None:
    mask = torch.arange(20 * 40, dtype=torch.float16).reshape(20, 40)
    out = nd_to_nz_spec(mask)
    assert out.shape == (1, 3, 32, 16) and out.dtype == torch.float16
    assert not out.is_contiguous()  # a permuted view, as upstream
    assert out[0, 1, 5, 3] == mask[5, 16 + 3]
    assert out[0, 2, 19, 7] == mask[19, 39] and out[0, 2, 19, 8] == 0
    assert torch.all(out[0, :, 20:, :] == 0)


@pytest.mark.parametrize(
    ("shape", "dtype", "expected"),
    [
        ((32, 48), torch.float16, (3, 2, 16, 16)),
        ((2, 16, 64), torch.int8, (2, 2, 1, 16, 32)),
    ],
)
def test_trans_nd_to_nz(
    shape: tuple[int, ...], dtype: torch.dtype, expected: tuple[int, ...]
) -> None:
    x = torch.arange(torch.Size(shape).numel()).reshape(shape).to(dtype)
    out = trans_nd_to_nz(x)
    assert out.shape == expected
    b0 = expected[-1]
    # block (j, i) holds rows i*a0.., cols j*b0..
    assert out[..., 1, 0, 2, 3].tolist() == x[..., 2, b0 + 3].tolist()


def test_trans_nd_to_nz_rejects_unaligned() -> None:
    with pytest.raises(ValueError, match="multiples of"):
        trans_nd_to_nz(torch.zeros(16, 20))


def test_aligned_16() -> None:
    t15 = torch.ones(15, 3)
    assert aligned_16(t15).shape == (16, 3) and aligned_16(t15)[15].sum() == 0
    t16 = torch.ones(16)
    assert aligned_16(t16) is t16
    out = aligned_16(torch.ones(17, 2, dtype=torch.int8))
    assert out.shape == (32, 2) and out.dtype == torch.int8 and out[17:].sum() == 0


def test_helpers_keep_dtype_and_device() -> None:
    # Device-side helpers: the padding is allocated where the input lives, in its dtype.
    meta = torch.empty(30, 62, dtype=torch.bfloat16, device="meta")
    for out, shape in (
        (nd_to_nz_2d(meta), (1, 4, 32, 16)),
        (nd_to_nz_spec(meta), (1, 4, 32, 16)),
        (aligned_16(meta), (32, 62)),
        (trans_nd_to_nz(torch.empty(2, 32, 64, dtype=torch.int8, device="meta")),
         (2, 2, 2, 16, 32)),
    ):
        assert out.device.type == "meta" and tuple(out.shape) == shape
        assert out.dtype in (torch.bfloat16, torch.int8)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: nd_to_nz_2d(torch.zeros(2, 3, 4)), "2-D tensor"),
        (lambda: nd_to_nz_spec(torch.zeros(4)), "2-D mask"),
        (lambda: trans_nd_to_nz(torch.zeros(16)), "at least 2 dims"),
        (lambda: trans_nd_to_nz(torch.zeros(16, 16, dtype=torch.int8)), r"\(16, 32\)"),
        (lambda: aligned_16(torch.tensor(1.0)), "at least one dim"),
    ],
)
def test_bad_shapes_are_value_errors(call: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        call()  # type: ignore[operator]


I64 = torch.int64


A = torch.ops.ascend


MESSAGES: list[Message] = [
    ("nz 2d", lambda v: nd_to_nz_2d(torch.ones(2, 2, 2)), ValueError,
     "nd_to_nz_2d needs a 2-D tensor, got shape [2, 2, 2]"),
    ("nz spec", lambda v: nd_to_nz_spec(torch.ones(3)), ValueError,
     "nd_to_nz_spec needs a 2-D mask, got shape [3]"),
    ("nz dims", lambda v: trans_nd_to_nz(torch.ones(16)), ValueError,
     "trans_nd_to_nz needs at least 2 dims, got shape [16]"),
    ("nz blocks", lambda v: trans_nd_to_nz(torch.ones(16, 16, dtype=torch.int8)), ValueError,
     "trans_nd_to_nz needs the last two dims to be multiples of (16, 32) for torch.int8,"
     " got (16, 16)"),
    ("aligned", lambda v: aligned_16(torch.tensor(1.0)), ValueError,
     "aligned_16 needs at least one dim"),
]


test_exact_message = exact_message_test(MESSAGES)


