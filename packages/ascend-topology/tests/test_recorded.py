from __future__ import annotations

import dataclasses
import json
import os
import re
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from ascend_topology import (
    HostFacts,
    RecordedHostError,
    example_host_dir,
    example_hosts,
    load_recorded_host,
    plan,
    threads_per_core,
)
from ascend_topology.recorded import host_meta, write_recorded_host
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .fuzz_checks import check_recorded_host
from .fuzz_inputs import BOUNDED, KEYS, TEXTS, VALUES
from .host_folders import copy_example, edit_meta

R = range
EXAMPLES = ["310p", "950-4numa", "a2-8npu", "a3-16die", "x86-a2"]


def test_bundled_examples_are_listed_and_located() -> None:
    assert example_hosts() == EXAMPLES
    folder = example_host_dir("a2-8npu")
    assert (folder / "host.json").is_file() and (folder / "npu-smi-info-m.txt").is_file()
    with pytest.raises(RecordedHostError, match="unknown example host 'nope'; examples: 310p"):
        example_host_dir("nope")


@pytest.mark.parametrize("name", EXAMPLES)
def test_every_example_loads_and_plans(name: str) -> None:
    facts = load_recorded_host(name)
    assert facts.source == str(example_host_dir(name))
    result = plan(facts)
    assert result.ok, result.reason
    cpus = [c for p in result.npus for c in p.cpus]
    assert len(cpus) == len(set(cpus))  # pools are disjoint


def test_a2_example_facts() -> None:
    facts = load_recorded_host("a2-8npu")
    assert (facts.soc, facts.arch, facts.threads_per_core) == ("A2", "aarch64", 1)
    assert facts.logic_npus == tuple(R(8)) and facts.running_npus == tuple(R(8))
    assert facts.affinity[6] == tuple(R(144, 168))
    assert facts.pcie[0] == "0000:c1:00.0"


def test_a3_example_has_two_dies_per_card() -> None:
    facts = load_recorded_host("a3-16die")
    assert facts.chip_map[7] == {0: 14, 1: 15}
    assert facts.running_npus == tuple(R(16))


def test_310p_example_plans_the_running_chips_only() -> None:
    result = plan(load_recorded_host("310p"))
    assert [(p.npu, p.cpus) for p in result.npus] == [(0, tuple(R(16))), (1, tuple(R(16, 32)))]


def test_x86_example_reads_numa_from_lscpu_and_honours_visible_devices() -> None:
    facts = load_recorded_host("x86-a2")
    assert facts.numa[0] == (*R(48), *R(96, 144)) and facts.visible_devices == (4, 5, 6, 7)
    result = plan(facts)
    assert [p.npu for p in result.npus] == [4, 5, 6, 7]
    assert result.npus[0].cpus == tuple(R(48, 72)) and result.npus[3].cpus == tuple(R(168, 192))


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"soc": "A9"}, "soc: 'A9' is not one of A2, A3, A5, 310P"),
        ({"threads_per_core": 0}, "threads_per_core: must be 1..8; got 0"),
        ({"allowed_cpus": "0-x"}, "allowed_cpus: bad CPU list"),
        ({"allowed_cpus": 5}, "allowed_cpus: must be a CPU list"),
        ({"numa": {"a": "0-3"}}, "numa: key 'a' is not a node id"),
        ({"numa": []}, "numa: must be like"),
        ({"visible_devices": "0,x"}, "visible devices '0,x': 'x' is not a device id"),
        ({"pcie": {"0": 5}}, "pcie: must be like"),
        ({"pcie": {"0": "../../../etc"}}, "pcie: must be like"),
    ],
)
def test_invalid_host_json_names_the_problem(
    tmp_path: Path, changes: dict[str, object], message: str
) -> None:
    folder = copy_example(tmp_path, "a2-8npu")
    edit_meta(folder, **changes)
    with pytest.raises(RecordedHostError, match=message):
        load_recorded_host(folder)


