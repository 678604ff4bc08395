"""The service-profiling symbol file that ms_service_profiler reads, written once per vLLM version
with the symbols the installed code defines (table: ``service_profiling_symbols``).
"""

from __future__ import annotations

import ast
import contextlib
import fnmatch
import importlib.util
import json
import logging
import os
import tempfile
import threading
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path

from vllm_ascend.base.trusted_roots import own_home
from vllm_ascend.observability.service_profiling_symbols import (
    GROUPS,
    OWN_SYMBOLS,
    SCHEDULE_ATTRIBUTES,
    VLLM_SYMBOLS,
    ProfilingSymbol,
)

__all__ = [
    "OWN_SYMBOLS", "VLLM_SYMBOLS", "ProfilingSymbol", "SourceIndex", "config_dir",
    "config_path", "existing_symbols", "generate_service_profiling_config", "in_version_range",
    "render", "runtime_symbols", "symbol_exists",
]

logger = logging.getLogger(__name__)

_GLOB_CHARS = frozenset("*?[")


def config_dir(environ: Mapping[str, str] | None = None) -> Path:
    """``$XDG_CONFIG_HOME/vllm_ascend`` (``~/.config/vllm_ascend`` when unset)."""
    env = os.environ if environ is None else environ
    base = env.get("XDG_CONFIG_HOME") or str(own_home(env) / ".config")
    return Path(base) / "vllm_ascend"


def config_path(vllm_version: str, environ: Mapping[str, str] | None = None) -> Path:
    return config_dir(environ) / f"service_profiling_symbols.{vllm_version}.yaml"


class SourceIndex:
    """Finds where symbols are defined by parsing module sources (never importing them)."""

    def __init__(self) -> None:
        self._trees: dict[str, ast.Module | None] = {}

    def matches(self, symbol: str) -> Iterator[str]:
        """The concrete ``module:Qual.name`` symbols a (possibly glob) symbol stands for."""
        module, _, qualname = symbol.partition(":")
        parts = qualname.split(".")
        for name, path in self._module_files(module):
            if name in self._trees:
                tree = self._trees[name]
            else:
                text = _read(path)
                # Cheap text check first: a glob over a package can name hundreds of modules.
                last = parts[-1]
                if not _has_glob(last) and f"def {last}" not in text and (
                        f"class {last}" not in text):
                    continue
                tree = self._trees[name] = _parse(text)
            if tree is not None:
                for qual in _qualnames(tree.body, parts):
                    yield f"{name}:{qual}"

    def exists(self, symbol: str) -> bool:
        return next(self.matches(symbol), None) is not None

    def _module_files(self, module: str) -> list[tuple[str, Path]]:
        if not _has_glob(module):
            path = _module_source(module)
            return [(module, path)] if path is not None else []
        parent, _, pattern = module.rpartition(".")
        found = []
        for directory in _package_dirs(parent):
            for path in sorted(directory.glob("*.py")):
                if path.stem != "__init__" and fnmatch.fnmatchcase(path.stem, pattern):
                    found.append((f"{parent}.{path.stem}", path))
        return found


def _has_glob(text: str) -> bool:
    return not _GLOB_CHARS.isdisjoint(text)


def _package_dirs(package: str) -> list[Path]:
    """Directories of a (sub)package, found without running any package ``__init__``."""
    # vLLM's __init__ would import torch and, for some connectors, log about missing libraries.
    top, *rest = package.split(".")
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return []
    if spec is None or not spec.submodule_search_locations:
        return []
    dirs = [Path(loc).joinpath(*rest) for loc in spec.submodule_search_locations]
    return [d for d in dirs if (d / "__init__.py").is_file() or (rest and d.is_dir())]


def _module_source(module: str) -> Path | None:
    """The ``.py`` file of ``module`` (a plain module or a package's ``__init__``)."""
    parent, _, leaf = module.rpartition(".")
    if not parent:
        try:
            spec = importlib.util.find_spec(module)
        except (ImportError, ValueError):
            return None
        origin = spec.origin if spec is not None else None
        return Path(origin) if origin and origin.endswith(".py") else None
    for directory in _package_dirs(parent):
        for path in (directory / f"{leaf}.py", directory / leaf / "__init__.py"):
            if path.is_file():
                return path
    return None


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return ""


# CPython 3.11's AST constructor checks its recursion depth in state shared by threads, so
# two threads parsing at once can fail with "SystemError: AST constructor recursion depth
# mismatch" (seen in the concurrent-writers test): parses are serialised.
_PARSE_LOCK = threading.Lock()


def _parse(text: str) -> ast.Module | None:
    try:
        with _PARSE_LOCK:
            return ast.parse(text)
    except (SyntaxError, ValueError):
        return None


