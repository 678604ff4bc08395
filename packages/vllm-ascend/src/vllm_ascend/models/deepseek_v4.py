"""DeepSeek V4 layer-name helpers, for per-layer arrays and weight loading."""
# Per-layer arrays hold the main layers, then the MTP ones; MTP names count from 0 (mtp.0.).

from __future__ import annotations

from typing import Any

MTP_MODULE = ".mtp."
MTP_WEIGHT_PREFIX = "mtp."


def _integer_parts(name: str) -> list[int]:
    return [int(part) for part in name.split(".") if part.isdigit()]


def _num_hidden_layers(config: Any) -> int:
    layers = getattr(config, "num_hidden_layers", None)
    if not isinstance(layers, int) or isinstance(layers, bool) or layers < 0:
        raise ValueError(
            f"the model config needs num_hidden_layers (a non-negative int), got {layers!r}"
        )
    return layers


def extract_dsv4_layer_index(config: Any, name: str) -> int:
    """The per-layer array index of module ``name`` (MTP modules shifted past the main layers)."""
    parts = _integer_parts(name)
    if len(parts) != 1:
        raise ValueError(
            f"layer name {name!r} must contain exactly one integer part (the layer number), "
            f"found {len(parts)}"
        )
    index, layers = parts[0], _num_hidden_layers(config)
    if MTP_MODULE in name and index < layers:
        return index + layers
    return index


def get_dsv4_spec_layer_idx_from_weight_name(config: Any, weight_name: str) -> int | None:
    """The MTP layer number of a checkpoint weight (``mtp.<n>.…``), or None for other weights."""
    if not weight_name.startswith(MTP_WEIGHT_PREFIX):
        return None
    number = weight_name.split(".")[1]
    if not number.isdigit():
        raise ValueError(
            f"MTP weight {weight_name!r} must be named 'mtp.<layer number>.…', got {number!r}"
        )
    return int(number)


def get_dsv4_compress_ratio(config: Any, layer_idx: int) -> int:
    """``compress_ratios[layer_idx]``, 0 (dense attention) when absent or past its end."""
    if isinstance(layer_idx, bool) or not isinstance(layer_idx, int) or layer_idx < 0:
        raise ValueError(f"layer_idx must be a non-negative int, got {layer_idx!r}")
    ratios = getattr(config, "compress_ratios", None)
    if ratios is None or layer_idx >= len(ratios):
        return 0
    return int(ratios[layer_idx])
