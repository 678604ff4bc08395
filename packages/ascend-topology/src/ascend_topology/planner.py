"""``plan(facts, options) -> Plan``: the pure planning function."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import replace

from ascend_topology.cpulist import format_cpu_list
from ascend_topology.facts import HostFacts
from ascend_topology.plan_types import NpuPlan, Plan, PlanOptions
from ascend_topology.pools import cluster_pools, global_slice, topo_affinity_pools

_MODE_BY_SOC = {"A2": "topo_affinity", "310P": "topo_affinity", "A3": "global_slice",
                "A5": "cluster_pools"}
# Ascend 950 pools are all main (no IRQ, acl or release CPUs), so 3 CPUs per NPU suffice
# there, as in the original binder; elsewhere 2 IRQ + main + acl + release.
_MIN_CPUS_PER_NPU_BY_SOC = {"A5": 3}
_MIN_CPUS_PER_NPU = 5


def default_min_cpus_per_npu(soc: str) -> int:
    """The ``min_cpus_per_npu`` that ``PlanOptions(min_cpus_per_npu=None)`` means on ``soc``:
    3 on Ascend 950 ("A5"), 5 on every other SoC."""
    return _MIN_CPUS_PER_NPU_BY_SOC.get(soc, _MIN_CPUS_PER_NPU)


def resolve_min_cpus_per_npu(options: PlanOptions, soc: str) -> int:
    """``options.min_cpus_per_npu`` when set, else the SoC default."""
    given = options.min_cpus_per_npu
    return default_min_cpus_per_npu(soc) if given is None else given


def target_npus(facts: HostFacts) -> tuple[list[int], list[str]]:
    """The NPUs this process plans for, in rank order, and notes on how they were chosen.

    Running NPUs (a process in ``npu-smi info``) filtered by the visible devices; when none
    runs yet (planning ahead of start-up), every visible NPU.
    """
    notes: list[str] = []
    known = set(facts.logic_npus)
    visible = facts.visible_devices
    if visible is not None:
        unknown = sorted(set(visible) - known)
        if unknown:
            notes.append(f"visible devices {format_cpu_list(unknown)} are not NPUs of this host")
    running = [n for n in sorted(set(facts.running_npus)) if visible is None or n in visible]
    if running:
        return running, notes
    chosen = sorted(known if visible is None else known & set(visible))
    if chosen:
        notes.append(
            "npu-smi shows no running process on the visible NPUs; planned for all "
            f"{'visible ' if visible is not None else ''}NPUs ({format_cpu_list(chosen)})"
        )
    return chosen, notes


def _majority_node(cpus: Sequence[int], node_of: Mapping[int, int], default: int) -> int:
    counts = Counter(node_of[c] for c in cpus if c in node_of)
    if not counts:
        return default
    best = max(counts.values())
    return min(node for node, count in counts.items() if count == best)


def split_roles(
    pool: Sequence[int], soc: str, bind_irq: bool
) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """(main, acl, release, irq) from a sorted pool.

    Ascend 950: the whole pool is main. Otherwise acl = second-to-last CPU, release = last;
    with IRQ binding the first two CPUs serve the NPU's IRQs and are kept out of main
    (pool [0..4] -> main [2], acl [3], release [4], irq [0, 1]). Pools too small for separate
    roles share CPUs rather than fail (2 CPUs: main [a], acl = release = [b]).
    """
    cpus = tuple(pool)
    if soc == "A5" or not cpus:
        return cpus, (), (), ()
    irq = cpus[:2] if bind_irq else ()
    if len(cpus) >= 5 and bind_irq:
        return cpus[2:-2], cpus[-2:-1], cpus[-1:], irq
    if len(cpus) >= 3:
        return cpus[:-2], cpus[-2:-1], cpus[-1:], irq
    return cpus[:1], cpus[-1:], cpus[-1:], irq


def _pools(
    facts: HostFacts, targets: list[int], min_cpus: int, notes: list[str]
) -> tuple[str, dict[int, list[int]], list[int], list[str]]:
    """(mode, pools, uvb_cpus, problems) by the SoC's policy, falling back to a global slice."""
    allowed = facts.allowed_cpus
    mode = _MODE_BY_SOC[facts.soc]
    if mode != "global_slice" and not facts.affinity:
        notes.append("npu-smi info -t topo gives no CPU affinity; slicing the allowed CPUs")
        mode = "global_slice"
    problems: list[str] = []
    if mode == "cluster_pools":
        result = cluster_pools(facts.affinity, allowed, facts.numa, targets,
                               facts.threads_per_core)
        if result.pools is not None:
            return mode, result.pools, result.uvb_cpus, problems
        notes.append(f"950 cluster pools do not apply ({result.reason}); slicing instead")
        mode = "global_slice"
    if mode == "topo_affinity":
        result = topo_affinity_pools(facts.affinity, allowed, facts.numa, targets, min_cpus)
        if result.pools is not None:
            return mode, result.pools, [], _short_groups(result.groups, targets, facts, min_cpus)
        problems.append(result.reason)
        notes.append("the best valid plan below slices the allowed CPUs instead")
        mode = "global_slice"
    everyone = facts.logic_npus
    pools = global_slice(allowed, everyone, set(targets))
    if len(allowed) < len(everyone) * min_cpus:
        problems.append(
            f"{len(everyone)} NPUs need at least {len(everyone) * min_cpus} "
            f"CPUs ({min_cpus} per NPU); {len(allowed)} are allowed"
        )
    return mode, pools, [], problems


