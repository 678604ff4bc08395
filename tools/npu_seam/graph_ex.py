"""Fake npugraph_ex and torchair, shaped like the ones bundled in the torch-npu wheel.

- Module names are the real ones (``torch_npu.dynamo.npugraph_ex``,
  ``torch_npu.dynamo.torchair``); torch_npu also puts them under ``sys.modules`` aliases
  (``npugraph_ex``, ``torchair``) whose ``__name__`` is still the long one.
- ``CompilerConfig`` has exactly the recorded options (nested configs for torchair); setting
  an unknown one, or a value outside an ``OptionValue``'s allowed list, raises ``ValueError``.
- ``_NpuFxCompiler`` lives only in ``npu_fx_compiler``; ``_get_compiled_gm(self, gm,
  example_inputs)`` returns a ``_CompiledFxGraph`` with ``get_code()`` and no ``code``.
- ``get_npu_backend`` and ``_process_kwargs_options`` are bound to the recorded signatures.
"""

from __future__ import annotations

import ast
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


class FakeCompiledFxGraph:
    """``_CompiledFxGraph``: runs the graph module; ``get_code()`` is its Python source."""

    def __init__(self, gm: Any, config: Any) -> None:
        self.runner = gm
        self.config = config
        self.run_kernel = None
        self._debug_path = None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.runner(*args, **kwargs)

    def get_code(self, extend_config: Any = None) -> str:
        return str(self.runner.code)

    def dump_artifacts(self) -> Any:
        return types.SimpleNamespace(py_code=self.get_code())


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

    class NpuFxCompiler:
        def __init__(self, config: Any) -> None:
            self.config = config

        def __call__(self, gm: Any, example_inputs: list[Any]) -> Any:
            # Looked up on the class at call time, so a patched method is the one used.
            return type(self)._get_compiled_gm(self, gm, example_inputs)

        def _get_compiled_gm(self, gm: Any, example_inputs: list[Any]) -> FakeCompiledFxGraph:
            gm_signature.bind(self, gm, example_inputs)
            return FakeCompiledFxGraph(gm, self.config)

    NpuFxCompiler.__name__ = NpuFxCompiler.__qualname__ = spec["fx_compiler"]["class"]

    def get_npu_backend(*, compiler_config: Any = None, custom_decompositions: Any = None) -> Any:
        config = compiler_config if compiler_config is not None else CompilerConfig()
        return lambda gm, example_inputs: NpuFxCompiler(config)(gm, example_inputs)

    compiler_config.CompilerConfig = CompilerConfig  # type: ignore[attr-defined]
    compiler_config._process_kwargs_options = _checked(  # type: ignore[attr-defined]
        spec["option_helper"]["signature"], process_kwargs_options, "_process_kwargs_options")
    setattr(fx, spec["fx_compiler"]["class"], NpuFxCompiler)
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
