"""AscendCompiler: the backend choice, the compile hash, the passes run on compile, the
npugraph_ex static-kernel options, and its compile cache (a new compiler loads what an earlier
one saved; damaged, missing, stale or foreign artifacts are one info "cache miss" and a normal
compile)."""

from __future__ import annotations

import copy
import logging
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import ascend_kernels  # noqa: F401  (registers torch.ops.ascend)
import pytest
import torch
from ascend_graph import GraphFusionPassManager, loads_fused_graph
from torch.utils._python_dispatch import TorchDispatchMode
from torch_npu_double.seam import install
from vllm.config.utils import Range
from vllm_ascend.compilation.compile_cache import read_entry, write_entry
from vllm_ascend.compilation.compiler import (
    NPU_CODE_SUFFIX,
    PASS_KEY,
    AscendCompiler,
    graph_backend,
)

A = torch.ops.ascend
RANGE = Range(start=1, end=16)
KEY = "artifact_compile_range_1_16_subgraph_0"
FUSED_OPS = ["ascend.add_rms_norm_quant.default", "ascend.muls_add.default"]


def block(x, residual, w, scale, offset, shared):
    y, res = A.add_rms_norm(x, residual, w, 1e-6)
    return A.quantize(y, scale, offset), res * 2.5 + shared, res.view(-1)


def other_block(x, residual, w, scale, offset, shared):
    y, res = A.add_rms_norm(x, residual, w, 1e-6)
    return A.quantize(y, scale, offset), res * 3.0 - shared, res.view(-1)


def block_args(tokens: int) -> list[torch.Tensor]:
    """Inputs in the order the blocks use them (dynamo orders its inputs that way)."""
    gen = torch.Generator().manual_seed(tokens)
    x, residual, shared = (torch.randn(tokens, 64, generator=gen) for _ in range(3))
    w = torch.rand(64, generator=gen) + 0.5
    return [x, residual, w, torch.tensor([0.02]), torch.tensor([1.0]), shared]


def dynamo_graph(fn) -> tuple[torch.fx.GraphModule, list]:
    """Dynamo's graph of `fn` with the token count symbolic, and its example inputs."""
    torch._dynamo.reset()
    captured = []

    def capture(gm, inputs):
        captured.append((gm, list(inputs)))
        return gm.forward

    args = block_args(5)
    for tensor in (args[0], args[1], args[5]):
        torch._dynamo.mark_dynamic(tensor, 0)
    with torch.no_grad():
        torch.compile(fn, backend=capture, fullgraph=True)(*args)
    return captured[0]


def call_args(example_inputs: list, tokens: int) -> list:
    tensors = iter(block_args(tokens))
    return [tokens if isinstance(a, torch.SymInt) else next(tensors) for a in example_inputs]


