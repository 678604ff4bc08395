"""Importing ascend_kernels defines every op with its exact documented schema, no vLLM."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import textwrap
from typing import Any

import pytest
import torch
from ascend_kernels import OP_NAMES, registration
from ascend_kernels.ops import SCHEMAS, spec

# The device-neutral operator namespace, written out by hand; the package's
# SCHEMAS must match it character for character (after torch's normalisation).
CONTRACT = {
    "rms_norm": "ascend::rms_norm(Tensor x, Tensor weight, float eps) -> Tensor",
    "add_rms_norm": "ascend::add_rms_norm(Tensor x, Tensor residual, Tensor weight, float eps,"
    " Tensor? bias=None) -> (Tensor out, Tensor residual_out)",
    "quantize": "ascend::quantize(Tensor x, Tensor scale, Tensor offset) -> Tensor",
    "dynamic_quant": "ascend::dynamic_quant(Tensor x) -> (Tensor q, Tensor scale)",
    "add_rms_norm_quant": "ascend::add_rms_norm_quant(Tensor x, Tensor residual, Tensor weight,"
    " Tensor scale, Tensor offset, float eps, Tensor? bias=None)"
    " -> (Tensor q, Tensor residual_out)",
    "add_rms_norm_dynamic_quant": "ascend::add_rms_norm_dynamic_quant(Tensor x, Tensor residual,"
    " Tensor weight, float eps, Tensor? bias=None)"
    " -> (Tensor q, Tensor scale, Tensor residual_out)",
    "dynamic_mx_quant": "ascend::dynamic_mx_quant(Tensor x) -> (Tensor q, Tensor scale)",
    "add_rms_norm_dynamic_mx_quant": "ascend::add_rms_norm_dynamic_mx_quant(Tensor x,"
    " Tensor residual, Tensor weight, float eps) -> (Tensor q, Tensor scale, Tensor residual_out)",
    "rms_norm_dynamic_mx_quant": "ascend::rms_norm_dynamic_mx_quant(Tensor x, Tensor weight,"
    " float eps) -> (Tensor q, Tensor scale)",
    "rotary_embedding": "ascend::rotary_embedding(Tensor positions, Tensor q, Tensor k,"
    " Tensor cos_sin_cache, int head_size, int rotary_dim, bool is_neox)"
    " -> (Tensor q_out, Tensor k_out)",
    "split_qkv_rmsnorm_rope": "ascend::split_qkv_rmsnorm_rope(Tensor qkv, Tensor q_weight,"
    " Tensor k_weight, Tensor positions, Tensor cos_sin_cache, int q_size, int kv_size,"
    " int head_size, int rotary_dim, bool is_neox, float eps, Tensor? q_bias=None,"
    " Tensor? k_bias=None) -> (Tensor q, Tensor k, Tensor v)",
    "muls_add": "ascend::muls_add(Tensor x, Tensor y, float scale) -> Tensor",
    "bgmv_expand": "ascend::bgmv_expand(Tensor x, Tensor weight, Tensor indices, Tensor y,"
    " int slice_offset, int slice_size) -> Tensor",
    "sgmv_expand": "ascend::sgmv_expand(Tensor x, Tensor weight, Tensor lora_indices,"
    " Tensor seq_len, Tensor y, int slice_offset, int slice_size) -> Tensor",
    # Added the documented way for vLLM CustomOps (README "Schema changes").
    "silu_and_mul": "ascend::silu_and_mul(Tensor x) -> Tensor",
    "mrotary_embedding": "ascend::mrotary_embedding(Tensor positions, Tensor q, Tensor k,"
    " Tensor cos_sin_cache, int head_size, int rotary_dim, int[] mrope_section, bool is_neox,"
    " bool interleaved) -> (Tensor q_out, Tensor k_out)",
    # Added for the NPU runtime's attention backend (README "Schema changes").
    "paged_attention": "ascend::paged_attention(Tensor query, Tensor key_cache,"
    " Tensor value_cache, Tensor block_table, int[] query_ends, int[] seq_lens, float scale)"
    " -> Tensor",
    "reshape_and_cache": "ascend::reshape_and_cache(Tensor key, Tensor value,"
    " Tensor(a!) key_cache, Tensor(b!) value_cache, Tensor slot_mapping) -> ()",
}


def test_every_contract_op_is_registered_with_the_exact_schema() -> None:
    assert set(OP_NAMES) == set(CONTRACT)
    for op, expected in CONTRACT.items():
        assert str(getattr(torch.ops.ascend, op).default._schema) == expected
        assert f"ascend::{op}{SCHEMAS[op]}" == expected


def test_reference_runs_on_any_device_key_and_fake_is_registered() -> None:
    for op in OP_NAMES:
        name = f"ascend::{op}"
        assert torch._C._dispatch_has_kernel_for_dispatch_key(name, "CompositeExplicitAutograd")
        assert torch._C._dispatch_has_kernel_for_dispatch_key(name, "Meta")


def test_registering_twice_is_a_no_op() -> None:
    registration.register_all()
    assert torch.ops.ascend.muls_add(torch.ones(2), torch.ones(2), 2.0).tolist() == [3.0, 3.0]


def test_a_conflicting_existing_schema_is_a_clear_error() -> None:
    changed = dataclasses.replace(spec("muls_add"), schema="(Tensor x) -> Tensor")
    with pytest.raises(RuntimeError) as info:
        registration.register_all(specs=[changed])
    existing = CONTRACT["muls_add"]
    assert str(info.value) == (
        f"ascend::muls_add is already defined with schema {existing!r};"
        " ascend_kernels needs 'ascend::muls_add(Tensor x) -> Tensor'"
    )


@pytest.mark.child_process
def test_clean_import_registers_ops_without_vllm_or_torch_npu() -> None:
    code = textwrap.dedent(
        """
        import sys
        import ascend_kernels
        import torch
        from ascend_kernels.npu_loader import npu_registration
        assert hasattr(torch.ops.ascend, "split_qkv_rmsnorm_rope")
        bad = sorted(m for m in sys.modules if m.split(".")[0] in ("vllm", "torch_npu"))
        assert not bad, bad
        assert not npu_registration.loaded
        print("ok")
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


