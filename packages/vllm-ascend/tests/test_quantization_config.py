"""AscendQuantConfig: vLLM picks the "ascend" method from the checkpoint."""

from __future__ import annotations

import json
from pathlib import Path

import pytest


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
