"""The FX helpers the matchers share (each rule at its boundary), and the example values
(`meta["val"]`) of fused nodes when the nodes they replace had none.

Later compile stages read `meta["val"]`; a node inserted by another pass may lack it. The
rewrite then computes the fused node's value from its inputs' fake values (and leaves it
unset when an input has none either), and the graph still runs as before.
"""

from __future__ import annotations

import operator

import pytest
import torch
from ascend_graph import GraphFusionPassManager
from ascend_graph.passes.fx_nodes import (
    adopt_meta,
    all_before,
    erase_dead,
    getitem_of,
    getitems,
    insertion_point,
    meta_item,
    node_dtype,
    same_shape,
    sole_user,
    static_int,
    tensor_meta,
)
from torch import fx
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


aten = torch.ops.aten


def _graph(n_inputs: int = 2) -> tuple[fx.Graph, list[fx.Node]]:
    graph = fx.Graph()
    return graph, [graph.placeholder(f"x{i}") for i in range(n_inputs)]


def _symbolic(size_hint: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A static [n] tensor, a [s] tensor with s a backed symbol hinted n, and a second [s]."""
    from torch._dynamo.source import ConstantSource
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    env = ShapeEnv()
    symbol = env.create_symbol(size_hint, source=ConstantSource("s"))
    s = env.create_symintnode(symbol, hint=size_hint)
    with FakeTensorMode(shape_env=env):
        return torch.empty(size_hint), torch.empty(s), torch.empty(s)


def test_sole_user_counts_every_use_direct_or_inside_a_list() -> None:
    graph, (x, y) = _graph()
    twice = graph.call_function(aten.add.Tensor, (x, x))
    assert sole_user(x) is None  # one user, two uses
    once_listed = graph.call_function(aten.cat.default, ([y, twice],))
    assert sole_user(y) is once_listed
    assert sole_user(twice) is once_listed
    listed_twice = graph.call_function(aten.cat.default, ([once_listed, once_listed],))
    assert sole_user(once_listed) is None
    kw = graph.call_function(aten.mul.Tensor, (listed_twice,), {"other": listed_twice})
    assert sole_user(listed_twice) is None  # positional + keyword
    assert sole_user(kw) is None  # no user at all
    assert sole_user("not a node") is None


def test_getitem_of_returns_only_a_node_parent_at_the_asked_index() -> None:
    graph, (x, y) = _graph()
    item = graph.call_function(operator.getitem, (x, 1))
    assert getitem_of(item) is x
    assert getitem_of(item, 1) is x
    assert getitem_of(item, 0) is None
    of_tuple = graph.call_function(operator.getitem, ((x, y), 0))
    assert getitem_of(of_tuple) is None  # the parent is a tuple of nodes, not one node
    assert getitem_of(graph.call_function(aten.add.Tensor, (x, y))) is None


def test_getitems_lists_only_getitem_users_by_index() -> None:
    graph, (x, _) = _graph()
    a = graph.call_function(operator.getitem, (x, 0))
    b = graph.call_function(operator.getitem, (x, 0))
    c = graph.call_function(operator.getitem, (x, 1))
    graph.call_function(operator.add, (x, 1))  # a user whose second argument is an int
    graph.call_function(aten.neg.default, (x,))  # a user with one argument
    assert getitems(x) == {0: [a, b], 1: [c]}


def test_insertion_point_is_first_consumer_or_after_the_last_output() -> None:
    graph, (x, y) = _graph()
    a = graph.call_function(aten.add.Tensor, (x, y))
    b = graph.call_function(aten.mul.Tensor, (x, y))
    late_input = graph.call_function(aten.neg.default, (x,))
    use_b = graph.call_function(aten.relu.default, (b,))
    use_a = graph.call_function(aten.relu.default, (a,))
    out = graph.output(None)
    assert insertion_point([a, b], [x, y, 2.0]) is use_b
    assert insertion_point([a, b], [late_input]) is use_b  # defined just before: fine
    assert insertion_point([a, b], [use_b]) is None  # the point itself is not earlier
    assert insertion_point([a, b], [use_a]) is None
    # no consumer: right after the last output, whatever the order they are given in
    assert insertion_point([use_a, use_b], [x]) is out
    assert insertion_point([use_b, use_a], [x]) is out


def test_all_before_is_strict() -> None:
    graph, (x, y) = _graph()
    a = graph.call_function(aten.add.Tensor, (x, y))
    assert all_before([x, y, 3, None], a)
    assert not all_before([a], a)
    assert not all_before([x, a], a)
    assert all_before([], a)


def test_meta_helpers_read_only_what_is_recorded() -> None:
    graph, (x, y) = _graph()
    half = torch.zeros(2, dtype=torch.float16)
    pair = (torch.zeros(1), torch.ones(3, dtype=torch.int8))
    x.meta["val"] = half
    y.meta["val"] = pair
    bare = graph.call_function(aten.add.Tensor, (x, y))
    num = graph.call_function(aten.sum.default, (x,))
    num.meta["val"] = 7

    assert meta_item(y, 0) is pair[0] and meta_item(y, 1) is pair[1]
    assert meta_item(y, 2) is None  # just past the end
    assert meta_item(x, 0) is None  # a tensor, not a multi-output value
    assert meta_item(bare, 0) is None
    assert meta_item("not a node", 0) is None

    assert tensor_meta(x) is half
    assert tensor_meta(y) is None and tensor_meta(num) is None and tensor_meta(bare) is None
    assert tensor_meta(3) is None

    assert node_dtype(x) == torch.float16
    assert node_dtype(y) is None and node_dtype(bare) is None and node_dtype(None) is None


def test_static_int_accepts_plain_ints_only() -> None:
    assert static_int(3) == 3 and static_int(0) == 0 and static_int(-2) == -2
    for value in (True, False, 2.5, "3", None):
        assert static_int(value) is None


def test_erase_dead_keeps_used_nodes_and_erases_chains_consumers_first() -> None:
    graph, (x, y) = _graph()
    used = graph.call_function(aten.add.Tensor, (x, y))
    dead_parent = graph.call_function(aten.mul.Tensor, (x, y))
    dead_child = graph.call_function(aten.neg.default, (dead_parent,))
    graph.output(used)
    erase_dead([dead_parent, used, dead_child, dead_child])
    assert list(graph.nodes) == [x, y, used, used.next]
    assert used.next.op == "output"
    erase_dead([used])  # still used by the output
    assert used.graph is graph and used in graph.nodes


def test_adopt_meta_shares_the_given_values_without_recomputing() -> None:
    graph, (x, _) = _graph()
    fused = graph.call_function(aten.split.Tensor, (x, 2))
    items = [graph.call_function(operator.getitem, (fused, i)) for i in range(2)]
    vals = [torch.zeros(2), torch.ones(2, dtype=torch.int8)]
    adopt_meta(fused, items, vals, "aux")
    assert fused.meta["val"] == tuple(vals) and isinstance(fused.meta["val"], tuple)
    assert all(got is want for got, want in zip(fused.meta["val"], vals, strict=True))
    assert [item.meta["val"] for item in items] == vals
    assert {n.meta["stream_label"] for n in (fused, *items)} == {"aux"}

    other = graph.call_function(aten.split.Tensor, (x, 2))
    other_items = [graph.call_function(operator.getitem, (other, i)) for i in range(2)]
    adopt_meta(other, other_items, vals, None)
    assert all("stream_label" not in n.meta for n in (other, *other_items))


def test_adopt_meta_refuses_a_value_count_that_differs_from_the_outputs() -> None:
    graph, (x, _) = _graph()
    fused = graph.call_function(aten.split.Tensor, (x, 2))
    one_item = [graph.call_function(operator.getitem, (fused, 0))]
    with pytest.raises(ValueError):
        adopt_meta(fused, one_item, [torch.zeros(1), torch.zeros(1)], None)


def test_same_shape_needs_a_proof_for_symbolic_sizes() -> None:
    static, sym, sym_again = _symbolic(3)
    assert not same_shape(static, sym)  # equal by hint only: not proven
    assert not same_shape(sym, static)
    assert same_shape(sym, sym_again)
    assert same_shape(static, static)


def test_same_shape_compares_rank_then_each_size() -> None:
    assert same_shape(torch.empty(2, 3), torch.empty(2, 3))
    assert not same_shape(torch.empty(2, 3), torch.empty(2, 4))
    assert not same_shape(torch.empty(2, 3), torch.empty(2, 3, 1))
    assert not same_shape(torch.empty(6), torch.empty(2, 3))
