"""AscendCompiler over ascend-graph's pipeline and the static graph wrapper."""

from __future__ import annotations

import types

import pytest
import torch
from vllm_ascend.compiler import PASS_KEY, AscendCompiler, graph_backend


def test_backend_choice() -> None:
    on = types.SimpleNamespace(ascend_compilation_config=types.SimpleNamespace(
        enable_npugraph_ex=True))
    off = types.SimpleNamespace(ascend_compilation_config=types.SimpleNamespace(
        enable_npugraph_ex=False))
    piecewise, none = types.SimpleNamespace(name="PIECEWISE"), types.SimpleNamespace(name="NONE")
    assert graph_backend(on, piecewise) == "npugraph_ex"
    assert graph_backend(on, none) == "eager" and graph_backend(off, piecewise) == "eager"


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
    with pytest.raises(NotImplementedError):
        compiler.load(None, gm, args, 0, None)


def test_graph_wrapper_captures_per_batch_descriptor(ascend_cpu_platform) -> None:
    from ascend_graph import RecordingRuntime
    from vllm.config import CUDAGraphMode
    from vllm.forward_context import BatchDescriptor
    from vllm_ascend.graph_wrapper import AscendGraphWrapper, forward_context_key

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
    from vllm_ascend.pass_manager import (
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
