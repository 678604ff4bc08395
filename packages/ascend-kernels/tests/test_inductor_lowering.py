"""Inductor inlines the whole-tensor references (the decompositions) once registered.

Expected values come from the eager reference ops (the dispatcher running the same functions
op by op, with torch's eager kernels and their rounding) and from torch's own eager ops.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from types import SimpleNamespace
from typing import Any

import pytest
import torch
import torch._inductor.lowering as inductor_lowerings
from ascend_kernels import inductor_lowering as IL
from ascend_kernels.ops import DECOMPOSITIONS
from torch._inductor import config as inductor_config
from torch._inductor.utils import run_and_get_code
from torch._subclasses.fake_tensor import FakeTensorMode

# inductor and fake tensors are imported with the module (not inside the tests) so a process
# that collects the tests once and forks per run (the mutation runner) imports them once.

A = torch.ops.ascend
D = SimpleNamespace(DECOMPOSITIONS=DECOMPOSITIONS, **DECOMPOSITIONS)
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
@pytest.mark.parametrize("is_neox", [True, False])
@pytest.mark.parametrize("rotary_dim", [64, 48])
def test_rope_of_strided_views_equals_rope_of_contiguous_copies(dtype, is_neox, rotary_dim
                                                                ) -> None:
    qkv, _, _, pos, cache, q_size, kv_size, hs, rd = _qkv_args(dtype, rotary_dim=rotary_dim)
    # rotary_embedding on non-contiguous 2-D slices and on 3-D head views.
    q, k = qkv[:, :q_size], qkv[:, q_size:q_size + kv_size]
    want = D.rotary_embedding(pos, q.contiguous(), k.contiguous(), cache, hs, rd, is_neox)
    for qq, kk in ((q, k), (q.reshape(-1, 4, hs), k.reshape(-1, 2, hs))):
        got = A.rotary_embedding(pos, qq, kk, cache, hs, rd, is_neox)
        assert got[0].shape == qq.shape and got[1].shape == kk.shape
        assert got[0].is_contiguous() and got[1].is_contiguous()
        assert torch.equal(got[0].reshape(want[0].shape), want[0])
        assert torch.equal(got[1].reshape(want[1].shape), want[1])


def test_every_decomposition_names_a_registered_op() -> None:
    for name in D.DECOMPOSITIONS:
        assert hasattr(A, name), name


@pytest.fixture
def lowered() -> Iterator[list[str]]:
    """Lowerings registered for one test, with the settings the host-CPU platform compiles
    with; inductor's table restored."""
    IL.reset_inductor_lowerings()
    names = IL.register_inductor_lowerings()
    torch._dynamo.reset()
    with inductor_config.patch(**IL.inductor_settings(), fx_graph_cache=False):
        yield names
    IL.reset_inductor_lowerings()
    torch._dynamo.reset()


def _compiled(fn: Callable[..., Any], *args: Any) -> tuple[Any, str]:
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
        if dtype == torch.float32:
            assert torch.equal(got_u, got_f)  # the fused op is its composition
        else:
            # split_qkv_rmsnorm_rope stores its normed heads in bf16 (its reference); the
            # unfused rope, fused into rms_norm's kernel, reads rms_norm's float32 value (an
            # op's result is an ordinary cast): within one bf16 rounding of each other.
            torch.testing.assert_close(got_f, got_u, **tolerance)
        torch.testing.assert_close(got_u, ref, **tolerance)
    # The fused layer stores no normed q/k heads between the norm and the rope, nor does the
    # unfused one (the heads are recomputed in the rope's loop); the fused op's one more
    # buffer is its fresh copy of v (in a model the qknorm_rope pass leaves v's consumers on
    # qkv's view).
    extra = 1
    assert code_f.count("empty_strided") <= code_u.count("empty_strided") + extra
    if dtype == torch.bfloat16:  # float32 scratch: only the norm statistics
        assert _float32_buffers(code_f) == _float32_buffers(code_u) == 3
    # Another token count reuses the dynamic-shape kernels and stays exact.
    args = _layer_args(dtype, tokens=2)
    again = torch.compile(_layer_fused, backend="inductor", dynamic=True)(*args)
    for got, ref in zip(again, _layer_unfused(*args), strict=True):
        torch.testing.assert_close(got, ref, **tolerance)


def _float32_buffers(code: str) -> int:
    return sum("empty_strided" in line and "torch.float32" in line for line in code.splitlines())


