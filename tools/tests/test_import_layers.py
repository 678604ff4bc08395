"""The folder-layers checker on small synthetic packages with their layers written out."""

from __future__ import annotations

from pathlib import Path

import import_layers as il
import pytest

ROOT = Path(__file__).resolve().parents[2]


def _tree(root: Path, layers: list[str] | None, files: dict[str, str],
          extra: str = "") -> Path:
    """Package ``pkg`` under ``root/packages/pkg`` with ``files`` ({"a/x.py": source}) and, when
    ``layers`` is given, its ``[tool.import-layers]`` table (``extra``: more lines of it)."""
    member = root / "packages" / "pkg"
    for relative, source in {"__init__.py": "", **files}.items():
        path = member / "src" / "pkg" / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(source)
    table = "" if layers is None else (
        '[tool.import-layers]\npackage = "pkg"\nlayers = [' +
        ", ".join(f'"{layer}"' for layer in layers) + "]\n" + extra)
    (member / "pyproject.toml").write_text('[project]\nname = "pkg"\nversion = "0"\n\n' + table)
    return root


LAYERED = {
    "top/__init__.py": "",
    "top/cli.py": "from pkg.mid.engine import run\n",
    "mid/__init__.py": "",
    "mid/engine.py": "from pkg.low import paths\n\ndef run():\n    from pkg.side import x\n",
    "side/__init__.py": "",
    "side/x.py": "import pkg.low.paths\n",
    "low/__init__.py": "",
    "low/paths.py": "import os\n",
}


def _check(root: Path) -> list[str]:
    (layers,) = il.declared_layers(root)
    graph = il.import_graph(il.find_modules(root))
    return il.check(layers, graph, root)


