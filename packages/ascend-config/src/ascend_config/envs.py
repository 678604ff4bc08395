"""Lazy, typed access to the Ascend environment variables (stdlib only, no pydantic).

``envs.VLLM_ASCEND_ENABLE_NZ`` reads ``os.environ`` on every access and returns the typed value
(the default when unset); an invalid value raises :class:`EnvVarError` naming the variable and
the allowed values. ``read(name, environ)`` does the same for an explicit mapping.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from ascend_config.env_registry import (
    BY_NAME,
    REGISTRY,
    EnvChange,
    EnvValue,
    EnvVar,
    EnvVarError,
    apply_env_changes,
    source,
)
from ascend_config.env_registry import read as _read

__all__ = [
    "REGISTRY",
    "EnvChange",
    "EnvVar",
    "EnvVarError",
    "apply_env_changes",
    "names",
    "read",
    "source",
]


def read(name: str, environ: Mapping[str, str] | None = None) -> EnvValue:
    """Typed value of variable ``name`` in ``environ`` (``os.environ`` when None)."""
    return _read(name, os.environ if environ is None else environ)


def names() -> list[str]:
    """Every registered variable name, in registry order."""
    return [v.name for v in REGISTRY]


def __getattr__(name: str) -> EnvValue:
    if name in BY_NAME:
        return _read(name, os.environ)
    raise AttributeError(f"module 'ascend_config.envs' has no attribute {name!r}")


def __dir__() -> list[str]:
    return names()
