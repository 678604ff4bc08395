"""The two ``check_and_update_config`` pipelines, each a readable list of small steps."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from vllm_ascend.config_pipeline import cpu_compilation, gpu_fixes
from vllm_ascend.config_pipeline.facts import extract_facts
from vllm_ascend.config_pipeline.resolve_step import additional_config_of

logger = logging.getLogger("vllm_ascend.config_pipeline.steps")


def _resolve(vllm_config: Any, soc: str) -> tuple[Any, Any]:
    import ascend_config

    facts = extract_facts(vllm_config, soc)
    resolved = ascend_config.resolve(additional_config_of(vllm_config), facts=facts)
    for warning in resolved.warnings:
        logger.warning("%s", warning)
    return facts, resolved


def run_cpu_pipeline(vllm_config: Any, cpu_defaults: Callable[[Any], None]) -> Any:
    """Host-CPU platform: Ascend config + vLLM's CPU defaults + compilation kept for the passes.

    Returns the resolved AscendConfig (None without a model config).
    """
    from vllm_ascend import logging_setup
    from vllm_ascend.process_setup import current_process_setup, publish_worker_inputs

    logging_setup.configure_console_logging()
    if vllm_config.model_config is None:
        logger.warning("Model config is missing; skipping the Ascend pipeline")
        cpu_defaults(vllm_config)
        return None
    compile_requested = cpu_compilation.wants_vllm_compile(vllm_config)
    facts, resolved = _resolve(vllm_config, "cpu")  # raises AscendConfigError: every problem
    gpu_fixes.fix_gpu_only_settings(vllm_config)
    cpu_defaults(vllm_config)
    cpu_compilation.apply_cpu_compilation(vllm_config, compile_requested)
    publish_worker_inputs("cpu", additional_config_of(vllm_config), facts)
    current_process_setup().setup(resolved, "cpu")
    return resolved
