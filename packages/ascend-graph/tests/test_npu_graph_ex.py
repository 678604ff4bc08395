"""The NPU graph extension seam: the bundled npugraph_ex / torchair of the schema-bound fake
torch_npu (``torch_npu_double.seam``: real module names, config options,
``_get_compiled_gm(self, gm, example_inputs)`` returning a ``_CompiledFxGraph`` with
``get_code()``), the compiler config each one gets, generated code handed out and loaded back,
the error."""

from __future__ import annotations

import sys
import types
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from ascend_graph import npu_graph_ex as nge
from ascend_graph.npu_graph_ex import NpuGraphOptions, NpuGraphUnavailableError
from torch_npu_double.seam import FakeTorchNpu, install

OPTIONS = {"force_eager": True, "inplace_pass": False, "clone_input": False,
           "clone_output": False}  # fmt: skip


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeTorchNpu]:
    installed = install(monkeypatch)
    try:
        yield installed
    finally:
        installed.close()


@pytest.fixture
def modules() -> Iterator[dict[str, types.ModuleType]]:
    """Fake modules put in `sys.modules` for one test (and taken out again)."""
    added: dict[str, types.ModuleType] = {}
    saved = dict(sys.modules)
    yield added
    for name in list(sys.modules):
        if name not in saved:
            del sys.modules[name]
    sys.modules.update(saved)


def _install(modules: dict[str, types.ModuleType], module: types.ModuleType) -> None:
    modules[module.__name__] = module
    sys.modules[module.__name__] = module


def _gm() -> torch.fx.GraphModule:
    return torch.fx.symbolic_trace(lambda x: (x * 3,))


