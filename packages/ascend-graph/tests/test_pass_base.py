"""Pass base rules: setting comparison, op lookup, compile ranges, and anchors erased mid-pass."""

from __future__ import annotations

import dataclasses
import sys
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from ascend_graph.passes.base import (
    FusionPattern,
    Match,
    PatternPass,
    _setting_equal,
    ascend_op,
    range_bounds,
)
from ascend_graph.passes.fx_nodes import erase_dead, is_call, sole_user
from torch import fx
from torch.fx.experimental.proxy_tensor import make_fx

aten = torch.ops.aten


@dataclass
class Range:
    """Shaped like vLLM's compile Range (ascend-graph does not import vLLM)."""

    start: int
    end: int


def test_float_settings_compare_closely_everything_else_exactly() -> None:
    assert _setting_equal(1e-6, 1e-6 * (1 + 1e-12))
    assert _setting_equal(2, 2.0)  # an int site against a float setting
    assert not _setting_equal(1e-6, 1.01e-6)
    # int against int is exact even where float() would round both to one value
    assert not _setting_equal(2**53 + 1, 2**53)
    assert _setting_equal(2**53 + 1, 2**53 + 1)
    assert not _setting_equal(3, "3")
    assert _setting_equal(torch.float16, torch.float16)
    assert not _setting_equal(None, 1.0)


def test_ascend_op_imports_the_kernels_only_when_the_op_is_missing(monkeypatch) -> None:
    sentinel = object()
    fake_namespace = SimpleNamespace(my_op=SimpleNamespace(default=sentinel))
    monkeypatch.setattr(torch.ops, "ascend", fake_namespace, raising=False)
    monkeypatch.setitem(sys.modules, "ascend_kernels", None)  # importing it now fails
    assert ascend_op("my_op") is sentinel
    with pytest.raises(ImportError):
        ascend_op("missing_op")


def test_range_bounds_reads_vllm_ranges_tuples_and_partial_objects() -> None:
    assert range_bounds(None) == (None, None)
    assert range_bounds((2, 9)) == (2, 9)
    assert range_bounds([2, 9]) == (2, 9)
    assert range_bounds(Range(start=4, end=64)) == (4, 64)
    assert range_bounds(SimpleNamespace(start=4)) == (4, None)
    assert range_bounds(SimpleNamespace(end=8)) == (None, 8)
    with pytest.raises(
        TypeError,
        match=r"pass None, a \(start, end\) tuple, or an object with "
        r"\.start and \.end",
    ):
        range_bounds(SimpleNamespace(first=1, last=2))


class _Gated(PatternPass):
    name = "gated"


@pytest.mark.parametrize(
    ("compile_range", "applicable"),
    [
        ((7, 100), False),
        ((8, 100), True),
        ((9, 100), True),
        (Range(start=7, end=16), False),
        (Range(start=8, end=16), True),
        (None, False),  # an open range may hold fewer tokens than the minimum
        (SimpleNamespace(end=16), False),
    ],
)
def test_min_tokens_gate_at_its_boundary(compile_range: Any, applicable: bool) -> None:
    gated = _Gated()
    gated.min_tokens = 8
    assert gated.is_applicable_for_range(compile_range) is applicable


