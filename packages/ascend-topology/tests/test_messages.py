"""Every error, problem and note the package words, checked word for word (they are what a
user reads; the README promises one clear line each)."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from ascend_topology import (
    CommandError,
    HostFacts,
    ParseError,
    PlanOptions,
    RecordedHostError,
    TopologyError,
    example_host_dir,
    load_recorded_host,
    parse_cpu_list,
    plan,
)
from ascend_topology.cpulist import check_cpu_id, check_cpu_ids, looks_like_cpu_list
from ascend_topology.facts import build_host_facts, parse_visible_devices
from ascend_topology.npu_smi import detect_soc, parse_chip_map, parse_running_npus
from ascend_topology.pools import cluster_pools, topo_affinity_pools
from ascend_topology.system import (
    parse_lscpu_nodes,
    read_allowed_cpus,
    read_thread_names,
    run_command,
)

R = range
MakeFacts = Callable[..., HostFacts]


def _message(error: type[Exception], call: Callable[[], object]) -> str:
    with pytest.raises(error) as caught:
        call()
    return str(caught.value)


# --- CPU lists -----------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "message"), [
    ("a", "bad CPU list 'a': 'a' is not 'N' or 'N-M'"),
    ("1-", "bad CPU list '1-': '1-' is not 'N' or 'N-M'"),
    ("1-2-3", "bad CPU list '1-2-3': '1-2-3' is not 'N' or 'N-M'"),
    ("0, 3-1", "bad CPU list '0, 3-1': range '3-1' runs backwards"),
    ("8190-8192", "bad CPU list '8190-8192': CPU 8192 is outside 0..8191"),
    ("1234567", "bad CPU list '1234567': '1234567' is not 'N' or 'N-M'"),
    ("\u00b2", "bad CPU list '\u00b2': '\u00b2' is not 'N' or 'N-M'"),
    # Long values are cut: 60 characters of the list, 20 of the part (quotes included).
    ("9" * 100, f"bad CPU list '{'9' * 59}: '{'9' * 19} is not 'N' or 'N-M'"),
])
def test_cpu_list_errors(text: str, message: str) -> None:
    assert _message(ParseError, lambda: parse_cpu_list(text)) == message


@pytest.mark.parametrize(("text", "cpus"), [
    ("123456", None), ("8191", [8191]), ("8190-8191", [8190, 8191]), (" 1 - 2 ,", [1, 2]),
    ("0,,2", [0, 2]), ("", []), (" , ", []),
])
def test_cpu_list_edges(text: str, cpus: list[int] | None) -> None:
    if cpus is None:  # six digits is an id, but above the cap
        assert "is outside 0..8191" in _message(ParseError, lambda: parse_cpu_list(text))
    else:
        assert parse_cpu_list(text) == cpus


def test_cpu_id_checks() -> None:
    assert check_cpu_id(0) == 0 and check_cpu_id(8191) == 8191
    assert _message(ParseError, lambda: check_cpu_id(-1)) == "CPU id -1 is outside 0..8191"
    assert _message(ParseError, lambda: check_cpu_id(8192, "X")) == "X 8192 is outside 0..8191"
    assert _message(ParseError, lambda: check_cpu_id(False)) == (
        "CPU id False is not an integer CPU id")
    assert check_cpu_ids([5, 1, 5]) == [1, 5]
    assert _message(ParseError, lambda: check_cpu_ids([1, "x"], "L")) == (
        "L: CPU 'x' is not an integer CPU id")
    assert _message(ParseError, lambda: check_cpu_ids([9999])) == (
        "CPU list: CPU 9999 is outside 0..8191")


@pytest.mark.parametrize(("text", "shape"), [
    ("144-167", True), ("0-47,96-143", True), (" 1 , 2-3 ,", True), ("1,", True),
    ("HCCS", False), ("-1", False), ("1-2-3", False), ("1,,2", False), ("", False),
    ("0-47\nx", False),
])
def test_cpu_list_shape(text: str, shape: bool) -> None:
    assert looks_like_cpu_list(text) is shape


# --- npu-smi -------------------------------------------------------------------------------

def test_chip_map_errors() -> None:
    assert _message(ParseError, lambda: parse_chip_map("0 0 0 Ascend\n")) == (
        "npu-smi info -m: no header row with an 'NPU ID' column")
    assert _message(ParseError, lambda: parse_chip_map("NPU ID Chip ID\n0 0\n")) == (
        "npu-smi info -m: header columns must be separated by two or more spaces; got "
        "'NPU ID Chip ID'")


def test_chip_map_columns_found_by_name() -> None:
    # Chip Logic ID before NPU ID; ids with 7 digits are garbage; short rows are skipped.
    text = ("Chip Logic ID  Chip ID  NPU ID\n"
            "5  0  1\n6  1  1\n1234567  0  2\n7  0  1234567\n3  0\n")
    assert parse_chip_map(text) == {1: {0: 5, 1: 6}}
    # Without a Chip ID column every row is chip 0.
    assert parse_chip_map("NPU ID  Chip Logic ID\n4  9\n") == {4: {0: 9}}
    # Header words may be split by tabs; the first header wins.
    assert parse_chip_map("x\nNPU ID\tChip ID\n3\t0\nNPU ID  Chip ID\n") == {3: {0: 3}}


def test_running_npus_errors_and_fallbacks() -> None:
    text = "| NPU ID | Process id |\n| 4 | 1 |\n"
    assert _message(ParseError, lambda: parse_running_npus(text, {4: {0: 8, 1: 9}})) == (
        "npu-smi info: process row names NPU 4 without a chip, but NPU 4 has 2 chips in "
        "npu-smi info -m; cannot tell which one runs it")
    assert parse_running_npus(text, {}) == [4]  # no chip map: the NPU id is the only reading
    assert parse_running_npus(text, {5: {0: 5}}) == []  # an NPU the map does not know
    with_chip = "| NPU  Chip | Process id |\n| 4  1 | 1 |\n| 6 | 2 |\n"
    assert parse_running_npus(with_chip, {}) == [4]
    assert parse_running_npus(with_chip, {4: {0: 8}}) == []


def test_running_npus_header_must_start_with_npu() -> None:
    text = "| Name | Process id |\n| 4 | 1 |\n| NPU ID | Process id |\n| 2 | 1 |\n"
    assert parse_running_npus(text, {2: {0: 2}, 4: {0: 4}}) == [2]


@pytest.mark.parametrize(("chip_map_text", "info", "chips", "soc"), [
    ("x 950PR y", "", {0: {0: 0}}, "A5"),
    ("", "Ascend 950", {0: {0: 0}}, "A5"),
    ("950 MB", "", {0: {0: 0}}, "A2"),
    ("", "310P3", {0: {0: 0}}, "310P"),
    ("Ascend910_9391", "", {0: {0: 0}}, "A3"),
    ("", "", {0: {0: 0}, 1: {0: 1}}, "A2"),
    ("", "", {0: {0: 0, 1: 1}}, "A3"),
])
def test_detect_soc_cases(chip_map_text: str, info: str, chips: dict[int, dict[int, int]],
                          soc: str) -> None:
    assert detect_soc(chip_map_text, info, chips) == soc


@pytest.mark.parametrize(("chip_map_text", "info_text", "soc"), [
    ("NPU ID  Chip ID\n0  0  Ascend310P3\n", "", "310P"),
    ("NPU ID  Chip ID\n0  0\n", "| 0  310P3 | OK |", "310P"),
    ("NPU ID  Chip ID\n0  0\n", "", "A2"),
])
def test_soc_detected_from_both_outputs(chip_map_text: str, info_text: str, soc: str) -> None:
    facts = build_host_facts(chip_map_text=chip_map_text, info_text=info_text, topo_text="",
                             numa={0: [0]}, allowed_cpus=[0])
    assert facts.soc == soc
    assert build_host_facts(chip_map_text=chip_map_text, info_text=info_text, topo_text="",
                            numa={0: [0]}, allowed_cpus=[0], soc="A3").soc == "A3"


def test_host_facts_need_an_npu() -> None:
    assert _message(ParseError, lambda: build_host_facts(
        chip_map_text="NPU ID  Chip ID\n-  0\n", info_text="", topo_text="",
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


# --- host facts ----------------------------------------------------------------------------

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
    facts = build_host_facts(chip_map_text=chip, info_text="", topo_text="",
                             numa={2: [5, 4], 0: [], 1: [1]}, allowed_cpus=[5, 1, 1])
    assert dict(facts.numa) == {1: (1,), 2: (5, 4)} and list(facts.numa) == [1, 2]
    assert facts.allowed_cpus == (1, 5)
    assert (facts.soc, facts.arch, facts.source, facts.threads_per_core) == (
        "A2", "unknown", "live", 1)
    assert facts.pcie == {} and facts.visible_devices is None


# --- system --------------------------------------------------------------------------------

def test_command_errors(tmp_path: Path) -> None:
    assert _message(CommandError, lambda: run_command([])) == "run_command needs a program name"
    assert _message(CommandError, lambda: run_command(["no-such-program-x", "a"])) == (
        "'no-such-program-x' was not found on PATH (needed for `no-such-program-x a`)")
    script = tmp_path / "not-executable"
    script.write_text("#!/bin/sh\n")
    assert _message(CommandError, lambda: run_command([str(script), "b"])) == (
        f"`{script} b` could not run: Permission denied")
    code = "raise SystemExit(4)"
    assert _message(CommandError, lambda: run_command([sys.executable, "-c", code])) == (
        f"`{sys.executable} -c {code}` exited with status 4")


def test_command_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    code = "import os; print(os.environ.get('KEEP'), os.environ['LC_MESSAGES'])"
    monkeypatch.setenv("KEEP", "os-env")
    assert run_command([sys.executable, "-c", code]).split() == ["os-env", "C"]
    assert run_command([sys.executable, "-c", code], environ={"KEEP": "given"}).split() == [
        "given", "C"]


def test_a_quick_command_within_a_short_timeout() -> None:
    assert run_command(["true"], timeout=0.99) == ""


def test_command_output_is_decoded_leniently() -> None:
    code = "import sys; sys.stdout.buffer.write(b'ok \\xff')"
    assert run_command([sys.executable, "-c", code]) == "ok \ufffd"


@pytest.mark.parametrize(("text", "nodes"), [
    ("0 0\n1 1\n", {0: [0], 1: [1]}),
    ("CPU NODE\n 3  1 extra\n2 1\n", {1: [2, 3]}),
    ("99999 0\n100000 0\n1 123456\n4 0\n", None),
    ("123456 0\n7 0\n2 99999\n", {0: [7], 99999: [2]}),
    ("x 0\n0 y\n5\n7 0\n", {0: [7]}),
    ("\u0663 0\n8 0\n", {0: [8]}),
])
def test_lscpu_rows(text: str, nodes: dict[int, list[int]] | None) -> None:
    if nodes is None:  # a 5-digit CPU id is read, and capped
        assert _message(ParseError, lambda: parse_lscpu_nodes(text)) == (
            "lscpu -e=CPU,NODE: CPU 99999 is outside 0..8191")
    else:
        assert parse_lscpu_nodes(text) == nodes


def test_lscpu_without_rows() -> None:
    assert _message(ParseError, lambda: parse_lscpu_nodes("1 123456\n")) == (
        "lscpu -e=CPU,NODE: no 'CPU NODE' rows of two integers found")


def test_process_readers_name_the_process(tmp_path: Path) -> None:
    gone = 2**22 + 4321
    assert _message(TopologyError, lambda: read_allowed_cpus(gone)).startswith(
        f"cannot read the CPU affinity of process {gone}: [Errno 3] No such process")
    assert read_allowed_cpus() == sorted(os.sched_getaffinity(0))
    assert _message(TopologyError, lambda: read_thread_names(gone, tmp_path)) == (
        f"cannot list the threads of process {gone}: No such file or directory")
    (tmp_path / "5" / "task" / "self").mkdir(parents=True)
    (tmp_path / "5" / "task" / "6").mkdir(parents=True)
    (tmp_path / "5" / "task" / "7").mkdir(parents=True)
    (tmp_path / "5" / "task" / "7" / "comm").write_text(" name \n")
    assert read_thread_names(5, tmp_path) == {7: "name"}  # 6 has no comm, "self" no id


# --- recorded hosts ------------------------------------------------------------------------

def test_recorded_host_messages(tmp_path: Path) -> None:
    assert _message(RecordedHostError, lambda: load_recorded_host(tmp_path / "none")) == (
        f"--host '{tmp_path}/none': not a folder and not an example host (310p, 950-4numa, "
        "a2-8npu, a3-16die, x86-a2)")
    assert _message(RecordedHostError, lambda: load_recorded_host("a2\0")) == (
        "--host 'a2\\x00' contains a NUL byte; paths cannot hold one")
    (tmp_path / "host.json").write_text("{}")
    assert _message(RecordedHostError, lambda: load_recorded_host(tmp_path)) == (
        f"recorded host {tmp_path}: host.json has no 'numa' and there is no lscpu-e.txt")
    (tmp_path / "lscpu-e.txt").write_text("CPU NODE\n")
    assert _message(RecordedHostError, lambda: load_recorded_host(tmp_path)) == (
        f"{tmp_path}/lscpu-e.txt: lscpu -e=CPU,NODE: no 'CPU NODE' rows of two integers found")
    (tmp_path / "lscpu-e.txt").write_text("0 0\n")
    assert _message(RecordedHostError, lambda: load_recorded_host(tmp_path)) == (
        f"recorded host {tmp_path}: missing npu-smi-info-m.txt")
    (tmp_path / "npu-smi-info-m.txt").write_text("NPU ID  Chip ID\n")
    assert _message(RecordedHostError, lambda: load_recorded_host(tmp_path)) == (
        f"recorded host {tmp_path}: npu-smi info -m lists no NPU (no row with numeric ids)")
    (tmp_path / "npu-smi-info-m.txt").write_text("NPU ID  Chip ID\n0  0\n")
    facts = load_recorded_host(tmp_path)
    assert (facts.soc, facts.allowed_cpus, facts.logic_npus, facts.arch) == (
        "A2", (0,), (0,), "unknown")


def test_a_relative_example_name_needs_no_slash(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert load_recorded_host("a2-8npu").soc == "A2"  # no folder of that name here
    (tmp_path / "a2-8npu").mkdir()  # a folder of that name wins over the example
    assert "missing host.json" in _message(RecordedHostError,
                                           lambda: load_recorded_host("a2-8npu"))
    assert "not a folder" in _message(RecordedHostError,
                                      lambda: load_recorded_host("./x/a2-8npu"))


# --- planner notes and problems ------------------------------------------------------------

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


def test_topology_error_carries_each_problem() -> None:
    import pickle

    error = RecordedHostError("first", "second")
    assert (str(error), error.problems, error.args) == ("first; second", ("first", "second"),
                                                        ("first", "second"))
    again = pickle.loads(pickle.dumps(error))
    assert type(again) is RecordedHostError and again.problems == ("first", "second")
    assert str(ParseError("only")) == "only" and ParseError("only").args == ("only",)


def test_unreadable_recorded_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "host"
    folder.mkdir()
    (folder / "host.json").write_text('{"numa": {"0": "0"}}')
    real_open = os.open

    def denied(path: object, flags: int, *args: object, **kwargs: object) -> int:
        if str(path).endswith("npu-smi-info-m.txt"):
            raise PermissionError(13, "Permission denied")
        return real_open(path, flags, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "open", denied)
    assert _message(RecordedHostError, lambda: load_recorded_host(folder)) == (
        f"recorded host {folder}: cannot read npu-smi-info-m.txt: Permission denied")


def test_allowed_cpus_may_be_a_subset(tmp_path: Path) -> None:
    (tmp_path / "host.json").write_text('{"numa": {"0": "0-7"}, "allowed_cpus": "2-3"}')
    (tmp_path / "npu-smi-info-m.txt").write_text("NPU ID  Chip ID\n0  0\n")
    facts = load_recorded_host(tmp_path)
    assert facts.allowed_cpus == (2, 3) and dict(facts.numa) == {0: tuple(R(8))}