def test_missing_files_are_named(tmp_path: Path) -> None:
    folder = copy_example(tmp_path, "a2-8npu")
    (folder / "npu-smi-info-m.txt").unlink()
    with pytest.raises(RecordedHostError, match=re.escape("missing npu-smi-info-m.txt")):
        load_recorded_host(folder)
    (tmp_path / "empty").mkdir()
    with pytest.raises(RecordedHostError, match=re.escape("missing host.json")):
        load_recorded_host(tmp_path / "empty")
    (tmp_path / "empty" / "host.json").write_text("{")
    with pytest.raises(RecordedHostError, match="not valid JSON"):
        load_recorded_host(tmp_path / "empty")


def test_numa_needs_host_json_or_lscpu(tmp_path: Path) -> None:
    folder = copy_example(tmp_path, "x86-a2")
    (folder / "lscpu-e.txt").unlink()
    with pytest.raises(RecordedHostError, match=re.escape("no 'numa' and there is no lscpu-e.txt")):
        load_recorded_host(folder)


def test_optional_outputs_may_be_missing(tmp_path: Path) -> None:
    folder = copy_example(tmp_path, "a3-16die")
    (folder / "npu-smi-info.txt").unlink()
    (folder / "npu-smi-info-t-topo.txt").unlink()
    result = plan(load_recorded_host(folder))
    assert result.ok and len(result.npus) == 16  # planned for every NPU, with a note
    assert "no running process" in result.notes[0]


def test_write_then_load_round_trips(tmp_path: Path) -> None:
    facts = load_recorded_host("x86-a2")
    source = example_host_dir("x86-a2")
    outputs = {p.name: p.read_text() for p in source.glob("*.txt")}
    written = write_recorded_host(tmp_path / "copy", outputs=outputs, meta=host_meta(facts))
    assert {p.name for p in written} == {*outputs, "host.json"}
    again = load_recorded_host(tmp_path / "copy")
    assert again.to_dict() | {"source": ""} == facts.to_dict() | {"source": ""}


def test_describe_lists_every_fact() -> None:
    facts = load_recorded_host("x86-a2")
    assert facts.describe() == "\n".join([
        f"host: {example_host_dir('x86-a2')}",
        "soc: A2   arch: x86_64",
        "NPUs (logical): 0-7",
        "running NPUs: 0-7",  # unfiltered; the planner applies the visible devices
        "visible devices: 4-7",
        "allowed CPUs: 0-191   threads per core: 2",
        "NUMA node 0: CPUs 0-47,96-143",
        "NUMA node 1: CPUs 48-95,144-191",
        *(f"NPU {n} CPU affinity: {'0-47,96-143' if n < 4 else '48-95,144-191'}"
          for n in range(8)),
    ])


def test_describe_of_a_bare_host() -> None:
    facts = HostFacts(soc="310P", numa={1: (4, 5)}, allowed_cpus=(4,), rc_device=True,
                      rc_source="lspci.txt: no 'accelerators' line", source="bare")
    assert facts.describe() == "\n".join([
        "host: bare",
        "soc: 310P   arch: unknown",
        "NPUs (logical): -",
        "running NPUs: -",
        "visible devices: all",
        "allowed CPUs: 4   threads per core: 1",
        "310P mode: RC (root complex) (lspci.txt: no 'accelerators' line)",
        "NUMA node 1: CPUs 4-5",
    ])


def test_written_host_json_layout(tmp_path: Path) -> None:
    facts = load_recorded_host("a2-8npu")
    meta = host_meta(facts)
    assert meta["pcie"] == {str(n): a for n, a in sorted(facts.pcie.items())}
    assert meta["pcie"]["0"] == "0000:c1:00.0" and "visible_devices" not in meta
    write_recorded_host(tmp_path / "w", outputs={"a.txt": "x"}, meta={"soc": "A2", "n": [1]})
    assert (tmp_path / "w" / "host.json").read_text() == (
        '{\n  "soc": "A2",\n  "n": [\n    1\n  ]\n}\n')
    assert (tmp_path / "w" / "a.txt").read_text() == "x"


