"""``make_synthetic_host``: synthetic hosts of every SoC, their layout and limits, their plans."""

from __future__ import annotations

import pytest
from ascend_topology import make_synthetic_host, plan


def test_synthetic_hosts_plan_cleanly() -> None:
    facts = make_synthetic_host(npus=16, cpus=640, numa_nodes=8)
    result = plan(facts)
    assert result.ok and len(result.npus) == 16
    assert result.npus[0].cpus == tuple(range(40)) and result.npus[1].cpus == tuple(range(40, 80))
    a5 = plan(make_synthetic_host(npus=16, cpus=640, numa_nodes=8, soc="A5", threads_per_core=2))
    assert a5.ok and a5.mode == "cluster_pools" and a5.uvb_cpus == tuple(range(1, 80))


def test_synthetic_host_layout() -> None:
    # 11 CPUs over 2 nodes: 5 per node (CPU 10 is dropped); 3 NPUs spread as i * 2 // 3:
    # NPUs 0 and 1 on node 0, NPU 2 on node 1.
    facts = make_synthetic_host(npus=3, cpus=11, numa_nodes=2, running=2)
    assert facts.numa == {0: (0, 1, 2, 3, 4), 1: (5, 6, 7, 8, 9)}
    assert facts.allowed_cpus == tuple(range(10))
    assert facts.affinity == {0: facts.numa[0], 1: facts.numa[0], 2: facts.numa[1]}
    assert facts.chip_map == {0: {0: 0}, 1: {0: 1}, 2: {0: 2}}
    assert facts.running_npus == (0, 1)
    assert (facts.soc, facts.threads_per_core, facts.arch) == ("A2", 1, "aarch64")
    assert facts.source == "synthetic 3 NPUs / 11 CPUs / 2 NUMA"
    assert make_synthetic_host(npus=2, cpus=4, numa_nodes=2).running_npus == (0, 1)


def test_synthetic_950_hosts_keep_node_0_free() -> None:
    # Ascend 950 NPUs sit on the nodes after 0: with 3 nodes, 2 NPUs on nodes 1 and 2.
    facts = make_synthetic_host(npus=2, cpus=6, numa_nodes=3, soc="A5", threads_per_core=2)
    assert facts.affinity == {0: (2, 3), 1: (4, 5)} and facts.threads_per_core == 2
    # One node only: nothing to keep free.
    assert make_synthetic_host(npus=1, cpus=2, numa_nodes=1, soc="A5").affinity == {0: (0, 1)}
    # Two nodes: node 1.
    assert make_synthetic_host(npus=1, cpus=4, numa_nodes=2, soc="A5").affinity == {0: (2, 3)}


@pytest.mark.parametrize(("npus", "cpus", "nodes", "ok"), [
    (0, 4, 1, False), (1, 4, 0, False), (1, 1, 2, False), (1, 2, 2, True), (1, 3, 2, True)])
def test_synthetic_host_limits(npus: int, cpus: int, nodes: int, ok: bool) -> None:
    if ok:
        assert len(make_synthetic_host(npus=npus, cpus=cpus, numa_nodes=nodes).numa) == nodes
    else:
        with pytest.raises(ValueError, match=r"^need npus >= 1, numa_nodes >= 1 and cpus >= "
                                             r"numa_nodes$"):
            make_synthetic_host(npus=npus, cpus=cpus, numa_nodes=nodes)