def _short_groups(
    groups: Sequence[tuple[list[int], list[int]]],
    targets: Sequence[int],
    facts: HostFacts,
    min_cpus: int,
) -> list[str]:
    """One problem line per group of NPUs (sharing affine CPUs) too small for the minimum."""
    node_of = facts.node_of()
    wanted = set(targets)
    problems = []
    for npus, pool in groups:
        if wanted.isdisjoint(npus) or len(pool) >= len(npus) * min_cpus:
            continue
        nodes = ",".join(str(n) for n in sorted({node_of[c] for c in pool if c in node_of}))
        who = f"NPU {npus[0]} needs" if len(npus) == 1 else (
            f"{len(npus)} NPUs ({format_cpu_list(npus)}) need")
        problems.append(
            f"{who} at least {len(npus) * min_cpus} CPUs near NUMA node {nodes or '-'} "
            f"({min_cpus} per NPU); {len(pool)} are allowed there"
        )
    return problems


def plan(facts: HostFacts, options: PlanOptions | None = None) -> Plan:
    """Plan CPU pools for the NPUs this process uses (pure: reads nothing, changes nothing).

    A3: global slice; A2/310P: topology affinity with NUMA extension and average distribution;
    Ascend 950: cluster pools plus the UVB poll-thread pool. When a hard rule fails the plan
    carries ``problems`` (with numbers) and the best valid pools found. The plan's
    ``options`` hold the resolved ``min_cpus_per_npu`` (``default_min_cpus_per_npu``).
    """
    options = options or PlanOptions()
    min_cpus = resolve_min_cpus_per_npu(options, facts.soc)
    options = replace(options, min_cpus_per_npu=min_cpus)
    targets, notes = target_npus(facts)

    def make(mode: str, npus: tuple[NpuPlan, ...], problems: list[str], uvb: Sequence[int] = ()
             ) -> Plan:
        return Plan(soc=facts.soc, mode=mode, npus=npus, options=options,
                    numa_nodes=tuple(sorted(facts.numa)), uvb_cpus=tuple(uvb),
                    problems=tuple(problems), notes=tuple(notes), source=facts.source)

    if not facts.allowed_cpus:
        return make("none", (), ["the process may run on no CPU"])
    if not targets:
        return make("none", (), ["no NPU to plan for (npu-smi lists none, or none is visible)"])
    mode, pools, uvb, problems = _pools(facts, targets, min_cpus, notes)
    node_of = facts.node_of()
    default_node = min(facts.numa)
    entries = []
    smallest = min(len(pools.get(n, ())) for n in targets)
    affine_node: dict[tuple[int, ...], int] = {}  # many NPUs share one affinity list
    for npu in targets:
        pool = sorted(pools.get(npu, ()))
        ref = tuple(facts.affinity.get(npu) or pool)
        if ref not in affine_node:
            affine_node[ref] = _majority_node(ref, node_of, default_node)
        node = affine_node[ref]
        on_node = sum(1 for c in pool if node_of.get(c) == node)
        main, acl, release, irq = split_roles(pool, facts.soc, options.bind_irq)
        entries.append(
            NpuPlan(npu=npu, numa_node=node, cpus=tuple(pool), main=main, acl=acl,
                    release=release, irq=irq, quality=on_node / len(pool) if pool else 0.0)
        )
    if smallest == 0:
        empty = [n for n in targets if not pools.get(n)]
        problems.append(
            f"NPU {format_cpu_list(empty)} would get no CPU: {len(facts.allowed_cpus)} allowed "
            f"CPUs cannot give each of {len(facts.logic_npus)} NPUs its own CPU"
        )
    elif smallest < min_cpus:
        notes.append(
            f"the best valid plan gives the smallest pool {smallest} CPUs; set "
            f"min_cpus_per_npu={smallest} (cpu_binding_config / --min-cpus-per-npu) to use it"
        )
    return make(mode, tuple(entries), problems, uvb)
