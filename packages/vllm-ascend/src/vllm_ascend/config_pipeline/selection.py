"""Step 5 (NPU platform): worker and scheduler classes, chosen in one explicit decision.

At most one scheduling policy may be active; the classes come from the
``vllm_ascend.runtime`` / ``vllm_ascend.schedulers`` entry points of installed runtime
packages. Nothing is chosen by the order of assignments.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# Worker entry points (group ``vllm_ascend.runtime``) by kind, and the reference plugin's class
# each stands for (its ``_setup_worker_and_scheduler``; 310P wins over xlite).
WORKER_ENTRIES: dict[str, tuple[str, str]] = {
    "310p": ("worker_310p", "vllm_ascend._310p.worker_310p.NPUWorker310"),
    "xlite": ("worker_xlite", "vllm_ascend.xlite.xlite_worker.XliteWorker"),
    "npu": ("worker", "vllm_ascend.worker.worker.NPUWorker"),
}


def worker_kind(soc: str, xlite: bool) -> str:
    """Which worker the SoC and the xlite switch need: ``310p``, ``xlite`` or ``npu``."""
    if soc == "310P":
        return "310p"
    return "xlite" if xlite else "npu"


@dataclass(frozen=True)
class Selection:
    worker_cls: str
    scheduler_cls: str | None
    reason: str


def scheduler_policy(ascend_config: Any, kv_role: str | None) -> list[str]:
    """The scheduling policies the resolved config turns on (recompute only on decode nodes)."""
    sched = ascend_config.scheduler_config
    on = []
    if sched.recompute_scheduler_enable and kv_role == "kv_consumer":
        on.append("recompute")
    if sched.dyntra_lb_config.enabled:
        on.append("dyntra_lb")
    if sched.profiling_chunk_config.enabled:
        on.append("profiling_chunk")
    if sched.batch_job_sched_config.enabled:
        on.append("batch_job")
    if sched.short_request_first_config.enabled:
        on.append("short_request_first")
    return on


def scheduler_key(policies: list[str], async_scheduling: bool) -> str | None:
    """Entry-point name of the scheduler for the active policies (None = vLLM's default)."""
    if not policies:
        return None
    if set(policies) == {"recompute", "dyntra_lb"}:
        key = "dyntra_lb_recompute"
    elif len(policies) == 1:
        key = policies[0]
    else:
        raise ValueError(
            f"scheduling policies {policies} cannot be combined; enable one of them "
            "(recompute and dyntra_lb may be combined)"
        )
    if key == "profiling_chunk":  # no async variant
        return key
    return f"async_{key}" if async_scheduling else key


def select_worker_and_scheduler(
    *, worker_setting: str, soc: str, xlite: bool, ascend_config: Any, kv_role: str | None,
    async_scheduling: bool, runtime: Mapping[str, str], schedulers: Mapping[str, str],
) -> Selection:
    """One decision for both classes; a missing provider is an error naming what to install."""
    kind = worker_kind(soc, xlite)
    entry, reference = WORKER_ENTRIES[kind]
    if worker_setting != "auto":
        worker, why = worker_setting, "worker_cls set by the user"
    elif entry in runtime:
        worker, why = runtime[entry], f"{entry} for {soc}" + (" (xlite)" if xlite else "")
    else:
        label = {"310p": "the 310P worker", "xlite": "the Xlite worker (xlite_graph_config"
                 ".enabled)", "npu": "the NPU worker"}[kind]
        raise RuntimeError(
            f"no installed package provides {label}: install the Ascend runtime extension that "
            f"declares the entry point group 'vllm_ascend.runtime' with name {entry!r} (the "
            f"reference plugin's {reference}), or set VLLM_ASCEND_DEVICE=cpu"
        )
    key = scheduler_key(scheduler_policy(ascend_config, kv_role), async_scheduling)
    if key is None:
        return Selection(worker, None, why)
    if key not in schedulers:
        raise RuntimeError(
            f"the Ascend config enables the {key!r} scheduler but no installed package "
            f"provides it (entry point group 'vllm_ascend.schedulers', name {key!r})"
        )
    return Selection(worker, schedulers[key], f"{why}; scheduler {key}")
