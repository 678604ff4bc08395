"""Host-CPU compilation settings and inductor's inlining of the ascend ops after the passes."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch


@pytest.fixture
def fresh_lowerings() -> Iterator[None]:
    from ascend_kernels.inductor_lowering import reset_inductor_lowerings

    reset_inductor_lowerings()
    yield
    reset_inductor_lowerings()
    torch._dynamo.reset()


def test_host_cpu_compiles_one_graph_with_inductors_own_precision(make_vllm_config) -> None:
    cc = make_vllm_config().compilation_config
    assert cc.splitting_ops == []  # one graph, as stock vLLM CPU compiles it
    # Not rounded at every low-precision op of the model (the ascend ops round themselves):
    # fused intermediates stay float32, as in stock vLLM's compiled graph.
    assert "emulate_precision_casts" not in cc.inductor_compile_config
    assert cc.inductor_compile_config["realize_cpu_opcount_threshold"] == 100
    eager = make_vllm_config(enforce_eager=True).compilation_config
    assert "emulate_precision_casts" not in eager.inductor_compile_config
    assert "realize_cpu_opcount_threshold" not in eager.inductor_compile_config


def test_cpu_pass_manager_registers_the_lowerings_and_keys_the_cache(
    make_vllm_config, fresh_lowerings
) -> None:
    from ascend_kernels.inductor_lowering import (
        lowering_fingerprint,
        registered_inductor_lowerings,
    )
    from ascend_kernels.ops import DECOMPOSITIONS
    from vllm_ascend.compilation.pass_manager import AscendFusionPass, AscendPassManager

    assert registered_inductor_lowerings() == []
    config = make_vllm_config()
    manager = AscendPassManager()
    manager.configure(config)
    assert registered_inductor_lowerings() == sorted(
        f"ascend.{name}.default" for name in DECOMPOSITIONS)
    fusion_pass = manager.passes[-1]
    assert isinstance(fusion_pass, AscendFusionPass)
    assert fusion_pass.lowering == lowering_fingerprint()
    # Generated code depends on the lowerings: they are part of the compile-cache key.
    assert fusion_pass.uuid() != AscendFusionPass(config, manager.fusion, None).uuid()


def test_passes_see_ascend_ops_and_the_generated_code_calls_none(fresh_lowerings) -> None:
    import ascend_kernels  # noqa: F401
    from torch._inductor import config as inductor_config
    from torch._inductor.utils import run_and_get_code
    from vllm_ascend.compilation.pass_manager import register_cpu_lowerings

    seen: list[str] = []

    class Recorder:
        """Stands in for the post-grad pass manager: records the ascend ops it is shown."""

        def __call__(self, graph: torch.fx.Graph) -> None:
            seen.extend(str(n.target) for n in graph.nodes if str(n.target).startswith("ascend."))

        def uuid(self) -> str:
            return "recorder"

    def layer(x: torch.Tensor, residual: torch.Tensor, w: torch.Tensor
              ) -> tuple[torch.Tensor, torch.Tensor]:
        out, res = torch.ops.ascend.add_rms_norm(x, residual, w, 1e-6)
        return torch.ops.ascend.rms_norm(out * 2.0, w, 1e-6), res

    register_cpu_lowerings()
    args = (torch.randn(5, 64), torch.randn(5, 64), torch.randn(64))
    torch._dynamo.reset()
    with inductor_config.patch(post_grad_custom_post_pass=Recorder(), fx_graph_cache=False):
        got, code = run_and_get_code(torch.compile(layer, backend="inductor"), *args)
    assert seen == ["ascend.add_rms_norm.default", "ascend.rms_norm.default"]
    assert "torch.ops.ascend" not in "\n".join(code)
    expected = layer(*args)  # eager: the reference kernels
    for a, b in zip(got, expected, strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
