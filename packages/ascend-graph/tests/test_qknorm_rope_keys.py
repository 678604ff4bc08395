"""qknorm_rope: rope arguments by keyword, partial rotary, the pattern's keys and registration."""

from __future__ import annotations

import operator

import pytest
import torch
from ascend_graph.passes.base import PatternPass
from ascend_graph.passes.fusion_passes import QKNormRopePass
from ascend_graph.passes.qknorm_rope import QKNormRopePattern
from torch import fx
from torch.fx.experimental.proxy_tensor import make_fx

A = torch.ops.ascend
FUSED = "ascend.split_qkv_rmsnorm_rope.default"


def _site(hd: int = 32, heads: int = 4, kv_heads: int = 2, rotary_dim: int | None = None,
          bias: bool = False, dtype: torch.dtype = torch.float32):  # fmt: skip
    q_size, kv_size = heads * hd, kv_heads * hd
    rd = rotary_dim or hd

    def fn(qkv, qw, kw, positions, cache, *biases):  # type: ignore[no-untyped-def]
        q, k, v = qkv.split([q_size, kv_size, kv_size], -1)
        t = qkv.shape[0]
        qn = A.rms_norm(q.view(t, heads, hd), qw, 1e-6)
        kn = A.rms_norm(k.view(t, kv_heads, hd), kw, 1e-6)
        if biases:
            qn, kn = qn + biases[0], kn + biases[1]
        qr, kr = A.rotary_embedding(positions, qn.view(t, q_size), kn.view(t, kv_size), cache,
                                    hd, rd, True)  # fmt: skip
        return qr, kr, v

    gen = torch.Generator().manual_seed(7)
    inputs = [torch.randn(5, q_size + 2 * kv_size, generator=gen),
              torch.rand(hd, generator=gen) + 0.5, torch.rand(hd, generator=gen) + 0.5,
              torch.tensor([0, 3, 7, 1, 15]), torch.randn(16, rd, generator=gen)]  # fmt: skip
    if bias:
        inputs += [0.1 * torch.randn(hd, generator=gen), 0.1 * torch.randn(hd, generator=gen)]
    inputs = [t.to(dtype) if t.is_floating_point() else t for t in inputs]
    return fn, tuple(inputs)


def _trace(site) -> fx.GraphModule:  # type: ignore[no-untyped-def]
    fn, inputs = site
    return make_fx(fn, tracing_mode="fake")(*inputs)


def _rope(gm: fx.GraphModule) -> fx.Node:
    (node,) = gm.graph.find_nodes(op="call_function", target=A.rotary_embedding.default)
    return node


def _lines(gm: fx.GraphModule) -> list[str]:
    return [f"{n.op} {n.target} {n.args} {n.kwargs}" for n in gm.graph.nodes]


def _fused_args(gm: fx.GraphModule) -> tuple:
    (node,) = [n for n in gm.graph.nodes if str(n.target) == FUSED]
    return node.args[5:11]


def _run_pass(gm: fx.GraphModule, qk_pass) -> int:  # type: ignore[no-untyped-def]
    count = qk_pass(gm.graph)
    gm.graph.lint()
    gm.recompile()
    return count


def _assert_same(got, want) -> None:  # type: ignore[no-untyped-def]
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("rotary_dim", [32, 16])
def test_rope_arguments_by_keyword_fuse(rotary_dim: int) -> None:
    site = _site(rotary_dim=rotary_dim)
    gm = _trace(site)
    rope = _rope(gm)
    names = ("head_size", "rotary_dim", "is_neox")
    rope.kwargs = dict(zip(names, rope.args[4:], strict=True))
    rope.args = rope.args[:4]
    gm.recompile()
    assert _run_pass(gm, QKNormRopePass(eps_values=[1e-6], dtypes=["float32"])) == 1
    # q_size, kv_size, head_size, rotary_dim, is_neox, eps
    assert _fused_args(gm) == (128, 64, 32, rotary_dim, True, 1e-6)
    with torch.no_grad():
        _assert_same(gm(*site[1]), site[0](*site[1]))


