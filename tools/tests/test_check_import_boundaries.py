"""The import-boundary checker flags a deliberately bad package and passes a clean one."""

from __future__ import annotations

from pathlib import Path

import check_import_boundaries as cib

BAD_PACKAGE = """
import os
import sqlite3  # stands in for a forbidden heavy dependency such as torch
os.environ["BAD_PACKAGE_FLAG"] = "1"
open("side-effect.txt", "w").write("written at import")
"""


def _package(tmp_path: Path, name: str, body: str) -> str:
    folder = tmp_path / "site" / name
    folder.mkdir(parents=True)
    (folder / "__init__.py").write_text(body)
    return str(tmp_path / "site")


def test_bad_package_breaks_every_rule(tmp_path: Path) -> None:
    path = _package(tmp_path, "badpkg", BAD_PACKAGE)
    result = cib.probe("badpkg", extra_path=path)
    assert cib.violations(result, ("sqlite3",)) == [
        "import badpkg loads sqlite3",
        "import badpkg changes env var BAD_PACKAGE_FLAG",
        "import badpkg writes side-effect.txt",
    ]


def test_clean_package_passes(tmp_path: Path) -> None:
    path = _package(tmp_path, "goodpkg", "import json\nVALUE = json.dumps(1)\n")
    assert cib.violations(cib.probe("goodpkg", extra_path=path), ("sqlite3",)) == []


def test_rules_cover_every_package() -> None:
    assert set(cib.RULES) == {
        "ascend_config",
        "ascend_topology",
        "ascend_kernels",
        "ascend_graph",
        "vllm_ascend",
    }
    assert "torch" in cib.RULES["ascend_config"] and "torch" in cib.RULES["ascend_topology"]
    assert all("vllm" in forbidden for forbidden in cib.RULES.values())