class OpLog(TorchDispatchMode):
    """The ops a callable dispatches at its top level."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(str(func))
        return func(*args, **(kwargs or {}))


def run_logged(fn, args) -> tuple[list[str], tuple]:
    with torch.no_grad(), OpLog() as log:
        out = fn(*args)
    return log.ops, out


def same(got, want) -> bool:
    return all(torch.equal(a, b) for a, b in zip(got, want, strict=True))


@pytest.fixture
def graph():
    return dynamo_graph(block)


@pytest.fixture
def compiler_log():
    """Records of the compiler's logger (the plugin's logger may not propagate)."""
    records: list[logging.LogRecord] = []
    handler = logging.Handler(logging.INFO)
    handler.emit = records.append  # type: ignore[method-assign]
    logger = logging.getLogger("vllm_ascend.compilation")
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    yield records
    logger.removeHandler(handler)
    logger.setLevel(level)


def misses(records) -> list[str]:
    return [r.getMessage() for r in records if "cache miss" in r.getMessage()]


def rejections(records) -> list[str]:
    return [r.getMessage() for r in records
            if "rejected" in r.getMessage() and r.levelno == logging.WARNING]


def payload(path: Path) -> bytes:
    """The fused-graph bytes of an artifact, after checking its checksum."""
    return read_entry(path)


def compiled_with_cache(cache_dir: Path, graph, backend: str = "eager"):
    gm, inputs = graph
    compiler = AscendCompiler()
    compiler.backend = backend
    compiler.initialize_cache(str(cache_dir), disable_cache=False, prefix="backbone")
    with torch.no_grad():
        fn, handle = compiler.compile(gm, inputs, {PASS_KEY: GraphFusionPassManager()}, RANGE,
                                      KEY)
    return fn, handle


def fresh_load(cache_dir: Path, graph, handle, manager=None, backend: str = "eager"):
    gm, inputs = graph
    compiler = AscendCompiler(manager or GraphFusionPassManager())
    compiler.backend = backend
    compiler.initialize_cache(str(cache_dir), disable_cache=False, prefix="backbone")
    with torch.no_grad():
        return compiler.load(handle, gm, inputs, 0, RANGE), compiler.fusion_manager


def test_a_new_compiler_loads_the_saved_fused_graph(tmp_path, graph, compiler_log) -> None:
    compiled, handle = compiled_with_cache(tmp_path, graph)
    assert handle == (KEY, str(tmp_path / KEY))
    assert sorted(p.name for p in tmp_path.iterdir()) == [KEY]  # no temporary files left
    saved = loads_fused_graph(payload(tmp_path / KEY), manager=GraphFusionPassManager(),
                              backend="eager", compile_range=RANGE)
    assert saved.fused_targets() == FUSED_OPS
    assert "torch.ops.ascend.add_rms_norm_quant.default(" in saved.graph.code

    loaded, manager = fresh_load(tmp_path, graph, handle)
    assert sum(manager.counts.values()) == 0  # the passes did not run: the saved graph did
    args = call_args(graph[1], 9)  # another token count: the graph stays symbolic
    ops, out = run_logged(loaded, args)
    assert ops == [*FUSED_OPS, "aten.view.default"]
    assert same(out, run_logged(compiled, args)[1])
    with torch.no_grad():
        want = block(*block_args(9))
    assert torch.equal(out[0], want[0]) and torch.allclose(out[1], want[1])
    assert out[2].shape == (9 * 64,)
    assert misses(compiler_log) == []


def test_disable_cache_writes_nothing(tmp_path, graph) -> None:
    gm, inputs = graph
    compiler = AscendCompiler()
    compiler.initialize_cache(str(tmp_path), disable_cache=True, prefix="")
    with torch.no_grad():
        fn, handle = compiler.compile(gm, inputs, {PASS_KEY: GraphFusionPassManager()}, RANGE,
                                      KEY)
    assert handle is None and list(tmp_path.iterdir()) == []
    ops, _ = run_logged(fn, call_args(inputs, 3))
    assert ops[:2] == FUSED_OPS  # still compiled with the passes


def _damage(path: Path, how: str) -> None:
    data = path.read_bytes()
    if how == "missing":
        path.unlink()
    elif how == "empty":
        path.write_bytes(b"")
    elif how == "truncated":
        path.write_bytes(data[: len(data) // 2])
    elif how == "flipped byte":
        path.write_bytes(data[:-20] + bytes([data[-20] ^ 0xFF]) + data[-19:])
    else:
        path.write_bytes(b"\x00garbage" * 10)


@pytest.mark.parametrize("how", ["missing", "empty", "truncated", "flipped byte", "garbage"])
def test_damaged_or_missing_artifact_recompiles(tmp_path, graph, compiler_log, how) -> None:
    compiled, handle = compiled_with_cache(tmp_path, graph)
    _damage(tmp_path / KEY, how)
    loaded, manager = fresh_load(tmp_path, graph, handle)
    # A missing file is a plain miss; changed bytes no longer match the entry's checksum.
    noted = misses(compiler_log) if how == "missing" else rejections(compiler_log)
    assert len(noted) == 1 and KEY in noted[0]
    assert len(misses(compiler_log) + rejections(compiler_log)) == 1
    assert manager.counts["norm_quant"] == 1 and manager.counts["muls_add"] == 1  # recompiled
    args = call_args(graph[1], 7)
    ops, out = run_logged(loaded, args)
    assert ops[:2] == FUSED_OPS and same(out, run_logged(compiled, args)[1])
    # The artifact was written again: the next start hits.
    _, again = fresh_load(tmp_path, graph, handle)
    assert sum(again.counts.values()) == 0
    assert len(misses(compiler_log) + rejections(compiler_log)) == 1


def test_stale_artifact_recompiles_with_the_current_settings(tmp_path, graph,
                                                             compiler_log) -> None:
    _, handle = compiled_with_cache(tmp_path, graph)
    current = GraphFusionPassManager(fuse_muls_add=False)  # another pass-manager uuid
    loaded, manager = fresh_load(tmp_path, graph, handle, manager=current)
    [miss] = misses(compiler_log)
    assert "stale: made with passes=" in miss
    assert manager.counts["norm_quant"] == 1 and manager.counts["muls_add"] == 0
    ops, out = run_logged(loaded, call_args(graph[1], 6))
    assert "ascend.add_rms_norm_quant.default" in ops and "ascend.muls_add.default" not in ops
    with torch.no_grad():
        want = block(*block_args(6))
    assert torch.equal(out[0], want[0]) and torch.allclose(out[1], want[1])


def test_another_graph_under_the_same_key_is_a_miss(tmp_path, graph, compiler_log) -> None:
    _, handle = compiled_with_cache(tmp_path, graph)
    other = dynamo_graph(other_block)
    loaded, _ = fresh_load(tmp_path, other, handle)
    [miss] = misses(compiler_log)
    assert "differs from the saved one" in miss
    _, out = run_logged(loaded, call_args(other[1], 4))
    with torch.no_grad():
        want = other_block(*block_args(4))
    assert torch.allclose(out[1], want[1])


def test_bad_handles_keys_and_missing_manager_are_clear_errors(tmp_path, graph) -> None:
    gm, inputs = graph
    compiler = AscendCompiler(GraphFusionPassManager())
    compiler.initialize_cache(str(tmp_path))
    for handle in (None, "k", (KEY,), (KEY, 3), [1, 2]):
        with pytest.raises(ValueError, match=r"expected the \(key, path\) pair of strings"):
            compiler.load(handle, gm, inputs, 0, RANGE)
    for key in ("../escape", "a/b", "", ".."):
        with pytest.raises(ValueError, match="file name without path separators"):
            compiler.load((key, "/tmp/x"), gm, inputs, 0, RANGE)
        with pytest.raises(ValueError, match="file name without path separators"):
            compiler.compile(gm, inputs, {PASS_KEY: GraphFusionPassManager()}, RANGE, key)
    with pytest.raises(RuntimeError, match="needs the fusion pass manager"):
        AscendCompiler().load((KEY, str(tmp_path / KEY)), gm, inputs, 0, RANGE)


def test_single_output_graphs_compile_and_load(tmp_path) -> None:
    def single(x, residual, w, scale, offset, shared):
        return A.add_rms_norm(x, residual, w, 1e-6)[1] * 2.5 + shared  # not a tuple

    gm = torch.fx.symbolic_trace(single)
    args = block_args(4)
    compiler = AscendCompiler()
    compiler.initialize_cache(str(tmp_path))
    fn, handle = compiler.compile(gm, args, {PASS_KEY: GraphFusionPassManager()}, RANGE)
    assert handle is not None and handle[0].startswith("ascend_fused_")
    loaded, manager = fresh_load(tmp_path, (gm, args), handle)
    ops, out = run_logged(loaded, args)
    assert isinstance(out, torch.Tensor) and ops == ["ascend.add_rms_norm.default",
                                                     "ascend.muls_add.default"]
    assert torch.equal(out, fn(*args)) and sum(manager.counts.values()) == 0


def test_vllm_compiler_manager_reuses_the_handle_on_a_warm_start(tmp_path, graph) -> None:
    from vllm.compilation.backends import CompilerManager
    from vllm.config import CompilationConfig

    gm, inputs = graph

    def manager_for(compiler: AscendCompiler) -> CompilerManager:
        manager = CompilerManager(CompilationConfig(backend="eager"))
        manager.compiler = compiler
        manager.initialize_cache(str(tmp_path), disable_cache=False, prefix="backbone")
        return manager

    cold = manager_for(AscendCompiler())
    with torch.no_grad():
        compiled = cold.compile(gm, inputs, {PASS_KEY: GraphFusionPassManager()},
                                cold.compilation_config, RANGE, graph_index=0, num_graphs=1)
    cold.save_to_file()
    assert "AscendCompiler" in (tmp_path / "vllm_compile_cache.py").read_text()
    warm = manager_for(AscendCompiler(GraphFusionPassManager()))
    with torch.no_grad():
        # An empty compiler config: compiling would fail, so this result was loaded.
        loaded = warm.compile(gm, inputs, {}, warm.compilation_config, RANGE,
                              graph_index=0, num_graphs=1)
    args = call_args(inputs, 11)
    ops, out = run_logged(loaded, args)
    assert ops[:2] == FUSED_OPS and same(out, run_logged(compiled, args)[1])


def test_compute_hash_gives_load_the_manager_vllm_compiles_with(tmp_path, graph,
                                                               make_vllm_config,
                                                               compiler_log) -> None:
    from vllm_ascend.compilation.pass_manager import AscendPassManager

    config = make_vllm_config()
    platform_manager = AscendPassManager()
    platform_manager.configure(config)
    gm, inputs = graph
    cold = AscendCompiler()
    cold.compute_hash(config)
    cold.initialize_cache(str(tmp_path))
    with torch.no_grad():
        _, handle = cold.compile(gm, inputs, {PASS_KEY: platform_manager}, RANGE, KEY)
    warm = AscendCompiler()
    warm.compute_hash(config)  # what vLLM calls first on a warm start
    warm.initialize_cache(str(tmp_path))
    # The engine's one manager: the platform pass manager's, which the cold compile ran.
    assert warm.fusion_manager is platform_manager.fusion
    before = dict(warm.fusion_manager.counts)
    with torch.no_grad():
        loaded = warm.load(handle, gm, inputs, 0, RANGE)
    assert misses(compiler_log) == [] and warm.fusion_manager.counts == before  # no pass ran
    assert run_logged(loaded, call_args(inputs, 5))[0][:2] == FUSED_OPS


@pytest.fixture
def seam_npugraph_ex(monkeypatch):
    """`seam_npugraph_ex(triton=False, failures=0, no_code=False)`: the seam's bundled
    npugraph_ex, its backend recording the graphs it gets; the generated code is the seam's
    (`get_code()`), with a Triton side-table call when `triton`, or none at all (`get_code()`
    gives the runner back, as the real one does when it cannot generate code) when `no_code`;
    the first `failures` compiles raise; `ext.compiles` counts `_get_compiled_gm` calls."""
    from torch_npu_double.seam import install

    fakes = []

    def make(triton: bool = False, failures: int = 0, no_code: bool = False):
        fake = install(monkeypatch)
        fakes.append(fake)
        ext = sys.modules["npugraph_ex"]
        ext.graphs, ext.failures = [], failures
        real = ext.get_npu_backend

        def get_npu_backend(**kwargs):
            backend = real(**kwargs)

            def recording(gm, inputs):
                if ext.failures:
                    ext.failures -= 1
                    raise RuntimeError("extension failed")
                ext.graphs.append(gm)
                return backend(gm, inputs)

            return recording

        monkeypatch.setattr(ext, "get_npu_backend", get_npu_backend)
        compiler_cls = ext.npu_fx_compiler._NpuFxCompiler
        compile_gm = compiler_cls._get_compiled_gm
        ext.compiles = 0

        def counting(self, gm, example_inputs):
            ext.compiles += 1
            return compile_gm(self, gm, example_inputs)

        monkeypatch.setattr(compiler_cls, "_get_compiled_gm", counting)
        compiled_cls = type(real(compiler_config=None)(torch.fx.symbolic_trace(
            lambda x: (x,)), [torch.ones(1)]))
        ext.compiles = 0  # finding the class compiled once
        seam_code = compiled_cls.get_code
        if triton:
            monkeypatch.setattr(compiled_cls, "get_code", lambda self, extend_config=None: (
                seam_code(self) + "\n# triton_kernel_wrapper_functional(...)\n"))
        if no_code:
            monkeypatch.setattr(compiled_cls, "get_code",
                                lambda self, extend_config=None: self.runner)
        return ext

    yield make
    for fake in fakes:
        fake.close()


def test_npugraph_ex_saves_code_and_loads_it_back_on_a_warm_start(
        tmp_path, graph, seam_npugraph_ex, compiler_log) -> None:
    ext = seam_npugraph_ex()
    compiled, handle = compiled_with_cache(tmp_path, graph, backend="npugraph_ex")
    assert sorted(p.name for p in tmp_path.iterdir()) == [KEY, KEY + NPU_CODE_SUFFIX]
    assert ext.compiles == 1
    code = payload(tmp_path / (KEY + NPU_CODE_SUFFIX)).decode()  # an entry like the graph
    assert "torch.ops.ascend.muls_add.default(" in code and "def kernel(" in code
    loaded, manager = fresh_load(tmp_path, graph, handle, backend="npugraph_ex")
    assert sum(manager.counts.values()) == 0 and len(ext.graphs) == 2
    assert ext.compiles == 1  # the warm start loaded the code instead of compiling it
    [note] = [r.getMessage() for r in compiler_log if "npugraph_ex code" in r.getMessage()]
    assert note == (f"npugraph_ex code loaded from {tmp_path / (KEY + NPU_CODE_SUFFIX)} "
                    "(not compiled again)")
    given = [str(n.target) for n in ext.graphs[-1].graph.nodes if n.op == "call_function"]
    assert [t for t in given if t.startswith("ascend.")] == FUSED_OPS
    args = call_args(graph[1], 8)
    ops, out = run_logged(loaded, args)
    assert ops[:2] == FUSED_OPS and same(out, run_logged(compiled, args)[1])
    fresh_load(tmp_path, graph, handle, backend="eager")  # an artifact of another backend
    assert "stale: made with backend='npugraph_ex'" in misses(compiler_log)[0]
    assert not [r for r in compiler_log if "not saved" in r.getMessage()]


@pytest.mark.parametrize("damage", ["no_header", "flipped_byte", "no_kernel"])
def test_npugraph_ex_code_that_does_not_check_out_is_compiled_again(
        tmp_path, graph, seam_npugraph_ex, compiler_log, damage) -> None:
    ext = seam_npugraph_ex()
    compiled, handle = compiled_with_cache(tmp_path, graph, backend="npugraph_ex")
    path = tmp_path / (KEY + NPU_CODE_SUFFIX)
    planted = b"raise SystemExit('damaged code ran')\n"
    if damage == "no_header":
        path.write_bytes(planted)
    elif damage == "flipped_byte":
        write_entry(path, planted)
        data = path.read_bytes()
        path.write_bytes(data[:-5] + bytes([data[-5] ^ 0x01]) + data[-4:])
    else:  # a whole entry, but not code the extension can load
        write_entry(path, b"x = 1\n")
    loaded, manager = fresh_load(tmp_path, graph, handle, backend="npugraph_ex")
    assert ext.compiles == 2 and sum(manager.counts.values()) == 0  # saved graph, new code
    messages = [r for r in compiler_log if "npugraph_ex code" in r.getMessage()]
    if damage == "no_kernel":
        [note] = messages
        assert note.levelno == logging.INFO and "did not load (AttributeError" in note.getMessage()
    else:
        [warning] = rejections(compiler_log)
        assert f"rejected the npugraph_ex code {path}" in warning
    assert "def kernel(" in payload(path).decode()  # the fresh code replaced it
    args = call_args(graph[1], 6)
    assert same(run_logged(loaded, args)[1], run_logged(compiled, args)[1])


def test_npugraph_ex_code_is_not_loaded_for_a_graph_that_changed(
        tmp_path, graph, seam_npugraph_ex, compiler_log) -> None:
    ext = seam_npugraph_ex()
    compiled, handle = compiled_with_cache(tmp_path, graph, backend="npugraph_ex")
    gm, inputs = graph
    changed = copy.deepcopy(gm)
    output = next(n for n in changed.graph.nodes if n.op == "output")
    with changed.graph.inserting_before(output):
        first = output.args[0][0]
        doubled = changed.graph.call_function(torch.ops.aten.mul.Tensor, (first, 2))
    output.args = ((doubled, *output.args[0][1:]),)
    changed.recompile()
    loaded, _ = fresh_load(tmp_path, (changed, inputs), handle, backend="npugraph_ex")
    assert ext.compiles == 2
    args = call_args(inputs, 5)
    want = run_logged(compiled, args)[1]
    assert torch.equal(run_logged(loaded, args)[1][0], want[0] * 2)


def test_npugraph_ex_code_with_triton_kernels_is_not_saved(tmp_path, graph, seam_npugraph_ex,
                                                           compiler_log) -> None:
    seam_npugraph_ex(triton=True)
    compiled, handle = compiled_with_cache(tmp_path, graph, backend="npugraph_ex")
    assert sorted(p.name for p in tmp_path.iterdir()) == [KEY]  # the fused graph only
    notes = [r for r in compiler_log if "not saved" in r.getMessage()]
    assert len(notes) == 1 and notes[0].levelno == logging.INFO
    assert "Triton" in notes[0].getMessage()
    loaded, manager = fresh_load(tmp_path, graph, handle, backend="npugraph_ex")
    assert sum(manager.counts.values()) == 0
    args = call_args(graph[1], 3)
    assert same(run_logged(loaded, args)[1], run_logged(compiled, args)[1])


def test_npugraph_ex_code_that_cannot_be_obtained_is_one_warning(tmp_path, graph,
                                                                 seam_npugraph_ex,
                                                                 compiler_log) -> None:
    seam_npugraph_ex(no_code=True)
    compiled, handle = compiled_with_cache(tmp_path, graph, backend="npugraph_ex")
    compiled_with_cache(tmp_path / "again", graph, backend="npugraph_ex")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([KEY, "again"])
    warned = [r for r in compiler_log if "not saved" in r.getMessage()]
    assert len(warned) == 1 and warned[0].levelno == logging.WARNING  # once per process
    assert "generated no Python code for this graph" in warned[0].getMessage()
    loaded, manager = fresh_load(tmp_path, graph, handle, backend="npugraph_ex")
    assert sum(manager.counts.values()) == 0  # the warm start still reuses the fused graph
    args = call_args(graph[1], 4)
    assert same(run_logged(loaded, args)[1], run_logged(compiled, args)[1])


def test_a_saved_graph_the_backend_rejects_is_a_miss(tmp_path, graph, seam_npugraph_ex,
                                                     compiler_log) -> None:
    seam_npugraph_ex()
    compiled, handle = compiled_with_cache(tmp_path, graph, backend="npugraph_ex")
    seam_npugraph_ex(failures=1)
    loaded, manager = fresh_load(tmp_path, graph, handle, backend="npugraph_ex")
    [miss] = misses(compiler_log)
    assert "the saved graph failed: RuntimeError('extension failed')" in miss
    assert manager.counts["muls_add"] == 1  # compiled again, with the passes
    args = call_args(graph[1], 5)
    assert same(run_logged(loaded, args)[1], run_logged(compiled, args)[1])


def test_a_fresh_process_loads_the_artifact(tmp_path, graph, py_runner, make_env) -> None:
    from vllm import envs

    compiled, handle = compiled_with_cache(tmp_path / "cache", graph)
    with torch.no_grad():
        torch.save(compiled(*call_args(graph[1], 6)), tmp_path / "want.pt")
    result = py_runner(f"""
        import json, sys
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        import torch
        from pathlib import Path
        from test_compiler import block, call_args, dynamo_graph, fresh_load, run_logged
        graph = dynamo_graph(block)
        loaded, manager = fresh_load(Path({str(tmp_path / "cache")!r}), graph, {handle!r})
        ops, out = run_logged(loaded, call_args(graph[1], 6))
        want = torch.load({str(tmp_path / "want.pt")!r})
        print("RESULT " + json.dumps({{"passes": sum(manager.counts.values()), "ops": ops,
            "equal": all(torch.equal(a, b) for a, b in zip(out, want, strict=True))}}))
    """, make_env(tmp_path, VLLM_CACHE_ROOT=envs.VLLM_CACHE_ROOT))  # the same signing key
    assert result == {"passes": 0, "ops": [*FUSED_OPS, "aten.view.default"], "equal": True}


@pytest.fixture
def fake_npugraph_ex(monkeypatch: pytest.MonkeyPatch) -> Iterator[types.SimpleNamespace]:
    """The seam's torch_npu with npugraph_ex; records the options its own helper applied."""
    fake = install(monkeypatch)
    seen = types.SimpleNamespace(options=[], backends=0)
    ext = sys.modules["npugraph_ex"]
    helper_module = sys.modules[f"{ext.__name__}.configs.compiler_config"]
    helper, get_backend = helper_module._process_kwargs_options, ext.get_npu_backend

    def process_kwargs_options(config: Any, kwargs: dict[str, Any]) -> None:
        seen.options.append(dict(kwargs["options"]))
        helper(config, kwargs)  # the seam's: an option the real config lacks is a ValueError

    def get_npu_backend(**kwargs: Any) -> Any:
        seen.backends += 1
        return get_backend(**kwargs)

    monkeypatch.setattr(helper_module, "_process_kwargs_options", process_kwargs_options)
    monkeypatch.setattr(ext, "get_npu_backend", get_npu_backend)
    try:
        yield seen
    finally:
        fake.close()


