"""Batch-invariant kernels: row i is bitwise identical in batches of 1, 3, 17 and 256."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch
from ascend_kernels import batch_invariant
from ascend_kernels import batch_invariant as bi
from torch.utils._python_dispatch import TorchDispatchMode

SIZES = (1, 3, 17, 256)
A = torch.ops.ascend


@pytest.fixture(autouse=True)
def _mode_off() -> Iterator[None]:
    bi.disable_batch_invariant_mode()
    bi.reset_call_counts()
    yield
    bi.disable_batch_invariant_mode()
    bi.reset_call_counts()


def _inputs(dtype: torch.dtype) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return {
        "x": torch.randn(300, 160, generator=g).to(dtype),
        "w": torch.randn(96, 160, generator=g).to(dtype),
        "b": torch.randn(96, generator=g).to(dtype),
        "gamma": torch.randn(160, generator=g).to(dtype),
    }


KERNELS: dict[str, Callable[[torch.Tensor, dict[str, torch.Tensor]], torch.Tensor]] = {
    "reduce_sum": lambda x, v: bi.reduce_sum(x, -1),
    "reduce_sum_keepdim": lambda x, v: bi.reduce_sum(x, dim=[1], keepdim=True),
    "mm": lambda x, v: bi.mm(x, v["w"].t()),
    "matmul": lambda x, v: bi.matmul(x, v["w"].t()),
    "linear": lambda x, v: bi.linear(x, v["w"], v["b"]),
    "addmm": lambda x, v: bi.addmm(v["b"], x, v["w"].t(), beta=0.5, alpha=2.0),
    "bmm": lambda x, v: bi.bmm(x.view(-1, 1, 160), v["w"].t().expand(x.shape[0], 160, 96)),
    "softmax": lambda x, v: bi.softmax(x, -1),
    "log_softmax": lambda x, v: bi.log_softmax(x, -1),
    "add_rms_norm": lambda x, v: torch.cat(_in_mode(A.add_rms_norm, x, x * 0.5, v["gamma"], 1e-6),
                                           -1),
}


def _in_mode(op: Callable[..., Any], *args: Any) -> Any:
    """``op(*args)`` with batch-invariant mode on for CPU tensors."""
    bi.enable_batch_invariant_mode("CPU")
    try:
        return op(*args)
    finally:
        bi.disable_batch_invariant_mode()


def _assert_rows_invariant(fn: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor) -> None:
    full = fn(x[:256])
    for n in SIZES:
        for start in (0, 7, 44):  # row i at different positions within its batch
            if start + n > 256:
                continue
            part = fn(x[start : start + n])
            assert torch.equal(part, full[start : start + n]), (n, start)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("name", list(KERNELS))
def test_row_results_do_not_depend_on_batch_size(name: str, dtype: torch.dtype) -> None:
    v = _inputs(dtype)
    _assert_rows_invariant(lambda x: KERNELS[name](x, v), v["x"])


def test_the_test_detects_a_batch_dependent_kernel() -> None:
    v = _inputs(torch.float32)
    with pytest.raises(AssertionError):
        _assert_rows_invariant(lambda x: torch.mm(x, v["w"].t()), v["x"])


def test_kernels_agree_with_torch_numerically() -> None:
    v = _inputs(torch.float32)
    x, w, b = v["x"], v["w"], v["b"]
    torch.testing.assert_close(bi.linear(x, w, b), torch.nn.functional.linear(x, w, b))
    torch.testing.assert_close(bi.matmul(x[0], w.t()), x[0] @ w.t())
    a3, b3 = torch.randn(2, 3, 5, 8), torch.randn(3, 8, 4)
    torch.testing.assert_close(bi.matmul(a3, b3), torch.matmul(a3, b3))
    torch.testing.assert_close(bi.reduce_sum(x), x.sum(), rtol=1e-4, atol=1e-3)
    torch.testing.assert_close(bi.reduce_sum(x, dim=0), x.sum(0), rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(bi.softmax(x, 0), torch.softmax(x, 0))
    torch.testing.assert_close(bi.log_softmax(x, -1), torch.log_softmax(x, -1))
    assert bi.reduce_sum(torch.tensor([1, 2, 3], dtype=torch.int32)).dtype == torch.int64
    assert bi.reduce_sum(x.bfloat16(), -1).dtype == torch.bfloat16


def test_enable_routes_aten_ops_and_disable_restores_exactly() -> None:
    g = torch.Generator().manual_seed(1)
    a, w = torch.randn(33, 64, generator=g), torch.randn(64, 48, generator=g)
    before = torch.mm(a, w)
    assert not bi.is_batch_invariant_mode_enabled()
    bi.enable_batch_invariant_mode()
    bi.enable_batch_invariant_mode()  # idempotent
    assert bi.is_batch_invariant_mode_enabled()
    torch.mm(a, w)
    torch.matmul(a, w)
    torch.nn.functional.linear(a, w.t())
    torch.addmm(w[0], a, w)
    torch.bmm(a[None], w[None])
    torch.softmax(a, -1)
    torch.log_softmax(a, -1)
    a.sum()
    a.sum(-1)
    counts = bi.call_counts()
    for name in ("mm", "matmul", "linear", "addmm", "bmm", "softmax", "log_softmax"):
        assert counts.get(name) == 1, name
    assert counts["reduce_sum"] == 2
    inside = torch.mm(a[:1], w)
    assert torch.equal(inside, torch.mm(a, w)[:1])  # invariant through aten too
    bi.disable_batch_invariant_mode()
    assert not bi.is_batch_invariant_mode_enabled()
    bi.reset_call_counts()
    after = torch.mm(a, w)
    assert torch.equal(after, before)
    assert bi.call_counts() == {}


def test_plain_linear_and_matmul_count_calls_without_the_mode() -> None:
    x, w = torch.randn(4, 8), torch.randn(3, 8)
    bi.linear(x, w)
    bi.matmul(x, w.t())
    assert bi.call_counts() == {"linear": 1, "matmul": 1}
    bi.reset_call_counts()
    assert bi.call_counts() == {}


def test_aten_sum_and_addmm_arguments_reach_the_kernels() -> None:
    # Expected values: NumPy float64 on the same data.
    g = torch.Generator().manual_seed(5)
    x = torch.randn(6, 5, 4, generator=g)
    bias, a, b = torch.randn(3, generator=g), torch.randn(2, 7, generator=g), torch.randn(
        7, 3, generator=g)
    x64, bias64, a64, b64 = (t.double().numpy() for t in (x, bias, a, b))
    bi.enable_batch_invariant_mode()
    try:
        whole, whole64 = torch.sum(x), torch.sum(x, dtype=torch.float64)
        dims, keep = torch.sum(x, dim=(0, 2)), torch.sum(x, dim=1, keepdim=True)
        dims64 = torch.sum(x, dim=[2], dtype=torch.float64)
        plain, scaled = torch.addmm(bias, a, b), torch.addmm(bias, a, b, beta=0.5, alpha=-2.0)
        counts = bi.call_counts()
    finally:
        bi.disable_batch_invariant_mode()
    assert counts["reduce_sum"] == 5 and counts["addmm"] == 2
    assert (whole.shape, whole.dtype, whole64.dtype) == ((), torch.float32, torch.float64)
    assert whole64.item() == pytest.approx(x64.sum(), rel=1e-12)
    assert whole.item() == pytest.approx(x64.sum(), rel=1e-5, abs=1e-5)
    torch.testing.assert_close(dims, torch.from_numpy(x64.sum(axis=(0, 2))).float())
    assert keep.shape == (6, 1, 4)
    torch.testing.assert_close(keep, torch.from_numpy(x64.sum(axis=1, keepdims=True)).float())
    assert dims64.dtype == torch.float64
    torch.testing.assert_close(dims64, torch.from_numpy(x64.sum(axis=2)))
    torch.testing.assert_close(plain, torch.from_numpy(bias64 + a64 @ b64).float())
    torch.testing.assert_close(scaled, torch.from_numpy(0.5 * bias64 - 2.0 * (a64 @ b64)).float())


def test_default_dispatch_key_is_the_npu_one_when_the_npu_kernels_are_loaded(
    fake_npu_on_cpu: object,
) -> None:
    a, w = torch.randn(3, 4), torch.randn(4, 2)
    bi.enable_batch_invariant_mode()  # overrides for PrivateUse1 (the NPU): CPU stays aten's
    try:
        torch.mm(a, w)
        assert bi.call_counts() == {}
    finally:
        bi.disable_batch_invariant_mode()
    bi.enable_batch_invariant_mode("CPU")
    try:
        torch.mm(a, w)
        assert bi.call_counts() == {"mm": 1}
    finally:
        bi.disable_batch_invariant_mode()


def _np(t: torch.Tensor):  # type: ignore[no-untyped-def]
    return t.double().numpy()


@pytest.mark.parametrize("length", [0, 1, 2, 3, 5, 8, 9])
def test_reduce_sum_at_every_length_and_rank_against_float64(length: int) -> None:
    g = torch.Generator().manual_seed(length)
    x = torch.randn(3, 2, length, generator=g)
    for dims, keep in ((None, False), (-1, False), (0, True), ((0, 2), False), ([], False),
                       ((-3, -1), True)):
        want = _np(x).sum(axis=None if dims in (None, []) else dims, keepdims=keep)
        got = bi.reduce_sum(x, dims, keep)
        assert got.dtype == torch.float32 and tuple(got.shape) == want.shape, (dims, keep)
        torch.testing.assert_close(got.double(), torch.as_tensor(want), atol=1e-5, rtol=1e-5)
    ints = torch.arange(3 * length).reshape(3, length).to(torch.int32)
    got = bi.reduce_sum(ints, 1)
    assert got.dtype == torch.int64 and got.tolist() == ints.sum(1).tolist()
    half = x.to(torch.bfloat16)
    got = bi.reduce_sum(half, -1)  # accumulated in float32, one cast at the end
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(got.float(), torch.from_numpy(_np(half).sum(-1)).float(),
                               atol=2e-2, rtol=1e-2)
    scalar = torch.tensor(2.5)
    assert bi.reduce_sum(scalar).item() == 2.5 and bi.reduce_sum(scalar).dim() == 0
    assert bi.reduce_sum(torch.tensor(3, dtype=torch.int32)).dtype == torch.int64


@pytest.mark.parametrize("dim", [0, 1, -1])
@pytest.mark.parametrize("half_to_float", [False, True])
def test_softmax_and_log_softmax_against_torch_with_large_values(
    dim: int, half_to_float: bool
) -> None:
    g = torch.Generator().manual_seed(7)
    x = torch.randn(4, 6, 5, generator=g) * 30 + 60  # exp(2 * 90) overflows float32
    src = x.to(torch.bfloat16) if half_to_float else x
    for ours, theirs in ((bi.softmax, torch.softmax), (bi.log_softmax, torch.log_softmax)):
        got = ours(src, dim, half_to_float)
        want = theirs(src.float(), dim)
        assert got.dtype == (torch.float32 if half_to_float else src.dtype)
        assert got.shape == src.shape and got.is_contiguous()
        torch.testing.assert_close(got.float(), want, atol=1e-5, rtol=1e-5)


def test_matmul_linear_and_addmm_every_operand_rank_against_torch() -> None:
    g = torch.Generator().manual_seed(8)

    def r(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=g)

    cases = [(r(5), r(5)), (r(5), r(5, 3)), (r(4, 5), r(5)), (r(4, 5), r(5, 3)),
             (r(2, 4, 5), r(5)), (r(2, 4, 5), r(5, 3)), (r(5), r(2, 5, 3)),
             (r(2, 1, 4, 5), r(3, 5, 6)), (r(3, 4, 5), r(3, 5, 2))]
    for a, b in cases:
        want = torch.as_tensor(_np(a) @ _np(b)).float()
        got = bi.matmul(a, b)
        assert got.shape == want.shape, (a.shape, b.shape)
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    x, w, bias = r(2, 3, 5), r(4, 5), r(4)
    torch.testing.assert_close(bi.linear(x, w, bias),
                               torch.from_numpy(_np(x) @ _np(w).T + _np(bias)).float())
    torch.testing.assert_close(bi.linear(x, w), torch.from_numpy(_np(x) @ _np(w).T).float())
    a, b, c = r(3, 5), r(5, 2), r(2)
    for beta, alpha in ((1, 1), (0.5, 1), (1, -2.0), (2, 3)):
        want = beta * _np(c) + alpha * (_np(a) @ _np(b))
        torch.testing.assert_close(bi.addmm(c, a, b, beta=beta, alpha=alpha),
                                   torch.from_numpy(want).float())
    plain = torch.from_numpy(_np(c) + _np(a) @ _np(b)).float()
    torch.testing.assert_close(bi.addmm(c, a, b), plain)


@pytest.mark.parametrize("bias", [False, True])
def test_the_mode_runs_add_rms_norm_as_the_sum_then_rms_norm(bias: bool) -> None:
    g = torch.Generator().manual_seed(9)
    x, res, w = torch.randn(3, 8, generator=g), torch.randn(3, 8, generator=g), torch.rand(8) + 1
    b = torch.randn(8, generator=g) if bias else None
    out, summed = _in_mode(A.add_rms_norm, x, res, w, 1e-6, b)
    s = _np(x) + _np(res)
    want = s / (((s**2).mean(-1, keepdims=True) + 1e-6) ** 0.5) * _np(w)
    if b is not None:
        want = want + _np(b)
    assert torch.equal(summed, x + res)
    torch.testing.assert_close(out, torch.from_numpy(want).float())
    assert bi.call_counts()["add_rms_norm"] == 1
    A.add_rms_norm(x, res, w, 1e-6, b)  # mode off: the op's own kernel, not counted
    assert bi.call_counts()["add_rms_norm"] == 1


def test_in_bfloat16_the_mode_normalises_the_stored_sum_not_the_float32_one() -> None:
    # The fused op normalises the float32 sum; the batch-invariant variant the sum rounded to
    # bfloat16, i.e. exactly rms_norm(x + residual). Inputs chosen so the two differ.
    g = torch.Generator().manual_seed(3)
    x = torch.randn(64, 32, generator=g).bfloat16()
    res = (torch.randn(64, 32, generator=g) * 1e-3).bfloat16()
    w = torch.ones(32, dtype=torch.bfloat16)
    out, summed = _in_mode(A.add_rms_norm, x, res, w, 1e-6)
    assert torch.equal(out, A.rms_norm(x + res, w, 1e-6))
    assert torch.equal(summed, x + res)
    assert not torch.equal(out, A.add_rms_norm(x, res, w, 1e-6)[0])


def test_the_mode_checks_add_rms_norm_arguments_like_the_op() -> None:
    x = torch.ones(2, 4)
    with pytest.raises(ValueError, match="residual must match x"):
        _in_mode(A.add_rms_norm, x, torch.ones(2, 5), torch.ones(4), 1e-6)
    assert "add_rms_norm" not in bi.call_counts()


def test_reduce_sum_of_a_vector_by_negative_and_positive_dim() -> None:
    x = torch.tensor([1.5, -2.0, 4.25])
    for dim in (-1, 0, [-1]):
        got = bi.reduce_sum(x, dim)
        assert got.shape == () and got.item() == 3.75, dim
    kept = bi.reduce_sum(x, -1, True)
    assert kept.shape == (1,) and kept.tolist() == [3.75]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_reduced_precision_sums_accumulate_in_float32(dtype: torch.dtype) -> None:
    # Pairwise tree: (big + 1) + (1 + 0). big + 1 is not representable in the input dtype
    # (it rounds to big, then big + 1 again to big); in float32 the sum is big + 2, which the
    # input dtype holds exactly. Expected value written out.
    big = 256.0 if dtype == torch.bfloat16 else 2048.0  # 8- and 11-bit significands
    x = torch.tensor([[big, 1.0, 1.0, 0.0]], dtype=dtype)
    got = bi.reduce_sum(x, -1)
    assert got.dtype == dtype and got.tolist() == [big + 2]


def test_addmm_scales_by_alpha_two_and_ignores_bias_at_beta_zero() -> None:
    g = torch.Generator().manual_seed(10)
    a, b, c = torch.randn(3, 5, generator=g), torch.randn(5, 2, generator=g), torch.randn(2)
    prod = _np(a) @ _np(b)
    for alpha in (0.5, 1, 2, 2.5):
        torch.testing.assert_close(bi.addmm(c, a, b, alpha=alpha),
                                   torch.from_numpy(_np(c) + alpha * prod).float())
    nan_bias = torch.full((2,), float("nan"))  # aten: beta=0 ignores the bias entirely
    torch.testing.assert_close(bi.addmm(nan_bias, a, b, beta=0),
                               torch.from_numpy(prod).float())


@pytest.mark.parametrize("fn", [bi.softmax, bi.log_softmax])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32], ids=str)
def test_softmax_keeps_the_input_dtype_by_default(
    fn: Callable[..., torch.Tensor], dtype: torch.dtype
) -> None:
    x = torch.randn(3, 7, generator=torch.Generator().manual_seed(11)).to(dtype)
    got = fn(x, -1)
    want = (torch.softmax if fn is bi.softmax else torch.log_softmax)(x.float(), -1)
    assert got.dtype == dtype
    torch.testing.assert_close(got, want.to(dtype))
    assert fn(x, -1, True).dtype == torch.float32
    assert fn(x, -1, False).dtype == dtype


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float64], ids=str)
def test_bmm_and_batched_matmul_keep_the_operand_dtype(dtype: torch.dtype) -> None:
    g = torch.Generator().manual_seed(12)
    a, b = torch.randn(2, 3, 4, generator=g).to(dtype), torch.randn(2, 4, 5, generator=g).to(dtype)
    want = torch.from_numpy(_np(a) @ _np(b))
    for got in (bi.bmm(a, b), bi.matmul(a, b)):
        assert got.dtype == dtype and got.shape == (2, 3, 5)
        tol = 5e-2 if dtype == torch.bfloat16 else 1e-12
        torch.testing.assert_close(got.double(), want, atol=tol, rtol=tol)


def test_bmm_and_batched_matmul_allocate_on_the_operands_device() -> None:
    # The meta device stands in for the NPU: a non-default device the result must stay on.
    a, b = torch.empty(2, 3, 4, device="meta"), torch.empty(2, 4, 5, device="meta")
    for got in (bi.bmm(a, b), bi.matmul(a, b), bi.matmul(a[None], b[:, None].transpose(0, 1))):
        assert got.device.type == "meta"
    assert bi.matmul(a[None], b[:, None].transpose(0, 1)).shape == (1, 2, 3, 5)


def test_matmul_broadcasts_a_batch_dim_of_one_inside_the_weight() -> None:
    g = torch.Generator().manual_seed(13)
    for a, b in ((torch.randn(2, 3, 4, 5, generator=g), torch.randn(2, 1, 5, 6, generator=g)),
                 (torch.randn(3, 4, 5, generator=g), torch.randn(2, 3, 5, 6, generator=g))):
        want = torch.as_tensor(_np(a) @ _np(b)).float()
        got = bi.matmul(a, b)
        assert got.shape == want.shape
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(("a_shape", "b_shape"), [
    ((2, 3, 4), (2, 4)),        # b not 3-D
    ((2, 4), (2, 4, 5)),        # a not 3-D
    ((2, 2), (2, 2)),           # neither 3-D, batch sizes equal
    ((2, 3, 4), (3, 4, 5)),     # batch sizes differ
])
def test_bmm_rejects_operands_that_are_not_two_equal_batches(
    a_shape: tuple[int, ...], b_shape: tuple[int, ...]
) -> None:
    with pytest.raises(ValueError, match=r"bmm needs \[B, M, K\] @ \[B, K, N\], got "
                       + re.escape(f"{list(a_shape)} @ {list(b_shape)}")):
        bi.bmm(torch.zeros(a_shape), torch.zeros(b_shape))


class _CountMm(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.shapes: list[tuple[int, ...]] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if func.overloadpacket is torch.ops.aten.mm:
            self.shapes.append(tuple(args[0].shape))
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize(
    ("a_shape", "b_shape"),
    [((2, 3), (4, 5)), ((2, 3, 4), (3, 5)), ((2, 3), (3,))],
)
def test_mismatched_operands_name_both_shapes(
    a_shape: tuple[int, ...], b_shape: tuple[int, ...]
) -> None:
    a, b = torch.zeros(a_shape), torch.zeros(b_shape)
    message = f"mm needs [M, K] @ [K, N], got {list(a_shape)} @ {list(b_shape)}"
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        batch_invariant.mm(a, b)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_reduced_precision_operands_give_that_dtype(dtype: torch.dtype) -> None:
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(5, 7, generator=g), torch.randn(7, 3, generator=g)
    out = batch_invariant.mm(a.to(dtype), b.to(dtype))
    assert out.dtype == dtype and out.shape == (5, 3)
    expected = a.to(dtype).double() @ b.to(dtype).double()
    torch.testing.assert_close(out.double(), expected, rtol=2e-2, atol=2e-2)


def test_mixed_dtypes_compute_in_the_promoted_dtype() -> None:
    g = torch.Generator().manual_seed(1)
    a, b = torch.randn(4, 6, generator=g), torch.randn(6, 2, generator=g).bfloat16()
    out = batch_invariant.mm(a, b)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out.double(), a.double() @ b.double(), rtol=1e-5, atol=1e-5)


def test_result_stays_on_the_operands_device() -> None:
    tile = batch_invariant.TILE_M
    a = torch.empty(2 * tile + 3, 4, device="meta")
    b = torch.empty(4, 3, device="meta")
    out = batch_invariant.mm(a, b)
    assert out.device.type == "meta" and out.shape == (2 * tile + 3, 3)


def test_one_full_tile_mm_per_tile_of_rows() -> None:
    tile = batch_invariant.TILE_M
    g = torch.Generator().manual_seed(2)
    a, b = torch.randn(2 * tile + 1, 5, generator=g), torch.randn(5, 3, generator=g)
    with _CountMm() as counter:
        out = batch_invariant.mm(a, b)
    assert counter.shapes == [(tile, 5)] * 3
    torch.testing.assert_close(out.double(), a.double() @ b.double(), rtol=1e-5, atol=1e-5)
