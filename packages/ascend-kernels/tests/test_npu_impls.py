"""The NPU registrations, run through the fake torch_npu of ``torch_npu_double.seam`` (no NPU here).

The fake defines the real torch-npu 2.13 op schemas in a scratch namespace (so a wrong arity,
a positional keyword-only argument or an unknown keyword fails), returns outputs with the
dtypes/shapes/count of the wheel's meta functions and raises ``ContractViolation`` for the
inputs the kernels document as unsupported. ``fake_npu_on_cpu`` registers the adapters for
the CPU key, so ``torch.ops.ascend.*`` on CPU tensors goes exactly the way it goes on an NPU.
Each kernel output is filled with a marker value; tests compare the op's outputs with the
kernel's recorded outputs to show which one landed where.
"""

from __future__ import annotations

import sys
from typing import Any

import pytest
import torch
from ascend_kernels.npu_loader import NpuRegistration
from ascend_kernels.ops import SPECS
from ascend_kernels.registration import reference_impl
from torch_npu_double.seam import FakeTorchNpu

A = torch.ops.ascend
BF16, F16, F32 = torch.bfloat16, torch.float16, torch.float32
E4M3, E8M0 = torch.float8_e4m3fn, torch.float8_e8m0fnu


def _r(*shape: int, dtype: torch.dtype = BF16) -> torch.Tensor:
    return torch.randn(*shape).to(dtype)


def _only_call(fake: FakeTorchNpu, name: str) -> Any:
    assert fake.kernels.names() == [name]
    return fake.calls[0]


def _same(got: Any, want: Any) -> bool:
    if isinstance(want, torch.Tensor):
        return got is want
    return bool(type(got) is type(want) and got == want)


def test_every_op_except_lora_has_an_npu_adapter() -> None:
    from ascend_kernels import OP_NAMES

    adapted = {op for op, s in SPECS.items() if s.npu is not None}
    assert adapted <= set(OP_NAMES)
    assert set(OP_NAMES) - adapted == {"bgmv_expand", "sgmv_expand"}


def test_rms_norm_maps_to_npu_rms_norm_output_0(fake_npu_on_cpu: FakeTorchNpu) -> None:
    x, w = _r(3, 8), _r(8)
    out = A.rms_norm(x, w, 1e-5)
    call = _only_call(fake_npu_on_cpu, "npu_rms_norm")
    assert call.args[0] is x and call.args[1] is w and call.kwargs == {"epsilon": 1e-5}
    assert torch.equal(out, call.outputs[0])  # y, not rstd


def test_rms_norm_of_ranks_the_kernel_lacks_runs_on_rows(fake_npu_on_cpu: FakeTorchNpu) -> None:
    # npu_rms_norm takes 2-8 dims: a 1-D x goes in as [1, H] and comes back 1-D.
    x, w = _r(8), _r(8)
    out = A.rms_norm(x, w, 1e-5)
    call = _only_call(fake_npu_on_cpu, "npu_rms_norm")
    assert call.args[0].shape == (1, 8) and out.shape == (8,)
    assert torch.equal(out, call.outputs[0].reshape(8))


def test_norms_with_a_weight_of_another_dtype_run_the_reference(
    fake_npu_on_cpu: FakeTorchNpu,
) -> None:
    # The kernels take gamma in x's dtype only; the reference takes any float weight.
    x, r, w = _r(3, 8), _r(3, 8), _r(8, dtype=F32)
    assert torch.equal(A.rms_norm(x, w, 1e-6), reference_impl("rms_norm")(x, w, 1e-6))
    got = A.add_rms_norm(x, r, w, 1e-6)
    want = reference_impl("add_rms_norm")(x, r, w, 1e-6)
    assert all(map(torch.equal, got, want))
    assert fake_npu_on_cpu.calls == []


