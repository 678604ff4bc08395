"""Every Ascend option for vLLM: schema, validation, derivation, env registry, CLI.

Importing the package is cheap: names are loaded on first use (PEP 562), and
``ascend_config.envs`` / ``ascend_config.facts`` never import pydantic.
"""

from __future__ import annotations

import importlib

# Not typing.TYPE_CHECKING: importing typing alone would cost more than this whole module.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from ascend_config import envs
    from ascend_config.decorator import config
    from ascend_config.envs import EnvChange, EnvVarError, apply_env_changes
    from ascend_config.errors import AscendConfigError, Problem
    from ascend_config.facts import DeploymentFacts, FactsError
    from ascend_config.model import AscendConfig, dump_config_file, write_dump_config
    from ascend_config.resolver import resolve
    from ascend_config.schema.introspect import KeyDoc, explain
    from ascend_config.schema.sections import compilation_defaults
    from ascend_config.schema.top import json_schema

__version__ = "0.1.0"

_EXPORTS = {
    "envs": "ascend_config.envs",
    "config": "ascend_config.decorator",
    "dump_config_file": "ascend_config.model",
    "write_dump_config": "ascend_config.model",
    "EnvChange": "ascend_config.envs",
    "EnvVarError": "ascend_config.envs",
    "apply_env_changes": "ascend_config.envs",
    "AscendConfigError": "ascend_config.errors",
    "Problem": "ascend_config.errors",
    "DeploymentFacts": "ascend_config.facts",
    "FactsError": "ascend_config.facts",
    "KeyDoc": "ascend_config.schema.introspect",
    "explain": "ascend_config.schema.introspect",
    "json_schema": "ascend_config.schema.top",
    "AscendConfig": "ascend_config.model",
    "resolve": "ascend_config.resolver",
    "compilation_defaults": "ascend_config.schema.sections",
}

__all__ = [
    "AscendConfig",
    "AscendConfigError",
    "DeploymentFacts",
    "EnvChange",
    "EnvVarError",
    "FactsError",
    "KeyDoc",
    "Problem",
    "apply_env_changes",
    "compilation_defaults",
    "config",
    "dump_config_file",
    "envs",
    "explain",
    "json_schema",
    "resolve",
    "write_dump_config",
]


def __getattr__(name: str) -> Any:
    module_name = _EXPORTS.get(name)
    if module_name is None:
        raise AttributeError(f"module 'ascend_config' has no attribute {name!r}")
    module = importlib.import_module(module_name)
    return module if name == "envs" else getattr(module, name)


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])
