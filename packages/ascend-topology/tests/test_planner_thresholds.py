"""Every threshold of the planner at, just below and just above its limit (issue 16).

Expected pools come from the rules (upstream-behaviour.md section 7.4 and the package README)
worked out by hand in the comments, not from running the planner.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from ascend_topology import HostFacts, PlanError, PlanOptions, TopologyError, plan
from ascend_topology.planner import split_roles
from ascend_topology.pools import cluster_pools, extend_numa, topo_affinity_pools

R = range
MakeFacts = Callable[..., HostFacts]


# --- PlanOptions.min_cpus_per_npu: 1..1024 ------------------------------------------------

@pytest.mark.parametrize(("value", "ok"), [(0, False), (1, True), (2, True), (1023, True),
                                           (1024, True), (1025, False), (None, True)])
def test_min_cpus_per_npu_range(value: int | None, ok: bool) -> None:
    if ok:
        assert PlanOptions(min_cpus_per_npu=value).min_cpus_per_npu == value
    else:
        with pytest.raises(PlanError, match=f"must be 1..1024; got {value}"):
            PlanOptions(min_cpus_per_npu=value)


@pytest.mark.parametrize("value", [True, 5.0, "5"])
def test_min_cpus_per_npu_type(value: object) -> None:
    with pytest.raises(PlanError, match="must be an integer or None"):
        PlanOptions(min_cpus_per_npu=value)  # type: ignore[arg-type]


# --- global slice: per-NPU share against the minimum ---------------------------------------

@pytest.mark.parametrize(("cpus", "ok"), [(19, False), (20, True), (21, True)])
def test_global_slice_minimum(make_facts: MakeFacts, cpus: int, ok: bool) -> None:
    # 4 NPUs, minimum 5: 20 CPUs is exactly 5 each. 19 -> base 4, extra 3: 5, 5, 5, 4.
    result = plan(make_facts(soc="A3", numa={0: R(cpus)}, npus=4))
    assert result.ok is ok
    base, extra = divmod(cpus, 4)
    assert [len(p.cpus) for p in result.npus] == [base + (i < extra) for i in R(4)]
    if not ok:
        assert result.problems == (f"4 NPUs need at least 20 CPUs (5 per NPU); {cpus} are "
                                   "allowed",)


@pytest.mark.parametrize(("cpus", "empty", "note"), [(3, True, False), (4, False, False),
                                                     (5, False, False)])
def test_every_npu_needs_one_cpu(make_facts: MakeFacts, cpus: int, empty: bool,
                                 note: bool) -> None:
    result = plan(make_facts(soc="A3", numa={0: R(cpus)}, npus=4),
                  PlanOptions(min_cpus_per_npu=1))
    assert result.ok is not empty
    assert any("would get no CPU" in p for p in result.problems) is empty
    assert any("set min_cpus_per_npu" in n for n in result.notes) is note


@pytest.mark.parametrize("minimum", [2, 3, 4])
def test_relaxation_note_only_below_the_minimum(make_facts: MakeFacts, minimum: int) -> None:
    # 4 NPUs over 10 CPUs: 3, 3, 2, 2. The note proposes the smallest pool (2) when it is
    # below the minimum: minimum 3 and 4 get it, minimum 2 (= smallest) does not.
    result = plan(make_facts(soc="A3", numa={0: R(10)}, npus=4),
                  PlanOptions(min_cpus_per_npu=minimum))
    notes = [n for n in result.notes if "set min_cpus_per_npu" in n]
    if minimum == 2:
        assert result.ok and notes == []
    else:
        assert not result.ok
        assert notes == ["the best valid plan gives the smallest pool 2 CPUs; set "
                         "min_cpus_per_npu=2 (cpu_binding_config / --min-cpus-per-npu) to use "
                         "it"]


# --- topology affinity: NUMA extension and short groups ------------------------------------

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


@pytest.mark.parametrize(("own", "ok"), [(9, False), (10, True), (11, True)])
def test_short_group_problem(make_facts: MakeFacts, own: int, ok: bool) -> None:
    # As above but node 1's CPUs are not allowed, so nothing can be added.
    facts = make_facts(numa={0: R(own), 1: R(own, own + 8)}, allowed=R(own),
                       affinity={0: R(own), 1: R(own)})
    result = plan(facts)
    assert result.ok is ok and result.mode == "topo_affinity"
    if not ok:
        assert result.problems == (f"2 NPUs (0-1) need at least 10 CPUs near NUMA node 0 "
                                   f"(5 per NPU); {own} are allowed there",)


def test_extension_wraps_from_the_last_node_to_the_first() -> None:
    numa = {0: [0, 1], 1: [2, 3], 5: [4, 5]}
    assert extend_numa([4], numa, R(6)) == [0, 1, 4]
    assert extend_numa([2, 3], numa, R(6)) == [2, 3, 4, 5]
    assert extend_numa([9], numa, R(6)) == [9]  # CPU on no node: unchanged


# --- NUMA node of a pool: majority, ties to the lowest node --------------------------------

def test_npu_split_evenly_over_two_nodes_takes_the_lower_node(make_facts: MakeFacts) -> None:
    # Affinity 4 CPUs on node 1 and 4 on node 2: a tie, broken towards node 1.
    facts = make_facts(numa={0: R(4), 1: R(4, 8), 2: R(8, 12)}, affinity={0: R(4, 12)})
    entry = plan(facts).npus[0]
    assert entry.numa_node == 1 and entry.quality == 0.5


def test_tie_goes_to_the_lower_node_even_when_its_cpus_come_later(
    make_facts: MakeFacts,
) -> None:
    # Node 3 holds CPUs 0-3, node 2 holds 4-7: the tie goes to node 2, not to the node of
    # the first CPU.
    facts = make_facts(numa={3: R(4), 2: R(4, 8)}, affinity={0: R(8)})
    entry = plan(facts).npus[0]
    assert entry.numa_node == 2 and entry.quality == 0.5


@pytest.mark.parametrize(("on_high", "node"), [(3, 1), (5, 2), (4, 1)])
def test_majority_node(make_facts: MakeFacts, on_high: int, node: int) -> None:
    # 4 affine CPUs on node 1 and `on_high` on node 2: the node with more wins, a tie
    # goes to node 1.
    affinity = [*R(4), *R(8, 8 + on_high)]
    facts = make_facts(numa={1: R(8), 2: R(8, 16)}, affinity={0: affinity})
    entry = plan(facts, PlanOptions(min_cpus_per_npu=1)).npus[0]
    assert entry.numa_node == node
    assert entry.quality == (4 if node == 1 else on_high) / (4 + on_high)


def test_slice_over_two_nodes_takes_the_lower_node(make_facts: MakeFacts) -> None:
    facts = make_facts(soc="A3", numa={2: R(4), 5: R(4, 8)}, npus=1)
    entry = plan(facts, PlanOptions(min_cpus_per_npu=1)).npus[0]
    assert entry.numa_node == 2 and entry.quality == 0.5


def test_pool_on_no_known_node_takes_the_lowest_node(make_facts: MakeFacts) -> None:
    # Allowed CPUs 8-9 belong to no NUMA node of the layout: node 2 (the lowest), quality 0.
    facts = make_facts(soc="A3", numa={5: R(4, 8), 2: R(4)}, allowed=[8, 9], npus=1)
    entry = plan(facts, PlanOptions(min_cpus_per_npu=1)).npus[0]
    assert (entry.cpus, entry.numa_node, entry.quality) == ((8, 9), 2, 0.0)


# --- roles: 5 CPUs with IRQ binding, 3 without ---------------------------------------------

@pytest.mark.parametrize(
    ("size", "expected"),
    [
        (4, ((0, 1), (2,), (3,), (0, 1))),  # too small to keep the IRQ CPUs out of main
        (5, ((2,), (3,), (4,), (0, 1))),
        (6, ((2, 3), (4,), (5,), (0, 1))),
    ],
)
def test_roles_with_irq_binding_around_5(
    size: int, expected: tuple[tuple[int, ...], ...]
) -> None:
    assert split_roles(list(R(size)), "A2", bind_irq=True) == expected


@pytest.mark.parametrize(
    ("size", "expected"),
    [
        (0, ((), (), (), ())),
        (1, ((0,), (0,), (0,), ())),
        (2, ((0,), (1,), (1,), ())),
        (3, ((0,), (1,), (2,), ())),
        (4, ((0, 1), (2,), (3,), ())),
    ],
)
def test_roles_without_irq_binding_around_3(
    size: int, expected: tuple[tuple[int, ...], ...]
) -> None:
    assert split_roles(list(R(size)), "310P", bind_irq=False) == expected


def test_roles_on_950_ignore_irq_binding() -> None:
    assert split_roles([0, 1, 2, 3, 4], "A5", bind_irq=True) == ((0, 1, 2, 3, 4), (), (), ())


# --- Ascend 950 clusters -------------------------------------------------------------------

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


# --- HostFacts limits ----------------------------------------------------------------------

@pytest.mark.parametrize(("threads", "ok"), [(0, False), (1, True), (2, True)])
def test_threads_per_core_at_least_one(threads: int, ok: bool) -> None:
    if ok:
        assert HostFacts(soc="A2", numa={0: (0,)}, allowed_cpus=(0,),
                         threads_per_core=threads).threads_per_core == threads
    else:
        with pytest.raises(TopologyError, match="threads_per_core must be >= 1, got 0"):
            HostFacts(soc="A2", numa={0: (0,)}, allowed_cpus=(0,), threads_per_core=threads)


def test_facts_need_a_known_soc_and_numa() -> None:
    with pytest.raises(TopologyError, match="unknown SoC 'A9'; allowed: A2, A3, A5, 310P"):
        HostFacts(soc="A9", numa={0: (0,)}, allowed_cpus=(0,))
    with pytest.raises(TopologyError) as caught:
        HostFacts(soc="A2", numa={}, allowed_cpus=(0,))
    assert str(caught.value) == "the host has no NUMA layout (no node has CPUs)"


def test_a_running_npu_unknown_to_the_host_gets_no_cpu(make_facts: MakeFacts) -> None:
    # npu-smi lists NPU 5 as running but neither the chip map nor the topology knows it.
    facts = HostFacts(soc="A2", numa={0: tuple(R(8))}, allowed_cpus=tuple(R(8)),
                      affinity={0: tuple(R(8))}, running_npus=(5,))
    result = plan(facts, PlanOptions(min_cpus_per_npu=1))
    assert [(p.npu, p.cpus, p.quality) for p in result.npus] == [(5, (), 0.0)]
    assert result.problems == (
        "npu-smi info -t topo gives no CPU affinity for NPU 5",
        "NPU 5 would get no CPU: 8 allowed CPUs cannot give each of 1 NPUs its own CPU",
    )


def test_npus_sharing_an_affinity_list_share_its_node(make_facts: MakeFacts) -> None:
    # Both NPUs' affinity is 0-7 (node 0 holds 0-5, node 1 6-7): both are on node 0 even
    # though NPU 1's pool (4-7) is half on node 1.
    facts = make_facts(numa={0: R(6), 1: R(6, 8)}, affinity={0: R(8), 1: R(8)})
    result = plan(facts, PlanOptions(min_cpus_per_npu=1))
    assert [(p.npu, p.cpus, p.numa_node, p.quality) for p in result.npus] == [
        (0, (0, 1, 2, 3), 0, 1.0), (1, (4, 5, 6, 7), 0, 0.5)]


def test_plan_fields_and_empty_plans(make_facts: MakeFacts) -> None:
    facts = make_facts(soc="A3", numa={3: R(4), 1: R(4, 8)}, npus=2)
    result = plan(facts, PlanOptions(min_cpus_per_npu=1))
    assert (result.numa_nodes, result.source, result.notes, result.uvb_cpus) == (
        (1, 3), "test", (), ())  # A3 slices by design: no note about missing topology
    none = plan(make_facts(numa={0: R(4)}, allowed=[], npus=1))
    assert (none.mode, none.npus, none.problems, none.numa_nodes) == (
        "none", (), ("the process may run on no CPU",), (0,))
    nothing = plan(make_facts(numa={0: R(4)}, npus=1, visible=[3]))
    assert (nothing.mode, nothing.npus, nothing.problems) == (
        "none", (), ("no NPU to plan for (npu-smi lists none, or none is visible)",))


def test_each_short_group_is_named(make_facts: MakeFacts) -> None:
    # NPU 0 alone on node 0 is fine (5 CPUs); NPUs 1-2 share 6 CPUs over nodes 1 and 2.
    facts = make_facts(numa={0: R(5), 1: R(5, 8), 2: R(8, 11)}, allowed=R(11),
                       affinity={0: R(5), 1: R(5, 11), 2: R(5, 11)})
    assert plan(facts).problems == (
        "2 NPUs (1-2) need at least 10 CPUs near NUMA node 1,2 (5 per NPU); 6 are allowed "
        "there",)
