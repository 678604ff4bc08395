"""The top level of ``additional_config`` (canonical keys, legacy spellings) and its JSON
Schema (what ``ascend-config schema`` prints).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field
from pydantic.config import JsonDict

from ascend_config.schema.base import (
    Bool,
    Int,
    JsonObject,
    PathStr,
    RequireInt,
    Section,
    opt,
    sub,
)
from ascend_config.schema.retired import RETIRED
from ascend_config.schema.sections import (
    AscendCompilationConfig,
    AscendFusionConfig,
    BatchJobSchedConfig,
    CpuBindingConfig,
    DynamicSpecConfig,
    EplbConfig,
    FinegrainedTPConfig,
    ProfilingChunkConfig,
    RejectionSamplerConfig,
    RlConfig,
    SchedulerConfig,
    ShortRequestFirstConfig,
    SparseKVOffloadConfig,
    XliteGraphConfig,
)

DEFAULT_LOG_PATH = "~/ascend/log/vllm_ascend"

class TopLevelOptions(Section):
    """The canonical top-level keys (shared by the input schema and the resolved config)."""

    xlite_graph_config: XliteGraphConfig = sub(XliteGraphConfig, "xlite graph mode")
    ascend_compilation_config: AscendCompilationConfig = sub(
        AscendCompilationConfig, "graph compilation and fusion-pass switches")
    ascend_fusion_config: AscendFusionConfig = sub(AscendFusionConfig, "fused-operator switches")
    finegrained_tp_config: FinegrainedTPConfig = sub(
        FinegrainedTPConfig, "fine-grained tensor parallel sizes")
    dynamic_spec_config: DynamicSpecConfig = sub(DynamicSpecConfig, "dynamic speculation")
    eplb_config: EplbConfig = sub(EplbConfig, "expert-parallel load balancing")
    scheduler_config: SchedulerConfig = sub(SchedulerConfig, "Ascend scheduler options")
    dump_config_path: PathStr | None = opt(
        None, "msprobe dump config file to use (not with dump_config)",
        allowed="null or a path string")
    dump_config: JsonObject | None = opt(
        None, "msprobe dump config, written to <cwd>/.vllm_ascend/msprobe/"
        "msprobe_dump_config.json (not with dump_config_path)", allowed="null or a JSON object")
    ascend_log_path: PathStr = opt(
        DEFAULT_LOG_PATH, "directory of the Ascend log files (~ expanded)",
        allowed="a path string")
    enable_shared_expert_dp: Bool = opt(
        False, "shared experts in DP (effective only with expert parallel and TP > 1)")
    multistream_overlap_shared_expert: Bool = opt(
        False, "overlap shared experts on a second stream (forced off with fused MC2)")
    enable_cpu_binding: Bool = opt(True, "bind worker threads to CPUs near their NPU")
    cpu_binding_config: CpuBindingConfig = sub(CpuBindingConfig, "CPU binding options")
    multistream_dsv4_dsa_overlap: Bool = opt(True, "DeepSeek-V4 DSA multistream overlap")
    enable_prefill_mc2: Bool = opt(
        False, "MC2 capacity from max_num_batched_tokens (prefill may use MC2)")
    enable_fused_mc2: Annotated[Literal[0, 1], RequireInt] = opt(
        0, "1 allows dispatch_ffn_combine / mega_moe (not MiniMaxM3; forced 0 when MegaMoE is "
        "installed but the model does not fit it)", env="VLLM_ASCEND_ENABLE_FUSED_MC2",
        allowed="0 or 1")
    enable_mlapo: Bool = opt(True, "MLAPO for DeepSeek W8A8", env="VLLM_ASCEND_ENABLE_MLAPO")
    msmonitor_use_daemon: Bool = opt(False, "msMonitor daemon mode", env="MSMONITOR_USE_DAEMON")
    enable_transpose_kv_cache_by_block: Bool = opt(
        True, "fused transpose-kv-cache op",
        env="VLLM_ASCEND_FUSION_OP_TRANSPOSE_KV_CACHE_BY_BLOCK")
    pa_shape_list: tuple[Int, ...] = opt(
        (), "shapes for which the legacy paged-attention kernel is preferred",
        allowed="a list of integers")
    weight_nz_mode: Annotated[Literal[0, 1, 2], RequireInt] = opt(
        1, "weight NZ layout: 0 off, 1 quantized weights only, 2 also BF16/FP16 (forced 0 by "
        "rl_config.enabled and batch invariance)", env="VLLM_ASCEND_ENABLE_NZ",
        allowed="0, 1 or 2")
    enable_kv_nz: Bool = opt(
        False, "NZ KV cache (DeepSeek MLA, not SFA, decode node of a PD deployment)")
    enable_sparse_sfa_c8: Bool = opt(False, "SFA C8 (effective only for SFA sparse models)")
    enable_sparse_li_c8: Bool = opt(
        False, "lightning-indexer C8 (effective only for SFA sparse models)")
    c8_enable_reshape_optim: Bool = opt(
        False, "C8 reshape optimisation (effective only with enable_sparse_li_c8)")
    enable_mc2_hierarchy_comm: Bool = opt(
        False, "hierarchical MC2 (A2/A3, <= 512 experts incl. redundant, not with fused MC2)")
    mega_moe_max_tokens: Int = opt(131072, "MegaMoE token limit", gt=0)
    enable_reduce_sample: Bool = opt(
        False, "experimental reduced sampling (not with lm_head TP, not on kv_producer)")
    mix_placement: Bool = opt(
        False, "mixed expert placement (not with shared-expert DP or multistream overlap)")
    rejection_sampler_config: RejectionSamplerConfig = sub(
        RejectionSamplerConfig, "rejection sampler variants")
    sparse_kv_offload_config: SparseKVOffloadConfig = sub(
        SparseKVOffloadConfig, "sparse KV offload")
    rl_config: RlConfig = sub(RlConfig, "reinforcement-learning rollout defaults")
    refresh: Bool = opt(False, "rebuild the config on every init (forced by rl_config.enabled)")
    enable_dsa_cp: Bool = opt(False, "DSA context parallel (models with index_topk)")
    draft_window_size: Int | None = opt(
        None, "draft window of the spec-decode proposer", allowed="null or an integer > 0", gt=0)


def _legacy(description: str) -> JsonDict:
    return {"deprecated": True, "replacement": description}


class AdditionalConfig(TopLevelOptions):
    """The input schema: canonical keys plus accepted legacy spellings (each warns once)."""

    enable_balance_scheduling: Bool | None = Field(
        None, description="legacy spelling of scheduler_config.enable_balance_scheduling",
        json_schema_extra=_legacy("scheduler_config.enable_balance_scheduling"))
    recompute_scheduler_enable: Bool | None = Field(
        None, description="legacy spelling of scheduler_config.recompute_scheduler_enable",
        json_schema_extra=_legacy("scheduler_config.recompute_scheduler_enable"))
    short_request_first_config: ShortRequestFirstConfig | None = Field(
        None, description="legacy spelling of scheduler_config.short_request_first_config",
        json_schema_extra=_legacy("scheduler_config.short_request_first_config"))
    profiling_chunk_config: ProfilingChunkConfig | None = Field(
        None, description="legacy spelling of scheduler_config.profiling_chunk_config",
        json_schema_extra=_legacy("scheduler_config.profiling_chunk_config"))
    batch_job_sched_config: BatchJobSchedConfig | None = Field(
        None, description="legacy spelling of scheduler_config.batch_job_sched_config",
        json_schema_extra=_legacy("scheduler_config.batch_job_sched_config"))
    enable_flashcomm1: Bool | None = Field(
        None, description="deprecated: FlashComm uses upstream configuration (only warns)",
        json_schema_extra=_legacy("vLLM's upstream sequence-parallel configuration"))


def json_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of the accepted ``additional_config`` object."""
    schema = AdditionalConfig.model_json_schema(mode="validation")
    schema["title"] = "vLLM Ascend additional_config"
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["x-retired-keys"] = {
        r.name: {"retired_in": r.version, "replacement": r.replacement} for r in RETIRED.values()}
    return schema
