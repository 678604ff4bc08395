"""``apply(plan, rank)``: bind a process and its named threads to the plan's CPUs.

Never raises: every failure becomes a line in ``ApplyReport.skipped``. The process's own
thread is bound first, so when that fails nothing has been changed.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ascend_topology.cpulist import format_cpu_list
from ascend_topology.errors import TopologyError
from ascend_topology.irq import bind_npu_irqs
from ascend_topology.live import read_live_host
from ascend_topology.plan_types import NpuPlan, Plan, PlanOptions
from ascend_topology.planner import plan as make_plan
from ascend_topology.system import PROC_ROOT, find_threads_named, read_thread_names, run_command

ACL_THREAD = "acl_thread"
RELEASE_THREAD = "release_thread"
UVB_THREAD = "uvb_poll_window_thread"


@dataclass
class ApplyReport:
    """What ``apply`` did (``done``) and what it did not do and why (``skipped``)."""

    rank: int
    pid: int
    npu: int | None = None
    plan: Plan | None = None
    bound: bool = False
    done: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)

    def lines(self) -> list[str]:
        """Human lines: done first, then skipped (prefixed ``skipped:``)."""
        return [*self.done, *(f"skipped: {s}" for s in self.skipped)]

    def __str__(self) -> str:
        return "\n".join(self.lines())


def _bind_threads(
    pid: int, pool: NpuPlan, proc_root: Path, report: ApplyReport
) -> None:
    names = read_thread_names(pid, proc_root)
    roles = {ACL_THREAD: pool.acl, RELEASE_THREAD: pool.release}
    counts = {"main": 0, ACL_THREAD: 0, RELEASE_THREAD: 0}
    # The process's own thread first: if it cannot be bound nothing else is touched.
    for tid in sorted(names, key=lambda t: t != pid):
        cpus = roles.get(names[tid]) or pool.main
        role = names[tid] if roles.get(names[tid]) else "main"
        try:
            os.sched_setaffinity(tid, cpus)
        except ProcessLookupError:
            continue  # the thread ended meanwhile
        except OSError as exc:
            if tid == pid:
                report.skipped.append(
                    f"process {pid}: cannot set CPU affinity to {format_cpu_list(cpus)} "
                    f"({exc.strerror}); it keeps its current affinity"
                )
                return
            report.skipped.append(f"thread {tid} ({names[tid]}): {exc.strerror}")
            continue
        counts[role] += 1
    report.bound = True
    report.done.append(
        f"process {pid}: {counts['main']} threads -> main CPUs {format_cpu_list(pool.main)}"
    )
    for role, cpus in roles.items():
        if counts[role]:
            report.done.append(f"{counts[role]} {role} -> CPUs {format_cpu_list(cpus)}")
        elif cpus:
            report.skipped.append(f"no thread named {role} in process {pid} (yet)")


def _bind_uvb(plan: Plan, proc_root: Path, report: ApplyReport) -> None:
    if not plan.uvb_cpus:
        report.skipped.append("UVB poll threads: no CPU of NUMA node 0 (except CPU 0) allowed")
        return
    tids = find_threads_named(UVB_THREAD, proc_root)
    if not tids:
        report.skipped.append(
            f"no {UVB_THREAD} thread visible (in Docker, start the container with --pid=host)"
        )
        return
    bound = []
    for tid in tids:
        try:
            os.sched_setaffinity(tid, plan.uvb_cpus)
            bound.append(tid)
        except OSError as exc:
            report.skipped.append(f"{UVB_THREAD} {tid}: {exc.strerror} (Docker: --pid=host?)")
    if bound:
        report.done.append(
            f"{UVB_THREAD} {format_cpu_list(bound)} -> CPUs {format_cpu_list(plan.uvb_cpus)}"
        )


def _migrate(plan: Plan, pool: NpuPlan, pid: int, report: ApplyReport) -> None:
    if shutil.which("migratepages") is None:
        report.skipped.append("memory migration: migratepages is not installed (numactl)")
        return
    nodes = ",".join(str(n) for n in plan.numa_nodes) or str(pool.numa_node)
    try:
        run_command(["migratepages", str(pid), nodes, str(pool.numa_node)], timeout=120)
    except TopologyError as exc:
        report.skipped.append(f"memory migration: {exc}")
        return
    report.done.append(f"process {pid}: memory migrated to NUMA node {pool.numa_node}")


def apply(
    plan: Plan,
    rank: int,
    *,
    pid: int | None = None,
    stop_irqbalance: bool = False,
    proc_root: Path = PROC_ROOT,
    irq_binder: Callable[..., tuple[list[str], list[str]]] = bind_npu_irqs,
) -> ApplyReport:
    """Bind process ``pid`` (default: this one) to ``plan``'s pool for local ``rank``.

    All threads get the main CPUs, then ``acl_thread``/``release_thread`` their own CPU
    (Ascend 950: UVB poll threads get the UVB pool); memory is migrated when the plan asks
    and ``migratepages`` exists; IRQs are bound only with ``options.bind_irq`` and irqbalance
    is stopped only with ``stop_irqbalance=True``. Never raises.
    """
    report = ApplyReport(rank=rank, pid=os.getpid() if pid is None else pid, plan=plan)
    try:
        if not plan.ok:
            report.skipped.append(f"binding skipped: {plan.reason}")
            return report
        pool = plan.for_rank(rank)
        report.npu = pool.npu
        _bind_threads(report.pid, pool, proc_root, report)
        if not report.bound:
            return report
        if plan.soc == "A5":
            _bind_uvb(plan, proc_root, report)
        if plan.options.migrate_memory:
            _migrate(plan, pool, report.pid, report)
        if plan.options.bind_irq:
            done, skipped = irq_binder(pool, plan.soc, stop_irqbalance=stop_irqbalance)
            report.done += done
            report.skipped += skipped
    except TopologyError as exc:
        report.skipped.append(f"binding skipped: {exc}")
    except Exception as exc:  # apply must never take the server down
        report.skipped.append(f"binding skipped after an unexpected error: {exc!r}")
    return report


def bind_worker(
    rank: int,
    options: PlanOptions | None = None,
    *,
    soc: str | None = None,
    environ: Mapping[str, str] | None = None,
    pid: int | None = None,
) -> ApplyReport:
    """Read the live host, plan and apply for local ``rank`` in one call that never raises.

    Why nothing was bound (no npu-smi, too few CPUs, ...) is in ``report.skipped``;
    ``report.plan`` holds the plan when one was made (``report.plan.explain()`` prints it).
    """
    try:
        facts = read_live_host(soc=soc, environ=environ)
        result = make_plan(facts, options or PlanOptions())
    except TopologyError as exc:
        report = ApplyReport(rank=rank, pid=os.getpid() if pid is None else pid)
        report.skipped.append(f"binding skipped: {exc}")
        return report
    except Exception as exc:  # never take the worker down
        report = ApplyReport(rank=rank, pid=os.getpid() if pid is None else pid)
        report.skipped.append(f"binding skipped after an unexpected error: {exc!r}")
        return report
    return apply(result, rank, pid=pid)