def test_out_helpers_fill_one_preallocated_output_per_schema_return() -> None:
    for op in OP_NAMES:
        names = spec(op).out_names
        if not names:  # the LoRA ops clone y instead; reshape_and_cache returns nothing
            assert op in ("bgmv_expand", "sgmv_expand", "reshape_and_cache")
            continue
        returns = getattr(torch.ops.ascend, op).default._schema.returns
        assert len(names) == len(returns), op


def test_references_take_keywords_and_carry_their_op_name() -> None:
    from ascend_kernels.ops import norm as ops_norm
    from ascend_kernels.ops import quant as ops_quant

    x, r, w, b = torch.randn(3, 8), torch.randn(3, 8), torch.randn(8), torch.randn(8)
    by_keyword = ops_norm.add_rms_norm(x=x, residual=r, weight=w, eps=1e-5, bias=b)
    by_position = torch.ops.ascend.add_rms_norm(x, r, w, 1e-5, b)
    assert all(map(torch.equal, by_keyword, by_position))
    mixed = ops_quant.add_rms_norm_dynamic_quant(x, r, w, eps=1e-5)
    assert all(map(torch.equal, mixed, torch.ops.ascend.add_rms_norm_dynamic_quant(x, r, w, 1e-5)))
    checked = registration.reference_impl("add_rms_norm")(x=x, residual=r, weight=w, eps=1e-5)
    assert all(map(torch.equal, checked, torch.ops.ascend.add_rms_norm(x, r, w, 1e-5)))
    for op in ("rms_norm", "add_rms_norm", "muls_add", "rotary_embedding"):
        for fn in (registration.reference_impl(op), registration.fake_impl(op)):
            assert fn.__name__ == op and fn.__qualname__ == op
    with pytest.raises(LookupError, match=r"^no op ascend::nope; the ops are rms_norm, "):
        registration.fake_impl("nope")


def _results_equal(a: object, b: object) -> bool:
    a_t = a if isinstance(a, tuple) else () if a is None else (a,)
    b_t = b if isinstance(b, tuple) else () if b is None else (b,)
    return len(a_t) == len(b_t) and all(
        x.shape == y.shape and x.dtype == y.dtype and torch.equal(x.float(), y.float())
        for x, y in zip(a_t, b_t, strict=True)  # type: ignore[union-attr]
    )


