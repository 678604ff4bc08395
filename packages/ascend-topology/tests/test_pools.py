from __future__ import annotations

from collections.abc import Callable

import pytest
from ascend_topology import (
    HostFacts,
    PlanOptions,
    plan,
)
from ascend_topology.pools import (
    average_distribute,
    cluster_pools,
    extend_numa,
    global_slice,
    overlap_groups,
    topo_affinity_pools,
    uvb_pool,
)
from hypothesis import given, settings
from hypothesis import strategies as st

R = range


def test_global_slice_20_cpus_over_4_npus() -> None:
    pools = global_slice(list(R(20)), [0, 1, 2, 3], {0, 1, 2, 3})
    assert pools == {0: [*R(0, 5)], 1: [*R(5, 10)], 2: [*R(10, 15)], 3: [*R(15, 20)]}


def test_global_slice_17_cpus_over_3_npus_spreads_the_remainder() -> None:
    assert global_slice(list(R(17)), [0, 1, 2], {0, 1, 2}) == {
        0: [*R(0, 6)], 1: [*R(6, 12)], 2: [*R(12, 17)]
    }


def test_global_slice_is_disjoint_across_processes_sharing_a_cpuset() -> None:
    cpus = list(R(40, 80))
    first = global_slice(cpus, R(8), {0, 1, 2, 3})
    second = global_slice(cpus, R(8), {4, 5, 6, 7})
    assert set(first) == {0, 1, 2, 3} and set(second) == {4, 5, 6, 7}
    used = [c for pools in (first, second) for cpus in pools.values() for c in cpus]
    assert sorted(used) == cpus


def test_global_slice_empty_inputs() -> None:
    assert global_slice([], [0, 1], {0}) == {0: []}
    assert global_slice([0, 1], [], {0}) == {}


def test_average_distribute_14_over_3_gives_4_4_6() -> None:
    pools = average_distribute(list(R(14)), [2, 0, 1])
    assert [len(pools[n]) for n in (0, 1, 2)] == [4, 4, 6]
    assert pools[0] == [0, 1, 2, 3] and pools[2] == [*R(8, 14)]


def test_extend_numa_adds_the_next_node_cyclically() -> None:
    numa = {0: [0, 1], 1: [2, 3], 2: [4, 5]}
    assert extend_numa([0, 1], numa, [0, 1, 2, 3, 4, 5]) == [0, 1, 2, 3]
    assert extend_numa([4], numa, [0, 1, 3, 4, 5]) == [0, 1, 4]
    assert extend_numa([1, 2], numa, R(6)) == [1, 2]  # spans two nodes: unchanged
    assert extend_numa([2], numa, [2]) == [2]  # next node not allowed


def test_topo_affinity_identical_affinity_is_split_evenly() -> None:
    numa = {0: list(R(24)), 1: list(R(24, 48))}
    result = topo_affinity_pools({0: R(24), 1: R(24), 2: R(24, 48)}, list(R(48)), numa,
                                 [0, 1, 2], 5)
    assert result.pools == {0: [*R(12)], 1: [*R(12, 24)], 2: [*R(24, 48)]}


def test_topo_affinity_extends_into_the_next_node_when_the_group_is_short() -> None:
    numa = {0: list(R(8)), 1: list(R(8, 16))}
    result = topo_affinity_pools({0: R(8), 1: R(8)}, list(R(16)), numa, [0, 1], 5)
    assert result.pools == {0: [*R(8)], 1: [*R(8, 16)]}


def test_topo_affinity_extension_leaves_other_groups_cpus_alone() -> None:
    numa = {0: list(R(6)), 1: list(R(6, 12))}
    result = topo_affinity_pools({0: R(6), 1: R(6), 2: R(6, 12)}, list(R(12)), numa,
                                 [0, 1, 2], 5)
    assert result.pools == {0: [0, 1, 2], 1: [3, 4, 5], 2: [*R(6, 12)]}


def test_topo_affinity_hidden_npus_share_but_are_not_returned() -> None:
    # Two DP processes share CPUs 0-15; NPUs 0-1 belong to one, 2-3 to the other.
    affinity = {n: R(16) for n in R(4)}
    numa = {0: list(R(16))}
    mine = topo_affinity_pools(affinity, list(R(16)), numa, [0, 1], 2)
    theirs = topo_affinity_pools(affinity, list(R(16)), numa, [2, 3], 2)
    assert mine.pools == {0: [0, 1, 2, 3], 1: [4, 5, 6, 7]}
    assert theirs.pools == {2: [8, 9, 10, 11], 3: [12, 13, 14, 15]}


