"""Pure CPU-pool algorithms: global slice, average distribution, NUMA extension, topology
affinity pools and Ascend 950 cluster pools. Each returns pools keyed by logical NPU id."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field

from ascend_topology.cpulist import format_cpu_list

Numa = Mapping[int, Sequence[int]]
CLUSTER_PHYSICAL_CPUS = 8
"""Ascend 950 hosts group CPUs in clusters of 8 cores (16 CPUs with two threads per core)."""


@dataclass
class PoolResult:
    """Pools per NPU, or ``pools=None`` with ``reason`` when the algorithm does not apply."""

    pools: dict[int, list[int]] | None
    reason: str = ""
    uvb_cpus: list[int] = field(default_factory=list)
    groups: list[tuple[list[int], list[int]]] = field(default_factory=list)
    """Topology affinity: (NPUs, shared pool) of each group of NPUs with overlapping CPUs."""


def average_distribute(cpus: Sequence[int], npus: Sequence[int]) -> dict[int, list[int]]:
    """Cut sorted ``cpus`` into ``len(cpus) // len(npus)`` consecutive CPUs per NPU (in id
    order); the last NPU also takes the remainder: 14 CPUs over 3 NPUs -> 4, 4, 6."""
    ordered = sorted(cpus)
    ids = sorted(npus)
    if not ids:
        return {}
    size = len(ordered) // len(ids)
    pools: dict[int, list[int]] = {}
    for i, npu in enumerate(ids):
        end = len(ordered) if i == len(ids) - 1 else (i + 1) * size
        pools[npu] = ordered[i * size : end]
    return pools


def global_slice(
    allowed: Sequence[int], all_npus: Sequence[int], npus: Collection[int]
) -> dict[int, list[int]]:
    """Slice the allowed CPUs evenly over *all* NPUs of the host, in id order.

    The NPU at position i gets ``base + (1 if i < extra else 0)`` CPUs starting at
    ``i * base + min(i, extra)``: 20 CPUs over 4 NPUs -> [0..4] ... [15..19]; 17 over 3 ->
    [0..5], [6..11], [12..16]. Slicing by host-wide position keeps processes that share one
    cpuset (each seeing different NPUs) disjoint. Only ``npus`` are returned.
    """
    cpus = sorted(set(allowed))
    ids = sorted(set(all_npus))
    if not ids:
        return {}
    base, extra = divmod(len(cpus), len(ids))
    pools: dict[int, list[int]] = {}
    for i, npu in enumerate(ids):
        if npu in npus:
            start = i * base + min(i, extra)
            pools[npu] = cpus[start : start + base + (1 if i < extra else 0)]
    return pools


def extend_numa(cpus: Sequence[int], numa: Numa, allowed: Collection[int]) -> list[int]:
    """If all ``cpus`` sit on one NUMA node, add the allowed CPUs of the next node (cyclic in
    node order); CPU lists spanning several nodes (or unknown CPUs) are returned unchanged."""
    node_of = {cpu: node for node, node_cpus in numa.items() for cpu in node_cpus}
    if not cpus or any(cpu not in node_of for cpu in cpus):
        return sorted(set(cpus))
    nodes = {node_of[cpu] for cpu in cpus}
    if len(nodes) != 1:
        return sorted(set(cpus))
    order = sorted(numa)
    (node,) = nodes
    following = order[(order.index(node) + 1) % len(order)]
    allowed_set = set(allowed)
    return sorted(set(cpus) | {c for c in numa[following] if c in allowed_set})


def _candidates(
    affinity: Mapping[int, Sequence[int]], allowed: set[int], targets: Sequence[int]
) -> list[int]:
    # Hidden NPUs whose affinity meets our CPUs are planned too, so that processes sharing a
    # cpuset split it the same way; only the targets' pools are used.
    near = {npu for npu, cpus in affinity.items() if not allowed.isdisjoint(cpus)}
    return sorted(near | set(targets))


def _conflict(npu: int, affinity: Mapping[int, Sequence[int]], allowed: Sequence[int]) -> str:
    if npu not in affinity:
        return f"npu-smi info -t topo gives no CPU affinity for NPU {npu}"
    return (
        f"NPU {npu}'s affine CPUs {format_cpu_list(affinity[npu])} are not among the allowed "
        f"CPUs {format_cpu_list(allowed)} (is OMP_PROC_BIND, taskset or a cpuset pinning "
        "the process?)"
    )


def overlap_groups(base: Mapping[int, Sequence[int]]) -> list[tuple[list[int], set[int]]]:
    """Group NPUs whose CPU lists share a CPU (transitively): [(sorted NPUs, CPUs)], ordered by
    their smallest NPU id. Identical lists, the common case, are merged first for speed."""
    by_list: dict[tuple[int, ...], list[int]] = {}
    for npu in sorted(base):
        by_list.setdefault(tuple(base[npu]), []).append(npu)
    merged: dict[int, tuple[list[int], set[int]]] = {}
    owner: dict[int, int] = {}
    for new_index, (cpus, npus) in enumerate(by_list.items()):
        hits = sorted({owner[c] for c in cpus if c in owner})
        index = hits[0] if hits else new_index
        keep = merged.setdefault(index, ([], set()))
        keep[0].extend(npus)
        keep[1].update(cpus)
        for other in hits[1:]:
            ids, gone = merged.pop(other)
            keep[0].extend(ids)
            keep[1].update(gone)
            owner.update(dict.fromkeys(gone, index))
        owner.update(dict.fromkeys(cpus, index))
    groups = [(sorted(ids), cpus) for ids, cpus in merged.values()]
    return sorted(groups, key=lambda group: group[0][0])


def topo_affinity_pools(
    affinity: Mapping[int, Sequence[int]],
    allowed: Sequence[int],
    numa: Numa,
    targets: Sequence[int],
    min_cpus_per_npu: int,
) -> PoolResult:
    """Pools from each NPU's affine CPUs that the process may use.

    NPUs whose affine CPUs overlap form a group sharing their union; a group with fewer than
    ``len(group) * min_cpus_per_npu`` CPUs is extended by the next NUMA node (CPUs another
    group's affinity claims are left to that group); groups are split by average distribution.
    """
    allowed_set = set(allowed)
    npus = _candidates(affinity, allowed_set, targets)
    base = {n: sorted(allowed_set.intersection(affinity.get(n, ()))) for n in npus}
    for npu in targets:
        if not base[npu]:
            return PoolResult(None, _conflict(npu, affinity, allowed))
    groups = overlap_groups(base)
    claimed = {c for _, cpus in groups for c in cpus}
    pools: dict[int, list[int]] = {}
    shared: list[tuple[list[int], list[int]]] = []
    for ids, cpus in groups:
        pool = sorted(cpus)
        if pool and len(pool) < len(ids) * min_cpus_per_npu:
            extra = [c for c in extend_numa(pool, numa, allowed_set) if c not in claimed]
            claimed.update(extra)
            pool = sorted({*pool, *extra})
        pools.update(average_distribute(pool, ids))  # one NPU: the whole pool
        shared.append((ids, pool))
    return PoolResult({n: pools[n] for n in targets}, groups=shared)


def uvb_pool(numa: Numa, allowed: Collection[int]) -> list[int]:
    """CPUs for Ascend 950 UVB poll threads: allowed CPUs of NUMA node 0 except CPU 0."""
    allowed_set = set(allowed)
    return [c for c in sorted(numa.get(0, ())) if c in allowed_set and c != 0]


def cluster_pools(
    affinity: Mapping[int, Sequence[int]],
    allowed: Sequence[int],
    numa: Numa,
    targets: Sequence[int],
    threads_per_core: int,
) -> PoolResult:
    """Ascend 950: whole CPU clusters on each NPU's NUMA node, NPUs in id order.

    The UVB poll-thread pool is kept out. Example: 4 nodes x 96 CPUs, two threads per core
    (clusters of 16), NPUs 0,1,6,7 on node 3 and 2-5 on node 1 -> NPU0 288-303,
    NPU1 304-319, NPU2 96-111, NPU7 336-351.
    """
    if threads_per_core not in (1, 2):
        return PoolResult(None, f"{threads_per_core} threads per core; 950 clusters need 1 or 2")
    size = CLUSTER_PHYSICAL_CPUS * threads_per_core
    uvb = uvb_pool(numa, allowed)
    allowed_set = set(allowed)
    node_of = {cpu: node for node, cpus in numa.items() for cpu in cpus}
    by_node: dict[int, list[int]] = {}
    for npu in _candidates(affinity, allowed_set, targets):
        nodes = {node_of[c] for c in affinity.get(npu, ()) if c in allowed_set and c in node_of}
        if not nodes:
            return PoolResult(None, _conflict(npu, affinity, allowed))
        if len(nodes) != 1:
            shown = ",".join(str(n) for n in sorted(nodes))
            return PoolResult(None, f"NPU {npu}'s affine CPUs span NUMA nodes {shown}")
        by_node.setdefault(nodes.pop(), []).append(npu)
    uvb_set = set(uvb)
    pools: dict[int, list[int]] = {}
    for node, npus in sorted(by_node.items()):
        cpus = [c for c in sorted(numa[node]) if c in allowed_set and c not in uvb_set]
        clusters = len(cpus) // size
        if clusters < len(npus):
            return PoolResult(
                None,
                f"NUMA node {node} has {clusters} whole clusters of {size} CPUs for "
                f"{len(npus)} NPUs",
            )
        for i, npu in enumerate(sorted(npus)):
            pools[npu] = cpus[i * size : (i + 1) * size]
    return PoolResult({n: pools[n] for n in targets}, uvb_cpus=uvb)
