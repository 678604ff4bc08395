"""Step 3: reset settings that only work on CUDA GPUs, with one warning per changed setting.

Fields absent from the installed vLLM are skipped, so the table can name settings of
neighbouring vLLM releases.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, MutableMapping
from dataclasses import dataclass
from typing import Any

logger = logging.getLogger("vllm_ascend.config_pipeline.gpu_fixes")

# HCCL's op timeout is 1836 s; vLLM's execute-model timeout must exceed it on NPU.
HCCL_OP_TIMEOUT_S = 1836
NPU_EXECUTE_MODEL_TIMEOUT_S = 3000


@dataclass(frozen=True)
class GpuOnlySetting:
    """``section.field`` of VllmConfig and the value that works on Ascend."""

    section: str
    field: str
    value: Any
    reason: str
    needs_fix: Callable[[Any], bool] | None = None

    def wrong(self, current: Any) -> bool:
        return self.needs_fix(current) if self.needs_fix else current != self.value


GPU_ONLY_SETTINGS: tuple[GpuOnlySetting, ...] = (
    # Cascade attention is a FlashAttention (CUDA) kernel feature: keep it disabled.
    GpuOnlySetting("model_config", "disable_cascade_attn", True, "cascade attention is CUDA-only"),
    GpuOnlySetting("cache_config", "cpu_kvcache_space_bytes", None, "CPU KV-cache sizing"),
    GpuOnlySetting("cache_config", "calculate_kv_scales", False, "dynamic KV scales are CUDA-only"),
    GpuOnlySetting("model_config.multimodal_config", "mm_encoder_attn_backend", None,
                   "GPU encoder attention backends"),
    GpuOnlySetting("observability_config", "enable_layerwise_nvtx_tracing", False,
                   "NVTX is an NVIDIA tool"),
    GpuOnlySetting("scheduler_config", "max_num_partial_prefills", 1,
                   "concurrent partial prefills are not supported"),
    GpuOnlySetting("speculative_config", "quantization", None,
                   "the draft model inherits the main model's quantization"),
    GpuOnlySetting("kv_transfer_config", "kv_buffer_size", 1e9, "fixed Ascend KV buffer"),
    GpuOnlySetting("kv_transfer_config", "enable_permute_local_kv", False, "CUDA-only layout"),
    GpuOnlySetting("attention_config", "use_prefill_decode_attention", False, "CUDA kernel"),
    GpuOnlySetting("attention_config", "use_cudnn_prefill", False, "cuDNN is NVIDIA-only"),
    GpuOnlySetting("attention_config", "use_trtllm_ragged_deepseek_prefill", False, "TRT-LLM"),
    GpuOnlySetting("attention_config", "use_trtllm_attention", False, "TRT-LLM",
                   needs_fix=bool),
    GpuOnlySetting("attention_config", "disable_flashinfer_prefill", False, "FlashInfer"),
    GpuOnlySetting("attention_config", "disable_flashinfer_q_quantization", False, "FlashInfer"),
    GpuOnlySetting("attention_config", "flash_attn_version", None, "FlashAttention version"),
    GpuOnlySetting("attention_config", "backend", None, "Ascend selects its own backend"),
    GpuOnlySetting("attention_config", "flash_attn_max_num_splits_for_cuda_graph", 32,
                   "CUDA-graph FlashAttention splits"),
    GpuOnlySetting("parallel_config", "ray_workers_use_nsight", False, "Nsight is NVIDIA-only"),
    GpuOnlySetting("parallel_config", "numa_bind", False,
                   "use additional_config.enable_cpu_binding on Ascend"),
    GpuOnlySetting("parallel_config", "numa_bind_nodes", None, "replaced by Ascend CPU binding"),
    GpuOnlySetting("parallel_config", "numa_bind_cpus", None, "replaced by Ascend CPU binding"),
    GpuOnlySetting("parallel_config", "enable_dbo", False, "dual-batch overlap is CUDA-only"),
    GpuOnlySetting("parallel_config", "ubatch_size", 0, "micro-batching needs DBO"),
    GpuOnlySetting("compilation_config", "use_inductor_graph_partition", False,
                   "inductor graph partition targets CUDA graphs"),
)


# PassConfig switches whose passes exist only on CUDA/ROCm/XPU builds of vLLM: its
# PostGradPassManager names their classes only there, so one left on is a NameError on CPU
# and NPU. vLLM switches fuse_norm_quant on by itself whenever rms_norm's first IR provider
# is not "native", which the Ascend IR priority makes true, with or without a model.
VLLM_GPU_FUSION_FLAGS = (
    "fuse_norm_quant", "fuse_act_quant", "fuse_attn_quant", "fuse_allreduce_rms",
    "enable_qk_norm_rope_fusion", "fuse_rope_kvcache_cat_mla", "fuse_act_padding",
    "fuse_mla_dual_rms_norm", "fuse_rope_kvcache", "fuse_qk_norm_rope_kvcache",
)


def disable_vllm_gpu_fusions(vllm_config: Any) -> list[str]:
    """Switch vLLM's own GPU-only fusion flags off; returns the names that were on.

    Both pipelines run it, also for a config without a model (the Ascend fusion passes are
    switched by ``ascend_compilation_config`` instead)."""
    pass_config = vllm_config.compilation_config.pass_config
    turned_off = []
    for flag in VLLM_GPU_FUSION_FLAGS:
        if getattr(pass_config, flag, False):
            turned_off.append(flag)
        if hasattr(pass_config, flag):
            setattr(pass_config, flag, False)
    return turned_off


def _section(vllm_config: Any, path: str) -> Any:
    obj = vllm_config
    for part in path.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            return None
    return obj


def fix_gpu_only_settings(
    vllm_config: Any, settings: tuple[GpuOnlySetting, ...] = GPU_ONLY_SETTINGS
) -> list[str]:
    """Reset every wrong GPU-only setting; returns the warnings logged (one per change)."""
    warnings = []
    for setting in settings:
        section = _section(vllm_config, setting.section)
        if section is None or not hasattr(section, setting.field):
            continue
        current = getattr(section, setting.field)
        if not setting.wrong(current):
            continue
        setattr(section, setting.field, setting.value)
        msg = (f"{setting.section}.{setting.field}={current!r} is not supported on Ascend "
               f"({setting.reason}); using {setting.value!r}")
        logger.warning("%s", msg)
        warnings.append(msg)
    return warnings


def fix_execute_model_timeout(environ: MutableMapping[str, str] | None = None) -> str | None:
    """Raise vLLM's execute-model timeout above HCCL's op timeout (NPU only)."""
    env = os.environ if environ is None else environ
    try:
        current = int(env.get("VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS", "300"))
    except ValueError:
        return None
    if current >= HCCL_OP_TIMEOUT_S:
        return None
    env["VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS"] = str(NPU_EXECUTE_MODEL_TIMEOUT_S)
    msg = (f"VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS={current} is below HCCL's op timeout "
           f"({HCCL_OP_TIMEOUT_S} s); using {NPU_EXECUTE_MODEL_TIMEOUT_S}")
    logger.warning("%s", msg)
    return msg


def use_hccl_eplb_communicator(vllm_config: Any) -> str | None:
    """With vLLM's EPLB on, move expert weights over the device group ("torch_nccl", which
    is HCCL on Ascend); returns the warning when the setting changed."""
    par = vllm_config.parallel_config
    eplb = getattr(par, "eplb_config", None)
    if not getattr(par, "enable_eplb", False) or eplb is None:
        return None
    if eplb.communicator == "torch_nccl":
        return None
    msg = (f"parallel_config.eplb_config.communicator={eplb.communicator!r} -> 'torch_nccl' "
           "(HCCL moves the expert weights on Ascend)")
    eplb.communicator = "torch_nccl"
    logger.warning("%s", msg)
    return msg
