"""The NPU graph extension backend, loaded only when used.

`npugraph_ex` is preferred; `torchair` is the fallback. torch_npu bundles both (as
`torch_npu.dynamo.npugraph_ex` / `torch_npu.dynamo.torchair`, reachable under the short names
through lazy proxies in `sys.modules`, whose `__name__` is the long one), and both expose
`get_npu_backend(compiler_config=...)` and a `CompilerConfig`.

To save generated code in the compile cache, the extension's
`npu_fx_compiler._NpuFxCompiler._get_compiled_gm(self, gm, example_inputs)` is wrapped for the
duration of one compile (always restored, even when compilation fails): it returns a
`_CompiledFxGraph`, whose `get_code()` gives the generated Python source (or the runner itself
when the extension cannot generate code for the graph). `NpuGraphOptions.on_code` hears what
became of the code: None when saved, else the reason it was not.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, cast

from torch import fx

_EXTENSIONS = ("npugraph_ex", "torchair")


class NpuGraphUnavailableError(RuntimeError):
    """Neither NPU graph extension can be imported."""


@dataclass(frozen=True)
class NpuGraphOptions:
    """Options of the NPU graph backend (all part of `compute_hash`)."""

    static_kernel: bool = False
    decode_batch_sizes: tuple[int, ...] = ()
    cache_dir: str | None = None
    cache_key: str | None = None
    #: Called once per compile that was to save code: None (saved) or why it was not.
    on_code: Callable[[str | None], None] | None = field(default=None, compare=False)


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


def _saving_compiler(original: Callable[..., Any], path: Path,
                     report: Callable[[str | None], None]) -> Callable[..., Any]:
    """Wrap `_get_compiled_gm(self, gm, example_inputs)` so the generated code lands in
    `path`; `report` hears None (saved) or the reason it was not."""

    def produce(self: Any, gm: fx.GraphModule, example_inputs: Any, *args: Any,
                **kwargs: Any) -> Any:
        compiled = original(self, gm, example_inputs, *args, **kwargs)
        code, reason = _code_of(compiled)
        if code is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(code, encoding="utf-8")
        report(reason)
        return compiled

    return produce


def _compiler_class(ext: ModuleType) -> Any:
    """The extension's FX compiler class: `npu_fx_compiler._NpuFxCompiler` (None if absent)."""
    for owner in (getattr(ext, "npu_fx_compiler", None), ext):
        cls = getattr(owner, "_NpuFxCompiler", None)
        if cls is not None and hasattr(cls, "_get_compiled_gm"):
            return cls
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
    if not (options.cache_dir and options.cache_key):
        return cast(Callable[..., Any], backend(gm, list(example_inputs)))
    report = options.on_code or (lambda reason: None)
    compiler_cls = _compiler_class(ext)
    if compiler_cls is None:
        report(f"{ext.__name__} has no npu_fx_compiler._NpuFxCompiler._get_compiled_gm")
        return cast(Callable[..., Any], backend(gm, list(example_inputs)))
    path = Path(options.cache_dir) / options.cache_key
    original = compiler_cls._get_compiled_gm
    with patched_attribute(compiler_cls, "_get_compiled_gm",
                           _saving_compiler(original, path, report)):
        return cast(Callable[..., Any], backend(gm, list(example_inputs)))
