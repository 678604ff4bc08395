"""The "ascend" quantization method: description parsing, registration, int8 linear methods
against hand-computed integer references, and the quantized tiny checkpoint."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from vllm_ascend.quantization import (
    QuantDescription,
    QuantDescriptionError,
    register_ascend_quantization,
    reset_ascend_quantization,
)
from vllm_ascend.quantization.int8_matmul import int8_linear

QKV = {"qkv_proj": ["q_proj", "k_proj", "v_proj"]}


# --- description ------------------------------------------------------------------------------


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


# --- registration -----------------------------------------------------------------------------


def test_registration_is_idempotent_resettable_and_guarded(ascend_cpu_platform) -> None:
    from vllm.model_executor.layers import quantization
    from vllm.model_executor.layers.linear import WEIGHT_LOADER_V2_SUPPORTED
    from vllm_ascend.platform.compat_adjustments import apply_compat_adjustments
    from vllm_ascend.quantization.config import AscendQuantConfig
    from vllm_ascend.runtime.process_setup import current_ascend_config

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


def test_int8_linear_matches_integer_reference_with_offsets() -> None:
    qx = [[33, -49, 14, 3], [103, 28, -72, 53]]
    got = int8_linear(
        torch.tensor(qx, dtype=torch.int8), torch.tensor([0.01]),
        torch.tensor(QW, dtype=torch.int8), torch.tensor([0.5, 0.25, 0.125]),
        x_offset=torch.tensor([3.0]), w_offset=torch.tensor([0.0, 1.0, -2.0]),
        bias=torch.tensor([1.0, 0.0, -1.0]), out_dtype=torch.float64,
    )  # fmt: skip
    ref = _ref_linear(qx, [0.01, 0.01], 3, QW, [0.5, 0.25, 0.125], [0, 1, -2])
    ref = [[v + b for v, b in zip(row, [1.0, 0.0, -1.0], strict=True)] for row in ref]
    assert got.dtype == torch.float64
    torch.testing.assert_close(got, torch.tensor(ref, dtype=torch.float64), rtol=1e-6, atol=1e-6)
    # By hand: 0.01 * 0.5 * (30*1 + (-52)(-2) + 11*3 + 0*4) + bias 1.0 = 0.835 + 1.0
    assert got[0, 0].item() == pytest.approx(1.835, abs=1e-6)


def test_int8_linear_rejects_float_operands() -> None:
    with pytest.raises(TypeError, match="int8 operands"):
        int8_linear(torch.zeros(1, 4), torch.ones(1), torch.zeros(2, 4, dtype=torch.int8),
                    torch.ones(2))


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


def _row_layer(scheme: str, out: int = 3, k: int = 4):
    from vllm.config import VllmConfig, set_current_vllm_config
    from vllm.model_executor.layers.linear import RowParallelLinear

    config = _config({"m.o_proj.weight": scheme})
    with set_current_vllm_config(VllmConfig()):
        return RowParallelLinear(k, out, bias=False, quant_config=config, prefix="m.o_proj",
                                 disable_tp=True)


def _load(layer, tensors: dict, shard=None) -> None:
    """What vLLM's model loader does per checkpoint tensor: the parameter's own loader."""
    params = dict(layer.named_parameters())
    for name, value in tensors.items():
        param = params[name]
        args = (param, value) if shard is None else (param, value, shard)
        param.weight_loader(*args)


def test_static_w8a8_layer_equals_hand_computed_reference(single_rank) -> None:
    layer = _row_layer("W8A8")
    assert type(layer.quant_method).__name__ == "AscendW8A8LinearMethod"
    _load(layer, {
        "weight": torch.tensor(QW, dtype=torch.int8),
        "weight_scale": torch.tensor([[0.5], [0.25], [0.125]]),
        "weight_offset": torch.tensor([[0.0], [1.0], [-2.0]]),
        "input_scale": torch.tensor([0.01]), "input_offset": torch.tensor([3.0]),
    })  # fmt: skip
    layer.quant_method.process_weights_after_loading(layer)
    x = torch.tensor(X, dtype=torch.float64).to(torch.float32)
    got = layer(x)[0]
    # q = round(x / 0.01 + 3), by hand
    qx = [[33, -49, 14, 3], [103, 28, -72, 53]]
    assert torch.equal(torch.ops.ascend.quantize(x, layer.input_scale, layer.input_offset),
                       torch.tensor(qx, dtype=torch.int8))
    ref = _ref_linear(qx, [0.01, 0.01], 3, QW, [0.5, 0.25, 0.125], [0, 1, -2])
    torch.testing.assert_close(got, torch.tensor(ref, dtype=torch.float32), rtol=1e-5, atol=1e-5)


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
    return {
        "weight": torch.randint(-128, 128, (rows, 4), generator=gen, dtype=torch.int8),
        "weight_scale": torch.rand(rows, 1, generator=gen) + 0.1,
        "weight_offset": torch.zeros(rows, 1),
        "input_scale": torch.tensor([input_scale]), "input_offset": torch.tensor([-2.0]),
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


@pytest.fixture(scope="module")
def tiny_quant_llama(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from vllm_ascend_testing.tiny_quant_models import make_tiny_quant_model

    return make_tiny_quant_model("llama", tmp_path_factory.mktemp("tq") / "llama",
                                 scheme="w8a8_dynamic", layers=1, hidden=64, head_dim=32)


def _engine_quant_config(model: Path, **kwargs):
    from vllm.engine.arg_utils import EngineArgs

    args = EngineArgs(model=str(model), load_format="dummy", dtype="float32",
                      max_model_len=128, **kwargs)
    return args.create_engine_config().quant_config


def test_vllm_picks_ascend_from_config_json_and_from_the_description_file(
    ascend_cpu_platform, tiny_quant_llama: Path, tmp_path: Path
) -> None:
    import shutil

    from vllm_ascend.quantization.config import AscendQuantConfig

    quantized = [f"model.layers.0.{m}" for m in (
        "mlp.down_proj", "mlp.gate_proj", "mlp.up_proj", "self_attn.k_proj", "self_attn.o_proj",
        "self_attn.q_proj", "self_attn.v_proj")]  # fmt: skip
    auto = _engine_quant_config(tiny_quant_llama)  # config.json: quant_method "ascend"
    assert isinstance(auto, AscendQuantConfig)
    assert auto.description.quantized_modules() == quantized
    # A ModelSlim export without the config.json entry: quantization="ascend" reads the file.
    bare = shutil.copytree(tiny_quant_llama, tmp_path / "bare")
    config = json.loads((bare / "config.json").read_text())
    del config["quantization_config"]
    (bare / "config.json").write_text(json.dumps(config))
    from_file = _engine_quant_config(bare, quantization="ascend")
    assert isinstance(from_file, AscendQuantConfig)
    assert from_file.description.schemes == auto.description.schemes


def test_a_modelslim_checkpoint_without_config_entry_selects_ascend_by_itself(
    ascend_cpu_platform, tiny_quant_llama: Path, tmp_path: Path
) -> None:
    import shutil

    from vllm_ascend.quantization.config import AscendQuantConfig

    bare = shutil.copytree(tiny_quant_llama, tmp_path / "bare")
    config = json.loads((bare / "config.json").read_text())
    del config["quantization_config"]
    (bare / "config.json").write_text(json.dumps(config))
    detected = _engine_quant_config(bare)  # no quantization= argument
    assert isinstance(detected, AscendQuantConfig)
    assert detected.description.quantized_modules()
    # Without the description file it stays a float model.
    (bare / "quant_model_description.json").unlink()
    assert _engine_quant_config(bare) is None

