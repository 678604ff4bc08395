"""The emulated npugraph_ex and torchair, shaped like the ones bundled in the torch-npu wheel.

One implementation for the emulated device (``device.install``) and for the unit-test seam
(``torch_npu_double.seam``), both built from the record of the real wheel
(``torch_npu_double/torch_npu-<version>.json`` ``graph_extensions``):

- Module names are the real ones (``torch_npu.dynamo``, ``torch_npu.dynamo.npugraph_ex`` with
  ``configs.compiler_config`` and ``npu_fx_compiler``, ``torch_npu.dynamo.torchair``); torch_npu
  also puts the extensions under ``sys.modules`` aliases (``npugraph_ex``, ``torchair``) whose
  ``__name__`` is still the long one. ``extension_modules`` gives all of them by name.
- ``CompilerConfig`` has exactly the recorded options (nested configs for torchair); setting
  an unknown one, or a value outside an ``OptionValue``'s allowed list, raises ``ValueError``.
- ``get_npu_backend`` and ``_process_kwargs_options`` are bound to the recorded signatures.
- ``_NpuFxCompiler`` lives only in ``npu_fx_compiler``; ``_get_compiled_gm(self, gm,
  example_inputs)`` returns a ``_CompiledFxGraph`` with ``get_code()`` and no ``code``.

Compiling runs the FX graph it is given. The generated code is a self-contained module: the
graph's own Python (``gm.code``: its ATen, ``ascend.*`` and ``vllm.*`` op calls) after a
prelude of the names it uses, with ``kernel(*inputs)`` calling it, as the real codegen emits;
``_CompiledFxGraph.__call__`` executes that kernel, so on the emulated device each op
dispatches on the ``npu`` tensors it gets (``ascend.*`` ops to their NPU adapters and the
emulated torch_npu kernels). A graph that reads module attributes gets no code (``get_code()``
returns the runner, as the real one may) and runs as the graph module itself.
``_CompiledFxGraph.load_artifacts(_CompiledFxArtifacts(py_code=...))`` (the recorded signature
and fields) builds a runnable graph back from saved code. The graph always runs eagerly,
whatever ``force_eager`` or torchair's ``mode`` say: the emulation has no aclgraph capture of
its own inside a compiled graph (whole-forward graphs are the runtime's ``NPUGraph``).

``GraphExTally`` (harness only, not part of the real modules' surface) counts what the
extensions did: graphs handed to each backend with the ``ascend.*``-like op calls each held,
code loaded back, and runs of compiled graphs.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib.machinery
import types
from collections import Counter
from collections.abc import Callable
from typing import Any

from torch_npu_double.record import signature_from_text

#: Op namespaces a tally leaves out: torch's own; what is left is the model's device ops.
_TORCH_NAMESPACES = frozenset({"aten", "prims", "_operator", "operator", "builtins"})


@dataclasses.dataclass
class GraphExTally:
    """What the emulated graph extensions did: ``compiled`` graphs per extension (those its
    backend was handed), ``graph_ops`` the non-ATen op calls of each such graph
    (``"ascend.rms_norm"`` -> count), ``loaded`` graphs built from saved code and ``runs`` of
    npugraph_ex's compiled graphs."""

    compiled: Counter[str] = dataclasses.field(default_factory=Counter)
    graph_ops: list[dict[str, int]] = dataclasses.field(default_factory=list)
    loaded: int = 0
    runs: int = 0

    def note_graph(self, kind: str, gm: Any) -> None:
        self.compiled[kind] += 1
        graph = getattr(gm, "graph", None)
        nodes = graph.nodes if graph is not None else ()
        ops: Counter[str] = Counter()
        for node in nodes:
            name = _op_name(node) if node.op == "call_function" else None
            if name is not None:
                ops[name] += 1
        self.graph_ops.append(dict(ops))

    def report(self) -> dict[str, Any]:
        """JSON-ready: ``compiled`` (extension -> graphs), ``graph_ops``, ``loaded``, ``runs``."""
        return {"compiled": dict(self.compiled), "graph_ops": [dict(g) for g in self.graph_ops],
                "loaded": self.loaded, "runs": self.runs}


