#!/usr/bin/env python3
"""Fail on import cycles between the modules of the workspace's packages (stdlib only).

The rule: no import cycle, function-local imports included (a lower module gets what it needs
as arguments instead of importing upward).
The checker reads every ``packages/*/src/<package>`` with :mod:`ast` (nothing is imported) and
builds the module graph from *every* import statement, wherever it sits:

* module level, inside functions and methods (function-local), inside ``try``/``except``;
* inside ``if TYPE_CHECKING:``. These count: a type-only import is still a design
  dependency (mypy follows it, and a reader of the lower module must know the upper one),
  and a lower module that needs an upper type should take a ``Protocol`` or a plain value;
* ``importlib.import_module("literal.name")`` calls with a string literal (a computed name
  cannot be resolved statically and is skipped).

Resolution: relative imports are resolved against the importing module's package.
``from pkg import name`` is an edge to the submodule ``pkg.name`` when that module exists,
otherwise to ``pkg`` (its ``__init__``), which then defines ``name``.
``import a.b.c`` is an edge to ``a.b.c`` only. Python also runs ``a/__init__`` and
``a/b/__init__`` on the way, but those parents are not counted: a package ``__init__`` is
part of the graph only where it is imported for a name it defines. Counting the implicit
parents would put every ``__init__`` that re-exports from a submodule into a cycle with that
submodule's own imports of siblings, which is the ordinary layout of a package and not a
layering problem. Only modules of the scanned packages are nodes; third-party imports are
ignored, and so is an import of a module by itself.

Each strongly connected component with more than one module (Tarjan) is a failure, printed
with one example cycle through it, every edge with its file and line.
Usage: ``python tools/import_cycles.py [--root DIR]`` (exit 1 when there is a cycle).
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections import deque
from dataclasses import dataclass
from pathlib import Path

SOURCE_GLOB = "packages/*/src/*"


@dataclass(frozen=True)
class Edge:
    """One import of ``target`` by ``source``, where it is written and how."""

    source: str
    target: str
    path: Path
    line: int
    function_local: bool
    type_checking: bool

    def describe(self, root: Path) -> str:
        where = self.path.relative_to(root) if self.path.is_relative_to(root) else self.path
        kinds = [k for k, on in (("function-local", self.function_local),
                                 ("TYPE_CHECKING", self.type_checking)) if on]
        suffix = f" [{', '.join(kinds)}]" if kinds else ""
        return f"{self.source} -> {self.target}  ({where}:{self.line}){suffix}"


def find_modules(root: Path) -> dict[str, Path]:
    """Module name -> source file for every package under ``root/packages/*/src/``."""
    modules: dict[str, Path] = {}
    for package in sorted(root.glob(SOURCE_GLOB)):
        if not (package / "__init__.py").is_file():
            continue
        src = package.parent
        for path in sorted(package.rglob("*.py")):
            parts = list(path.relative_to(src).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            modules[".".join(parts)] = path
    return modules


def _is_type_checking(test: ast.expr) -> bool:
    if isinstance(test, ast.Name):
        return test.id == "TYPE_CHECKING"
    return isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"


def _is_import_module_call(node: ast.Call) -> str | None:
    func = node.func
    name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
    if name != "import_module" or not node.args:
        return None
    first = node.args[0]
    if isinstance(first, ast.Constant) and isinstance(first.value, str):
        return first.value
    return None


class _ImportCollector(ast.NodeVisitor):
    """Collects (imported names, line, function-local, TYPE_CHECKING) from one module."""

    def __init__(self, module: str, is_package: bool) -> None:
        self.package = module if is_package else module.rpartition(".")[0]
        self.found: list[tuple[list[str], int, bool, bool]] = []
        self._depth = 0
        self._type_checking = 0

    def _add(self, names: list[str], line: int) -> None:
        self.found.append((names, line, self._depth > 0, self._type_checking > 0))

    def _scoped(self, node: ast.AST) -> None:
        self._depth += 1
        self.generic_visit(node)
        self._depth -= 1

    visit_FunctionDef = _scoped
    visit_AsyncFunctionDef = _scoped
    visit_Lambda = _scoped

    def visit_If(self, node: ast.If) -> None:
        if not _is_type_checking(node.test):
            self.generic_visit(node)
            return
        self._type_checking += 1
        for child in node.body:
            self.visit(child)
        self._type_checking -= 1
        for child in node.orelse:
            self.visit(child)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._add([alias.name], node.lineno)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level:
            base = self.package.split(".") if self.package else []
            keep = len(base) - (node.level - 1)
            if keep <= 0:  # beyond the top-level package: not one of ours
                return
            base_name = ".".join(base[:keep])
            base_name = f"{base_name}.{node.module}" if node.module else base_name
        else:
            base_name = node.module or ""
        # The base module, then each ``base.name`` (a submodule when such a module exists).
        self._add([base_name, *(f"{base_name}.{a.name}" for a in node.names)], node.lineno)

    def visit_Call(self, node: ast.Call) -> None:
        literal = _is_import_module_call(node)
        if literal is not None and not literal.startswith("."):
            self._add([literal], node.lineno)
        self.generic_visit(node)


def _longest_known(name: str, modules: dict[str, Path]) -> str | None:
    parts = name.split(".")
    for end in range(len(parts), 0, -1):
        candidate = ".".join(parts[:end])
        if candidate in modules:
            return candidate
    return None


def module_edges(module: str, modules: dict[str, Path]) -> list[Edge]:
    """Every import edge from ``module`` to another scanned module, in source order."""
    path = modules[module]
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    collector = _ImportCollector(module, path.name == "__init__.py")
    collector.visit(tree)
    edges: list[Edge] = []
    for names, line, local, type_only in collector.found:
        base, *members = names
        if members:  # from base import a, b: submodules where they exist, else base itself
            targets = [m for m in members if m in modules]
            if len(targets) < len(members):
                known = _longest_known(base, modules) if base else None
                targets += [known] if known else []
        else:
            known = _longest_known(base, modules)
            targets = [known] if known else []
        for target in dict.fromkeys(targets):
            if target != module:
                edges.append(Edge(module, target, path, line, local, type_only))
    return edges


def import_graph(modules: dict[str, Path]) -> dict[str, list[Edge]]:
    """Module -> its import edges (every module of ``modules`` is a key)."""
    return {name: module_edges(name, modules) for name in sorted(modules)}


def strongly_connected(graph: dict[str, list[Edge]]) -> list[list[str]]:
    """Tarjan's SCCs with more than one module, each sorted, in sorted order (iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = 0
    for start in graph:
        if start in index:
            continue
        work: list[tuple[str, int]] = [(start, 0)]
        while work:
            node, child = work.pop()
            if child == 0:
                index[node] = low[node] = counter
                counter += 1
                stack.append(node)
                on_stack.add(node)
            successors = [e.target for e in graph.get(node, [])]
            if child < len(successors):
                work.append((node, child + 1))
                nxt = successors[child]
                if nxt not in index:
                    work.append((nxt, 0))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            if low[node] == index[node]:
                component: list[str] = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
    return sorted(found)


def example_cycle(graph: dict[str, list[Edge]], component: list[str]) -> list[Edge]:
    """A shortest cycle through the component's first module, staying inside the component."""
    members = set(component)
    start = component[0]
    came: dict[str, Edge] = {}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for edge in graph[node]:
            if edge.target not in members:
                continue
            if edge.target == start:
                path = [edge]
                while path[0].source != start:
                    path.insert(0, came[path[0].source])
                return path
            if edge.target not in came:
                came[edge.target] = edge
                queue.append(edge.target)
    raise ValueError(f"no cycle through {start} in {component}")


def report(root: Path) -> tuple[list[str], dict[str, list[Edge]]]:
    """Lines describing every cycle under ``root`` (empty when there is none), and the graph."""
    graph = import_graph(find_modules(root))
    components = strongly_connected(graph)
    lines: list[str] = []
    for number, component in enumerate(components, 1):
        lines.append(f"import cycle {number} of {len(components)} ({len(component)} modules):")
        lines += [f"    {name}" for name in component]
        lines.append("  for example:")
        lines += [f"    {edge.describe(root)}" for edge in example_cycle(graph, component)]
    return lines, graph


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parent.parent)
    args = parser.parse_args(argv)
    root = args.root.resolve()
    lines, graph = report(root)
    edges = [e for found in graph.values() for e in found]
    local = sum(e.function_local for e in edges)
    if lines:
        print("\n".join(lines), file=sys.stderr)
        return 1
    print(f"import cycles: none ({len(graph)} modules, {len(edges)} internal imports, "
          f"{local} of them function-local)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
