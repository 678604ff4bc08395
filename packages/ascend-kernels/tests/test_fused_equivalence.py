"""Every fused op equals the composition of the unfused ops it replaces, bit for bit.

The references round intermediates exactly where the unfused composition stores them in the
input dtype, so equality is bitwise in float32 and in bfloat16/float16 as well. ``add_rms_norm``
is itself Ascend's fused kernel: its composition is the float32 sum normalised by ``rms_norm``
in float32, each output cast once (the sum is not rounded before the norm reads it).
``muls_add`` rounds once by definition and has its own tests (test_ops_elementwise.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

A = torch.ops.ascend
EPS = 1e-6
SHAPES = [(0, 64), (1, 32), (7, 96), (33, 70), (5, 3, 40)]
DTYPES = [torch.float32, torch.bfloat16, torch.float16]


def _inputs(shape: tuple[int, ...], dtype: torch.dtype, seed: int = 0) -> dict[str, Any]:
    g = torch.Generator().manual_seed(seed)
    hidden = shape[-1]

    def rand(*s: int) -> torch.Tensor:
        return torch.randn(*s, generator=g).to(dtype)

    return {
        "x": rand(*shape) * 3,
        "residual": rand(*shape),
        "weight": rand(hidden) + 1,
        "bias": rand(hidden) * 0.1,
        "scale": torch.tensor([0.02]),
        "offset": torch.tensor([1.0]),
    }


def _add_rms_norm_composed(v: dict[str, Any], bias: bool) -> tuple[torch.Tensor, torch.Tensor]:
    dtype = v["x"].dtype
    summed = v["x"].float() + v["residual"].float()
    out = A.rms_norm(summed, v["weight"], EPS)  # float32 in, float32 out
    if bias:
        out = out + v["bias"].float()
    return out.to(dtype), summed.to(dtype)


FUSED: dict[
    str, tuple[Callable[[dict[str, Any], bool], Any], Callable[[dict[str, Any], bool], Any]]
] = {
    "add_rms_norm": (
        lambda v, b: A.add_rms_norm(
            v["x"], v["residual"], v["weight"], EPS, v["bias"] if b else None
        ),
        _add_rms_norm_composed,
    ),
    "add_rms_norm_quant": (
        lambda v, b: A.add_rms_norm_quant(
            v["x"],
            v["residual"],
            v["weight"],
            v["scale"],
            v["offset"],
            EPS,
            v["bias"] if b else None,
        ),
        lambda v, b: (lambda y, r: (A.quantize(y, v["scale"], v["offset"]), r))(
            *A.add_rms_norm(v["x"], v["residual"], v["weight"], EPS, v["bias"] if b else None)
        ),
    ),
    "add_rms_norm_dynamic_quant": (
        lambda v, b: A.add_rms_norm_dynamic_quant(
            v["x"], v["residual"], v["weight"], EPS, v["bias"] if b else None
        ),
        lambda v, b: (lambda y, r: (*A.dynamic_quant(y), r))(
            *A.add_rms_norm(v["x"], v["residual"], v["weight"], EPS, v["bias"] if b else None)
        ),
    ),
    "add_rms_norm_dynamic_mx_quant": (
        lambda v, b: A.add_rms_norm_dynamic_mx_quant(v["x"], v["residual"], v["weight"], EPS),
        lambda v, b: (lambda y, r: (*A.dynamic_mx_quant(y), r))(
            *A.add_rms_norm(v["x"], v["residual"], v["weight"], EPS)
        ),
    ),
    "rms_norm_dynamic_mx_quant": (
        lambda v, b: A.rms_norm_dynamic_mx_quant(v["x"], v["weight"], EPS),
        lambda v, b: A.dynamic_mx_quant(A.rms_norm(v["x"], v["weight"], EPS)),
    ),
}


def _as_tuple(result: Any) -> tuple[torch.Tensor, ...]:
    return tuple(result) if isinstance(result, (tuple, list)) else (result,)


def _bias_cases(name: str, dtype: torch.dtype) -> list[bool]:
    if name in ("add_rms_norm_dynamic_mx_quant", "rms_norm_dynamic_mx_quant"):
        return [False]
    return [False, True]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("name", list(FUSED))
def test_fused_equals_composition(
    name: str, shape: tuple[int, ...], dtype: torch.dtype, same_bits: Any
) -> None:
    v = _inputs(shape, dtype)
    fused_fn, composed_fn = FUSED[name]
    for bias in _bias_cases(name, dtype):
        fused, composed = _as_tuple(fused_fn(v, bias)), _as_tuple(composed_fn(v, bias))
        assert len(fused) == len(composed)
        for got, want in zip(fused, composed, strict=True):
            assert same_bits(got, want), (name, bias)


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_add_rms_norm_normalises_the_float32_sum_and_rounds_once(
    dtype: torch.dtype, bias: bool
) -> None:
    # Residual stream sized like a real model's (|residual| >> |x|): rounding the sum first
    # would move the norm's input by up to half an ulp of the residual.
    v = _inputs((16, 64), dtype, seed=7)
    x, residual = v["x"], (v["residual"] * 40).to(dtype)
    out, residual_out = A.add_rms_norm(x, residual, v["weight"], EPS,
                                       v["bias"] if bias else None)
    # The math written out in plain torch, float32 throughout.
    s32 = x.float() + residual.float()
    exact = s32 * torch.rsqrt((s32 * s32).mean(-1, keepdim=True) + EPS) * v["weight"].float()
    if bias:
        exact = exact + v["bias"].float()
    half_ulp = torch.finfo(dtype).eps / 2 * exact.abs() * (1 + 1e-4)
    assert torch.all((out.float() - exact).abs() <= half_ulp)  # one rounding of the exact value
    assert torch.equal(residual_out, s32.to(dtype))
    # Boundary: normalising the rounded sum instead (the store-then-norm rule) misses it.
    r32 = s32.to(dtype).float()
    rounded_first = r32 * torch.rsqrt((r32 * r32).mean(-1, keepdim=True) + EPS)
    rounded_first = (rounded_first * v["weight"].float()
                     + (v["bias"].float() if bias else 0)).to(dtype)
    assert torch.any((rounded_first.float() - exact).abs() > half_ulp)


def test_fused_ops_equal_their_composition_over_many_rows(same_bits: Any) -> None:
    v = _inputs((37, 96), torch.bfloat16, seed=3)
    for name, (fused_fn, composed_fn) in FUSED.items():
        for bias in _bias_cases(name, torch.bfloat16):
            for got, want in zip(
                _as_tuple(fused_fn(v, bias)), _as_tuple(composed_fn(v, bias)), strict=True
            ):
                assert same_bits(got, want), name


# ---------------------------------------------------------------- split_qkv_rmsnorm_rope
def _split_composed(
    qkv: torch.Tensor,
    qw: torch.Tensor,
    kw: torch.Tensor,
    pos: torch.Tensor,
    cache: torch.Tensor,
    q_size: int,
    kv_size: int,
    head: int,
    rot: int,
    neox: bool,
    qb: torch.Tensor | None,
    kb: torch.Tensor | None,
) -> tuple[Any, ...]:
    tokens = qkv.shape[0]
    q, k, v = qkv.split([q_size, kv_size, kv_size], dim=-1)
    qn = A.rms_norm(q.view(tokens, q_size // head, head), qw, EPS)
    kn = A.rms_norm(k.view(tokens, kv_size // head, head), kw, EPS)
    if qb is not None:
        qn = qn + qb
    if kb is not None:
        kn = kn + kb
    q_rot, k_rot = A.rotary_embedding(
        pos, qn.reshape(tokens, q_size), kn.reshape(tokens, kv_size), cache, head, rot, neox
    )
    return q_rot, k_rot, v


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize(
    ("tokens", "head", "rot"), [(0, 64, 64), (1, 64, 32), (13, 48, 48), (6, 128, 64)]
)
@pytest.mark.parametrize("neox", [True, False])
@pytest.mark.parametrize("with_bias", [False, True])
def test_split_qkv_rmsnorm_rope_equals_composition(
    dtype: torch.dtype,
    tokens: int,
    head: int,
    rot: int,
    neox: bool,
    with_bias: bool,
    same_bits: Any,
) -> None:
    g = torch.Generator().manual_seed(tokens + head)
    q_heads, kv_heads = 4, 2
    q_size, kv_size = q_heads * head, kv_heads * head
    qkv = torch.randn(tokens, q_size + 2 * kv_size, generator=g).to(dtype)
    qw, kw = (torch.randn(head, generator=g).to(dtype) for _ in range(2))
    qb, kb = ((torch.randn(head, generator=g).to(dtype) if with_bias else None) for _ in range(2))
    cache = torch.randn(50, rot, generator=g).to(dtype)
    pos = torch.randint(0, 50, (tokens,), generator=g)
    args = (qkv, qw, kw, pos, cache, q_size, kv_size, head, rot, neox, EPS, qb, kb)
    fused = A.split_qkv_rmsnorm_rope(*args)
    composed = _split_composed(qkv, qw, kw, pos, cache, q_size, kv_size, head, rot, neox, qb, kb)
    for got, want in zip(fused, composed, strict=True):
        assert same_bits(got, want)
    if tokens:
        for out in fused:  # fresh tensors, never views of qkv
            assert out.is_contiguous()
            assert out.untyped_storage().data_ptr() != qkv.untyped_storage().data_ptr()


def test_split_qkv_rmsnorm_rope_equals_its_composition_with_more_heads(same_bits: Any) -> None:
    g = torch.Generator().manual_seed(9)
    qkv = torch.randn(11, 8 * 16, generator=g)
    qw, kw = torch.randn(16, generator=g), torch.randn(16, generator=g)
    cache, pos = torch.randn(20, 16, generator=g), torch.randint(0, 20, (11,), generator=g)
    args = (qkv, qw, kw, pos, cache, 64, 32, 16, 16, True, EPS, None, None)
    fused = A.split_qkv_rmsnorm_rope(*args)
    composed = _split_composed(qkv, qw, kw, pos, cache, 64, 32, 16, 16, True, None, None)
    assert all(same_bits(a, b) for a, b in zip(fused, composed, strict=True))
