"""Registering the "ascend" quantization method with vLLM (once per process) and undoing it."""
# Must run before vLLM builds its ModelConfig, i.e. from the plugin hooks.

from __future__ import annotations

from vllm_ascend.quantization.description import METHOD_NAME


def _registered() -> type | None:
    from vllm.model_executor.layers import quantization

    if METHOD_NAME not in quantization.QUANTIZATION_METHODS:
        return None
    # vLLM keeps custom configs in this dict; get_quantization_config would import every
    # built-in config just to answer the question.
    found: type | None = quantization._CUSTOMIZED_METHOD_TO_QUANT_CONFIG.get(METHOD_NAME)
    return found


def register_ascend_quantization() -> bool:
    """Register :class:`AscendQuantConfig` as vLLM's "ascend" method; False if already done,
    RuntimeError when another class holds the name."""
    from vllm.model_executor.layers import linear, quantization

    # Local: torch and vLLM (this module loads with register()'s adjustments).
    from vllm_ascend.quantization.config import AscendQuantConfig
    from vllm_ascend.quantization.linear_methods import LINEAR_METHODS
    from vllm_ascend.quantization.npu_linear_methods import NPU_LINEAR_METHODS

    for cls in (*LINEAR_METHODS.values(), *NPU_LINEAR_METHODS.values()):
        if cls.__name__ not in linear.WEIGHT_LOADER_V2_SUPPORTED:
            linear.register_weight_loader_v2_supported_method(cls)
    current = _registered()
    if current is AscendQuantConfig:
        return False
    if current is not None:
        raise RuntimeError(
            f"vLLM quantization method {METHOD_NAME!r} is already registered by "
            f"{current.__module__}.{current.__qualname__}; vllm-ascend cannot register "
            "AscendQuantConfig"
        )
    quantization.register_quantization_config(METHOD_NAME)(AscendQuantConfig)
    return True


def reset_ascend_quantization() -> None:
    """Remove the Ascend registrations from vLLM (tests)."""
    from vllm.model_executor.layers import linear, quantization

    # Local: torch and vLLM (this module loads with register()'s adjustments).
    from vllm_ascend.quantization.config import AscendQuantConfig
    from vllm_ascend.quantization.linear_methods import LINEAR_METHODS
    from vllm_ascend.quantization.npu_linear_methods import NPU_LINEAR_METHODS

    for cls in (*LINEAR_METHODS.values(), *NPU_LINEAR_METHODS.values()):
        while cls.__name__ in linear.WEIGHT_LOADER_V2_SUPPORTED:
            linear.WEIGHT_LOADER_V2_SUPPORTED.remove(cls.__name__)
    if _registered() is not AscendQuantConfig:
        return
    del quantization._CUSTOMIZED_METHOD_TO_QUANT_CONFIG[METHOD_NAME]
    quantization.QUANTIZATION_METHODS.remove(METHOD_NAME)
