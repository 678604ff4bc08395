"""The norm+quant pass switch: W4A4 layers and the model dtype, logged once."""

from __future__ import annotations

import json
import shutil
import types
from pathlib import Path
from typing import Any

import pytest
from vllm_ascend.engine import norm_quant_gate as gate
from vllm_ascend.process.process_setup import reset_process_setup


@pytest.fixture
def gate_log(logged: Any) -> Any:
    """Messages of the gate's logger."""
    with logged("vllm_ascend.engine.norm_quant_gate") as found:
        yield found


W8A8_ONLY = {"model.layers.0.self_attn.q_proj.weight": "W8A8", "model_quant_type": "W8A8"}


@pytest.mark.parametrize(
    ("switch", "soc", "dtype", "description", "enabled", "w4a4"),
    [
        (True, "A2", "bfloat16", W8A8_ONLY, True, False),
        (True, "A3", "torch.float16", None, True, False),
        (True, "A2", "float32", W8A8_ONLY, False, False),  # no fp32 NPU kernels
        (True, "cpu", "float32", W8A8_ONLY, True, False),  # reference kernels are exact
        (False, "A2", "bfloat16", W8A8_ONLY, False, False),
        (True, "A2", "bfloat16", {**W8A8_ONLY, "m.l.0.mlp.down_proj.weight": "W4A4_DYNAMIC"},
         False, True),
        (True, "cpu", "float32", {"m.l.3.o_proj.weight": "W4A4_FLATQUANT_DYNAMIC"}, False, True),
        (True, "A2", "bfloat16", {"m.l.0.o_proj.weight": "W4A8_DYNAMIC"}, True, False),
    ],
)
def test_decision(switch: bool, soc: str, dtype: str, description: Any, enabled: bool,
                  w4a4: bool) -> None:
    decision = gate.decide_norm_quant(switch, soc, dtype, description)
    assert (decision.enabled, decision.w4a4) == (enabled, w4a4)
    assert decision.reason.startswith("norm_quant on" if enabled else "norm_quant off")


def test_w4a4_layers_are_named() -> None:
    description = {"b.weight": "W4A4_DYNAMIC", "a.weight": "W4A4_FLATQUANT_DYNAMIC",
                   "c.weight": "W8A8", "model_quant_type": "W4A4", "version": 1}
    assert gate.w4a4_layers(description) == ["a.weight", "b.weight"]
    assert gate.w4a4_layers(None) == [] and gate.w4a4_layers({}) == []
    reason = gate.decide_norm_quant(True, "A2", "bfloat16", description).reason
    assert reason == "norm_quant off: 2 W4A4 layer entries (e.g. a.weight)"


def test_description_sources_in_order(tmp_path: Path, gate_log: list[str]) -> None:
    from_quant = types.SimpleNamespace(quant_config=types.SimpleNamespace(
        quant_description={"x.weight": "W4A4_DYNAMIC"}))
    assert gate.quant_description_of(from_quant) == {"x.weight": "W4A4_DYNAMIC"}
    parsed = types.SimpleNamespace(quant_config=types.SimpleNamespace(
        description=types.SimpleNamespace(schemes={"y.weight": "W8A8"})))
    assert gate.quant_description_of(parsed) == {"y.weight": "W8A8"}
    facts = types.SimpleNamespace(quant_description={"z.weight": "W8A8_DYNAMIC"})
    assert gate.quant_description_of(types.SimpleNamespace(), facts) == {
        "z.weight": "W8A8_DYNAMIC"}
    model = types.SimpleNamespace(model_config=types.SimpleNamespace(model=str(tmp_path)))
    assert gate.quant_description_of(model) is None
    (tmp_path / gate.DESCRIPTION_FILE).write_text(json.dumps({"w.weight": "W4A4_DYNAMIC"}))
    assert gate.quant_description_of(model) == {"w.weight": "W4A4_DYNAMIC"}
    (tmp_path / gate.DESCRIPTION_FILE).write_text("{not json")
    assert gate.quant_description_of(model) is None
    assert any("treated as no quantization description" in m for m in gate_log)


@pytest.fixture
def bf16_model(tiny_qwen3: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(tiny_qwen3, tmp_path / "qwen3"))


def _config(model: Path, dtype: str) -> Any:
    from vllm.engine.arg_utils import EngineArgs

    return EngineArgs(model=str(model), load_format="dummy", dtype=dtype,
                      max_model_len=256).create_engine_config()


def test_pass_manager_drops_norm_quant_for_w4a4_and_logs_once(
    bf16_model: Path, ascend_cpu_platform: Any, gate_log: list[str]
) -> None:
    from vllm_ascend.compilation.pass_manager import AscendPassManager, build_fusion_manager
    from vllm_ascend.engine.resolution import extract_facts

    reset_process_setup()  # the process's log-once keys
    # Engines whose fusion manager is built (first compile) after the description appears.
    cfg, *later = [_config(bf16_model, "bfloat16") for _ in range(3)]
    fp32 = extract_facts(_config(bf16_model, "float32"), "A2")
    manager = AscendPassManager()
    manager.configure(cfg)
    assert "norm_quant" in manager.fusion.enabled
    # A W4A4 checkpoint description next to the weights switches the pass off.
    (bf16_model / gate.DESCRIPTION_FILE).write_text(json.dumps(
        {"model.layers.0.mlp.down_proj.weight": "W4A4_DYNAMIC"}))
    for config in later:
        w4a4 = AscendPassManager()
        w4a4.configure(config)
        assert "norm_quant" not in w4a4.fusion.enabled and w4a4.fusion.w4a4
    off = [m for m in gate_log if m.startswith("norm_quant off: 1 W4A4 layer entries")]
    assert len(off) == 1  # logged once
    # On an NPU a float32 model gets no norm_quant pass.
    switches = types.SimpleNamespace(fuse_norm_quant=True, fuse_qknorm_rope=True,
                                     fuse_muls_add=True, fuse_kv_cache_attention=True)
    assert "norm_quant" not in build_fusion_manager(switches, "A2", fp32).enabled
    assert "norm_quant" in build_fusion_manager(switches, "cpu", fp32).enabled
