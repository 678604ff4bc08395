"""Hypothesis (derandomized, bounded): parsers and the planner only ever raise the package's
TopologyError types, and what they return holds its invariants."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest
from ascend_topology import (
    MAX_CPU_ID,
    HostFacts,
    PlanOptions,
    RecordedHostError,
    TopologyError,
    example_host_dir,
    format_cpu_list,
    load_recorded_host,
    parse_cpu_list,
    plan,
)
from ascend_topology.facts import parse_visible_devices
from ascend_topology.npu_smi import (
    is_pci_address,
    logic_npus,
    parse_board_pcie,
    parse_chip_map,
    parse_npu_irqs,
    parse_running_npus,
    parse_topo_affinity,
)
from ascend_topology.pools import overlap_groups
from ascend_topology.system import parse_lscpu_nodes, parse_threads_per_core
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

# Seconds per suite: marked slow so that mutation runs, which repeat every covering test for
# each mutant, leave them out; the package's normal test command runs them.
pytestmark = pytest.mark.slow
T = TypeVar("T")
FUZZ = settings(max_examples=150, deadline=None, database=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
SAMPLES = {
    name: example_host_dir(ex).joinpath(name).read_text()
    for ex, name in [("a2-8npu", "npu-smi-info-m.txt"), ("a3-16die", "npu-smi-info.txt"),
                     ("950-4numa", "npu-smi-info.txt"), ("a2-8npu", "npu-smi-info-t-topo.txt"),
                     ("x86-a2", "lscpu-e.txt")]
}
TOKENS = [*"0123456789 -,|+=:\t\nABCDEFX", "NPU", "NPU ID", "Chip", "Chip Logic ID",
          "Process id", "CPU Affinity", "PCIe Bus Info", "sq_send_trigger_irq",
          "Thread(s) per core:", "  ", "\u00a0", "\u0663", "\u00b2", "99999999999"]
ALPHABET = st.lists(st.sampled_from(TOKENS), max_size=80).map("".join)


@st.composite
def mutated(draw: st.DrawFn) -> str:
    """A sample npu-smi/lscpu output with random edits: deletions, insertions, shuffles."""
    text = draw(st.sampled_from(sorted(SAMPLES.values())))
    lines = text.splitlines()
    for _ in range(draw(st.integers(0, 6))):
        if not lines:
            break
        op = draw(st.sampled_from(["drop", "dup", "swap", "insert", "cut", "junk"]))
        i = draw(st.integers(0, len(lines) - 1))
        if op == "drop":
            del lines[i]
        elif op == "dup":
            lines.insert(i, lines[i])
        elif op == "swap":
            j = draw(st.integers(0, len(lines) - 1))
            lines[i], lines[j] = lines[j], lines[i]
        elif op == "insert":
            lines.insert(i, draw(ALPHABET))
        elif op == "cut":
            k = draw(st.integers(0, max(len(lines[i]), 0)))
            lines[i] = lines[i][:k]
        else:
            k = draw(st.integers(0, len(lines[i])))
            lines[i] = lines[i][:k] + draw(ALPHABET) + lines[i][k:]
    return "\n".join(lines)


TEXTS = st.one_of(mutated(), st.text(max_size=300), ALPHABET)
CHIP_MAPS = st.dictionaries(st.integers(0, 9), st.dictionaries(st.integers(0, 2),
                                                               st.integers(0, 20), max_size=3),
                            max_size=5)


def _result_or_error(parse: Callable[[], T]) -> T | None:
    """``parse()``'s result, or None when it raised a one-line ``TopologyError``; any other
    exception fails the test."""
    try:
        return parse()
    except TopologyError as exc:
        assert exc.problems and all(p and "\n" not in p for p in exc.problems)
        return None


@FUZZ
@given(TEXTS, CHIP_MAPS)
@example("NPU ID  Chip ID\n\u00b2 0\n| NPU ID | Process id |\n| \u00b2 | 1 |", {})
def test_npu_smi_parsers(text: str, chip_map: dict[int, dict[int, int]]) -> None:
    parsed = _result_or_error(lambda: parse_chip_map(text))
    for npu, chips in (parsed or {}).items():
        assert npu >= 0 and all(c >= 0 and logic >= 0 for c, logic in chips.items())
    running = _result_or_error(lambda: parse_running_npus(text, chip_map))
    if running is not None:
        assert running == sorted(set(running))
        # Running NPUs are logical ids of the chip map (or, without a map, NPU ids).
        assert not chip_map or set(running) <= set(logic_npus(chip_map))
    for npu, cpus in (_result_or_error(lambda: parse_topo_affinity(text)) or {}).items():
        assert npu >= 0 and cpus == sorted(set(cpus))
        assert all(0 <= c <= MAX_CPU_ID for c in cpus)
    address = parse_board_pcie(text)
    assert address is None or is_pci_address(address)
    for irq, name in parse_npu_irqs(text).items():
        assert irq >= 0 and name in ("sq_send_trigger_irq", "cq_update_irq") and name in text


@FUZZ
@given(TEXTS)
@example("\u00b2")  # isdigit() but not int()-able
@example("1" * 5000 + "-2")  # beyond int()'s digit limit
@example("0 \u00b2\nThread(s) per core: \u0663")
@example("8191 0\n8192 1\n")
def test_system_and_list_parsers(text: str) -> None:
    nodes = _result_or_error(lambda: parse_lscpu_nodes(text))
    if nodes is not None:
        assert nodes and all(cpus == sorted(set(cpus)) for cpus in nodes.values())
        assert all(0 <= c <= MAX_CPU_ID for cpus in nodes.values() for c in cpus)
    cpus = _result_or_error(lambda: parse_cpu_list(text))
    if cpus is not None:
        assert cpus == sorted(set(cpus)) and all(0 <= c <= MAX_CPU_ID for c in cpus)
        assert parse_cpu_list(format_cpu_list(cpus)) == cpus  # round trip
    devices = _result_or_error(lambda: parse_visible_devices(text))
    if devices is not None:
        assert all(d >= 0 for d in devices)
        assert parse_visible_devices(",".join(map(str, devices))) == (devices or None)
    tpc = parse_threads_per_core(text)
    assert tpc is None or 1 <= tpc <= 999


FILES = ["npu-smi-info-m.txt", "npu-smi-info.txt", "npu-smi-info-t-topo.txt", "host.json",
         "lscpu-e.txt"]
# Files a host's facts cannot depend on: the examples with "numa" in host.json never read
# lscpu-e.txt (x86-a2 has none in host.json and reads it).
UNREAD = {("a2-8npu", "lscpu-e.txt"), ("950-4numa", "lscpu-e.txt")}


@settings(max_examples=60, deadline=None, database=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(["a2-8npu", "x86-a2", "950-4numa"]), st.sampled_from(FILES), TEXTS)
def test_recorded_host_with_a_mutated_file(example: str, name: str, text: str) -> None:
    original = load_recorded_host(example).to_dict() | {"source": ""}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "host"
        shutil.copytree(example_host_dir(example), folder)
        (folder / name).write_text(text)
        try:
            facts = load_recorded_host(folder)
        except RecordedHostError as exc:
            # One line per problem, each naming the folder it is about.
            assert all("\n" not in p and str(folder) in p for p in exc.problems)
            assert (example, name) not in UNREAD
            return
    data = facts.to_dict() | {"source": ""}
    if (example, name) in UNREAD:
        assert data == original
    if name != "host.json":  # what host.json fixes is untouched by the npu-smi outputs
        keys = ["arch", "allowed_cpus", "threads_per_core", "visible_devices", "pcie"]
        if name != "lscpu-e.txt":
            keys.append("numa")
        assert {k: data[k] for k in keys} == {k: original[k] for k in keys}
    result = plan(facts)
    used = [c for p in result.npus for c in p.cpus]
    assert len(used) == len(set(used)) and set(used) <= set(facts.allowed_cpus)
    assert result.ok or result.reason


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
