"""Shared helpers for the ascend-config tests (fixtures; test modules cannot import each other)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
from ascend_config import AscendConfig, AscendConfigError, DeploymentFacts, resolve

# The workspace root, found by its lock file: the mutation runner (tools/mutation.py) runs
# these tests from a copy one directory deeper.
REPO = next(p for p in Path(__file__).resolve().parents if (p / "uv.lock").is_file())
EXAMPLES = REPO / "examples"

Resolve = Callable[..., AscendConfig]
Problems = Callable[..., list[tuple[str, str]]]


@pytest.fixture
def res() -> Resolve:
    """``res(config, env=None, **facts)``: resolve with an explicit (default empty) environment."""

    def run(config: Mapping[str, Any] | None = None, env: Mapping[str, str] | None = None,
            **facts: Any) -> AscendConfig:
        return resolve(config, DeploymentFacts(**facts), dict(env or {}))

    return run


@pytest.fixture
def problems() -> Problems:
    """``problems(config, env=None, **facts)``: the (path, line) pairs of the expected error."""

    def run(config: Mapping[str, Any] | None = None, env: Mapping[str, str] | None = None,
            **facts: Any) -> list[tuple[str, str]]:
        with pytest.raises(AscendConfigError) as info:
            resolve(config, DeploymentFacts(**facts), dict(env or {}))
        return [(p.path, p.line()) for p in info.value.problems]

    return run


@pytest.fixture
def examples_dir() -> Path:
    return EXAMPLES