def test_layered_folders_hold(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _tree(tmp_path, ["__init__", "top", "mid", "side", "low"], LAYERED)
    assert _check(tmp_path) == []
    assert il.main(["--root", str(tmp_path)]) == 0
    assert capsys.readouterr().out == (
        "import layers of pkg: hold (5 units in 5 layers, no two-way pair, no import of a "
        "higher layer or a sibling)\n")


def test_a_two_way_pair_fails_even_through_a_function_local_import(tmp_path: Path) -> None:
    files = {**LAYERED,
             "low/paths.py": "def where():\n    from pkg.mid.engine import run\n    return run\n"}
    _tree(tmp_path, ["__init__", "top", "mid", "side", "low"], files)
    mid = Path("packages/pkg/src/pkg/mid/engine.py")
    low = Path("packages/pkg/src/pkg/low/paths.py")
    assert _check(tmp_path) == [
        "two-way pair pkg.low <-> pkg.mid:",
        f"    pkg.low.paths -> pkg.mid.engine  ({low}:2) [function-local]",
        f"    pkg.mid.engine -> pkg.low.paths  ({mid}:1)",
        "pkg.low (layer 5) imports a higher layer, pkg.mid (layer 3):",
        f"    pkg.low.paths -> pkg.mid.engine  ({low}:2) [function-local]",
    ]
    assert il.main(["--root", str(tmp_path)]) == 1


def test_a_one_way_upward_import_fails(tmp_path: Path) -> None:
    # The same files, but "side" declared above "mid", which imports it: upward, not a pair.
    _tree(tmp_path, ["__init__", "top", "side", "mid", "low"], LAYERED)
    mid = Path("packages/pkg/src/pkg/mid/engine.py")
    assert _check(tmp_path) == [
        "pkg.mid (layer 4) imports a higher layer, pkg.side (layer 3):",
        f"    pkg.mid.engine -> pkg.side.x  ({mid}:4) [function-local]",
    ]


def test_type_checking_imports_count(tmp_path: Path) -> None:
    files = {**LAYERED, "low/paths.py": (
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.top.cli import run\n")}
    _tree(tmp_path, ["__init__", "top", "mid", "side", "low"], files)
    low = Path("packages/pkg/src/pkg/low/paths.py")
    assert _check(tmp_path) == [
        "pkg.low (layer 5) imports a higher layer, pkg.top (layer 2):",
        f"    pkg.low.paths -> pkg.top.cli  ({low}:3) [TYPE_CHECKING]",
    ]


def test_siblings_must_not_import_each_other(tmp_path: Path) -> None:
    _tree(tmp_path, ["__init__", "top", "mid | side", "low"], LAYERED)
    mid = Path("packages/pkg/src/pkg/mid/engine.py")
    assert _check(tmp_path) == [
        "pkg.mid (layer 3) imports a sibling, pkg.side (layer 3):",
        f"    pkg.mid.engine -> pkg.side.x  ({mid}:4) [function-local]",
    ]


def test_siblings_that_are_independent_hold(tmp_path: Path) -> None:
    files = {**LAYERED, "mid/engine.py": "from pkg.low import paths\n"}
    _tree(tmp_path, ["__init__", "top", "mid | side", "low"], files)
    assert _check(tmp_path) == []


def test_top_level_modules_and_the_package_init_are_units(tmp_path: Path) -> None:
    files = {**LAYERED, "__init__.py": "from pkg.hooks import register\n",
             "hooks.py": "from pkg.top import cli\n", "__main__.py": "import pkg.top.cli\n"}
    _tree(tmp_path, ["__init__", "hooks | __main__", "top", "mid", "side", "low"], files)
    assert _check(tmp_path) == []
    _tree(tmp_path, ["hooks | __main__", "__init__", "top", "mid", "side", "low"], files)
    init = Path("packages/pkg/src/pkg/__init__.py")
    assert _check(tmp_path) == [
        "pkg.__init__ (layer 2) imports a higher layer, pkg.hooks (layer 1):",
        f"    pkg -> pkg.hooks  ({init}:1)",
    ]


def test_every_unit_is_declared_and_every_declared_unit_exists(tmp_path: Path) -> None:
    _tree(tmp_path, ["__init__", "top", "mid", "gone", "low"], LAYERED)
    pyproject = Path("packages/pkg/pyproject.toml")
    assert _check(tmp_path) == [
        f"pkg.side is in no layer of {pyproject} [tool.import-layers]",
        f"pkg.gone is declared in {pyproject} but does not exist",
    ]


@pytest.mark.parametrize(("layers", "message"), [
    (["top", "mid | top"], "top named in more than one layer"),
    (["top", "mid | mid"], "mid named in more than one layer"),
    (["top", "mid |"], "empty unit in layer 'mid |'"),
])
def test_a_malformed_table_is_one_line_error(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                             layers: list[str], message: str) -> None:
    _tree(tmp_path, layers, LAYERED)
    assert il.main(["--root", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err


def test_no_declared_layers_fails(tmp_path: Path) -> None:
    _tree(tmp_path, None, LAYERED)
    assert il.main(["--root", str(tmp_path)]) == 1


def test_the_repository_declares_every_folder_of_vllm_ascend() -> None:
    (layers,) = [x for x in il.declared_layers(ROOT) if x.package == "vllm_ascend"]
    package = ROOT / "packages" / "vllm-ascend" / "src" / "vllm_ascend"
    folders = {p.parent.name for p in package.glob("*/__init__.py")}
    modules = {p.stem for p in package.glob("*.py")}
    assert layers.units() == folders | modules


EXPLAIN = "explain-local-imports = true\n"


def test_a_function_local_import_needs_a_reason_when_asked(tmp_path: Path) -> None:
    _tree(tmp_path, ["__init__", "top", "mid", "side", "low"], LAYERED, EXPLAIN)
    mid = Path("packages/pkg/src/pkg/mid/engine.py")
    assert _check(tmp_path) == [
        "function-local import with no '# Local: <why>' comment (import it at module level, "
        f"or say why not): pkg.mid.engine -> pkg.side.x  ({mid}:4) [function-local]",
    ]
    _tree(tmp_path, ["__init__", "top", "mid", "side", "low"], LAYERED)  # not asked: holds
    assert _check(tmp_path) == []


@pytest.mark.parametrize("body", [
    "    # Local: torch (optional here).\n    from pkg.side import x\n",
    "    from pkg.side import x  # Local: torch (optional here).\n",
    # One reason covers the run of imports below it, blank lines and other comments included.
    "    # Local: vLLM.\n    import os\n\n    # the side\n    from pkg.side import x\n",
    "    # Local: torch and\n    # vLLM, said over two lines.\n    from pkg.side import x\n",
])
def test_a_local_reason_on_the_import_or_above_its_run(tmp_path: Path, body: str) -> None:
    files = {**LAYERED, "mid/engine.py": "from pkg.low import paths\n\ndef run():\n" + body}
    _tree(tmp_path, ["__init__", "top", "mid", "side", "low"], files, EXPLAIN)
    assert _check(tmp_path) == []


@pytest.mark.parametrize("body", [
    # A reason above other code does not reach an import after that code.
    "    # Local: torch.\n    y = 1\n    from pkg.side import x\n",
    # Nor does one in another function.
    "    pass\n\ndef other():\n    # Local: torch.\n    import os\n\n"
    "def third():\n    from pkg.side import x\n",
])
def test_a_reason_elsewhere_does_not_count(tmp_path: Path, body: str) -> None:
    files = {**LAYERED, "mid/engine.py": "from pkg.low import paths\n\ndef run():\n" + body}
    _tree(tmp_path, ["__init__", "top", "mid", "side", "low"], files, EXPLAIN)
    assert len(_check(tmp_path)) == 1


def test_explain_local_imports_must_be_a_boolean(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    _tree(tmp_path, ["__init__", "top", "mid", "side", "low"], LAYERED,
          'explain-local-imports = "yes"\n')
    assert il.main(["--root", str(tmp_path)]) == 1
    assert "explain-local-imports must be true or false" in capsys.readouterr().err
