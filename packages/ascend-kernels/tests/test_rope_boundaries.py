"""Rope and mrope rules at their edges: exact error texts, section sizes, chunking.

Expected values are the rotation written out in float64 from the cache rows each frequency
takes (the module docstrings of ``ops_rope`` / ``ops_mrope``), and the Qwen3-VL interleaving
written as vLLM writes it (strided slices), not as the kernel's masks.
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
from torch.overrides import TorchFunctionMode
from torch.utils import _pytree as pytree

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


def test_mrope_k_shape_error_names_k(valid_args: Any) -> None:
    args = valid_args("mrotary_embedding")
    args["k"] = _rand(5, 2, 40)
    with pytest.raises(ValueError, match=r"^k must be \[T=5, heads \* 48\] or \[T, heads, 48\]"):
        A.mrotary_embedding(**args)


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


def test_section_sum_error_states_half_as_an_integer(valid_args: Any) -> None:
    args = {**valid_args("mrotary_embedding"), "mrope_section": [8, 4, 5]}
    message = r"^mrope_section \[8, 4, 5\] must add up to rotary_dim / 2 = 16$"
    with pytest.raises(ValueError, match=message):
        A.mrotary_embedding(**args)


# ---------------------------------------------------------------- mrope sections
HEAD, TOKENS = 8, 5


def _mrope_case(seed: int) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    positions = torch.randint(0, 9, (3, TOKENS), generator=g)
    q, k = _rand(TOKENS, 2, HEAD, seed=seed), _rand(TOKENS, 1, HEAD, seed=seed + 1)
    return positions, q, k, _rand(9, HEAD, seed=seed + 2)


@pytest.mark.parametrize("section", [[4, 0, 0], [0, 4, 0], [0, 0, 4], [0, 2, 2], [3, 0, 1]])
def test_sections_of_size_zero_are_allowed(section: list[int]) -> None:
    positions, q, k, cache = _mrope_case(1)
    row_of_freq = [r for r, size in enumerate(section) for _ in range(size)]
    pos_of_freq = positions[row_of_freq].t()  # [T, half]
    for fn in (fake_impl("mrotary_embedding"), A.mrotary_embedding):
        q_out, k_out = fn(positions, q, k, cache, HEAD, HEAD, section, True, False)
        assert q_out.shape == q.shape and k_out.shape == k.shape
    _close(q_out.double(), _want_rope(q, cache, pos_of_freq, HEAD, True))
    _close(k_out.double(), _want_rope(k, cache, pos_of_freq, HEAD, True))


@pytest.mark.parametrize("section", [[4, 1, 0], [2, 1, 0], [-1, 3, 2]])
def test_three_row_positions_check_the_section_also_in_the_fake(section: list[int]) -> None:
    positions, q, k, cache = _mrope_case(2)
    for fn in (fake_impl("mrotary_embedding"), A.mrotary_embedding):
        with pytest.raises(ValueError, match=r"^mrope_section"):
            fn(positions, q, k, cache, HEAD, HEAD, section, True, False)


@pytest.mark.parametrize("section", [[1, 1, 1], [], [4, 0, 0]])
def test_text_positions_ignore_the_section(section: list[int]) -> None:
    positions, q, k, cache = _mrope_case(3)
    text = positions[0]
    fake_impl("mrotary_embedding")(text, q, k, cache, HEAD, HEAD, section, False, True)
    q_out, k_out = A.mrotary_embedding(text, q, k, cache, HEAD, HEAD, section, False, True)
    pos_of_freq = text[:, None].expand(TOKENS, HEAD // 2)
    _close(q_out.double(), _want_rope(q, cache, pos_of_freq, HEAD, False))
    _close(k_out.double(), _want_rope(k, cache, pos_of_freq, HEAD, False))


def _interleaved_rows(half: int, section: list[int]) -> list[int]:
    rows = [0] * half  # vLLM's apply_interleaved_rope: strided slices of rows 1 and 2
    rows[1 : 3 * section[1] : 3] = [1] * len(range(1, min(3 * section[1], half), 3))
    rows[2 : 3 * section[2] : 3] = [2] * len(range(2, min(3 * section[2], half), 3))
    return rows


INTERLEAVED = [[4, 2, 2], [6, 3, 3], [3, 4, 1], [2, 1, 5], [8, 0, 0], [0, 8, 4]]


@pytest.mark.parametrize("section", INTERLEAVED)
def test_interleaved_frequency_rows_match_the_strided_rule(section: list[int]) -> None:
    half = sum(section)
    got = ops_mrope.frequency_rows(half, section, True)
    assert got.dtype == torch.int64
    assert got.tolist() == _interleaved_rows(half, section)


@pytest.mark.parametrize("section", [[6, 3, 3], [4, 2, 2], [3, 4, 1]])
def test_interleaved_values_at_the_section_edges(section: list[int]) -> None:
    half = sum(section)
    g = torch.Generator().manual_seed(half)
    positions = torch.randint(0, 11, (3, TOKENS), generator=g)
    q, k = _rand(TOKENS, 2 * 2 * half, seed=4), _rand(TOKENS, 1, 2 * half, seed=5)
    cache = _rand(11, 2 * half, seed=6)
    q_out, k_out = ops_mrope.mrotary_embedding(
        positions, q, k, cache, 2 * half, 2 * half, section, True, True
    )
    pos_of_freq = positions[_interleaved_rows(half, section)].t()
    want_q = _want_rope(q.view(TOKENS, 2, 2 * half), cache, pos_of_freq, 2 * half, True)
    _close(q_out.double(), want_q.view(TOKENS, -1))
    _close(k_out.double(), _want_rope(k, cache, pos_of_freq, 2 * half, True))


# ---------------------------------------------------------------- chunking
class _SameDevice(TorchFunctionMode):
    """Fails any torch call that mixes tensor devices, as an accelerator would (the mrope
    reference also runs on the NPU, for interleaved sections and partial rotary)."""

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        leaves = pytree.tree_leaves((args, kwargs))
        devices = {t.device for t in leaves if isinstance(t, torch.Tensor)}
        assert len(devices) <= 1, f"{func} mixes devices {devices}"
        return func(*args, **kwargs)


def test_mrope_reference_keeps_every_tensor_on_the_input_device() -> None:
    positions, q, k, cache = (t.to("meta") for t in _mrope_case(7))
    with _SameDevice():
        q_out, k_out = ops_mrope.mrotary_embedding(
            positions, q, k, cache, HEAD, HEAD, [2, 1, 1], True, False
        )
    assert q_out.device.type == "meta" and k_out.device.type == "meta"


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
