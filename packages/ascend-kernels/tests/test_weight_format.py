"""The NZ cast decision and cast (``maybe_trans_nz``) and ``dispose_tensor``.

The seven cases are those of the upstream plugin's ``maybe_trans_nz`` unit test; the rule is the
upstream plugin's NZ rule. The cast goes through the recording fake ``torch_npu``.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from ascend_kernels import (
    ACL_FORMAT_FRACTAL_NZ,
    dispose_tensor,
    maybe_trans_nz,
    nz_cast_wanted,
)

from .exact_messages import Message, exact_message_test

F16, BF16, F32, I8 = torch.float16, torch.bfloat16, torch.float32, torch.int8

# (description, soc, weight_nz_mode, dtype, cast?)
UPSTREAM_CASES = [
    ("non-310P with NZ disabled", "A2", 0, F16, False),
    ("310P casts non-fp32 even with NZ disabled", "310P", 0, F16, True),
    ("fp32 never casts, on 310P either", "310P", 1, F32, False),
    ("non-310P fp16 does not cast with mode 1", "A2", 1, F16, False),
    ("non-310P fp16 casts with mode 2", "A2", 2, F16, True),
    ("non-310P bf16 casts with mode 2", "A3", 2, BF16, True),
    ("non-310P quantized weights cast by default (mode 1)", "A2", 1, I8, True),
]


def _weight(dtype: torch.dtype) -> torch.Tensor:
    if dtype.is_floating_point:
        return torch.randn(32, 64).to(dtype)
    return torch.zeros(32, 64, dtype=dtype)


@pytest.mark.parametrize(("case", "soc", "mode", "dtype", "cast"), UPSTREAM_CASES,
                         ids=[c[0] for c in UPSTREAM_CASES])
def test_upstream_cases(
    case: str, soc: str, mode: int, dtype: torch.dtype, cast: bool, fake_npu: Any
) -> None:
    weight = _weight(dtype)
    assert nz_cast_wanted(dtype, weight_nz_mode=mode, soc=soc) is cast
    result = maybe_trans_nz(weight, weight_nz_mode=mode, soc=soc, torch_npu=fake_npu)
    if not cast:
        assert result is weight and fake_npu.calls == []
        return
    ((name, args, kwargs),) = fake_npu.calls
    assert name == "npu_format_cast" and args[0] is weight and kwargs == {}
    assert args[1] == ACL_FORMAT_FRACTAL_NZ == 29
    assert result is fake_npu.calls[0].outputs  # the kernel's output


@pytest.mark.parametrize("soc", ["A2", "A3", "A5", "310P"])
@pytest.mark.parametrize("mode", [0, 1, 2])
@pytest.mark.parametrize("dtype", [F32, BF16, F16, I8, torch.float8_e4m3fn, torch.int32])
def test_the_whole_table(soc: str, mode: int, dtype: torch.dtype) -> None:
    # The upstream plugin's NZ rule written out, one clause per line.
    if dtype == F32:
        expected = False
    elif soc == "310P":
        expected = True
    elif mode == 0:
        expected = False
    elif dtype in (BF16, F16):
        expected = mode == 2
    else:
        expected = mode >= 1
    assert nz_cast_wanted(dtype, weight_nz_mode=mode, soc=soc) is expected
    assert nz_cast_wanted(dtype, weight_nz_mode=mode, soc=soc, is_meta=True) is False


def test_meta_weights_and_the_cpu_reference_never_cast(fake_npu: Any) -> None:
    meta = torch.empty(32, 64, dtype=I8, device="meta")
    assert maybe_trans_nz(meta, weight_nz_mode=2, soc="310P", torch_npu=fake_npu) is meta
    cpu = _weight(I8)
    assert maybe_trans_nz(cpu, weight_nz_mode=2, soc="cpu", torch_npu=fake_npu) is cpu
    assert fake_npu.calls == []


def test_no_torch_npu_is_needed_when_nothing_is_cast(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib

    def no_import(name: str) -> Any:
        raise AssertionError(f"imported {name}")

    monkeypatch.setattr(importlib, "import_module", no_import)
    weight = _weight(F16)
    assert maybe_trans_nz(weight, weight_nz_mode=1, soc="A2") is weight


@pytest.mark.parametrize("mode", [-1, 3, True, 1.0, "1", None])
def test_bad_mode_is_a_value_error(mode: Any) -> None:
    with pytest.raises(ValueError, match="weight_nz_mode must be 0, 1 or 2"):
        nz_cast_wanted(F16, weight_nz_mode=mode, soc="A2")


def test_unknown_soc_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="unknown soc '910B'"):
        nz_cast_wanted(F16, weight_nz_mode=1, soc="910B")


def test_dispose_tensor_frees_the_storage_and_keeps_dtype_and_device() -> None:
    t = torch.arange(16, dtype=torch.bfloat16).reshape(4, 4)
    view = t[1]
    dispose_tensor(t)
    assert t.shape == (0,) and t.dtype == torch.bfloat16 and t.device.type == "cpu"
    assert t.untyped_storage().nbytes() == 0
    assert view.tolist() == [4.0, 5.0, 6.0, 7.0]  # a view keeps the old storage alive
    meta = torch.empty(3, 3, device="meta")
    dispose_tensor(meta)
    assert meta.shape == (0,) and meta.device.type == "meta"


def test_the_installed_torch_npu_is_used_by_default(
    fake_npu: Any,
) -> None:
    import sys

    assert sys.modules["torch_npu"] is fake_npu  # the fixture installs it
    weight = _weight(I8)
    result = maybe_trans_nz(weight, weight_nz_mode=1, soc="A5")
    assert [(name, args[0] is weight, args[1]) for name, args, _ in fake_npu.calls] == [
        ("npu_format_cast", True, ACL_FORMAT_FRACTAL_NZ)
    ]
    assert result is not weight


I64 = torch.int64


A = torch.ops.ascend


MESSAGES: list[Message] = [
    ("nz mode", lambda v: nz_cast_wanted(torch.int8, weight_nz_mode=3, soc="A2"), ValueError,
     "weight_nz_mode must be 0, 1 or 2, got 3"),
    ("nz soc", lambda v: nz_cast_wanted(torch.int8, weight_nz_mode=1, soc="910"), ValueError,
     "unknown soc '910'; allowed: A2, A3, A5, 310P, cpu"),
]


test_exact_message = exact_message_test(MESSAGES)


