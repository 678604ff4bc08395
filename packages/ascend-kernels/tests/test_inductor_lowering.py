"""The decompositions equal the reference ops; inductor inlines them once registered.

Expected values come from the reference implementations (row-chunked, preallocated buffers:
an independent code path) and, for the compiled runs, from torch's own eager ops.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch
from ascend_kernels import decompositions as D
from ascend_kernels import inductor_lowering as IL

A = torch.ops.ascend
EPS = 1e-6
DTYPES = [torch.float32, torch.bfloat16, torch.float16]


def _rand(g: torch.Generator, *shape: int, dtype: torch.dtype, scale: float = 1.0
          ) -> torch.Tensor:
    return (torch.randn(*shape, generator=g) * scale).to(dtype)


def _qkv_args(dtype: torch.dtype, tokens: int = 5, rotary_dim: int = 48, seed: int = 0
              ) -> tuple[Any, ...]:
    g = torch.Generator().manual_seed(seed)
    hs, qh, kh = 64, 4, 2
    qkv = _rand(g, tokens, (qh + 2 * kh) * hs, dtype=dtype, scale=3)
    qw = _rand(g, hs, dtype=dtype) + 1
    kw = _rand(g, hs, dtype=dtype) + 1
    positions = torch.randint(0, 32, (tokens,), generator=g)
    cache = _rand(g, 32, rotary_dim, dtype=dtype)
    return (qkv, qw, kw, positions, cache, qh * hs, kh * hs, hs, rotary_dim)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(0, 64), (1, 32), (7, 96), (5, 3, 40)])
def test_norm_and_muls_add_decompositions_equal_the_references(dtype, shape) -> None:
    g = torch.Generator().manual_seed(1)
    x, r = _rand(g, *shape, dtype=dtype, scale=3), _rand(g, *shape, dtype=dtype)
    w, b = _rand(g, shape[-1], dtype=dtype) + 1, _rand(g, shape[-1], dtype=dtype, scale=0.1)
    assert torch.equal(D.rms_norm(x, w, EPS), A.rms_norm(x, w, EPS))
    for bias in (None, b):
        got, want = D.add_rms_norm(x, r, w, EPS, bias), A.add_rms_norm(x, r, w, EPS, bias)
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    assert torch.equal(D.muls_add(x, r, 0.37), A.muls_add(x, r, 0.37))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("is_neox", [True, False])
@pytest.mark.parametrize("rotary_dim", [64, 48])
@pytest.mark.parametrize("bias", [False, True])
def test_rope_decompositions_equal_the_references(dtype, is_neox, rotary_dim, bias) -> None:
    qkv, qw, kw, pos, cache, q_size, kv_size, hs, rd = _qkv_args(dtype, rotary_dim=rotary_dim)
    g = torch.Generator().manual_seed(2)
    qb = _rand(g, hs, dtype=dtype, scale=0.1) if bias else None
    kb = _rand(g, hs, dtype=dtype, scale=0.1) if bias else None
    args = (qkv, qw, kw, pos, cache, q_size, kv_size, hs, rd, is_neox, EPS, qb, kb)
    for got, want in zip(D.split_qkv_rmsnorm_rope(*args), A.split_qkv_rmsnorm_rope(*args),
                         strict=True):
        assert got.is_contiguous() and torch.equal(got, want)
    # rotary_embedding on non-contiguous 2-D slices and on 3-D head views.
    q, k = qkv[:, :q_size], qkv[:, q_size:q_size + kv_size]
    for qq, kk in ((q, k), (q.reshape(-1, 4, hs), k.reshape(-1, 2, hs))):
        got = D.rotary_embedding(pos, qq, kk, cache, hs, rd, is_neox)
        want = A.rotary_embedding(pos, qq, kk, cache, hs, rd, is_neox)
        assert got[0].shape == qq.shape and got[1].shape == kk.shape
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])


def test_every_decomposition_names_a_registered_op() -> None:
    for name in D.DECOMPOSITIONS:
        assert hasattr(A, name), name


@pytest.fixture
def lowered() -> Iterator[list[str]]:
    """Lowerings registered for one test, with eager-like casts; inductor's table restored."""
    from torch._inductor import config

    IL.reset_inductor_lowerings()
    names = IL.register_inductor_lowerings()
    torch._dynamo.reset()
    with config.patch(emulate_precision_casts=True, fx_graph_cache=False):
        yield names
    IL.reset_inductor_lowerings()
    torch._dynamo.reset()