def test_partial_rotary_keeps_the_head_size_from_the_head_size_argument() -> None:
    site = _site(rotary_dim=16)
    gm = _trace(site)
    assert _run_pass(gm, QKNormRopePass(eps_values=[1e-6], dtypes=["float32"])) == 1
    assert _fused_args(gm) == (128, 64, 32, 16, True, 1e-6)
    with torch.no_grad():
        _assert_same(gm(*site[1]), site[0](*site[1]))


@pytest.mark.parametrize("bias", [False, True])
def test_extract_reports_the_bias_and_default_soc_passes_the_capability_check(bias) -> None:
    gm = _trace(_site(bias=bias))
    match = QKNormRopePattern.extract(_rope(gm))
    assert match is not None
    assert match.attrs["bias"] is bias
    assert (match.attrs["q_size"], match.attrs["kv_size"], match.attrs["head_dim"]) == (128, 64, 32)
    pattern = QKNormRopePattern(eps=1e-6, dtype=torch.float32, bias=bias)
    assert pattern.context == {"soc": "cpu"}
    assert pattern.extra_check(match) is True


def test_a_pattern_registered_with_the_default_soc_fuses() -> None:
    class _OnePattern(PatternPass):
        name = "qknorm_rope"

    site = _site()
    gm = _trace(site)
    qk_pass = _OnePattern()
    qk_pass.register(QKNormRopePattern(eps=1e-6, dtype=torch.float32, bias=False, head_dim=32,
                                       q_size=128, kv_size=64))  # fmt: skip
    assert _run_pass(gm, qk_pass) == 1
    with torch.no_grad():
        _assert_same(gm(*site[1]), site[0](*site[1]))


def test_a_rope_result_used_whole_is_not_matched() -> None:
    gm = _trace(_site())
    rope = _rope(gm)
    output = next(iter(gm.graph.find_nodes(op="output")))
    output.args = ((*output.args[0], rope),)
    assert all(u.op == "output" or u.target is operator.getitem for u in rope.users)
    assert QKNormRopePattern.extract(rope) is None


@pytest.mark.parametrize(
    ("shapes", "fused"),
    [
        ([(32, 128, 64)], 1),
        ([(32, 64, 64)], 0),  # q_size differs
        ([(32, 128, 32)], 0),  # kv_size differs
        ([(32, 64, 64), (32, 128, 64)], 1),  # the second geometry matches
    ],
)
def test_registered_geometry_must_match_q_and_kv_sizes(shapes, fused: int) -> None:
    site = _site()
    gm = _trace(site)
    before = _lines(gm)
    assert _run_pass(gm, QKNormRopePass(shapes=shapes, dtypes=["float32"])) == fused
    if not fused:
        assert _lines(gm) == before
    with torch.no_grad():
        _assert_same(gm(*site[1]), site[0](*site[1]))


def test_an_unsupported_geometry_does_not_hide_the_next_one() -> None:
    # A2: bfloat16 with head size 64 or 128 only; 32 is skipped, 64 is registered
    site = _site(hd=64, heads=2, kv_heads=1, dtype=torch.bfloat16)
    gm = _trace(site)
    qk_pass = QKNormRopePass(shapes=[(32, 128, 64), (64, 128, 64)], dtypes=["bfloat16"],
                             soc="A2")  # fmt: skip
    assert len(qk_pass.patterns) == 4  # one geometry, two eps, with and without bias
    assert _run_pass(gm, qk_pass) == 1
    assert _fused_args(gm) == (128, 64, 64, 64, True, 1e-6)
    with torch.no_grad():
        for g, w in zip(gm(*site[1]), site[0](*site[1]), strict=True):
            torch.testing.assert_close(g, w, rtol=2e-2, atol=2e-2)