def _compile(make_vllm_config: Any, mode: str, *, static: bool = True,
             local_world_size: str | None = None) -> Any:
    """Build a config (vLLM's CPU platform writes LOCAL_WORLD_SIZE itself), then set or clear
    LOCAL_WORLD_SIZE and compile a tiny graph."""
    import os

    from ascend_graph import GraphFusionPassManager
    from vllm.config import CUDAGraphMode
    from vllm_ascend.compilation.compiler import PASS_KEY, AscendCompiler

    cfg = make_vllm_config(max_num_seqs=4, additional_config={
        "ascend_compilation_config": {"enable_static_kernel": static}})
    cc = cfg.compilation_config
    cc.cudagraph_mode = CUDAGraphMode[mode]
    cc.cudagraph_capture_sizes, cc.max_cudagraph_capture_size = [1, 2, 4, 8, 16], 16
    os.environ.pop("LOCAL_WORLD_SIZE", None)
    if local_world_size is not None:
        os.environ["LOCAL_WORLD_SIZE"] = local_world_size
    compiler = AscendCompiler()
    compiler.compute_hash(cfg)
    compiler.initialize_cache("/tmp/unused", disable_cache=True)
    gm = torch.fx.symbolic_trace(lambda x: (x * 2,))
    fn, _ = compiler.compile(gm, [torch.ones(3)], {PASS_KEY: GraphFusionPassManager()}, None)
    assert torch.equal(fn(torch.ones(3))[0], torch.full((3,), 2.0))
    return compiler