def _configs(ext: Any, monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The compiler configs `ext.get_npu_backend` receives (the seam's checked one still runs)."""
    seen: list[Any] = []
    real = ext.get_npu_backend

    def get_npu_backend(**kwargs: Any) -> Any:
        seen.append(kwargs.get("compiler_config"))
        return real(**kwargs)

    monkeypatch.setattr(ext, "get_npu_backend", get_npu_backend)
    return seen


def test_the_bundled_extensions_are_found_under_their_short_names(fake: FakeTorchNpu) -> None:
    ext = nge.load_extension()
    assert ext is sys.modules["npugraph_ex"] and ext.__name__ == "torch_npu.dynamo.npugraph_ex"
    assert nge.extension_kind(ext) == "npugraph_ex"
    assert nge.extension_kind(sys.modules["torchair"]) == "torchair"
    with pytest.raises(NpuGraphUnavailableError, match="'torch_npu' is not an NPU graph"):
        nge.extension_kind(fake)


# ------------------------------------------------------------------------- compiler config
def test_torchair_gets_reduce_overhead_eager_run_and_no_reinplace(
        fake: FakeTorchNpu, monkeypatch: pytest.MonkeyPatch) -> None:
    ext = nge.load_extension(("torchair",))
    assert ext.__name__ == "torch_npu.dynamo.torchair"  # the bundled one: the long name
    seen = _configs(ext, monkeypatch)
    nge.npu_graph_compile(_gm(), [torch.ones(2)], options=NpuGraphOptions(), extension=ext)
    [config] = seen
    assert config.mode == "reduce-overhead" and config.debug.run_eagerly is True
    assert config.debug.aclgraph.disable_reinplace_inplaceable_ops_pass is True
    with pytest.raises(AttributeError):  # npugraph_ex's options are not torchair's
        config.force_eager  # noqa: B018


def test_npugraph_ex_gets_its_options_through_its_own_helper(
        fake: FakeTorchNpu, monkeypatch: pytest.MonkeyPatch) -> None:
    ext = nge.load_extension()
    seen = _configs(ext, monkeypatch)
    static = NpuGraphOptions(static_kernel=True, decode_batch_sizes=(4, 2))
    for options in (NpuGraphOptions(), static):
        nge.npu_graph_compile(_gm(), [torch.ones(2)], options=options, extension=ext)
    plain, with_static = seen
    assert {k: getattr(plain, k) for k in OPTIONS} == OPTIONS
    assert plain.mode == "npugraph_ex" and plain.static_kernel_compile is False
    assert with_static.static_kernel_compile is True
    assert with_static._vllm_aclnn_static_kernel_sym_range == [4, 2]
    assert nge._option_helper(ext) is not None
    assert nge.npugraph_ex_options(static) == {
        **OPTIONS, "static_kernel_compile": True, "_vllm_aclnn_static_kernel_sym_range": [4, 2],
    }  # fmt: skip


def test_an_option_the_extension_does_not_have_is_refused(
        fake: FakeTorchNpu, monkeypatch: pytest.MonkeyPatch) -> None:
    ext = nge.load_extension()
    monkeypatch.setattr(nge, "npugraph_ex_options", lambda options: {"no_such_option": True})
    with pytest.raises(ValueError, match="no option 'no_such_option'"):
        nge.npu_graph_compile(_gm(), [torch.ones(2)], options=NpuGraphOptions(), extension=ext)


def test_without_an_option_helper_the_options_are_set_as_attributes(
        fake: FakeTorchNpu, monkeypatch: pytest.MonkeyPatch) -> None:
    ext = nge.load_extension()
    monkeypatch.setattr(nge, "_option_helper", lambda ext: None)
    seen = _configs(ext, monkeypatch)
    nge.npu_graph_compile(_gm(), [torch.ones(2)], options=NpuGraphOptions(), extension=ext)
    assert {k: getattr(seen[0], k) for k in OPTIONS} == OPTIONS


# ------------------------------------------------------------ generated code: out and back
def _saving(notes: list[tuple[str | None, str | None]]) -> NpuGraphOptions:
    return NpuGraphOptions(on_code=lambda code, why: notes.append((code, why)))


def test_generated_code_is_handed_out_through_get_code(fake: FakeTorchNpu) -> None:
    ext = nge.load_extension()
    notes: list[tuple[str | None, str | None]] = []
    gm, x = _gm(), torch.ones(2)
    compiled = nge.npu_graph_compile(gm, (x,), options=_saving(notes), extension=ext)
    assert type(compiled).__name__ == "_CompiledFxGraph" and not hasattr(compiled, "code")
    [(code, why)] = notes
    assert why is None and code == compiled.get_code() and gm.code in code
    assert torch.equal(compiled(x)[0], x * 3)
    compiler_cls = ext.npu_fx_compiler._NpuFxCompiler
    assert "_get_compiled_gm" in vars(compiler_cls)  # the original is back
    assert compiler_cls._get_compiled_gm.__name__ == "_get_compiled_gm"


@pytest.mark.parametrize(
    ("code", "reason"),
    [("call triton_kernel_wrapper_mutation(...)", "process-local Triton kernels"),
     (None, "generated no Python code for this graph")],  # get_code() gave the runner back
)
def test_code_that_cannot_be_reloaded_or_obtained_is_not_handed_out_and_says_why(
        fake: FakeTorchNpu, monkeypatch: pytest.MonkeyPatch, code: str | None,
        reason: str) -> None:
    ext = nge.load_extension()
    compiled_cls = ext.npu_fx_compiler._CompiledFxGraph
    monkeypatch.setattr(compiled_cls, "get_code",
                        lambda self, extend_config=None: self.runner if code is None else code)
    notes: list[tuple[str | None, str | None]] = []
    nge.npu_graph_compile(_gm(), [torch.ones(2)], options=_saving(notes), extension=ext)
    [(handed, why)] = notes
    assert handed is None and why is not None and reason in why


def test_nothing_is_asked_without_a_listener(fake: FakeTorchNpu,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    ext = nge.load_extension()
    compiler_cls = ext.npu_fx_compiler._NpuFxCompiler
    original = compiler_cls._get_compiled_gm
    seen: list[Any] = []

    def spy(self: Any, gm: Any, example_inputs: Any) -> Any:
        seen.append(compiler_cls._get_compiled_gm)
        return original(self, gm, example_inputs)

    monkeypatch.setattr(compiler_cls, "_get_compiled_gm", spy)
    nge.npu_graph_compile(_gm(), [torch.ones(2)], options=NpuGraphOptions(), extension=ext)
    assert seen == [spy]  # not wrapped


def test_an_extension_without_the_compiler_class_says_so(fake: FakeTorchNpu) -> None:
    ext = nge.load_extension(("torchair",))  # the seam's torchair has no npu_fx_compiler
    assert nge._compiler_owner(ext) is None
    notes: list[tuple[str | None, str | None]] = []
    loads: list[str | None] = []
    opts = NpuGraphOptions(on_code=lambda code, why: notes.append((code, why)),
                           saved_code="def kernel(*a): pass", on_load=loads.append)
    nge.npu_graph_compile(_gm(), [torch.ones(2)], options=opts, extension=ext)
    why = "torch_npu.dynamo.torchair has no npu_fx_compiler._NpuFxCompiler._get_compiled_gm"
    assert notes == [(None, why)] and loads == [why]


def _saved_code(ext: Any, gm: torch.fx.GraphModule, x: torch.Tensor) -> str:
    notes: list[tuple[str | None, str | None]] = []
    nge.npu_graph_compile(gm, [x], options=_saving(notes), extension=ext)
    [(code, _)] = notes
    assert code is not None
    return code


def test_saved_code_is_loaded_back_through_load_artifacts_instead_of_compiling(
        fake: FakeTorchNpu, monkeypatch: pytest.MonkeyPatch) -> None:
    ext = nge.load_extension()
    x = torch.arange(3.0)
    code = _saved_code(ext, _gm(), x)
    compiler_cls = ext.npu_fx_compiler._NpuFxCompiler

    def must_not_compile(self: Any, gm: Any, example_inputs: Any) -> Any:
        raise AssertionError("compiled although saved code was given")

    monkeypatch.setattr(compiler_cls, "_get_compiled_gm", must_not_compile)
    loads: list[str | None] = []
    opts = NpuGraphOptions(saved_code=code, on_load=loads.append)
    # Another graph object: what runs is the saved code (x * 3), not this graph (x + 1).
    other = torch.fx.symbolic_trace(lambda x: (x + 1,))
    loaded = nge.npu_graph_compile(other, [x], options=opts, extension=ext)
    assert loads == [None]
    assert type(loaded).__name__ == "_CompiledFxGraph" and loaded.config is None
    assert torch.equal(loaded(x)[0], x * 3)
    assert compiler_cls._get_compiled_gm is must_not_compile  # restored


@pytest.mark.parametrize(
    ("code", "error"),
    [("def kernel(:", "SyntaxError"), ("x = 1", "AttributeError")],  # no kernel
)
def test_saved_code_that_does_not_load_is_one_note_and_a_compile(
        fake: FakeTorchNpu, code: str, error: str) -> None:
    ext = nge.load_extension()
    loads: list[str | None] = []
    notes: list[tuple[str | None, str | None]] = []
    opts = NpuGraphOptions(saved_code=code, on_load=loads.append,
                           on_code=lambda new, why: notes.append((new, why)))
    gm, x = _gm(), torch.ones(2)
    compiled = nge.npu_graph_compile(gm, [x], options=opts, extension=ext)
    [why] = loads
    assert why is not None and why.startswith(f"the saved code did not load ({error}")
    assert torch.equal(compiled(x)[0], x * 3)
    [(new_code, None_)] = notes  # the fresh compile's code is handed out to be saved again
    assert new_code is not None and gm.code in new_code and None_ is None


def test_saved_code_of_another_artifact_version_is_refused_by_the_extension(
        fake: FakeTorchNpu, monkeypatch: pytest.MonkeyPatch) -> None:
    ext = nge.load_extension()
    fx_module = ext.npu_fx_compiler
    code = _saved_code(ext, _gm(), torch.ones(2))
    real = fx_module._CompiledFxArtifacts
    monkeypatch.setattr(fx_module, "_CompiledFxArtifacts",
                        lambda py_code: real(version="0.0", py_code=py_code))
    loads: list[str | None] = []
    nge.npu_graph_compile(_gm(), [torch.ones(2)],
                          options=NpuGraphOptions(saved_code=code, on_load=loads.append),
                          extension=ext)
    [why] = loads
    assert why is not None and "Unsupported artifacts version: 0.0, expected: 0.1" in why


# ------------------------------------------------------------------------------ the error
def test_no_extension_names_each_failure_and_the_way_out(
    modules: dict[str, types.ModuleType],
) -> None:
    with pytest.raises(NpuGraphUnavailableError) as info:
        nge.load_extension(("ascend_graph_missing_a", "ascend_graph_missing_b"))
    assert str(info.value) == (
        "the NPU graph backend needs torch_npu's npugraph_ex (or torchair); none imports here "
        "(ascend_graph_missing_a: No module named 'ascend_graph_missing_a'; "
        "ascend_graph_missing_b: No module named 'ascend_graph_missing_b'). Install the 'npu' "
        "extra on an NPU host or use backend='eager'/'inductor'."
    )
    second = types.ModuleType("ascend_graph_second_ext")
    _install(modules, second)
    assert nge.load_extension(("ascend_graph_missing_a", "ascend_graph_second_ext")) is second
    assert nge._EXTENSIONS == ("npugraph_ex", "torchair")  # preferred first