def test_add_rms_norm_maps_outputs_0_and_2_and_adds_bias(fake_npu_on_cpu: FakeTorchNpu) -> None:
    x, r, w = _r(3, 8), _r(3, 8), _r(8)
    out, res = A.add_rms_norm(x, r, w, 1e-6)
    call = _only_call(fake_npu_on_cpu, "npu_add_rms_norm")
    assert call.args[0] is x and call.args[1] is r and call.kwargs == {"epsilon": 1e-6}
    assert torch.equal(out, call.outputs[0]) and torch.equal(res, call.outputs[2])
    bias = torch.full((8,), 0.5, dtype=BF16)
    out_b, _ = A.add_rms_norm(x, r, w, 1e-6, bias)
    assert torch.equal(out_b, fake_npu_on_cpu.calls[-1].outputs[0] + bias)


def test_quantize_uses_div_mode_on_the_last_axis(fake_npu_on_cpu: FakeTorchNpu) -> None:
    x, s, o = _r(2, 4), torch.tensor([0.5]), torch.tensor([1], dtype=torch.int8)
    q = A.quantize(x, s, o)
    call = _only_call(fake_npu_on_cpu, "npu_quantize")
    assert torch.equal(call.args[1], s) and call.args[2] is not None
    assert torch.equal(call.args[2], o) and call.args[3:] == (torch.qint8, -1, True)
    assert call.kwargs == {} and q.dtype == torch.int8 and torch.equal(q, call.outputs)


@pytest.mark.parametrize(
    ("scale_dtype", "offset_dtype", "kernel_scale", "kernel_offset"),
    [
        (F16, torch.int8, F32, torch.int8),  # float16 scales widen to float32 (exact)
        (F32, torch.uint8, F32, torch.uint8),
        (BF16, torch.int32, BF16, torch.int32),
        (F32, torch.int16, F32, torch.int32),  # int16 widens to int32 (exact)
        (F32, BF16, F32, BF16),
    ],
)
def test_quantize_gives_the_kernel_its_scale_and_zero_point_dtypes(
    fake_npu_on_cpu: FakeTorchNpu, scale_dtype: torch.dtype, offset_dtype: torch.dtype,
    kernel_scale: torch.dtype, kernel_offset: torch.dtype,
) -> None:
    s, o = torch.tensor([0.5]).to(scale_dtype), torch.tensor([3]).to(offset_dtype)
    A.quantize(_r(2, 4), s, o)
    call = _only_call(fake_npu_on_cpu, "npu_quantize")
    assert (call.args[1].dtype, call.args[2].dtype) == (kernel_scale, kernel_offset)
    assert call.args[1].tolist() == [0.5] and call.args[2].tolist() == [3]


@pytest.mark.parametrize("offset_dtype", [F32, F16, torch.int64])
def test_quantize_offsets_only_a_lossy_cast_would_convert_run_the_reference(
    fake_npu_on_cpu: FakeTorchNpu, offset_dtype: torch.dtype
) -> None:
    x, s, o = _r(2, 4), torch.tensor([0.25]), torch.tensor([1.5]).to(offset_dtype)
    assert torch.equal(A.quantize(x, s, o), reference_impl("quantize")(x, s, o))
    assert fake_npu_on_cpu.calls == []


def test_dynamic_quant(fake_npu_on_cpu: FakeTorchNpu) -> None:
    q, scale = A.dynamic_quant(_r(2, 4))
    call = _only_call(fake_npu_on_cpu, "npu_dynamic_quant")
    assert torch.equal(q, call.outputs[0]) and torch.equal(scale, call.outputs[1])


def test_dynamic_quant_of_float32_runs_the_reference(fake_npu_on_cpu: FakeTorchNpu) -> None:
    x = _r(2, 4, dtype=F32)  # the kernel takes fp16/bf16 only
    got = A.dynamic_quant(x)
    assert all(map(torch.equal, got, reference_impl("dynamic_quant")(x)))
    assert fake_npu_on_cpu.calls == []


