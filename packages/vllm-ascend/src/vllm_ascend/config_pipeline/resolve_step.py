"""Step 2: resolve the Ascend config with ascend-config's pure ``resolve``.

Every process (engine, pass manager, workers) calls :func:`resolve_for` with the same inputs:
the VllmConfig's ``additional_config`` (read-only, never written back), the deployment facts
and the environment. ``AscendConfigError`` lists every problem at once and propagates.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import ascend_config

from vllm_ascend.config_pipeline.facts import extract_facts


def additional_config_of(vllm_config: Any) -> dict[str, Any]:
    """A copy of vLLM's ``additional_config`` (so resolution can never mutate it)."""
    raw = getattr(vllm_config, "additional_config", None) or {}
    if not isinstance(raw, Mapping):
        raise ValueError(f"additional_config must be a JSON object, got {type(raw).__name__}")
    return dict(raw)


def resolve_for(
    vllm_config: Any, soc: str, environ: Mapping[str, str] | None = None
) -> Any:
    """The resolved AscendConfig for this VllmConfig on SoC ``soc``."""
    from vllm_ascend.runtime.config_channel import ascend_environ

    facts = extract_facts(vllm_config, soc)
    return ascend_config.resolve(
        additional_config_of(vllm_config), facts=facts, environ=ascend_environ(environ)
    )
