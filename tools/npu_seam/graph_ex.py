"""Fake npugraph_ex and torchair, shaped like the ones bundled in the torch-npu wheel.

- Module names are the real ones (``torch_npu.dynamo.npugraph_ex``,
  ``torch_npu.dynamo.torchair``); torch_npu also puts them under ``sys.modules`` aliases
  (``npugraph_ex``, ``torchair``) whose ``__name__`` is still the long one.
- ``CompilerConfig`` has exactly the recorded options (nested configs for torchair); setting
  an unknown one, or a value outside an ``OptionValue``'s allowed list, raises ``ValueError``.
- ``_NpuFxCompiler`` lives only in ``npu_fx_compiler``; ``_get_compiled_gm(self, gm,
  example_inputs)`` returns a ``_CompiledFxGraph`` with ``get_code()`` and no ``code``; its
  code is a self-contained module with ``kernel(*inputs)`` that ``__call__`` executes, as the
  real codegen's is, and ``_CompiledFxGraph.load_artifacts(_CompiledFxArtifacts(py_code=...))``
  (the recorded signature and fields) builds a runnable graph back from it.
- ``get_npu_backend`` and ``_process_kwargs_options`` are bound to the recorded signatures.
"""

from __future__ import annotations

import ast
import dataclasses
import types
from collections.abc import Callable
from typing import Any

from tools.npu_seam.record import signature_from_text


def _default_and_allowed(source: str) -> tuple[Any, list[Any] | None]:
    """``"OptionValue(False, [True, False])"`` -> ``(False, [True, False])``."""
    try:
        node = ast.parse(source, mode="eval").body
        if isinstance(node, ast.Call):
            default = ast.literal_eval(node.args[0]) if node.args else None
            allowed = None
            if (isinstance(node.func, ast.Name) and node.func.id == "OptionValue"
                    and len(node.args) > 1 and isinstance(node.args[1], ast.List)):
                allowed = ast.literal_eval(node.args[1])
            return default, allowed
        return ast.literal_eval(node), None
    except (ValueError, SyntaxError):
        return None, None


class FakeConfig:
    """A config object with exactly the recorded options (``tree``: name -> source or subtree)."""

    def __init__(self, tree: dict[str, Any], path: str = "CompilerConfig") -> None:
        allowed: dict[str, list[Any] | None] = {}
        values: dict[str, Any] = {}
        for name, value in tree.items():
            if isinstance(value, dict):
                values[name] = FakeConfig(value, f"{path}.{name}")
                allowed[name] = None
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
                f"{self._path} has no option {name!r}; options: {sorted(self._allowed)}"
            )
        allowed = self._allowed[name]
        if allowed is not None and value not in allowed:
            raise ValueError(f"{self._path}.{name} must be one of {allowed}, got {value!r}")
        self._values[name] = value


def _checked(signature: str, fn: Callable[..., Any], name: str) -> Callable[..., Any]:
    sig = signature_from_text(signature)

    def checked(*args: Any, **kwargs: Any) -> Any:
        try:
            sig.bind(*args, **kwargs)
        except TypeError as exc:
            raise TypeError(f"{name}{sig}: {exc}") from None
        return fn(*args, **kwargs)

    checked.__name__ = checked.__qualname__ = name
    return checked


#: What the fake codegen puts before an FX graph's code so that it runs as a module.
_PRELUDE = ("import operator\nimport torch\nfrom torch import device\n"
            "inf = float('inf')\nnan = float('nan')\n")


def fake_codegen(gm: Any) -> str | None:
    """A self-contained module whose ``kernel(*inputs)`` runs ``gm``, as the real codegen
    emits; None (no code) for graphs that read module attributes, as the real one may."""
    if any(n.op in ("get_attr", "call_module") for n in gm.graph.nodes):
        return None
    return f"{_PRELUDE}{gm.code}\n\ndef kernel(*args):\n    return forward(None, *args)\n"


def compile_py_code(py_code: str) -> types.ModuleType:
    """Execute ``py_code`` as a fresh module, as the real ``_compile_py_code`` does."""
    module = types.ModuleType("ge_mod")
    exec(compile(py_code, "<string>", "exec"), module.__dict__, module.__dict__)
    return module


class FakeCompiledFxGraph:
    """``_CompiledFxGraph``: with a config, ``__call__`` runs the generated code's ``kernel``
    (the runner when there is no code); ``get_code()`` is that code or the runner itself."""

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
        return self.run_kernel(*args, **kwargs)

    def get_code(self, extend_config: Any = None) -> Any:
        code = fake_codegen(self.runner) if hasattr(self.runner, "graph") else None
        return self.runner if code is None else code


