"""Checks the ascend-config fuzz tests apply to what ``resolve`` makes of fuzzed input: a config
that survives a JSON round trip, or an error with one short printable line per problem."""

from __future__ import annotations

from typing import Any

from ascend_config import AscendConfig, AscendConfigError, DeploymentFacts, resolve


def check_error(exc: AscendConfigError) -> None:
    """``exc`` has a header line, one printable line of at most 300 characters per problem,
    and an "omitted" line only when problems were left out."""
    lines = str(exc).splitlines()
    assert len(lines) == len(exc.problems) + 1 + (1 if exc.omitted else 0)
    assert all(len(line) <= 300 and line.isprintable() for line in lines[1:])


def resolve_ok_or_error(config: Any, facts: DeploymentFacts | None = None,
                        env: dict[str, str] | None = None) -> AscendConfig | None:
    """``resolve``'s config (checked to round-trip through JSON), or None when it raised a
    well-formed ``AscendConfigError``; any other exception fails the test."""
    try:
        cfg = resolve(config, facts, env or {})
    except AscendConfigError as exc:
        check_error(exc)
        return None
    assert AscendConfig.from_json(cfg.to_json()) == cfg
    return cfg
