"""Fused graphs as artifacts: compile, serialise, reuse, and every way an artifact goes bad."""

from __future__ import annotations

import hashlib
import json
import pickle

import ascend_graph
import pytest
import torch
from ascend_graph import (
    FusedGraph,
    FusedGraphError,
    GraphFusionPassManager,
    compile_graph_fused,
    dumps_fused_graph,
    loads_fused_graph,
    npu_graph_ex,
)
from ascend_graph import fused_graph as fused_mod
from torch.utils._python_dispatch import TorchDispatchMode

A = torch.ops.ascend


def block(x, residual, w, scale, offset, shared):
    y, res = A.add_rms_norm(x, residual, w, 1e-6)
    return A.quantize(y, scale, offset), res * 2.5 + shared, res.view(-1)


def block_inputs(tokens: int = 5) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(tokens)
    return [torch.randn(tokens, 64, generator=gen), torch.randn(tokens, 64, generator=gen),
            torch.rand(64, generator=gen) + 0.5, torch.tensor([0.02]), torch.tensor([1.0]),
            torch.randn(tokens, 64, generator=gen)]  # fmt: skip


class OpLog(TorchDispatchMode):
    """The ops a callable dispatches at its top level."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(str(func))
        return func(*args, **(kwargs or {}))


def _ops(fn, args) -> tuple[list[str], object]:
    with OpLog() as log:
        out = fn(*args)
    return log.ops, out


def _equal(got, want) -> bool:
    return all(torch.equal(a, b) for a, b in zip(got, want, strict=True))


def test_round_trip_keeps_the_fused_ops_and_reuse_skips_the_passes() -> None:
    gm, args = torch.fx.symbolic_trace(block), block_inputs()
    manager = GraphFusionPassManager()
    compiled, fused = compile_graph_fused(gm, args, manager=manager, compile_range=(1, 8))
    assert manager.last_counts["norm_quant"] == 1 and manager.last_counts["muls_add"] == 1
    assert fused.fused_targets() == ["ascend.add_rms_norm_quant.default",
                                     "ascend.muls_add.default"]
    data = dumps_fused_graph(fused, manager=manager, backend="eager", compile_range=(1, 8))
    loaded = loads_fused_graph(data, manager=GraphFusionPassManager(), backend="eager",
                               compile_range=(1, 8))
    assert loaded.source == fused.source and not loaded.reused
    assert "torch.ops.ascend.add_rms_norm_quant.default(" in loaded.graph.code
    fresh = GraphFusionPassManager()
    again, result = compile_graph_fused(gm, args, manager=fresh, reuse=loaded)
    assert result.reused and result.graph is loaded.graph and result.source == fused.source
    assert sum(fresh.counts.values()) == 0  # the passes did not run
    ops, out = _ops(again, block_inputs(7))
    assert ops == ["ascend.add_rms_norm_quant.default", "ascend.muls_add.default",
                   "aten.view.default"]
    assert _equal(out, compiled(*block_inputs(7)))
    assert out[2].shape == (7 * 64,)


def test_reuse_of_a_graph_made_from_another_graph_runs_the_passes() -> None:
    args = block_inputs()
    _, fused = compile_graph_fused(torch.fx.symbolic_trace(block), args,
                                   manager=GraphFusionPassManager())

    def other(x, residual, w, scale, offset, shared):
        y, res = A.add_rms_norm(x, residual, w, 1e-6)
        return A.quantize(y, scale, offset), res * 3.0 + shared

    manager = GraphFusionPassManager()
    fn, result = compile_graph_fused(torch.fx.symbolic_trace(other), args, manager=manager,
                                     reuse=fused)
    assert not result.reused and manager.last_counts["muls_add"] == 1
    assert torch.equal(fn(*args)[1], other(*args)[1])


def test_aot_wrappers_stay_exact_for_aliases_and_mutations() -> None:
    def aliasing(x, y):
        z = x + y
        x.mul_(2.0)  # input mutation: aot_autograd writes it back
        return z.view(-1), x.view(2, -1), z * 2.5 + y

    args = [torch.randn(4, 8), torch.randn(4, 8)]
    gm = torch.fx.symbolic_trace(aliasing)
    manager = GraphFusionPassManager()
    _, fused = compile_graph_fused(gm, [a.clone() for a in args], manager=manager)
    data = dumps_fused_graph(fused, manager=manager, backend="eager")
    saved = loads_fused_graph(data, manager=manager, backend="eager")
    second, result = compile_graph_fused(gm, [a.clone() for a in args], manager=manager,
                                         reuse=saved)
    assert result.reused and "ascend.muls_add.default" in result.fused_targets()
    want_args, got_args = [a.clone() for a in args], [a.clone() for a in args]
    want, got = aliasing(*want_args), second(*got_args)
    assert [t.shape for t in got] == [t.shape for t in want]
    assert all(torch.allclose(a, b) for a, b in zip(got, want, strict=True))
    assert torch.equal(got_args[0], want_args[0])  # the mutation reached the caller's tensor
    assert got[1].data_ptr() == got_args[0].data_ptr()  # and the view aliases it


def _artifact() -> tuple[bytes, GraphFusionPassManager]:
    manager = GraphFusionPassManager()
    _, fused = compile_graph_fused(torch.fx.symbolic_trace(block), block_inputs(),
                                   manager=manager)
    return dumps_fused_graph(fused, manager=manager, backend="eager", compile_range=(1, 8)), \
        manager


def test_stale_artifacts_name_what_changed(monkeypatch) -> None:
    data, manager = _artifact()

    def load(**overrides):
        kwargs = {"manager": manager, "backend": "eager", "compile_range": (1, 8), **overrides}
        return loads_fused_graph(data, **kwargs)

    assert isinstance(load(), FusedGraph)
    with pytest.raises(FusedGraphError, match="stale: made with passes="):
        load(manager=GraphFusionPassManager(fuse_muls_add=False))
    with pytest.raises(FusedGraphError, match="stale: made with backend='eager'"):
        load(backend="npugraph_ex")
    with pytest.raises(FusedGraphError, match=r"stale: made with compile_range=\[1, 8\]"):
        load(compile_range=(9, 16))
    monkeypatch.setattr(fused_mod.torch, "__version__", "9.9.9")
    with pytest.raises(FusedGraphError, match="stale: made with torch="):
        load()


def _with_payload(data: bytes, payload: bytes, *, fix_checksum: bool) -> bytes:
    head, _, _ = data[len(fused_mod.MAGIC):].partition(b"\n")
    header = json.loads(head)
    if fix_checksum:
        header["sha256"] = hashlib.sha256(payload).hexdigest()
    return fused_mod.MAGIC + json.dumps(header).encode() + b"\n" + payload


def test_damaged_artifacts_are_errors_with_a_reason() -> None:
    data, manager = _artifact()
    payload = data[data.index(b"\n", len(fused_mod.MAGIC)) + 1:]
    cases = {
        b"": "not an ascend-graph fused-graph artifact",
        b"garbage": "not an ascend-graph fused-graph artifact",
        fused_mod.MAGIC + b"{not json\n" + payload: "damaged header",
        fused_mod.MAGIC + b"[1, 2]\n": "damaged header",
        data[:-10]: "damaged: checksum mismatch",
        _with_payload(data, b"not a pickle", fix_checksum=True):
            "damaged: cannot rebuild the graph: .*",
        _with_payload(data, pickle.dumps([1, 2]), fix_checksum=True):
            "damaged: payload is not a graph",
    }  # fmt: skip
    for bad, reason in cases.items():
        with pytest.raises(FusedGraphError, match=f"^{reason}$"):
            loads_fused_graph(bad, manager=manager, backend="eager", compile_range=(1, 8))


def test_graphs_that_cannot_be_rebuilt_are_not_saved_and_bad_backends_refused() -> None:
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    graph.output((graph.call_function(lambda t: t + 1, (x,)),))  # not importable by name
    fused = FusedGraph("src", torch.fx.GraphModule({}, graph))
    with pytest.raises(FusedGraphError, match="cannot be serialised"):
        dumps_fused_graph(fused, manager=GraphFusionPassManager(), backend="eager")
    with pytest.raises(ValueError, match="allowed: eager, npugraph_ex"):
        compile_graph_fused(torch.fx.symbolic_trace(block), block_inputs(),
                            manager=GraphFusionPassManager(), backend="inductor")


def test_graph_digest_covers_constant_tensors() -> None:
    class WithConstant(torch.nn.Module):
        def __init__(self, value: float) -> None:
            super().__init__()
            self.register_buffer("c", torch.full((4,), value))

        def forward(self, x):
            return (x + self.c,)

    one = torch.fx.symbolic_trace(WithConstant(1.0))
    same = torch.fx.symbolic_trace(WithConstant(1.0))
    two = torch.fx.symbolic_trace(WithConstant(2.0))
    assert one.code == two.code
    assert fused_mod.graph_digest(one) == fused_mod.graph_digest(same)
    assert fused_mod.graph_digest(one) != fused_mod.graph_digest(two)


def test_artifact_header_records_what_it_was_made_with() -> None:
    data, manager = _artifact()
    head, _, payload = data[len(fused_mod.MAGIC):].partition(b"\n")
    header = json.loads(head)
    assert header == {
        "format": 1, "torch": torch.__version__, "ascend_graph": ascend_graph.__version__,
        "passes": manager.uuid(), "backend": "eager", "compile_range": [1, 8],
        "source": header["source"], "sha256": hashlib.sha256(payload).hexdigest(),
    }  # fmt: skip
    assert len(header["source"]) == 64


def test_a_graph_whose_code_is_stale_is_not_saved() -> None:
    _, fused = compile_graph_fused(torch.fx.symbolic_trace(block), block_inputs(),
                                   manager=GraphFusionPassManager())  # fmt: skip
    graph = fused.graph.graph
    output = next(n for n in graph.nodes if n.op == "output")
    with graph.inserting_before(output):
        extra = graph.call_function(torch.ops.aten.relu.default, (output.args[0][0],))
    output.args = ((extra, *output.args[0][1:]),)  # changed, but the code not regenerated
    stale = r"^the fused graph changes when rebuilt from its code$"
    with pytest.raises(FusedGraphError, match=stale):
        dumps_fused_graph(fused, manager=GraphFusionPassManager(), backend="eager")


def test_compile_range_reaches_the_passes() -> None:
    manager = GraphFusionPassManager()
    manager.passes[-1].max_tokens = 4  # muls_add only for graphs of at most 4 tokens
    _, fused = compile_graph_fused(torch.fx.symbolic_trace(block), block_inputs(),
                                   manager=manager, compile_range=(1, 8))  # fmt: skip
    assert fused.fused_targets() == ["ascend.add_rms_norm_quant.default"]


def test_npu_backend_gets_a_copy_the_inputs_and_the_options(monkeypatch) -> None:
    calls = []

    def fake_compile(gm, example_inputs, *, options):
        calls.append((gm, list(example_inputs), options))
        return gm.forward

    monkeypatch.setattr(npu_graph_ex, "npu_graph_compile", fake_compile)
    options = npu_graph_ex.NpuGraphOptions()
    args = block_inputs()
    compiled, fused = compile_graph_fused(torch.fx.symbolic_trace(block), args,
                                          manager=GraphFusionPassManager(),
                                          backend="npugraph_ex", npu_options=options)  # fmt: skip
    ((given, inputs, given_options),) = calls
    for got, want in zip(compiled(*args), block(*args), strict=True):
        torch.testing.assert_close(got, want)
    assert given_options is options
    assert [tuple(t.shape) for t in inputs] == [tuple(t.shape) for t in args]
    assert given is not fused.graph and given.code == fused.graph.code
    saved = fused.graph.code
    for node in list(given.graph.nodes):  # what the extension does to its copy stays there
        if node.op == "call_function" and "muls_add" in str(node.target):
            node.target = torch.ops.aten.sub.Tensor
    given.recompile()
    assert fused.graph.code == saved and "muls_add" in saved
    assert "ascend.muls_add.default" in fused.fused_targets()  # its graph is untouched too


def _impostor(x):
    return x + 1


def test_a_graph_whose_calls_resolve_to_other_functions_is_not_saved() -> None:
    """The code names `torch.neg`; the node calls another function of that name, so the
    graph rebuilt from the code calls something else (with as many calls)."""
    _impostor.__module__, _impostor.__qualname__, _impostor.__name__ = "torch", "neg", "neg"
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    graph.output((graph.call_function(_impostor, (x,)),))
    gm = torch.fx.GraphModule({}, graph)
    assert "torch.neg(x)" in gm.code and _impostor(torch.ones(1)).item() == 2.0
    with pytest.raises(FusedGraphError, match=r"^the fused graph changes when rebuilt"):
        dumps_fused_graph(FusedGraph("src", gm), manager=GraphFusionPassManager(), backend="eager")


def test_graph_digest_reads_nested_large_and_plain_attributes() -> None:
    def module(weight: torch.Tensor, number: int) -> torch.fx.GraphModule:
        graph = torch.fx.Graph()
        x = graph.placeholder("x")
        w = graph.get_attr("inner.weight")
        n = graph.get_attr("number")
        graph.output((graph.call_function(torch.add, (x, w)), n))
        inner = torch.nn.Module()
        inner.register_buffer("weight", weight)
        return torch.fx.GraphModule({"inner.weight": weight, "number": number}, graph)

    big = torch.zeros(64, 64)  # large enough that repr() leaves most values out
    changed = big.clone()
    changed[31, 17] = 1.0
    base = fused_mod.graph_digest(module(big, 3))
    assert base == fused_mod.graph_digest(module(big.clone(), 3))
    assert base != fused_mod.graph_digest(module(changed, 3))
    assert base != fused_mod.graph_digest(module(big, 4))


def test_the_compile_range_reaches_the_passes() -> None:
    # Passes bounded to at most 8 tokens run for the range (1, 8) and not without a range.
    gm, args = torch.fx.symbolic_trace(block), block_inputs()
    for compile_range, rewrites in (((1, 8), 1), (None, 0)):
        manager = GraphFusionPassManager()
        for p in manager.passes:
            p.max_tokens = 8
        compile_graph_fused(gm, args, manager=manager, compile_range=compile_range)
        counts = manager.last_counts
        assert (counts["norm_quant"], counts["muls_add"]) == (rewrites, rewrites), compile_range
