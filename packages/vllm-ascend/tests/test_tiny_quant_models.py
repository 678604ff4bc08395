"""The quantized tiny checkpoint writer (msModelSlim layout)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from vllm_ascend.quantization import (
    QuantDescription,
)


def test_tiny_quant_model_writes_a_consistent_modelslim_checkpoint(tmp_path: Path) -> None:
    from safetensors.torch import load_file
    from vllm_ascend.checkpoints.tiny_models import make_tiny_model
    from vllm_ascend_testing.tiny_quant_models import make_tiny_quant_model

    kw = {"layers": 1, "hidden": 64, "head_dim": 32}
    path = make_tiny_quant_model("llama", tmp_path / "q", scheme="mixed", **kw)
    plain = load_file(str(make_tiny_model("llama", tmp_path / "f", **kw) / "model.safetensors"))
    description = json.loads((path / "quant_model_description.json").read_text())
    config = json.loads((path / "config.json").read_text())
    assert config["quantization_config"] == {"quant_method": "ascend", **description}
    parsed = QuantDescription.parse(description)
    layer = "model.layers.0"
    assert parsed.layer_scheme(f"{layer}.self_attn.qkv_proj",
                               {"qkv_proj": ["q_proj", "k_proj", "v_proj"]}) == "W8A8"
    assert parsed.parameter_scheme(f"{layer}.mlp.gate_proj") == "W8A8_DYNAMIC"
    assert parsed.parameter_scheme(f"{layer}.mlp.down_proj") == "FLOAT"
    tensors = load_file(str(path / "model.safetensors"))
    assert set(tensors) == {k for k in description if "." in k}
    q = f"{layer}.self_attn.q_proj"
    assert tensors[f"{q}.weight"].dtype == torch.int8
    assert {f"{q}.input_scale", f"{q}.input_offset"} <= set(tensors)
    assert f"{layer}.mlp.gate_proj.input_scale" not in tensors  # dynamic: no static scale
    # The int8 weight dequantizes to the float model's weight within half a step per channel.
    deq = tensors[f"{q}.weight"].float() * tensors[f"{q}.weight_scale"]
    step = tensors[f"{q}.weight_scale"]
    assert bool(((deq - plain[f"{q}.weight"]).abs() <= step / 2 + 1e-7).all())
    down = f"{layer}.mlp.down_proj.weight"
    assert torch.equal(tensors[down], plain[down])
    # All q/k/v parts share the static activation range (they read one input).
    scales = {tensors[f"{layer}.self_attn.{p}_proj.input_scale"].item() for p in "qkv"}
    assert len(scales) == 1 and scales.pop() > 0


def test_tiny_quant_model_rejects_unknown_scheme_and_arch(tmp_path: Path) -> None:
    from vllm_ascend_testing.tiny_quant_models import make_tiny_quant_model

    with pytest.raises(ValueError, match="scheme='w4a4' is not supported; allowed: w8a8"):
        make_tiny_quant_model("llama", tmp_path, scheme="w4a4")
    with pytest.raises(ValueError, match="arch='qwen3_moe' has no quantized variant"):
        make_tiny_quant_model("qwen3_moe", tmp_path)
