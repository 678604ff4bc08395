"""norm_quant: add_rms_norm/rms_norm + quantize/dynamic_quant/dynamic_mx_quant fusions."""

from __future__ import annotations

import operator

import pytest
import torch
from ascend_graph import GraphFusionPassManager
from ascend_graph.passes.base import PatternPass
from ascend_graph.passes.fusion_passes import NormQuantPass
from ascend_graph.passes.norm_quant import AddRmsNormQuantPattern
from torch.fx.experimental.proxy_tensor import make_fx
from torch.fx.passes.fake_tensor_prop import FakeTensorProp

FUSED = {
    "ascend.add_rms_norm_quant": 2,
    "ascend.add_rms_norm_dynamic_quant": 2,
    "ascend.add_rms_norm_dynamic_mx_quant": 1,
    "ascend.rms_norm_dynamic_mx_quant": 1,
}
UNFUSED = ("ascend.quantize", "ascend.dynamic_quant", "ascend.dynamic_mx_quant")


def _inputs(dtype: torch.dtype, tokens: int = 5) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(1)
    return (
        torch.randn(tokens, 64, generator=gen).to(dtype),
        torch.randn(tokens, 64, generator=gen).to(dtype),
    )


@pytest.mark.parametrize(
    ("dtype", "dynamic"),
    [(torch.float32, False), (torch.bfloat16, False), (torch.float32, True),
     (torch.bfloat16, True)],
)  # fmt: skip
def test_every_variant_fuses(models, compile_module, close, dtype, dynamic) -> None:
    module = models["norm_quant"]().to(dtype)
    result = compile_module(module, _inputs(dtype), dynamic=dynamic)
    assert result.symbolic() == dynamic
    counts = result.op_counts()
    for op, expected in FUSED.items():
        assert counts[op] == expected, op
    assert not any(counts[op] for op in UNFUSED)
    assert counts["ascend.add_rms_norm"] == 0 and counts["ascend.rms_norm"] == 0
    assert result.report["norm_quant"] == 6
    close(result.outputs, result.reference, dtype)


def test_dynamic_shapes_serve_other_token_counts(models, compile_module, close) -> None:
    module = models["norm_quant"]()
    result = compile_module(module, _inputs(torch.float32, 5), dynamic=True)
    assert result.report["norm_quant"] == 6
    x, r = _inputs(torch.float32, 9)
    with torch.no_grad():
        close(result.fn(x, r), module(x, r), torch.float32)
    assert len(result.graphs) == 1  # served by the same symbolic graph, no recompile


def test_near_miss_eps_is_left_alone(models, compile_module) -> None:
    module = models["norm_quant"](eps=1e-3)  # not among the registered eps values
    result = compile_module(module, _inputs(torch.float32))
    assert result.report["norm_quant"] == 0
    assert result.op_counts()["ascend.quantize"] == 2


def test_near_miss_extra_user_of_norm_output(models, compile_module, close) -> None:
    module = models["norm_quant"](y_extra_user=True)
    result = compile_module(module, _inputs(torch.float32))
    counts = result.op_counts()
    # the first norm output also feeds `y * 2`: that site stays; the other five fuse
    assert result.report["norm_quant"] == 5
    assert counts["ascend.quantize"] == 1 and counts["ascend.add_rms_norm_quant"] == 1
    close(result.outputs, result.reference, torch.float32)


def test_mixed_streams_never_fuse() -> None:
    pattern = next(p for p in NormQuantPass(dtypes=["float32"]).patterns if "Dynamic" in repr(p))
    gm = make_fx(pattern.search, tracing_mode="fake")(*pattern.example_inputs())
    for node in gm.graph.nodes:
        if node.op == "call_function" and "dynamic" in str(node.target):
            node.meta["stream_label"] = "aux"  # the norm stays on the default stream
    assert GraphFusionPassManager(dtypes=["float32"]).run(gm.graph)["norm_quant"] == 0
    for node in gm.graph.nodes:
        if node.op == "call_function":
            node.meta["stream_label"] = "aux"  # all on one non-default stream: fuses
    assert GraphFusionPassManager(dtypes=["float32"]).run(gm.graph)["norm_quant"] == 1