def _op_name(node: Any) -> str | None:
    """``"ascend.rms_norm"`` for a call of ``torch.ops.ascend.rms_norm.default`` (also inside
    ``auto_functionalized``, the form of a mutating op in a functional graph); None for torch's
    own ops and plain Python callables."""
    target = node.target
    if str(getattr(target, "__name__", "")).startswith("auto_functionalized") and node.args:
        target = node.args[0]
    schema = getattr(target, "_schema", None)
    if schema is None:
        return None
    namespace, _, name = str(schema.name).partition("::")
    return None if namespace in _TORCH_NAMESPACES else f"{namespace}.{name}"


def _module(name: str, doc: str | None = None) -> types.ModuleType:
    """A package module with a spec (``importlib.util.find_spec`` raises on one without)."""
    module = types.ModuleType(name, doc)
    module.__spec__ = importlib.machinery.ModuleSpec(name, None, is_package=True)
    module.__path__ = []
    return module


def _default_and_allowed(source: str) -> tuple[Any, list[Any] | None]:
    """``"OptionValue(False, [True, False])"`` -> ``(False, [True, False])``; a default that is
    no literal is None."""
    try:
        node = ast.parse(source, mode="eval").body
        if not isinstance(node, ast.Call):
            return ast.literal_eval(node), None
        default = ast.literal_eval(node.args[0]) if node.args else None
        allowed = None
        if (isinstance(node.func, ast.Name) and node.func.id == "OptionValue"
                and len(node.args) > 1 and isinstance(node.args[1], ast.List)):
            allowed = ast.literal_eval(node.args[1])
        return default, allowed
    except (ValueError, SyntaxError):
        return None, None


class RecordedConfig:
    """A config object with exactly the recorded options (``tree``: name -> source or subtree)."""

    def __init__(self, tree: dict[str, Any], path: str = "CompilerConfig") -> None:
        allowed: dict[str, list[Any] | None] = {}
        values: dict[str, Any] = {}
        for name, value in tree.items():
            if isinstance(value, dict):
                values[name], allowed[name] = RecordedConfig(value, f"{path}.{name}"), None
            else:
                values[name], allowed[name] = _default_and_allowed(value)
        object.__setattr__(self, "_path", path)
        object.__setattr__(self, "_allowed", allowed)
        object.__setattr__(self, "_values", values)

    def __getattr__(self, name: str) -> Any:
        values = object.__getattribute__(self, "_values")
        if name not in values:
            raise AttributeError(f"{self._path} has no option {name!r}")
        return values[name]

    def __setattr__(self, name: str, value: Any) -> None:
        if name not in self._allowed:
            raise ValueError(
                f"{self._path} has no option {name!r}; options: {sorted(self._allowed)}")
        allowed = self._allowed[name]
        if allowed is not None and value not in allowed:
            raise ValueError(f"{self._path}.{name} must be one of {allowed}, got {value!r}")
        self._values[name] = value


def _checked(signature: str, fn: Callable[..., Any], name: str) -> Callable[..., Any]:
    """``fn`` whose calls first bind to the recorded ``signature`` (``TypeError`` naming it)."""
    sig = signature_from_text(signature)

    def checked(*args: Any, **kwargs: Any) -> Any:
        try:
            sig.bind(*args, **kwargs)
        except TypeError as exc:
            raise TypeError(f"{name}{sig}: {exc}") from None
        return fn(*args, **kwargs)

    checked.__name__ = checked.__qualname__ = name
    return checked


#: What the generated code puts before an FX graph's code so that it runs as a module.
_PRELUDE = ("import operator\nimport torch\nfrom torch import device\n"
            "inf = float('inf')\nnan = float('nan')\n")


