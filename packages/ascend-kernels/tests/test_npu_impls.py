"""The NPU registrations, exercised through a recording fake ``torch_npu`` (no NPU here).

``fake_npu_on_cpu`` installs the fake as ``sys.modules["torch_npu"]`` and registers the NPU
adapters for the CPU key, so ``torch.ops.ascend.*`` on CPU tensors goes exactly the way it
goes on an NPU. Marker values (10 * kernel + output index) show the output order mapping.
"""

from __future__ import annotations

import sys
from typing import Any

import pytest
import torch
from ascend_kernels import npu_impls
from ascend_kernels.npu_loader import NpuRegistration

A = torch.ops.ascend
E4M3 = torch.float8_e4m3fn


def _only_call(fake: Any, name: str) -> tuple[tuple[Any, ...], dict[str, Any]]:
    assert [c[0] for c in fake.calls] == [name]
    return fake.calls[0][1], fake.calls[0][2]


def _value(t: torch.Tensor) -> float:
    values = t.float().unique()
    assert values.numel() == 1
    return float(values)


def test_every_op_except_lora_has_an_npu_adapter() -> None:
    from ascend_kernels import OP_NAMES

    assert set(npu_impls.ADAPTERS) <= set(OP_NAMES)
    assert set(OP_NAMES) - set(npu_impls.ADAPTERS) == {"bgmv_expand", "sgmv_expand"}


def test_rms_norm_maps_to_npu_rms_norm(fake_npu_on_cpu: Any) -> None:
    x, w = torch.randn(3, 8), torch.randn(8)
    out = A.rms_norm(x, w, 1e-5)
    args, kwargs = _only_call(fake_npu_on_cpu, "npu_rms_norm")
    assert args[0] is not None and torch.equal(args[0], x) and torch.equal(args[1], w)
    assert kwargs == {"epsilon": 1e-5}
    assert _value(out) == 10  # output 0 (y), not rstd


def test_add_rms_norm_maps_outputs_0_and_2_and_adds_bias(fake_npu_on_cpu: Any) -> None:
    x, r, w = torch.randn(3, 8), torch.randn(3, 8), torch.randn(8)
    out, res = A.add_rms_norm(x, r, w, 1e-6)
    args, kwargs = _only_call(fake_npu_on_cpu, "npu_add_rms_norm")
    assert torch.equal(args[0], x) and torch.equal(args[1], r) and kwargs == {"epsilon": 1e-6}
    assert (_value(out), _value(res)) == (20, 22)
    out_b, _ = A.add_rms_norm(x, r, w, 1e-6, torch.full((8,), 0.5))
    assert _value(out_b) == 20.5


def test_quantize_uses_div_mode_on_the_last_axis(fake_npu_on_cpu: Any) -> None:
    x, s, o = torch.randn(2, 4), torch.tensor([0.5]), torch.tensor([1.0])
    q = A.quantize(x, s, o)
    args, kwargs = _only_call(fake_npu_on_cpu, "npu_quantize")
    assert torch.equal(args[1], s) and torch.equal(args[2], o)
    assert args[3:] == (torch.qint8, -1, True) and kwargs == {}
    assert q.dtype == torch.int8 and _value(q) == 30


def test_dynamic_quant(fake_npu_on_cpu: Any) -> None:
    q, scale = A.dynamic_quant(torch.randn(2, 4))
    _only_call(fake_npu_on_cpu, "npu_dynamic_quant")
    assert (_value(q), _value(scale)) == (40, 41)


@pytest.mark.parametrize("with_bias", [False, True])
def test_add_rms_norm_quant_maps_y1_and_x(fake_npu_on_cpu: Any, with_bias: bool) -> None:
    x, r, w = torch.randn(2, 8), torch.randn(2, 8), torch.randn(8)
    s, o, b = torch.tensor([0.1]), torch.tensor([0.0]), torch.randn(8)
    q, res = A.add_rms_norm_quant(x, r, w, s, o, 1e-6, b if with_bias else None)
    args, kwargs = _only_call(fake_npu_on_cpu, "npu_add_rms_norm_quant")
    assert [torch.equal(a, e) for a, e in zip(args, (x, r, w, s, o), strict=True)] == [True] * 5
    assert kwargs["epsilon"] == 1e-6
    assert ("beta" in kwargs) == with_bias
    assert (_value(q), _value(res)) == (50, 52)