def test_topo_affinity_overlapping_affinities_are_one_group() -> None:
    numa = {0: list(R(16))}
    result = topo_affinity_pools({0: R(0, 10), 1: R(6, 16)}, list(R(16)), numa, [0, 1], 5)
    assert result.pools == {0: [*R(8)], 1: [*R(8, 16)]}


def test_topo_affinity_conflict_names_the_cpus() -> None:
    # OMP_PROC_BIND=TRUE pinned the process to CPU 0 (user complaint #2).
    result = topo_affinity_pools({0: R(144, 168)}, [0], {0: [0], 6: list(R(144, 168))}, [0], 5)
    assert result.pools is None
    assert "NPU 0's affine CPUs 144-167 are not among the allowed CPUs 0" in result.reason
    assert "OMP_PROC_BIND" in result.reason


def test_topo_affinity_missing_row_for_a_target() -> None:
    result = topo_affinity_pools({0: R(4)}, list(R(8)), {0: list(R(8))}, [0, 1], 1)
    assert result.pools is None and "no CPU affinity for NPU 1" in result.reason


def _numa_4x96() -> dict[int, list[int]]:
    return {n: list(R(96 * n, 96 * (n + 1))) for n in R(4)}


def _affinity_950() -> dict[int, range]:
    return {n: (R(288, 384) if n in (0, 1, 6, 7) else R(96, 192)) for n in R(8)}


def test_950_cluster_pools_reference_example() -> None:
    result = cluster_pools(_affinity_950(), list(R(384)), _numa_4x96(), list(R(8)), 2)
    assert result.pools is not None
    assert result.pools[0] == [*R(288, 304)]
    assert result.pools[1] == [*R(304, 320)]
    assert result.pools[2] == [*R(96, 112)]
    assert result.pools[7] == [*R(336, 352)]
    assert result.uvb_cpus == [*R(1, 96)]


def test_950_cluster_pools_are_disjoint_across_dp_processes() -> None:
    args = (_affinity_950(), list(R(384)), _numa_4x96())
    first = cluster_pools(*args, [0, 1, 2, 3], 2).pools
    second = cluster_pools(*args, [4, 5, 6, 7], 2).pools
    assert first is not None and second is not None
    cpus = [c for pools in (first, second) for p in pools.values() for c in p]
    assert len(cpus) == len(set(cpus)) == 8 * 16
    assert second[6] == [*R(320, 336)]


def test_950_cluster_pools_refuse_invalid_inputs() -> None:
    numa = _numa_4x96()
    assert "threads per core" in cluster_pools(_affinity_950(), R(384), numa, [0], 4).reason
    spanning = {0: R(0, 192)}
    assert "span NUMA nodes 0,1" in cluster_pools(spanning, R(384), numa, [0], 2).reason
    crowded = {n: R(288, 384) for n in R(7)}
    reason = cluster_pools(crowded, R(384), numa, [0], 2).reason
    assert reason == "NUMA node 3 has 6 whole clusters of 16 CPUs for 7 NPUs"


def test_uvb_pool_is_node_zero_without_cpu_zero() -> None:
    assert uvb_pool({0: [0, 1, 2], 1: [3]}, [0, 2, 3]) == [2]
    assert uvb_pool({1: [3]}, [3]) == []


def test_topo_affinity_chains_of_overlaps_merge_into_one_group() -> None:
    # 0 and 2 are apart until 3 bridges them; 1 stays alone.
    affinity = {0: R(0, 4), 1: R(10, 14), 2: R(6, 8), 3: R(3, 7)}
    result = topo_affinity_pools(affinity, list(R(16)), {0: list(R(16))}, [0, 1, 2, 3], 1)
    assert result.groups == [([0, 2, 3], list(R(0, 8))), ([1], list(R(10, 14)))]
    assert result.pools == {0: [0, 1], 1: [*R(10, 14)], 2: [2, 3], 3: [4, 5, 6, 7]}


def test_average_distribute_edges() -> None:
    assert average_distribute([3, 1, 2], []) == {}
    assert average_distribute([3, 1, 2], [7]) == {7: [1, 2, 3]}
    # Fewer CPUs than NPUs: every NPU but the last gets none, the last takes them all.
    assert average_distribute([5, 6], [0, 1, 2]) == {0: [], 1: [], 2: [5, 6]}
    assert average_distribute([], [0, 1]) == {0: [], 1: []}