def generated_code(gm: Any) -> str | None:
    """A self-contained module whose ``kernel(*inputs)`` runs ``gm``, as the real codegen
    emits; None (no code) for a graph that reads module attributes, as the real one may."""
    if any(n.op in ("get_attr", "call_module") for n in gm.graph.nodes):
        return None
    return f"{_PRELUDE}{gm.code}\n\ndef kernel(*args):\n    return forward(None, *args)\n"


def compile_py_code(py_code: str) -> types.ModuleType:
    """Execute ``py_code`` as a fresh module, as the real ``_compile_py_code`` does."""
    module = types.ModuleType("ge_mod")
    exec(compile(py_code, "<string>", "exec"), module.__dict__, module.__dict__)
    return module


class CompiledFxGraph:
    """``_CompiledFxGraph``: with a config, ``__call__`` runs the generated code's ``kernel``
    (the runner when there is no code); ``get_code()`` is that code or the runner itself."""

    tally: GraphExTally | None = None  # set on the per-install subclass

    def __init__(self, runner: Any, config: Any = None) -> None:
        self.runner = runner
        self.config = config
        self.run_kernel: Any = None
        self._debug_path = None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.run_kernel is None:
            code = self.get_code() if self.config is not None else self.runner
            self.run_kernel = (compile_py_code(code).kernel if isinstance(code, str)
                               else self.runner)
        if self.tally is not None:
            self.tally.runs += 1
        return self.run_kernel(*args, **kwargs)

    def get_code(self, extend_config: Any = None) -> Any:
        code = generated_code(self.runner) if hasattr(self.runner, "graph") else None
        return self.runner if code is None else code


def npugraph_ex_modules(record: dict[str, Any],
                        tally: GraphExTally | None = None) -> dict[str, types.ModuleType]:
    """The npugraph_ex package and the submodules the project imports, by module name;
    ``tally`` (default: a fresh one) hears the graphs it compiles, loads and runs."""
    counts = tally if tally is not None else GraphExTally()
    spec = record["graph_extensions"]["npugraph_ex"]
    root = _module(spec["module"])
    configs = _module(f"{spec['module']}.configs")
    compiler_config = _module(spec["option_helper"]["module"])
    fx = _module(spec["fx_compiler"]["module"])
    tree = spec["compiler_config"]

    class CompilerConfig(RecordedConfig):
        def __init__(self) -> None:
            super().__init__(tree)

    def process_kwargs_options(config: Any, kwargs: dict[str, Any]) -> None:
        for option, value in kwargs.get("options", {}).items():
            setattr(config, option, value)

    gm_signature = signature_from_text(spec["fx_compiler"]["_get_compiled_gm"])
    load_signature = signature_from_text(spec["compiled_graph"]["load_artifacts"])
    fields = {name: ast.literal_eval(default)
              for name, default in spec["artifacts"]["fields"].items()}
    artifacts_cls = dataclasses.make_dataclass(
        spec["artifacts"]["class"],
        [(name, Any, dataclasses.field(default=default)) for name, default in fields.items()])

    class Compiled(CompiledFxGraph):
        @classmethod
        def load_artifacts(cls, *args: Any, **kwargs: Any) -> Compiled:
            artifacts = load_signature.bind(*args, **kwargs).arguments["artifacts"]
            if artifacts.version != fields["version"]:
                raise RuntimeError(f"Unsupported artifacts version: {artifacts.version}, "
                                   f"expected: {fields['version']}.")
            loaded = cls(compile_py_code(artifacts.py_code).kernel)
            counts.loaded += 1
            return loaded

        def dump_artifacts(self) -> Any:
            code = self.get_code()
            if not isinstance(code, str):
                raise RuntimeError(f"Compiled fx type {self.runner} does not support serialize.")
            return artifacts_cls(py_code=code)

    Compiled.tally = counts
    Compiled.__name__ = Compiled.__qualname__ = spec["compiled_graph"]["class"]

    class NpuFxCompiler:
        def __init__(self, config: Any) -> None:
            self.config = config

        def __call__(self, gm: Any, example_inputs: list[Any]) -> Any:
            # Looked up on the class at call time, so a patched method is the one used.
            return type(self)._get_compiled_gm(self, gm, example_inputs)

        def _get_compiled_gm(self, gm: Any, example_inputs: list[Any]) -> CompiledFxGraph:
            gm_signature.bind(self, gm, example_inputs)
            return Compiled(gm, self.config)

    NpuFxCompiler.__name__ = NpuFxCompiler.__qualname__ = spec["fx_compiler"]["class"]

    def get_npu_backend(*, compiler_config: Any = None, custom_decompositions: Any = None) -> Any:
        config = compiler_config if compiler_config is not None else CompilerConfig()

        def backend(gm: Any, example_inputs: list[Any]) -> Any:
            counts.note_graph("npugraph_ex", gm)
            return NpuFxCompiler(config)(gm, example_inputs)

        return backend

    compiler_config.CompilerConfig = CompilerConfig  # type: ignore[attr-defined]
    compiler_config._process_kwargs_options = _checked(  # type: ignore[attr-defined]
        spec["option_helper"]["signature"], process_kwargs_options, "_process_kwargs_options")
    setattr(fx, spec["fx_compiler"]["class"], NpuFxCompiler)
    setattr(fx, spec["compiled_graph"]["class"], Compiled)
    setattr(fx, spec["artifacts"]["class"], artifacts_cls)
    root.CompilerConfig = CompilerConfig  # type: ignore[attr-defined]
    root.get_npu_backend = _checked(  # type: ignore[attr-defined]
        spec["get_npu_backend"], get_npu_backend, "get_npu_backend")
    root.npu_fx_compiler = fx  # type: ignore[attr-defined]
    root.configs = configs  # type: ignore[attr-defined]
    configs.compiler_config = compiler_config  # type: ignore[attr-defined]
    return {m.__name__: m for m in (root, configs, compiler_config, fx)}