def test_add_rms_norm_dynamic_quant_maps_outputs_0_3_2(fake_npu_on_cpu: Any) -> None:
    x, r, w, b = torch.randn(2, 8), torch.randn(2, 8), torch.randn(8), torch.randn(8)
    q, scale, res = A.add_rms_norm_dynamic_quant(x, r, w, 1e-5, b)
    _, kwargs = _only_call(fake_npu_on_cpu, "npu_add_rms_norm_dynamic_quant")
    assert kwargs["epsilon"] == 1e-5 and kwargs["output_mask"] == [True, False]
    assert torch.equal(kwargs["beta"], b)
    assert (_value(q), _value(scale), _value(res)) == (60, 63, 62)


def test_dynamic_mx_quant_trims_the_paired_scale_layout(fake_npu_on_cpu: Any) -> None:
    x = torch.randn(3, 70)  # 3 blocks; the kernel returns [3, 2, 2]
    q, scale = A.dynamic_mx_quant(x)
    _, kwargs = _only_call(fake_npu_on_cpu, "npu_dynamic_mx_quant")
    assert kwargs == {"dst_type": E4M3}
    assert q.dtype == E4M3 and _value(q) == 64
    assert scale.shape == (3, 3) and scale.dtype == torch.float8_e8m0fnu
    assert _value(scale) == 2.0**-3


def test_add_rms_norm_dynamic_mx_quant_maps_outputs_0_2_1(fake_npu_on_cpu: Any) -> None:
    x = torch.randn(2, 64)
    q, scale, res = A.add_rms_norm_dynamic_mx_quant(x, x, torch.ones(64), 1e-6)
    _, kwargs = _only_call(fake_npu_on_cpu, "npu_add_rms_norm_dynamic_mx_quant")
    assert kwargs == {"epsilon": 1e-6, "dst_type": E4M3}
    assert (_value(q), _value(scale), _value(res)) == (80, 2.0**-4, 81)
    assert scale.shape == (2, 2)


def test_rms_norm_dynamic_mx_quant_maps_outputs_0_1(fake_npu_on_cpu: Any) -> None:
    q, scale = A.rms_norm_dynamic_mx_quant(torch.randn(2, 96), torch.ones(96), 1e-6)
    _only_call(fake_npu_on_cpu, "npu_rms_norm_dynamic_mx_quant")
    assert (_value(q), _value(scale)) == (96, 2.0**-5) and scale.shape == (2, 3)


def test_rotary_embedding_rotates_copies_in_place(fake_npu_on_cpu: Any) -> None:
    pos, cache = torch.tensor([0, 1]), torch.randn(4, 16)
    q, k = torch.randn(2, 3, 16), torch.randn(2, 32)
    q_before = q.clone()
    q_out, k_out = A.rotary_embedding(pos, q, k, cache, 16, 16, False)
    args, _ = _only_call(fake_npu_on_cpu, "_npu_rotary_embedding")
    assert args[1].shape == (2, 48) and args[3] == 16 and args[4] is cache and args[5] is False
    assert torch.equal(q, q_before)  # the op stays functional
    assert q_out.shape == q.shape and _value(q_out) == 100 and _value(k_out) == 101


def test_partial_rotary_falls_back_to_the_reference(fake_npu_on_cpu: Any) -> None:
    pos, cache = torch.tensor([0]), torch.randn(1, 8)
    q = torch.randn(1, 16)
    q_out, _ = A.rotary_embedding(pos, q, q.clone(), cache, 16, 8, True)
    assert fake_npu_on_cpu.calls == []
    assert torch.equal(q_out[:, 8:], q[:, 8:])


def test_split_qkv_rmsnorm_rope_composes_npu_kernels(fake_npu_on_cpu: Any) -> None:
    qkv = torch.randn(3, 4 * 16)
    pos, cache = torch.tensor([0, 1, 2]), torch.randn(4, 16)
    q, k, v = A.split_qkv_rmsnorm_rope(
        qkv,
        torch.ones(16),
        torch.ones(16),
        pos,
        cache,
        32,
        16,
        16,
        16,
        True,
        1e-6,
        torch.ones(16),
        None,
    )
    names = [c[0] for c in fake_npu_on_cpu.calls]
    assert names == ["npu_rms_norm", "npu_rms_norm", "_npu_rotary_embedding"]
    assert fake_npu_on_cpu.calls[0][1][0].shape == (3, 2, 16)
    assert (_value(q), _value(k)) == (100, 101)
    assert torch.equal(v, qkv[:, 48:]) and v.is_contiguous()


