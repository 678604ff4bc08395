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
    q, gate = f"{layer}.self_attn.q_proj", f"{layer}.mlp.gate_proj"
    # ModelSlim's names and dtypes: static W8A8 carries no weight_scale/offset.
    assert {k.removeprefix(q + "."): v.dtype for k, v in tensors.items() if k.startswith(q)} == {
        "weight": torch.int8, "input_scale": torch.float32, "input_offset": torch.float32,
        "quant_bias": torch.int32, "deq_scale": torch.float32}
    assert {k.removeprefix(gate + "."): v.dtype for k, v in tensors.items()
            if k.startswith(gate)} == {
        "weight": torch.int8, "weight_scale": torch.float32, "weight_offset": torch.float32}
    # The dynamic int8 weight dequantizes to the float model's weight within half a step.
    deq = tensors[f"{gate}.weight"].float() * tensors[f"{gate}.weight_scale"]
    step = tensors[f"{gate}.weight_scale"]
    assert bool(((deq - plain[f"{gate}.weight"]).abs() <= step / 2 + 1e-7).all())
    # Static: deq_scale / input_scale is the weight's step, and quant_bias folds the offset.
    step = (tensors[f"{q}.deq_scale"] / tensors[f"{q}.input_scale"]).reshape(-1, 1)
    deq = tensors[f"{q}.weight"].float() * step
    assert bool(((deq - plain[f"{q}.weight"]).abs() <= step / 2 + 1e-6).all())
    offset = int(tensors[f"{q}.input_offset"].item())
    expected_bias = -offset * tensors[f"{q}.weight"].to(torch.int64).sum(dim=1)
    assert torch.equal(tensors[f"{q}.quant_bias"].to(torch.int64), expected_bias)
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


def test_tiny_quant_model_stores_an_int64_deq_scale_for_float16(tmp_path: Path) -> None:
    """ModelSlim's fp16 form: deq_scale int64 with the float32 bits in its low 32 bits;
    input_scale/offset in the model dtype."""
    import struct

    from safetensors.torch import load_file
    from vllm_ascend_testing.tiny_quant_models import make_tiny_quant_model

    path = make_tiny_quant_model("llama", tmp_path / "q", scheme="w8a8", layers=1, hidden=64,
                                 head_dim=32, dtype="float16")
    tensors = load_file(str(path / "model.safetensors"))
    q = "model.layers.0.self_attn.q_proj"
    deq = tensors[f"{q}.deq_scale"]
    assert deq.dtype == torch.int64 and tensors[f"{q}.input_scale"].dtype == torch.float16
    values = [struct.unpack("<f", struct.pack("<I", int(v)))[0] for v in deq.tolist()]
    assert all(v > 0 for v in values)
    assert int(deq.max()) < 2**32
