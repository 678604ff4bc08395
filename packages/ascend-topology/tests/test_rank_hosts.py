"""Rank hosts: one pool per local rank (host-CPU platform) and the pool of one NPU."""

from __future__ import annotations

import os

import pytest
from ascend_topology import HostFacts, PlanError, PlanOptions
from ascend_topology.rank_hosts import make_rank_host, plan_for_npu, plan_rank_pools

TWO_NODES = {0: list(range(4)), 1: list(range(4, 8))}


def pools(plan) -> list[list[int]]:
    return [list(entry.cpus) for entry in plan.npus]


def test_two_ranks_on_two_cpus_of_one_node_get_one_cpu_each() -> None:
    plan = plan_rank_pools(2, [0, 1], {0: [0, 1]})
    assert plan.ok
    assert pools(plan) == [[0], [1]]


@pytest.mark.parametrize(("ranks", "expected"), [
    (1, [[0, 1, 2, 3]]),  # one rank stays on node 0
    (2, [[0, 1, 2, 3], [4, 5, 6, 7]]),  # a node each
    (3, [[0, 1], [2, 3], [4, 5, 6, 7]]),  # ranks 0,1 share node 0; rank 2 has node 1
    (4, [[0, 1], [2, 3], [4, 5], [6, 7]]),
    (8, [[c] for c in range(8)]),  # at the limit: one CPU per rank
])
def test_ranks_fill_numa_nodes_in_order(ranks: int, expected: list[list[int]]) -> None:
    plan = plan_rank_pools(ranks, list(range(8)), TWO_NODES)
    assert plan.ok, plan.reason
    assert pools(plan) == expected
    node_of = {c: n for n, cpus in TWO_NODES.items() for c in cpus}
    for entry in plan.npus:  # every pool NUMA-local, reported as such
        assert {node_of[c] for c in entry.cpus} == {entry.numa_node}
        assert entry.quality == 1.0


def test_whole_pool_is_main_no_acl_release_or_irq() -> None:
    plan = plan_rank_pools(2, list(range(8)), TWO_NODES)
    for entry in plan.npus:
        assert entry.main == entry.cpus
        assert (entry.acl, entry.release, entry.irq) == ((), (), ())


def test_one_rank_more_than_cpus_is_not_applicable() -> None:
    plan = plan_rank_pools(9, list(range(8)), TWO_NODES)  # just above the limit
    assert not plan.ok
    assert "would get no CPU" in (plan.reason or "")


def test_pools_use_only_allowed_cpus() -> None:
    plan = plan_rank_pools(2, [1, 2, 5, 6], TWO_NODES)
    assert pools(plan) == [[1, 2], [5, 6]]


def test_cpus_missing_from_numa_form_an_extra_node() -> None:
    plan = plan_rank_pools(2, [0, 1, 2, 3], {0: [0, 1]})
    assert pools(plan) == [[0, 1], [2, 3]]


def test_no_numa_layout_means_one_node_of_the_allowed_cpus() -> None:
    plan = plan_rank_pools(2, [3, 4, 5, 6], {})
    assert pools(plan) == [[3, 4], [5, 6]]


@pytest.mark.parametrize("ranks", [0, -1, True, 1.5, "2"])
def test_invalid_rank_counts_are_one_clear_error(ranks: object) -> None:
    with pytest.raises(PlanError, match="ranks must be an integer >= 1"):
        make_rank_host(ranks, [0], {0: [0]})  # type: ignore[arg-type]


def test_no_allowed_cpu_is_one_clear_error() -> None:
    with pytest.raises(PlanError, match="may run on no CPU"):
        plan_rank_pools(2, [], TWO_NODES)


def test_defaults_read_this_process() -> None:
    allowed = sorted(os.sched_getaffinity(0))
    plan = plan_rank_pools(len(allowed))  # one CPU per rank: every allowed CPU used once
    assert plan.ok, plan.reason
    assert sorted(c for entry in plan.npus for c in entry.cpus) == allowed
    assert all(len(entry.cpus) == 1 for entry in plan.npus)


def _npu_host(running: tuple[int, ...] = (), visible: tuple[int, ...] | None = None) -> HostFacts:
    return HostFacts(
        soc="A2", numa={0: tuple(range(8))}, allowed_cpus=tuple(range(8)),
        chip_map={0: {0: 0}, 1: {0: 1}}, running_npus=running,
        affinity={0: (0, 1, 2, 3), 1: (4, 5, 6, 7)}, visible_devices=visible,
    )