def test_dynamic_quant_of_a_vector_runs_the_kernel_on_one_row(
    fake_npu_on_cpu: FakeTorchNpu,
) -> None:
    q, scale = A.dynamic_quant(_r(6, dtype=F16))  # the kernel needs dim > 1
    call = _only_call(fake_npu_on_cpu, "npu_dynamic_quant")
    assert call.args[0].shape == (1, 6) and q.shape == (6,) and scale.shape == ()
    assert torch.equal(q, call.outputs[0].reshape(6))


@pytest.mark.parametrize("with_bias", [False, True])
def test_add_rms_norm_quant_maps_y1_and_x(fake_npu_on_cpu: FakeTorchNpu, with_bias: bool) -> None:
    x, r, w = _r(2, 8), _r(2, 8), _r(8)
    s, o, b = torch.tensor([0.1]), torch.tensor([2], dtype=torch.int32), _r(8)
    q, res = A.add_rms_norm_quant(x, r, w, s, o, 1e-6, b if with_bias else None)
    call = _only_call(fake_npu_on_cpu, "npu_add_rms_norm_quant")
    assert call.args[0] is x and call.args[1] is r and call.args[2] is w
    assert call.kwargs["epsilon"] == 1e-6 and ("beta" in call.kwargs) == with_bias
    assert torch.equal(q, call.outputs[0]) and torch.equal(res, call.outputs[2])


@pytest.mark.parametrize(
    ("scale", "offset", "zero_point_dtype"),
    [
        (torch.tensor([0.1]), torch.tensor([2], dtype=torch.int8), torch.int32),
        (torch.tensor([0.1], dtype=F16), torch.tensor([2], dtype=torch.int32), torch.int32),
        (torch.full((8,), 0.1), torch.full((8,), 2, dtype=torch.uint8), torch.int32),
        (torch.tensor([0.1], dtype=BF16), torch.tensor([2.0], dtype=BF16), BF16),
    ],
)
def test_add_rms_norm_quant_expands_scale_and_offset_to_gammas_shape(
    fake_npu_on_cpu: FakeTorchNpu, scale: torch.Tensor, offset: torch.Tensor,
    zero_point_dtype: torch.dtype,
) -> None:
    A.add_rms_norm_quant(_r(2, 8), _r(2, 8), _r(8), scale, offset, 1e-6)
    scales1, zero_points1 = _only_call(fake_npu_on_cpu, "npu_add_rms_norm_quant").args[3:5]
    assert scales1.shape == zero_points1.shape == (8,)
    assert scales1.dtype in (F32, BF16) and zero_points1.dtype == zero_point_dtype
    assert torch.equal(scales1.float(), scale.float().expand(8))
    assert torch.equal(zero_points1.float(), offset.float().expand(8))


@pytest.mark.parametrize(
    ("x_dtype", "offset"),
    [(F32, torch.tensor([1], dtype=torch.int32)), (BF16, torch.tensor([1.0])),
     (F16, torch.tensor([1], dtype=torch.int64))],
)
def test_add_rms_norm_quant_the_kernel_cannot_take_runs_the_reference(
    fake_npu_on_cpu: FakeTorchNpu, x_dtype: torch.dtype, offset: torch.Tensor
) -> None:
    x, r, w, s = _r(2, 8, dtype=x_dtype), _r(2, 8, dtype=x_dtype), _r(8, dtype=x_dtype), \
        torch.tensor([0.5])
    got = A.add_rms_norm_quant(x, r, w, s, offset, 1e-6)
    want = reference_impl("add_rms_norm_quant")(x, r, w, s, offset, 1e-6)
    assert all(map(torch.equal, got, want)) and fake_npu_on_cpu.calls == []


