"""Row chunking helpers: the shapes, chunk sizes and scratch reuse the reference kernels rely on."""

from __future__ import annotations

import pytest
import torch
from ascend_kernels.row_chunks import (
    CHUNK_ELEMENTS,
    Scratch,
    as_rows3,
    chunk_rows,
    chunks,
    scratch_for,
)
from ascend_kernels.validation import check_positive


def test_contiguous_rows_become_one_row_per_item() -> None:
    t = torch.arange(12.0).reshape(4, 3)
    rows = as_rows3(t)
    assert rows.shape == (4, 1, 3)
    assert rows.data_ptr() == t.data_ptr()  # a view, no copy
    assert torch.equal(rows[:, 0], t)


def test_a_tensor_that_cannot_be_flattened_keeps_its_first_dimension() -> None:
    base = torch.arange(120.0).reshape(5, 3, 8)
    t = base.transpose(0, 1)  # [3, 5, 8], rows of dim 1 are not adjacent in memory
    rows = as_rows3(t)
    assert rows.shape == (3, 5, 8)
    assert torch.equal(rows, t)


def test_chunk_length_is_chunk_elements_over_item_size_by_default() -> None:
    assert chunk_rows(10 * CHUNK_ELEMENTS, 1) == CHUNK_ELEMENTS
    assert chunk_rows(10 * CHUNK_ELEMENTS, 64) == CHUNK_ELEMENTS // 64
    assert chunk_rows(10 * CHUNK_ELEMENTS, 1, 2) == 2 * CHUNK_ELEMENTS


def test_chunk_length_is_at_least_one_and_at_most_n() -> None:
    assert chunk_rows(1, 10) == 1
    assert chunk_rows(10, 4 * CHUNK_ELEMENTS) == 1  # one item is larger than a chunk
    assert chunk_rows(3, 1) == 3


def test_chunks_cover_all_items_in_steps_of_the_given_multiple() -> None:
    c = CHUNK_ELEMENTS
    assert list(chunks(5 * c, 1, 2)) == [(0, 2 * c), (2 * c, 4 * c), (4 * c, 5 * c)]
    assert list(chunks(3, 1)) == [(0, 3)]


def test_scratch_for_sizes_rows_by_the_whole_row_width() -> None:
    x = torch.empty(100_000, 64, device="meta")
    assert scratch_for(x).rows == CHUNK_ELEMENTS // 64
    y = torch.empty(100_000, 4, 16, device="meta").transpose(0, 1)  # [4, 100000, 16]
    assert scratch_for(y).rows == 1  # one row of 100000 * 16 elements exceeds a chunk


def test_scratch_buffers_are_reused_by_name() -> None:
    scratch = Scratch(8, torch.device("cpu"))
    first = scratch.get("a", (3,), 8)
    second = scratch.get("a", (3,), 5)
    other = scratch.get("b", (3,), 8)
    assert first.shape == (8, 3) and second.shape == (5, 3)
    assert second.data_ptr() == first.data_ptr()
    assert other.data_ptr() != first.data_ptr()


def test_check_positive_accepts_one_and_refuses_zero() -> None:
    assert check_positive("head_size", 1) is None
    with pytest.raises(ValueError, match=r"^head_size must be > 0, got 0$"):
        check_positive("head_size", 0)
