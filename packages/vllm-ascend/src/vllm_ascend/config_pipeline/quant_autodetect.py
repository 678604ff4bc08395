"""Step: ModelSlim checkpoints select the "ascend" quantization method by themselves.

A ModelSlim export ships ``quant_model_description.json`` beside its weights but often no
``quantization_config`` in ``config.json``, so vLLM would load its int8 weights as a float
model. When no method was chosen and a local model directory holds that file, the method
becomes "ascend" and vLLM's quantization config is rebuilt (VllmConfig derived it before the
platform hook ran).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from vllm_ascend.quantization.description import DESCRIPTION_FILE

logger = logging.getLogger("vllm_ascend.config_pipeline.quant_autodetect")

METHOD = "ascend"


def detect_ascend_quantization(vllm_config: Any) -> bool:
    """Select "ascend" for a local ModelSlim checkpoint; True when it changed the config."""
    from vllm.config import VllmConfig

    model_config = vllm_config.model_config
    if model_config is None or model_config.quantization is not None:
        return False
    description = Path(str(model_config.model)) / DESCRIPTION_FILE
    if not description.is_file():
        return False
    model_config.quantization = METHOD
    vllm_config.quant_config = VllmConfig._get_quantization_config(
        model_config, vllm_config.load_config
    )
    logger.info("quantization: %s found, using the %r method", description, METHOD)
    return True
