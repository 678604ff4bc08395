"""The engine's fusion manager, shared by the platform pass manager and the NPU compile backend."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import torch
from ascend_graph import GraphFusionPassManager

from vllm_ascend.engine import norm_quant_gate
from vllm_ascend.ops.attention_kv import attention_op_handles
from vllm_ascend.process.process_setup import current_process_setup

if TYPE_CHECKING:
    from ascend_config import DeploymentFacts
    from ascend_config.schema.sections import AscendCompilationConfig

logger = logging.getLogger(__name__)


def sequence_parallel_ops() -> tuple[Any, Any] | None:
    """vLLM's all-gather and sequence-parallel chunk op handles, when this build has both."""
    import vllm.model_executor.models.utils  # noqa: F401  (registers sequence_parallel_chunk_impl)

    ops = getattr(torch.ops, "vllm", None)
    try:
        return (ops.all_gather.default, ops.sequence_parallel_chunk_impl.default)  # type: ignore[union-attr]
    except (AttributeError, RuntimeError):
        return None


def build_fusion_manager(
    switches: AscendCompilationConfig, soc: str, facts: DeploymentFacts, *,
    sequence_parallel: bool = False, quant_description: Any = None,
    log_decisions: bool = False,
) -> GraphFusionPassManager:
    """ascend-graph's manager for the resolved pass switches and model facts."""
    # vLLM's op handles are passed in (ascend-graph never imports vLLM); the fused attention op is
    # registered here so every process that compiles or loads such a graph has it.
    norm_quant = norm_quant_gate.decide_norm_quant(
        bool(switches.fuse_norm_quant), soc, str(facts.dtype), quant_description)
    if log_decisions:  # one line per distinct decision in this process
        current_process_setup().log_once(norm_quant.reason, norm_quant_gate.logger, logging.INFO)

    scale = facts.routed_scaling_factor if facts.routed_scaling_factor != 1.0 else None
    handles = sequence_parallel_ops() if sequence_parallel else None
    kv_attention = bool(switches.fuse_kv_cache_attention)
    return GraphFusionPassManager(
        on_miss=warn_missed_sites,
        fuse_norm_quant=norm_quant.enabled,
        w4a4=norm_quant.w4a4,
        fuse_qknorm_rope=bool(switches.fuse_qknorm_rope),
        fuse_muls_add=bool(switches.fuse_muls_add),
        muls_add_scale=scale,
        soc=soc,
        sequence_parallel=handles is not None,
        allgather_op=handles[0] if handles else None,
        chunk_op=handles[1] if handles else None,
        fuse_kv_cache_attention=kv_attention,
        attention_ops=attention_op_handles() if kv_attention else None,
    )


def warn_missed_sites(name: str, message: str) -> None:
    """The managers' ``on_miss``: one warning per pass per process, naming where it stopped."""
    setup = current_process_setup()
    key = f"ascend fusion pass {name} missed sites"
    if key not in setup.warned:
        setup.warned.add(key)
        logger.warning("%s", message)