@pytest.mark.slow  # an inductor compile
def test_the_settings_keep_the_rope_heads_out_of_float32_scratch_buffers(lowered) -> None:
    args = _layer_args(torch.bfloat16, tokens=3)
    _, code = _compiled(_layer_fused, *args)
    # Only the per-row norm statistics are float32 buffers (q heads, k heads, add_rms_norm's
    # rows): the rope's inputs are recomputed in its loop, not stored.
    assert _float32_buffers(code) == 3


def test_the_settings_leave_inductors_precision_casts_off() -> None:
    # Rounding every low-precision op of a graph is what the ops must not impose on a model.
    assert "emulate_precision_casts" not in IL.inductor_settings()
    assert IL.inductor_settings()["realize_cpu_opcount_threshold"] == 100


def _stored_bf16(t32: torch.Tensor) -> torch.Tensor:
    return t32.to(torch.bfloat16).to(torch.float32)


@pytest.mark.slow  # two inductor compiles
def test_op_results_read_in_the_same_kernel_stay_float32_as_the_models_own(lowered) -> None:
    # A model's own bf16 ops between two ascend ops, fused into the ascend ops' kernels.
    # Expected, written out with torch's float32 ops: add_rms_norm normalises its float32 sum
    # (float32 inside, as Ascend's fused kernel), and its results, read by ops inductor fuses
    # into the same kernel, are their float32 values, as inductor treats the casts of
    # vLLM's native norm ops (the model is not rounded more than stock vLLM's compiled graph);
    # only the graph's output is rounded, once. Eager (the reference kernels, which store
    # every op's result in bf16) differs.
    g = torch.Generator().manual_seed(5)
    x = _rand(g, 7, 96, dtype=torch.bfloat16, scale=3)
    r = _rand(g, 7, 96, dtype=torch.bfloat16) * 40
    w = _rand(g, 96, dtype=torch.bfloat16) + 1

    def fn(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        out, res = A.add_rms_norm(a, b, c, EPS)
        return A.rms_norm(out * 1.7 + res, c, EPS) * 0.9

    got, code = _compiled(fn, x, r, w)
    assert "torch.ops.ascend" not in code

    def rms32(t: torch.Tensor) -> torch.Tensor:
        return t * torch.rsqrt((t * t).mean(-1, keepdim=True) + EPS) * w.float()

    summed = x.float() + r.float()
    want = (rms32(rms32(summed) * 1.7 + summed) * 0.9).to(torch.bfloat16)
    torch.testing.assert_close(got, want, atol=0, rtol=2**-8)  # summation order: 1 ulp
    assert (got != want).float().mean() < 0.02
    # Boundary: the results rounded to bf16 where the ops store them (the old rule) is
    # farther from the float32 expression.
    stored = _stored_bf16(summed)
    rounded = (rms32(_stored_bf16(rms32(summed)) * 1.7 + stored) * 0.9).to(torch.bfloat16)
    exact = rms32(rms32(summed) * 1.7 + summed) * 0.9
    assert (got.float() - exact).abs().mean() < (rounded.float() - exact).abs().mean()
    eager = fn(x, r, w)
    assert not torch.equal(got, eager)


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


# ------------------------------------------------------------------ helpers, without compiling
def test_positional_fills_keywords_and_schema_defaults_in_schema_order() -> None:
    overload = A.add_rms_norm.default
    x, r, w = torch.ones(2, 4), torch.zeros(2, 4), torch.ones(4)
    assert IL._positional(overload, (x, r, w, EPS), {}) == [x, r, w, EPS, None]
    bias = torch.ones(4)
    got = IL._positional(overload, (x,), {"weight": w, "residual": r, "eps": EPS, "bias": bias})
    assert got == [x, r, w, EPS, bias]
    with pytest.raises(TypeError, match=r"ascend.add_rms_norm.*missing argument 'eps'"):
        IL._positional(overload, (x, r, w), {})


def test_only_none_bools_ints_and_floats_are_constants() -> None:
    for constant in (None, True, 0, -3, 1e-6):
        assert IL._is_constant(constant), constant
    for other in ("1", [1], (1,), torch.tensor(1.0)):
        assert not IL._is_constant(other), other


def test_meta_key_is_dtype_shape_and_stride() -> None:
    t = torch.empty(3, 4, dtype=torch.bfloat16)
    assert IL._meta_key(t) == ("torch.bfloat16", "(3, 4)", "(4, 1)")
    assert IL._meta_key(t.t()) == ("torch.bfloat16", "(4, 3)", "(1, 4)")


def test_trace_cache_keeps_graphs_per_fake_mode_and_drops_them_with_it() -> None:
    import gc

    cache, one, two = IL.TraceCache(), FakeTensorMode(), FakeTensorMode()
    assert cache.get(one, ("k",)) is None
    cache.put(one, ("k",), "graph-1")
    cache.put(one, ("j",), "graph-2")
    assert (cache.get(one, ("k",)), cache.get(one, ("j",))) == ("graph-1", "graph-2")
    assert cache.get(two, ("k",)) is None
    del one
    gc.collect()
    assert len(cache._graphs) == 0


def test_registry_registers_once_and_reset_restores_inductor_entries() -> None:
    lowerings = inductor_lowerings.lowerings
    registry = IL.LoweringRegistry()
    # Each registry owns its trace cache: compiles through two registries never share traces.
    assert isinstance(registry.traces, IL.TraceCache)
    assert registry.traces is not IL.LoweringRegistry().traces
    norm, muls = A.rms_norm.default, A.muls_add.default
    IL.reset_inductor_lowerings()
    sentinel = object()
    lowerings[muls] = sentinel  # an entry that was there before: put back by reset
    lowerings.pop(norm, None)
    try:
        ops = {"rms_norm": D.rms_norm, "muls_add": D.muls_add}
        assert registry.register(ops) == ["rms_norm", "muls_add"]
        assert registry.registered == sorted([str(norm), str(muls)])
        assert lowerings[norm].__name__ == "lower_ascend_rms_norm"
        assert lowerings[muls].__name__ == "lower_ascend_muls_add"
        assert registry.register(ops) == []  # idempotent
        # Ops already lowered are skipped, the others still registered.
        assert registry.register({**ops, "silu_and_mul": D.silu_and_mul}) == ["silu_and_mul"]
        registry.reset()
        assert norm not in lowerings and lowerings[muls] is sentinel
        assert registry.registered == []
        assert registry.register() == list(D.DECOMPOSITIONS)  # default: every decomposition
    finally:
        registry.reset()
        lowerings.pop(muls, None)


@pytest.fixture
def fresh_registry() -> Iterator[IL.LoweringRegistry]:
    """Like ``lowered``, through a registry made in the test (not the module's)."""
    IL.reset_inductor_lowerings()
    registry = IL.LoweringRegistry()
    registry.register()
    torch._dynamo.reset()
    try:
        with inductor_config.patch(**IL.inductor_settings(), fx_graph_cache=False):
            yield registry
    finally:
        registry.reset()
        torch._dynamo.reset()


def test_one_small_compile_inlines_the_decomposition_and_reuses_its_trace(
    fresh_registry: IL.LoweringRegistry,
) -> None:
    # Small enough to stay in mutation runs: exercises the lowering itself (the trace cache,
    # keyword arguments, constants) against torch's own eager ops.
    x = torch.randn(5, 32)
    w = torch.rand(32) + 0.5

    def fn(t: torch.Tensor) -> torch.Tensor:
        a = A.rms_norm(t, w, eps=EPS)
        return A.rms_norm(a * 2, w, EPS) + A.muls_add(a, t, 0.25)

    traces, stored = fresh_registry.traces, []
    put = traces.put
    traces.put = lambda mode, key, graph: stored.append(key) or put(mode, key, graph)  # type: ignore[method-assign]
    try:
        out, code = _compiled(fn, x)
    finally:
        del traces.put
    assert "torch.ops.ascend" not in code
    # One trace per op and argument metadata: both rms_norm calls share theirs.
    assert sorted(len(key[1]) for key in stored) == [2, 2]
    assert sorted(key[0] for key in stored) == [(EPS,), (0.25,)]

    def rms(t: torch.Tensor) -> torch.Tensor:
        return t * torch.rsqrt(t.pow(2).mean(-1, keepdim=True) + EPS) * w
    a = rms(x)
    torch.testing.assert_close(out, rms(a * 2) + a * 0.25 + x, atol=1e-5, rtol=1e-5)


def test_a_non_constant_argument_keeps_the_op_an_extern_call() -> None:
    calls = []

    def extern(*args, **kwargs):  # type: ignore[no-untyped-def]
        calls.append((args, kwargs))
        return "extern"

    original = inductor_lowerings.fallback_handler
    inductor_lowerings.fallback_handler = lambda *a, **k: extern  # type: ignore[assignment]
    try:
        lower = IL.make_lowering(A.muls_add.default, D.muls_add, IL.TraceCache())
    finally:
        inductor_lowerings.fallback_handler = original
    assert lower.__name__ == "lower_ascend_muls_add"
    assert lower("x-node", "y-node", "not a constant") == "extern"
    assert calls == [(("x-node", "y-node", "not a constant"), {})]


def test_a_small_dynamic_compile_inlines_rope_and_silu_and_mul(lowered) -> None:
    # Ops whose traces need inductor's decomposition table (index_select, silu). Expected:
    # neox rope and silu(a) * b written out with torch's eager ops.
    g = torch.Generator().manual_seed(4)
    pos = torch.tensor([3, 0, 7, 1])
    q, k, cache = torch.randn(4, 2 * 16, generator=g), torch.randn(4, 16, generator=g), \
        torch.randn(8, 16, generator=g)
    x = torch.randn(4, 10, generator=g)

    def fn(p: torch.Tensor, qq: torch.Tensor, kk: torch.Tensor, c: torch.Tensor,
           xx: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return (*A.rotary_embedding(p, qq, kk, c, 16, 16, True), A.silu_and_mul(xx))

    (q2, k2, s), code = _compiled(fn, pos, q, k, cache, x)
    assert "torch.ops.ascend" not in code

    def rope(t: torch.Tensor) -> torch.Tensor:
        heads = t.reshape(4, -1, 16)
        cos, sin = cache[pos, :8][:, None], cache[pos, 8:][:, None]
        a, b = heads[..., :8], heads[..., 8:]
        return torch.cat([a * cos - b * sin, b * cos + a * sin], -1).reshape(t.shape)

    torch.testing.assert_close(q2, rope(q), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(k2, rope(k), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(s, torch.nn.functional.silu(x[:, :5]) * x[:, 5:])


def _recording_extern(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, ...]]:
    calls: list[tuple[Any, ...]] = []

    def extern(*args: Any, **kwargs: Any) -> str:
        calls.append((args, kwargs))
        return "extern"

    monkeypatch.setattr(inductor_lowerings, "fallback_handler", lambda *a, **k: extern)
    return calls


def test_keyword_arguments_reach_the_extern_call_unchanged(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls = _recording_extern(monkeypatch)
    lower = IL.make_lowering(A.muls_add.default, D.muls_add, IL.TraceCache())
    assert lower("x-node", y="y-node", scale="not a constant") == "extern"
    assert calls == [(("x-node",), {"y": "y-node", "scale": "not a constant"})]


def test_a_decomposition_that_cannot_be_traced_leaves_an_extern_call(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    import logging

    from torch._inductor.virtualized import V

    calls = _recording_extern(monkeypatch)

    def untraceable(x: Any, y: Any, scale: float) -> Any:
        raise NotImplementedError("no trace for these arguments")

    cache = IL.TraceCache()
    lower = IL.make_lowering(A.muls_add.default, untraceable, cache)
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    mode = FakeTensorMode(shape_env=ShapeEnv())  # like inductor's
    with V.set_fake_mode(mode), caplog.at_level(logging.INFO, IL.logger.name):
        assert lower(1.0, y=2.0, scale=0.5) == "extern"
    assert calls == [((1.0,), {"y": 2.0, "scale": 0.5})]
    assert "stays an extern call: no trace for these arguments" in caplog.text
    assert cache.get(mode, ((1.0, 2.0, 0.5), ())) is None  # a failed trace is not kept


def test_the_extern_call_is_for_the_op_and_leaves_inductors_fallback_set_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    overload, handled = A.muls_add.default, []
    original = inductor_lowerings.fallback_handler

    def spy(kernel: Any, *args: Any, **kwargs: Any) -> Any:
        handled.append(kernel)
        return original(kernel, *args, **kwargs)

    monkeypatch.setattr(inductor_lowerings, "fallback_handler", spy)
    was_there = overload in inductor_lowerings.fallbacks
    inductor_lowerings.fallbacks.discard(overload)
    try:
        IL.make_lowering(overload, D.muls_add, IL.TraceCache())
        # In inductor's fallback set the op would be treated as a fallback everywhere.
        assert overload not in inductor_lowerings.fallbacks
    finally:
        if was_there:
            inductor_lowerings.fallbacks.add(overload)
    assert handled == [overload]


def test_reset_copes_with_an_entry_removed_from_inductors_table_meanwhile() -> None:
    lowerings, norm = inductor_lowerings.lowerings, A.rms_norm.default
    IL.reset_inductor_lowerings()
    lowerings.pop(norm, None)
    registry = IL.LoweringRegistry()
    assert registry.register({"rms_norm": D.rms_norm}) == ["rms_norm"]
    del lowerings[norm]  # e.g. dropped by other code that restores inductor's table
    registry.reset()
    assert norm not in lowerings and registry.registered == []
