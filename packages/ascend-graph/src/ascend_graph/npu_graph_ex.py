"""The NPU graph extension backend, loaded only when used.

`npugraph_ex` is preferred; `torchair` is the fallback. torch_npu bundles both (as
`torch_npu.dynamo.npugraph_ex` / `torch_npu.dynamo.torchair`, reachable under the short names
through lazy proxies in `sys.modules`, whose `__name__` is the long one), and both expose
`get_npu_backend(compiler_config=...)` and a `CompilerConfig`.

Generated code goes to and comes back from the caller's compile cache (this package writes no
files): the extension's `npu_fx_compiler._NpuFxCompiler._get_compiled_gm(self, gm,
example_inputs)` is wrapped for the duration of one compile (always restored, even when
compilation fails). Saving: the real method returns a `_CompiledFxGraph`, whose `get_code()`
gives the generated Python source (or the runner itself when the extension cannot generate
code for the graph); `NpuGraphOptions.on_code` hears `(code, None)` or `(None, why not)`.
Loading: with `NpuGraphOptions.saved_code`, the wrapper returns
`_CompiledFxGraph.load_artifacts(_CompiledFxArtifacts(py_code=saved_code))` instead of
compiling; `NpuGraphOptions.on_load` hears None (loaded) or why it was not (then it compiles).
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, cast

from torch import fx

_EXTENSIONS = ("npugraph_ex", "torchair")


class NpuGraphUnavailableError(RuntimeError):
    """Neither NPU graph extension can be imported."""


@dataclass(frozen=True)
class NpuGraphOptions:
    """Options of the NPU graph backend (the compared ones are part of `compute_hash`)."""

    static_kernel: bool = False
    decode_batch_sizes: tuple[int, ...] = ()
    #: Hears each compile's generated code: `(code, None)`, or `(None, why there is none)`.
    on_code: Callable[[str | None, str | None], None] | None = field(default=None, compare=False)
    #: Code an earlier compile of the same graph generated, to load back instead of compiling.
    saved_code: str | None = field(default=None, compare=False)
    #: Hears whether `saved_code` was used: None (loaded), or why not (then it compiled).
    on_load: Callable[[str | None], None] | None = field(default=None, compare=False)


def extension_kind(ext: ModuleType) -> str:
    """Which extension `ext` is: the last part of its module name (`torch_npu.dynamo.torchair`
    is torchair). `NpuGraphUnavailableError` for a module that is neither."""
    kind = str(ext.__name__).rsplit(".", 1)[-1]
    if kind not in _EXTENSIONS:
        raise NpuGraphUnavailableError(
            f"{ext.__name__!r} is not an NPU graph extension; expected one of "
            f"{', '.join(_EXTENSIONS)} (or torch_npu.dynamo.<name>)")
    return kind


def load_extension(names: Sequence[str] = _EXTENSIONS) -> ModuleType:
    """Import the first available NPU graph extension."""
    errors = []
    for name in names:
        try:
            return importlib.import_module(name)
        except ImportError as exc:
            errors.append(f"{name}: {exc}")
    raise NpuGraphUnavailableError(
        "the NPU graph backend needs torch_npu's npugraph_ex (or torchair); "
        f"none imports here ({'; '.join(errors)}). Install the 'npu' extra on an NPU host "
        "or use backend='eager'/'inductor'."
    )


@contextlib.contextmanager
def patched_attribute(owner: Any, name: str, value: Any) -> Iterator[None]:
    """Set `owner.name = value` for the block; the original is restored on any exit."""
    missing = object()
    original = owner.__dict__.get(name, missing) if hasattr(owner, "__dict__") else missing
    setattr(owner, name, value)
    try:
        yield
    finally:
        if original is missing:
            delattr(owner, name)
        else:
            setattr(owner, name, original)


#: Modules of npugraph_ex releases that hold its option helper (newest first).
_OPTION_HELPER_MODULES = ("configs.compiler_config", "configs.npugraphex_config")


def npugraph_ex_options(options: NpuGraphOptions) -> dict[str, Any]:
    """The npugraph_ex options for `options`: run the FX graph eagerly before capture, no
    in-place rewrite (it would move gelu to the CPU), no input/output copies; with the static
    kernel, compile static-shape kernels for the decode batch sizes only."""
    opts: dict[str, Any] = {
        "force_eager": True, "inplace_pass": False, "clone_input": False, "clone_output": False,
    }  # fmt: skip
    if options.static_kernel:
        opts["static_kernel_compile"] = True
        opts["_vllm_aclnn_static_kernel_sym_range"] = list(options.decode_batch_sizes)
    return opts


def _option_helper(ext: ModuleType) -> Callable[[Any, dict[str, Any]], None] | None:
    """npugraph_ex's own `_process_kwargs_options(config, {"options": ...})`, if it has one."""
    for name in _OPTION_HELPER_MODULES:
        try:
            module = importlib.import_module(f"{ext.__name__}.{name}")
        except ImportError:
            continue
        helper = getattr(module, "_process_kwargs_options", None)
        if callable(helper):
            return cast(Callable[[Any, dict[str, Any]], None], helper)
    return None