def test_muls_add_is_one_add_with_alpha(fake_npu_on_cpu: Any) -> None:
    x, y = torch.tensor([1.0, 2.0]), torch.tensor([3.0, 4.0])
    assert A.muls_add(x, y, 0.5).tolist() == [3.5, 5.0]


def test_loader_imports_torch_npu_from_sys_modules_and_reset_restores(fake_npu: Any) -> None:
    state = NpuRegistration()
    sys.modules["torch_npu"] = fake_npu
    try:
        assert state.load_if_available(dispatch_key="CPU") and state.loaded
        A.rms_norm(torch.ones(1, 4), torch.ones(4), 1e-6)
        assert fake_npu.calls
    finally:
        state.reset()
        del sys.modules["torch_npu"]
    assert not state.loaded
    assert A.rms_norm(torch.ones(1, 4), torch.ones(4), 3.0).tolist() == [[0.5] * 4]


def test_loader_reports_a_broken_torch_npu_without_raising(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib
    import importlib.util

    state = NpuRegistration()
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: object())

    def broken(name: str) -> Any:
        raise OSError("libascendcl.so: cannot open shared object file")

    monkeypatch.setattr(importlib, "import_module", broken)
    assert state.load_if_available() is False
    assert state.error is not None and "libascendcl" in state.error
    assert not state.loaded


def test_loader_without_torch_npu_does_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    monkeypatch.delitem(sys.modules, "torch_npu", raising=False)
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "torch_npu" else real_find_spec(name, *a),
    )
    state = NpuRegistration()
    assert state.load_if_available() is False
    assert not state.loaded and state.error is None


def _same(got: Any, want: Any) -> bool:
    if isinstance(want, torch.Tensor):
        return got is want
    return bool(type(got) is type(want) and got == want)


def test_each_adapter_passes_every_argument_in_the_kernels_order(fake_npu_on_cpu: Any) -> None:
    """Exact positional arguments (the very tensors) and keywords of every kernel call."""
    x, r, w, b = torch.randn(2, 64), torch.randn(2, 64), torch.randn(64), torch.randn(64)
    s, o = torch.tensor([0.5]), torch.tensor([1.0])
    calls: list[tuple[Any, str, tuple[Any, ...], dict[str, Any]]] = [
        (lambda: A.rms_norm(x, w, 0.25), "npu_rms_norm", (x, w), {"epsilon": 0.25}),
        (lambda: A.add_rms_norm(x, r, w, 0.5), "npu_add_rms_norm", (x, r, w), {"epsilon": 0.5}),
        (lambda: A.quantize(x, s, o), "npu_quantize", (x, s, o, torch.qint8, -1, True), {}),
        (lambda: A.dynamic_quant(x), "npu_dynamic_quant", (x,), {}),
        (lambda: A.add_rms_norm_quant(x, r, w, s, o, 0.125, b), "npu_add_rms_norm_quant",
         (x, r, w, s, o), {"epsilon": 0.125, "beta": b}),
        (lambda: A.add_rms_norm_quant(x, r, w, s, o, 0.125), "npu_add_rms_norm_quant",
         (x, r, w, s, o), {"epsilon": 0.125}),
        (lambda: A.add_rms_norm_dynamic_quant(x, r, w, 0.75, b),
         "npu_add_rms_norm_dynamic_quant", (x, r, w),
         {"epsilon": 0.75, "output_mask": [True, False], "beta": b}),
        (lambda: A.add_rms_norm_dynamic_quant(x, r, w, 0.75),
         "npu_add_rms_norm_dynamic_quant", (x, r, w),
         {"epsilon": 0.75, "output_mask": [True, False]}),
        (lambda: A.dynamic_mx_quant(x), "npu_dynamic_mx_quant", (x,), {"dst_type": E4M3}),
        (lambda: A.add_rms_norm_dynamic_mx_quant(x, r, w, 0.375),
         "npu_add_rms_norm_dynamic_mx_quant", (x, r, w), {"epsilon": 0.375, "dst_type": E4M3}),
        (lambda: A.rms_norm_dynamic_mx_quant(x, w, 0.625), "npu_rms_norm_dynamic_mx_quant",
         (x, w), {"epsilon": 0.625, "dst_type": E4M3}),
    ]
    for call, name, args, kwargs in calls:
        fake_npu_on_cpu.calls.clear()
        call()
        ((got_name, got_args, got_kwargs),) = fake_npu_on_cpu.calls
        assert got_name == name
        assert len(got_args) == len(args) and all(map(_same, got_args, args)), name
        assert got_kwargs.keys() == kwargs.keys(), name
        assert all(_same(got_kwargs[k], v) for k, v in kwargs.items()), name


