"""The small FX helpers the matchers share, each rule at its boundary.

Graphs here are built by hand (`fx.Graph`) so every node, user and `meta` entry is known.
"""

from __future__ import annotations

import operator

import pytest
import torch
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

aten = torch.ops.aten


def _graph(n_inputs: int = 2) -> tuple[fx.Graph, list[fx.Node]]:
    graph = fx.Graph()
    return graph, [graph.placeholder(f"x{i}") for i in range(n_inputs)]


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
