"""The "ascend" int8 linear methods on vLLM layers against hand-computed integer references."""

from __future__ import annotations

import pytest
import torch
from vllm_ascend.quantization import (
    QuantDescriptionError,
    register_ascend_quantization,
)

QKV = {"qkv_proj": ["q_proj", "k_proj", "v_proj"]}


# --- description ------------------------------------------------------------------------------


# --- registration -----------------------------------------------------------------------------


# --- int8 matmul and linear methods -----------------------------------------------------------


def _ref_linear(qx, sx, ox, qw, sw, ow):
    """Spelled-out integer reference: y[m][n] = sx[m] * sw[n] * sum_k (qx-ox)(qw-ow)."""
    return [
        [sx[m] * sw[n] * sum((qx[m][k] - ox) * (qw[n][k] - ow[n]) for k in range(len(qw[n])))
         for n in range(len(qw))]
        for m in range(len(qx))
    ]  # fmt: skip


QW = [[1, -2, 3, 4], [-5, 6, 7, -8], [127, -128, 0, 1]]
X = [[0.30, -0.52, 0.11, 0.0], [1.0, 0.25, -0.75, 0.5]]


@pytest.fixture
def single_rank(monkeypatch, ascend_cpu_platform):
    """vLLM's parameter classes ask for the TP rank/size; one rank without a process group.
    The method is registered, so layers load through weight_loader_v2 as in a real model."""
    import vllm.model_executor.parameter as parameter

    monkeypatch.setattr(parameter, "get_tensor_model_parallel_rank", lambda: 0)
    monkeypatch.setattr(parameter, "get_tensor_model_parallel_world_size", lambda: 1)
    register_ascend_quantization()


def _config(description: dict, packed: dict | None = None):
    from vllm_ascend.quantization.config import AscendQuantConfig

    config = AscendQuantConfig.from_config(description)
    config.packed_modules_mapping = dict(packed or {})
    return config


def _row_layer(scheme: str, out: int = 3, k: int = 4, params_dtype=None):
    from vllm.config import VllmConfig, set_current_vllm_config
    from vllm.model_executor.layers.linear import RowParallelLinear

    config = _config({"m.o_proj.weight": scheme})
    with set_current_vllm_config(VllmConfig()):
        return RowParallelLinear(k, out, bias=False, quant_config=config, prefix="m.o_proj",
                                 disable_tp=True, params_dtype=params_dtype)


def _load(layer, tensors: dict, shard=None) -> None:
    """What vLLM's model loader does per checkpoint tensor: the parameter's own loader."""
    params = dict(layer.named_parameters())
    for name, value in tensors.items():
        param = params[name]
        args = (param, value) if shard is None else (param, value, shard)
        param.weight_loader(*args)


QB = [7, -3, 100]
DEQ = [0.005, 0.0025, 0.00125]


def _static_tensors(deq_scale: torch.Tensor) -> dict:
    """ModelSlim's static W8A8 tensors; a weight_scale/offset (some exports write them) is
    loaded and not used: deq_scale and quant_bias carry the dequantization."""
    return {
        "weight": torch.tensor(QW, dtype=torch.int8),
        "weight_scale": torch.tensor([[9.0], [9.0], [9.0]]),
        "weight_offset": torch.tensor([[5.0], [5.0], [5.0]]),
        "input_scale": torch.tensor([0.01]), "input_offset": torch.tensor([3.0]),
        "quant_bias": torch.tensor(QB, dtype=torch.int32), "deq_scale": deq_scale,
    }  # fmt: skip


def _static_reference(qx: list[list[int]]) -> torch.Tensor:
    """ModelSlim's formula by hand: y[m][n] = (sum_k qx[m][k] * qw[n][k] + qb[n]) * deq[n]."""
    return torch.tensor([
        [(sum(a * b for a, b in zip(row, QW[n], strict=True)) + QB[n]) * DEQ[n]
         for n in range(len(QW))]
        for row in qx
    ], dtype=torch.float32)  # fmt: skip


def test_static_w8a8_layer_equals_hand_computed_reference(single_rank) -> None:
    layer = _row_layer("W8A8")
    assert type(layer.quant_method).__name__ == "AscendW8A8LinearMethod"
    _load(layer, _static_tensors(torch.tensor(DEQ)))
    layer.quant_method.process_weights_after_loading(layer)
    x = torch.tensor(X, dtype=torch.float64).to(torch.float32)
    got = layer(x)[0]
    # q = round(x / 0.01 + 3), by hand
    qx = [[33, -49, 14, 3], [103, 28, -72, 53]]
    assert torch.equal(torch.ops.ascend.quantize(x, layer.input_scale, layer.input_offset),
                       torch.tensor(qx, dtype=torch.int8))
    torch.testing.assert_close(got, _static_reference(qx), rtol=1e-6, atol=1e-6)


def test_static_w8a8_reads_an_int64_deq_scale_as_float32_bits(single_rank) -> None:
    """fp16 models store deq_scale as int64 holding the float32 bit pattern."""
    import struct

    bits = [struct.unpack("<I", struct.pack("<f", v))[0] for v in DEQ]
    layer = _row_layer("W8A8", params_dtype=torch.float16)
    assert layer.deq_scale.dtype == torch.int64
    _load(layer, _static_tensors(torch.tensor(bits, dtype=torch.int64)))
    layer.quant_method.process_weights_after_loading(layer)
    x = torch.tensor(X, dtype=torch.float16)
    got = layer(x)[0]
    qx = torch.ops.ascend.quantize(x, layer.input_scale, layer.input_offset).tolist()
    torch.testing.assert_close(got, _static_reference(qx).half(), rtol=1e-3, atol=1e-3)


