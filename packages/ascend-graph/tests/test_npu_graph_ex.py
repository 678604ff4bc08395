"""The NPU graph extension seam with fake `npugraph_ex` / `torchair` modules: the compiler
config each one gets, npugraph_ex's own option helper, saving generated code, the error."""

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

OPTIONS = {"force_eager": True, "inplace_pass": False, "clone_input": False,
           "clone_output": False}  # fmt: skip


class _Config:
    """A bare config object: records every attribute set on it."""


def _extension(name: str, compiled: Any = None, *, nested: bool = False) -> types.ModuleType:
    """A fake extension whose backend returns `compiled` (default: the graph module)."""
    ext = types.ModuleType(name)
    ext.CompilerConfig = _Config  # type: ignore[attr-defined]

    class _NpuFxCompiler:
        def _get_compiled_gm(self, gm: Any) -> Any:
            return gm if compiled is None else compiled

    owner: Any = ext
    if nested:  # some releases keep the compiler class in a submodule
        owner = types.SimpleNamespace()
        ext.npu_fx_compiler = owner  # type: ignore[attr-defined]
    owner._NpuFxCompiler = _NpuFxCompiler

    def get_npu_backend(compiler_config: Any) -> Any:
        ext.config = compiler_config  # type: ignore[attr-defined]

        def backend(gm: Any, inputs: Any) -> Any:
            ext.inputs = inputs  # type: ignore[attr-defined]
            return _NpuFxCompiler()._get_compiled_gm(gm)

        return backend

    ext.get_npu_backend = get_npu_backend  # type: ignore[attr-defined]
    return ext


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


# ------------------------------------------------------------------------- compiler config
def test_torchair_gets_reduce_overhead_eager_run_and_no_reinplace() -> None:
    ext = _extension("torchair")

    class _TorchairConfig:
        def __init__(self) -> None:
            self.debug = types.SimpleNamespace(aclgraph=types.SimpleNamespace())
            self.experimental_config = types.SimpleNamespace(aclgraph=types.SimpleNamespace())

    ext.CompilerConfig = _TorchairConfig  # type: ignore[attr-defined]
    nge.npu_graph_compile(_gm(), [torch.ones(2)], options=NpuGraphOptions(), extension=ext)
    config = ext.config  # type: ignore[attr-defined]
    assert config.mode == "reduce-overhead" and config.debug.run_eagerly is True
    assert config.debug.aclgraph.disable_reinplace_inplaceable_ops_pass is True
    assert vars(config.experimental_config.aclgraph) == {}  # no static kernel asked for
    assert not hasattr(config, "force_eager")  # npugraph_ex's options are not torchair's
    static = NpuGraphOptions(static_kernel=True, decode_batch_sizes=(1, 8))
    nge.npu_graph_compile(_gm(), [torch.ones(2)], options=static, extension=ext)
    aclgraph = ext.config.experimental_config.aclgraph  # type: ignore[attr-defined]
    assert vars(aclgraph) == {"_aclnn_static_shape_kernel": True,
                              "_aclnn_static_shape_kernel_sym_value_range": [1, 8]}


def test_npugraph_ex_without_an_option_helper_gets_the_options_as_attributes() -> None:
    ext = _extension("npugraph_ex")
    nge.npu_graph_compile(_gm(), [torch.ones(2)], options=NpuGraphOptions(), extension=ext)
    assert vars(ext.config) == OPTIONS  # type: ignore[attr-defined]
    static = NpuGraphOptions(static_kernel=True, decode_batch_sizes=(4, 2))
    assert nge.npugraph_ex_options(static) == {
        **OPTIONS, "static_kernel_compile": True, "_vllm_aclnn_static_kernel_sym_range": [4, 2],
    }  # fmt: skip


@pytest.mark.parametrize(
    ("where", "first_exists"),
    [("configs.compiler_config", True), ("configs.npugraphex_config", True),
     ("configs.npugraphex_config", False)],
)
def test_npugraph_ex_option_helper_is_found_in_either_module_and_used(
    modules: dict[str, types.ModuleType], where: str, first_exists: bool
) -> None:
    ext = _extension("npugraph_ex")
    ext.__path__ = []  # type: ignore[attr-defined]  # a package, so submodules can import
    _install(modules, ext)
    _install(modules, types.ModuleType("npugraph_ex.configs"))
    calls: list[tuple[Any, dict[str, Any]]] = []
    helper_module = types.ModuleType(f"npugraph_ex.{where}")
    helper_module._process_kwargs_options = lambda config, kw: calls.append((config, kw))  # type: ignore[attr-defined]
    _install(modules, helper_module)
    if where == "configs.npugraphex_config" and first_exists:  # it exists, without a helper
        _install(modules, types.ModuleType("npugraph_ex.configs.compiler_config"))
    nge.npu_graph_compile(_gm(), [torch.ones(2)], options=NpuGraphOptions(), extension=ext)
    config = ext.config  # type: ignore[attr-defined]
    assert calls == [(config, {"options": OPTIONS})]
    assert vars(config) == {}  # the helper sets the options, not us


def test_a_helper_attribute_that_is_not_callable_is_ignored(
    modules: dict[str, types.ModuleType],
) -> None:
    ext = _extension("npugraph_ex")
    ext.__path__ = []  # type: ignore[attr-defined]
    _install(modules, ext)
    _install(modules, types.ModuleType("npugraph_ex.configs"))
    odd = types.ModuleType("npugraph_ex.configs.compiler_config")
    odd._process_kwargs_options = "not a function"  # type: ignore[attr-defined]
    _install(modules, odd)
    assert nge._option_helper(ext) is None
    nge.npu_graph_compile(_gm(), [torch.ones(2)], options=NpuGraphOptions(), extension=ext)
    assert vars(ext.config) == OPTIONS  # type: ignore[attr-defined]