def test_write_refusals_and_errors(tmp_path: Path) -> None:
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "old").write_text("x")
    with pytest.raises(RecordedHostError) as caught:
        write_recorded_host(tmp_path / "full", outputs={}, meta={})
    assert str(caught.value) == (
        f"cannot write recorded host: {tmp_path}/full is not empty (1 entries); pass --force "
        "(force=True) to replace the recorded files in it")
    assert write_recorded_host(tmp_path / "full", outputs={}, meta={}, force=True) == [
        tmp_path / "full" / "host.json"]
    (tmp_path / "file").write_text("x")
    with pytest.raises(RecordedHostError) as caught:
        write_recorded_host(tmp_path / "file" / "sub", outputs={}, meta={})
    assert str(caught.value) == (
        f"cannot write recorded host to {tmp_path}/file/sub: File exists")
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    with pytest.raises(RecordedHostError) as caught:
        write_recorded_host(tmp_path / "link", outputs={}, meta={}, force=True)
    assert str(caught.value) == (
        f"cannot write recorded host: {tmp_path}/link is a symbolic link, not a folder; "
        "refused")
    (tmp_path / "dir" / "host.json").mkdir(parents=True)
    with pytest.raises(RecordedHostError) as caught:
        write_recorded_host(tmp_path / "dir", outputs={}, meta={}, force=True)
    assert str(caught.value) == (
        f"cannot write recorded host to {tmp_path}/dir: Is a directory")


def test_capture_folder_checks(tmp_path: Path) -> None:
    from ascend_topology.recorded import check_capture_folder

    check_capture_folder(tmp_path / "new", force=False)  # absent: fine
    (tmp_path / "file").write_text("x")
    with pytest.raises(RecordedHostError) as caught:
        check_capture_folder(tmp_path / "file" / "sub", force=True)
    assert str(caught.value) == (
        f"cannot write recorded host to {tmp_path}/file/sub: Not a directory")
    with pytest.raises(RecordedHostError) as caught:
        check_capture_folder(Path("a\0b"), force=True)
    assert str(caught.value) == (
        "cannot write recorded host: folder 'a\\x00b' contains a NUL byte; paths cannot hold "
        "one")


def test_an_optional_output_that_is_a_symlink_is_refused_by_name(tmp_path: Path) -> None:
    folder = copy_example(tmp_path, "a3-16die")
    info = folder / "npu-smi-info.txt"
    info.unlink()
    info.symlink_to(folder / "npu-smi-info-t-topo.txt")
    with pytest.raises(RecordedHostError) as raised:
        load_recorded_host(folder)
    assert str(raised.value) == (f"recorded host {folder}: {info} is a symbolic link, not a "
                                 "regular file; refused")


def test_unknown_example_lists_the_examples() -> None:
    with pytest.raises(RecordedHostError) as raised:
        example_host_dir("nope")
    assert str(raised.value) == ("unknown example host 'nope'; examples: 310p, 950-4numa, "
                                 "a2-8npu, a3-16die, x86-a2")


def test_only_folders_with_a_host_json_are_examples(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from ascend_topology import recorded

    (tmp_path / "example_hosts" / "good").mkdir(parents=True)
    (tmp_path / "example_hosts" / "good" / "host.json").write_text("{}")
    (tmp_path / "example_hosts" / "stray").mkdir()  # e.g. left over from a broken install
    (tmp_path / "example_hosts" / "host.json").write_text("{}")  # a file, not a folder
    monkeypatch.setattr(recorded.resources, "files", lambda package: tmp_path)
    assert example_hosts() == ["good"]


# --- what a recorded host may expand to, and contradictions in it ------------------------

def _limit_memory() -> None:  # runs in the child: 1 GiB of address space at most
    resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))


def _write_host(folder: Path, npus: int, affinity: str, meta: dict[str, object]) -> None:
    folder.mkdir()
    (folder / "npu-smi-info-m.txt").write_text(
        "NPU ID  Chip ID  Chip Logic ID\n" + "".join(f"{n}  0  {n}\n" for n in range(npus)))
    (folder / "npu-smi-info-t-topo.txt").write_text(
        "".join(f"NPU{n} X {affinity}\n" for n in range(npus)))
    (folder / "host.json").write_text(json.dumps(meta))


