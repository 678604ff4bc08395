"""Synthetic hosts of any size (benchmarks, tests, what-if planning)."""

from __future__ import annotations

from ascend_topology.facts import HostFacts


def make_synthetic_host(
    *,
    npus: int,
    cpus: int,
    numa_nodes: int,
    soc: str = "A2",
    threads_per_core: int = 1,
    running: int | None = None,
) -> HostFacts:
    """A host with ``cpus`` CPUs in ``numa_nodes`` equal nodes and ``npus`` NPUs spread evenly
    over the nodes (each NPU affine to its node's CPUs; for "A5" over the nodes after 0);
    the first ``running`` NPUs (default all) have a process."""
    if npus < 1 or numa_nodes < 1 or cpus < numa_nodes:
        raise ValueError("need npus >= 1, numa_nodes >= 1 and cpus >= numa_nodes")
    per_node = cpus // numa_nodes
    numa = {n: tuple(range(n * per_node, (n + 1) * per_node)) for n in range(numa_nodes)}
    # Ascend 950 keeps NUMA node 0 for UVB poll threads, so its NPUs sit on the other nodes.
    first = 1 if soc == "A5" and numa_nodes > 1 else 0
    spread = numa_nodes - first
    affinity = {i: numa[first + i * spread // npus] for i in range(npus)}
    return HostFacts(
        soc=soc,
        numa=numa,
        allowed_cpus=tuple(range(per_node * numa_nodes)),
        chip_map={i: {0: i} for i in range(npus)},
        running_npus=tuple(range(npus if running is None else running)),
        affinity=affinity,
        threads_per_core=threads_per_core,
        arch="aarch64",
        source=f"synthetic {npus} NPUs / {cpus} CPUs / {numa_nodes} NUMA",
    )
