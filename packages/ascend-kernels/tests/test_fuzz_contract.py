"""Bounded, seeded fuzzing of every op's arguments: only the documented errors may escape.

Each example starts from valid arguments and replaces some of them with drawn values: tensors
of any shape (0-d, empty, wrong width), dtype (float64, ints, bool) or device (meta), index
tensors of wrong dtype or out-of-range values, ``eps`` including NaN, infinities, zero and
negatives, and negative or oversized integer sizes. The op must either return tensors or raise
``ValueError`` / ``DeviceMismatchError`` (README "Error contract"); anything else (an
``IndexError`` from deep inside, a ``RuntimeError`` from torch) is a bug.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
from ascend_kernels import OP_NAMES, DeviceMismatchError
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

A = torch.ops.ascend
DOCUMENTED = (ValueError, DeviceMismatchError)
DTYPES = [torch.float32, torch.bfloat16, torch.float16, torch.float64, torch.int32,
          torch.int64, torch.int8, torch.bool]
SPECIAL_EPS = [1e-6, 1e-5, 0.1, 0.0, -0.0, -1e-6, float("nan"), float("inf"), -float("inf"),
               5e-324, 1e300]
FUZZ = settings(max_examples=60, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow])


def _shape(draw: st.DrawFn, like: torch.Tensor) -> tuple[int, ...]:
    kept = tuple(like.shape)
    return draw(
        st.one_of(
            st.just(kept),
            st.just(()),
            st.lists(st.integers(0, 6), min_size=1, max_size=3).map(tuple),
            st.just((*kept[:-1], 0)) if kept else st.just((0,)),
            st.just((*kept[:-1], kept[-1] + 1)) if kept else st.just((1,)),
        )
    )


def _tensor(draw: st.DrawFn, like: torch.Tensor) -> torch.Tensor:
    shape = _shape(draw, like)
    dtype = draw(st.sampled_from([like.dtype, *DTYPES]))
    device = draw(st.sampled_from(["cpu", "cpu", "cpu", "meta"]))
    if device == "meta":
        return torch.empty(shape, dtype=dtype, device="meta")
    if dtype.is_floating_point:
        return torch.randn(shape).to(dtype)
    if dtype == torch.bool:
        return torch.rand(shape) > 0.5
    lo, hi = draw(st.sampled_from([(-2, 10), (0, 3), (-1000, 1000)]))
    if dtype == torch.int8:
        lo, hi = max(lo, -128), min(hi, 127)
    return torch.randint(lo, hi, shape, dtype=dtype)


def _value(draw: st.DrawFn, name: str, valid: Any) -> Any:
    if isinstance(valid, torch.Tensor):
        return _tensor(draw, valid)
    if name == "eps":
        return draw(st.one_of(st.sampled_from(SPECIAL_EPS), st.floats()))
    if isinstance(valid, bool):
        return draw(st.booleans())
    if isinstance(valid, int):
        return draw(st.one_of(st.just(valid), st.integers(-3, 3), st.integers(-500, 500)))
    if isinstance(valid, float):
        return draw(st.one_of(st.just(valid), st.floats()))
    return valid  # None: an absent optional tensor


@st.composite
def _arguments(draw: st.DrawFn, valid: dict[str, Any]) -> dict[str, Any]:
    names = list(valid)
    changed = draw(st.sets(st.sampled_from(names), min_size=1, max_size=min(3, len(names))))
    return {k: _value(draw, k, v) if k in changed else v for k, v in valid.items()}


def _devices(args: dict[str, Any]) -> set[str]:
    return {v.device.type for v in args.values() if isinstance(v, torch.Tensor)}


def _must_fail(args: dict[str, Any]) -> bool:
    """Invalid on its face: tensors on two devices, or an eps that is not finite and > 0."""
    eps = args.get("eps", 1.0)
    return len(_devices(args)) > 1 or not (eps > 0 and math.isfinite(eps))


@pytest.mark.parametrize("op", OP_NAMES)
def test_only_documented_errors_escape(op: str, valid_args: Any) -> None:
    @FUZZ
    @given(args=_arguments(valid_args(op)))
    def run(args: dict[str, Any]) -> None:
        try:
            result = getattr(A, op)(*args.values())
        except DOCUMENTED:
            return
        assert not _must_fail(args), "accepted tensors on two devices or a bad eps"
        outs = result if isinstance(result, tuple) else (result,)
        assert all(isinstance(o, torch.Tensor) for o in outs)
        assert {o.device.type for o in outs} == _devices(args)

    run()


@pytest.mark.parametrize("op", ["rms_norm", "split_qkv_rmsnorm_rope", "rotary_embedding",
                                "add_rms_norm_quant", "muls_add"])
def test_npu_adapters_raise_only_documented_errors(
    op: str, valid_args: Any, fake_npu_on_cpu: Any
) -> None:
    @settings(FUZZ, max_examples=30)
    @given(args=_arguments(valid_args(op)))
    def run(args: dict[str, Any]) -> None:
        try:
            getattr(A, op)(*args.values())
        except DOCUMENTED:
            return
        assert not _must_fail(args), "accepted tensors on two devices or a bad eps"

    run()