def test_plan_for_npu_counts_the_workers_npu_as_running() -> None:
    # NPU 0 already runs a process; NPU 1's worker binds before its own process shows up.
    plan, index = plan_for_npu(_npu_host(running=(0,)), 1, PlanOptions(min_cpus_per_npu=3))
    assert plan.ok
    assert plan.npus[index].npu == 1
    assert list(plan.npus[index].cpus) == [4, 5, 6, 7]
    assert plan.npus[index].main == (4, 5)  # acl 6, release 7
    assert (plan.npus[index].acl, plan.npus[index].release) == ((6,), (7,))


def test_plan_for_npu_rejects_unknown_and_hidden_npus() -> None:
    with pytest.raises(PlanError, match="NPU 5 is not an NPU of this host"):
        plan_for_npu(_npu_host(), 5, PlanOptions())
    with pytest.raises(PlanError, match="not among the visible devices 0"):
        plan_for_npu(_npu_host(visible=(0,)), 1, PlanOptions())


def test_plan_for_npu_keeps_problems_for_apply_to_refuse() -> None:
    plan, index = plan_for_npu(_npu_host(), 0, PlanOptions(min_cpus_per_npu=5))
    assert not plan.ok  # 4 affine CPUs < 5
    assert plan.npus[index].npu == 0


def test_rank_host_facts_in_full() -> None:
    # 3 ranks over node 0 (CPUs 0-3), node 1 (4-7) and unlisted CPUs 8-9 (an extra node 2).
    facts = make_rank_host(3, [9, 8, 0, 1, 2, 3, 4, 5, 6, 7], TWO_NODES)
    assert facts == HostFacts(
        soc="A2", numa={0: (0, 1, 2, 3), 1: (4, 5, 6, 7), 2: (8, 9)},
        allowed_cpus=tuple(range(10)), chip_map={0: {0: 0}, 1: {0: 1}, 2: {0: 2}},
        running_npus=(0, 1, 2), affinity={0: (0, 1, 2, 3), 1: (4, 5, 6, 7), 2: (8, 9)},
        threads_per_core=1, arch="host", source="3 local ranks on CPUs of NUMA nodes 0,1,2")


def test_unlisted_cpus_without_any_numa_node_form_node_0() -> None:
    facts = make_rank_host(1, [3, 4], {})
    assert facts.numa == {0: (3, 4)}
    assert facts.source == "1 local ranks on CPUs of NUMA nodes 0"


def test_rank_host_errors_word_by_word() -> None:
    with pytest.raises(PlanError) as info:
        make_rank_host(2, [], TWO_NODES)
    assert str(info.value) == "the process may run on no CPU: nothing to plan ranks on"
    with pytest.raises(PlanError) as info:
        make_rank_host(1, [0], {0: [0]}, threads_per_core=0)
    assert str(info.value) == ("cannot describe 1 ranks on this host: threads_per_core must be "
                               ">= 1, got 0")
    with pytest.raises(PlanError) as info:
        plan_rank_pools(1, [0], {0: [0]}, threads_per_core=0)  # passed through, not dropped
    assert str(info.value).endswith("threads_per_core must be >= 1, got 0")


def test_plan_for_npu_error_texts() -> None:
    three = HostFacts(soc="A2", numa={0: tuple(range(8))}, allowed_cpus=tuple(range(8)),
                      chip_map={0: {0: 0}, 1: {0: 1}, 2: {0: 2}}, visible_devices=(0, 2))
    with pytest.raises(PlanError) as info:
        plan_for_npu(three, 5, PlanOptions())
    assert str(info.value) == "NPU 5 is not an NPU of this host (NPUs: 0,1,2)"
    with pytest.raises(PlanError) as info:
        plan_for_npu(three, 1, PlanOptions())
    assert str(info.value) == "NPU 1 is not among the visible devices 0,2"
    bare = HostFacts(soc="A2", numa={0: (0, 1)}, allowed_cpus=(0, 1))
    with pytest.raises(PlanError) as info:
        plan_for_npu(bare, 0, PlanOptions())
    assert str(info.value) == "NPU 0 is not an NPU of this host (NPUs: none)"
    no_cpu = HostFacts(soc="A2", numa={0: (0, 1)}, allowed_cpus=(), chip_map={0: {0: 0}})
    with pytest.raises(PlanError) as info:
        plan_for_npu(no_cpu, 0, PlanOptions())
    assert str(info.value) == "the plan has no pool for NPU 0: the process may run on no CPU"