def test_hidden_npus_near_the_allowed_cpus_take_part() -> None:
    # NPU 1 (another process's) shares CPUs 0-7 with NPU 0; NPU 2 sits on CPUs not allowed
    # here and stays out, so NPU 0 gets half of 0-7, not the whole.
    affinity = {0: R(8), 1: R(8), 2: R(8, 16)}
    result = topo_affinity_pools(affinity, list(R(8)), {0: list(R(8)), 1: list(R(8, 16))},
                                 [0], 1)
    assert result.pools == {0: [0, 1, 2, 3]}
    assert result.groups == [([0, 1], list(R(8)))]


def test_uvb_pool_only_takes_allowed_node_0_cpus() -> None:
    assert uvb_pool({0: [2, 0, 1], 1: [3]}, [0, 1, 3]) == [1]
    assert uvb_pool({0: [0]}, [0]) == []


def test_global_slice_keeps_host_positions_for_non_contiguous_ids() -> None:
    # Logical ids 2, 5, 9: positions 0, 1, 2 of 9 CPUs; only NPU 9 asked for.
    assert global_slice(list(R(9)), [9, 2, 5, 5], {9}) == {9: [6, 7, 8]}
    assert global_slice([4, 4, 1], [0], {0}) == {0: [1, 4]}


def test_overlap_groups_follow_merged_groups() -> None:
    # 2 bridges 0 and 1; 3 then touches a CPU that belonged to 1's group before the merge.
    groups = overlap_groups({0: [0, 1], 1: [5, 6], 2: [1, 5], 3: [6, 9], 4: [20]})
    assert groups == [([0, 1, 2, 3], {0, 1, 5, 6, 9}), ([4], {20})]
    # Identical lists are one entry; groups come out by their smallest NPU.
    assert overlap_groups({7: [3], 2: [8], 5: [3]}) == [([2], {8}), ([5, 7], {3})]


@pytest.mark.slow
@settings(max_examples=200, deadline=None, database=None, derandomize=True)
@given(st.dictionaries(st.integers(0, 15), st.lists(st.integers(0, 40), min_size=1,
                                                    max_size=10).map(lambda c: sorted(set(c)))))
def test_overlap_groups_partition_npus_into_cpu_disjoint_groups(
    base: dict[int, list[int]],
) -> None:
    groups = overlap_groups(base)
    assert sorted(n for ids, _ in groups for n in ids) == sorted(base)
    owner = {n: i for i, (ids, _) in enumerate(groups) for n in ids}
    for a in base:
        for b in base:
            if set(base[a]) & set(base[b]):
                assert owner[a] == owner[b]
    cpus = [c for _, group_cpus in groups for c in group_cpus]
    assert len(cpus) == len(set(cpus))


MakeFacts = Callable[..., HostFacts]


def test_target_notes(make_facts: MakeFacts) -> None:
    facts = make_facts(numa={0: R(20)}, affinity={0: R(20), 1: R(20)}, running=[],
                       visible=[1, 7, 9])
    assert plan(facts, PlanOptions(min_cpus_per_npu=1)).notes == (
        "visible devices 7,9 are not NPUs of this host",
        "npu-smi shows no running process on the visible NPUs; planned for all visible NPUs "
        "(1)",
    )
    everyone = make_facts(numa={0: R(20)}, affinity={0: R(20), 1: R(20)}, running=[])
    assert plan(everyone).notes == (
        "npu-smi shows no running process on the visible NPUs; planned for all NPUs (0-1)",)
    running = make_facts(numa={0: R(20)}, affinity={0: R(20), 1: R(20)}, running=[1],
                         visible=[0, 1])
    assert [p.npu for p in plan(running).npus] == [1] and plan(running).notes == ()


def test_fallback_notes(make_facts: MakeFacts) -> None:
    no_topo = plan(make_facts(numa={0: R(10)}, npus=2))
    assert no_topo.notes == ("npu-smi info -t topo gives no CPU affinity; slicing the allowed "
                             "CPUs",)
    a5 = plan(make_facts(soc="A5", numa={0: R(8)}, affinity={0: R(8)}), PlanOptions(
        min_cpus_per_npu=1))
    assert a5.notes == ("950 cluster pools do not apply (NUMA node 0 has 0 whole clusters of 8 "
                        "CPUs for 1 NPUs); slicing instead",)
    conflict = plan(make_facts(numa={0: R(4), 1: R(4, 8)}, allowed=[0, 1, 2, 3],
                               affinity={0: R(4, 8)}), PlanOptions(min_cpus_per_npu=1))
    assert conflict.notes == ("the best valid plan below slices the allowed CPUs instead",)
    assert conflict.problems == (
        "NPU 0's affine CPUs 4-7 are not among the allowed CPUs 0-3 (is OMP_PROC_BIND, "
        "taskset or a cpuset pinning the process?)",)


