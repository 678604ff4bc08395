"""``ascend_config.rules``: every rule's problem and warning lines, word for word.

A user reads these lines to fix a config, so each one is part of the interface: where (the key
path), what was wrong, what was given and what is allowed. Each scenario below trips one rule
family (the id names it); the lines were read against the existing vllm-ascend plugin's rule.
"""

from __future__ import annotations

from typing import Any

import pytest
from ascend_config import AscendConfigError, DeploymentFacts, resolve

SCENARIOS = [
    pytest.param(
        {"ascend_compilation_config": {"enable_static_kernel": True, "enable_npugraph_ex": False}},
        {},
        {},
        "problems", [
            "ascend_compilation_config.enable_static_kernel: the static kernel needs "
            "npugraph_ex (given True; allowed: false unless "
            "ascend_compilation_config.enable_npugraph_ex is true)",
        ], id="static_needs_npugraph"),
    pytest.param(
        {"ascend_compilation_config": {"enable_static_kernel": True}},
        {"soc": "310P"},
        {},
        "warnings", [
            "ascend_compilation_config.enable_static_kernel is not supported on 310P; it is set "
            "to false",
        ], id="npugraph_310p"),
    pytest.param(
        {"ascend_compilation_config": {"enable_npugraph_ex": True}},
        {"enforce_eager": True},
        {},
        "warnings", [
            "ascend_compilation_config.enable_npugraph_ex has no effect with enforce_eager (no "
            "graph mode); it is set to false",
        ], id="npugraph_eager"),
    pytest.param(
        {"xlite_graph_config": {"enabled": True}},
        {
            "speculative_method": "mtp",
            "num_speculative_tokens": 2,
            "pipeline_parallel_size": 2,
            "block_size": 64,
        },
        {},
        "problems", [
            "xlite_graph_config.enabled: xlite supports num_speculative_tokens 1 only "
            "(deployment has 2) (given True; allowed: false when speculative decoding uses more "
            "than 1 token)",
            "xlite_graph_config.enabled: xlite does not support pipeline parallel "
            "(pipeline_parallel_size 2) (given True; allowed: false with pipeline parallel > 1)",
        ], id="xlite_all"),
    pytest.param(
        {
            "finegrained_tp_config": {
                "oproj_tensor_parallel_size": 3,
                "olora_tensor_parallel_size": 2,
            },
        },
        {"tensor_parallel_size": 2, "enforce_eager": True, "data_parallel_size": 4},
        {},
        "problems", [
            "finegrained_tp_config.oproj_tensor_parallel_size: fine-grained TP is for MoE "
            "models only (given 3; allowed: 0 for dense models)",
            "finegrained_tp_config.oproj_tensor_parallel_size: must divide the DP size (given "
            "3; allowed: a divisor of data_parallel_size (4))",
            "finegrained_tp_config.oproj_tensor_parallel_size: needs graph mode (given 3; "
            "allowed: 0 with enforce_eager)",
            "finegrained_tp_config.oproj_tensor_parallel_size: only on a PD decode node "
            "(kv_role None) (given 3; allowed: 0 unless kv_role is kv_consumer)",
            "finegrained_tp_config.oproj_tensor_parallel_size: needs tensor_parallel_size 1 "
            "(deployment has 2) (given 3; allowed: 0 unless tensor_parallel_size is 1)",
            "finegrained_tp_config.oproj_tensor_parallel_size: cross-DP collectives need the "
            "recompute scheduler's uniform tokens (given 3; allowed: 0 unless "
            "scheduler_config.recompute_scheduler_enable is true)",
            "finegrained_tp_config.olora_tensor_parallel_size: fine-grained TP is for MoE "
            "models only (given 2; allowed: 0 for dense models)",
            "finegrained_tp_config.olora_tensor_parallel_size: needs graph mode (given 2; "
            "allowed: 0 with enforce_eager)",
            "finegrained_tp_config.olora_tensor_parallel_size: only on a PD decode node "
            "(kv_role None) (given 2; allowed: 0 unless kv_role is kv_consumer)",
        ], id="ftp_all"),
    pytest.param(
        {"enable_fused_mc2": 1},
        {"architectures": ["MiniMaxM3ForCausalLM"]},
        {},
        "problems", [
            "enable_fused_mc2: fused MC2 does not support MiniMaxM3 (given 1; allowed: 0 for "
            "MiniMaxM3 models)",
        ], id="minimax"),
    pytest.param(
        {"enable_fused_mc2": 1},
        {"megamoe_available": True},
        {},
        "warnings", [
            "enable_fused_mc2: the model does not fit MegaMoE (hidden size 1024-8192 and MoE "
            "intermediate size 1024-3072, multiples of 512; w8a8/w4a8); fused MC2 is set to 0",
        ], id="megamoe_off"),
    pytest.param(
        {"enable_fused_mc2": 1, "multistream_overlap_shared_expert": True},
        {},
        {},
        "warnings", [
            "multistream_overlap_shared_expert is not supported with fused MC2; it is set to "
            "false",
        ], id="overlap_fused"),
    pytest.param(
        {
            "enable_mc2_hierarchy_comm": True,
            "enable_fused_mc2": 1,
            "eplb_config": {"dynamic_eplb": True, "num_redundant_experts": 33},
        },
        {"soc": "A5", "num_experts": 480},
        {"DYNAMIC_EPLB": "1"},
        "problems", [
            "enable_mc2_hierarchy_comm: hierarchical MC2 is not implemented on A5 (given True; "
            "allowed: false unless soc is A2 or A3)",
            "enable_mc2_hierarchy_comm: supports at most 512 experts, got 513 experts (480 "
            "logical experts + 33 EPLB redundant experts) (given True; allowed: false with more "
            "than 512 experts)",
            "enable_mc2_hierarchy_comm: hierarchical MC2 cannot be combined with fused MC2 "
            "(given True; allowed: false with enable_fused_mc2 1)",
        ], id="hier_all"),
    pytest.param(
        {"enable_mc2_hierarchy_comm": True},
        {"soc": "A3", "num_experts": 513},
        {},
        "problems", [
            "enable_mc2_hierarchy_comm: supports at most 512 experts, got 513 experts (given "
            "True; allowed: false with more than 512 experts)",
        ], id="hier_plain"),
    pytest.param(
        {"mix_placement": True, "multistream_overlap_shared_expert": True},
        {},
        {},
        "problems", [
            "mix_placement: mixed placement conflicts with shared-expert DP / multistream "
            "overlap (given True; allowed: false with enable_shared_expert_dp or "
            "multistream_overlap_shared_expert)",
        ], id="mix"),
    pytest.param(
        {
            "enable_reduce_sample": True,
            "finegrained_tp_config": {"lmhead_tensor_parallel_size": 2},
        },
        {"kv_role": "kv_producer", "is_moe": True, "data_parallel_size": 2},
        {},
        "problems", [
            "enable_reduce_sample: cannot be combined with lm_head TP (given True; allowed: "
            "false with finegrained_tp_config.lmhead_tensor_parallel_size > 0)",
            "enable_reduce_sample: not supported on a PD prefill node (given True; allowed: "
            "false on a kv_producer node)",
        ], id="reduce"),
    pytest.param(
        {"eplb_config": {"expert_map_path": "/nonexistent/map.json"}},
        {},
        {},
        "problems", [
            "eplb_config.expert_map_path: file not found or not readable (given "
            "'/nonexistent/map.json'; allowed: a readable .json file)",
        ], id="eplb_map"),
    pytest.param(
        {"eplb_config": {"load_collection_phase": "prefill", "num_redundant_experts": 1}},
        {"use_model_runner_v2": True},
        {"EXPERT_MAP_RECORD": "1"},
        "problems", [
            "eplb_config.load_collection_phase: load collection feeds vLLM's EPLB, which is off "
            "(given 'prefill'; allowed: 'all' unless vLLM's --enable-eplb is on)",
            "eplb_config: model runner v2 uses vLLM's --enable-eplb; legacy EPLB fields given "
            "(given 'num_redundant_experts'; allowed: only load_collection_phase)",
            "env EXPERT_MAP_RECORD: model runner v1 control; use vLLM's --enable-eplb (given "
            "'1'; allowed: unset on model runner v2)",
        ], id="eplb_mrv2"),
    pytest.param(
        {"eplb_config": {"load_collection_phase": "all", "dynamic_eplb": True}},
        {"enable_eplb": True},
        {},
        "problems", [
            "eplb_config.load_collection_phase: not used by model runner v1 (given 'all'; "
            "allowed: only with model runner v2)",
            "vllm --enable-eplb: on model runner v1 use eplb_config.dynamic_eplb instead (given "
            "True; allowed: only with model runner v2 (VLLM_USE_V2_MODEL_RUNNER=1))",
            "eplb_config.dynamic_eplb: dynamic EPLB on model runner v1 needs the DYNAMIC_EPLB "
            "switch (given True; allowed: true only with env DYNAMIC_EPLB=true (or "
            "EXPERT_MAP_RECORD=true))",
        ], id="eplb_mrv1"),
    pytest.param(
        {"cpu_binding_config": {"bind_irq": True, "min_cpus_per_npu": 4}},
        {},
        {},
        "problems", [
            "cpu_binding_config.min_cpus_per_npu: 2 IRQ + main + acl + release CPUs (given 4; "
            "allowed: null or an integer >= 5 with bind_irq)",
        ], id="cpu_irq"),
    pytest.param(
        {"cpu_binding_config": {"bind_irq": True}},
        {"soc": "A5"},
        {},
        "warnings", [
            "cpu_binding_config.bind_irq: IRQ binding is not available on A5; it is set to "
            "false",
        ], id="cpu_irq_a5"),
    pytest.param(
        {
            "scheduler_config": {
                "enable_balance_scheduling": True,
                "profiling_chunk_config": {"enabled": True},
            },
        },
        {"max_num_batched_tokens": 2048},
        {},
        "problems", [
            "scheduler_config.profiling_chunk_config.enabled: profiling chunk needs pipeline "
            "parallel (pipeline_parallel_size 1) (given True; allowed: true only with "
            "pipeline_parallel_size > 1)",
            "scheduler_config.profiling_chunk_config.enabled: cannot be combined with "
            "enable_balance_scheduling (given True; allowed: false with balance scheduling)",
        ], id="chunk"),
    pytest.param(
        {"scheduler_config": {"profiling_chunk_config": {"need_timing": True}}},
        {},
        {},
        "warnings", [
            "scheduler_config.profiling_chunk_config.need_timing has no effect while profiling "
            "chunk is disabled; it is set to false",
        ], id="need_timing"),
    pytest.param(
        {
            "scheduler_config": {
                "enable_balance_scheduling": True,
                "short_request_first_config": {"enabled": True},
                "batch_job_sched_config": {"enabled": True},
                "profiling_chunk_config": {"enabled": True},
            },
        },
        {"kv_role": "kv_consumer", "scheduler_policy": "priority", "pipeline_parallel_size": 2},
        {},
        "problems", [
            "scheduler_config.profiling_chunk_config.enabled: cannot be combined with "
            "enable_balance_scheduling (given True; allowed: false with balance scheduling)",
            "scheduler_config.enable_balance_scheduling: balance scheduling does not support "
            "kv_role kv_consumer (given True; allowed: true only without kv transfer or with "
            "kv_both)",
            "scheduler_config.short_request_first_config.enabled: cannot be combined with "
            "batch-job scheduling (given True; allowed: false with "
            "batch_job_sched_config.enabled)",
            "scheduler_config.short_request_first_config.enabled: cannot be combined with "
            "profiling chunk (given True; allowed: false with profiling_chunk_config.enabled)",
            "scheduler_config.short_request_first_config.enabled: not supported on a PD decode "
            "node (given True; allowed: false on a kv_consumer node)",
            "scheduler_config.short_request_first_config.enabled: short-request-first reorders "
            "an fcfs queue; vLLM's scheduling policy is 'priority' (use --scheduling-policy "
            "fcfs) (given True; allowed: true only with vLLM's scheduling policy fcfs)",
        ], id="srf"),
    pytest.param(
        {
            "scheduler_config": {
                "enable_balance_scheduling": True,
                "dyntra_lb_config": {"enabled": True},
                "profiling_chunk_config": {"enabled": True},
            },
        },
        {"nnodes_within_dp": 2, "pipeline_parallel_size": 2},
        {},
        "problems", [
            "scheduler_config.profiling_chunk_config.enabled: cannot be combined with "
            "enable_balance_scheduling (given True; allowed: false with balance scheduling)",
            "scheduler_config.dyntra_lb_config.enabled: cannot be combined with "
            "enable_balance_scheduling (given True; allowed: false with balance scheduling)",
            "scheduler_config.dyntra_lb_config.enabled: DyntraLB runs on PD decode nodes "
            "(kv_role None) (given True; allowed: true only on a kv_consumer node)",
            "scheduler_config.dyntra_lb_config.enabled: needs DP > 1 (data_parallel_size 1) "
            "(given True; allowed: true only with data_parallel_size > 1)",
            "scheduler_config.dyntra_lb_config.enabled: DyntraLB balances DP replicas within "
            "one node; a replica here spans 2 nodes (given True; allowed: true only when each "
            "DP replica runs on one node (nnodes_within_dp 1))",
            "scheduler_config.dyntra_lb_config.enabled: cannot be combined with profiling chunk "
            "(given True; allowed: false with profiling_chunk_config.enabled)",
        ], id="dyntra"),
    pytest.param(
        {"scheduler_config": {"recompute_scheduler_enable": True}},
        {},
        {},
        "problems", [
            "scheduler_config.recompute_scheduler_enable: recompute scheduler needs kv_role "
            "kv_consumer (got None) (given True; allowed: true only on a kv_consumer (PD "
            "decode) node)",
        ], id="recompute_none"),
    pytest.param(
        {"scheduler_config": {"recompute_scheduler_enable": True}},
        {"kv_role": "kv_producer"},
        {},
        "warnings", [
            "scheduler_config.recompute_scheduler_enable: the recompute scheduler runs on "
            "decode nodes only; it is disabled on this kv_producer node",
        ], id="recompute_producer"),
    pytest.param(
        {"dump_config": {"a": 1}, "dump_config_path": "/x.json"},
        {},
        {},
        "problems", [
            "dump_config_path: dump_config and dump_config_path are mutually exclusive (given "
            "'/x.json'; allowed: null when dump_config is given)",
        ], id="dump"),
    pytest.param(
        {"enable_kv_nz": True},
        {},
        {},
        "problems", [
            "enable_kv_nz: KV NZ supports DeepSeek MLA models only (given True; allowed: false "
            "unless the model is DeepSeek MLA without SFA)",
            "enable_kv_nz: only for the decode node of a PD deployment (kv_role None) (given "
            "True; allowed: false unless kv_role is kv_consumer)",
        ], id="kvnz"),
    pytest.param(
        {
            "sparse_kv_offload_config": {"enabled": True, "topk_buffer_size": 100},
            "enable_sparse_sfa_c8": True,
        },
        {
            "index_topk": 2048,
            "has_compress_ratios": True,
            "decode_context_parallel_size": 2,
            "pipeline_parallel_size": 2,
            "use_model_runner_v2": True,
        },
        {},
        "problems", [
            "sparse_kv_offload_config.enabled: compressed-attention models are not supported "
            "(given True; allowed: false for models with compress_ratios)",
            "sparse_kv_offload_config.topk_buffer_size: buffer smaller than top-k (given 100; "
            "allowed: an integer >= index_topk (2048))",
            "sparse_kv_offload_config.enabled: PCP*DCP is 2, must be 1 (given True; allowed: "
            "false with context parallel)",
            "sparse_kv_offload_config.enabled: pipeline_parallel_size is 2, must be 1 (given "
            "True; allowed: false with pipeline parallel)",
            "sparse_kv_offload_config.enabled: model runner v1 only (given True; allowed: false "
            "on model runner v2)",
            "sparse_kv_offload_config.enabled: offload runs on PD decode nodes (kv_role None) "
            "(given True; allowed: true only on a kv_consumer node (or keep_device_kv_cache))",
        ], id="sko_all"),
    pytest.param(
        {"sparse_kv_offload_config": {"enabled": True, "keep_device_kv_cache": True}},
        {},
        {},
        "problems", [
            "sparse_kv_offload_config.enabled: needs an SFA sparse-attention model (given True; "
            "allowed: false for models without index_topk)",
        ], id="sko_notopk"),
    pytest.param(
        {},
        {
            "kv_role": "kv_consumer",
            "kv_connector_extra_config": {"prefill": {"tp_size": 0, "dp_size": 2}, "decode": "x"},
        },
        {},
        "problems", [
            "facts.kv_connector_extra_config.prefill.tp_size: PD parallel sizes must be "
            "positive integers (given 0; allowed: an integer > 0)",
            "facts.kv_connector_extra_config.decode: must be a JSON object (given 'x'; allowed: "
            "a JSON object with tp_size and dp_size)",
        ], id="pd"),
    pytest.param(
        {},
        {
            "kv_role": "kv_producer",
            "kv_connector_extra_config": {
                "prefill": {"tp_size": 3, "dp_size": 2},
                "decode": {"tp_size": 2},
            },
        },
        {},
        "problems", [
            "facts.kv_connector_extra_config.prefill.tp_size: must match the local TP on a "
            "kv_producer (given 3; allowed: 1 (this node's TP size))",
            "facts.kv_connector_extra_config.prefill.dp_size: must match the local DP on a "
            "kv_producer (given 2; allowed: 1 (this node's DP size))",
            "facts.kv_connector_extra_config.prefill.tp_size: PD TP sizes do not divide (given "
            "3; allowed: a multiple of the decode tp_size (2))",
        ], id="pd_local"),
    pytest.param(
        {},
        {
            "kv_role": "kv_both",
            "kv_connector_extra_config": {"prefill": {"tp_size": 4}, "decode": {"tp_size": 2}},
        },
        {},
        "problems", [
            "facts.num_key_value_heads: needed to split KV heads between prefill and decode TP "
            "(given 0; allowed: an integer > 0)",
        ], id="pd_heads"),
    pytest.param(
        {},
        {
            "kv_role": "kv_both",
            "kv_connector": "MooncakeConnectorV1",
            "quant_description": {"enable_c8_quant": True},
            "num_attention_heads": 32,
            "num_key_value_heads": 8,
        },
        {},
        "problems", [
            "facts.kv_connector: producer keeps bf16 KV while the consumer expects int8 (C8, "
            "GQA model) (given 'MooncakeConnectorV1'; allowed: MooncakeLayerwiseConnector with "
            "C8 KV)",
        ], id="mooncake"),
    pytest.param(
        {"rl_config": {"enabled": True, "enable_training_consistency": True}},
        {"use_mla": True},
        {},
        "problems", [
            "rl_config.enable_training_consistency: the FA3 backend does not support MLA/SFA "
            "(given True; allowed: false for MLA and SFA models)",
        ], id="training"),
    pytest.param(
        {"rl_config": {"enabled": True, "enable_batch_invariant": True}, "weight_nz_mode": 2},
        {},
        {"PYTORCH_NPU_ALLOC_CONF": "expandable_segments:True,a:1,b:2"},
        "warnings", [
            "rl_config.enabled sets weight_nz_mode to 0 (was 2)",
        ], id="rl"),
    pytest.param(
        {"enable_sleep_mode_extra_cleanup": True},
        {},
        {},
        "problems", [
            "enable_sleep_mode_extra_cleanup: 'enable_sleep_mode_extra_cleanup' was retired in "
            "v0.26.0rc1: remove it (replaced by rl_config.sleep_mode_extra_cleanup) (given "
            "True; allowed: nothing: remove the key)",
        ], id="retired"),
    pytest.param(
        [1],
        {},
        {},
        "problems", [
            "<additional_config>: additional_config must be a mapping (given [1]; allowed: a "
            "JSON object)",
        ], id="not_mapping"),
    pytest.param(
        {
            "recompute_scheduler_enable": False,
            "enable_balance_scheduling": False,
            "scheduler_config": {"enable_balance_scheduling": True},
        },
        {},
        {},
        "warnings", [
            "top-level 'enable_balance_scheduling' is deprecated and ignored: "
            "scheduler_config.enable_balance_scheduling is set",
            "top-level 'recompute_scheduler_enable' is deprecated; use "
            "scheduler_config.recompute_scheduler_enable",
        ], id="legacy"),
    pytest.param(
        {},
        {},
        {
            "VLLM_ASCEND_ENABLE_NZ": "2",
            "VLLM_ASCEND_BALANCE_SCHEDULING": "1",
            "VLLM_ASCEND_ENABLE_FLASHCOMM1": "1",
        },
        "warnings", [
            "'scheduler_config.enable_balance_scheduling' falls back to environment variable "
            "VLLM_ASCEND_BALANCE_SCHEDULING; this fallback is deprecated and will be removed in "
            "the next release, set 'scheduler_config.enable_balance_scheduling' in "
            "additional_config instead",
            "'weight_nz_mode' falls back to environment variable VLLM_ASCEND_ENABLE_NZ; this "
            "fallback is deprecated and will be removed in the next release, set "
            "'weight_nz_mode' in additional_config instead",
            "FlashComm (enable_flashcomm1 / VLLM_ASCEND_ENABLE_FLASHCOMM1) is deprecated and "
            "has no effect; use vLLM's upstream sequence-parallel configuration",
        ], id="env_fallback"),
    pytest.param(
        {},
        {},
        {"VLLM_ASCEND_ENABLE_NZ": "7"},
        "problems", [
            "env VLLM_ASCEND_ENABLE_NZ: invalid value (given '7'; allowed: 0, 1, 2)",
        ], id="env_bad"),]


@pytest.mark.parametrize(("config", "facts", "env", "kind", "lines"), SCENARIOS)
def test_lines(config: Any, facts: dict[str, Any], env: dict[str, str], kind: str,
               lines: list[str]) -> None:
    if kind == "problems":
        with pytest.raises(AscendConfigError) as info:
            resolve(config, DeploymentFacts(**facts), env)
        assert info.value.lines() == lines
    else:
        assert list(resolve(config, DeploymentFacts(**facts), env).warnings) == lines
