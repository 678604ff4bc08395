"""validation: memory spans of two tensors at the boundary of touching, and positive sizes."""

from __future__ import annotations

import pytest
import torch
from ascend_kernels.validation import check_positive, overlaps

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
