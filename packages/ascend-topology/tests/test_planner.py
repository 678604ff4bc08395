from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from ascend_topology import HostFacts, PlanError, PlanOptions, load_recorded_host, plan
from ascend_topology.planner import split_roles

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