def test_split_qkv_rmsnorm_rope_passes_weights_eps_and_rope_arguments(
    fake_npu_on_cpu: Any,
) -> None:
    qkv = torch.randn(3, 4 * 16)
    qw, kw, qb = torch.randn(16), torch.randn(16), torch.randn(16)
    pos, cache = torch.tensor([0, 1, 2]), torch.randn(4, 16)
    A.split_qkv_rmsnorm_rope(qkv, qw, kw, pos, cache, 32, 16, 16, 16, False, 0.25, qb, None)
    (q_norm, k_norm, rope) = fake_npu_on_cpu.calls
    assert torch.equal(q_norm[1][0], qkv[:, :32].reshape(3, 2, 16)) and q_norm[1][1] is qw
    assert torch.equal(k_norm[1][0], qkv[:, 32:48].reshape(3, 1, 16)) and k_norm[1][1] is kw
    assert q_norm[2] == {"epsilon": 0.25} and k_norm[2] == {"epsilon": 0.25}
    positions, q_in, k_in, head, cache_in, neox = rope[1]
    assert positions is pos and cache_in is cache and head == 16 and neox is False
    # q went through the norm kernel's output (marker 10) plus the bias.
    assert torch.equal(q_in, (torch.full((3, 2, 16), 10.0) + qb).reshape(3, 32))
    assert torch.equal(k_in, torch.full((3, 16), 10.0))


def test_split_qkv_rmsnorm_rope_adds_the_k_bias_to_the_k_norm_output(
    fake_npu_on_cpu: Any,
) -> None:
    qkv = torch.randn(3, 4 * 16)
    kb = torch.randn(16)
    pos, cache = torch.tensor([0, 1, 2]), torch.randn(4, 16)
    A.split_qkv_rmsnorm_rope(qkv, torch.ones(16), torch.ones(16), pos, cache, 32, 16, 16, 16,
                             True, 1e-6, None, kb)
    _, q_in, k_in, *_ = fake_npu_on_cpu.calls[-1][1]
    assert torch.equal(q_in, torch.full((3, 32), 10.0))  # no q bias: the norm output itself
    assert torch.equal(k_in, (torch.full((3, 1, 16), 10.0) + kb).reshape(3, 16))


def test_partial_rotary_fallback_keeps_the_pair_layout(fake_npu_on_cpu: Any) -> None:
    from ascend_kernels import ops_rope  # the reference, called directly

    g = torch.Generator().manual_seed(4)
    pos, cache = torch.tensor([0, 2, 1]), torch.randn(3, 8, generator=g)
    q, k = torch.randn(3, 2 * 16, generator=g), torch.randn(3, 16, generator=g)
    for neox in (True, False):
        got = A.rotary_embedding(pos, q, k, cache, 16, 8, neox)
        want = ops_rope.rotary_embedding(pos, q, k, cache, 16, 8, neox)
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1]), neox
    assert fake_npu_on_cpu.calls == []


def test_rotary_kernel_gets_contiguous_copies_of_strided_q_and_k(fake_npu_on_cpu: Any) -> None:
    pos, cache = torch.tensor([0, 1, 2]), torch.randn(4, 16)
    q = torch.randn(32, 3).t()  # [3, 32] with strides (1, 3): dense, not contiguous
    k = torch.randn(16, 3).t()
    q_out, k_out = A.rotary_embedding(pos, q, k, cache, 16, 16, True)
    args, _ = _only_call(fake_npu_on_cpu, "_npu_rotary_embedding")
    assert args[1].is_contiguous() and args[2].is_contiguous()
    assert torch.equal(args[1], q) and torch.equal(args[2], k)
    assert q_out.is_contiguous() and k_out.is_contiguous()