def npugraph_ex_modules(record: dict[str, Any]) -> dict[str, types.ModuleType]:
    """The fake npugraph_ex package and the submodules the project imports, by module name."""
    spec = record["graph_extensions"]["npugraph_ex"]
    root = types.ModuleType(spec["module"])
    configs = types.ModuleType(f"{spec['module']}.configs")
    compiler_config = types.ModuleType(spec["option_helper"]["module"])
    fx = types.ModuleType(spec["fx_compiler"]["module"])
    tree = spec["compiler_config"]

    class CompilerConfig(FakeConfig):
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

    class CompiledFxGraph(FakeCompiledFxGraph):
        @classmethod
        def load_artifacts(cls, *args: Any, **kwargs: Any) -> CompiledFxGraph:
            artifacts = load_signature.bind(*args, **kwargs).arguments["artifacts"]
            if artifacts.version != fields["version"]:
                raise RuntimeError(f"Unsupported artifacts version: {artifacts.version}, "
                                   f"expected: {fields['version']}.")
            return cls(compile_py_code(artifacts.py_code).kernel)

        def dump_artifacts(self) -> Any:
            code = self.get_code()
            if not isinstance(code, str):
                raise RuntimeError(f"Compiled fx type {self.runner} does not support serialize.")
            return artifacts_cls(py_code=code)

    CompiledFxGraph.__name__ = CompiledFxGraph.__qualname__ = spec["compiled_graph"]["class"]

    class NpuFxCompiler:
        def __init__(self, config: Any) -> None:
            self.config = config

        def __call__(self, gm: Any, example_inputs: list[Any]) -> Any:
            # Looked up on the class at call time, so a patched method is the one used.
            return type(self)._get_compiled_gm(self, gm, example_inputs)

        def _get_compiled_gm(self, gm: Any, example_inputs: list[Any]) -> FakeCompiledFxGraph:
            gm_signature.bind(self, gm, example_inputs)
            return CompiledFxGraph(gm, self.config)

    NpuFxCompiler.__name__ = NpuFxCompiler.__qualname__ = spec["fx_compiler"]["class"]

    def get_npu_backend(*, compiler_config: Any = None, custom_decompositions: Any = None) -> Any:
        config = compiler_config if compiler_config is not None else CompilerConfig()
        return lambda gm, example_inputs: NpuFxCompiler(config)(gm, example_inputs)

    compiler_config.CompilerConfig = CompilerConfig  # type: ignore[attr-defined]
    compiler_config._process_kwargs_options = _checked(  # type: ignore[attr-defined]
        spec["option_helper"]["signature"], process_kwargs_options, "_process_kwargs_options")
    setattr(fx, spec["fx_compiler"]["class"], NpuFxCompiler)
    setattr(fx, spec["compiled_graph"]["class"], CompiledFxGraph)
    setattr(fx, spec["artifacts"]["class"], artifacts_cls)
    root.CompilerConfig = CompilerConfig  # type: ignore[attr-defined]
    root.get_npu_backend = _checked(  # type: ignore[attr-defined]
        spec["get_npu_backend"], get_npu_backend, "get_npu_backend")
    root.npu_fx_compiler = fx  # type: ignore[attr-defined]
    root.configs = configs  # type: ignore[attr-defined]
    configs.compiler_config = compiler_config  # type: ignore[attr-defined]
    return {m.__name__: m for m in (root, configs, compiler_config, fx)}


def torchair_modules(record: dict[str, Any]) -> dict[str, types.ModuleType]:
    """The fake torchair package (its config tree and ``get_npu_backend``), by module name."""
    spec = record["graph_extensions"]["torchair"]
    root = types.ModuleType(spec["module"])
    tree = spec["compiler_config"]

    class CompilerConfig(FakeConfig):
        def __init__(self) -> None:
            super().__init__(tree)

    def get_npu_backend(*, compiler_config: Any = None, custom_decompositions: Any = None) -> Any:
        return lambda gm, example_inputs: gm

    root.CompilerConfig = CompilerConfig  # type: ignore[attr-defined]
    root.get_npu_backend = _checked(  # type: ignore[attr-defined]
        spec["get_npu_backend"], get_npu_backend, "get_npu_backend")
    return {root.__name__: root}