@pytest.mark.parametrize(
    ("npus", "message"),
    [
        (20_000, "npu-smi info -m: lists more than 1024 logical NPUs (line 1026); at most "
                 "1024 are supported"),
        (1_000, "npu-smi info -t topo: the affinity rows name more than 524288 CPU ids "
                "together (line 65); refused"),
    ],
)
def test_a_host_expanding_to_millions_of_cpu_ids_is_refused_by_its_limit(
    tmp_path: Path, npus: int, message: str
) -> None:
    # 20,000 NPUs x affinity 0-8191 is 0.6 MB of text but 164 M CPU ids once expanded: it used
    # to end in MemoryError. A child with 1 GiB of address space must answer with the limit.
    folder = tmp_path / "huge"
    _write_host(folder, npus, "0-8191", {"soc": "A2", "numa": {"0": "0-8191"}})
    done = subprocess.run([sys.executable, "-m", "ascend_topology", "plan", "--host",
                           str(folder)], capture_output=True, text=True, timeout=60,
                          check=False, preexec_fn=_limit_memory)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == f"ascend-topology: error: recorded host {folder}: {message}\n"


def test_a_byte_order_mark_loses_no_npu(tmp_path: Path) -> None:
    folder = copy_example(tmp_path, "a2-8npu")
    for name in ("npu-smi-info-m.txt", "host.json", "npu-smi-info-t-topo.txt"):
        (folder / name).write_text("\ufeff" + (folder / name).read_text())
    facts = load_recorded_host(folder)
    assert facts == dataclasses.replace(load_recorded_host("a2-8npu"), source=str(folder))
    assert facts.logic_npus == tuple(R(8)) and plan(facts).ok


@pytest.mark.parametrize(
    ("file", "extra", "message"),
    [
        ("npu-smi-info-m.txt", "        3     0     3     0     Ascend 910B3\n",
         "npu-smi info -m: NPU 3 chip 0 is listed twice (lines 8 and 18)"),
        ("npu-smi-info-m.txt", "        8     0     3     0     Ascend 910B3\n",
         "npu-smi info -m: logical NPU 3 is given to two chips: NPU 3 chip 0 (line 8) and "
         "NPU 8 chip 0 (line 18)"),
        ("npu-smi-info-t-topo.txt", "NPU2 HCCS HCCS X HCCS HCCS HCCS HCCS HCCS 0-23\n",
         "npu-smi info -t topo: NPU2 has two affinity rows (lines 4 and 20)"),
    ],
)
def test_contradicting_npu_smi_rows_name_both_sides(
    tmp_path: Path, file: str, extra: str, message: str
) -> None:
    folder = copy_example(tmp_path, "a2-8npu")
    with (folder / file).open("a") as out:
        out.write(extra)
    with pytest.raises(RecordedHostError) as caught:
        load_recorded_host(folder)
    assert str(caught.value) == f"recorded host {folder}: {message}"


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"numa": {"0": "0-95", "1": "95-191"}},
         "host.json: numa: nodes overlap: CPU 95 is in NUMA node 0 and in NUMA node 1"),
        ({"numa": {"0": "0-95", "1": "96-190"}},
         "allowed CPUs 191 are in no NUMA node (the nodes hold CPUs 0-190)"),
    ],
)
def test_contradicting_numa_layout_is_refused(
    tmp_path: Path, changes: dict[str, object], message: str
) -> None:
    folder = copy_example(tmp_path, "a2-8npu")
    edit_meta(folder, **changes)
    with pytest.raises(RecordedHostError) as caught:
        load_recorded_host(folder)
    assert message in str(caught.value)
    edit_meta(folder, numa={"0": "0-95", "1": "96-191"})  # the boundary: every CPU once
    assert load_recorded_host(folder).numa == {0: tuple(R(96)), 1: tuple(R(96, 192))}


def test_lscpu_listing_a_cpu_under_two_nodes_is_refused(tmp_path: Path) -> None:
    folder = copy_example(tmp_path, "x86-a2")
    with (folder / "lscpu-e.txt").open("a") as out:
        out.write("0 1\n")
    with pytest.raises(RecordedHostError, match=r"lscpu-e\.txt: lscpu -e=CPU,NODE: CPU 0 is "
                                                r"in NUMA node 0 \(line 2\) and in NUMA node 1"):
        load_recorded_host(folder)


