"""``HostFacts``: what a host must hold, its caps, building it from parsed outputs, ``to_dict``."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from ascend_topology import (
    HostFacts,
    ParseError,
    TopologyError,
    example_host_dir,
)
from ascend_topology.facts import build_host_facts, parse_visible_devices


def test_host_facts_built_in_python_are_capped() -> None:
    with pytest.raises(TopologyError, match="allowed CPUs: CPU 8192 is outside"):
        HostFacts(soc="A2", numa={0: (0, 1)}, allowed_cpus=(0, 8192))
    with pytest.raises(TopologyError, match="NPU 0 affinity: CPU True is not an integer"):
        HostFacts(soc="A2", numa={0: (0, 1)}, allowed_cpus=(0,), affinity={0: (True,)})
    with pytest.raises(TopologyError, match="NUMA node 1: CPU -1 is outside"):
        HostFacts(soc="A2", numa={0: (0,), 1: (-1,)}, allowed_cpus=(0,))
    assert HostFacts(soc="A2", numa={0: (8191,)}, allowed_cpus=(8191,)).allowed_cpus == (8191,)


def _message(error: type[Exception], call: Callable[[], object]) -> str:
    with pytest.raises(error) as caught:
        call()
    return str(caught.value)


def test_host_facts_need_an_npu() -> None:
    assert _message(ParseError, lambda: build_host_facts(
        chip_map_text="NPU ID  Chip ID\n-  0\n", info_text=None, topo_text="",
        numa={0: [0]}, allowed_cpus=[0])) == (
        "npu-smi info -m lists no NPU (no row with numeric ids)")


@pytest.mark.parametrize(("text", "result"), [
    (None, None), ("", None), ("  ", None), ("3", (3,)), (" 1 , 0 ", (1, 0)),
    ("123456", (123456,)),
])
def test_visible_devices(text: str | None, result: tuple[int, ...] | None) -> None:
    assert parse_visible_devices(text) == result


@pytest.mark.parametrize("text", ["1234567", "0,", "a", "\u0663"])
def test_visible_devices_errors(text: str) -> None:
    part = text.split(",")[-1].strip()
    assert _message(ParseError, lambda: parse_visible_devices(text)) == (
        f"visible devices {text!r}: {part!r} is not a device id; expected comma-separated "
        "integers like '0,1'")


def test_host_facts_to_dict() -> None:
    facts = HostFacts(soc="A3", numa={1: (4, 5), 0: (0, 1)}, allowed_cpus=(0, 4, 5),
                      chip_map={0: {0: 0, 1: 1}}, running_npus=(1,), affinity={1: (4, 5)},
                      threads_per_core=2, visible_devices=(1, 0), arch="aarch64",
                      pcie={1: "0000:c2:00.0"}, source="s", rc_source="not a 310P host")
    assert facts.to_dict() == {
        "source": "s", "soc": "A3", "arch": "aarch64", "npus": [0, 1], "running_npus": [1],
        "visible_devices": [1, 0], "allowed_cpus": "0,4-5", "threads_per_core": 2,
        "numa": {"0": "0-1", "1": "4-5"}, "affinity": {"1": "4-5"},
        "pcie": {"1": "0000:c2:00.0"}, "rc_device": False, "rc_source": "not a 310P host"}
    assert facts.node_of() == {0: 0, 1: 0, 4: 1, 5: 1}


def test_logic_npus_fall_back_to_topology_then_running() -> None:
    base = {"soc": "A2", "numa": {0: (0,)}, "allowed_cpus": (0,)}
    assert HostFacts(**base, affinity={3: (0,), 1: (0,)}, running_npus=(7,)).logic_npus == (
        1, 3)
    assert HostFacts(**base, running_npus=(7, 2, 7)).logic_npus == (2, 7)
    assert HostFacts(**base).logic_npus == ()
    assert HostFacts(**base, chip_map={0: {0: 4, 1: 2}}, affinity={9: (0,)}).logic_npus == (
        2, 4)


def test_build_host_facts_drops_empty_nodes_and_sorts() -> None:
    chip = (example_host_dir("a2-8npu") / "npu-smi-info-m.txt").read_text()
    facts = build_host_facts(chip_map_text=chip, info_text=None, topo_text="",
                             numa={2: [5, 4], 0: [], 1: [1]}, allowed_cpus=[5, 1, 1])
    assert dict(facts.numa) == {1: (1,), 2: (5, 4)} and list(facts.numa) == [1, 2]
    assert facts.allowed_cpus == (1, 5)
    assert (facts.soc, facts.arch, facts.source, facts.threads_per_core) == (
        "A2", "unknown", "live", 1)
    assert facts.pcie == {} and facts.visible_devices is None


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
