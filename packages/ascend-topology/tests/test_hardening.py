"""Issue 14 regressions through the public API and the CLI: special files and symlinks in
recorded hosts, the CPU id cap on every path, and `capture` into existing folders."""

from __future__ import annotations

import json
import os
import re
import resource
import shutil
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from ascend_topology import (
    HostFacts,
    ParseError,
    Plan,
    PlanError,
    RecordedHostError,
    TopologyError,
    example_host_dir,
    load_recorded_host,
    make_synthetic_host,
    plan,
)
from ascend_topology.system import parse_lscpu_nodes

from .conftest import InstallFake

Run = Callable[..., tuple[int, str, str]]
SCRIPT = Path(sys.executable).parent / "ascend-topology"


def _copy(tmp_path: Path, name: str = "a2-8npu") -> Path:
    folder = tmp_path / name
    shutil.copytree(example_host_dir(name), folder)
    return folder


def _edit_meta(folder: Path, **changes: object) -> None:
    meta = json.loads((folder / "host.json").read_text())
    meta.update(changes)
    (folder / "host.json").write_text(json.dumps(meta))


def _limit_memory() -> None:  # runs in the child: 1 GiB of address space at most
    resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))


def _cli_in_child(*argv: str) -> subprocess.CompletedProcess[str]:
    """The console script in a child bounded in time and memory, so a regression (blocking
    on a FIFO, reading /dev/zero) fails the test instead of hanging or exhausting the host."""
    return subprocess.run([str(SCRIPT), *argv], capture_output=True, text=True, timeout=60,
                          check=False, preexec_fn=_limit_memory)


# --- special files in a recorded host ------------------------------------------------------

def test_fifo_in_a_recorded_host_is_refused_without_blocking(tmp_path: Path) -> None:
    folder = _copy(tmp_path)
    (folder / "npu-smi-info.txt").unlink()
    os.mkfifo(folder / "npu-smi-info.txt")
    done = _cli_in_child("plan", "--host", str(folder))
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == (f"ascend-topology: error: recorded host {folder}: "
                           f"{folder}/npu-smi-info.txt is a FIFO, not a regular file; refused\n")


def test_dev_zero_symlink_in_a_recorded_host_is_refused_before_reading(tmp_path: Path) -> None:
    folder = _copy(tmp_path)
    (folder / "npu-smi-info-t-topo.txt").unlink()
    (folder / "npu-smi-info-t-topo.txt").symlink_to("/dev/zero")
    done = _cli_in_child("plan", "--host", str(folder))
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1
    assert "npu-smi-info-t-topo.txt is a symbolic link, not a regular file; refused" in done.stderr


@pytest.fixture
def unix_socket(tmp_path: Path) -> Iterator[Path]:
    folder = _copy(tmp_path)
    (folder / "host.json").unlink()
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(folder / "host.json"))
    yield folder
    server.close()


@pytest.mark.timeout(30)
def test_socket_as_host_json_is_refused(unix_socket: Path) -> None:
    with pytest.raises(RecordedHostError, match=r"host\.json is a socket, not a regular file"):
        load_recorded_host(unix_socket)


@pytest.mark.timeout(30)
@pytest.mark.parametrize("name", ["host.json", "npu-smi-info-m.txt", "lscpu-e.txt"])
def test_symlink_to_a_regular_file_is_refused_too(tmp_path: Path, name: str) -> None:
    folder = _copy(tmp_path, "x86-a2")
    real = tmp_path / "elsewhere"
    (folder / name).rename(real)
    (folder / name).symlink_to(real)
    with pytest.raises(RecordedHostError, match=f"{name} is a symbolic link"):
        load_recorded_host(folder)


@pytest.mark.timeout(30)
def test_directory_in_place_of_a_file_is_refused(tmp_path: Path) -> None:
    folder = _copy(tmp_path)
    (folder / "npu-smi-info-m.txt").unlink()
    (folder / "npu-smi-info-m.txt").mkdir()
    with pytest.raises(RecordedHostError, match=re.escape("npu-smi-info-m.txt is a directory")):
        load_recorded_host(folder)


def test_oversized_recorded_file_is_refused(tmp_path: Path) -> None:
    folder = _copy(tmp_path)
    text = (folder / "npu-smi-info.txt").read_text()
    limit = 4 * 1024 * 1024
    (folder / "npu-smi-info.txt").write_text(text + " " * (limit - len(text.encode())))
    assert plan(load_recorded_host(folder)).ok  # exactly at the limit: read
    with (folder / "npu-smi-info.txt").open("a") as f:
        f.write(" ")  # one byte over
    with pytest.raises(RecordedHostError, match=r"npu-smi-info\.txt is larger than the 4 MiB"):
        load_recorded_host(folder)


