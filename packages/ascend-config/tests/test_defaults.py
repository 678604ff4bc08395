"""The schema's defaults: every default of the existing plugin's ``additional_config`` keys, with
exact values, from an empty additional_config.
"""

from __future__ import annotations

from typing import Any

import pytest
from ascend_config import AscendConfig, compilation_defaults

TOP_DEFAULTS: dict[str, Any] = {
    "dump_config_path": None,
    "dump_config": None,
    "ascend_log_path": "~/ascend/log/vllm_ascend",
    "enable_shared_expert_dp": False,
    "multistream_overlap_shared_expert": False,
    "enable_cpu_binding": True,
    "multistream_dsv4_dsa_overlap": True,
    "enable_prefill_mc2": False,
    "enable_fused_mc2": 0,
    "enable_mlapo": True,
    "msmonitor_use_daemon": False,
    "enable_transpose_kv_cache_by_block": True,
    "pa_shape_list": (),
    "weight_nz_mode": 1,
    "enable_kv_nz": False,
    "enable_sparse_sfa_c8": False,
    "enable_sparse_li_c8": False,
    "c8_enable_reshape_optim": False,
    "enable_mc2_hierarchy_comm": False,
    "mega_moe_max_tokens": 131072,
    "enable_reduce_sample": False,
    "mix_placement": False,
    "refresh": False,
    "enable_dsa_cp": False,
    "draft_window_size": None,
    "pd_tp_ratio": 1,
    "pd_head_ratio": 1,
    "num_head_replica": 1,
    "batch_invariant": False,
    "env_changes": (),
    "warnings": (),
}

SECTION_DEFAULTS: dict[str, dict[str, Any]] = {
    "xlite_graph_config": {"enabled": False, "full_mode": False},
    "ascend_compilation_config": {
        "enable_npugraph_ex": True, "enable_static_kernel": False, "fuse_norm_quant": True,
        "fuse_qknorm_rope": True, "fuse_muls_add": True, "fuse_kv_cache_attention": True,
        "forbid_compile_after_ready": False},
    "ascend_fusion_config": {"fusion_ops_gmmswigluquant": True},
    "finegrained_tp_config": {
        "oproj_tensor_parallel_size": 0, "lmhead_tensor_parallel_size": 0,
        "embedding_tensor_parallel_size": 0, "mlp_tensor_parallel_size": 0,
        "olora_tensor_parallel_size": 0},
    "dynamic_spec_config": {"method": None, "method_params": {}},
    "eplb_config": {
        "dynamic_eplb": False, "expert_map_path": None, "expert_heat_collection_interval": 600,
        "algorithm_execution_interval": 50, "expert_map_record_path": None,
        "num_redundant_experts": 0, "eplb_policy_type": 2, "eplb_heat_collection_stage": "all",
        "load_collection_phase": "all"},
    "rejection_sampler_config": {
        "enable_block_verify": False, "enable_entropy_verify": False,
        "posterior_threshold": 0.95, "posterior_alpha": 0.4},
    "sparse_kv_offload_config": {
        "enabled": False, "topk_buffer_size": 4096, "dram_size_per_dp_GB": 128,
        "keep_device_kv_cache": False},
    "rl_config": {
        "enabled": False, "sleep_mode_extra_cleanup": False,
        "enable_training_consistency": False, "enable_batch_invariant": False},
    # None: the SoC's default, decided by ascend-topology's planner (A5 3, other SoCs 5).
    "cpu_binding_config": {"min_cpus_per_npu": None, "bind_irq": False, "migrate_memory": True},
}

SCHEDULER_DEFAULTS: dict[str, Any] = {
    "enable_balance_scheduling": False,
    "recompute_scheduler_enable": False,
    "short_request_first_config": {"enabled": False, "threshold": 256, "long_max_wait_ms": 0.0},
    "profiling_chunk_config": {
        "enabled": False, "smooth_factor": 1.0, "min_chunk": 4096, "need_timing": False,
        "max_fit_chunk": 30},
    "batch_job_sched_config": {
        "enabled": False, "max_jobs": 20, "reserve_margin_blocks": 2, "reserve_max_blocks": 8,
        "low_available_tokens_threshold": 4096, "short_decode_token_threshold": 32},
    "dyntra_lb_config": {
        "enabled": False, "enable_diagnostics": False, "mode": "dynamic", "start_step": 250,
        "end_step": -1, "bubble_threshold": 5.0, "long_req_block_threshold": 700,
        "dynamic_max_step": 256},
}


@pytest.fixture(params=[None, {}], ids=["none", "empty"])
def default_cfg(request: pytest.FixtureRequest, res: Any) -> AscendConfig:
    cfg: AscendConfig = res(request.param)
    return cfg


@pytest.mark.parametrize("key", sorted(TOP_DEFAULTS))
def test_top_level_default(default_cfg: AscendConfig, key: str) -> None:
    assert getattr(default_cfg, key) == TOP_DEFAULTS[key]


@pytest.mark.parametrize("section", sorted(SECTION_DEFAULTS))
def test_section_defaults(default_cfg: AscendConfig, section: str) -> None:
    assert getattr(default_cfg, section).model_dump() == SECTION_DEFAULTS[section]


def test_scheduler_defaults(default_cfg: AscendConfig) -> None:
    assert default_cfg.scheduler_config.model_dump() == SCHEDULER_DEFAULTS


def test_bubble_threshold_is_stored_as_float(res: Any) -> None:
    cfg = res({"scheduler_config": {"dyntra_lb_config": {"bubble_threshold": 7}}})
    value = cfg.scheduler_config.dyntra_lb_config.bubble_threshold
    assert value == 7.0 and isinstance(value, float)


def test_compilation_defaults() -> None:
    assert compilation_defaults() == {
        "fuse_norm_quant": True, "fuse_qknorm_rope": True, "fuse_muls_add": True,
        "fuse_kv_cache_attention": True}


def test_explicit_nested_values_are_honoured(res: Any) -> None:
    cfg = res({"ascend_compilation_config": {"fuse_norm_quant": False,
                                             "enable_static_kernel": True},
               "scheduler_config": {"short_request_first_config": {
                   "enabled": True, "threshold": 128, "long_max_wait_ms": 50}}})
    comp = cfg.ascend_compilation_config
    assert (comp.fuse_norm_quant, comp.enable_npugraph_ex, comp.enable_static_kernel) == (
        False, True, True)
    assert comp.pass_switches() == {
        "fuse_norm_quant": False, "fuse_qknorm_rope": True, "fuse_muls_add": True,
        "fuse_kv_cache_attention": True}
    srf = cfg.scheduler_config.short_request_first_config
    assert (srf.enabled, srf.threshold, srf.long_max_wait_ms) == (True, 128, 50.0)


def test_null_sections_take_defaults(res: Any) -> None:
    cfg = res({"scheduler_config": None, "eplb_config": None,
               "rl_config": {}, "dump_config": None})
    assert cfg.scheduler_config.model_dump() == SCHEDULER_DEFAULTS
    assert cfg.eplb_config.num_redundant_experts == 0