FILES = ["npu-smi-info-m.txt", "npu-smi-info.txt", "npu-smi-info-t-topo.txt", "host.json",
         "lscpu-e.txt"]


# Files a host's facts cannot depend on: the examples with "numa" in host.json never read
# lscpu-e.txt (x86-a2 has none in host.json and reads it).
UNREAD = {("a2-8npu", "lscpu-e.txt"), ("950-4numa", "lscpu-e.txt")}


@pytest.mark.slow
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


GARBLE = st.one_of(
    st.text(max_size=200),
    st.sampled_from(["", "NPU ID  Chip ID  Chip Logic ID\n0 0 0\n",
                     "NPU ID  Chip ID\n99999999 0\n", "| NPU Chip | Process id |\n| 0 0 | 1 |\n",
                     "NPU0  X  CPU Affinity\nNPU0 X 0-8192\n", "CPU NODE\n8192 0\n"]),
)


@pytest.mark.slow
@BOUNDED
@given(st.fixed_dictionaries({}, optional={
    "npu-smi-info-m.txt": GARBLE, "npu-smi-info.txt": GARBLE, "npu-smi-info-t-topo.txt": GARBLE,
    "lscpu-e.txt": GARBLE, "lspci.txt": GARBLE,
    "host.json": st.one_of(GARBLE, VALUES.map(json.dumps),
                           st.dictionaries(st.sampled_from(KEYS), VALUES).map(json.dumps))}))
def test_garbled_folders(files: dict[str, str]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        for name, text in files.items():
            Path(tmp, name).write_text(text, encoding="utf-8", errors="surrogateescape")
        check_recorded_host(Path(tmp))


SCRIPT = Path(sys.executable).parent / "ascend-topology"


def _cli_in_child(*argv: str) -> subprocess.CompletedProcess[str]:
    """The console script in a child bounded in time and memory, so a regression (blocking
    on a FIFO, reading /dev/zero) fails the test instead of hanging or exhausting the host."""
    return subprocess.run([str(SCRIPT), *argv], capture_output=True, text=True, timeout=60,
                          check=False, preexec_fn=_limit_memory)


@pytest.fixture
def unix_socket(tmp_path: Path) -> Iterator[Path]:
    folder = copy_example(tmp_path)
    (folder / "host.json").unlink()
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(folder / "host.json"))
    yield folder
    server.close()


def test_fifo_in_a_recorded_host_is_refused_without_blocking(tmp_path: Path) -> None:
    folder = copy_example(tmp_path)
    (folder / "npu-smi-info.txt").unlink()
    os.mkfifo(folder / "npu-smi-info.txt")
    done = _cli_in_child("plan", "--host", str(folder))
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == (f"ascend-topology: error: recorded host {folder}: "
                           f"{folder}/npu-smi-info.txt is a FIFO, not a regular file; refused\n")


def test_dev_zero_symlink_in_a_recorded_host_is_refused_before_reading(tmp_path: Path) -> None:
    folder = copy_example(tmp_path)
    (folder / "npu-smi-info-t-topo.txt").unlink()
    (folder / "npu-smi-info-t-topo.txt").symlink_to("/dev/zero")
    done = _cli_in_child("plan", "--host", str(folder))
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1
    assert "npu-smi-info-t-topo.txt is a symbolic link, not a regular file; refused" in done.stderr


@pytest.mark.timeout(30)
def test_socket_as_host_json_is_refused(unix_socket: Path) -> None:
    with pytest.raises(RecordedHostError, match=r"host\.json is a socket, not a regular file"):
        load_recorded_host(unix_socket)


@pytest.mark.timeout(30)
@pytest.mark.parametrize("name", ["host.json", "npu-smi-info-m.txt", "lscpu-e.txt"])
def test_symlink_to_a_regular_file_is_refused_too(tmp_path: Path, name: str) -> None:
    folder = copy_example(tmp_path, "x86-a2")
    real = tmp_path / "elsewhere"
    (folder / name).rename(real)
    (folder / name).symlink_to(real)
    with pytest.raises(RecordedHostError, match=f"{name} is a symbolic link"):
        load_recorded_host(folder)


