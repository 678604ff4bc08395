"""validation: memory spans of two tensors at the boundary of touching, and positive sizes."""

from __future__ import annotations

import pytest
import torch
from ascend_kernels import (
    DeviceMismatchError,
)
from ascend_kernels.validation import check_positive, overlaps

from .exact_messages import Message, exact_message_test, positional_args

BUF = torch.arange(32, dtype=torch.float32)


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        (BUF[:8], BUF[8:16], False),  # adjacent: the first byte after a is b's first
        (BUF[:8], BUF[7:15], True),  # one shared element
        (BUF[:8], BUF[:8], True),
        (BUF[4:6], BUF[:16], True),  # contained
        (BUF[:8], BUF[8:8], False),  # empty
        (BUF[:8], BUF[4:4], False),  # empty, its address inside the other's span
        (BUF.view(4, 8)[:, :2], BUF[30:], False),  # strided span ends at element 25
        (BUF.view(4, 8)[:, :2], BUF[25:26], True),  # ...and includes it
        (BUF[:8], torch.arange(8, dtype=torch.float32), False),  # another storage
    ],
)
def test_spans(a: torch.Tensor, b: torch.Tensor, expected: bool) -> None:
    assert overlaps(a, b) is expected
    assert overlaps(b, a) is expected


def test_element_size_counts_in_the_span() -> None:
    halves = torch.zeros(8, dtype=torch.bfloat16)
    assert overlaps(halves[:4], halves[4:]) is False
    assert overlaps(halves[:4], halves[3:]) is True


def test_meta_tensors_store_nothing_so_never_overlap() -> None:
    meta = torch.empty(32, device="meta")
    assert overlaps(meta[:8], meta[4:12]) is False
    assert overlaps(meta, meta) is False


def test_check_positive_accepts_one_and_refuses_zero() -> None:
    assert check_positive("head_size", 1) is None
    with pytest.raises(ValueError, match=r"^head_size must be > 0, got 0$"):
        check_positive("head_size", 0)


I64 = torch.int64


A = torch.ops.ascend


MESSAGES: list[Message] = [
    ("device",
     lambda v: A.rms_norm(*positional_args(v, "rms_norm",
                                           weight=torch.ones(70, device="meta"))),
     DeviceMismatchError,
     "weight is on meta but x is on cpu; all tensor arguments must be on the same device"),
    ("floating", lambda v: A.dynamic_quant(torch.ones(2, 3, dtype=torch.int8)), ValueError,
     "x must be float32, bfloat16 or float16, got torch.int8"),
    ("index", lambda v: A.rotary_embedding(*positional_args(v, "rotary_embedding",
                                                  positions=torch.zeros(5))),
     ValueError, "positions must be an int32 or int64 tensor, got torch.float32"),
    ("rows", lambda v: A.dynamic_mx_quant(torch.ones(4, 0)), ValueError,
     "x must have at least 1 dim and a non-empty last dim, got shape [4, 0]"),
    ("eps", lambda v: A.rms_norm(*positional_args(v, "rms_norm", eps=-0.0)), ValueError,
     "eps must be finite and > 0, got -0.0"),
    ("positive", lambda v: A.split_qkv_rmsnorm_rope(*positional_args(v, "split_qkv_rmsnorm_rope",
                                                           kv_size=-3)),
     ValueError, "kv_size must be > 0, got -3"),
    ("vector", lambda v: A.rms_norm(*positional_args(v, "rms_norm", weight=torch.ones(2, 35))),
     ValueError, "weight must have shape [70] (the last dim of x), got [2, 35]"),
    ("same shape", lambda v: A.muls_add(torch.ones(2, 3), torch.ones(3, 2), 1.0), ValueError,
     "y must match x (shape [2, 3], torch.float32), got shape [3, 2], torch.float32"),
]


test_exact_message = exact_message_test(MESSAGES)