def test_w4a4_and_capability_switch_off(models, compile_module) -> None:
    assert "norm_quant" not in GraphFusionPassManager(w4a4=True).enabled
    module = models["norm_quant"]()
    a2 = compile_module(module, _inputs(torch.float32), config={"soc": "A2"})
    assert a2.report["norm_quant"] == 0  # A2 kernels: bf16/fp16 only, no MX
    names = {type(p).__name__ for p in NormQuantPass(soc="A2").patterns}
    assert names == {"AddRmsNormQuantPattern", "AddRmsNormDynamicQuantPattern"}
    a5 = {type(p).__name__ for p in NormQuantPass(soc="A5").patterns}
    assert "RmsNormDynamicMxQuantPattern" in a5


@pytest.mark.parametrize("quant", ["static", "dynamic"])
def test_fuses_when_the_new_residual_is_unused(quant, close) -> None:
    """Only the norm output is used: the fused kernel's residual output stays unused."""
    A = torch.ops.ascend

    def fn(x, r, w, scale, offset):
        y = A.add_rms_norm(x, r, w, 1e-6)[0]
        return A.quantize(y, scale, offset) if quant == "static" else A.dynamic_quant(y)

    x, r = _inputs(torch.float32)
    inputs = (x, r, torch.rand(64) + 0.5, torch.tensor([0.02]), torch.tensor([1.0]))
    gm = make_fx(fn, tracing_mode="fake")(*inputs)
    assert GraphFusionPassManager().run(gm.graph)["norm_quant"] == 1
    gm.recompile()
    fused = [str(n.target) for n in gm.graph.nodes if "add_rms_norm" in str(n.target)]
    assert fused == [f"ascend.{FUSED_NAMES[quant]}.default"]
    close(gm(*inputs), fn(*inputs), torch.float32)


FUSED_NAMES = {"static": "add_rms_norm_quant", "dynamic": "add_rms_norm_dynamic_quant"}


# --- the matcher at its boundaries, on graphs traced with make_fx and then edited ----------
A = torch.ops.ascend


def _static(bias: bool = False):
    """`quantize(add_rms_norm(x, r, w, eps[, b])[0])`, the new residual returned too."""

    def fn(x, r, w, b, scale, offset):
        y, res = A.add_rms_norm(x, r, w, 1e-6, b if bias else None)
        return A.quantize(y, scale, offset), res

    x, r = _inputs(torch.float32)
    gen = torch.Generator().manual_seed(4)
    w, b = torch.rand(64, generator=gen) + 0.5, 0.1 * torch.randn(64, generator=gen)
    return fn, (x, r, w, b, torch.tensor([0.02]), torch.tensor([1.0]))


def _printout(graph: torch.fx.Graph) -> list[str]:
    return [f"{n.name} {n.op} {n.target} {n.args} {n.kwargs}" for n in graph.nodes]


def _run(fn, inputs, edit=None, run=None):
    """(sites fused, graph before, graph after, graph outputs) of make_fx(fn), edited."""
    gm = make_fx(fn, tracing_mode="fake")(*inputs)
    if edit is not None:
        edit(gm.graph)
        gm.recompile()
    before = _printout(gm.graph)
    count = (run or GraphFusionPassManager().run)(gm.graph)
    count = count if isinstance(count, int) else count["norm_quant"]
    gm.graph.lint()
    gm.recompile()
    with torch.no_grad():
        return count, before, _printout(gm.graph), gm(*inputs)


def _keywords(target, names):
    def edit(graph: torch.fx.Graph) -> None:
        for node in graph.find_nodes(op="call_function", target=target):
            keep = len(node.args) - len(names)
            node.kwargs = dict(zip(names, node.args[keep:], strict=True))
            node.args = node.args[:keep]

    return edit


def test_eps_and_bias_passed_by_keyword_fuse(close) -> None:
    fn, inputs = _static(bias=True)
    count, _, after, got = _run(fn, inputs, _keywords(A.add_rms_norm.default, ["eps", "bias"]))
    assert count == 1
    (line,) = [a for a in after if "add_rms_norm_quant.default" in a]
    assert "1e-06, b_1)" in line  # eps and the bias reach the fused kernel
    close(got, fn(*inputs), torch.float32)


def test_rms_norm_eps_passed_by_keyword_fuses(close) -> None:
    def fn(x, w):
        return A.dynamic_mx_quant(A.rms_norm(x, w, 1e-6))

    inputs = (_inputs(torch.float32)[0], torch.rand(64) + 0.5)
    count, _, after, got = _run(fn, inputs, _keywords(A.rms_norm.default, ["eps"]))
    assert count == 1
    (line,) = [a for a in after if "rms_norm_dynamic_mx_quant.default" in a]
    assert line.endswith("(x_1, w_1, 1e-06) {}")
    close(got, fn(*inputs), torch.float32)


