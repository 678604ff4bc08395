"""The one resolution of an engine's Ascend config (facts, ``additional_config``, Ascend env)."""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

import ascend_config
from ascend_config import DeploymentFacts

from vllm_ascend.base.config_channel import published_inputs

if TYPE_CHECKING:
    from ascend_config import AscendConfig
    from vllm.config import ModelConfig, VllmConfig


def is_moe_config(hf_config_dict: Mapping[str, Any]) -> bool:
    """MoE models have some config key mentioning experts (at any nesting depth)."""
    for key, value in hf_config_dict.items():
        if "expert" in str(key):
            return True
        if isinstance(value, Mapping) and is_moe_config(value):
            return True
    return False


def _first(obj: Any, *names: str, default: Any = 0) -> Any:
    for name in names:
        value = getattr(obj, name, None)
        if value is not None:
            return value
    return default


def _model_facts(model_config: ModelConfig | None) -> dict[str, Any]:
    if model_config is None:
        return {}
    hf = model_config.hf_text_config
    as_dict = hf.to_dict() if hasattr(hf, "to_dict") else dict(vars(hf))
    quant_cfg = getattr(model_config.hf_config, "quantization_config", None)
    dtype = str(model_config.dtype).removeprefix("torch.")
    return {
        "model_type": str(getattr(hf, "model_type", "") or ""),
        "architectures": tuple(model_config.architectures or ()),
        "is_moe": is_moe_config(as_dict),
        "num_experts": int(_first(hf, "n_routed_experts", "num_experts", "num_local_experts")),
        "num_experts_per_tok": int(_first(hf, "num_experts_per_tok", "top_k_experts")),
        "moe_intermediate_size": int(_first(hf, "moe_intermediate_size")),
        "routed_scaling_factor": float(_first(hf, "routed_scaling_factor", default=1.0)),
        "use_mla": bool(getattr(model_config, "use_mla", False)),
        "index_topk": getattr(hf, "index_topk", None),
        "has_compress_ratios": getattr(hf, "compress_ratios", None) is not None,
        "num_attention_heads": int(_first(hf, "num_attention_heads")),
        "num_key_value_heads": int(model_config.get_total_num_kv_heads()),
        "head_dim": int(model_config.get_head_size()),
        "hidden_size": int(_first(hf, "hidden_size")),
        "dtype": dtype,
        "quantization": model_config.quantization,
        "quant_description": dict(quant_cfg) if isinstance(quant_cfg, Mapping) else None,
        "enforce_eager": bool(model_config.enforce_eager),
    }


def extract_facts(vllm_config: VllmConfig, soc: str) -> DeploymentFacts:
    """Facts from a VllmConfig for SoC ``soc`` (pure: reads, never writes the config)."""
    par = vllm_config.parallel_config
    sched = vllm_config.scheduler_config
    kv = vllm_config.kv_transfer_config
    spec = vllm_config.speculative_config
    facts: dict[str, Any] = {
        "soc": soc,
        "tensor_parallel_size": par.tensor_parallel_size,
        "data_parallel_size": par.data_parallel_size,
        "pipeline_parallel_size": par.pipeline_parallel_size,
        "prefill_context_parallel_size": getattr(par, "prefill_context_parallel_size", 1),
        "decode_context_parallel_size": getattr(par, "decode_context_parallel_size", 1),
        "enable_expert_parallel": bool(par.enable_expert_parallel),
        "max_num_seqs": int(sched.max_num_seqs or 256),
        "max_num_batched_tokens": int(sched.max_num_batched_tokens or 8192),
        "block_size": int(vllm_config.cache_config.block_size or 128),
        "use_model_runner_v2": bool(getattr(vllm_config, "use_v2_model_runner", False)),
        "megamoe_available": _findable("cann_ops_transformer"),
        "sequence_parallel": bool(getattr(par, "use_sequence_parallel_moe", False)),
        "scheduler_policy": str(getattr(sched, "policy", "fcfs")),
        "nnodes_within_dp": int(getattr(par, "nnodes_within_dp", 1) or 1),
        "enable_eplb": bool(getattr(par, "enable_eplb", False)),
        **_model_facts(vllm_config.model_config),
    }
    if kv is not None:
        facts["kv_role"] = kv.kv_role
        facts["kv_connector"] = kv.kv_connector
        facts["kv_connector_extra_config"] = dict(kv.kv_connector_extra_config or {})
    if spec is not None:
        facts["speculative_method"] = spec.method
        facts["num_speculative_tokens"] = int(spec.num_speculative_tokens or 0)
    return DeploymentFacts(**facts)


def _findable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def additional_config_of(vllm_config: VllmConfig) -> dict[str, Any]:
    """A copy of vLLM's ``additional_config`` (so resolution can never mutate it)."""
    raw = getattr(vllm_config, "additional_config", None) or {}
    if not isinstance(raw, Mapping):
        raise ValueError(f"additional_config must be a JSON object, got {type(raw).__name__}")
    return dict(raw)


def resolve_ascend_config(additional_config: Mapping[str, Any], facts: DeploymentFacts,
                          environ: Mapping[str, str]) -> AscendConfig:
    """The resolved config (``AscendConfigError`` lists every problem at once)."""
    return ascend_config.resolve(dict(additional_config), facts=facts, environ=environ)


class Published(NamedTuple):
    """What the config-creating process published, resolved."""

    soc: str
    config: AscendConfig
    facts: DeploymentFacts


def resolve_published(environ: Mapping[str, str] | None = None) -> Published | None:
    """The published inputs resolved, or None (WorkerInputsError/OSError/AscendConfigError)."""
    data = published_inputs(environ)
    if data is None:
        return None
    facts = DeploymentFacts.from_mapping(data["facts"])
    return Published(data["soc"], resolve_ascend_config(data["additional_config"], facts,
                                                        data["environ"]), facts)
