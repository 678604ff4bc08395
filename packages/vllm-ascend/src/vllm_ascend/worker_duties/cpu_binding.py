"""CPU binding of one worker process by its rank (never fatal)."""
# NPU platform: planned from the live host; host-CPU platform: the pool the engine handed to vLLM's
# CPU workers. The engine core and API server never bind.

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from vllm_ascend.base.config_channel import OMP_BIND_ENV, RANK_PLAN_ENV

if TYPE_CHECKING:
    import ascend_topology
    from ascend_config import AscendConfig
    from vllm.config import ParallelConfig

logger = logging.getLogger(__name__)

VISIBLE_DEVICES_ENV = "ASCEND_RT_VISIBLE_DEVICES"


def local_rank_count(parallel_config: ParallelConfig) -> int:
    """Worker processes on this host: local DP ranks x (PP x TP) local ranks."""
    local_world = int(getattr(parallel_config, "local_world_size", 0) or 0) or int(
        parallel_config.world_size)
    return local_world * max(1, int(getattr(parallel_config, "data_parallel_size_local", 1) or 1))


def host_rank(parallel_config: ParallelConfig, local_rank: int) -> int:
    """This worker's index among the host's workers (vLLM's ``VLLM_CPU_OMP_THREADS_BIND`` order)."""
    local_world = int(getattr(parallel_config, "local_world_size", 0) or 0) or int(
        parallel_config.world_size)
    dp_local = int(getattr(parallel_config, "data_parallel_rank_local", 0) or 0)
    return dp_local * local_world + local_rank


def worker_npu(parallel_config: ParallelConfig, local_rank: int,
               environ: Mapping[str, str] | None = None) -> int:
    """The NPU this worker drives: vLLM's assignment, else the ``local_rank``-th visible one."""
    assigned = getattr(parallel_config, "assigned_physical_gpu_ids", None)
    if assigned:
        return int(assigned[local_rank])
    env = os.environ if environ is None else environ
    visible = [p.strip() for p in env.get(VISIBLE_DEVICES_ENV, "").split(",") if p.strip()]
    if visible:
        return int(visible[local_rank])
    return local_rank


class SocCrossCheck(Protocol):
    """Warns once when npu-smi's reading of the chips disagrees with the SoC in force."""

    def __call__(self, soc: str, npu_smi_soc: str) -> str | None: ...


@dataclass
class WorkerBinding:
    """What binding did here: the plan, this worker's entry (None: unbound) and report lines."""

    local_rank: int
    plan: ascend_topology.Plan | None = None
    soc: str | None = None
    index: int | None = None
    lines: list[str] = field(default_factory=list)
    npu: int | None = None

    @property
    def cpus(self) -> tuple[int, ...]:
        """The main CPUs this worker was bound to (empty when unbound)."""
        if self.plan is None or self.index is None:
            return ()
        return tuple(self.plan.npus[self.index].main)

    @property
    def planned_pool(self) -> tuple[int, ...]:
        """The CPUs the plan gives this worker's NPU, bound or not."""
        if self.plan is None:
            return ()
        if self.npu is None:
            return tuple(self.plan.npus[self.index].cpus) if self.index is not None else ()
        return next((tuple(e.cpus) for e in self.plan.npus if e.npu == self.npu), ())

    def bind_late_threads(self) -> list[str]:
        """Bind late threads to their role's CPUs (none on the host CPU); never raises."""
        # On the host CPU vLLM pinned each OpenMP thread to one CPU; setting the whole pool would
        # undo it.
        if self.plan is None or self.index is None or self.soc == "cpu":
            return []
        import ascend_topology as topo

        report = topo.apply(self.plan, self.index)
        lines = [*report.done, *report.skipped]
        for line in report.skipped:
            logger.warning("CPU binding (late threads): %s", line)
        self.lines += lines
        return lines


def _apply(binding: WorkerBinding, label: str) -> WorkerBinding:
    import ascend_topology as topo

    assert binding.plan is not None
    report = topo.apply(binding.plan, binding.index if binding.index is not None else 0)
    if report.bound:
        logger.info("CPU binding of %s: %s", label, "; ".join(report.done))
    else:
        binding.index = None
    for line in report.skipped:
        logger.warning("CPU binding of %s: %s", label, line)
    binding.lines += [*report.done, *report.skipped]
    return binding


