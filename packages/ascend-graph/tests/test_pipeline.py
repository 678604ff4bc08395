"""The compile pipeline: inductor post-grad path, compute_hash, the NPU graph extension seam, and
the compile range and NPU options handed to every backend path.
"""

from __future__ import annotations

import sys
import types

import ascend_graph
import pytest
import torch
from ascend_graph import GraphFusionPassManager, compute_hash
from ascend_graph import pipeline as pipeline_mod
from ascend_graph.npu_graph_ex import (
    NpuGraphOptions,
    NpuGraphUnavailableError,
    load_extension,
    npu_graph_compile,
    patched_attribute,
)
from ascend_graph.pipeline import compile_graph
from torch import fx, nn
from torch.fx.experimental.proxy_tensor import make_fx

A = torch.ops.ascend


class _Block(nn.Module):
    def __init__(self, attention: type[nn.Module]) -> None:
        super().__init__()
        self.attn = attention(three_splits=True)
        self.w = nn.Parameter(torch.rand(128) + 0.5)

    def forward(self, pos, x, res):
        h, res = A.add_rms_norm(x, res, self.w, 1e-6)
        q, k, v = self.attn(pos, h)
        return q * 2.5 + k.repeat(1, 2), v, res


def test_inductor_backend_runs_passes_on_the_post_grad_graph(models, close) -> None:
    torch._dynamo.reset()
    graphs = []
    backend = ascend_graph.make_backend(
        {"backend": "inductor", "muls_add_scale": 2.5}, on_graph=graphs.append
    )
    module = _Block(models["qknorm"])
    inputs = (torch.arange(6), torch.randn(6, 128), torch.randn(6, 128))
    with torch.no_grad():
        want = module(*inputs)
        got = torch.compile(module, backend=backend)(*inputs)
    assert backend.report["qknorm_rope"] == 1 and backend.report["muls_add"] == 1
    targets = [str(n.target) for n in graphs[0].graph.nodes if n.op == "call_function"]
    assert "aten.view.default" not in targets  # inductor's post-grad graph: reshapes only
    assert targets.count("ascend.split_qkv_rmsnorm_rope.default") == 1
    close(got, want, torch.float32)


def test_compute_hash_covers_versions_and_every_setting(monkeypatch) -> None:
    base = compute_hash(GraphFusionPassManager())
    assert base == compute_hash(GraphFusionPassManager()) and len(base) == 16
    others = {
        compute_hash(GraphFusionPassManager(muls_add_scale=2.0)),
        compute_hash(GraphFusionPassManager(fuse_qknorm_rope=False)),
        compute_hash(GraphFusionPassManager(), backend="inductor"),
        compute_hash(GraphFusionPassManager(), enable_npugraph_ex=True),
        compute_hash(GraphFusionPassManager(), enable_static_kernel=True),
        compute_hash(GraphFusionPassManager(), decode_batch_sizes=[1, 2, 4]),
        compute_hash(None),
    }
    assert len(others) == 7 and base not in others
    monkeypatch.setattr(torch, "__version__", "9.9.9")
    assert compute_hash(GraphFusionPassManager()) != base
    monkeypatch.undo()
    installed = pipeline_mod._dist_version
    for dist in ("torch-npu", "ascend-graph", "ascend-kernels"):  # each version on its own

        def version(name: str, changed: str = dist) -> str | None:
            return "9.9.9" if name == changed else installed(name)

        monkeypatch.setattr(pipeline_mod, "_dist_version", version)
        assert compute_hash(GraphFusionPassManager()) != base, dist
    monkeypatch.undo()
    assert compute_hash(GraphFusionPassManager()) == base


def test_compute_hash_extra_factors() -> None:
    assert compute_hash(extra={"a": 1, "b": 2}) == compute_hash(extra={"b": 2, "a": 1})
    assert compute_hash(extra=None) == compute_hash(extra={}) != compute_hash(extra={"a": 1})
    # values JSON cannot hold count by their text
    assert compute_hash(extra={"dtype": torch.bfloat16}) != compute_hash(
        extra={"dtype": torch.float16}
    )


def test_dist_version_reads_installed_metadata() -> None:
    assert pipeline_mod._dist_version("ascend-graph") == ascend_graph.__version__
    assert pipeline_mod._dist_version("torch") == torch.__version__.split("+")[0]
    assert pipeline_mod._dist_version("ascend-graph-no-such-distribution") is None


@pytest.fixture
def seam_extension(monkeypatch):
    """`seam_extension(fail=False)`: the seam's bundled npugraph_ex (real names and options,
    `_get_compiled_gm(self, gm, example_inputs)` -> `get_code()`), recording the config its
    backend gets; with `fail` every compile raises."""
    from torch_npu_double.seam import install

    fakes = []

    def make(fail: bool = False) -> types.ModuleType:
        fakes.append(install(monkeypatch))
        ext = sys.modules["npugraph_ex"]
        real = ext.get_npu_backend

        def get_npu_backend(**kwargs):
            ext.last_config = kwargs["compiler_config"]
            backend = real(**kwargs)

            def compile_or_fail(gm, inputs):
                if fail:
                    raise RuntimeError("compile failed")
                return backend(gm, inputs)

            return compile_or_fail

        monkeypatch.setattr(ext, "get_npu_backend", get_npu_backend)
        return ext

    yield make
    for fake in fakes:
        fake.close()


