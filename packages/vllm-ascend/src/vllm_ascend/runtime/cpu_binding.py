"""CPU binding of an NPU worker through ascend-topology (never fatal)."""

from __future__ import annotations

import logging
from typing import Any

logger = logging.getLogger("vllm_ascend.runtime.cpu_binding")


def bind_worker_cpus(ascend_config: Any, soc: str, rank: int) -> list[str]:
    """Bind this worker to the CPUs planned for its NPU; returns the report lines.

    Skipped with one info line on the host-CPU platform or when disabled; any failure to
    read the host or apply the plan becomes one warning and the process keeps its affinity.
    """
    if soc == "cpu":
        msg = "CPU binding skipped: the host-CPU platform has no NPUs to bind to"
        logger.info("%s", msg)
        return [msg]
    if not getattr(ascend_config, "enable_cpu_binding", False):
        return ["CPU binding disabled by additional_config.enable_cpu_binding"]
    try:
        import ascend_topology as topo

        opts = ascend_config.cpu_binding_config
        plan = topo.plan(
            topo.read_live_host(),
            topo.PlanOptions(
                min_cpus_per_npu=opts.min_cpus_per_npu,
                bind_irq=opts.bind_irq,
                migrate_memory=opts.migrate_memory,
            ),
        )
        report = topo.apply(plan, rank)
    except Exception as exc:  # binding must never take a worker down
        msg = f"CPU binding skipped: {exc}"
        logger.warning("%s", msg)
        return [msg]
    for line in report.skipped:
        logger.warning("CPU binding: %s", line)
    return [*report.done, *report.skipped]
