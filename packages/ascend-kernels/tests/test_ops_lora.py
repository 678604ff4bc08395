"""The LoRA expand ops: argument errors name the offending argument; the output is a fresh
contiguous tensor."""

from __future__ import annotations

import pytest
import torch
from ascend_kernels.validation import DeviceMismatchError

from .exact_messages import Message, exact_message_test, positional_args

A = torch.ops.ascend


def _expand_args() -> dict[str, torch.Tensor]:
    return {
        "x": torch.ones(3, 2), "weight": torch.ones(2, 4, 2),
        "lora_indices": torch.tensor([0, 1]), "seq_len": torch.tensor([1, 2]),
        "y": torch.zeros(3, 4),
    }


@pytest.mark.parametrize("moved", ["weight", "lora_indices", "seq_len", "y"])
def test_sgmv_expand_names_the_argument_on_another_device(moved: str) -> None:
    args = _expand_args()
    args[moved] = args[moved].to("meta")
    with pytest.raises(DeviceMismatchError, match=rf"^{moved} is on meta but x is on cpu;"):
        A.sgmv_expand(**args, slice_offset=0, slice_size=4)


def test_expand_names_an_integer_weight() -> None:
    args = _expand_args()
    args["weight"] = args["weight"].long()
    with pytest.raises(ValueError, match=r"^weight must be float32, bfloat16 or float16, got"):
        A.sgmv_expand(**args, slice_offset=0, slice_size=4)


def test_expand_returns_a_contiguous_tensor_for_a_transposed_y() -> None:
    g = torch.Generator().manual_seed(5)
    x, w = torch.randn(3, 2, generator=g), torch.randn(2, 4, 2, generator=g)
    y = torch.randn(4, 3, generator=g).t()  # [3, 4], not contiguous
    indices = torch.tensor([1, -1, 0])
    out = A.bgmv_expand(x, w, indices, y, 0, 4)
    assert out.is_contiguous()
    expected = y.double().clone()
    for t, lora in enumerate(indices.tolist()):
        if lora >= 0:
            expected[t] += w[lora].double() @ x[t].double()
    torch.testing.assert_close(out.double(), expected, rtol=1e-6, atol=1e-6)


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


I64 = torch.int64


MESSAGES: list[Message] = [
    ("lora 2-D", lambda v: A.bgmv_expand(*positional_args(v, "bgmv_expand", y=torch.ones(40))),
     ValueError, "y must be 2-D [T, ...], got [40]"),
    ("lora tokens",
     lambda v: A.bgmv_expand(*positional_args(v, "bgmv_expand", y=torch.ones(4, 40))),
     ValueError, "x and y need the same token count, got 5, 4"),
    ("lora slice", lambda v: A.bgmv_expand(*positional_args(v, "bgmv_expand", slice_offset=30)),
     ValueError, "slice_offset (30) and slice_size (16) must be >= 0 and the slice must lie"
     " within y's 40 columns"),
    ("lora weight", lambda v: A.bgmv_expand(*positional_args(v, "bgmv_expand",
                                                   weight=torch.ones(3, 2, 16, 8))),
     ValueError, "weight must be [num_loras, slice_size=16, rank=8] (or [num_loras, 1, 16, 8]),"
     " got [3, 2, 16, 8]"),
    ("lora indices shape", lambda v: A.bgmv_expand(*positional_args(v, "bgmv_expand",
                                                          indices=torch.zeros(2, dtype=I64))),
     ValueError, "indices must be [T=5], got [2]"),
    ("lora index range", lambda v: A.bgmv_expand(*positional_args(
        v, "bgmv_expand", indices=torch.tensor([0, 3, -1, 2, 0]))),
     ValueError, "indices must be < num_loras=3 (negative: no LoRA), got 3"),
    ("sgmv index range", lambda v: A.sgmv_expand(*positional_args(
        v, "sgmv_expand", lora_indices=torch.tensor([4, 0]))),
     ValueError, "lora_indices must be < num_loras=3 (negative: no LoRA), got 4"),
    ("sgmv lengths", lambda v: A.sgmv_expand(*positional_args(v, "sgmv_expand",
                                                    seq_len=torch.tensor([5]))),
     ValueError, "lora_indices and seq_len must be 1-D of equal length, got [2], [1]"),
    ("sgmv negative", lambda v: A.sgmv_expand(*positional_args(v, "sgmv_expand",
                                                     seq_len=torch.tensor([-1, 6]))),
     ValueError, "seq_len must be >= 0, got [-1, 6]"),
    ("sgmv sum",
     lambda v: A.sgmv_expand(*positional_args(v, "sgmv_expand",
                                              seq_len=torch.tensor([1, 1]))),
     ValueError, "seq_len must sum to the token count 5, got 2"),
]


test_exact_message = exact_message_test(MESSAGES)