@pytest.mark.timeout(30)
def test_directory_in_place_of_a_file_is_refused(tmp_path: Path) -> None:
    folder = copy_example(tmp_path)
    (folder / "npu-smi-info-m.txt").unlink()
    (folder / "npu-smi-info-m.txt").mkdir()
    with pytest.raises(RecordedHostError, match=re.escape("npu-smi-info-m.txt is a directory")):
        load_recorded_host(folder)


def test_oversized_recorded_file_is_refused(tmp_path: Path) -> None:
    folder = copy_example(tmp_path)
    text = (folder / "npu-smi-info.txt").read_text()
    limit = 4 * 1024 * 1024
    (folder / "npu-smi-info.txt").write_text(text + " " * (limit - len(text.encode())))
    assert plan(load_recorded_host(folder)).ok  # exactly at the limit: read
    with (folder / "npu-smi-info.txt").open("a") as f:
        f.write(" ")  # one byte over
    with pytest.raises(RecordedHostError, match=r"npu-smi-info\.txt is larger than the 4 MiB"):
        load_recorded_host(folder)


@pytest.mark.parametrize("text", ["[" * 100_000, '{"numa": NaN}', '{"threads_per_core": NaN}',
                                  '{"allowed_cpus": "' + "1" * 5000 + '"}'])
def test_pathological_json_is_one_clear_error(tmp_path: Path, text: str) -> None:
    folder = copy_example(tmp_path)
    (folder / "host.json").write_text(text)
    with pytest.raises(RecordedHostError) as caught:
        load_recorded_host(folder)
    assert len(caught.value.problems) == 1 and "host.json" in str(caught.value)


def _message(error: type[Exception], call: Callable[[], object]) -> str:
    with pytest.raises(error) as caught:
        call()
    return str(caught.value)


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


EP_LSPCI = ("00:00.0 PCI bridge: Huawei Technologies Co., Ltd. HiSilicon PCIe Root Port\n"
            "01:00.0 Processing accelerators: Huawei Technologies Co., Ltd. Device d500\n")


RC_LSPCI = "00:00.0 PCI bridge: Huawei Technologies Co., Ltd. Device 3004\n"


@pytest.mark.parametrize(("name", "expected"), [("a2-8npu", 1), ("950-4numa", 2),
                                                ("x86-a2", 2)])
def test_threads_per_core_of_recorded_hosts(name: str, expected: int, tmp_path: Path) -> None:
    assert threads_per_core(name) == expected
    folder = tmp_path / name
    shutil.copytree(example_host_dir(name), folder)
    (folder / "npu-smi-info-m.txt").write_text("garbage")  # npu-smi files are not needed
    assert threads_per_core(folder) == expected


def test_threads_per_core_of_a_bad_recorded_host(tmp_path: Path) -> None:
    (tmp_path / "host.json").write_text('{"threads_per_core": 9}')
    with pytest.raises(RecordedHostError, match=r"threads_per_core: must be 1\.\.8; got 9"):
        threads_per_core(tmp_path)


@pytest.mark.parametrize(
    ("example", "lspci", "rc", "source"),
    [
        ("310p", RC_LSPCI, True, "lspci.txt: no 'accelerators' line"),
        ("310p", EP_LSPCI, False, "lspci.txt: an 'accelerators' line"),
        ("310p", None, False, "lspci.txt unavailable; EP mode assumed"),
        ("a2-8npu", RC_LSPCI, False, "not a 310P host"),
    ],
)
def test_recorded_host_rc_mode_from_lspci_txt(
    tmp_path: Path, example: str, lspci: str | None, rc: bool, source: str
) -> None:
    folder = tmp_path / example
    shutil.copytree(example_host_dir(example), folder)
    if lspci is not None:
        (folder / "lspci.txt").write_text(lspci)
    facts = load_recorded_host(folder)
    assert (facts.rc_device, facts.rc_source) == (rc, source)
    assert facts.to_dict()["rc_device"] is rc
