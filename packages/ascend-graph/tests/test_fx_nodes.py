"""Example values (`meta["val"]`) of fused nodes when the nodes they replace had none.

Later compile stages read `meta["val"]`; a node inserted by another pass may lack it. The
rewrite then computes the fused node's value from its inputs' fake values (and leaves it
unset when an input has none either), and the graph still runs as before.
"""

from __future__ import annotations

import operator

import torch
from ascend_graph import GraphFusionPassManager
from torch.fx.experimental.proxy_tensor import make_fx

A = torch.ops.ascend


def _norm_quant(x, r, w, scale, offset):
    y, res = A.add_rms_norm(x, r, w, 1e-6)
    return A.quantize(y, scale, offset), res


def _norm_quant_inputs() -> tuple[torch.Tensor, ...]:
    gen = torch.Generator().manual_seed(0)
    x, r = torch.randn(4, 64, generator=gen), torch.randn(4, 64, generator=gen)
    return x, r, torch.rand(64, generator=gen) + 0.5, torch.tensor([0.02]), torch.tensor([1.0])


def _only(gm: torch.fx.GraphModule, name: str) -> torch.fx.Node:
    (node,) = [n for n in gm.graph.nodes if n.op == "call_function" and name in str(n.target)]
    return node


def _values(node: torch.fx.Node) -> list[tuple[torch.dtype, tuple[int, ...]]]:
    val = node.meta["val"]
    return [(v.dtype, tuple(v.shape)) for v in (val if isinstance(val, tuple) else (val,))]


def test_fused_node_value_is_computed_when_the_replaced_one_has_none() -> None:
    inputs = _norm_quant_inputs()
    gm = make_fx(_norm_quant, tracing_mode="fake")(*inputs)
    del _only(gm, "quantize").meta["val"]
    for node in gm.graph.nodes:
        if node.op == "call_function":
            node.meta["stream_label"] = "aux"
    assert GraphFusionPassManager().run(gm.graph)["norm_quant"] == 1
    fused = _only(gm, "add_rms_norm_quant")
    want = [(torch.int8, (4, 64)), (torch.float32, (4, 64))]
    assert _values(fused) == want
    items = sorted(fused.users, key=lambda n: n.args[1])
    assert [n.target for n in items] == [operator.getitem] * 2
    assert [_values(n)[0] for n in items] == want
    assert {n.meta["stream_label"] for n in (fused, *items)} == {"aux"}
    gm.recompile()
    for got, expected in zip(gm(*inputs), _norm_quant(*inputs), strict=True):
        assert torch.equal(got, expected)


def test_fused_node_value_stays_unset_when_an_input_has_none() -> None:
    inputs = _norm_quant_inputs()
    gm = make_fx(_norm_quant, tracing_mode="fake")(*inputs)
    del _only(gm, "quantize").meta["val"]
    weight = [n for n in gm.graph.nodes if n.op == "placeholder"][2]
    del weight.meta["val"]
    assert GraphFusionPassManager().run(gm.graph)["norm_quant"] == 1
    fused = _only(gm, "add_rms_norm_quant")
    assert "val" not in fused.meta and "stream_label" not in fused.meta
    assert all("val" not in n.meta for n in fused.users)
    gm.recompile()
    for got, expected in zip(gm(*inputs), _norm_quant(*inputs), strict=True):
        assert torch.equal(got, expected)


def test_fused_node_value_without_a_fake_mode_is_left_unset() -> None:
    """The inputs' values are real tensors (a hand-built graph): the fused op is not run for
    real just to get a value, which stays unset."""
    inputs = _norm_quant_inputs()
    gm = make_fx(_norm_quant, tracing_mode="fake")(*inputs)
    del _only(gm, "quantize").meta["val"]
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    for node, value in zip(placeholders, inputs, strict=True):
        node.meta["val"] = value
    assert GraphFusionPassManager().run(gm.graph)["norm_quant"] == 1
    fused = _only(gm, "add_rms_norm_quant")
    assert "val" not in fused.meta and all("val" not in n.meta for n in fused.users)


def test_qknorm_v_value_is_computed_when_the_split_has_none() -> None:
    hd, q_size, kv_size = 32, 128, 64

    def fn(qkv, qw, kw, positions, cache):
        q, k, v = qkv.split([q_size, kv_size, kv_size], dim=-1)
        qn = A.rms_norm(q.view(5, 4, hd), qw, 1e-6).view(5, q_size)
        kn = A.rms_norm(k.view(5, 2, hd), kw, 1e-6).view(5, kv_size)
        return (*A.rotary_embedding(positions, qn, kn, cache, hd, hd, True), v)

    gen = torch.Generator().manual_seed(1)
    inputs = (torch.randn(5, 256, generator=gen), torch.rand(hd) + 0.5, torch.rand(hd) + 0.5,
              torch.tensor([0, 3, 7, 1, 15]), torch.randn(16, hd, generator=gen))  # fmt: skip
    gm = make_fx(fn, tracing_mode="fake")(*inputs)
    del _only(gm, "split_with_sizes").meta["val"]
    assert GraphFusionPassManager().run(gm.graph)["qknorm_rope"] == 1
    fused = _only(gm, "split_qkv_rmsnorm_rope")
    assert _values(fused) == [(torch.float32, (5, q_size)), (torch.float32, (5, kv_size)),
                              (torch.float32, (5, kv_size))]  # fmt: skip
    gm.recompile()
    for got, expected in zip(gm(*inputs), fn(*inputs), strict=True):
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


def test_fresh_like_is_contiguous_whatever_the_layout_it_copies() -> None:
    """v stops being a view of qkv: its new example value has contiguous strides, also where
    the view it replaces is dense with other strides (one token, or transposed)."""
    from ascend_graph.passes.fx_nodes import fresh_like
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode() as mode:
        one_token = torch.empty(1, 256)[:, 192:]  # [1, 64], strides (256, 1)
        transposed = torch.empty(5, 64).t()  # [64, 5], strides (1, 64)
    for view in (one_token, transposed):
        fresh = fresh_like(view)
        assert fresh.fake_mode is mode
        assert fresh.shape == view.shape and fresh.dtype == view.dtype
        assert fresh.stride() == torch.empty(view.shape).stride() != view.stride()
    assert fresh_like(torch.empty(2)) is None  # a real tensor: no fake mode to make one in