def test_npu_graph_backend_through_make_backend(seam_extension, compile_module, close) -> None:
    ext = seam_extension()

    class _M(nn.Module):
        def forward(self, x, y):
            return x * 2.5 + y

    class _Two(nn.Module):
        def forward(self, x, y):
            return x * 2.5 + y, x - y

    for module in (_M(), _Two()):  # one output and several: the graph returns them all
        result = compile_module(module, (torch.randn(3, 4), torch.randn(3, 4)),
                                config={"backend": "npugraph_ex"})  # fmt: skip
        assert result.report["muls_add"] == 1
        close(result.outputs, result.reference, torch.float32)
    config = ext.last_config
    assert (config.force_eager, config.inplace_pass, config.clone_input) == (True, False, False)


def test_extension_patch_is_restored_even_when_compilation_fails(seam_extension) -> None:
    gm = torch.fx.symbolic_trace(lambda x: (x + 1,))
    ok = seam_extension()
    compiler_cls = ok.npu_fx_compiler._NpuFxCompiler
    original = compiler_cls._get_compiled_gm
    codes: list[str | None] = []
    opts = NpuGraphOptions(static_kernel=True, decode_batch_sizes=(1, 2),
                           on_code=lambda code, why: codes.append(code))
    npu_graph_compile(gm, [torch.ones(2)], options=opts, extension=ok)
    assert compiler_cls._get_compiled_gm is original
    assert len(codes) == 1 and "x + 1" in str(codes[0])  # the generated code was handed out
    assert ok.last_config.static_kernel_compile is True
    assert ok.last_config._vllm_aclnn_static_kernel_sym_range == [1, 2]
    bad = seam_extension(fail=True)
    compiler_cls = bad.npu_fx_compiler._NpuFxCompiler
    original = compiler_cls._get_compiled_gm
    with pytest.raises(RuntimeError, match="compile failed"):
        npu_graph_compile(gm, [torch.ones(2)], options=opts, extension=bad)
    assert compiler_cls._get_compiled_gm is original


def test_patched_attribute_restores_and_missing_extension_is_explained() -> None:
    holder = types.SimpleNamespace(a=1)
    with pytest.raises(KeyError), patched_attribute(holder, "a", 2):
        assert holder.a == 2
        raise KeyError("boom")
    assert holder.a == 1
    with pytest.raises(NpuGraphUnavailableError, match="backend='eager'"):
        load_extension(("ascend_graph_no_such_extension",))


def _targets(gm: torch.fx.GraphModule) -> list[str]:
    return [str(n.target) for n in gm.graph.nodes if n.op == "call_function"]


@pytest.mark.parametrize(("compile_range", "fused"), [((1, 4), True), ((1, 5), False)])
def test_inductor_pass_applies_passes_for_its_compile_range(
    compile_range, fused, close, scaled_sum, bounded_manager
) -> None:
    """At the pass's bound (4 tokens) it runs; one token over it does not; no graph hook
    needed."""
    inputs = (torch.randn(4, 8), torch.randn(4, 8))
    gm = make_fx(scaled_sum, tracing_mode="fake")(*inputs)
    pipeline_mod.inductor_pass(bounded_manager(), compile_range)(gm.graph)
    gm.recompile()
    want = ["ascend.muls_add.default"] if fused else ["aten.mul.Tensor", "aten.add.Tensor"]
    assert _targets(gm) == want
    close(gm(*inputs), scaled_sum(*inputs), torch.float32)


def test_inductor_compile_passes_its_compile_range_to_the_passes(
    close, scaled_sum, bounded_manager
) -> None:
    torch._dynamo.reset()
    graphs: list[torch.fx.GraphModule] = []
    manager = bounded_manager()

    def backend(gm, example_inputs):
        return ascend_graph.compile_graph(gm, example_inputs, manager=manager,
                                          backend="inductor", compile_range=(1, 4),
                                          on_graph=graphs.append)  # fmt: skip

    inputs = (torch.randn(4, 8), torch.randn(4, 8))
    with torch.no_grad():
        got = torch.compile(scaled_sum, backend=backend, fullgraph=True)(*inputs)
    assert manager.last_counts["muls_add"] == 1
    assert "ascend.muls_add.default" in _targets(graphs[0])
    close(got, scaled_sum(*inputs), torch.float32)


def _inputs() -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(5)
    return torch.randn(4, 8, generator=gen), torch.randn(4, 8, generator=gen)


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
