"""The memory phase of the NPU config pipeline (``config_pipeline.memory``): the NPU caching
allocator's options and the edits derived from the deployment (block size, cache dtype, SFA
interleave size, token rounding), as pure rules and on real VllmConfigs. The host-CPU KV-cache
reservation of the same module is in test_kv_cache_budget.py."""

from __future__ import annotations

import pytest
from vllm_ascend.config_pipeline import memory


@pytest.mark.parametrize(
    ("current", "sleep", "expected"),
    [(None, False, "expandable_segments:True"),
     ("max_split_size_mb:64", False, "max_split_size_mb:64"),
     ("garbage_collection_threshold:0.6", False, "garbage_collection_threshold:0.6"),
     ("foo:1", False, "foo:1,expandable_segments:True"),
     ("expandable_segments:False", False, "expandable_segments:False"),
     (None, True, None), ("foo:1", True, "foo:1")],
)
def test_npu_alloc_conf(current, sleep, expected) -> None:
    assert memory.npu_alloc_conf(current, sleep) == expected


def test_drop_expandable_segments() -> None:
    drop = memory.drop_expandable_segments
    assert drop("expandable_segments:True,max_split_size_mb:8") == "max_split_size_mb:8"
    assert drop("my_expandable_segments:x") == "my_expandable_segments:x"
    assert drop(None) is None


@pytest.mark.parametrize(
    ("size", "kw", "expected"),
    [(None, {}, 128), (16, {"prefix_caching": True}, 128), (16, {"chunked_prefill": True}, 128),
     (16, {}, 16), (256, {"xlite": True}, 128), (16, {"is_hybrid": True, "prefix_caching": True},
                                               16),
     (256, {"model_type": "deepseek_v4"}, 32), (64, {"model_type": "deepseek_v4"}, 64)],
)
def test_refreshed_block_size(size, kw, expected) -> None:
    args = {"model_type": "qwen3", "is_hybrid": False, "prefix_caching": False,
            "chunked_prefill": False, "xlite": False, **kw}
    assert memory.refreshed_block_size(size, **args)[0] == expected


@pytest.mark.parametrize(
    ("tokens", "tp", "pcp", "sp", "expected"),
    [(1000, 4, 2, True, 1000), (1001, 4, 2, True, 1008), (1001, 2, 3, True, 1002),
     (1001, 4, 1, True, 1001),  # no prefill context parallel: unchanged
     (1001, 4, 3, False, 1001)],  # no sequence parallel: unchanged
)
def test_token_rounding(tokens, tp, pcp, sp, expected) -> None:
    assert memory.rounded_batched_tokens(tokens, tp, pcp, sp) == expected


@pytest.mark.parametrize(
    ("kw", "expected"),
    [({"uses_sfa": True, "pcp": 2, "dcp": 1}, 128),
     ({"uses_sfa": True, "pcp": 2, "dcp": 2}, 1),  # replicated indexer keeps DCP's layout
     ({"uses_sfa": True, "pcp": 1, "dcp": 1}, 1),  # no context parallel
     ({"uses_sfa": False, "pcp": 2, "dcp": 1}, 1)],
)
def test_sfa_interleave_size(kw, expected) -> None:
    assert memory.sfa_interleave_size(1, 128, **kw) == expected


def test_index_topk_models_cache_in_the_model_dtype(make_vllm_config) -> None:
    import ascend_config
    from vllm_ascend.engine.resolution import extract_facts

    cfg = make_vllm_config(enforce_eager=True)
    resolved = ascend_config.resolve({}, facts=ascend_config.DeploymentFacts())
    assert memory.apply_derived_edits(cfg, resolved, extract_facts(cfg, "A2")) == []
    cfg.model_config.hf_text_config.index_topk = 64  # a DeepSeek sparse-attention trait
    notes = memory.apply_derived_edits(cfg, resolved, extract_facts(cfg, "A2"))
    assert cfg.cache_config.cache_dtype == "float32"
    assert notes == ["cache_dtype=float32 (model has index_topk)"]
    # SFA (index_topk, no compress_ratios) under prefill context parallel: whole blocks.
    cfg.parallel_config.prefill_context_parallel_size = 2
    cfg.parallel_config.cp_kv_cache_interleave_size = 1
    notes = memory.apply_derived_edits(cfg, resolved, extract_facts(cfg, "A2"))
    assert cfg.parallel_config.cp_kv_cache_interleave_size == cfg.cache_config.block_size
    assert "cp_kv_cache_interleave_size=" in notes[-1]


def test_derived_edits_on_a_real_config(make_vllm_config) -> None:
    import ascend_config
    from vllm_ascend.engine.resolution import extract_facts

    cfg = make_vllm_config(block_size=32, enable_prefix_caching=True)
    resolved = ascend_config.resolve({}, facts=ascend_config.DeploymentFacts())
    notes = memory.apply_derived_edits(cfg, resolved, extract_facts(cfg, "A2"))
    assert cfg.cache_config.block_size == 128 and "block_size=128" in notes[0]
