"""muls_add: `x * scale + y` (either operand order) -> ascend.muls_add."""

from __future__ import annotations

import pytest
import torch
from ascend_graph import GraphFusionPassManager
from ascend_graph.passes.fusion_passes import MulsAddPass
from torch import nn
from torch.fx.experimental.proxy_tensor import make_fx

FUSED = "ascend.muls_add"


def _inputs(dtype: torch.dtype, tokens: int = 4) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(3)
    return (
        torch.randn(tokens, 64, generator=gen).to(dtype),
        torch.randn(tokens, 64, generator=gen).to(dtype),
    )


def _scales(result) -> list[float]:
    return [
        n.args[2] for gm in result.graphs for n in gm.graph.nodes
        if n.op == "call_function" and str(n.target) == "ascend.muls_add.default"
    ]  # fmt: skip


@pytest.mark.parametrize(("dtype", "dynamic"), [(torch.float32, False), (torch.bfloat16, True)])
def test_fuses_both_operand_orders(models, compile_module, close, dtype, dynamic) -> None:
    module = models["moe"](scale=2.5).to(dtype)
    result = compile_module(module, _inputs(dtype), config={"muls_add_scale": 2.5}, dynamic=dynamic)
    assert result.symbolic() == dynamic
    counts = result.op_counts()
    assert counts[FUSED] == 2 and result.report["muls_add"] == 2
    assert counts["aten.mul"] == 0 and counts["aten.add"] == 0
    assert _scales(result) == [2.5, 2.5]
    close(result.outputs, result.reference, dtype)


def test_two_models_with_different_scales(models, compile_module, close) -> None:
    a = compile_module(models["moe"](scale=2.5), _inputs(torch.float32),
                       config={"muls_add_scale": 2.5})  # fmt: skip
    b = compile_module(models["moe"](scale=1.5), _inputs(torch.float32),
                       config={"muls_add_scale": 1.5})  # fmt: skip
    assert _scales(a) == [2.5, 2.5] and _scales(b) == [1.5, 1.5]
    close(a.outputs, a.reference, torch.float32)
    close(b.outputs, b.reference, torch.float32)


def test_near_miss_other_scale_is_left_alone(models, compile_module) -> None:
    result = compile_module(models["moe"](scale=1.5), _inputs(torch.float32),
                            config={"muls_add_scale": 2.5})  # fmt: skip
    assert result.report["muls_add"] == 0 and result.op_counts()[FUSED] == 0


class _NearMisses(nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, ...]:
        scaled = x * 2.5
        shared_product = scaled + y  # the product is also returned: extra user
        broadcast = x * 2.5 + y[:1]  # broadcasting add: the kernel does not broadcast
        return shared_product, scaled, broadcast


def test_near_miss_extra_user_and_broadcast(compile_module, close) -> None:
    result = compile_module(_NearMisses(), _inputs(torch.float32),
                            config={"muls_add_scale": 2.5})  # fmt: skip
    assert result.report["muls_add"] == 0
    close(result.outputs, result.reference, torch.float32)


def test_any_scale_when_unset(models, compile_module) -> None:
    result = compile_module(models["moe"](scale=0.75), _inputs(torch.float32))
    assert _scales(result) == [0.75, 0.75]


# --- the matcher at its boundaries, on make_fx graphs (any scale registered) ---------------
def _run(fn, edit=None):
    """(sites fused, graph before, graph after, fused node or None, outputs) of make_fx(fn)."""
    inputs = _inputs(torch.float32)
    gm = make_fx(fn, tracing_mode="fake")(*inputs)
    if edit is not None:
        edit(gm.graph)
    before = [str(n.format_node()) for n in gm.graph.nodes]
    count = GraphFusionPassManager(dtypes=["float32"]).run(gm.graph)["muls_add"]
    gm.recompile()
    after = [str(n.format_node()) for n in gm.graph.nodes]
    fused = gm.graph.find_nodes(op="call_function", target=torch.ops.ascend.muls_add.default)
    return count, before, after, (fused[0] if fused else None), gm(*inputs), fn(*inputs)


def test_a_bool_factor_is_not_a_scale_and_one_is(close) -> None:
    count, before, after, _, got, want = _run(lambda x, y: x * True + y)
    assert count == 0 and after == before and torch.equal(got, want)
    count, _, _, fused, got, want = _run(lambda x, y: x * 1.0 + y)
    assert count == 1 and fused is not None and fused.args[2] == 1.0
    close(got, want, torch.float32)


@pytest.mark.parametrize("index", [0, 1], ids=["x", "y"])
def test_an_operand_without_an_example_value_is_left_alone(index) -> None:
    def forget(graph: torch.fx.Graph) -> None:
        del graph.find_nodes(op="placeholder")[index].meta["val"]

    count, before, after, _, got, want = _run(lambda x, y: x * 2.5 + y, forget)
    assert count == 0 and after == before and torch.equal(got, want)


def test_the_fused_node_records_the_sum_example_value(close) -> None:
    count, _, _, fused, got, want = _run(lambda x, y: y + x * 2.5)
    assert count == 1 and fused is not None
    val = fused.meta["val"]
    assert (val.dtype, tuple(val.shape)) == (want.dtype, tuple(want.shape)) == (torch.float32,
                                                                                (4, 64))
    close(got, want, torch.float32)


def _scaled_add(scale: float):  # type: ignore[no-untyped-def]
    def fn(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return x * scale + y

    return fn


def _xy(dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(11)
    return torch.randn(4, 8, generator=gen).to(dtype), torch.randn(4, 8, generator=gen).to(dtype)


@pytest.mark.parametrize(
    ("soc", "dtype", "patterns"),
    [
        ("310P", torch.bfloat16, 0),  # 310P has no bfloat16 kernels
        ("310P", torch.float16, 1),
        ("cpu", torch.bfloat16, 1),
    ],
)
def test_muls_add_pass_asks_capability_for_its_soc_and_dtype(soc, dtype, patterns) -> None:
    p = MulsAddPass(scale=2.0, dtypes=[dtype], soc=soc)
    assert p.soc == soc
    assert len(p.settings()["patterns"]) == patterns
    x, y = _xy(dtype)
    gm = make_fx(_scaled_add(2.0))(x, y)
    assert p(gm.graph) == patterns


def test_muls_add_pass_checks_its_soc_without_dtypes() -> None:
    with pytest.raises(ValueError, match="Z9"):
        MulsAddPass(dtypes=(), soc="Z9")