def test_add_rms_norm_dynamic_quant_maps_outputs_0_3_2(fake_npu_on_cpu: FakeTorchNpu) -> None:
    x, r, w, b = _r(2, 8), _r(2, 8), _r(8), _r(8)
    q, scale, res = A.add_rms_norm_dynamic_quant(x, r, w, 1e-5, b)
    call = _only_call(fake_npu_on_cpu, "npu_add_rms_norm_dynamic_quant")
    assert call.kwargs["epsilon"] == 1e-5 and call.kwargs["output_mask"] == [True, False]
    assert call.kwargs["beta"] is b
    assert torch.equal(q, call.outputs[0]) and torch.equal(scale, call.outputs[3])
    assert torch.equal(res, call.outputs[2])


def test_add_rms_norm_dynamic_quant_of_float32_runs_the_reference(
    fake_npu_on_cpu: FakeTorchNpu,
) -> None:
    x, r, w = _r(2, 8, dtype=F32), _r(2, 8, dtype=F32), _r(8, dtype=F32)
    got = A.add_rms_norm_dynamic_quant(x, r, w, 1e-5)
    want = reference_impl("add_rms_norm_dynamic_quant")(x, r, w, 1e-5)
    assert all(map(torch.equal, got, want)) and fake_npu_on_cpu.calls == []
    # A vector is one row for the kernel (it takes 2-8 dims).
    q, scale, res = A.add_rms_norm_dynamic_quant(_r(8), _r(8), _r(8), 1e-5)
    call = _only_call(fake_npu_on_cpu, "npu_add_rms_norm_dynamic_quant")
    assert call.args[0].shape == (1, 8) and (q.shape, scale.shape, res.shape) == ((8,), (), (8,))


def test_dynamic_mx_quant_trims_the_paired_scale_and_views_it_as_e8m0(
    fake_npu_on_cpu: FakeTorchNpu,
) -> None:
    x = _r(3, 70)  # 3 blocks; the kernel returns uint8 [3, 2, 2]
    q, scale = A.dynamic_mx_quant(x)
    call = _only_call(fake_npu_on_cpu, "npu_dynamic_mx_quant")
    assert call.kwargs == {"dst_type": E4M3} and call.outputs[1].dtype == torch.uint8
    assert q.dtype == E4M3 and torch.equal(q.view(torch.uint8), call.outputs[0].view(torch.uint8))
    assert scale.shape == (3, 3) and scale.dtype == E8M0
    assert torch.equal(scale.view(torch.uint8), call.outputs[1].reshape(3, 4)[:, :3])


def test_dynamic_mx_quant_of_float32_below_one_block_runs_the_reference(
    fake_npu_on_cpu: FakeTorchNpu,
) -> None:
    # float32 input: block_size 32 and a quantized axis of at least 32 (torch_npu docs).
    x = _r(3, 31, dtype=F32)
    got = A.dynamic_mx_quant(x)
    want = reference_impl("dynamic_mx_quant")(x)
    assert all(torch.equal(g.view(torch.uint8), w.view(torch.uint8))
               for g, w in zip(got, want, strict=True))
    assert fake_npu_on_cpu.calls == []
    q, scale = A.dynamic_mx_quant(_r(3, 32, dtype=F32))  # the boundary: the kernel runs
    assert fake_npu_on_cpu.kernels.names() == ["npu_dynamic_mx_quant"] and scale.shape == (3, 1)
    # Ranks above 7 go in as rows.
    q, scale = A.dynamic_mx_quant(_r(1, 1, 1, 1, 1, 1, 2, 2, 40))
    assert fake_npu_on_cpu.calls[-1].args[0].shape == (4, 40)
    assert q.shape == (1, 1, 1, 1, 1, 1, 2, 2, 40) and scale.shape == (1, 1, 1, 1, 1, 1, 2, 2, 2)


