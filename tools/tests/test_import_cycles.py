"""The import-cycle checker on small synthetic package trees with their cycles written out."""

from __future__ import annotations

from pathlib import Path

import import_cycles as ic
import pytest


def _tree(root: Path, files: dict[str, str]) -> Path:
    """Write ``{"pkg/mod.py": source}`` under ``root/packages/<pkg>/src/``."""
    for relative, source in files.items():
        package = relative.split("/")[0]
        path = root / "packages" / package / "src" / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(source)
    return root


def _cycles(root: Path) -> list[list[str]]:
    return ic.strongly_connected(ic.import_graph(ic.find_modules(root)))


def _targets(root: Path, module: str) -> list[str]:
    return [e.target for e in ic.import_graph(ic.find_modules(root))[module]]


def test_find_modules_names_packages_and_submodules(tmp_path: Path) -> None:
    _tree(tmp_path, {"pkg/__init__.py": "", "pkg/sub/__init__.py": "", "pkg/sub/leaf.py": ""})
    (tmp_path / "packages" / "pkg" / "src" / "loose").mkdir()  # no __init__: not a package
    assert set(ic.find_modules(tmp_path)) == {"pkg", "pkg.sub", "pkg.sub.leaf"}


def test_function_local_cycle_is_found(tmp_path: Path) -> None:
    _tree(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/low.py": "def f():\n    from pkg.high import g\n    return g\n",
        "pkg/high.py": "import pkg.low\n",
    })
    assert _cycles(tmp_path) == [["pkg.high", "pkg.low"]]
    lines, _ = ic.report(tmp_path)
    assert lines == [
        "import cycle 1 of 1 (2 modules):",
        "    pkg.high",
        "    pkg.low",
        "  for example:",
        f"    pkg.high -> pkg.low  ({Path('packages/pkg/src/pkg/high.py')}:1)",
        f"    pkg.low -> pkg.high  ({Path('packages/pkg/src/pkg/low.py')}:2) [function-local]",
    ]


def test_relative_import_cycle_is_found(tmp_path: Path) -> None:
    _tree(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/a/__init__.py": "",
        "pkg/a/one.py": "from ..b import two\n",  # from package pkg.b import submodule two
        "pkg/b/__init__.py": "",
        "pkg/b/two.py": "from ..a.one import NAME\n",
    })
    assert _targets(tmp_path, "pkg.a.one") == ["pkg.b.two"]
    assert _targets(tmp_path, "pkg.b.two") == ["pkg.a.one"]
    assert _cycles(tmp_path) == [["pkg.a.one", "pkg.b.two"]]


def test_relative_import_from_a_package_init(tmp_path: Path) -> None:
    # In pkg/a/__init__.py, "." is pkg.a itself, not its parent.
    _tree(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/a/__init__.py": "from .x import y\n",
        "pkg/a/x.py": "from pkg.a import OTHER\n",
    })
    assert _targets(tmp_path, "pkg.a") == ["pkg.a.x"]
    assert _cycles(tmp_path) == [["pkg.a", "pkg.a.x"]]


def test_type_checking_imports_count(tmp_path: Path) -> None:
    _tree(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/low.py": (
            "from typing import TYPE_CHECKING\n"
            "if TYPE_CHECKING:\n    from pkg.high import High\n"
        ),
        "pkg/high.py": "from pkg.low import x\n",
    })
    edge = ic.import_graph(ic.find_modules(tmp_path))["pkg.low"][0]
    assert (edge.target, edge.line, edge.type_checking, edge.function_local) == (
        "pkg.high", 3, True, False)
    assert _cycles(tmp_path) == [["pkg.high", "pkg.low"]]


def test_parent_packages_count_only_when_imported_for_a_name(tmp_path: Path) -> None:
    # pkg/__init__ re-exports from pkg.sub.leaf; leaf's "import pkg.sub.other" runs pkg's
    # __init__ too, but is not an edge to it. A "from pkg import NAME" is.
    files = {
        "pkg/__init__.py": "from pkg.sub.leaf import VALUE\n",
        "pkg/sub/__init__.py": "",
        "pkg/sub/leaf.py": "import pkg.sub.other\nVALUE = 1\n",
        "pkg/sub/other.py": "",
    }
    _tree(tmp_path, files)
    assert _targets(tmp_path, "pkg.sub.leaf") == ["pkg.sub.other"]
    assert _cycles(tmp_path) == []
    (tmp_path / "packages/pkg/src/pkg/sub/other.py").write_text("from pkg import VALUE\n")
    assert _cycles(tmp_path) == [["pkg", "pkg.sub.leaf", "pkg.sub.other"]]


def test_from_package_import_submodule_and_name(tmp_path: Path) -> None:
    _tree(tmp_path, {
        "pkg/__init__.py": "NAME = 1\n",
        "pkg/mod.py": "",
        "pkg/user.py": "from pkg import mod\nfrom pkg import NAME\nfrom pkg import mod, NAME\n",
    })
    assert _targets(tmp_path, "pkg.user") == ["pkg.mod", "pkg", "pkg.mod", "pkg"]


def test_import_module_literal_counts_and_third_party_is_ignored(tmp_path: Path) -> None:
    _tree(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/a.py": (
            "import importlib, json, os.path\n"
            "def f(name):\n"
            "    importlib.import_module(name)\n"
            "    return importlib.import_module('pkg.b')\n"
        ),
        "pkg/b.py": "from pkg import a\n",
    })
    assert _targets(tmp_path, "pkg.a") == ["pkg.b"]
    assert _cycles(tmp_path) == [["pkg.a", "pkg.b"]]


def test_cycles_across_packages_and_separate_components(tmp_path: Path) -> None:
    _tree(tmp_path, {
        "alpha/__init__.py": "",
        "alpha/x.py": "import beta.y\n",
        "beta/__init__.py": "",
        "beta/y.py": "def f():\n    import alpha.x\n",
        "beta/p.py": "import beta.q\n",
        "beta/q.py": "import beta.r\n",
        "beta/r.py": "import beta.p\nimport beta.y\n",
    })
    assert _cycles(tmp_path) == [["alpha.x", "beta.y"], ["beta.p", "beta.q", "beta.r"]]


def test_example_cycle_is_shortest_and_closed(tmp_path: Path) -> None:
    _tree(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/a.py": "import pkg.b\nimport pkg.c\n",
        "pkg/b.py": "import pkg.c\n",
        "pkg/c.py": "import pkg.a\n",
    })
    graph = ic.import_graph(ic.find_modules(tmp_path))
    path = ic.example_cycle(graph, ["pkg.a", "pkg.b", "pkg.c"])
    assert [(e.source, e.target) for e in path] == [("pkg.a", "pkg.c"), ("pkg.c", "pkg.a")]


def test_main_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _tree(tmp_path, {"pkg/__init__.py": "", "pkg/a.py": "import pkg.b\n", "pkg/b.py": ""})
    assert ic.main(["--root", str(tmp_path)]) == 0
    assert "none (3 modules, 1 internal imports, 0 of them function-local)" in (
        capsys.readouterr().out)
    (tmp_path / "packages/pkg/src/pkg/b.py").write_text("def f():\n    import pkg.a\n")
    assert ic.main(["--root", str(tmp_path)]) == 1
    assert "import cycle 1 of 1 (2 modules):" in capsys.readouterr().err


def test_relative_import_beyond_top_level_is_ignored(tmp_path: Path) -> None:
    _tree(tmp_path, {"pkg/__init__.py": "", "pkg/a.py": "from ... import nothing\n"})
    assert _targets(tmp_path, "pkg.a") == []
