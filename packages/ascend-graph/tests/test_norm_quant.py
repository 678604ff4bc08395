"""norm_quant: add_rms_norm/rms_norm + quantize/dynamic_quant/dynamic_mx_quant fusions."""

from __future__ import annotations

import pytest
import torch
from ascend_graph import GraphFusionPassManager
from ascend_graph.passes.fusion_passes import NormQuantPass
from torch.fx.experimental.proxy_tensor import make_fx

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
