"""Compiled runs on the host-CPU platform: fusion on and off agree; the report and graphs agree.

Each engine compiles with a fresh compile cache (a cache hit would skip the passes), so every
piecewise graph of the tiny model goes through the Ascend pass manager exactly once.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from vllm_ascend_testing.graph_dump import count_ops_in_dump

ARCHES = ("llama", "qwen3", "qwen3_moe")
NUM_LAYERS = 2  # conftest.NUM_LAYERS: the tiny models' decoder layers

# Fusion passes and the sites each rewrites in the whole tiny model (float32, no quantization,
# so norm_quant never applies; no `x * scale + y` in these models, so muls_add never applies;
# every attention layer writes its KV cache and attends in one op).
EXPECTED_REPORT = {
    "llama": {"qknorm_rope": 0, "norm_quant": 0, "muls_add": 0,  # no QK norm
              "kv_cache_attention": NUM_LAYERS},
    "qwen3": {"qknorm_rope": NUM_LAYERS, "norm_quant": 0, "muls_add": 0,
              "kv_cache_attention": NUM_LAYERS},
    "qwen3_moe": {"qknorm_rope": NUM_LAYERS, "norm_quant": 0, "muls_add": 0,
                  "kv_cache_attention": NUM_LAYERS},
}
# Candidate ("expected") and rewritten ("matched") sites per pass of the whole tiny model,
# pinned against the locked vLLM: a vLLM upgrade that changes an idiom (another norm op, an
# extra op between the norm and the rope, a new attention call) moves these numbers. Candidates:
# every rope fed by q/k norms (qwen3: one per layer; llama has none), every KV-cache update
# (one per attention layer), every `x * number + y` (none), every quantisation of a norm
# output (none: no quantization). noop_elimination is a clean-up: no expectation.
EXPECTED_SITES = {
    arch: {
        "qknorm_rope": {"expected": report["qknorm_rope"], "matched": report["qknorm_rope"]},
        "kv_cache_attention": {"expected": NUM_LAYERS, "matched": NUM_LAYERS},
        "muls_add": {"expected": 0, "matched": 0},
        "norm_quant": {"expected": 0, "matched": 0},
    }
    for arch, report in EXPECTED_REPORT.items()
}
FUSED_OP = "ascend.split_qkv_rmsnorm_rope"
ROPE_OP = "ascend.rotary_embedding"
KV_UPDATE_OP = "vllm.unified_kv_cache_update"
ATTENTION_OP = "vllm.unified_attention_with_output"
FUSED_ATTENTION_OP = "vllm_ascend.attention_with_kv_update"

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
def test_fusion_sites_pin_expected_and_matched_per_pass(compiled_runs, arch: str) -> None:
    fused = compiled_runs.get(arch, fusion=True).sites
    for name, sites in EXPECTED_SITES[arch].items():
        assert fused["passes"][name] == sites, (name, fused)
    assert fused["passes"]["noop_elimination"]["expected"] is None
    assert fused["graphs"] > 0 and fused["from_cache"] is False
    # Fusion off: only the clean-up runs, over the same graphs.
    unfused = compiled_runs.get(arch, fusion=False).sites
    assert set(unfused["passes"]) == {"noop_elimination"}
    assert unfused["graphs"] == fused["graphs"] and unfused["from_cache"] is False


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


@pytest.mark.parametrize("arch", ARCHES)
def test_dumped_graphs_write_the_kv_cache_inside_the_attention_call(
    compiled_runs, arch: str
) -> None:
    ops = (KV_UPDATE_OP, ATTENTION_OP, FUSED_ATTENTION_OP)
    fused = count_ops_in_dump(compiled_runs.get(arch, fusion=True).dump_dir, ops)
    unfused = count_ops_in_dump(compiled_runs.get(arch, fusion=False).dump_dir, ops)
    assert fused == {KV_UPDATE_OP: 0, ATTENTION_OP: 0, FUSED_ATTENTION_OP: NUM_LAYERS}
    assert unfused == {KV_UPDATE_OP: NUM_LAYERS, ATTENTION_OP: NUM_LAYERS, FUSED_ATTENTION_OP: 0}


def test_a_fused_graph_loaded_from_the_compile_cache_runs_in_a_new_process(compiled_runs) -> None:
    # The loaded graph calls the fused attention op, but no pass manager compiles anything in
    # that process: the op must be there all the same (the plugin registers it at start-up).
    cold = compiled_runs.get("qwen3", fusion=True)
    warm = compiled_runs.warm("qwen3", fusion=True)
    assert sum(warm.report.values()) == 0  # loaded, not compiled: no pass ran
    # ... and the site report says so instead of showing zero sites as misses
    assert warm.sites["from_cache"] is True and warm.sites["graphs"] == 0
    assert [o["token_ids"] for o in warm.outputs] == [o["token_ids"] for o in cold.outputs]