def test_add_rms_norm_dynamic_mx_quant_maps_outputs_0_2_1(fake_npu_on_cpu: FakeTorchNpu) -> None:
    x = _r(2, 64)
    q, scale, res = A.add_rms_norm_dynamic_mx_quant(x, x, _r(64), 1e-6)
    call = _only_call(fake_npu_on_cpu, "npu_add_rms_norm_dynamic_mx_quant")
    assert call.kwargs == {"epsilon": 1e-6, "dst_type": E4M3} and len(call.outputs) == 4
    assert torch.equal(q.view(torch.uint8), call.outputs[0].view(torch.uint8))
    assert scale.dtype == E8M0 and scale.shape == (2, 2)
    assert torch.equal(scale.view(torch.uint8), call.outputs[2].reshape(2, 2))
    assert torch.equal(res, call.outputs[1])


def test_rms_norm_dynamic_mx_quant_maps_outputs_0_1(fake_npu_on_cpu: FakeTorchNpu) -> None:
    q, scale = A.rms_norm_dynamic_mx_quant(_r(2, 96), _r(96), 1e-6)
    call = _only_call(fake_npu_on_cpu, "npu_rms_norm_dynamic_mx_quant")
    assert scale.dtype == E8M0 and scale.shape == (2, 3)
    assert torch.equal(scale.view(torch.uint8), call.outputs[1].reshape(2, 4)[:, :3])
    assert torch.equal(q.view(torch.uint8), call.outputs[0].view(torch.uint8))


def test_rotary_embedding_calls_npu_mrope_in_rope_mode_with_the_calls_cache(
    fake_npu_on_cpu: FakeTorchNpu,
) -> None:
    pos, cache = torch.tensor([0, 1]), _r(4, 32)
    q, k = _r(2, 3, 32), _r(2, 64)
    q_before = q.clone()
    q_out, k_out = A.rotary_embedding(pos, q, k, cache, 32, 32, False)
    call = _only_call(fake_npu_on_cpu, "npu_mrope")
    args = call.args
    assert args[1].shape == (2, 96) and args[2].shape == (2, 64)
    assert args[3] is cache and args[4] == 32
    assert call.kwargs == {"mrope_section": [0, 0, 0], "rotary_mode": "interleave"}
    assert torch.equal(q, q_before)  # the op stays functional
    assert torch.equal(q_out.reshape(2, 96), call.outputs[0])
    assert torch.equal(k_out, call.outputs[1])


def test_rotary_embedding_hands_each_call_its_own_cache_and_no_atb_rope(
    fake_npu_on_cpu: FakeTorchNpu,
) -> None:
    # ATB's _npu_rotary_embedding keeps the cos/sin cache of its first call for the process;
    # two engines (two caches) in one process must each rotate with their own cache.
    pos = torch.tensor([0, 3])
    q, k = _r(2, 2, 32), _r(2, 32)
    caches = (_r(4, 32), _r(4, 32))
    for cache in caches:
        A.rotary_embedding(pos, q, k, cache, 32, 32, True)
    calls = fake_npu_on_cpu.calls
    assert [c.op for c in calls] == ["npu_mrope", "npu_mrope"]
    assert calls[0].args[3] is caches[0] and calls[1].args[3] is caches[1]


@pytest.mark.parametrize("fake_npu", [{"atb": False}], indirect=True)
def test_rotary_embedding_needs_no_atb_library(fake_npu_on_cpu: FakeTorchNpu) -> None:
    pos, cache = torch.tensor([0, 1]), _r(4, 32)
    A.rotary_embedding(pos, _r(2, 3, 32), _r(2, 64), cache, 32, 32, True)
    assert fake_npu_on_cpu.kernels.names() == ["npu_mrope"]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_rotary_embedding_of_half_types_runs_the_reference_off_mropes_rotary_rule(
    dtype: torch.dtype, fake_npu_on_cpu: FakeTorchNpu,
) -> None:
    # npu_mrope: rotary_dim a multiple of 32 for float16/bfloat16 (16 is not).
    pos, cache = torch.tensor([0, 1]), _r(4, 16).to(dtype)
    A.rotary_embedding(pos, _r(2, 16).to(dtype), _r(2, 16).to(dtype), cache, 16, 16, True)
    assert fake_npu_on_cpu.calls == []
    A.rotary_embedding(pos, _r(2, 32).to(dtype), _r(2, 32).to(dtype), _r(4, 32).to(dtype),
                       32, 32, True)
    assert fake_npu_on_cpu.kernels.names() == ["npu_mrope"]