def test_static_w8a8_refuses_an_int64_deq_scale_with_upper_bits(single_rank) -> None:
    layer = _row_layer("W8A8", params_dtype=torch.float16)
    _load(layer, _static_tensors(torch.tensor([1 << 32, 0, 0], dtype=torch.int64)))
    with pytest.raises(ValueError, match=r"m.o_proj: deq_scale int64 entries must hold a "
                                         r"float32 bit pattern"):
        layer.quant_method.process_weights_after_loading(layer)


def test_dynamic_w8a8_layer_equals_hand_computed_reference(single_rank) -> None:
    layer = _row_layer("W8A8_DYNAMIC")
    assert type(layer.quant_method).__name__ == "AscendW8A8DynamicLinearMethod"
    _load(layer, {
        "weight": torch.tensor(QW, dtype=torch.int8),
        "weight_scale": torch.tensor([[0.5], [0.25], [0.125]]),
        "weight_offset": torch.zeros(3, 1),
    })  # fmt: skip
    layer.quant_method.process_weights_after_loading(layer)
    assert layer.weight_offset is None  # symmetric weight: offset terms skipped
    got = layer(torch.tensor(X))[0]
    sx = [max(abs(v) for v in row) / 127 for row in X]
    qx = [[round(v / s) for v in row] for row, s in zip(X, sx, strict=True)]
    assert qx[0] == [73, -127, 27, 0]  # 0.30 * 127 / 0.52 = 73.27 ...
    ref = _ref_linear(qx, sx, 0, QW, [0.5, 0.25, 0.125], [0, 0, 0])
    torch.testing.assert_close(got, torch.tensor(ref, dtype=torch.float32), rtol=1e-5, atol=1e-5)


def _qkv_layer(scheme: str):
    from vllm.config import VllmConfig, set_current_vllm_config
    from vllm.model_executor.layers.linear import QKVParallelLinear

    config = _config({f"m.{p}.weight": scheme for p in QKV["qkv_proj"]}, QKV)
    with set_current_vllm_config(VllmConfig()):
        # hidden 4, head_size 2: q has 2 heads (4 rows), k and v one head (2 rows) each
        return QKVParallelLinear(4, 2, 2, 1, bias=False, quant_config=config,
                                 prefix="m.qkv_proj", disable_tp=True)


def _shard(rows: int, seed: int, input_scale: float) -> dict:
    gen = torch.Generator().manual_seed(seed)
    weight = torch.randint(-128, 128, (rows, 4), generator=gen, dtype=torch.int8)
    weight_scale = torch.rand(rows, 1, generator=gen) + 0.1
    return {
        "weight": weight, "weight_scale": weight_scale, "weight_offset": torch.zeros(rows, 1),
        "input_scale": torch.tensor([input_scale]), "input_offset": torch.tensor([-2.0]),
        # ModelSlim's folding of the offset and the scales (see _static_reference)
        "quant_bias": (2 * weight.to(torch.int32).sum(dim=1)).to(torch.int32),
        "deq_scale": (input_scale * weight_scale).reshape(-1),
    }


def test_fused_qkv_loads_each_part_and_quantizes_the_input_once(single_rank) -> None:
    layer = _qkv_layer("W8A8")
    shards = {"q": _shard(4, 1, 0.03), "k": _shard(2, 2, 0.03), "v": _shard(2, 3, 0.03)}
    for shard_id, tensors in shards.items():
        _load(layer, tensors, shard_id)
    layer.quant_method.process_weights_after_loading(layer)
    x = torch.tensor(X)
    got = layer(x)[0]
    expected = []
    for tensors in shards.values():
        qx = torch.round(x / 0.03 - 2.0).clamp(-128, 127).to(torch.int64).tolist()
        qw = tensors["weight"].to(torch.int64).tolist()
        sw = tensors["weight_scale"].flatten().tolist()
        expected.append(torch.tensor(_ref_linear(qx, [0.03, 0.03], -2, qw, sw, [0] * len(qw))))
    torch.testing.assert_close(got, torch.cat(expected, dim=1).float(), rtol=1e-5, atol=1e-5)


def test_fused_parts_with_different_static_scales_are_rejected(single_rank) -> None:
    layer = _qkv_layer("W8A8")
    for shard_id, scale in (("q", 0.03), ("k", 0.03), ("v", 0.05)):
        _load(layer, _shard(4 if shard_id == "q" else 2, 0, scale), shard_id)
    with pytest.raises(ValueError, match=r"m.qkv_proj: the fused parts have different input_scale"):
        layer.quant_method.process_weights_after_loading(layer)


def test_float_and_non_linear_layers(single_rank) -> None:
    from vllm.model_executor.layers.linear import UnquantizedLinearMethod

    layer = _row_layer("FLOAT")
    assert isinstance(layer.quant_method, UnquantizedLinearMethod)
    config = _config({"m.embed.weight": "W8A8"})
    assert config.get_quant_method(torch.nn.Embedding(4, 4), "m.other") is None
    with pytest.raises(QuantDescriptionError, match=r"m\.embed: scheme W8A8 on a Embedding"):
        config.get_quant_method(torch.nn.Embedding(4, 4), "m.embed")


# --- quantized tiny checkpoint ----------------------------------------------------------------