@pytest.mark.parametrize("mode", ["FULL_DECODE_ONLY", "FULL"])
def test_static_kernel_options_and_decode_sizes_reach_npugraph_ex(
    mode: str, make_vllm_config: Any, fake_npugraph_ex: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os

    compiler = _compile(make_vllm_config, mode)
    assert compiler.backend == "npugraph_ex" and fake_npugraph_ex.backends == 1
    # q_len 1 .. max_num_seqs 4: 8 and 16 are not decode batch sizes.
    assert fake_npugraph_ex.options == [{
        "force_eager": True, "inplace_pass": False, "clone_input": False, "clone_output": False,
        "static_kernel_compile": True, "_vllm_aclnn_static_kernel_sym_range": [1, 2, 4],
    }]
    assert os.environ["LOCAL_WORLD_SIZE"] == "1"  # local world 1 x local DP 1


def test_local_world_size_already_set_is_kept_and_static_off_sends_no_sizes(
    make_vllm_config: Any, fake_npugraph_ex: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os

    _compile(make_vllm_config, "FULL_DECODE_ONLY", local_world_size="16")
    assert os.environ["LOCAL_WORLD_SIZE"] == "16"
    _compile(make_vllm_config, "FULL_DECODE_ONLY", static=False)
    assert "static_kernel_compile" not in fake_npugraph_ex.options[-1]
    assert "LOCAL_WORLD_SIZE" not in os.environ


@pytest.mark.parametrize("mode", ["PIECEWISE", "FULL_AND_PIECEWISE", "NONE"])
def test_npugraph_ex_is_not_used_for_piecewise_or_no_graphs(
    mode: str, make_vllm_config: Any, fake_npugraph_ex: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os

    compiler = _compile(make_vllm_config, mode)
    assert "LOCAL_WORLD_SIZE" not in os.environ
    assert compiler.backend == "eager" and not compiler.static_kernel.enabled
    assert fake_npugraph_ex.backends == 0 and fake_npugraph_ex.options == []


def test_static_kernel_plan_local_world_size() -> None:
    from vllm_ascend.compilation.compiler import StaticKernelPlan

    cfg = types.SimpleNamespace(
        compilation_config=types.SimpleNamespace(cudagraph_capture_sizes=[1, 2, 3, 4, 6, 8, 9]),
        parallel_config=types.SimpleNamespace(local_world_size=4, data_parallel_size_local=2),
        speculative_config=types.SimpleNamespace(num_speculative_tokens=2),
        scheduler_config=types.SimpleNamespace(max_num_seqs=3),
    )
    plan = StaticKernelPlan.from_vllm_config(cfg, True)
    # q_len = 3: sizes 3 .. 9 (max_num_seqs 3 x q_len), both ends included.
    assert plan == StaticKernelPlan(True, (3, 4, 6, 8, 9), 8)
    env: dict[str, str] = {}
    assert plan.apply_environment(env) == "8" and env == {"LOCAL_WORLD_SIZE": "8"}
    assert StaticKernelPlan.from_vllm_config(cfg, False) == StaticKernelPlan()
    assert StaticKernelPlan().apply_environment(env := {}) is None and env == {}


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
