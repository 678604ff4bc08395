"""The Ascend pass manager: which passes run, their switches, and the host-CPU lowerings."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch
from vllm_ascend.runtime.process_setup import reset_process_setup


def test_pass_manager_follows_the_resolved_switches(make_vllm_config) -> None:
    from vllm_ascend.compilation.pass_manager import (
        AscendPassManager,
        SafeFixFunctionalizationPass,
        fusion_report,
    )

    reset_process_setup()
    on, off = AscendPassManager(), AscendPassManager()
    on.configure(make_vllm_config())
    off.configure(make_vllm_config(additional_config={"ascend_compilation_config": {
        "fuse_qknorm_rope": False, "fuse_norm_quant": False, "fuse_muls_add": False}}))
    assert "qknorm_rope" in on.fusion.enabled and "qknorm_rope" not in off.fusion.enabled
    assert on.fusion.soc == "cpu"
    assert isinstance(on.fix_functionalization, SafeFixFunctionalizationPass)
    assert on.passes[-1].uuid() != off.passes[-1].uuid()  # switches change the cache key
    assert set(fusion_report()) >= {"qknorm_rope"} and sum(fusion_report().values()) == 0
    reset_process_setup()


def test_sequence_parallel_enables_the_allgather_cleanup_with_vllms_ops() -> None:
    import ascend_config
    from vllm_ascend.compilation.pass_manager import build_fusion_manager, sequence_parallel_ops

    handles = sequence_parallel_ops()
    assert handles == (torch.ops.vllm.all_gather.default,
                       torch.ops.vllm.sequence_parallel_chunk_impl.default)
    switches = ascend_config.resolve({}).ascend_compilation_config
    facts = ascend_config.DeploymentFacts(soc="cpu")
    plain = build_fusion_manager(switches, "cpu", facts)
    sp = build_fusion_manager(switches, "cpu", facts, sequence_parallel=True)
    assert "allgather_chunk_cleanup" not in plain.enabled
    assert "allgather_chunk_cleanup" in sp.enabled
    assert plain.uuid() != sp.uuid()


def test_fusion_pass_hands_vllms_compile_range_to_the_manager(make_vllm_config) -> None:
    from vllm.compilation.passes.inductor_pass import pass_context
    from vllm.config.utils import Range
    from vllm_ascend.compilation.pass_manager import AscendFusionPass

    class Recorder:
        def __init__(self) -> None:
            self.ranges: list[object] = []

        def __call__(self, graph, compile_range=None) -> None:
            self.ranges.append(compile_range)

        def is_applicable_for_range(self, compile_range) -> bool:
            return compile_range.end <= 64

        def uuid(self) -> str:
            return "recorder"

    recorder = Recorder()
    fusion_pass = AscendFusionPass(make_vllm_config(), recorder)
    small, large = Range(start=1, end=64), Range(start=65, end=512)
    with pass_context(small):
        fusion_pass(torch.fx.Graph())
    assert recorder.ranges == [small]
    assert fusion_pass.is_applicable_for_range(small)
    assert not fusion_pass.is_applicable_for_range(large)


@pytest.fixture
def fresh_lowerings() -> Iterator[None]:
    from ascend_kernels.inductor_lowering import reset_inductor_lowerings

    reset_inductor_lowerings()
    yield
    reset_inductor_lowerings()
    torch._dynamo.reset()


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