def torchair_modules(record: dict[str, Any],
                     tally: GraphExTally | None = None) -> dict[str, types.ModuleType]:
    """The torchair package (its config tree and ``get_npu_backend``, whose backend returns
    the graph module itself), by module name."""
    counts = tally if tally is not None else GraphExTally()
    spec = record["graph_extensions"]["torchair"]
    root = _module(spec["module"])
    tree = spec["compiler_config"]

    class CompilerConfig(RecordedConfig):
        def __init__(self) -> None:
            super().__init__(tree)

    def get_npu_backend(*, compiler_config: Any = None, custom_decompositions: Any = None) -> Any:
        def backend(gm: Any, example_inputs: list[Any]) -> Any:
            counts.note_graph("torchair", gm)
            return gm

        return backend

    root.CompilerConfig = CompilerConfig  # type: ignore[attr-defined]
    root.get_npu_backend = _checked(  # type: ignore[attr-defined]
        spec["get_npu_backend"], get_npu_backend, "get_npu_backend")
    return {root.__name__: root}


def extension_modules(record: dict[str, Any],
                      tally: GraphExTally | None = None) -> dict[str, types.ModuleType]:
    """Every ``sys.modules`` entry of torch_npu's bundled graph extensions: ``torch_npu.dynamo``
    (with ``npugraph_ex`` and ``torchair`` as attributes), both packages and their submodules,
    and the short aliases torch_npu registers (the same module objects, long ``__name__``)."""
    dynamo = _module("torch_npu.dynamo")
    modules = {dynamo.__name__: dynamo}
    for key, make in (("npugraph_ex", npugraph_ex_modules), ("torchair", torchair_modules)):
        spec = record["graph_extensions"][key]
        found = make(record, tally)
        modules.update(found)
        root = found[spec["module"]]
        setattr(dynamo, spec["module"].rsplit(".", 1)[-1], root)
        modules[spec["sys_modules_alias"]] = root
    return modules
