"""The plan's renderings (``explain``, ``to_json``: a public contract) and ``from_dict``, with
expected texts written out by hand."""

from __future__ import annotations

import json

import pytest
from ascend_topology import (
    NpuPlan,
    Plan,
    PlanError,
    PlanOptions,
    make_synthetic_host,
    plan,
)

WIDE = NpuPlan(npu=3, numa_node=1, cpus=(8, 9, 10, 11, 12), main=(10,), acl=(11,),
               release=(12,), irq=(8, 9), quality=0.6)
BARE = NpuPlan(npu=5, numa_node=0, cpus=(0,), main=(0,), quality=1 / 3)


def _plan(**changes: object) -> Plan:
    fields: dict[str, object] = {
        "soc": "A2", "mode": "topo_affinity", "npus": (WIDE, BARE),
        "options": PlanOptions(min_cpus_per_npu=5, bind_irq=True, migrate_memory=False),
        "numa_nodes": (0, 1), "uvb_cpus": (1, 2, 3), "problems": ("too few CPUs",),
        "notes": ("first note", "second note"), "source": "rack-7",
    }
    fields.update(changes)
    return Plan(**fields)  # type: ignore[arg-type]


def test_explain_full_table() -> None:
    assert _plan().explain(rank=1) == "\n".join([
        "CPU plan for A2 host rack-7",
        "mode topo_affinity, min 5 CPUs/NPU, IRQ binding on, memory migration off",
        "",
        "rank  NPU  NUMA  on-node  CPUs  main  acl  release  irq",
        "0     3    1     60%      8-12  10    11   12       8-9",
        "*1    5    0     33%      0     0     -    -        -",
        "UVB poll threads: 1-3",
        "",
        "NOT APPLICABLE as configured (the table shows the best valid plan):",
        "  - too few CPUs",
        "",
        "note: first note",
        "note: second note",
    ])


def test_explain_minimal() -> None:
    plan = _plan(options=PlanOptions(min_cpus_per_npu=3, bind_irq=False, migrate_memory=True),
                 npus=(BARE,), uvb_cpus=(), problems=(), notes=(), source="")
    assert plan.explain() == "\n".join([
        "CPU plan for A2 host (unnamed)",
        "mode topo_affinity, min 3 CPUs/NPU, IRQ binding off, memory migration on",
        "",
        "rank  NPU  NUMA  on-node  CPUs  main  acl  release  irq",
        "0     5    0     33%      0     0     -    -        -",
    ])


def test_to_json_layout_is_one_line_per_entry_and_key() -> None:
    text = _plan().to_json()
    assert text.splitlines() == [
        "{",
        '  "npus": [',
        '    {"npu": 3, "numa_node": 1, "cpus": [8, 9, 10, 11, 12], "main": [10], "acl": [11], '
        '"release": [12], "irq": [8, 9], "quality": 0.6},',
        '    {"npu": 5, "numa_node": 0, "cpus": [0], "main": [0], "acl": [], "release": [], '
        '"irq": [], "quality": 0.3333}',
        "  ],",
        '  "ok": false,',
        '  "soc": "A2",',
        '  "mode": "topo_affinity",',
        '  "options": {"min_cpus_per_npu": 5, "bind_irq": true, "migrate_memory": false},',
        '  "numa_nodes": [0, 1],',
        '  "uvb_cpus": [1, 2, 3],',
        '  "problems": ["too few CPUs"],',
        '  "notes": ["first note", "second note"],',
        '  "source": "rack-7"',
        "}",
    ]
    empty = _plan(npus=()).to_json().splitlines()
    assert empty[:3] == ["{", '  "npus": [],', '  "ok": false,']


def test_ok_needs_no_problems_and_some_npus() -> None:
    assert _plan(problems=()).ok is True and _plan(problems=()).reason is None
    assert _plan(problems=(), npus=()).ok is False
    assert _plan(problems=(), npus=()).reason == "no NPU to plan for"
    assert _plan(problems=("a", "b")).reason == "a; b"


def test_from_dict_round_trips_every_field() -> None:
    plan = _plan()
    assert Plan.from_dict(json.loads(plan.to_json())) == Plan(
        **{**plan.__dict__, "npus": (WIDE, NpuPlan(npu=5, numa_node=0, cpus=(0,), main=(0,),
                                                   quality=0.3333))})


def test_from_dict_defaults_for_optional_keys() -> None:
    data = {"soc": "A3", "npus": [{"npu": 1, "numa_node": 2, "cpus": [4, 5], "main": [4]}]}
    assert Plan.from_dict(data) == Plan(
        soc="A3", mode="none", npus=(NpuPlan(npu=1, numa_node=2, cpus=(4, 5), main=(4,)),),
        options=PlanOptions(), numa_nodes=(), uvb_cpus=(), problems=(), notes=(), source="")


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"npus": []}, "not a plan object: KeyError('soc')"),
        ({"soc": "A2", "npus": [{"npu": 0}]}, "not a plan object: KeyError('numa_node')"),
        ({"soc": "A2", "npus": [], "options": {"min_cpus_per_npu": 0}},
         "not a plan object: min_cpus_per_npu must be 1..1024; got 0"),
        ({"soc": "A2", "npus": [], "options": {"colour": 1}}, "not a plan object: TypeError"),
        ({"soc": "A2", "npus": [], "uvb_cpus": [9000]},
         "not a plan object: CPU id 9000 is outside 0..8191"),
        ({"soc": "A2", "npus": 5}, "not a plan object: TypeError"),
    ],
)
def test_from_dict_rejects_bad_objects(data: dict[str, object], message: str) -> None:
    with pytest.raises(PlanError) as caught:
        Plan.from_dict(data)
    assert str(caught.value).startswith(message)


def test_for_rank_messages() -> None:
    with pytest.raises(PlanError) as caught:
        _plan().for_rank(2)
    assert str(caught.value) == ("rank 2 is out of range: the plan has 2 NPUs (3,5); rank "
                                 "indexes the sorted running, visible NPUs")
    with pytest.raises(PlanError, match=r"rank -1 is out of range"):
        _plan().for_rank(-1)
    with pytest.raises(PlanError, match=r"the plan has 0 NPUs \(none\)"):
        _plan(npus=()).for_rank(0)
    assert _plan().for_rank(0) is WIDE and _plan().for_rank(1) is BARE


def test_plan_objects_are_capped() -> None:
    good = plan(make_synthetic_host(npus=1, cpus=8, numa_nodes=1)).to_dict()
    assert Plan.from_dict(good).npus[0].cpus == tuple(range(8))
    for bad in (10**30, True, 8192, "3"):
        data = json.loads(json.dumps(good))
        data["npus"][0]["cpus"][0] = bad
        with pytest.raises(PlanError, match="not a plan object"):
            Plan.from_dict(data)


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