def test_register_all_defines_every_op_in_a_fresh_namespace(
    valid_args: object
) -> None:
    # The import already ran register_all for "ascend"; run it again, now, for a namespace
    # nothing has defined yet, and check what it defined against the registered ops.
    namespace = f"ascend_regtest_{next(_FRESH)}"
    registration.register_all(namespace)
    fresh = getattr(torch.ops, namespace)
    for op in OP_NAMES:
        assert str(getattr(fresh, op).default._schema) == f"{namespace}::{op}{SCHEMAS[op]}"
        name = f"{namespace}::{op}"
        assert torch._C._dispatch_has_kernel_for_dispatch_key(name, "CompositeExplicitAutograd")
        assert torch._C._dispatch_has_kernel_for_dispatch_key(name, "Meta")
        args = list(valid_args(op).values())  # type: ignore[operator]
        again = list(valid_args(op).values())  # type: ignore[operator]
        assert _results_equal(getattr(fresh, op)(*args), getattr(torch.ops.ascend, op)(*again)), op
        # ops that write their arguments (reshape_and_cache) wrote the same values
        written = [(a, b) for a, b in zip(args, again, strict=True) if isinstance(a, torch.Tensor)]
        assert all(torch.equal(a, b) for a, b in written), op
        meta = [a.to("meta") if isinstance(a, torch.Tensor) else a for a in args]
        want = getattr(torch.ops.ascend, op)(*meta)
        got = getattr(fresh, op)(*meta)
        got_t, want_t = (got, want) if isinstance(got, tuple) else (
            ((), ()) if got is None else ((got,), (want,)))
        assert [(t.shape, t.dtype, t.device.type) for t in got_t] == [
            (t.shape, t.dtype, t.device.type) for t in want_t
        ]
    registration.register_all(namespace)  # the same schemas again: nothing to do, no error


def _like(names: tuple[str, ...], tensors: tuple[torch.Tensor, ...]) -> dict[str, torch.Tensor]:
    return {n: torch.empty_like(t) for n, t in zip(names, tensors, strict=True)}


def test_out_helpers_equal_the_op_with_arguments_by_position_or_keyword(
    valid_args: object,
) -> None:
    for op in OP_NAMES:
        op_spec = spec(op)
        if not op_spec.out_names:
            continue
        kwargs = valid_args(op)  # type: ignore[operator]
        want = getattr(torch.ops.ascend, op)(*kwargs.values())
        want_t = want if isinstance(want, tuple) else (want,)
        names = op_spec.out_names
        assert _results_equal(op_spec.out(*kwargs.values(), **_like(names, want_t)), want), op
        # every argument by keyword, then all but the first
        assert _results_equal(op_spec.out(**kwargs, **_like(names, want_t)), want), op
        first, *rest = kwargs
        got = op_spec.out(kwargs[first], **{k: kwargs[k] for k in rest}, **_like(names, want_t))
        assert _results_equal(got, want), op


_FRESH = iter(range(10**6))


def _permuted_case(op: str) -> tuple[object, ...] | None:
    # x is [40, 64] viewed through a transpose: dense, not contiguous.
    x, w = torch.randn(64, 40).t(), torch.randn(64)
    r = torch.randn(64, 40).t()
    scale, offset = torch.tensor([0.1]), torch.tensor([0.0])
    cases: dict[str, tuple[object, ...]] = {
        "rms_norm": (x, w, 1e-6), "add_rms_norm": (x, r, w, 1e-6),
        "quantize": (x, scale, offset), "dynamic_quant": (x,),
        "add_rms_norm_quant": (x, r, w, scale, offset, 1e-6),
        "add_rms_norm_dynamic_quant": (x, r, w, 1e-6), "dynamic_mx_quant": (x,),
        "add_rms_norm_dynamic_mx_quant": (x, r, w, 1e-6), "rms_norm_dynamic_mx_quant": (x, w, 1e-6),
        "muls_add": (x, r, 0.5), "silu_and_mul": (x,),
    }
    return cases.get(op)


@pytest.mark.parametrize("op", OP_NAMES)
def test_fake_outputs_have_the_references_shapes_dtypes_and_strides(
    op: str, valid_args: object
) -> None:
    from torch._subclasses.fake_tensor import FakeTensorMode

    def meta(result: object) -> list[tuple[object, ...]]:
        items = result if isinstance(result, tuple) else () if result is None else (result,)
        return [(t.dtype, tuple(t.shape), t.stride()) for t in items]  # type: ignore[attr-defined]

    calls = [tuple(valid_args(op).values())]  # type: ignore[operator]
    permuted = _permuted_case(op)
    if permuted is not None:
        calls.append(permuted)
    for args in calls:
        real = getattr(torch.ops.ascend, op)(*args)
        with FakeTensorMode() as mode:
            fakes = [mode.from_tensor(a) if isinstance(a, torch.Tensor) else a for a in args]
            fake = getattr(torch.ops.ascend, op)(*fakes)
        assert meta(fake) == meta(real), op


