"""Parallelism sections: fine-grained tensor parallel, expert load balancing, CPU binding."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import field_validator

from ascend_config.schema_base import Bool, Int, PathStr, RequireInt, Section, opt

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
