"""The sections of ``additional_config``: compilation, features, parallelism, scheduler."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import ValidationInfo, field_validator

from ascend_config.schema.base import (
    Bool,
    Float,
    Int,
    JsonObject,
    PathStr,
    RequireInt,
    Section,
    opt,
    sub,
)

COMPILATION_PASS_SWITCHES = (
    "fuse_norm_quant", "fuse_qknorm_rope", "fuse_muls_add", "fuse_kv_cache_attention",
)


class AscendCompilationConfig(Section):
    """Graph-mode compilation switches (fusion passes, npugraph_ex, static kernel, compiles after
    ready)."""

    enable_npugraph_ex: Bool = opt(
        True, "compile graphs with the NPU graph extension (forced off on 310P and in eager mode)")
    enable_static_kernel: Bool = opt(
        False, "static kernels; needs enable_npugraph_ex (forced off on 310P and in eager mode)")
    fuse_norm_quant: Bool = opt(True, "fusion pass: AddRMSNorm + quantize into one op")
    fuse_qknorm_rope: Bool = opt(True, "fusion pass: q/k RMSNorm + RoPE into one op")
    fuse_muls_add: Bool = opt(True, "fusion pass: x * scale + y into one muls_add op")
    fuse_kv_cache_attention: Bool = opt(
        True, "fusion pass: an attention layer's KV-cache write and attention in one op call")
    forbid_compile_after_ready: Bool = opt(
        False, "refuse a compile after the engine is ready: the Dynamo compile is not run, the "
        "function runs uncompiled from then on and the request is answered (one error line per "
        "cause); a pass-manager run or graph capture after ready is an error (off: each is "
        "counted in the rank report and logged once per cause)")

    def pass_switches(self) -> dict[str, bool]:
        """The fusion-pass switches as keyword arguments for the pass manager."""
        return {name: bool(getattr(self, name)) for name in COMPILATION_PASS_SWITCHES}


class AscendFusionConfig(Section):
    """Fused-operator switches used by model code."""

    fusion_ops_gmmswigluquant: Bool = opt(True, "fused grouped-matmul + SwiGLU + quantize op")


class XliteGraphConfig(Section):
    """Xlite graph mode (decode graphs run by the xlite worker)."""

    enabled: Bool = opt(False, "run decode through xlite graphs (selects the xlite worker)")
    full_mode: Bool = opt(
        False, "xlite full mode: without spec decode the engine runs eager with xlite graphs")


def compilation_defaults() -> dict[str, bool]:
    """Default fusion-pass switches: ``{"fuse_norm_quant": True, ...}``."""
    return AscendCompilationConfig().pass_switches()


RL_KEYS = ("enabled", "sleep_mode_extra_cleanup", "enable_training_consistency",
           "enable_batch_invariant")


class DynamicSpecConfig(Section):
    """Dynamic speculative decoding."""

    method: Literal["dspark", "dflash"] | None = opt(
        None, "dynamic speculation method", allowed="null, 'dspark' or 'dflash'")
    method_params: JsonObject = opt(
        {}, "parameters passed to the method (a JSON object)", allowed="a JSON object")


class RejectionSamplerConfig(Section):
    """Speculative-decoding rejection sampler variants."""

    enable_block_verify: Bool = opt(False, "block verification")
    enable_entropy_verify: Bool = opt(False, "entropy verification")
    posterior_threshold: Float = opt(0.95, "posterior acceptance threshold", gt=0, le=1)
    posterior_alpha: Float = opt(0.4, "posterior smoothing alpha", ge=0)


class SparseKVOffloadConfig(Section):
    """Offload the KV cache of SFA sparse-attention models to host DRAM (decode nodes)."""

    enabled: Bool = opt(False, "turn sparse KV offload on (SFA models, kv_consumer)")
    topk_buffer_size: Int = opt(
        4096, "device buffer of top-k KV entries; must be >= the model's index_topk", gt=0)
    dram_size_per_dp_GB: Int = opt(128, "host DRAM (GB) per DP rank for offloaded KV", gt=0)
    keep_device_kv_cache: Bool = opt(
        False, "also keep the device KV cache (debug only; lifts the kv_consumer requirement)")


class RlConfig(Section):
    """Reinforcement-learning rollout defaults (all off by default)."""

    enabled: Bool = opt(
        False, "RL rollout: weight NZ off, expandable segments off, server dev mode on, "
        "config rebuilt on every init")
    sleep_mode_extra_cleanup: Bool = opt(False, "extra cleanup when entering sleep mode")
    enable_training_consistency: Bool = opt(
        False, "FA3 attention backend for training-consistent logits (not MLA/SFA)")
    enable_batch_invariant: Bool = opt(
        False, "batch-invariant kernels (sets VLLM_BATCH_INVARIANT=1, deterministic HCCL)")


EPLB_STAGES = ("all", "prefill", "decode")
EPLB_LEGACY_FIELDS = (
    "dynamic_eplb", "expert_map_path", "expert_heat_collection_interval",
    "algorithm_execution_interval", "expert_map_record_path", "num_redundant_experts",
    "eplb_policy_type", "eplb_heat_collection_stage",
)


class FinegrainedTPConfig(Section):
    """Per-module tensor-parallel sizes inside a DP group (0 = off). MoE models only."""

    oproj_tensor_parallel_size: Int = opt(
        0, "o_proj TP size; needs TP 1, graph mode, a decode (kv_consumer) node and the "
        "recompute scheduler", ge=0)
    lmhead_tensor_parallel_size: Int = opt(0, "lm_head TP size", ge=0)
    embedding_tensor_parallel_size: Int = opt(
        0, "embedding TP size; needs the recompute scheduler", ge=0)
    mlp_tensor_parallel_size: Int = opt(0, "dense MLP TP size", ge=0)
    olora_tensor_parallel_size: Int = opt(
        0, "o_proj LoRA TP size; needs graph mode and a decode (kv_consumer) node", ge=0)

    def enabled_sizes(self) -> dict[str, int]:
        """The sizes that are switched on (> 0), by key."""
        return {k: int(v) for k, v in self.model_dump().items() if v > 0}


def _json_path(value: str | None) -> str | None:
    if value is not None and not value.endswith(".json"):
        raise ValueError("must be a path ending in .json")
    return value


class EplbConfig(Section):
    """Expert-parallel load balancing (model runner v1 fields; v2 only load_collection_phase)."""

    dynamic_eplb: Bool = opt(
        False, "rebalance experts at run time (MRV1; needs env DYNAMIC_EPLB=true or "
        "EXPERT_MAP_RECORD=true)")
    expert_map_path: PathStr | None = opt(
        None, "static expert map to load (a readable .json file)", allowed="null or a .json path")
    expert_heat_collection_interval: Int = opt(600, "steps between expert-heat samples", ge=0)
    algorithm_execution_interval: Int = opt(50, "steps between rebalancing runs", ge=0)
    expert_map_record_path: PathStr | None = opt(
        None, "where to record the expert map (.json); implies dynamic_eplb",
        allowed="null or a .json path")
    num_redundant_experts: Int = opt(0, "redundant expert replicas", ge=0)
    eplb_policy_type: Annotated[Literal[0, 1, 2, 3], RequireInt] = opt(
        2, "rebalancing policy", allowed="0, 1, 2 or 3")
    eplb_heat_collection_stage: Literal["all", "prefill", "decode"] = opt(
        "all", "which stage's expert heat is collected")
    load_collection_phase: Literal["all", "prefill", "decode"] = opt(
        "all", "model runner v2 only: which phase's load is collected (not 'all' needs vLLM's "
        "--enable-eplb)")

    _check_map = field_validator("expert_map_path", "expert_map_record_path")(_json_path)


class CpuBindingConfig(Section):
    """Options for binding worker threads to CPUs near their NPU (ascend-topology)."""

    min_cpus_per_npu: Int | None = opt(
        None, "fewest CPUs an NPU's pool may have; null = the SoC's default, chosen by "
        "ascend-topology's planner: 3 on A5/950 (main CPUs only: no IRQ, acl or release "
        "reservation there), 5 on other SoCs (2 IRQ + main + acl + release); an integer is "
        "used as given (at least 5 with bind_irq)", ge=3, le=1024)
    bind_irq: Bool = opt(
        False, "pin the NPU's IRQs to the pool's first two CPUs (writes /proc/irq; opt-in; not "
        "available on A5, where it is set to false with a warning)")
    migrate_memory: Bool = opt(True, "migrate the process's memory to the pool's NUMA node")


LEGACY_SCHEDULER_KEYS = (
    "enable_balance_scheduling", "recompute_scheduler_enable", "short_request_first_config",
    "profiling_chunk_config", "batch_job_sched_config",
)


class ShortRequestFirstConfig(Section):
    """Schedule short requests first (fcfs policy, not on decode nodes)."""

    enabled: Bool = opt(False, "turn the policy on")
    threshold: Int = opt(256, "prompt length (tokens) at or below which a request is short", ge=0)
    long_max_wait_ms: Float = opt(
        0.0, "longest wait (ms) before a long request is scheduled anyway", ge=0)


class ProfilingChunkConfig(Section):
    """Chunk sizes fitted from profiled step times (needs pipeline parallel > 1)."""

    enabled: Bool = opt(False, "turn profiling-based chunking on")
    smooth_factor: Float = opt(1.0, "smoothing of the fitted chunk size", gt=0, le=1)
    min_chunk: Int = opt(
        4096, "smallest chunk (clamped to max_num_batched_tokens with a warning)", gt=0)
    need_timing: Bool | None = opt(
        None, "collect step timings (default: same as enabled; forced off when disabled)",
        allowed="true, false or null")
    max_fit_chunk: Int = opt(
        30, "data points used for the fit (recommend at least 30)", gt=5)


class BatchJobSchedConfig(Section):
    """Batch-job aware scheduling."""

    enabled: Bool = opt(False, "turn batch-job scheduling on")
    max_jobs: Int = opt(20, "concurrent batch jobs (0 = unlimited)", ge=0)
    reserve_margin_blocks: Int = opt(2, "KV blocks kept in reserve per job", ge=0)
    reserve_max_blocks: Int = opt(8, "most KV blocks reserved per job", gt=0)
    low_available_tokens_threshold: Int = opt(
        4096, "available tokens below which batch jobs are throttled", gt=0)
    short_decode_token_threshold: Int = opt(
        32, "decode length (tokens) counted as short", gt=0)


class DyntraLBConfig(Section):
    """Dynamic load balancing across DP ranks on decode nodes."""

    enabled: Bool = opt(False, "turn DyntraLB on (decode node, DP > 1)")
    enable_diagnostics: Bool = opt(False, "log balancing diagnostics")
    mode: Literal["static", "dynamic"] = opt("dynamic", "balancing mode")
    start_step: Int = opt(250, "first step that balances", ge=0)
    end_step: Int = opt(
        -1, "last step that balances (-1 = never stop)", allowed="-1 or an integer > start_step")
    bubble_threshold: Float = opt(5.0, "pipeline-bubble threshold", gt=0)
    long_req_block_threshold: Int = opt(700, "KV blocks above which a request is long", gt=0)
    dynamic_max_step: Int = opt(256, "most steps of a dynamic balancing window", gt=0)

    @field_validator("end_step")
    @classmethod
    def _end_after_start(cls, value: int, info: ValidationInfo) -> int:
        start = info.data.get("start_step")
        if value != -1 and (value < 0 or (isinstance(start, int) and value <= start)):
            raise ValueError(f"must be -1 or greater than start_step ({start})")
        return value


class SchedulerConfig(Section):
    """Ascend scheduler options (additional_config.scheduler_config)."""

    enable_balance_scheduling: Bool | None = opt(
        None, "balance scheduling (not with a producer/consumer kv role); null = env fallback",
        env="VLLM_ASCEND_BALANCE_SCHEDULING", allowed="true, false or null")
    recompute_scheduler_enable: Bool = opt(
        False, "recompute scheduler for PD-disaggregated decode nodes (kv_consumer)")
    short_request_first_config: ShortRequestFirstConfig = sub(
        ShortRequestFirstConfig, "short-request-first policy")
    profiling_chunk_config: ProfilingChunkConfig = sub(
        ProfilingChunkConfig, "profiling-based chunk sizes")
    batch_job_sched_config: BatchJobSchedConfig = sub(
        BatchJobSchedConfig, "batch-job aware scheduling")
    dyntra_lb_config: DyntraLBConfig = sub(DyntraLBConfig, "DyntraLB load balancing")
