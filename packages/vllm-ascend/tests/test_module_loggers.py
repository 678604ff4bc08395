"""Module loggers: each module of vllm_ascend logs under its own name (``__name__``)."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest
import vllm_ascend

SOURCE = Path(vllm_ascend.__file__).parent


def module_logger_arguments(path: Path) -> list[str]:
    """The source text of the argument of each module-level ``getLogger(...)`` assignment."""
    tree = ast.parse(path.read_text())
    found = []
    for node in tree.body:
        if not isinstance(node, ast.Assign) or not isinstance(node.value, ast.Call):
            continue
        func = node.value.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
        if name in ("getLogger", "init_logger"):
            found.append(", ".join(ast.unparse(arg) for arg in node.value.args))
    return found


def test_every_module_logger_is_named_by_its_module() -> None:
    wrong = {
        str(path.relative_to(SOURCE)): arg
        for path in sorted(SOURCE.rglob("*.py"))
        for arg in module_logger_arguments(path)
        if arg != "__name__"
    }
    assert wrong == {}


def test_the_scan_sees_a_hand_written_name(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text('import logging\nlogger = logging.getLogger("vllm_ascend.serve")\n')
    assert module_logger_arguments(module) == ["'vllm_ascend.serve'"]


@pytest.mark.parametrize("module", [
    "vllm_ascend.process.serve_exit",
    "vllm_ascend.process.owned_tree",
    "vllm_ascend.compilation.compile_cache",
    "vllm_ascend.compilation.compiler",
])
def test_modules_that_shared_a_name_log_under_their_own(module: str) -> None:
    assert importlib.import_module(module).logger.name == module