def _compiled(fn: Callable[..., Any], *args: Any) -> tuple[Any, str]:
    from torch._inductor.utils import run_and_get_code

    torch._dynamo.reset()
    out, code = run_and_get_code(torch.compile(fn, backend="inductor", dynamic=True), *args)
    return out, "\n".join(code)


def _layer_unfused(qkv, qw, kw, pos, cache, x, r, w):  # type: ignore[no-untyped-def]
    out, res = A.add_rms_norm(x, r, w, EPS)
    q, k, v = qkv.split([256, 128, 128], -1)
    qn = A.rms_norm(q.reshape(-1, 4, 64), qw, EPS).reshape(-1, 256)
    kn = A.rms_norm(k.reshape(-1, 2, 64), kw, EPS).reshape(-1, 128)
    q2, k2 = A.rotary_embedding(pos, qn, kn, cache, 64, 48, True)
    return q2, k2, v, out, res, A.muls_add(out, res, 0.5)


def _layer_fused(qkv, qw, kw, pos, cache, x, r, w):  # type: ignore[no-untyped-def]
    out, res = A.add_rms_norm(x, r, w, EPS)
    q2, k2, v = A.split_qkv_rmsnorm_rope(qkv, qw, kw, pos, cache, 256, 128, 64, 48, True, EPS)
    return q2, k2, v, out, res, A.muls_add(out, res, 0.5)


def _layer_args(dtype: torch.dtype, tokens: int) -> tuple[Any, ...]:
    qkv, qw, kw, pos, cache, *_ = _qkv_args(dtype, tokens=tokens)
    g = torch.Generator().manual_seed(3)
    x, r = _rand(g, tokens, 96, dtype=dtype, scale=3), _rand(g, tokens, 96, dtype=dtype)
    return (qkv, qw, kw, pos, cache, x, r, _rand(g, 96, dtype=dtype) + 1)


@pytest.mark.slow  # inductor compiles four graphs (~25 s)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_inductor_inlines_the_ops_and_fused_equals_unfused(lowered, dtype) -> None:
    assert lowered == list(D.DECOMPOSITIONS)
    args = _layer_args(dtype, tokens=7)
    unfused, code_u = _compiled(_layer_unfused, *args)
    fused, code_f = _compiled(_layer_fused, *args)
    assert "torch.ops.ascend" not in code_u and "torch.ops.ascend" not in code_f
    want = _layer_unfused(*args)  # eager: the reference kernels
    # float32: summation order only; bf16: at most one rounding step of the stored result.
    tolerance = ({"atol": 1e-5, "rtol": 1e-5} if dtype == torch.float32
                 else {"atol": 2**-6, "rtol": 2**-7})
    for got_u, got_f, ref in zip(unfused, fused, want, strict=True):
        assert torch.equal(got_u, got_f)  # a fusion pass never changes a result bit
        torch.testing.assert_close(got_u, ref, **tolerance)
    # Another token count reuses the dynamic-shape kernels and stays exact.
    args = _layer_args(dtype, tokens=2)
    again = torch.compile(_layer_fused, backend="inductor", dynamic=True)(*args)
    for got, ref in zip(again, _layer_unfused(*args), strict=True):
        torch.testing.assert_close(got, ref, **tolerance)


@pytest.mark.slow  # an inductor compile
def test_reset_makes_the_ops_extern_calls_again(lowered) -> None:
    assert IL.registered_inductor_lowerings() == sorted(
        str(getattr(A, name).default) for name in D.DECOMPOSITIONS)
    assert IL.register_inductor_lowerings() == []  # idempotent
    IL.reset_inductor_lowerings()
    assert IL.registered_inductor_lowerings() == []
    x = torch.randn(3, 32)
    out, code = _compiled(lambda t: A.rms_norm(t, torch.ones(32), EPS) * 2, x)
    assert "torch.ops.ascend.rms_norm" in code
    torch.testing.assert_close(out, A.rms_norm(x, torch.ones(32), EPS) * 2)


def test_fingerprint_is_stable_and_short() -> None:
    assert IL.lowering_fingerprint() == IL.lowering_fingerprint()
    assert len(IL.lowering_fingerprint()) == 16
