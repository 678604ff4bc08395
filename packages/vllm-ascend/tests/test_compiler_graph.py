"""AscendCompiler over ascend-graph's pipeline and the static graph wrapper."""

from __future__ import annotations

import types

import pytest
import torch
from vllm_ascend.compilation.compiler import PASS_KEY, AscendCompiler, graph_backend


def test_backend_choice() -> None:
    on = types.SimpleNamespace(ascend_compilation_config=types.SimpleNamespace(
        enable_npugraph_ex=True))
    off = types.SimpleNamespace(ascend_compilation_config=types.SimpleNamespace(
        enable_npugraph_ex=False))
    from vllm.config import CUDAGraphMode

    # npugraph_ex builds whole-forward graphs only (the reference disables it for piecewise).
    for mode in (CUDAGraphMode.FULL, CUDAGraphMode.FULL_DECODE_ONLY):
        assert graph_backend(on, mode) == "npugraph_ex" and graph_backend(off, mode) == "eager"
    for mode in (CUDAGraphMode.PIECEWISE, CUDAGraphMode.FULL_AND_PIECEWISE, CUDAGraphMode.NONE,
                 None):
        assert graph_backend(on, mode) == "eager"


def test_hash_covers_the_fusion_settings(make_vllm_config) -> None:
    compiler = AscendCompiler()
    default = compiler.compute_hash(make_vllm_config(enforce_eager=True))
    again = compiler.compute_hash(make_vllm_config(enforce_eager=True))
    off = compiler.compute_hash(make_vllm_config(
        enforce_eager=True, additional_config={"ascend_compilation_config":
                                               {"fuse_qknorm_rope": False}}))
    assert default == again and default != off and len(default) == 10
    assert not hasattr(compiler, "vllm_config")  # compute_hash stores no config


def test_compile_runs_the_passes_and_keeps_the_graph(ascend_cpu_platform) -> None:
    import ascend_kernels  # noqa: F401
    from ascend_graph import GraphFusionPassManager

    def model(x, residual, w):
        out, res = torch.ops.ascend.add_rms_norm(x, residual, w, 1e-6)
        return out * 2.0, res

    gm = torch.fx.symbolic_trace(model)
    before = gm.code
    args = [torch.randn(4, 32), torch.randn(4, 32), torch.randn(32)]
    compiler = AscendCompiler()
    compiler.initialize_cache("/tmp/unused", disable_cache=True, prefix="backbone")
    fn, handle = compiler.compile(gm, args, {PASS_KEY: GraphFusionPassManager()}, None)
    assert handle is None and gm.code == before
    got, expected = fn(*args), model(*args)
    assert all(torch.allclose(a, b) for a, b in zip(got, expected, strict=True))
    with pytest.raises(RuntimeError, match="graph_fusion_manager"):
        compiler.compile(gm, args, {}, None)
    with pytest.raises(ValueError, match=r"expected the \(key, path\) pair"):
        compiler.load(None, gm, args, 0, None)


def test_graph_wrapper_captures_per_batch_descriptor(ascend_cpu_platform) -> None:
    from ascend_graph import RecordingRuntime
    from vllm.config import CUDAGraphMode
    from vllm.forward_context import BatchDescriptor
    from vllm_ascend.compilation.graph_wrapper import AscendGraphWrapper, forward_context_key

    calls = []

    def runnable(x):
        calls.append(x.shape[0])
        return x + 1

    runnable.tag = "model"
    state = {"key": (BatchDescriptor(num_tokens=4), CUDAGraphMode.PIECEWISE)}
    runtime = RecordingRuntime()
    wrapper = AscendGraphWrapper(runnable, None, CUDAGraphMode.PIECEWISE, runtime=runtime,
                                 context=lambda: state["key"])
    x = torch.zeros(4)
    wrapper(x)
    wrapper(x)
    assert calls == [4] and len(wrapper.entries) == 1  # captured once, then replayed
    state["key"] = (BatchDescriptor(num_tokens=4), CUDAGraphMode.NONE)
    wrapper(x)
    assert calls == [4, 4]  # other modes run the runnable directly
    assert wrapper.tag == "model" and wrapper.unwrap() is runnable
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        _ = wrapper.nope
    assert forward_context_key() == (None, "NONE")


def test_pass_manager_follows_the_resolved_switches(make_vllm_config) -> None:
    from vllm_ascend.compilation.pass_manager import (
        AscendPassManager,
        SafeFixFunctionalizationPass,
        fusion_report,
        reset_fusion_report,
    )

    reset_fusion_report()
    on, off = AscendPassManager(), AscendPassManager()
    on.configure(make_vllm_config())
    off.configure(make_vllm_config(additional_config={"ascend_compilation_config": {
        "fuse_qknorm_rope": False, "fuse_norm_quant": False, "fuse_muls_add": False}}))
    assert "qknorm_rope" in on.fusion.enabled and "qknorm_rope" not in off.fusion.enabled
    assert on.fusion.soc == "cpu"
    assert isinstance(on.fix_functionalization, SafeFixFunctionalizationPass)
    assert on.passes[-1].uuid() != off.passes[-1].uuid()  # switches change the cache key
    assert set(fusion_report()) >= {"qknorm_rope"} and sum(fusion_report().values()) == 0
    reset_fusion_report()


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
