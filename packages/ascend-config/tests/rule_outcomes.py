"""Ways the ascend-config rule tests read what ``resolve`` made of a config: the error lines,
or the resolved config / the problem paths."""

from __future__ import annotations

from typing import Any

import pytest
from ascend_config import AscendConfig, AscendConfigError, DeploymentFacts, resolve


def lines(config: Any, env: dict[str, str] | None = None, **facts: Any) -> list[str]:
    """The lines of the ``AscendConfigError`` resolving ``config`` must raise."""
    with pytest.raises(AscendConfigError) as info:
        resolve(config, DeploymentFacts(**facts), env or {})
    return info.value.lines()


def outcome(config: dict[str, Any] | None, env: dict[str, str] | None = None,
            **facts: Any) -> AscendConfig | list[str]:
    """The resolved config, or the paths of the problems."""
    try:
        return resolve(config, DeploymentFacts(**facts), dict(env or {}))
    except AscendConfigError as exc:
        return [p.path for p in exc.problems]


def ok(result: AscendConfig | list[str]) -> AscendConfig:
    """``result`` as a config, failing the test with the problem paths when it is not one."""
    assert isinstance(result, AscendConfig), result
    return result