def test_short_group_without_a_known_node(make_facts: MakeFacts) -> None:
    # Affine CPUs 8-9 are allowed but on no NUMA node of the layout.
    facts = make_facts(numa={0: R(4)}, allowed=[0, 8, 9], affinity={0: [8, 9]})
    assert plan(facts).problems == (
        "NPU 0 needs at least 5 CPUs near NUMA node - (5 per NPU); 2 are allowed there",)


def test_pool_reasons() -> None:
    numa = {0: list(R(4)), 1: list(R(4, 8))}
    assert topo_affinity_pools({0: R(4)}, list(R(8)), numa, [1], 1).reason == (
        "npu-smi info -t topo gives no CPU affinity for NPU 1")
    assert cluster_pools({0: R(8)}, list(R(8)), numa, [0], 1).reason == (
        "NPU 0's affine CPUs span NUMA nodes 0,1")
    assert cluster_pools({0: R(4)}, [5], numa, [0], 1).reason == (
        "NPU 0's affine CPUs 0-3 are not among the allowed CPUs 5 (is OMP_PROC_BIND, taskset "
        "or a cpuset pinning the process?)")
    assert cluster_pools({}, [5], numa, [0], 2).reason == (
        "npu-smi info -t topo gives no CPU affinity for NPU 0")


@pytest.mark.parametrize(("own", "extended"), [(9, True), (10, False), (11, False)])
def test_numa_extension_only_below_group_minimum(own: int, extended: bool) -> None:
    # Two NPUs share `own` CPUs of node 0; node 1 holds 8 more. Minimum 5: a group of two
    # needs 10, so 9 takes node 1 in (17 CPUs: 8 and 9), 10 and 11 stay on node 0.
    numa = {0: list(R(own)), 1: list(R(own, own + 8))}
    result = topo_affinity_pools({0: R(own), 1: R(own)}, list(R(own + 8)), numa, [0, 1], 5)
    assert result.pools is not None
    pool = list(R(own + 8)) if extended else list(R(own))
    half = len(pool) // 2
    assert result.pools == {0: pool[:half], 1: pool[half:]}


def test_extension_wraps_from_the_last_node_to_the_first() -> None:
    numa = {0: [0, 1], 1: [2, 3], 5: [4, 5]}
    assert extend_numa([4], numa, R(6)) == [0, 1, 4]
    assert extend_numa([2, 3], numa, R(6)) == [2, 3, 4, 5]
    assert extend_numa([9], numa, R(6)) == [9]  # CPU on no node: unchanged


@pytest.mark.parametrize(("cpus", "ok"), [(15, False), (16, True), (17, True)])
def test_950_needs_one_whole_cluster_per_npu(cpus: int, ok: bool) -> None:
    # Two NPUs on node 1 with one thread per core: clusters of 8, so 16 CPUs are two whole
    # clusters; 15 hold one; of 17 the 17th is left over.
    numa = {0: [0, 1], 1: list(R(2, 2 + cpus))}
    affinity = {0: R(2, 2 + cpus), 1: R(2, 2 + cpus)}
    result = cluster_pools(affinity, list(R(2 + cpus)), numa, [0, 1], 1)
    if ok:
        assert result.pools == {0: list(R(2, 10)), 1: list(R(10, 18))}
        assert result.uvb_cpus == [1]
    else:
        assert result.pools is None
        assert result.reason == "NUMA node 1 has 1 whole clusters of 8 CPUs for 2 NPUs"


@pytest.mark.parametrize(("threads", "size"), [(1, 8), (2, 16), (3, None)])
def test_950_cluster_size_follows_threads_per_core(threads: int, size: int | None) -> None:
    numa = {0: [0], 1: list(R(1, 33))}
    result = cluster_pools({0: R(1, 33)}, list(R(33)), numa, [0], threads)
    if size is None:
        assert result.pools is None and result.reason == (
            "3 threads per core; 950 clusters need 1 or 2")
    else:
        assert result.pools == {0: list(R(1, 1 + size))}


def test_950_uvb_pool_is_kept_out_of_node_0_clusters() -> None:
    # NPU on node 0 with 17 CPUs: the UVB pool takes 1-16, leaving CPU 0 only: no cluster.
    numa = {0: list(R(17))}
    result = cluster_pools({0: R(17)}, list(R(17)), numa, [0], 1)
    assert result.pools is None and "has 0 whole clusters of 8 CPUs for 1 NPUs" in result.reason
