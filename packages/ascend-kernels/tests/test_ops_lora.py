"""The LoRA expand ops: argument errors name the offending argument; the output is a fresh
contiguous tensor."""

from __future__ import annotations

import pytest
import torch
from ascend_kernels.validation import DeviceMismatchError

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
