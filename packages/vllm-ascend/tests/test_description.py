"""The quantization description (quant_model_description.json): parsing, errors, fused layers."""

from __future__ import annotations

import pytest
from vllm_ascend.quantization import (
    QuantDescription,
    QuantDescriptionError,
)

QKV = {"qkv_proj": ["q_proj", "k_proj", "v_proj"]}


def test_description_parses_schemes_and_keeps_metadata() -> None:
    desc = QuantDescription.parse({
        "model_quant_type": "W8A8", "version": "1.0.0", "quant_method": "ascend",
        "m.layers.0.q_proj.weight": "W8A8", "m.layers.0.q_proj.input_scale": "W8A8",
        "m.layers.0.gate_proj.weight": "W8A8_DYNAMIC", "m.embed.weight": "FLOAT",
    })  # fmt: skip
    assert desc.metadata == {"model_quant_type": "W8A8", "version": "1.0.0",
                             "quant_method": "ascend"}
    assert desc.parameter_scheme("m.layers.0.q_proj") == "W8A8"
    assert desc.parameter_scheme("m.layers.0.gate_proj") == "W8A8_DYNAMIC"
    assert desc.parameter_scheme("m.embed") == "FLOAT"
    assert desc.parameter_scheme("m.layers.0.not_listed") == "FLOAT"
    assert desc.quantized_modules() == ["m.layers.0.gate_proj", "m.layers.0.q_proj"]


def test_description_rejects_every_bad_entry_at_once() -> None:
    with pytest.raises(QuantDescriptionError) as info:
        QuantDescription.parse({
            "a.q_proj.weight": "W4A4", "a.k_proj.weight": 8, "quant_method": "gptq",
            "a.v_proj.weight": "W8A8",
        })  # fmt: skip
    problems = info.value.problems
    assert len(problems) == 3
    text = str(info.value)
    assert "a.q_proj.weight: scheme 'W4A4' is not supported" in text
    assert "a.k_proj.weight: scheme 8 is not supported" in text
    assert "allowed: W8A8, W8A8_DYNAMIC, FLOAT" in text
    assert "quant_method: 'gptq' is not 'ascend'" in text
    assert isinstance(info.value, ValueError)


def test_description_must_be_a_mapping() -> None:
    with pytest.raises(QuantDescriptionError, match="must be a JSON object, got list"):
        QuantDescription.parse(["W8A8"])


def test_fused_layer_takes_its_parts_scheme_and_rejects_a_mix() -> None:
    parts = {f"l.{p}.weight": "W8A8" for p in QKV["qkv_proj"]}
    assert QuantDescription.parse(parts).layer_scheme("l.qkv_proj", QKV) == "W8A8"
    assert QuantDescription.parse({}).layer_scheme("l.qkv_proj", QKV) == "FLOAT"
    mixed = QuantDescription.parse({**parts, "l.k_proj.weight": "FLOAT"})
    with pytest.raises(QuantDescriptionError, match=r"l.qkv_proj fuses .*l.k_proj=FLOAT"):
        mixed.layer_scheme("l.qkv_proj", QKV)
