"""The scheduler section and its nested policies."""

from __future__ import annotations

from typing import Literal

from pydantic import ValidationInfo, field_validator

from ascend_config.schema_base import Bool, Float, Int, Section, opt, sub

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
