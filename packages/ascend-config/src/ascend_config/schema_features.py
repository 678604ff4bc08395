"""Feature sections: speculative decoding, rejection sampling, sparse KV offload, RL."""

from __future__ import annotations

from typing import Literal

from ascend_config.schema_base import Bool, Float, Int, JsonObject, Section, opt

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
