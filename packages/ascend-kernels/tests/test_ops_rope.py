"""``rotary_embedding`` and ``split_qkv_rmsnorm_rope`` at their edges: exact error texts and
chunking with more heads than head_size.

Expected values are the rotation written out in float64 from the cache rows each frequency
takes (the module docstrings of ``ops.rope`` / ``ops.mrope``).
"""

from __future__ import annotations

import re
import warnings
from typing import Any

import pytest
import torch
from ascend_kernels import DeviceMismatchError
from ascend_kernels.ops import mrope as ops_mrope
from ascend_kernels.ops import rope as ops_rope
from ascend_kernels.registration import fake_impl

A = torch.ops.ascend


def _rand(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def _want_rope(
    x: torch.Tensor, cache: torch.Tensor, pos_of_freq: torch.Tensor, rotary_dim: int, neox: bool
) -> torch.Tensor:
    """``x`` ``[T, H, D]`` rotated in float64; frequency ``j`` of token ``t`` uses cache row
    ``pos_of_freq[t, j]``."""
    half = rotary_dim // 2
    cache64 = cache.double()
    tokens = x.shape[0]
    cos = torch.empty(tokens, 1, half, dtype=torch.float64)
    sin = torch.empty(tokens, 1, half, dtype=torch.float64)
    for t in range(tokens):
        for j in range(half):
            row = int(pos_of_freq[t, j])
            cos[t, 0, j] = cache64[row, j]
            sin[t, 0, j] = cache64[row, half + j]
    x64 = x.double()
    out = x64.clone()
    first = slice(0, half) if neox else slice(0, rotary_dim, 2)
    second = slice(half, rotary_dim) if neox else slice(1, rotary_dim, 2)
    x1, x2 = x64[..., first], x64[..., second]
    out[..., first] = x1 * cos - x2 * sin
    out[..., second] = x2 * cos + x1 * sin
    return out


def _close(got: torch.Tensor, want: torch.Tensor) -> None:
    # float32 kernel against float64 math: a few float32 roundings apart.
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------- exact error texts
DEVICE_ORDER = {
    "rotary_embedding": ("q", "positions", "k", "cos_sin_cache"),
    "mrotary_embedding": ("q", "positions", "k", "cos_sin_cache"),
    "split_qkv_rmsnorm_rope": (
        "qkv", "q_weight", "k_weight", "positions", "cos_sin_cache", "q_bias", "k_bias",
    ),
}
FUNCTIONS = {
    "rotary_embedding": A.rotary_embedding,
    "mrotary_embedding": A.mrotary_embedding,
    "split_qkv_rmsnorm_rope": A.split_qkv_rmsnorm_rope,
}


@pytest.mark.parametrize("op", sorted(DEVICE_ORDER))
def test_device_error_names_the_moved_tensor_and_the_first_one(op: str, valid_args: Any) -> None:
    first, second = DEVICE_ORDER[op][:2]
    for name in DEVICE_ORDER[op]:
        args = valid_args(op)
        args[name] = args[name].to("meta")
        if name == first:  # the first tensor sets the device: the next one is the odd one
            want = f"{second} is on cpu but {first} is on meta; all tensor arguments"
        else:
            want = f"{name} is on meta but {first} is on cpu; all tensor arguments"
        with pytest.raises(DeviceMismatchError, match="^" + re.escape(want)):
            FUNCTIONS[op](**args)


@pytest.mark.parametrize(
    ("changed", "message"),
    [
        ({"qkv": torch.ones(5, 8 * 48, dtype=torch.int32)}, "qkv must be float32"),
        ({"k_weight": _rand(47)}, r"k_weight must have shape \[48\]"),
        ({"q_bias": _rand(49)}, r"q_bias must have shape \[48\]"),
    ],
)
def test_split_qkv_errors_name_the_argument(
    changed: dict[str, torch.Tensor], message: str, valid_args: Any
) -> None:
    args = {**valid_args("split_qkv_rmsnorm_rope"), **changed}
    with pytest.raises(ValueError, match="^" + message):
        A.split_qkv_rmsnorm_rope(**args)
    with pytest.raises(ValueError, match="^" + message):
        fake_impl("split_qkv_rmsnorm_rope")(**args)


Q_HEADS, K_HEADS, SMALL_HEAD, MANY_TOKENS = 4, 6, 2, 30  # more heads than head_size


@pytest.mark.parametrize("multimodal", [False, True])
def test_more_heads_than_head_size_without_warnings(multimodal: bool) -> None:
    g = torch.Generator().manual_seed(8)
    positions = torch.randint(0, 7, (3, MANY_TOKENS) if multimodal else (MANY_TOKENS,), generator=g)
    q = _rand(MANY_TOKENS, Q_HEADS * SMALL_HEAD, seed=9)
    k = _rand(MANY_TOKENS, K_HEADS, SMALL_HEAD, seed=10)
    cache = _rand(7, SMALL_HEAD, seed=11)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # e.g. an out= buffer of the wrong size being resized
        if multimodal:
            q_out, k_out = ops_mrope.mrotary_embedding(
                positions, q, k, cache, SMALL_HEAD, SMALL_HEAD, [1, 0, 0], True, False
            )
            pos_of_freq = positions[0][:, None]
        else:
            q_out, k_out = ops_rope.rotary_embedding(
                positions, q, k, cache, SMALL_HEAD, SMALL_HEAD, True
            )
            pos_of_freq = positions[:, None]
    want_q = _want_rope(q.view(MANY_TOKENS, Q_HEADS, SMALL_HEAD), cache, pos_of_freq, 2, True)
    _close(q_out.double(), want_q.view(MANY_TOKENS, -1))
    _close(k_out.double(), _want_rope(k, cache, pos_of_freq, 2, True))
