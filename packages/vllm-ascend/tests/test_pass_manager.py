"""The Ascend pass manager: which passes run, their switches, and the host-CPU lowerings."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch
from vllm_ascend.process.process_setup import reset_process_setup


def test_pass_manager_follows_the_resolved_switches(make_vllm_config) -> None:
    from vllm_ascend.compilation.pass_manager import (
        AscendPassManager,
        SafeFixFunctionalizationPass,
        fusion_report,
    )

    reset_process_setup()
    on, off = AscendPassManager(), AscendPassManager()
    on_config = make_vllm_config()
    on.configure(on_config)
    off.configure(make_vllm_config(additional_config={"ascend_compilation_config": {
        "fuse_qknorm_rope": False, "fuse_norm_quant": False, "fuse_muls_add": False}}))
    assert "qknorm_rope" in on.fusion.enabled and "qknorm_rope" not in off.fusion.enabled
    assert on.fusion.soc == "cpu"
    assert isinstance(on.fix_functionalization, SafeFixFunctionalizationPass)
    assert on.passes[-1].uuid() != off.passes[-1].uuid()  # switches change the cache key
    report = fusion_report(on_config)
    assert set(report) >= {"qknorm_rope"} and sum(report.values()) == 0
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
            self.last_sites: dict[str, object] = {}  # what the last run found, per pass

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


def _scaled_adds(broadcast: bool) -> torch.fx.Graph:
    """Two `x * 2.5 + y` sites (y broadcasts when `broadcast`: the fused kernel cannot)."""
    from torch.fx.experimental.proxy_tensor import make_fx

    def fn(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x * 2.5 + y, (x + 1.0) * 2.5 + y

    y = torch.randn(64) if broadcast else torch.randn(2, 64)
    return make_fx(fn, tracing_mode="fake")(torch.randn(2, 64), y).graph


def test_fusion_sites_sum_expected_and_matched_and_flag_cache_loads(
    make_vllm_config, monkeypatch
) -> None:
    from vllm.compilation.counter import compilation_counter
    from vllm_ascend.compilation.pass_manager import (
        AscendPassManager,
        fusion_report,
        fusion_sites,
    )

    one, two = make_vllm_config(), make_vllm_config()
    # no compile yet
    assert fusion_sites(one) == {"passes": {}, "graphs": 0, "ascend_ops": {},
                                 "loaded_artifacts": 0, "from_cache": False}
    # vLLM counted a compiled artifact it loaded from its cache (a warm AOT start builds no
    # pass manager at all)
    with monkeypatch.context() as patch:
        patch.setattr(compilation_counter, "num_aot_artifacts_loaded",
                      compilation_counter.num_aot_artifacts_loaded + 1)
        assert fusion_sites(one)["from_cache"] is True
        assert fusion_sites(one)["loaded_artifacts"] == 1
    first, again, second = AscendPassManager(), AscendPassManager(), AscendPassManager()
    first.configure(one)
    again.configure(one)  # another pass manager of the same engine: the engine's one manager
    second.configure(two)
    assert again.fusion is first.fusion and second.fusion is not first.fusion
    # Configured but no graph went through the passes: every graph came from a cache.
    loaded = fusion_sites(one)
    assert loaded["from_cache"] is True and loaded["graphs"] == 0
    assert loaded["passes"]["muls_add"] == {"expected": 0, "matched": 0}
    first.fusion(_scaled_adds(broadcast=False))
    second.fusion(_scaled_adds(broadcast=False))
    second.fusion(_scaled_adds(broadcast=True))
    # Each engine's own sites: 2 candidates per graph, the broadcast one not rewritten.
    sites, other = fusion_sites(one), fusion_sites(two)
    assert (sites["graphs"], other["graphs"]) == (1, 2) and sites["from_cache"] is False
    assert sites["passes"]["muls_add"] == {"expected": 2, "matched": 2}
    assert other["passes"]["muls_add"] == {"expected": 4, "matched": 2}
    assert sites["passes"]["noop_elimination"]["expected"] is None
    assert (fusion_report(one)["muls_add"], fusion_report(two)["muls_add"]) == (2, 2)


def test_a_pass_short_of_its_sites_warns_once_per_process(make_vllm_config, caplog) -> None:
    import logging

    from vllm_ascend.compilation.pass_manager import AscendPassManager

    first, second = AscendPassManager(), AscendPassManager()
    first.configure(make_vllm_config())
    second.configure(make_vllm_config())
    with caplog.at_level(logging.WARNING, logger="vllm_ascend.engine.fusion_manager"):
        for manager in (first, second, first):
            manager.fusion(_scaled_adds(broadcast=True))
    warnings = [r for r in caplog.records if r.name == "vllm_ascend.engine.fusion_manager"]
    (record,) = warnings
    message = record.getMessage()
    assert message.startswith("Ascend fusion pass muls_add rewrote 0 of 2 candidate sites")
    assert "matching stopped at node 'add" in message and "(aten.add.Tensor)" in message


def test_qk_norm_models_are_known_by_their_model_type() -> None:
    import types

    from vllm_ascend.compilation.pass_manager import qk_norm_model_type

    def config(model_type: str | None) -> object:
        hf = types.SimpleNamespace(model_type=model_type)
        return types.SimpleNamespace(model_config=types.SimpleNamespace(hf_config=hf))

    assert qk_norm_model_type(config("qwen3")) == "qwen3"
    assert qk_norm_model_type(config("qwen3_moe")) == "qwen3_moe"
    assert qk_norm_model_type(config("llama")) is None  # no q/k norms: nothing to expect
    assert qk_norm_model_type(types.SimpleNamespace(model_config=None)) is None


def test_a_qk_norm_model_whose_rope_has_no_candidate_warns_naming_the_rope(
        make_vllm_config, caplog) -> None:
    import logging

    from vllm_ascend.compilation.pass_manager import AscendFusionPass, AscendPassManager

    manager = AscendPassManager()
    manager.configure(make_vllm_config())  # the tiny Qwen3: q/k norms before rope
    (fusion_pass,) = [p for p in manager.passes if isinstance(p, AscendFusionPass)]
    assert fusion_pass.qk_norm_model == "qwen3"
    # A rope whose q and k come from no RMS norm: what a vLLM that changed its norm op gives.
    graph = torch.fx.Graph()
    positions, q, k, cache = (graph.placeholder(n) for n in ("positions", "q", "k", "cache"))
    rope = graph.call_function(torch.ops.ascend.rotary_embedding.default,
                               (positions, q, k, cache, 64, 64, True))
    graph.output(rope)
    with caplog.at_level(logging.WARNING, logger="vllm_ascend.engine.fusion_manager"):
        for _ in range(2):
            fusion_pass.fusion(graph)
            fusion_pass.check_model_expectations(graph)
    assert fusion_pass.fusion.last_sites["qknorm_rope"].expected == 0  # the pass saw nothing
    (record,) = [r for r in caplog.records if r.name == "vllm_ascend.engine.fusion_manager"]
    message = record.getMessage()
    assert message.startswith("Ascend fusion pass qknorm_rope applies to this qwen3 model")
    assert f"matching stopped at node {rope.name!r} (ascend.rotary_embedding.default)" in message