def _compiler_config(ext: ModuleType, options: NpuGraphOptions) -> Any:
    config = ext.CompilerConfig()
    if extension_kind(ext) == "torchair":
        config.mode = "reduce-overhead"
        config.debug.run_eagerly = True
        config.debug.aclgraph.disable_reinplace_inplaceable_ops_pass = True
        if options.static_kernel:
            aclgraph = config.experimental_config.aclgraph
            aclgraph._aclnn_static_shape_kernel = True
            aclgraph._aclnn_static_shape_kernel_sym_value_range = list(options.decode_batch_sizes)
        return config
    opts = npugraph_ex_options(options)
    helper = _option_helper(ext)
    if helper is not None:  # validates the values and knows older config layouts
        helper(config, {"options": opts})
    else:
        for key, value in opts.items():
            setattr(config, key, value)
    return config


def _code_of(compiled: Any) -> tuple[str | None, str | None]:
    """(generated code, None) from a `_CompiledFxGraph`, or (None, why there is none)."""
    get_code = getattr(compiled, "get_code", None)
    if not callable(get_code):
        return None, (f"the extension's compiled graph ({type(compiled).__name__}) has no "
                      "get_code()")
    code = get_code()
    if not isinstance(code, str):
        return None, "the extension generated no Python code for this graph (get_code())"
    # Triton side-table indices are process-local: such code cannot be reloaded.
    if "triton_kernel_wrapper" in code:
        return None, "it calls process-local Triton kernels"
    return code, None


def _saving_compiler(original: Callable[..., Any],
                     report: Callable[[str | None, str | None], None]) -> Callable[..., Any]:
    """Wrap `_get_compiled_gm(self, gm, example_inputs)` so that `report` hears the generated
    code, or why there is none."""

    def produce(self: Any, gm: fx.GraphModule, example_inputs: Any, *args: Any,
                **kwargs: Any) -> Any:
        compiled = original(self, gm, example_inputs, *args, **kwargs)
        report(*_code_of(compiled))
        return compiled

    return produce


def _loading_compiler(compile_gm: Callable[..., Any], owner: Any, code: str,
                      report: Callable[[str | None], None]) -> Callable[..., Any]:
    """Wrap `_get_compiled_gm` so that it builds the compiled graph from `code` through the
    extension's own `_CompiledFxGraph.load_artifacts`; `compile_gm` runs when that fails."""

    def produce(self: Any, gm: fx.GraphModule, example_inputs: Any, *args: Any,
                **kwargs: Any) -> Any:
        try:
            artifacts = owner._CompiledFxArtifacts(py_code=code)
            loaded = owner._CompiledFxGraph.load_artifacts(artifacts)
        except Exception as exc:  # stale or foreign code must only cost a compile
            report(f"the saved code did not load ({type(exc).__name__}: {exc}); compiled again")
            return compile_gm(self, gm, example_inputs, *args, **kwargs)
        report(None)
        return loaded

    return produce


def _compiler_owner(ext: ModuleType) -> tuple[Any, Any] | None:
    """`(module, _NpuFxCompiler)`: the extension's `npu_fx_compiler` module (it also holds
    `_CompiledFxGraph` and `_CompiledFxArtifacts`) and its FX compiler class; None if absent."""
    for owner in (getattr(ext, "npu_fx_compiler", None), ext):
        cls = getattr(owner, "_NpuFxCompiler", None)
        if cls is not None and hasattr(cls, "_get_compiled_gm"):
            return owner, cls
    return None


def npu_graph_compile(
    gm: fx.GraphModule,
    example_inputs: Sequence[Any],
    *,
    options: NpuGraphOptions,
    extension: ModuleType | None = None,
) -> Callable[..., Any]:
    """Compile `gm` (already rewritten by the passes) with the NPU graph extension."""
    ext = extension if extension is not None else load_extension()
    backend = ext.get_npu_backend(compiler_config=_compiler_config(ext, options))
    inputs = list(example_inputs)
    if options.on_code is None and options.saved_code is None:
        return cast(Callable[..., Any], backend(gm, inputs))
    found = _compiler_owner(ext)
    if found is None:
        why = f"{ext.__name__} has no npu_fx_compiler._NpuFxCompiler._get_compiled_gm"
        if options.saved_code is not None and options.on_load is not None:
            options.on_load(why)
        if options.on_code is not None:
            options.on_code(None, why)
        return cast(Callable[..., Any], backend(gm, inputs))
    owner, compiler_cls = found
    compile_gm = compiler_cls._get_compiled_gm
    if options.on_code is not None:
        compile_gm = _saving_compiler(compile_gm, options.on_code)
    if options.saved_code is not None:
        compile_gm = _loading_compiler(compile_gm, owner, options.saved_code,
                                       options.on_load or (lambda reason: None))
    with patched_attribute(compiler_cls, "_get_compiled_gm", compile_gm):
        return cast(Callable[..., Any], backend(gm, inputs))
