"""The "ascend" quantization method: ModelSlim W8A8 / W8A8_DYNAMIC checkpoints in vLLM."""

from __future__ import annotations

from vllm_ascend.quantization.description import (
    DESCRIPTION_FILE,
    FLOAT,
    SCHEMES,
    W8A8,
    W8A8_DYNAMIC,
    QuantDescription,
    QuantDescriptionError,
)
from vllm_ascend.quantization.registration import (
    register_ascend_quantization,
    reset_ascend_quantization,
)

__all__ = [
    "DESCRIPTION_FILE",
    "FLOAT",
    "SCHEMES",
    "W8A8",
    "W8A8_DYNAMIC",
    "QuantDescription",
    "QuantDescriptionError",
    "register_ascend_quantization",
    "reset_ascend_quantization",
]
