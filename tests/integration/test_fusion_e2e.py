"""Compiled runs on the host-CPU platform: fusion on and off agree; the report and graphs agree.

Each engine compiles with a fresh compile cache (a cache hit would skip the passes), so every
piecewise graph of the tiny model goes through the Ascend pass manager exactly once.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from vllm_ascend.testing.graph_dump import count_ops_in_dump

ARCHES = ("llama", "qwen3", "qwen3_moe")
NUM_LAYERS = 2  # conftest.NUM_LAYERS: the tiny models' decoder layers

# Fusion passes and the sites each rewrites in the whole tiny model (float32, no quantization,
# so norm_quant never applies; no `x * scale + y` in these models, so muls_add never applies).
EXPECTED_REPORT = {
    "llama": {"qknorm_rope": 0, "norm_quant": 0, "muls_add": 0},  # no QK norm
    "qwen3": {"qknorm_rope": NUM_LAYERS, "norm_quant": 0, "muls_add": 0},
    "qwen3_moe": {"qknorm_rope": NUM_LAYERS, "norm_quant": 0, "muls_add": 0},
}
FUSED_OP = "ascend.split_qkv_rmsnorm_rope"
ROPE_OP = "ascend.rotary_embedding"

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


@pytest.mark.parametrize("arch", ARCHES)
def test_fusion_on_and_off_generate_identical_tokens(compiled_runs, arch: str) -> None:
    fused = compiled_runs.get(arch, fusion=True)
    unfused = compiled_runs.get(arch, fusion=False)
    fused_tokens = [o["token_ids"] for o in fused.outputs]
    assert all(len(tokens) == 12 for tokens in fused_tokens)  # conftest.COMPILED_MAX_TOKENS
    assert fused_tokens == [o["token_ids"] for o in unfused.outputs]
    assert [o["text"] for o in fused.outputs] == [o["text"] for o in unfused.outputs]


@pytest.mark.parametrize("arch", ARCHES)
def test_fusion_report_counts_rewrites_per_layer(compiled_runs, arch: str) -> None:
    fused = compiled_runs.get(arch, fusion=True).report
    unfused = compiled_runs.get(arch, fusion=False).report
    assert fused is not None and unfused is not None
    for name, expected in EXPECTED_REPORT[arch].items():
        assert fused.get(name, 0) == expected, fused
        assert unfused.get(name, 0) == 0, unfused


@pytest.mark.parametrize("arch", ARCHES)
def test_dumped_graphs_hold_one_fused_node_per_attention_layer(compiled_runs, arch: str) -> None:
    fused_dump: Path = compiled_runs.get(arch, fusion=True).dump_dir
    unfused_dump: Path = compiled_runs.get(arch, fusion=False).dump_dir
    expected = EXPECTED_REPORT[arch]["qknorm_rope"]
    fused = count_ops_in_dump(fused_dump, (FUSED_OP, ROPE_OP))
    unfused = count_ops_in_dump(unfused_dump, (FUSED_OP, ROPE_OP))
    # Every attention layer's rope is in the graphs: fused where QK norm precedes it.
    assert fused[FUSED_OP] == expected
    assert fused[ROPE_OP] == NUM_LAYERS - expected
    assert unfused[FUSED_OP] == 0
    assert unfused[ROPE_OP] == NUM_LAYERS
