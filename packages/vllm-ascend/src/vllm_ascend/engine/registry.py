"""The engines of this process, one per VllmConfig object, and the one road to them."""
# vLLM hands the plugin's hooks only the VllmConfig, so an engine is found by its config.

from __future__ import annotations

import contextlib
import copy
import logging
import os
import weakref
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from vllm_ascend.base.config_channel import (
    WORKER_INPUTS_ENV,
    ascend_environ,
    publish_worker_inputs,
)
from vllm_ascend.engine.ascend_engine import AscendEngine
from vllm_ascend.engine.capture_settings import UserCaptureSettings
from vllm_ascend.engine.per_config import Held, PerConfig
from vllm_ascend.engine.resolution import (
    Published,
    additional_config_of,
    extract_facts,
    resolve_ascend_config,
    resolve_published,
)

if TYPE_CHECKING:
    from ascend_config import AscendConfig, DeploymentFacts
    from vllm.config import VllmConfig

logger = logging.getLogger(__name__)


class EngineRegistry:
    """This process's engines by VllmConfig (weakly), and capture settings given before them."""

    def __init__(self) -> None:
        self.engines: PerConfig[AscendEngine] = PerConfig()
        self.user_capture: PerConfig[UserCaptureSettings] = PerConfig()
        # The additional_config each pipeline-built engine was resolved from.
        self.additional: PerConfig[Any] = PerConfig()
        # (channel value, what it resolves to): the publication this process read or made.
        self.published: tuple[str, Published | None] | None = None

    def register(self, vllm_config: VllmConfig, engine: AscendEngine) -> AscendEngine:
        """Keep ``engine`` for ``vllm_config`` (closing an earlier one) until it is freed."""
        earlier = self.engines.get(vllm_config)
        if earlier is not None and earlier is not engine:
            earlier.close()
        self.engines.set(vllm_config, engine)
        with contextlib.suppress(TypeError):  # a test double: closed by reset instead
            weakref.finalize(vllm_config, engine.close)
        return engine

    def close(self) -> None:
        """Close and forget every engine (tests: a fresh process)."""
        for engine in self.engines.values():
            engine.close()
        self.engines.clear()
        self.user_capture.clear()
        self.additional.clear()
        self.published = None


_REGISTRY = EngineRegistry()


def reset_engines() -> None:
    """Close and forget every engine of this process (tests)."""
    _REGISTRY.close()


def user_capture_store() -> PerConfig[UserCaptureSettings]:
    """The capture settings users gave, per VllmConfig (weakly), until the pipeline reads them."""
    return _REGISTRY.user_capture


def _new_engine(vllm_config: VllmConfig, config: AscendConfig, soc: str,
                facts: DeploymentFacts) -> AscendEngine:
    try:
        ref: Callable[[], VllmConfig | None] = weakref.ref(vllm_config)
    except TypeError:  # a test double that cannot be weakly referenced: held
        ref = Held(vllm_config)
    return _REGISTRY.register(vllm_config, AscendEngine(config, soc, facts, ref))


def build_engine(vllm_config: VllmConfig, soc: str,
                 environ: Mapping[str, str]) -> AscendEngine:
    """The pipeline's engine for ``vllm_config``, registered (AscendConfigError: every problem)."""
    additional = additional_config_of(vllm_config)
    earlier = _REGISTRY.engines.get(vllm_config)
    if earlier is not None and earlier.soc == soc \
            and _REGISTRY.additional.get(vllm_config) == additional:
        # vLLM runs __post_init__ again on the same config on the same SoC (the engine
        # core's start-up handshake, after the worker marked the engine ready): the engine
        # stays, with its
        # readiness and its stores; the facts and the environment it saw then are the
        # pipeline's own changes, not new inputs.
        return earlier
    facts = extract_facts(vllm_config, soc)
    config = resolve_ascend_config(additional, facts, environ)
    for warning in config.warnings:
        logger.warning("%s", warning)
    engine = _new_engine(vllm_config, config, soc, facts)
    _REGISTRY.additional.set(vllm_config, copy.deepcopy(additional))
    return engine


def peek_engine(vllm_config: VllmConfig) -> AscendEngine | None:
    """The engine registered for this very config object, or None (builds nothing)."""
    return _REGISTRY.engines.get(vllm_config)


def engine_of(vllm_config: VllmConfig) -> AscendEngine:
    """The engine of ``vllm_config``: the pipeline's, else one from the published inputs (a worker),
    else one resolved from ``vllm_config`` (a standalone compile); registered."""
    found = _REGISTRY.engines.get(vllm_config)
    if found is not None:
        return found
    published = published_engine_inputs()
    if published is not None:
        engine = _new_engine(vllm_config, published.config, published.soc, published.facts)
        # A pipeline run later on this config (vLLM's engine-core handshake) keeps it.
        _REGISTRY.additional.set(vllm_config, copy.deepcopy(additional_config_of(vllm_config)))
        return engine
    return build_engine(vllm_config, _platform_soc(), ascend_environ())


def _platform_soc() -> str:
    from vllm.platforms import current_platform

    soc: Any = getattr(current_platform, "soc", "cpu")  # an Ascend platform: "cpu" or the SoC
    return str(soc)


def published_engine_inputs(environ: Mapping[str, str] | None = None) -> Published | None:
    """The published inputs resolved once per publication, or None (unusable: raises each call)."""
    env = os.environ if environ is None else environ
    value = env.get(WORKER_INPUTS_ENV)
    if not value:
        return None
    known = _REGISTRY.published
    if known is None or known[0] != value:
        _REGISTRY.published = known = (value, resolve_published(env))
    return known[1]


def published_ascend_config() -> AscendConfig | None:
    """The resolved AscendConfig published to this process (:func:`published_engine_inputs`)."""
    published = published_engine_inputs()
    return None if published is None else published.config


def publish_engine(vllm_config: VllmConfig, engine: AscendEngine,
                   environ: Mapping[str, str]) -> bool:
    """Publish ``engine``'s resolution inputs to child processes and remember its result here."""
    # So a worker running in this process resolves nothing again.
    if not publish_worker_inputs(engine.soc, additional_config_of(vllm_config), engine.facts,
                                 environ):
        _REGISTRY.published = None
        return False
    _REGISTRY.published = (os.environ[WORKER_INPUTS_ENV],
                           Published(engine.soc, engine.config, engine.facts))
    return True
