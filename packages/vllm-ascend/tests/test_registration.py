"""Registering the "ascend" quantization method with vLLM."""

from __future__ import annotations

import pytest
from vllm_ascend.quantization import (
    register_ascend_quantization,
    reset_ascend_quantization,
)


def test_registration_is_idempotent_resettable_and_guarded(ascend_cpu_platform) -> None:
    from vllm.model_executor.layers import quantization
    from vllm.model_executor.layers.linear import WEIGHT_LOADER_V2_SUPPORTED
    from vllm_ascend.engine.registry import published_ascend_config as current_ascend_config
    from vllm_ascend.process.compat_adjustments import apply_compat_adjustments
    from vllm_ascend.quantization.config import AscendQuantConfig

    # The plugin's path registers the method.
    apply_compat_adjustments("cpu", config=current_ascend_config)
    assert quantization.get_quantization_config("ascend") is AscendQuantConfig
    assert register_ascend_quantization() is False
    assert quantization.QUANTIZATION_METHODS.count("ascend") == 1
    assert "AscendW8A8LinearMethod" in WEIGHT_LOADER_V2_SUPPORTED
    reset_ascend_quantization()
    assert "ascend" not in quantization.QUANTIZATION_METHODS
    assert "AscendW8A8DynamicLinearMethod" not in WEIGHT_LOADER_V2_SUPPORTED

    class Other(AscendQuantConfig):
        pass

    quantization.register_quantization_config("ascend")(Other)
    try:
        with pytest.raises(RuntimeError, match=r"already registered by .*Other"):
            register_ascend_quantization()
    finally:
        del quantization._CUSTOMIZED_METHOD_TO_QUANT_CONFIG["ascend"]
        quantization.QUANTIZATION_METHODS.remove("ascend")
    assert register_ascend_quantization() is True
    assert quantization.get_quantization_config("ascend") is AscendQuantConfig
