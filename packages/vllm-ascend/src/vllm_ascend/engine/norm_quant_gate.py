"""Whether the norm+quant fusion pass runs for a model."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

W4A4_SCHEMES = ("W4A4_DYNAMIC", "W4A4_FLATQUANT_DYNAMIC")
NPU_DTYPES = ("bfloat16", "float16")
DESCRIPTION_FILE = "quant_model_description.json"


@dataclass(frozen=True)
class NormQuantDecision:
    """The pass on or off, whether the model has W4A4 layers, and why."""

    enabled: bool
    w4a4: bool
    reason: str


def w4a4_layers(description: Mapping[str, Any] | None) -> list[str]:
    """Entries of a quantization description whose scheme is a W4A4 one (sorted)."""
    if not description:
        return []
    return sorted(k for k, v in description.items() if isinstance(v, str) and v in W4A4_SCHEMES)


def decide_norm_quant(
    switch: bool, soc: str, dtype: str, description: Mapping[str, Any] | None
) -> NormQuantDecision:
    """The decision for the ``fuse_norm_quant`` switch, SoC, model dtype and quantization
    description."""
    # Off with W4A4 layers (quantized inside the matmul: quantizing in front would do it twice); on
    # an NPU only for bf16/fp16 (no float32 kernels); the host CPU's reference kernels are exact in
    # fp32.
    w4a4 = w4a4_layers(description)
    if w4a4:
        return NormQuantDecision(
            False, True, f"norm_quant off: {len(w4a4)} W4A4 layer entries (e.g. {w4a4[0]})"
        )
    if not switch:
        return NormQuantDecision(False, False, "norm_quant off: fuse_norm_quant is false")
    name = dtype.removeprefix("torch.")
    if soc != "cpu" and name not in NPU_DTYPES:
        return NormQuantDecision(
            False, False, f"norm_quant off: model dtype {name} (the NPU kernels need "
            f"{' or '.join(NPU_DTYPES)})"
        )
    return NormQuantDecision(True, False, f"norm_quant on ({name} model on {soc})")


def quant_description_of(vllm_config: Any, facts: Any = None) -> Mapping[str, Any] | None:
    """The model's quantization description: vLLM's quant config, config.json's, or a local file."""
    quant = getattr(vllm_config, "quant_config", None)
    for candidate in (getattr(quant, "quant_description", None),
                      getattr(getattr(quant, "description", None), "schemes", None),
                      getattr(facts, "quant_description", None)):
        if isinstance(candidate, Mapping) and candidate:
            return candidate
    model = getattr(getattr(vllm_config, "model_config", None), "model", None)
    path = Path(str(model)) / DESCRIPTION_FILE if model else None
    if path is not None and path.is_file():
        try:
            loaded = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            logger.warning("cannot read %s (%s); treated as no quantization description",
                           path, exc)
            return None
        return loaded if isinstance(loaded, Mapping) else None
    return None


