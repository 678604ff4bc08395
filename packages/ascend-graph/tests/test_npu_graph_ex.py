"""The NPU graph extension seam: the bundled npugraph_ex / torchair of the schema-bound fake
torch_npu (``tools.npu_seam``: real module names, config options, ``_get_compiled_gm(self, gm,
example_inputs)`` returning a ``_CompiledFxGraph`` with ``get_code()``), the compiler config
each one gets, saving generated code, the error."""

from __future__ import annotations

import os
import subprocess
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from ascend_graph import npu_graph_ex as nge
from ascend_graph.npu_graph_ex import NpuGraphOptions, NpuGraphUnavailableError

from tools.npu_seam import FakeTorchNpu, install

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


# ---------------------------------------------------------------------- saving generated code
def test_generated_code_is_saved_through_get_code(fake: FakeTorchNpu, tmp_path: Path) -> None:
    ext = nge.load_extension()
    target = tmp_path / "new" / "dir"  # created on demand
    notes: list[str | None] = []
    opts = NpuGraphOptions(cache_dir=str(target), cache_key="key", on_code=notes.append)
    gm, x = _gm(), torch.ones(2)
    compiled = nge.npu_graph_compile(gm, (x,), options=opts, extension=ext)
    assert type(compiled).__name__ == "FakeCompiledFxGraph" and not hasattr(compiled, "code")
    assert (target / "key").read_text(encoding="utf-8") == compiled.get_code() == gm.code
    assert notes == [None]
    assert torch.equal(compiled(x)[0], x * 3)
    compiler_cls = ext.npu_fx_compiler._NpuFxCompiler
    assert "_get_compiled_gm" in vars(compiler_cls)  # the original is back
    assert compiler_cls._get_compiled_gm.__name__ == "_get_compiled_gm"


@pytest.mark.parametrize(
    ("code", "reason"),
    [("call triton_kernel_wrapper_mutation(...)", "process-local Triton kernels"),
     (None, "generated no Python code for this graph")],  # get_code() gave the runner back
)
def test_code_that_cannot_be_reloaded_or_obtained_is_not_saved_and_says_why(
        fake: FakeTorchNpu, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: str | None,
        reason: str) -> None:
    ext = nge.load_extension()
    compiled_cls = type(nge.npu_graph_compile(_gm(), [torch.ones(2)], options=NpuGraphOptions(),
                                              extension=ext))
    monkeypatch.setattr(compiled_cls, "get_code",
                        lambda self, extend_config=None: self.runner if code is None else code)
    notes: list[str | None] = []
    opts = NpuGraphOptions(cache_dir=str(tmp_path), cache_key="k", on_code=notes.append)
    nge.npu_graph_compile(_gm(), [torch.ones(2)], options=opts, extension=ext)
    assert list(tmp_path.iterdir()) == []
    [note] = notes
    assert note is not None and reason in note


def test_nothing_is_asked_or_saved_without_a_place(fake: FakeTorchNpu, tmp_path: Path) -> None:
    ext = nge.load_extension()
    notes: list[str | None] = []
    for cache_dir, key in ((None, "k"), (str(tmp_path / "d"), None)):
        opts = NpuGraphOptions(cache_dir=cache_dir, cache_key=key, on_code=notes.append)
        nge.npu_graph_compile(_gm(), [torch.ones(2)], options=opts, extension=ext)
    assert list(tmp_path.rglob("*")) == [] and notes == []


def test_an_extension_without_the_compiler_class_says_so(fake: FakeTorchNpu,
                                                         tmp_path: Path) -> None:
    ext = nge.load_extension(("torchair",))  # the seam's torchair has no npu_fx_compiler
    assert nge._compiler_class(ext) is None
    notes: list[str | None] = []
    opts = NpuGraphOptions(cache_dir=str(tmp_path), cache_key="k", on_code=notes.append)
    nge.npu_graph_compile(_gm(), [torch.ones(2)], options=opts, extension=ext)
    assert list(tmp_path.iterdir()) == []
    assert notes == ["torch_npu.dynamo.torchair has no npu_fx_compiler._NpuFxCompiler."
                     "_get_compiled_gm"]


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


def test_saved_code_is_utf8_under_a_non_utf8_locale(tmp_path: Path) -> None:
    """The C locale without UTF-8 mode writes ASCII by default; the saved code is UTF-8."""
    script = (
        "import locale, sys, types\n"
        "from pathlib import Path\n"
        "from ascend_graph.npu_graph_ex import _saving_compiler\n"
        "print(sys.flags.utf8_mode, locale.getpreferredencoding(False))\n"
        "made = types.SimpleNamespace(get_code=lambda: '# r\\u00e9sum\\u00e9 \\u2192 fused\\n')\n"
        "produce = _saving_compiler(lambda self, gm, inputs: made, Path(sys.argv[1]), print)\n"
        "produce(object(), None, [])\n"
    )
    env = {**os.environ, "LC_ALL": "C", "LANG": "C", "PYTHONUTF8": "0",
           "PYTHONCOERCECLOCALE": "0", "PYTHONPATH": os.pathsep.join(sys.path)}  # fmt: skip
    target = tmp_path / "code.py"
    done = subprocess.run([sys.executable, "-c", script, str(target)], env=env,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    utf8_mode, encoding, note = done.stdout.split()
    assert utf8_mode == "0" and encoding.lower() not in ("utf-8", "utf8") and note == "None"
    assert target.read_bytes() == "# résumé → fused\n".encode()
