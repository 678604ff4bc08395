"""The planner: the binding minimum per SoC, how pools are split into roles, every threshold at,
just below and just above its limit, and plans of real recorded hosts.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable

import psutil
import pytest
from ascend_topology import (
    HostFacts,
    PlanError,
    PlanOptions,
    apply,
    default_min_cpus_per_npu,
    load_recorded_host,
    plan,
)
from ascend_topology.planner import split_roles
from hypothesis import given, settings
from hypothesis import strategies as st

R = range
MakeFacts = Callable[..., HostFacts]


def test_roles_with_irq_reservation_reference_example() -> None:
    assert split_roles([0, 1, 2, 3, 4], "A2", bind_irq=True) == ((2,), (3,), (4,), (0, 1))


def test_roles_without_irq_give_the_irq_cpus_to_main() -> None:
    assert split_roles([0, 1, 2, 3, 4], "A2", bind_irq=False) == ((0, 1, 2), (3,), (4,), ())


def test_roles_on_950_are_all_main() -> None:
    assert split_roles([8, 9, 10], "A5", bind_irq=True) == ((8, 9, 10), (), (), ())


def test_roles_of_tiny_pools_share_cpus() -> None:
    assert split_roles([0, 1], "A2", bind_irq=False) == ((0,), (1,), (1,), ())
    assert split_roles([7], "A3", bind_irq=True) == ((7,), (7,), (7,), (7,))


def test_a3_uses_global_slice_over_all_dies(make_facts: MakeFacts) -> None:
    facts = make_facts(soc="A3", numa={0: R(10), 1: R(10, 20)}, npus=4, running=[1, 3])
    result = plan(facts, PlanOptions(min_cpus_per_npu=5))
    assert result.ok and result.mode == "global_slice"
    assert [p.npu for p in result.npus] == [1, 3]
    assert result.npus[0].cpus == tuple(R(5, 10)) and result.npus[1].cpus == tuple(R(15, 20))
    assert result.npus[1].numa_node == 1 and result.npus[1].quality == 1.0


def test_too_few_cpus_says_why_with_numbers_and_proposes_a_plan(make_facts: MakeFacts) -> None:
    facts = make_facts(soc="A3", numa={0: R(32)}, npus=8)
    result = plan(facts)
    assert not result.ok
    assert result.problems == ("8 NPUs need at least 40 CPUs (5 per NPU); 32 are allowed",)
    assert result.reason == result.problems[0]
    assert [len(p.cpus) for p in result.npus] == [4] * 8  # the best valid plan
    assert "set min_cpus_per_npu=4" in result.notes[-1]
    relaxed = plan(facts, PlanOptions(min_cpus_per_npu=4))
    assert relaxed.ok and relaxed.npus == result.npus


def test_fewer_cpus_than_npus_cannot_give_every_npu_a_cpu(make_facts: MakeFacts) -> None:
    result = plan(make_facts(soc="A3", numa={0: R(2)}, npus=4), PlanOptions(min_cpus_per_npu=1))
    assert not result.ok
    reason = result.reason or ""
    assert "NPU 2-3 would get no CPU: 2 allowed CPUs cannot give each of 4 NPUs" in reason


def test_topo_affinity_pool_below_minimum_is_a_problem(make_facts: MakeFacts) -> None:
    facts = make_facts(numa={0: R(8)}, affinity={0: R(8), 1: R(8)})
    result = plan(facts)
    assert result.mode == "topo_affinity" and not result.ok
    assert result.problems == (
        "2 NPUs (0-1) need at least 10 CPUs near NUMA node 0 (5 per NPU); 8 are allowed there",
    )
    assert [p.cpus for p in result.npus] == [tuple(R(4)), tuple(R(4, 8))]
    assert "set min_cpus_per_npu=4" in result.notes[-1]


def test_topo_problem_for_a_single_npu_names_it(make_facts: MakeFacts) -> None:
    facts = make_facts(numa={0: R(3), 1: R(3, 6)}, affinity={0: R(3), 1: R(3, 6)})
    result = plan(facts, PlanOptions(min_cpus_per_npu=4))
    assert result.problems[0] == (
        "NPU 0 needs at least 4 CPUs near NUMA node 0 (4 per NPU); 3 are allowed there"
    )


def test_topo_conflict_falls_back_to_a_slice_proposal(make_facts: MakeFacts) -> None:
    facts = make_facts(numa={0: R(24), 1: R(24, 48)}, allowed=[0], affinity={0: R(24, 48)})
    result = plan(facts, PlanOptions(min_cpus_per_npu=1))
    assert not result.ok and result.mode == "global_slice"
    assert "NPU 0's affine CPUs 24-47 are not among the allowed CPUs 0" in result.problems[0]
    assert not any("min_cpus_per_npu" in n for n in result.notes)  # the option cannot help
    assert result.npus[0].cpus == (0,)
    assert result.npus[0].numa_node == 1 and result.npus[0].quality == 0.0


def test_missing_affinity_falls_back_to_global_slice_with_a_note(make_facts: MakeFacts) -> None:
    result = plan(make_facts(numa={0: R(20)}, npus=4))
    assert result.ok and result.mode == "global_slice"
    assert any("no CPU affinity" in n for n in result.notes)
    assert result.npus[3].cpus == tuple(R(15, 20))


def test_visible_devices_filter_running_npus(make_facts: MakeFacts) -> None:
    facts = make_facts(numa={0: R(40)}, affinity={n: R(40) for n in R(4)}, visible=[2, 3, 9])
    result = plan(facts)
    assert [p.npu for p in result.npus] == [2, 3]
    assert result.npus[0].cpus == tuple(R(20, 30))
    assert any("visible devices 9 are not NPUs" in n for n in result.notes)


def test_no_running_process_plans_for_all_visible_npus(make_facts: MakeFacts) -> None:
    facts = make_facts(numa={0: R(40)}, affinity={n: R(40) for n in R(4)}, running=[],
                       visible=[1, 2])
    result = plan(facts)
    assert result.ok and [p.npu for p in result.npus] == [1, 2]
    assert "no running process" in result.notes[0]


def test_nothing_to_plan(make_facts: MakeFacts) -> None:
    result = plan(make_facts(numa={0: R(8)}, npus=2, visible=[5]))
    assert not result.ok and result.npus == ()
    assert "no NPU to plan for" in (result.reason or "")
    assert json.loads(result.to_json())["npus"] == []
    empty = plan(make_facts(numa={0: R(8)}, allowed=[], npus=1))
    assert empty.reason == "the process may run on no CPU"


def test_quality_is_the_share_on_the_affine_node(make_facts: MakeFacts) -> None:
    facts = make_facts(numa={0: R(4), 1: R(4, 8)}, affinity={0: R(4)})
    result = plan(facts)  # 4 CPUs < 5: extended with node 1
    assert result.npus[0].cpus == tuple(R(8))
    assert result.npus[0].numa_node == 0 and result.npus[0].quality == 0.5


def test_950_example_host_plan() -> None:
    result = plan(load_recorded_host("950-4numa"))
    assert result.ok and result.mode == "cluster_pools"
    by_npu = {p.npu: p for p in result.npus}
    assert by_npu[0].cpus == tuple(R(288, 304)) and by_npu[1].cpus == tuple(R(304, 320))
    assert by_npu[2].cpus == tuple(R(96, 112)) and by_npu[7].cpus == tuple(R(336, 352))
    assert by_npu[7].main == by_npu[7].cpus and by_npu[7].acl == ()
    assert result.uvb_cpus == tuple(R(1, 96))


def test_950_without_room_for_clusters_falls_back_to_a_slice(make_facts: MakeFacts) -> None:
    facts = make_facts(soc="A5", numa={0: R(8)}, affinity={0: R(8), 1: R(8)},
                       threads_per_core=2)
    result = plan(facts, PlanOptions(min_cpus_per_npu=3))
    assert result.mode == "global_slice" and result.ok
    assert "has 0 whole clusters of 16 CPUs" in result.notes[0]
    assert result.npus[0].main == (0, 1, 2, 3)


def test_plan_json_contract(make_facts: MakeFacts) -> None:
    result = plan(make_facts(numa={0: R(12)}, affinity={0: R(12), 1: R(12)}),
                  PlanOptions(bind_irq=True))
    data = json.loads(result.to_json())
    assert data["npus"][0] == {"npu": 0, "numa_node": 0, "cpus": [*R(6)], "main": [2, 3],
                               "acl": [4], "release": [5], "irq": [0, 1], "quality": 1.0}
    assert data["ok"] is True and data["problems"] == []
    assert type(result).from_dict(data) == result


def test_explain_shows_roles_problems_and_rank(make_facts: MakeFacts) -> None:
    result = plan(make_facts(soc="A3", numa={0: R(32)}, npus=8))
    text = result.explain(rank=1)
    assert "*1    1    0" in text
    assert "8 NPUs need at least 40 CPUs" in text and "NOT APPLICABLE" in text


def test_for_rank_out_of_range(make_facts: MakeFacts) -> None:
    result = plan(make_facts(numa={0: R(20)}, npus=2))
    assert result.for_rank(1).npu == 1
    with pytest.raises(PlanError, match="rank 2 is out of range: the plan has 2 NPUs"):
        result.for_rank(2)


@pytest.mark.parametrize("bad", [0, -1, 2000, True, "5"])
def test_plan_options_validate_min_cpus(bad: object) -> None:
    with pytest.raises(PlanError, match="min_cpus_per_npu"):
        PlanOptions(min_cpus_per_npu=bad)  # type: ignore[arg-type]


@st.composite
def hosts(draw: st.DrawFn) -> HostFacts:
    nodes = draw(st.integers(1, 4))
    per_node = draw(st.integers(1, 24))
    numa = {n: tuple(range(n * per_node, (n + 1) * per_node)) for n in range(nodes)}
    all_cpus = [c for cpus in numa.values() for c in cpus]
    npus = draw(st.integers(1, 8))
    cpu_sets = st.lists(st.sampled_from(all_cpus), min_size=0, max_size=len(all_cpus))
    affinity = draw(st.dictionaries(st.integers(0, npus - 1), cpu_sets.map(lambda c: tuple(
        sorted(set(c)))), max_size=npus))
    return HostFacts(
        soc=draw(st.sampled_from(["A2", "A3", "A5", "310P"])),
        numa=numa,
        allowed_cpus=tuple(sorted(set(draw(cpu_sets)))),
        chip_map={i: {0: i} for i in range(npus)},
        running_npus=tuple(draw(st.lists(st.integers(0, npus - 1), max_size=npus))),
        affinity={n: c for n, c in affinity.items() if c},
        threads_per_core=draw(st.integers(1, 3)),
        visible_devices=draw(st.none() | st.lists(st.integers(0, 9), max_size=4).map(tuple)),
    )


@pytest.mark.slow
@settings(max_examples=200, deadline=None, database=None, derandomize=True)
@given(hosts(), st.integers(1, 8), st.booleans())
def test_planner_on_random_hosts_gives_disjoint_allowed_pools(
    facts: HostFacts, min_cpus: int, bind_irq: bool
) -> None:
    result = plan(facts, PlanOptions(min_cpus_per_npu=min_cpus, bind_irq=bind_irq))
    used = [c for p in result.npus for c in p.cpus]
    assert len(used) == len(set(used))
    assert set(used) <= set(facts.allowed_cpus)
    for p in result.npus:
        assert set(p.main) | set(p.acl) | set(p.release) | set(p.irq) <= set(p.cpus)
        assert 0.0 <= p.quality <= 1.0
    if result.ok:
        assert all(len(p.cpus) >= min_cpus for p in result.npus)
    else:
        assert result.reason


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


def test_default_minimum_is_3_on_950_and_5_elsewhere() -> None:
    assert {soc: default_min_cpus_per_npu(soc) for soc in ("A2", "A3", "A5", "310P")} == {
        "A2": 5, "A3": 5, "A5": 3, "310P": 5}
    assert PlanOptions().min_cpus_per_npu is None


@pytest.mark.parametrize(
    ("soc", "cpus", "ok"),
    [
        # Ascend 950: 3 per NPU, so 2 NPUs need 6 CPUs.
        ("A5", 5, False), ("A5", 6, True), ("A5", 7, True),
        # Every other SoC: 5 per NPU, so 2 NPUs need 10 CPUs.
        ("A2", 9, False), ("A2", 10, True), ("A2", 11, True),
        ("A3", 9, False), ("A3", 10, True),
        ("310P", 9, False), ("310P", 10, True),
    ],
)
def test_default_minimum_at_below_and_above(
    make_facts: MakeFacts, soc: str, cpus: int, ok: bool
) -> None:
    # Two NPUs share all CPUs of one node. A2/310P split the shared pool by average
    # distribution (the last NPU takes the odd CPU); A3 and Ascend 950 without room for
    # whole clusters slice it (the first NPU takes the odd CPU).
    facts = make_facts(soc=soc, numa={0: R(cpus)}, affinity={0: R(cpus), 1: R(cpus)})
    result = plan(facts)
    minimum = 3 if soc == "A5" else 5
    assert result.ok is ok, result.problems
    assert result.options.min_cpus_per_npu == minimum
    assert json.loads(result.to_json())["options"]["min_cpus_per_npu"] == minimum
    half, odd = divmod(cpus, 2)
    sizes = [half, half + odd] if soc in ("A2", "310P") else [half + odd, half]
    assert [len(p.cpus) for p in result.npus] == sizes
    if not ok:
        assert any(f"({minimum} per NPU)" in p for p in result.problems)


def test_950_pools_of_3_are_all_main_without_irq_cpus(make_facts: MakeFacts) -> None:
    facts = make_facts(soc="A5", numa={0: R(6)}, affinity={0: R(6), 1: R(6)})
    result = plan(facts, PlanOptions(bind_irq=True))
    assert result.ok
    assert [(p.cpus, p.main, p.acl, p.release, p.irq) for p in result.npus] == [
        ((0, 1, 2), (0, 1, 2), (), (), ()), ((3, 4, 5), (3, 4, 5), (), (), ())]


@pytest.mark.parametrize(("soc", "minimum", "ok"), [("A5", 4, False), ("A2", 3, True),
                                                    ("A5", 3, True), ("A2", 4, False)])
def test_an_explicit_minimum_is_used_as_given(
    make_facts: MakeFacts, soc: str, minimum: int, ok: bool
) -> None:
    facts = make_facts(soc=soc, numa={0: R(6)}, affinity={0: R(6), 1: R(6)})
    result = plan(facts, PlanOptions(min_cpus_per_npu=minimum))
    assert result.ok is ok and result.options.min_cpus_per_npu == minimum


def test_950_with_6_cpus_binds(make_facts: MakeFacts) -> None:
    facts = make_facts(soc="A5", numa={0: R(6)}, affinity={0: R(6), 1: R(6)})
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"],
                             stdin=subprocess.PIPE)
    try:
        report = apply(plan(facts), 0, pid=child.pid)
        assert report.bound and report.npu == 0, report.skipped
        # Pool 0-2; the kernel keeps the CPUs of it that this machine has.
        expected = sorted(set(R(3)) & os.sched_getaffinity(0))
        assert psutil.Process(child.pid).cpu_affinity() == expected
    finally:
        child.kill()
        child.wait()
