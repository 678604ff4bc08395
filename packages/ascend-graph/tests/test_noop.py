"""noop_elimination on hand-built graphs: what it must leave alone, and how it counts."""

from __future__ import annotations

import pytest
import torch
from ascend_graph.passes.noop import NoOpEliminationPass
from torch import fx, nn

aten = torch.ops.aten


def _placeholder(graph: fx.Graph, name: str, val: torch.Tensor | None) -> fx.Node:
    node = graph.placeholder(name)
    if val is not None:
        node.meta["val"] = val
    return node


def _lines(graph: fx.Graph) -> list[str]:
    return [f"{n.op} {n.target} {n.args} {n.kwargs}" for n in graph.nodes]


def _x() -> torch.Tensor:
    return torch.arange(9.0).reshape(3, 3)


def _square_transpose(graph: fx.Graph, x: fx.Node) -> fx.Node:
    # x.transpose(0, 1) on a square matrix keeps shape and dtype but is no no-op
    return graph.call_method("transpose", (x, 0, 1))


def _keyword_only_view(graph: fx.Graph, x: fx.Node) -> fx.Node:
    return graph.call_function(aten.view.default, (), {"self": x, "size": [3, 3]})


@pytest.mark.parametrize(
    ("build", "eager"),
    [(_square_transpose, lambda x: x.transpose(0, 1)),
     (_keyword_only_view, lambda x: x.view(3, 3))],
    ids=["other-method-same-shape", "keyword-only-view"],
)
def test_same_shape_nodes_it_cannot_read_are_left_alone(build, eager) -> None:
    graph = fx.Graph()
    x = _placeholder(graph, "x", torch.empty(3, 3))
    node = build(graph, x)
    node.meta["val"] = torch.empty(3, 3)
    graph.output(node)
    before = _lines(graph)
    assert NoOpEliminationPass()(graph) == 0
    assert _lines(graph) == before
    out = fx.GraphModule(torch.nn.Module(), graph)(_x())
    torch.testing.assert_close(out, eager(_x()))


def test_view_of_an_input_without_example_value_is_kept() -> None:
    graph = fx.Graph()
    x = _placeholder(graph, "x", None)  # no meta["val"]: the input shape is unknown
    v = graph.call_function(aten.view.default, (x, [3, 3]))
    v.meta["val"] = torch.empty(3, 3)
    graph.output(v)
    before = _lines(graph)
    assert NoOpEliminationPass()(graph) == 0
    assert _lines(graph) == before


def test_skipped_site_does_not_stop_the_scan_and_every_removal_counts() -> None:
    graph = fx.Graph()
    x = _placeholder(graph, "x", None)
    y = _placeholder(graph, "y", torch.empty(3, 3))
    kept = graph.call_function(aten.view.default, (x, [3, 3]))  # no input meta: skipped
    kept.meta["val"] = torch.empty(3, 3)
    first = graph.call_function(aten.view.default, (y, [3, 3]))
    first.meta["val"] = torch.empty(3, 3)
    second = graph.call_method("reshape", (first, 3, 3))
    second.meta["val"] = torch.empty(3, 3)
    total = graph.call_function(aten.add.Tensor, (kept, second))
    graph.output(total)
    assert NoOpEliminationPass()(graph) == 2
    assert _lines(graph) == [
        "placeholder x () {}",
        "placeholder y () {}",
        "call_function aten.view.default (x, [3, 3]) {}",
        f"call_function aten.add.Tensor ({kept.name}, y) {{}}",
        f"output output ({total.name},) {{}}",
    ]
    a, b = _x(), _x() * 2
    out = fx.GraphModule(torch.nn.Module(), graph)(a, b)
    torch.testing.assert_close(out, a.view(3, 3) + b.view(3, 3).reshape(3, 3))


class _Views(nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        same = x.view(x.shape[0], x.shape[1]).relu()  # no-op view
        flat = x.reshape(-1).relu()  # a real reshape stays
        return same, flat


@pytest.mark.parametrize("dynamic", [False, True])
def test_noop_views_removed(compile_module, close, dynamic) -> None:
    result = compile_module(_Views(), (torch.randn(4, 8),), dynamic=dynamic)
    assert result.symbolic() == dynamic
    assert result.report["noop_elimination"] == 1
    assert result.op_counts()["aten.view"] == 1
    close(result.outputs, result.reference, torch.float32)
