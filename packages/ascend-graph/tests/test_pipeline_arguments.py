"""compile_graph hands its compile range and NPU options on to every backend path."""

from __future__ import annotations

import sys
import types

import pytest
import torch
from ascend_graph import GraphFusionPassManager
from ascend_graph.npu_graph_ex import NpuGraphOptions
from ascend_graph.pipeline import compile_graph
from torch import fx


def _targets(gm: fx.GraphModule) -> list[str]:
    return [str(n.target) for n in gm.graph.nodes if n.op == "call_function"]


def _inputs() -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(5)
    return torch.randn(4, 8, generator=gen), torch.randn(4, 8, generator=gen)


@pytest.mark.parametrize(("compile_range", "fused"), [((1, 4), 1), ((1, 5), 0), (None, 0)])
@pytest.mark.parametrize("backend", ["eager", "inductor"])
def test_compile_range_reaches_the_passes(
    backend: str, compile_range, fused: int, scaled_sum, bounded_manager
) -> None:
    manager = bounded_manager()
    graphs: list[fx.GraphModule] = []
    x, y = _inputs()
    with torch.no_grad():
        fn = compile_graph(fx.symbolic_trace(scaled_sum), [x, y], manager=manager,
                           backend=backend, compile_range=compile_range,
                           on_graph=graphs.append)  # fmt: skip
        (got,) = fn(x, y)
    assert manager.last_counts["muls_add"] == fused
    assert ("ascend.muls_add.default" in _targets(graphs[0])) == bool(fused)
    torch.testing.assert_close(got, x * 2.5 + y)


def _fake_npugraph_ex() -> types.ModuleType:
    ext = types.ModuleType("npugraph_ex")

    class CompilerConfig:
        pass

    def get_npu_backend(compiler_config):  # type: ignore[no-untyped-def]
        ext.last_config = compiler_config  # type: ignore[attr-defined]
        return lambda gm, inputs: gm

    ext.CompilerConfig = CompilerConfig  # type: ignore[attr-defined]
    ext.get_npu_backend = get_npu_backend  # type: ignore[attr-defined]
    return ext


@pytest.mark.parametrize(
    ("options", "static"),
    [(NpuGraphOptions(static_kernel=True, decode_batch_sizes=(1, 8)), True), (None, False)],
)
def test_npu_options_reach_the_extension(
    monkeypatch, options, static: bool, scaled_sum
) -> None:
    ext = _fake_npugraph_ex()
    monkeypatch.setitem(sys.modules, "npugraph_ex", ext)
    x, y = _inputs()
    with torch.no_grad():
        fn = compile_graph(fx.symbolic_trace(scaled_sum), [x, y],
                           manager=GraphFusionPassManager(), backend="npugraph_ex",
                           npu_options=options)  # fmt: skip
        (got,) = fn(x, y)
    config = ext.last_config  # type: ignore[attr-defined]
    assert getattr(config, "static_kernel_compile", False) is static
    if static:
        assert config._vllm_aclnn_static_kernel_sym_range == [1, 8]
    torch.testing.assert_close(got, x * 2.5 + y)
