"""``rotary_embedding`` and ``split_qkv_rmsnorm_rope`` at their edges: exact error texts and
chunking with more heads than head_size.

Expected values are the rotation written out in float64 from the cache rows each frequency
takes (the module docstrings of ``ops.rope`` / ``ops.mrope``).
"""

from __future__ import annotations

import math
import re
import warnings
from typing import Any

import pytest
import torch
from ascend_kernels import DeviceMismatchError
from ascend_kernels.ops import mrope as ops_mrope
from ascend_kernels.ops import rope as ops_rope
from ascend_kernels.registration import fake_impl

from .exact_messages import Message, exact_message_test, positional_args
from .random_inputs import seeded_randn
from .rope_reference import close, want_rope

A = torch.ops.ascend


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
        ({"k_weight": seeded_randn(47)}, r"k_weight must have shape \[48\]"),
        ({"q_bias": seeded_randn(49)}, r"q_bias must have shape \[48\]"),
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
    q = seeded_randn(MANY_TOKENS, Q_HEADS * SMALL_HEAD, seed=9)
    k = seeded_randn(MANY_TOKENS, K_HEADS, SMALL_HEAD, seed=10)
    cache = seeded_randn(7, SMALL_HEAD, seed=11)
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
    want_q = want_rope(q.view(MANY_TOKENS, Q_HEADS, SMALL_HEAD), cache, pos_of_freq, 2, True)
    close(q_out.double(), want_q.view(MANY_TOKENS, -1))
    close(k_out.double(), want_rope(k, cache, pos_of_freq, 2, True))


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


@pytest.mark.parametrize(
    ("call", "message"),
    [
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
    ],
)
def test_bad_input_is_a_clear_value_error(call: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        call()  # type: ignore[operator]


I64 = torch.int64


MESSAGES: list[Message] = [
    ("rotary_dim",
     lambda v: A.rotary_embedding(*positional_args(v, "rotary_embedding", rotary_dim=31)),
     ValueError, "rotary_dim must be even and in (0, head_size=48], got 31"),
    ("cache", lambda v: A.rotary_embedding(*positional_args(v, "rotary_embedding",
                                                  cos_sin_cache=torch.ones(0, 32))),
     ValueError, "cos_sin_cache must be [max_position > 0, rotary_dim=32], got [0, 32]"),
    ("heads", lambda v: A.rotary_embedding(*positional_args(v, "rotary_embedding",
                                                  k=torch.ones(5, 47))),
     ValueError, "k must be [T=5, heads * 48] or [T, heads, 48], got [5, 47]"),
    ("positions range", lambda v: A.rotary_embedding(*positional_args(
        v, "rotary_embedding", positions=torch.tensor([0, 9, 1, -2, 3]))),
     ValueError, "positions must lie in [0, 8) (the rows of cos_sin_cache),"
     " got values in [-2, 9]"),
    ("multiples", lambda v: A.split_qkv_rmsnorm_rope(*positional_args(v, "split_qkv_rmsnorm_rope",
                                                            q_size=100)),
     ValueError, "q_size (100) and kv_size (96) must be multiples of head_size (48)"),
    ("qkv", lambda v: A.split_qkv_rmsnorm_rope(*positional_args(v, "split_qkv_rmsnorm_rope",
                                                      qkv=torch.ones(5, 10))),
     ValueError, "qkv must be [T, q_size + 2 * kv_size = 384], got [5, 10]"),
    ("positions count", lambda v: A.split_qkv_rmsnorm_rope(*positional_args(
        v, "split_qkv_rmsnorm_rope", positions=torch.tensor([0, 1]))),
     ValueError, "positions must hold T=5 values, got 2"),
]


test_exact_message = exact_message_test(MESSAGES)


