"""Step 2b (NPU platform): parallel-layout rules that need vLLM's view of the deployment.

Pure: :func:`parallel_problems` returns every problem (empty when the layout is valid) and
:func:`check_parallel_layout` raises one ValueError listing them all.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from vllm_ascend.config_pipeline.draft_rules import DraftFacts, draft_of, draft_problems

PRODUCER_ROLES = ("kv_producer", "kv_both")
CONSUMER_ROLES = ("kv_consumer", "kv_both")
# HCCL serves vLLM's "torch_nccl" device group; gloo stages through the CPU.
EPLB_COMMUNICATORS = (None, "torch_nccl", "torch_gloo")


@dataclass(frozen=True)
class LayoutFacts:
    """Values the rules read beyond DeploymentFacts."""

    use_mrv2: bool = False
    sequence_parallel_moe: bool = False
    cp_kv_cache_interleave_size: int = 1
    kv_extra_config: Mapping[str, Any] = field(default_factory=dict)
    kv_load_failure_policy: str = "fail"
    is_hybrid: bool = False
    eplb_use_async: bool = False
    eplb_communicator: str | None = None
    draft: DraftFacts | None = None


def parallel_problems(facts: Any, layout: LayoutFacts) -> list[str]:
    """Every violated layout rule (the existing plugin's
    _validate_draft_decode_context_parallel_config,
    _validate_parallel_config, _validate_sfa_dcp_kv_sp, check_kv_extra_config, the kv load
    failure policy and vLLM's EPLB), one message each naming the setting and what is allowed."""
    problems = draft_problems(facts.decode_context_parallel_size, layout.draft)
    tp, dp = facts.tensor_parallel_size, facts.data_parallel_size
    pcp, dcp = facts.prefill_context_parallel_size, facts.decode_context_parallel_size
    if pcp > 1 and not layout.use_mrv2:
        problems.append(f"prefill_context_parallel_size={pcp} needs model runner v2 "
                        "(VLLM_USE_V2_MODEL_RUNNER=1)")
    if facts.uses_sfa and dcp > 1:
        if dcp != tp:
            problems.append(f"SFA with decode_context_parallel_size={dcp} needs it equal to "
                            f"tensor_parallel_size={tp}")
        if facts.soc == "A5":
            problems.append("SFA with decode context parallel is not implemented on A5")
    if facts.kv_connector is not None and pcp * dcp > 1 and (
        facts.block_size != layout.cp_kv_cache_interleave_size
    ):
        problems.append(f"with KV transfer and context parallel, block_size={facts.block_size} "
                        f"must equal cp_kv_cache_interleave_size="
                        f"{layout.cp_kv_cache_interleave_size}")
    if layout.sequence_parallel_moe:
        if tp <= 1:
            problems.append("sequence-parallel MoE needs tensor_parallel_size > 1")
        if facts.is_moe and not facts.enable_expert_parallel:
            problems.append("sequence-parallel MoE on a MoE model needs enable_expert_parallel")
    for role_set, section in ((PRODUCER_ROLES, "prefill"), (CONSUMER_ROLES, "decode")):
        part = layout.kv_extra_config.get(section)
        if facts.kv_role not in role_set or not isinstance(part, Mapping):
            continue
        for key, local in (("tp_size", tp), ("dp_size", dp)):
            if key in part and int(part[key]) != local:
                problems.append(f"kv_connector_extra_config.{section}.{key}={part[key]} must "
                                f"equal this instance's {key.split('_')[0].upper()}={local}")
    if layout.kv_load_failure_policy == "recompute" and layout.is_hybrid:
        problems.append("kv_transfer_config.kv_load_failure_policy='recompute' is not supported "
                        "for hybrid (attention + mamba) models; use 'fail'")
    if layout.use_mrv2 and facts.enable_eplb:
        if layout.eplb_use_async:
            problems.append("eplb_config.use_async=True is not supported on Ascend; set "
                            "use_async to false")
        if layout.eplb_communicator not in EPLB_COMMUNICATORS:
            problems.append(f"eplb_config.communicator={layout.eplb_communicator!r} is not "
                            f"available on Ascend; allowed: {list(EPLB_COMMUNICATORS)}")
    return problems


def layout_of(vllm_config: Any) -> LayoutFacts:
    par = vllm_config.parallel_config
    kv = vllm_config.kv_transfer_config
    model = vllm_config.model_config
    eplb = getattr(par, "eplb_config", None)
    return LayoutFacts(
        use_mrv2=bool(getattr(vllm_config, "use_v2_model_runner", False)),
        sequence_parallel_moe=bool(getattr(par, "use_sequence_parallel_moe", False)),
        cp_kv_cache_interleave_size=int(getattr(par, "cp_kv_cache_interleave_size", 1) or 1),
        kv_extra_config=dict(kv.kv_connector_extra_config or {}) if kv is not None else {},
        kv_load_failure_policy=str(getattr(kv, "kv_load_failure_policy", "fail")),
        is_hybrid=bool(model is not None and model.is_hybrid),
        eplb_use_async=bool(getattr(eplb, "use_async", False)),
        eplb_communicator=getattr(eplb, "communicator", None),
        draft=draft_of(vllm_config),
    )


def check_parallel_layout(facts: Any, layout: LayoutFacts) -> None:
    problems = parallel_problems(facts, layout)
    if problems:
        raise ValueError("invalid parallel layout for Ascend:\n  " + "\n  ".join(problems))