A = torch.ops.ascend


def sample_args(op: str, dtype: torch.dtype) -> tuple[Any, ...]:
    """Small inputs for ``op`` in activation dtype ``dtype`` (odd sizes on purpose)."""
    g = torch.Generator().manual_seed(0)

    def rand(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=g).to(dtype)

    x, res, w, b = rand(5, 70), rand(5, 70), rand(70), rand(70)
    scale, offset = torch.tensor([0.05]), torch.tensor([1.0])
    pos = torch.tensor([0, 3, 1, 7, 2])
    cache = rand(8, 32)
    table: dict[str, tuple[Any, ...]] = {
        "rms_norm": (x, w, 1e-6),
        "add_rms_norm": (x, res, w, 1e-6, b),
        "quantize": (x, scale, offset),
        "dynamic_quant": (x,),
        "add_rms_norm_quant": (x, res, w, scale, offset, 1e-6, b),
        "add_rms_norm_dynamic_quant": (x, res, w, 1e-6, None),
        "dynamic_mx_quant": (x,),
        "add_rms_norm_dynamic_mx_quant": (x, res, w, 1e-6),
        "rms_norm_dynamic_mx_quant": (x, w, 1e-6),
        "rotary_embedding": (pos, rand(5, 4 * 48), rand(5, 2, 48), cache, 48, 32, True),
        "split_qkv_rmsnorm_rope": (
            rand(5, 8 * 48),
            rand(48),
            rand(48),
            pos,
            cache,
            4 * 48,
            2 * 48,
            48,
            32,
            False,
            1e-6,
            rand(48),
            rand(48),
        ),
        "muls_add": (x, res, 0.25),
        "bgmv_expand": (
            rand(5, 8),
            rand(3, 16, 8),
            torch.tensor([0, 1, -1, 2, 0]),
            rand(5, 40),
            8,
            16,
        ),
        "sgmv_expand": (
            rand(5, 8),
            rand(3, 16, 8),
            torch.tensor([2, 0]),
            torch.tensor([2, 3]),
            rand(5, 40),
            24,
            16,
        ),
        "silu_and_mul": (rand(5, 2 * 35),),
        "mrotary_embedding": (
            torch.tensor([[0, 3, 1, 7, 2], [1, 1, 0, 2, 5], [4, 0, 6, 1, 3]]),
            rand(5, 4 * 48),
            rand(5, 2, 48),
            cache,
            48,
            32,
            [4, 6, 6],
            True,
            False,
        ),
        # A prefill of 3 (no cache), a decode at KV length 6, a chunk of 2 after 5 cached
        # tokens, one padding row.
        "paged_attention": (
            rand(7, 4, 16), rand(8, 4, 2, 16), rand(8, 4, 2, 16),
            torch.tensor([[2, 0], [5, 1], [7, 3]], dtype=torch.int32), [3, 4, 6], [3, 6, 7],
            0.25,
        ),
        "reshape_and_cache": (
            rand(5, 2, 16), rand(5, 2, 16), rand(6, 4, 2, 16), rand(6, 4, 2, 16),
            torch.tensor([3, -1, 20, 7]),
        ),
    }
    return table[op]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("op", OP_NAMES)
def test_opcheck(op: str, dtype: torch.dtype) -> None:
    # The four default checks include test_aot_dispatch_dynamic (symbolic shapes).
    torch.library.opcheck(getattr(A, op).default, sample_args(op, dtype))


def test_opcheck_quantize_with_int8_offset() -> None:
    x = torch.randn(3, 33)
    torch.library.opcheck(
        A.quantize.default, (x, torch.tensor([0.1]), torch.tensor([3], dtype=torch.int8))
    )


def test_compile_with_dynamic_shapes_matches_eager() -> None:
    def block(x: torch.Tensor, res: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, ...]:
        q, scale, r = A.add_rms_norm_dynamic_quant(x, res, w, 1e-6)
        mq, ms = A.dynamic_mx_quant(r)
        return q, scale, r, mq.float(), ms.float(), A.muls_add(r, x, 0.5)

    compiled = torch.compile(block, backend="eager", dynamic=True, fullgraph=True)
    for rows, hidden in ((3, 40), (6, 72)):
        args = (torch.randn(rows, hidden), torch.randn(rows, hidden), torch.randn(hidden))
        for got, want in zip(compiled(*args), block(*args), strict=True):
            assert torch.equal(got, want)