def test_partial_rotary_falls_back_to_the_reference(fake_npu_on_cpu: FakeTorchNpu) -> None:
    pos, cache = torch.tensor([0]), torch.randn(1, 8)
    q = torch.randn(1, 16)
    q_out, _ = A.rotary_embedding(pos, q, q.clone(), cache, 16, 8, True)
    assert fake_npu_on_cpu.calls == []
    assert torch.equal(q_out[:, 8:], q[:, 8:])


def test_split_qkv_rmsnorm_rope_composes_npu_kernels(fake_npu_on_cpu: FakeTorchNpu) -> None:
    qkv = _r(3, 4 * 32)
    pos, cache = torch.tensor([0, 1, 2]), _r(4, 32)
    q, k, v = A.split_qkv_rmsnorm_rope(
        qkv, _r(32), _r(32), pos, cache, 64, 32, 32, 32, True, 1e-6, _r(32), None
    )
    calls = fake_npu_on_cpu.calls
    assert [c.op for c in calls] == ["npu_rms_norm", "npu_rms_norm", "npu_mrope"]
    assert calls[0].args[0].shape == (3, 2, 32)
    assert torch.equal(q, calls[2].outputs[0]) and torch.equal(k, calls[2].outputs[1])
    assert torch.equal(v, qkv[:, 96:]) and v.is_contiguous()


def test_muls_add_is_one_add_with_alpha(fake_npu_on_cpu: FakeTorchNpu) -> None:
    x, y = torch.tensor([1.0, 2.0]), torch.tensor([3.0, 4.0])
    assert A.muls_add(x, y, 0.5).tolist() == [3.5, 5.0]


def test_loader_imports_torch_npu_from_sys_modules_and_reset_restores(
    fake_npu: FakeTorchNpu,
) -> None:
    state = NpuRegistration()
    assert sys.modules["torch_npu"] is fake_npu
    try:
        assert state.load_if_available(dispatch_key="CPU") and state.loaded
        A.rms_norm(torch.ones(1, 4, dtype=BF16), torch.ones(4, dtype=BF16), 1e-6)
        assert fake_npu.calls
    finally:
        state.reset()
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


