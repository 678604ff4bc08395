"""Pools for the ranks of one host: every local rank of a host without NPUs (the host-CPU
platform), and the one NPU a worker drives on an Ascend host.

A *rank host* is a synthetic host with one device per local rank. Device ``r`` is affine to
the allowed CPUs of the NUMA node it is spread onto (ranks fill nodes in order, as evenly as
the counts allow), so the ordinary topology-affinity planner gives each rank a disjoint,
NUMA-local pool. Example, 2 nodes of CPUs ``0-3`` and ``4-7``, 4 ranks:
rank 0 ``0-1``, rank 1 ``2-3``, rank 2 ``4-5``, rank 3 ``6-7``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from ascend_topology.errors import PlanError, TopologyError
from ascend_topology.facts import HostFacts
from ascend_topology.plan_types import Plan, PlanOptions
from ascend_topology.planner import plan
from ascend_topology.system import read_allowed_cpus, read_numa_sysfs

RANK_HOST_SOC = "A2"
"""Planned like an A2 host: topology affinity, so pools stay on their NUMA node."""

RANK_OPTIONS = PlanOptions(min_cpus_per_npu=1, bind_irq=False, migrate_memory=False)
"""A rank needs one CPU at least; it has no IRQs, and memory stays where the OS put it."""


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise PlanError(message)


def make_rank_host(
    ranks: int,
    allowed_cpus: Sequence[int],
    numa: Mapping[int, Sequence[int]],
    *,
    threads_per_core: int = 1,
) -> HostFacts:
    """A host of ``ranks`` devices over the NUMA nodes that hold allowed CPUs.

    Rank ``r`` sits on node ``nodes[r * len(nodes) // ranks]``: 4 ranks on 2 nodes -> 0, 0,
    1, 1; 3 ranks on 2 nodes -> 0, 0, 1; 1 rank on 2 nodes -> 0. CPUs that ``numa`` does not
    list are treated as one extra node after the others. Raises ``PlanError`` for ``ranks`` < 1
    or no allowed CPU.
    """
    _require(isinstance(ranks, int) and not isinstance(ranks, bool) and ranks >= 1,
             f"ranks must be an integer >= 1; got {ranks!r}")
    allowed = sorted(set(allowed_cpus))
    _require(bool(allowed), "the process may run on no CPU: nothing to plan ranks on")
    allowed_set = set(allowed)
    layout = {node: tuple(sorted(set(cpus))) for node, cpus in sorted(numa.items()) if cpus}
    listed = {cpu for cpus in layout.values() for cpu in cpus}
    unlisted = tuple(cpu for cpu in allowed if cpu not in listed)
    if unlisted:
        layout[max(layout, default=-1) + 1] = unlisted
    nodes = [node for node, cpus in layout.items() if allowed_set.intersection(cpus)]
    affinity = {
        rank: tuple(c for c in layout[nodes[rank * len(nodes) // ranks]] if c in allowed_set)
        for rank in range(ranks)
    }
    try:
        return HostFacts(
            soc=RANK_HOST_SOC,
            numa=layout,
            allowed_cpus=tuple(allowed),
            chip_map={rank: {0: rank} for rank in range(ranks)},
            running_npus=tuple(range(ranks)),
            affinity=affinity,
            threads_per_core=threads_per_core,
            arch="host",
            source=f"{ranks} local ranks on CPUs of NUMA nodes "
            + ",".join(str(n) for n in nodes),
        )
    except TopologyError as exc:
        raise PlanError(f"cannot describe {ranks} ranks on this host: {exc}") from None


def _whole_pool_is_main(result: Plan) -> Plan:
    # A rank of the host-CPU platform has no acl/release threads: all its CPUs run its work.
    npus = tuple(dataclasses.replace(p, main=p.cpus, acl=(), release=(), irq=())
                 for p in result.npus)
    return dataclasses.replace(result, npus=npus)


def plan_rank_pools(
    ranks: int,
    allowed_cpus: Sequence[int] | None = None,
    numa: Mapping[int, Sequence[int]] | None = None,
    *,
    threads_per_core: int = 1,
) -> Plan:
    """One pool per local rank (``plan.npus[r]`` is rank ``r``'s; each pool is all ``main``).

    ``allowed_cpus`` and ``numa`` default to this process's allowed CPUs and the sysfs NUMA
    layout (one node of every allowed CPU when sysfs shows none). When there are fewer CPUs
    than ranks the plan is not ``ok`` and ``problems`` says so. Raises ``PlanError`` (a
    ``TopologyError``) for invalid arguments or when the host cannot be read.
    """
    allowed = read_allowed_cpus() if allowed_cpus is None else list(allowed_cpus)
    layout = read_numa_sysfs() if numa is None else numa
    facts = make_rank_host(ranks, allowed, layout, threads_per_core=threads_per_core)
    return _whole_pool_is_main(plan(facts, RANK_OPTIONS))


def plan_for_npu(facts: HostFacts, npu: int, options: PlanOptions) -> tuple[Plan, int]:
    """The plan that covers logical NPU ``npu`` and that NPU's index in ``plan.npus``.

    A worker binds before its NPU shows a process in ``npu-smi info``; planning only for the
    NPUs already running would leave it out, so ``npu`` counts as running. Raises
    ``PlanError`` when ``npu`` is not an NPU of the host or is hidden by the visible devices.
    """
    _require(npu in facts.logic_npus,
             f"NPU {npu} is not an NPU of this host (NPUs: "
             f"{','.join(str(n) for n in facts.logic_npus) or 'none'})")
    visible = facts.visible_devices
    _require(visible is None or npu in visible,
             f"NPU {npu} is not among the visible devices "
             f"{','.join(str(n) for n in visible or ())}")
    running = tuple(sorted({*facts.running_npus, npu}))
    result = plan(dataclasses.replace(facts, running_npus=running), options)
    indexes = [i for i, entry in enumerate(result.npus) if entry.npu == npu]
    _require(bool(indexes), f"the plan has no pool for NPU {npu}: {result.reason}")
    return result, indexes[0]