def test_oversized_host_json_is_refused(tmp_path: Path) -> None:
    folder = _copy(tmp_path)
    text = (folder / "host.json").read_text().rstrip()
    limit = 1024 * 1024
    (folder / "host.json").write_text(text + " " * (limit - len(text)))
    assert load_recorded_host(folder).soc == "A2"
    (folder / "host.json").write_text(text + " " * (limit - len(text) + 1))
    with pytest.raises(RecordedHostError, match=r"host\.json is larger than the 1 MiB limit"):
        load_recorded_host(folder)


# --- the CPU id cap on every path ----------------------------------------------------------

@pytest.mark.parametrize(
    ("value", "message"),
    [
        ([0, 1, 10**30], "CPU 1000000000000000000000000000000 is outside 0..8191"),
        ([0, 8192], "CPU 8192 is outside 0..8191"),
        ([0, True], "CPU True is not an integer CPU id"),
        ([0, 1.0], "CPU 1.0 is not an integer CPU id"),
        ([0, -1], "CPU -1 is outside 0..8191"),
        ("0-8192", "CPU 8192 is outside 0..8191"),
    ],
)
def test_cpu_lists_in_host_json_are_capped_like_strings(
    tmp_path: Path, value: object, message: str
) -> None:
    folder = _copy(tmp_path)
    _edit_meta(folder, allowed_cpus=value)
    with pytest.raises(RecordedHostError, match=message.replace(".", r"\.")):
        load_recorded_host(folder)


def test_cpu_list_at_the_cap_is_accepted(tmp_path: Path) -> None:
    folder = _copy(tmp_path)
    _edit_meta(folder, numa={"0": [0, 1, 2, 3, 4, 8191]}, allowed_cpus=[0, 1, 2, 3, 4, 8191])
    facts = load_recorded_host(folder)
    assert facts.allowed_cpus == (0, 1, 2, 3, 4, 8191)


def test_numa_cpu_lists_in_host_json_are_capped(tmp_path: Path) -> None:
    folder = _copy(tmp_path)
    _edit_meta(folder, numa={"0": [0, True], "1": [10**30]})
    with pytest.raises(RecordedHostError) as caught:
        load_recorded_host(folder)
    assert caught.value.problems == (
        f"{folder}/host.json: numa: node 0: CPU list: CPU True is not an integer CPU id",
    )


def test_lscpu_cpu_ids_are_capped() -> None:
    assert parse_lscpu_nodes("CPU NODE\n8191 0\n") == {0: [8191]}
    with pytest.raises(ParseError, match=re.escape("CPU 8192 is outside 0..8191")):
        parse_lscpu_nodes("CPU NODE\n8192 0\n")


def test_host_facts_built_in_python_are_capped() -> None:
    with pytest.raises(TopologyError, match="allowed CPUs: CPU 8192 is outside"):
        HostFacts(soc="A2", numa={0: (0, 1)}, allowed_cpus=(0, 8192))
    with pytest.raises(TopologyError, match="NPU 0 affinity: CPU True is not an integer"):
        HostFacts(soc="A2", numa={0: (0, 1)}, allowed_cpus=(0,), affinity={0: (True,)})
    with pytest.raises(TopologyError, match="NUMA node 1: CPU -1 is outside"):
        HostFacts(soc="A2", numa={0: (0,), 1: (-1,)}, allowed_cpus=(0,))
    assert HostFacts(soc="A2", numa={0: (8191,)}, allowed_cpus=(8191,)).allowed_cpus == (8191,)


def test_plan_objects_are_capped() -> None:
    good = plan(make_synthetic_host(npus=1, cpus=8, numa_nodes=1)).to_dict()
    assert Plan.from_dict(good).npus[0].cpus == tuple(range(8))
    for bad in (10**30, True, 8192, "3"):
        data = json.loads(json.dumps(good))
        data["npus"][0]["cpus"][0] = bad
        with pytest.raises(PlanError, match="not a plan object"):
            Plan.from_dict(data)


def test_bools_and_huge_ints_elsewhere_in_host_json(tmp_path: Path) -> None:
    folder = _copy(tmp_path)
    _edit_meta(folder, threads_per_core=True, visible_devices=[True, 10**30],
               soc=1, arch=["x"])
    with pytest.raises(RecordedHostError) as caught:
        load_recorded_host(folder)
    where = f"{folder}/host.json"
    # Every problem at once, one line each, in the order of the keys.
    assert caught.value.problems == (
        f"{where}: arch: must be a short string like 'aarch64'; got ['x']",
        f"{where}: soc: 1 is not one of A2, A3, A5, 310P",
        f"{where}: threads_per_core: must be 1..8; got True",
        f"{where}: visible_devices: must be like '0,1' or [0, 1]; got [True, "
        "1000000000000000000000000000000]",
    )