@pytest.mark.parametrize("quant", ["static", "dynamic"])
def test_fuses_when_the_new_residual_was_pruned(quant, close) -> None:
    """No getitem of the residual at all (dead code eliminated, as in dynamo's graphs)."""

    def fn(x, r, w, scale, offset):
        y = A.add_rms_norm(x, r, w, 1e-6)[0]
        return A.quantize(y, scale, offset) if quant == "static" else A.dynamic_quant(y)

    x, r = _inputs(torch.float32)
    inputs = (x, r, torch.rand(64) + 0.5, torch.tensor([0.02]), torch.tensor([1.0]))

    def prune(graph: torch.fx.Graph) -> None:
        graph.eliminate_dead_code()
        assert len(graph.find_nodes(op="call_function", target=operator.getitem)) == (
            1 if quant == "static" else 3)  # fmt: skip

    count, _, after, got = _run(fn, inputs, prune)
    assert count == 1 and any(FUSED_NAMES[quant] in a for a in after)
    close(got, fn(*inputs), torch.float32)


def _second_norm_output_item(graph: torch.fx.Graph) -> None:
    """A second `getitem(norm, 0)` node, returned as an extra output."""
    (norm,) = graph.find_nodes(op="call_function", target=A.add_rms_norm.default)
    output = next(iter(graph.find_nodes(op="output")))
    with graph.inserting_before(output):
        again = graph.call_function(operator.getitem, (norm, 0))
    output.args = ((*output.args[0], again),)


def test_norm_output_read_twice_is_left_alone() -> None:
    fn, inputs = _static()
    count, before, after, got = _run(fn, inputs, _second_norm_output_item)
    assert count == 0 and after == before
    x, r, w, _, scale, offset = inputs
    y, res = A.add_rms_norm(x, r, w, 1e-6)
    for g, want in zip(got, (A.quantize(y, scale, offset), res, y), strict=True):
        assert torch.equal(g, want)


def test_output_0_of_another_norm_kernel_is_not_an_add_rms_norm() -> None:
    """torch's `_fused_rms_norm(x, shape, w, eps)` also has eps at index 3 and two outputs."""

    def fn(x, w, scale, offset):
        y = torch.ops.aten._fused_rms_norm.default(x, [64], w, 1e-6)[0]
        return A.quantize.default(y, scale, offset)

    inputs = (_inputs(torch.float32)[0], torch.rand(64) + 0.5, torch.tensor([0.02]),
              torch.tensor([1.0]))  # fmt: skip
    gm = torch.fx.symbolic_trace(fn)
    FakeTensorProp(gm).propagate(*inputs)
    before = _printout(gm.graph)
    assert GraphFusionPassManager().run(gm.graph)["norm_quant"] == 0
    assert _printout(gm.graph) == before
    gm.recompile()
    assert torch.equal(gm(*inputs), fn(*inputs))


def test_a_pass_with_the_no_bias_pattern_only_leaves_a_biased_site(close) -> None:
    single = PatternPass()
    single.register(AddRmsNormQuantPattern(eps=1e-6, dtype=torch.float32, bias=False))
    for bias in (True, False):
        fn, inputs = _static(bias)
        count, before, after, got = _run(fn, inputs, run=single)
        assert count == (0 if bias else 1) and (after == before) == bias
        close(got, fn(*inputs), torch.float32)


def test_an_mx_quantisation_whose_outputs_are_unused_still_fuses() -> None:
    """No getitem reads the quantisation: the fused node goes right after it."""

    def fn(x, w):
        A.dynamic_mx_quant(A.rms_norm(x, w, 1e-6))
        return x * 2

    def drop_items(graph: torch.fx.Graph) -> None:
        for item in graph.find_nodes(op="call_function", target=operator.getitem):
            graph.erase_node(item)

    inputs = (_inputs(torch.float32)[0], torch.rand(64) + 0.5)
    count, before, after, got = _run(fn, inputs, drop_items)
    assert not any("getitem" in line for line in before)
    assert count == 1
    targets = [a.split(" call_function ")[1].split(" (")[0] for a in after if "call_function" in a]
    assert targets == ["ascend.rms_norm_dynamic_mx_quant.default", "<built-in function getitem>",
                       "<built-in function getitem>", "aten.mul.Tensor"]  # fmt: skip
    assert torch.equal(got, inputs[0] * 2)