# ---------------------------------------------------------------------- saving generated code
@pytest.mark.parametrize("nested", [False, True])
def test_generated_code_is_saved_under_the_cache_key(tmp_path: Path, nested: bool) -> None:
    ext = _extension("npugraph_ex", nested=nested)
    target = tmp_path / "new" / "dir"  # created on demand
    opts = NpuGraphOptions(cache_dir=str(target), cache_key="key")
    gm = _gm()
    compiled = nge.npu_graph_compile(gm, (torch.ones(2),), options=opts, extension=ext)
    assert compiled is gm and isinstance(ext.inputs, list)  # type: ignore[attr-defined]
    assert (target / "key").read_text(encoding="utf-8") == gm.code


@pytest.mark.parametrize(
    ("compiled", "cache_dir", "cache_key"),
    [
        (types.SimpleNamespace(code="call triton_kernel_wrapper_mutation(...)"), "d", "k"),
        (types.SimpleNamespace(code=b"bytes are not code text"), "d", "k"),
        (types.SimpleNamespace(), "d", "k"),  # no code at all
        (None, None, "k"),  # no cache directory
        (None, "d", None),  # no cache key
    ],
)
def test_nothing_is_saved_without_reloadable_code_or_a_place(
    tmp_path: Path, compiled: Any, cache_dir: str | None, cache_key: str | None
) -> None:
    ext = _extension("npugraph_ex", compiled)
    opts = NpuGraphOptions(cache_dir=None if cache_dir is None else str(tmp_path / cache_dir),
                           cache_key=cache_key)  # fmt: skip
    nge.npu_graph_compile(_gm(), [torch.ones(2)], options=opts, extension=ext)
    assert list(tmp_path.rglob("*")) == []


def test_a_compiler_class_without_the_producer_is_not_patched(tmp_path: Path) -> None:
    ext = _extension("npugraph_ex")

    class _Older:  # no _get_compiled_gm
        pass

    ext._NpuFxCompiler = _Older  # type: ignore[attr-defined]
    assert nge._compiler_class(ext) is None
    opts = NpuGraphOptions(cache_dir=str(tmp_path), cache_key="k")
    nge.npu_graph_compile(_gm(), [torch.ones(2)], options=opts, extension=ext)
    assert list(tmp_path.iterdir()) == [] and not hasattr(_Older, "_get_compiled_gm")
    assert nge._compiler_class(types.ModuleType("bare")) is None


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


def test_the_producer_keeps_its_instance_and_keyword_arguments(tmp_path: Path) -> None:
    """Saving wraps the compiler's method: it still runs on the compiler instance and gets
    every keyword the extension passes; the example inputs reach the backend as a list."""
    ext = _extension("npugraph_ex")

    class _Compiler:
        def __init__(self) -> None:
            self.tag = "compiler-state"

        def _get_compiled_gm(self, gm: Any, *, note: str = "no note") -> Any:
            return types.SimpleNamespace(code=f"# {self.tag}, {note}\n{gm.code}")

    def get_npu_backend(compiler_config: Any) -> Any:
        def backend(gm: Any, inputs: Any) -> Any:
            ext.inputs = inputs  # type: ignore[attr-defined]
            return _Compiler()._get_compiled_gm(gm, note="from the extension")

        return backend

    ext._NpuFxCompiler = _Compiler  # type: ignore[attr-defined]
    ext.get_npu_backend = get_npu_backend  # type: ignore[attr-defined]
    gm, x = _gm(), torch.ones(2)
    for opts in (NpuGraphOptions(cache_dir=str(tmp_path), cache_key="k"), NpuGraphOptions()):
        compiled = nge.npu_graph_compile(gm, (x,), options=opts, extension=ext)
        assert compiled.code == f"# compiler-state, from the extension\n{gm.code}"
        assert type(ext.inputs) is list and ext.inputs[0] is x  # type: ignore[attr-defined]
    assert (tmp_path / "k").read_text(encoding="utf-8") == compiled.code


def test_saved_code_is_utf8_under_a_non_utf8_locale(tmp_path: Path) -> None:
    """The C locale without UTF-8 mode writes ASCII by default; the saved code is UTF-8."""
    script = (
        "import locale, sys, types\n"
        "from pathlib import Path\n"
        "from ascend_graph.npu_graph_ex import _saving_compiler\n"
        "print(sys.flags.utf8_mode, locale.getpreferredencoding(False))\n"
        "made = types.SimpleNamespace(code='# r\\u00e9sum\\u00e9 \\u2192 fused\\n')\n"
        "_saving_compiler(lambda self: made, Path(sys.argv[1]))(object())\n"
    )
    env = {**os.environ, "LC_ALL": "C", "LANG": "C", "PYTHONUTF8": "0",
           "PYTHONCOERCECLOCALE": "0", "PYTHONPATH": os.pathsep.join(sys.path)}  # fmt: skip
    target = tmp_path / "code.py"
    done = subprocess.run([sys.executable, "-c", script, str(target)], env=env,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    utf8_mode, encoding = done.stdout.split()
    assert utf8_mode == "0" and encoding.lower() not in ("utf-8", "utf8")
    assert target.read_bytes() == "# résumé → fused\n".encode()