def test_every_problem_is_one_cli_line_and_exit_2(tmp_path: Path, run_cli: Run) -> None:
    folder = _copy(tmp_path)
    _edit_meta(folder, threads_per_core=0, allowed_cpus=[10**30])
    status, out, err = run_cli("plan", "--host", folder, "--json")
    assert (status, out) == (2, "")
    assert err.splitlines() == [
        f"ascend-topology: error: {folder}/host.json: threads_per_core: must be 1..8; got 0",
        f"ascend-topology: error: {folder}/host.json: allowed_cpus: CPU list: CPU "
        "1000000000000000000000000000000 is outside 0..8191",
    ]


@pytest.mark.parametrize("text", ["[" * 100_000, '{"numa": NaN}', '{"threads_per_core": NaN}',
                                  '{"allowed_cpus": "' + "1" * 5000 + '"}'])
def test_pathological_json_is_one_clear_error(tmp_path: Path, text: str) -> None:
    folder = _copy(tmp_path)
    (folder / "host.json").write_text(text)
    with pytest.raises(RecordedHostError) as caught:
        load_recorded_host(folder)
    assert len(caught.value.problems) == 1 and "host.json" in str(caught.value)


# --- capture into existing folders --------------------------------------------------------

def test_capture_refuses_a_non_empty_folder_without_force(
    install_fake_npu_smi: InstallFake, run_cli: Run, tmp_path: Path
) -> None:
    install_fake_npu_smi("a3-16die")
    target = tmp_path / "rec"
    target.mkdir()
    (target / "host.json").write_text("mine")
    status, out, err = run_cli("capture", target)
    assert (status, out) == (2, "")
    assert err == (f"ascend-topology: error: cannot write recorded host: {target} is not "
                   "empty (1 entries); pass --force (force=True) to replace the recorded files "
                   "in it\n")
    assert (target / "host.json").read_text() == "mine"
    status, out, _ = run_cli("capture", target, "--force")
    assert status == 0 and f"wrote {target}/host.json" in out
    assert json.loads((target / "host.json").read_text())["soc"] == "A3"


def test_capture_refuses_a_file_before_reading_the_host(run_cli: Run, tmp_path: Path) -> None:
    # No npu-smi on this machine: the target is refused first (exit 2), npu-smi never runs.
    target = tmp_path / "file"
    target.write_text("x")
    for extra in ([], ["--force"]):
        status, out, err = run_cli("capture", target, *extra)
        assert (status, out) == (2, "")
        assert err == (f"ascend-topology: error: cannot write recorded host: {target} is a "
                       "regular file, not a folder; refused\n")


def test_capture_refuses_a_non_empty_folder_before_reading_the_host(
    run_cli: Run, tmp_path: Path
) -> None:
    (tmp_path / "keep.txt").write_text("x")
    status, _, err = run_cli("capture", tmp_path)
    assert status == 2 and "is not empty (1 entries)" in err
    status, _, err = run_cli("capture", tmp_path, "--force")  # allowed: then npu-smi is missing
    assert status == 1 and "npu-smi was not found" in err
    status, _, err = run_cli("capture", "a\0b")
    assert status == 2 and "contains a NUL byte" in err


def test_capture_into_an_empty_or_new_folder(
    install_fake_npu_smi: InstallFake, run_cli: Run, tmp_path: Path
) -> None:
    install_fake_npu_smi("a3-16die")
    (tmp_path / "empty").mkdir()
    for target in (tmp_path / "empty", tmp_path / "new" / "deeper"):
        status, _, err = run_cli("capture", target)
        assert status == 0 and err == ""
        assert sorted(p.name for p in target.iterdir()) == [
            "host.json", "npu-smi-info-m.txt", "npu-smi-info-t-topo.txt", "npu-smi-info.txt"]
        assert load_recorded_host(target).logic_npus == tuple(range(16))


def test_capture_never_writes_through_a_symlinked_folder(
    install_fake_npu_smi: InstallFake, run_cli: Run, tmp_path: Path
) -> None:
    install_fake_npu_smi("a3-16die")
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    for extra in ([], ["--force"]):
        status, _, err = run_cli("capture", tmp_path / "link", *extra)
        assert status == 2
        assert f"{tmp_path}/link is a symbolic link, not a folder; refused" in err
    assert list(real.iterdir()) == []


def test_capture_force_replaces_symlinks_and_fifos_without_following_them(
    install_fake_npu_smi: InstallFake, run_cli: Run, tmp_path: Path
) -> None:
    install_fake_npu_smi("a3-16die")
    target = tmp_path / "rec"
    target.mkdir()
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    (target / "host.json").symlink_to(victim)
    os.mkfifo(target / "npu-smi-info.txt")
    (target / "notes.txt").write_text("kept")
    status, _, err = run_cli("capture", target, "--force")
    assert status == 0, err
    assert victim.read_text() == "precious"
    assert not (target / "host.json").is_symlink()
    assert json.loads((target / "host.json").read_text())["soc"] == "A3"
    assert (target / "npu-smi-info.txt").is_file()  # the FIFO entry was replaced, not opened
    assert (target / "notes.txt").read_text() == "kept"
    assert not [p for p in target.iterdir() if p.name.endswith(".tmp")]
