"""Step 2: the one resolution of the Ascend config, ascend-config's pure ``resolve`` over the
inputs of an engine: the VllmConfig's ``additional_config`` (read-only, never written back),
the deployment facts and the Ascend environment variables.

The config pipeline resolves here when it builds an engine (``vllm_ascend.engine``), a child
process from the inputs its parent published (``base.config_channel``, once per process:
``process.process_setup``), and a standalone compile once for its VllmConfig (``engine_of``).
Nothing else calls ``resolve``. ``AscendConfigError`` lists every problem at once.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

import ascend_config

from vllm_ascend.base.config_channel import published_inputs

if TYPE_CHECKING:
    from ascend_config import AscendConfig, DeploymentFacts


def additional_config_of(vllm_config: Any) -> dict[str, Any]:
    """A copy of vLLM's ``additional_config`` (so resolution can never mutate it)."""
    raw = getattr(vllm_config, "additional_config", None) or {}
    if not isinstance(raw, Mapping):
        raise ValueError(f"additional_config must be a JSON object, got {type(raw).__name__}")
    return dict(raw)


def resolve_ascend_config(additional_config: Mapping[str, Any], facts: DeploymentFacts,
                          environ: Mapping[str, str]) -> AscendConfig:
    """The resolved config (``AscendConfigError`` lists every problem at once)."""
    return ascend_config.resolve(dict(additional_config), facts=facts, environ=environ)


class Published(NamedTuple):
    """What the config-creating process published, resolved in this process."""

    soc: str
    config: AscendConfig
    facts: DeploymentFacts


def resolve_published(environ: Mapping[str, str] | None = None) -> Published | None:
    """The published inputs resolved (None when none were published); ``WorkerInputsError``,
    ``OSError`` or ``AscendConfigError`` when they cannot be used.

    This runs the full resolution: a process reads it once (``ProcessSetup.published``)."""
    data = published_inputs(environ)
    if data is None:
        return None
    facts = ascend_config.DeploymentFacts.from_mapping(data["facts"])
    return Published(data["soc"], resolve_ascend_config(data["additional_config"], facts,
                                                        data["environ"]), facts)