def test_each_adapter_passes_every_argument_in_the_kernels_order(
    fake_npu_on_cpu: FakeTorchNpu,
) -> None:
    """Exact positional arguments (the very tensors) and keywords of every kernel call."""
    x, r, w, b = _r(2, 64), _r(2, 64), _r(64), _r(64)
    s, o = torch.tensor([0.5]), torch.tensor([1], dtype=torch.int8)
    calls: list[tuple[Any, str, tuple[Any, ...], dict[str, Any]]] = [
        (lambda: A.rms_norm(x, w, 0.25), "npu_rms_norm", (x, w), {"epsilon": 0.25}),
        (lambda: A.add_rms_norm(x, r, w, 0.5), "npu_add_rms_norm", (x, r, w), {"epsilon": 0.5}),
        (lambda: A.dynamic_quant(x), "npu_dynamic_quant", (x,), {}),
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
    # The static quant kernels get converted copies: positions and the other arguments.
    for call, name, tail in [
        (lambda: A.quantize(x, s, o), "npu_quantize", (torch.qint8, -1, True)),
        (lambda: A.add_rms_norm_quant(x, r, w, s, o, 0.125, b), "npu_add_rms_norm_quant", ()),
    ]:
        fake_npu_on_cpu.calls.clear()
        call()
        ((got_name, got_args, got_kwargs),) = fake_npu_on_cpu.calls
        assert got_name == name and got_args[0] is x and got_args[len(got_args) - len(tail):] \
            == tail
    assert fake_npu_on_cpu.calls[0].kwargs == {"epsilon": 0.125, "beta": b}


def test_split_qkv_rmsnorm_rope_passes_weights_eps_and_rope_arguments(
    fake_npu_on_cpu: FakeTorchNpu,
) -> None:
    qkv = _r(3, 4 * 32)
    qw, kw, qb = _r(32), _r(32), _r(32)
    pos, cache = torch.tensor([0, 1, 2]), _r(4, 32)
    A.split_qkv_rmsnorm_rope(qkv, qw, kw, pos, cache, 64, 32, 32, 32, False, 0.25, qb, None)
    q_norm, k_norm, rope = fake_npu_on_cpu.calls
    assert torch.equal(q_norm.args[0], qkv[:, :64].reshape(3, 2, 32)) and q_norm.args[1] is qw
    assert torch.equal(k_norm.args[0], qkv[:, 64:96].reshape(3, 1, 32)) and k_norm.args[1] is kw
    assert q_norm.kwargs == {"epsilon": 0.25} and k_norm.kwargs == {"epsilon": 0.25}
    positions, cache_in, head = rope.args[0], rope.args[3], rope.args[4]
    assert torch.equal(positions, pos) and cache_in is cache and head == 32
    assert rope.kwargs == {"mrope_section": [0, 0, 0], "rotary_mode": "interleave"}
    # q went through the norm kernel's output plus the bias.
    assert torch.equal(rope.args[1], (q_norm.outputs[0] + qb).reshape(3, 64))
    assert torch.equal(rope.args[2], k_norm.outputs[0].reshape(3, 32))


def test_split_qkv_rmsnorm_rope_adds_the_k_bias_to_the_k_norm_output(
    fake_npu_on_cpu: FakeTorchNpu,
) -> None:
    qkv = _r(3, 4 * 32)
    kb = _r(32)
    pos, cache = torch.tensor([0, 1, 2]), _r(4, 32)
    A.split_qkv_rmsnorm_rope(qkv, _r(32), _r(32), pos, cache, 64, 32, 32, 32,
                             True, 1e-6, None, kb)
    q_norm, k_norm, rope = fake_npu_on_cpu.calls
    assert torch.equal(rope.args[1], q_norm.outputs[0].reshape(3, 64))  # no q bias
    assert torch.equal(rope.args[2], (k_norm.outputs[0] + kb).reshape(3, 32))


def test_partial_rotary_fallback_keeps_the_pair_layout(fake_npu_on_cpu: FakeTorchNpu) -> None:
    from ascend_kernels.ops import rope as ops_rope  # the reference, called directly

    g = torch.Generator().manual_seed(4)
    pos, cache = torch.tensor([0, 2, 1]), torch.randn(3, 8, generator=g)
    q, k = torch.randn(3, 2 * 16, generator=g), torch.randn(3, 16, generator=g)
    for neox in (True, False):
        got = A.rotary_embedding(pos, q, k, cache, 16, 8, neox)
        want = ops_rope.rotary_embedding(pos, q, k, cache, 16, 8, neox)
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1]), neox
    assert fake_npu_on_cpu.calls == []


def test_rotary_kernel_gets_2d_q_and_k_of_strided_inputs(
    fake_npu_on_cpu: FakeTorchNpu,
) -> None:
    pos, cache = torch.tensor([0, 1, 2]), _r(4, 32)
    q = _r(64, 3).t()  # [3, 64] with strides (1, 3): dense, not contiguous
    k = _r(32, 3).t()
    q_out, k_out = A.rotary_embedding(pos, q, k, cache, 32, 32, True)
    call = _only_call(fake_npu_on_cpu, "npu_mrope")
    assert torch.equal(call.args[1], q) and torch.equal(call.args[2], k)
    assert q_out.shape == q.shape and k_out.shape == k.shape