def bind_npu_worker(local_rank: int, options: ascend_topology.PlanOptions, soc: str,
                    cross_check: SocCrossCheck, *, npu: int | None = None,
                    environ: Mapping[str, str] | None = None) -> WorkerBinding:
    """Bind this NPU worker to NPU ``npu``'s pool planned from the live host; never raises."""
    import ascend_topology as topo
    from ascend_topology.rank_hosts import plan_for_npu

    device = local_rank if npu is None else npu
    binding = WorkerBinding(local_rank=local_rank, soc=soc, npu=device)
    try:
        facts = topo.read_live_host(environ=environ)  # the SoC as npu-smi reads it
        mismatch = cross_check(soc, facts.soc)
        if mismatch is not None:
            binding.lines.append(mismatch)
            facts = topo.read_live_host(soc=soc, environ=environ)
        binding.plan, binding.index = plan_for_npu(facts, device, options)
    except Exception as exc:  # binding must never take a worker down
        msg = f"CPU binding skipped: {exc}"
        logger.warning("%s", msg)
        binding.lines.append(msg)
        return binding
    return _apply(binding, f"local rank {local_rank} (NPU {device}, {soc})")


def handed_rank_plan(environ: Mapping[str, str] | None = None) -> ascend_topology.Plan | None:
    """The host-CPU per-rank plan vLLM's CPU workers were given, else None."""
    import json

    import ascend_topology as topo

    env = os.environ if environ is None else environ
    text = env.get(RANK_PLAN_ENV)
    if not text:
        return None
    try:
        data = json.loads(text)
        if env.get(OMP_BIND_ENV) != data["omp"]:
            return None
        return topo.Plan.from_dict(data["plan"])
    except (ValueError, KeyError, TypeError, topo.TopologyError):
        return None


def bind_host_cpu_worker(rank: int, environ: Mapping[str, str] | None = None) -> WorkerBinding:
    """Bind host rank ``rank`` and its torch threads to its pool of the handed plan, if any."""
    binding = WorkerBinding(local_rank=rank, soc="cpu")
    plan = handed_rank_plan(environ)
    if plan is None:
        binding.lines.append("CPU binding left to vLLM: no plan of this plugin was handed to "
                             "the CPU workers")
        return binding
    if not 0 <= rank < len(plan.npus):
        binding.lines.append(f"CPU binding skipped: host rank {rank} is outside the plan of "
                             f"{len(plan.npus)} ranks")
        logger.warning("%s", binding.lines[-1])
        return binding
    binding.plan, binding.index = plan, rank
    _apply(binding, f"host rank {rank}")
    if binding.index is not None:
        import torch

        # The OpenMP runtime of a Ray actor started with one thread; vLLM's CPU worker forbids
        # changing the count after its own setup, so it is set here, before.
        torch.set_num_threads(len(binding.cpus))
    return binding


def bind_this_worker(parallel_config: ParallelConfig, local_rank: int, soc: str | None,
                     config: AscendConfig, cross_check: SocCrossCheck,
                     environ: Mapping[str, str] | None = None, *,
                     npu: int | None = None) -> WorkerBinding:
    """Bind this worker process by its rank for ``soc`` and its engine's ``config``; never
    raises."""
    if not config.enable_cpu_binding:
        return WorkerBinding(local_rank, soc=soc, lines=[
            "CPU binding disabled by additional_config.enable_cpu_binding"])
    if soc is None:
        return WorkerBinding(local_rank, lines=["CPU binding skipped: the SoC is unknown"])
    if soc == "cpu":
        return bind_host_cpu_worker(host_rank(parallel_config, local_rank), environ)
    import ascend_topology as topo

    opts = config.cpu_binding_config
    options = topo.PlanOptions(min_cpus_per_npu=opts.min_cpus_per_npu, bind_irq=opts.bind_irq,
                               migrate_memory=opts.migrate_memory)
    return bind_npu_worker(local_rank, options, soc, cross_check,
                           npu=worker_npu(parallel_config, local_rank, environ) if npu is None
                           else npu, environ=environ)
