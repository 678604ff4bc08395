"""Fixtures for the tools' tests: a small throw-away uv workspace."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import pytest

TOOLS = Path(__file__).resolve().parent.parent
if str(TOOLS) not in sys.path:
    sys.path.insert(0, str(TOOLS))

ROOT_TOML = """\
[project]
name = "ws"
version = "0"
requires-python = ">=3.11"

[tool.uv]
package = false

[tool.uv.workspace]
members = ["packages/*"]

[tool.uv.sources]
{sources}
"""


def _member(name: str, version: str, deps: list[str], classifiers: list[str]) -> str:
    listed = ", ".join(f'"{d}"' for d in deps)
    tagged = ", ".join(f'"{c}"' for c in classifiers)
    return (f'[project]\nname = "{name}"\nversion = "{version}"\ndependencies = [{listed}]\n'
            f"classifiers = [{tagged}]\n")


@pytest.fixture
def make_workspace(tmp_path: Path) -> Callable[..., Path]:
    """Build a workspace: ``make_workspace(members={name: (version, deps)}, sources=[...],
    classifiers={name: [...]})``."""

    def build(
        members: dict[str, tuple[str, list[str]]],
        sources: list[str] | None = None,
        classifiers: dict[str, list[str]] | None = None,
    ) -> Path:
        names = list(members) if sources is None else sources
        lines = "\n".join(f"{n} = {{ workspace = true }}" for n in names)
        (tmp_path / "pyproject.toml").write_text(ROOT_TOML.format(sources=lines))
        for name, (version, deps) in members.items():
            folder = tmp_path / "packages" / name
            folder.mkdir(parents=True)
            tags = (classifiers or {}).get(name, [])
            (folder / "pyproject.toml").write_text(_member(name, version, deps, tags))
        return tmp_path

    return build
