"""``AscendQuantConfig``: vLLM's quantization config for ModelSlim checkpoints ("ascend"), from
config.json's ``quantization_config`` or ``quant_model_description.json``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from vllm.model_executor.layers.linear import (
    LinearBase,
    LinearMethodBase,
    UnquantizedLinearMethod,
)
from vllm.model_executor.layers.quantization.base_config import (
    QuantizationConfig,
    QuantizeMethodBase,
)

from vllm_ascend.quantization.description import (
    DESCRIPTION_FILE,
    FLOAT,
    METHOD_NAME,
    QuantDescription,
    QuantDescriptionError,
)
from vllm_ascend.quantization.linear_methods import LINEAR_METHODS
from vllm_ascend.quantization.npu_linear_methods import NPU_LINEAR_METHODS


def linear_methods_for_platform() -> Mapping[str, type[LinearMethodBase]]:
    """The NPU runtime's linear methods on the NPU platform, else the host CPU's."""
    from vllm.platforms import current_platform

    return NPU_LINEAR_METHODS if current_platform.device_type == "npu" else LINEAR_METHODS


class AscendQuantConfig(QuantizationConfig):
    """W8A8 / W8A8_DYNAMIC linear layers as the description lists; everything else float."""

    def __init__(self, description: QuantDescription) -> None:
        super().__init__()
        self.description = description

    def __repr__(self) -> str:
        return f"AscendQuantConfig({len(self.description.quantized_modules())} quantized modules)"

    def get_name(self) -> str:  # type: ignore[override]  # vLLM's Literal has no "ascend"
        return METHOD_NAME

    def get_supported_act_dtypes(self) -> list[torch.dtype]:
        return [torch.bfloat16, torch.float16, torch.float32]

    @classmethod
    def get_min_capability(cls) -> int:
        return 0  # no CUDA compute capability involved

    @staticmethod
    def get_config_filenames() -> list[str]:
        return [DESCRIPTION_FILE]

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> AscendQuantConfig:
        return cls(QuantDescription.parse(config))

    def apply_vllm_mapper(self, hf_to_vllm_mapper: Any) -> None:
        # Models whose vLLM module names differ from the checkpoint's rename the entries.
        schemes = hf_to_vllm_mapper.apply_dict(dict(self.description.schemes))
        self.description = QuantDescription(schemes, self.description.metadata)

    def get_quant_method(
        self, layer: torch.nn.Module, prefix: str
    ) -> QuantizeMethodBase | None:
        scheme = self.description.layer_scheme(prefix, self.packed_modules_mapping)
        if isinstance(layer, LinearBase):
            if scheme == FLOAT:
                return UnquantizedLinearMethod()
            return linear_methods_for_platform()[scheme]()
        if scheme != FLOAT:
            raise QuantDescriptionError(
                [f"{prefix}: scheme {scheme} on a {type(layer).__name__}; this plugin "
                 "quantizes linear layers only (mark it FLOAT)"]
            )
        return None
