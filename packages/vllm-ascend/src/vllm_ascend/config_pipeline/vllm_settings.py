"""The vLLM settings Ascend corrects before anything is built on them (both pipelines)."""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import Callable, MutableMapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vllm_ascend.quantization.description import DESCRIPTION_FILE

logger = logging.getLogger(__name__)

# --- quantization: ModelSlim checkpoints ----------------------------------------------------------
#
# A ModelSlim export ships ``quant_model_description.json`` beside its weights but often no
# ``quantization_config`` in ``config.json``, so vLLM would load its int8 weights as a float
# model. When no method was chosen and a local model directory holds that file, the method
# becomes "ascend" and vLLM's quantization config is rebuilt (VllmConfig derived it before the
# platform hook ran).

ASCEND_QUANT_METHOD = "ascend"


def detect_ascend_quantization(vllm_config: Any) -> bool:
    """Select "ascend" for a local ModelSlim checkpoint; True when it changed the config."""
    from vllm.config import VllmConfig

    model_config = vllm_config.model_config
    if model_config is None or model_config.quantization is not None:
        return False
    description = Path(str(model_config.model)) / DESCRIPTION_FILE
    if not description.is_file():
        return False
    model_config.quantization = ASCEND_QUANT_METHOD
    vllm_config.quant_config = VllmConfig._get_quantization_config(
        model_config, vllm_config.load_config
    )
    logger.info("quantization: %s found, using the %r method", description, ASCEND_QUANT_METHOD)
    return True


# --- settings that only work on CUDA GPUs ---------------------------------------------------------
#
# Fields absent from the installed vLLM are skipped, so the table can name settings of
# neighbouring vLLM releases.

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


def use_hccl_eplb_communicator(vllm_config: Any) -> str | None:
    """With EPLB on, move expert weights over the device group (HCCL); the warning if changed."""
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


# --- the kv-transfer engine id (NPU only) ---------------------------------------------------------
#
# PD deployments often start every instance from the same ``--kv-transfer-config`` JSON, so a
# user-given ``engine_id`` would be shared; the Ascend connectors need one id per engine. A
# ``-<uuid4 hex>`` suffix is appended once per KVTransferConfig object: the id it produced is
# recorded on that object, so running the pipeline again on the same (or a copied) config never
# appends a second suffix.

_MARK = "_ascend_suffixed_engine_id"


def suffixed_engine_id(engine_id: str, suffix: str | None = None) -> str:
    """``engine_id`` + ``-`` + 32 lowercase hex digits (a fresh uuid4 unless given)."""
    return f"{engine_id}-{suffix or uuid.uuid4().hex}"


def make_engine_id_unique(vllm_config: Any) -> str | None:
    """Append the suffix to the kv-transfer ``engine_id`` once; the new id, or None."""
    kv = vllm_config.kv_transfer_config
    if kv is None or kv.engine_id is None:
        return None
    if getattr(kv, _MARK, None) == kv.engine_id:
        return None
    new_id = suffixed_engine_id(str(kv.engine_id))
    logger.info("kv_transfer_config.engine_id %r -> %r (unique per engine)", kv.engine_id, new_id)
    kv.engine_id = new_id
    setattr(kv, _MARK, new_id)
    return new_id


# --- vLLM's execute-model timeout (NPU only) ------------------------------------------------------

# HCCL's op timeout is 1836 s; vLLM's execute-model timeout must exceed it on NPU.
HCCL_OP_TIMEOUT_S = 1836
NPU_EXECUTE_MODEL_TIMEOUT_S = 3000


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