def _qualnames(body: list[ast.stmt], parts: list[str]) -> Iterator[str]:
    for node in body:
        if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and (
                fnmatch.fnmatchcase(node.name, parts[0])):
            if len(parts) == 1:
                yield node.name
            else:
                for rest in _qualnames(node.body, parts[1:]):
                    yield f"{node.name}.{rest}"


def symbol_exists(symbol: str, index: SourceIndex | None = None) -> bool:
    """Whether ``module:Qual.name`` (globs allowed) is defined in the installed sources."""
    return (index or SourceIndex()).exists(symbol)


def in_version_range(entry: ProfilingSymbol, vllm_version: str) -> bool:
    """Whether ``vllm_version`` is within the entry's inclusive range (unparsable: True)."""
    # packaging is a dependency of vLLM, which is installed wherever this runs.
    from packaging.version import InvalidVersion, Version

    try:
        version = Version(vllm_version)
    except InvalidVersion:
        return True
    if entry.min_version is not None and version < Version(entry.min_version):
        return False
    return entry.max_version is None or version <= Version(entry.max_version)


def runtime_symbols(runtime_classes: Mapping[str, str],
                    scheduler_classes: Mapping[str, str] | None = None) -> list[ProfilingSymbol]:
    """Symbols of installed runtime extensions: workers' ``execute_model``, schedulers'
    ``schedule``."""
    found = []
    worker = runtime_classes.get("worker")
    if worker:
        module, _, cls = worker.rpartition(".")
        found.append(ProfilingSymbol(f"{module}:{cls}.execute_model", "Execute",
                                     "RuntimeExecuteModel"))
    for path in sorted(set((scheduler_classes or {}).values())):
        module, _, cls = path.rpartition(".")
        found.append(ProfilingSymbol(f"{module}:{cls}.schedule", "Scheduler",
                                     f"{cls}.schedule", attributes=SCHEDULE_ATTRIBUTES))
    return found


def existing_symbols(candidates: Iterable[ProfilingSymbol],
                     vllm_version: str | None = None) -> list[ProfilingSymbol]:
    """The candidates defined in the installed code (and, given a version, in its range)."""
    index = SourceIndex()
    return [c for c in candidates
            if (vllm_version is None or in_version_range(c, vllm_version))
            and index.exists(c.symbol)]


def render(symbols: Iterable[ProfilingSymbol], vllm_version: str) -> str:
    """The YAML text: one mapping per entry, a comment line before each group."""
    lines = [f"# Service-profiling symbols for vLLM {vllm_version}, generated by vllm-ascend.",
             "# Edit freely: this file is never overwritten."]
    group = None
    for entry in symbols:
        if entry.group != group:
            group = entry.group
            lines.append(f"\n# ===== {GROUPS[group]} =====")
        lines.extend(_entry_lines(entry))
    return "\n".join(lines) + "\n"


def _entry_lines(entry: ProfilingSymbol) -> list[str]:
    # JSON strings are valid YAML double-quoted scalars: no YAML library needed.
    q = json.dumps
    lines = [f"- symbol: {q(entry.symbol)}", f"  domain: {q(entry.domain)}",
             f"  name: {q(entry.name)}"]
    for key in ("handler", "min_version", "max_version"):
        value = getattr(entry, key)
        if value is not None:
            lines.append(f"  {key}: {q(value)}")
    if entry.attributes:
        lines.append("  attributes:")
        for name, expr in entry.attributes:
            lines += [f"  - name: {q(name)}", f"    expr: {q(expr)}"]
    return lines


def generate_service_profiling_config(
    vllm_version: str,
    *,
    runtime_classes: Mapping[str, str] | None = None,
    scheduler_classes: Mapping[str, str] | None = None,
    environ: Mapping[str, str] | None = None,
) -> Path | None:
    """Write the symbol file for ``vllm_version`` unless it exists; its path or None (no raise)."""
    target = config_path(vllm_version, environ)
    if target.exists():
        return target
    candidates = [*VLLM_SYMBOLS, *OWN_SYMBOLS,
                  *runtime_symbols(runtime_classes or {}, scheduler_classes)]
    text = render(existing_symbols(candidates, vllm_version), vllm_version)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        return _write_once(target, text)
    except OSError as exc:
        logger.warning("cannot write service-profiling symbols to %s: %s",
                       target, exc)
        return None


def _write_once(target: Path, text: str) -> Path:
    """Write ``text`` via a temp file linked into place, never over an existing file."""
    fd, tmp = tempfile.mkstemp(prefix=f"{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        with contextlib.suppress(FileExistsError):
            os.link(tmp, target)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
    return target
