#!/usr/bin/env python3
"""Fail when the folders of a package do not form its declared layers (stdlib only).

A package declares its layers once, in its own ``pyproject.toml``::

    [tool.import-layers]
    package = "vllm_ascend"
    layers = [            # highest first
        "__init__ | __main__",
        "entrypoints",
        "engine | ops",   # "|": siblings, which must not import each other
        "base",
    ]

The units are the package's direct children: each sub-package (a folder, with everything under
it) and each top-level module (``__init__`` is the package's own ``__init__.py``). Every unit
must be named in exactly one layer, and every named unit must exist. A unit may import only
units of lower layers; within a unit anything goes (``import_cycles.py`` checks the files).

Every import counts, the same as for the cycle check (``import_cycles.import_graph``):
module level, function-local, ``TYPE_CHECKING`` and ``importlib.import_module("literal")``.
A function-local import hides the order from a reader just as well as a module-level one
reveals it, so it is no way around a layer.

Failures, each import with its file and line: a two-way pair (two units that import each
other), an import of a higher layer's unit or of a sibling, an undeclared or missing unit.

With ``explain-local-imports = true`` in the table, an import of a module of the package
inside a function is a failure too unless a ``# Local: <why>`` comment sits on it or directly
above its run of imports: imports are at module level by default, and a function-local one
stays only for a reason worth writing down (a start-up budget, an optional dependency).
Usage: ``python tools/import_layers.py [--root DIR]`` (exit 1 on any failure).
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import tomllib
from import_cycles import Edge, find_modules, import_graph

TABLE = "import-layers"


class LayersError(ValueError):
    """A ``[tool.import-layers]`` table that cannot be read as layers."""


LOCAL_REASON = "Local:"


@dataclass(frozen=True)
class Layers:
    """One package's declared layers: ``order[i]`` is the set of units of layer ``i`` (0 is the
    highest); ``explain_local`` asks a reason of each function-local import of the package."""

    package: str
    order: tuple[frozenset[str], ...]
    source: Path
    explain_local: bool = False

    def level(self, unit: str) -> int:
        for number, units in enumerate(self.order):
            if unit in units:
                return number
        raise KeyError(unit)

    def units(self) -> set[str]:
        return {unit for units in self.order for unit in units}


def read_layers(pyproject: Path) -> Layers | None:
    """The layers declared in ``pyproject`` (None when it has no ``[tool.import-layers]``)."""
    table = tomllib.loads(pyproject.read_text(encoding="utf-8")).get("tool", {}).get(TABLE)
    if table is None:
        return None
    package, layers = table.get("package"), table.get("layers")
    explain = table.get("explain-local-imports", False)
    if not isinstance(explain, bool):
        raise LayersError(f"{pyproject}: [tool.{TABLE}] explain-local-imports must be true or "
                          "false")
    if not isinstance(package, str) or not package:
        raise LayersError(f"{pyproject}: [tool.{TABLE}] package must be a package name")
    if not isinstance(layers, list) or not all(isinstance(x, str) for x in layers):
        raise LayersError(f"{pyproject}: [tool.{TABLE}] layers must be a list of strings")
    order: list[frozenset[str]] = []
    seen: set[str] = set()
    for entry in layers:
        units = [unit.strip() for unit in entry.split("|")]
        if not all(units):
            raise LayersError(f"{pyproject}: empty unit in layer {entry!r}")
        twice = seen.intersection(units) or {u for u in units if units.count(u) > 1}
        if twice:
            raise LayersError(f"{pyproject}: {', '.join(sorted(twice))} named in more than one "
                              "layer")
        seen.update(units)
        order.append(frozenset(units))
    return Layers(package, tuple(order), pyproject, explain)


def unit_of(module: str, package: str) -> str | None:
    """The unit of ``package`` that ``module`` belongs to (None: not in ``package``)."""
    if module == package:
        return "__init__"
    if not module.startswith(package + "."):
        return None
    return module[len(package) + 1:].split(".")[0]


def explained_imports(path: Path) -> set[int]:
    """First lines of the import statements of ``path`` that carry a ``# Local:`` reason: on
    one of their lines, or on the comment lines directly above the run of consecutive import
    statements they belong to (one reason covers the run)."""
    text = path.read_text(encoding="utf-8")
    lines = text.splitlines()
    explained: set[int] = set()
    for node in ast.walk(ast.parse(text, filename=str(path))):
        for field in ("body", "orelse", "finalbody"):
            body = getattr(node, field, None)
            if not isinstance(body, list):
                continue
            run: list[ast.stmt] = []
            for stmt in [*body, None]:
                if isinstance(stmt, (ast.Import, ast.ImportFrom)):
                    run.append(stmt)
                    continue
                if run:
                    first = run[0].lineno - 1
                    while first > 0 and lines[first - 1].strip().startswith("#"):
                        first -= 1
                    last = run[-1].end_lineno or run[-1].lineno
                    if any(LOCAL_REASON in line for line in lines[first:last]):
                        explained.update(s.lineno for s in run)
                run = []
    return explained


def check(layers: Layers, graph: dict[str, list[Edge]], root: Path) -> list[str]:
    """Lines describing every failure of ``layers`` in ``graph`` (empty: the layers hold)."""
    package = layers.package
    present = {unit for module in graph if (unit := unit_of(module, package)) is not None}
    declared = layers.units()
    lines: list[str] = []
    where = layers.source.relative_to(root) if layers.source.is_relative_to(root) \
        else layers.source
    for unit in sorted(present - declared):
        lines.append(f"{package}.{unit} is in no layer of {where} [tool.{TABLE}]")
    for unit in sorted(declared - present):
        lines.append(f"{package}.{unit} is declared in {where} but does not exist")
    between: dict[tuple[str, str], list[Edge]] = defaultdict(list)
    for module, edges in graph.items():
        source = unit_of(module, package)
        if source is None:
            continue
        for edge in edges:
            target = unit_of(edge.target, package)
            if target is not None and target != source:
                between[(source, target)].append(edge)
    for (low, high) in sorted(between):
        if low < high and (high, low) in between:
            lines.append(f"two-way pair {package}.{low} <-> {package}.{high}:")
            lines += [f"    {e.describe(root)}" for e in between[(low, high)]]
            lines += [f"    {e.describe(root)}" for e in between[(high, low)]]
    if layers.explain_local:
        lines += _unexplained_local_imports(layers, graph, root)
    for (source, target), edges in sorted(between.items()):
        if source not in declared or target not in declared:
            continue
        above, below = layers.level(source), layers.level(target)
        if below > above:
            continue
        kind = "a sibling" if below == above else "a higher layer"
        lines.append(f"{package}.{source} (layer {above + 1}) imports {kind}, "
                     f"{package}.{target} (layer {below + 1}):")
        lines += [f"    {e.describe(root)}" for e in edges]
    return lines


def _unexplained_local_imports(layers: Layers, graph: dict[str, list[Edge]],
                               root: Path) -> list[str]:
    lines: list[str] = []
    explained: dict[Path, set[int]] = {}
    for module, edges in graph.items():
        if unit_of(module, layers.package) is None:
            continue
        for edge in edges:
            if not edge.function_local or edge.type_checking \
                    or unit_of(edge.target, layers.package) is None:
                continue
            if edge.path not in explained:
                explained[edge.path] = explained_imports(edge.path)
            if edge.line not in explained[edge.path]:
                lines.append(f"function-local import with no '# {LOCAL_REASON} <why>' comment "
                             f"(import it at module level, or say why not): "
                             f"{edge.describe(root)}")
    return lines


def declared_layers(root: Path) -> list[Layers]:
    """Every package's declared layers under ``root/packages/*/pyproject.toml``."""
    found = [read_layers(path) for path in sorted(root.glob("packages/*/pyproject.toml"))]
    return [layers for layers in found if layers is not None]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parent.parent)
    args = parser.parse_args(argv)
    root = args.root.resolve()
    try:
        all_layers = declared_layers(root)
    except (LayersError, tomllib.TOMLDecodeError) as error:
        print(f"import layers: {error}", file=sys.stderr)
        return 1
    if not all_layers:
        print(f"import layers: no [tool.{TABLE}] table under {root}/packages", file=sys.stderr)
        return 1
    graph = import_graph(find_modules(root))
    failed = False
    for layers in all_layers:
        lines = check(layers, graph, root)
        if lines:
            print("\n".join(lines), file=sys.stderr)
            failed = True
            continue
        units = len(layers.units())
        explained = ", every function-local import explained" if layers.explain_local else ""
        print(f"import layers of {layers.package}: hold ({units} units in {len(layers.order)} "
              f"layers, no two-way pair, no import of a higher layer or a sibling{explained})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
