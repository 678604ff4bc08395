"""The import boundaries hold for every package, each imported in a fresh interpreter."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
import check_import_boundaries as cib


@pytest.mark.parametrize("module", sorted(cib.RULES))
def test_import_respects_boundaries(module: str) -> None:
    result = cib.probe(module)
    assert cib.violations(result, cib.RULES[module]) == []
    assert module in result.modules