def _add3(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    return a + b + c


def _add2(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return a + b


class _AddChain(FusionPattern[Match]):
    """`(a + b) + c` -> `_add3(a, b, c)`; a lone add -> `_add2`. The chain's second add is
    also an anchor, erased by the rewrite of the first one."""

    anchors = (aten.add.Tensor,)

    def __init__(self) -> None:
        super().__init__()
        self.rewritten: list[int] = []

    @classmethod
    def extract(cls, anchor: fx.Node) -> Match | None:
        user = sole_user(anchor)
        if is_call(user, aten.add.Tensor) and user.args[0] is anchor:
            return Match((anchor, user))
        return Match((anchor,))

    def rewrite(self, graph: fx.Graph, match: Match) -> None:
        self.rewritten.append(len(match.nodes))
        if len(match.nodes) == 1:
            match.nodes[0].target = _add2
            return
        first, last = match.nodes
        with graph.inserting_before(last):
            fused = graph.call_function(_add3, (*first.args, last.args[1]))
        last.replace_all_uses_with(fused)
        erase_dead(match.nodes)

    def example_inputs(self) -> tuple[Any, ...]:
        return (torch.ones(2), torch.ones(2), torch.ones(2))

    def search(self, *inputs: Any) -> Any:
        return _add3(*inputs)

    def replacement(self, *inputs: Any) -> Any:
        return _add3(*inputs)


def _two_chains(x, y, z, w, v):
    return (((x + y) + z) * 2 + w) + v


def test_anchors_erased_by_an_earlier_rewrite_are_skipped_and_the_rest_still_run() -> None:
    gen = torch.Generator().manual_seed(0)
    inputs = tuple(torch.randn(3, generator=gen) for _ in range(5))
    gm = make_fx(_two_chains)(*inputs)
    adds = list(gm.graph.find_nodes(op="call_function", target=aten.add.Tensor))
    assert len(adds) == 4

    chain_pass = _Gated()
    pattern = _AddChain()
    assert chain_pass.register(pattern)
    assert chain_pass(gm.graph) == 2
    assert pattern.rewritten == [2, 2]
    targets = [n.target for n in gm.graph.nodes if n.op == "call_function"]
    assert targets == [_add3, aten.mul.Tensor, _add3]
    gm.recompile()
    torch.testing.assert_close(gm(*inputs), _two_chains(*inputs), rtol=0, atol=0)


def _muls_add_graph(scale: float = 2.5) -> tuple[fx.GraphModule, fx.Node]:
    gm = make_fx(lambda x, y: x * scale + y, tracing_mode="fake")(torch.randn(4, 8),
                                                                   torch.randn(4, 8))
    (add,) = gm.graph.find_nodes(op="call_function", target=aten.add.Tensor)
    return gm, add


def test_a_site_is_typed_and_frozen() -> None:
    from ascend_graph.passes.muls_add import MulsAddPattern, MulsAddSite

    _, add = _muls_add_graph()
    site = MulsAddPattern.extract(add)
    assert isinstance(site, MulsAddSite)
    mul, _ = site.nodes
    assert (site.x, site.y, site.scale) == (mul.args[0], add.args[1], 2.5)
    assert site.attrs == {"scale": 2.5, "dtype": torch.float32}
    with pytest.raises(dataclasses.FrozenInstanceError):
        site.scale = 3.0  # type: ignore[misc]


def test_a_site_gives_the_fused_op_its_arguments_in_schema_order_by_name() -> None:
    from ascend_graph.passes.muls_add import MulsAddSite

    @dataclass(frozen=True)
    class Reordered(Match):  # fields in another order than the schema's (x, y, scale)
        scale: float
        y: str
        x: str

    site = Reordered((), scale=0.5, y="y", x="x")
    assert site.arguments(ascend_op("muls_add")) == ("x", "y", 0.5)
    short = MulsAddSite((), x="x", y="y", scale=0.5)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"MulsAddSite does not name .*rms_norm.* \['weight', "
                                        r"'eps'\]"):
        short.arguments(ascend_op("rms_norm"))


def test_the_qk_norm_site_names_every_argument_of_the_fused_op() -> None:
    from ascend_graph.passes.qknorm_rope import FUSED_OP, QKNormRopePattern

    hd, q_size, kv_size = 32, 128, 64

    def fn(qkv, qw, kw, positions, cache, qb, kb):  # type: ignore[no-untyped-def]
        q, k, v = qkv.split([q_size, kv_size, kv_size], -1)
        t = qkv.shape[0]
        qn = torch.ops.ascend.rms_norm(q.view(t, q_size // hd, hd), qw, 1e-6) + qb
        kn = torch.ops.ascend.rms_norm(k.view(t, kv_size // hd, hd), kw, 1e-6) + kb
        return (*torch.ops.ascend.rotary_embedding(
            positions, qn.view(t, q_size), kn.view(t, kv_size), cache, hd, 16, False), v)

    inputs = (torch.randn(5, q_size + 2 * kv_size), torch.rand(hd), torch.rand(hd),
              torch.arange(5), torch.randn(8, 16), torch.randn(hd), torch.randn(hd))
    gm = make_fx(fn, tracing_mode="fake")(*inputs)
    (rope,) = gm.graph.find_nodes(op="call_function",
                                  target=torch.ops.ascend.rotary_embedding.default)
    site = QKNormRopePattern.extract(rope)
    assert site is not None
    qkv, qw, kw, positions, cache, qb, kb = gm.graph.find_nodes(op="placeholder")
    assert site.arguments(ascend_op(FUSED_OP)) == (
        qkv, qw, kw, positions, cache, q_size, kv_size, hd, 16, False, 1e-6, qb, kb)
