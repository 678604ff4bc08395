"""The live reader and capture, field by field, against a stand-in npu-smi."""

from __future__ import annotations

import json
import os
import platform
import resource
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from ascend_topology import (
    CommandError,
    RecordedHostError,
    capture_live_host,
    example_host_dir,
    read_live_host,
)
from ascend_topology.live import read_board_pcie
from ascend_topology.recorded import host_meta
from ascend_topology.system import read_threads_per_core

from .conftest import InstallFake

FILES = ["npu-smi-info-m.txt", "npu-smi-info.txt", "npu-smi-info-t-topo.txt"]


def test_live_facts_field_by_field(install_fake_npu_smi: InstallFake,
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    install_fake_npu_smi("a2-8npu")
    monkeypatch.setenv("ASCEND_RT_VISIBLE_DEVICES", "6,7")
    facts = read_live_host()
    assert facts.soc == "A2" and facts.source == "live"
    assert facts.visible_devices == (6, 7)  # from the environment by default
    assert facts.arch == (platform.machine() or "unknown")
    assert facts.allowed_cpus == tuple(sorted(os.sched_getaffinity(0)))
    assert facts.threads_per_core == read_threads_per_core()
    assert facts.affinity[6] == tuple(range(144, 168))  # npu-smi's topology, as recorded
    assert facts.running_npus == tuple(range(8))
    assert (facts.rc_device, facts.rc_source) == (False, "not a 310P host")
    assert read_live_host(environ={}).visible_devices is None
    assert read_live_host(soc="A3").soc == "A3"


def test_live_smt_and_architecture_come_from_the_os(install_fake_npu_smi: InstallFake,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    install_fake_npu_smi("a2-8npu")
    monkeypatch.setattr("ascend_topology.live.read_threads_per_core", lambda: 2)
    monkeypatch.setattr(platform, "machine", lambda: "")
    facts = read_live_host()
    assert (facts.threads_per_core, facts.arch) == (2, "unknown")


def test_numa_from_lscpu_is_recorded(install_fake_npu_smi: InstallFake, tmp_path: Path,
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    # A host without NUMA sysfs: the layout comes from lscpu, whose output capture keeps.
    install_fake_npu_smi("a2-8npu")
    monkeypatch.setattr("ascend_topology.live.read_numa",
                        lambda: ({0: [0], 1: [1]}, "CPU NODE\n0 0\n1 1\n"))
    facts = read_live_host()
    assert dict(facts.numa) == {0: (0,), 1: (1,)}
    written = capture_live_host(tmp_path / "rec")
    assert (tmp_path / "rec" / "lscpu-e.txt").read_text() == "CPU NODE\n0 0\n1 1\n"
    assert [p.name for p in written] == [*FILES, "lscpu-e.txt", "host.json"]


def test_capture_writes_the_raw_outputs_and_host_meta(install_fake_npu_smi: InstallFake,
                                                      tmp_path: Path) -> None:
    install_fake_npu_smi("a2-8npu")
    written = capture_live_host(tmp_path / "rec", soc="A3", environ={
        "ASCEND_RT_VISIBLE_DEVICES": "1"})
    assert written == [tmp_path / "rec" / name for name in [*FILES, "host.json"]]
    for name in FILES:
        assert (tmp_path / "rec" / name).read_text() == (
            example_host_dir("a2-8npu") / name).read_text()
    meta = json.loads((tmp_path / "rec" / "host.json").read_text())
    assert meta == host_meta(read_live_host(soc="A3",
                                            environ={"ASCEND_RT_VISIBLE_DEVICES": "1"}))
    assert meta["visible_devices"] == "1" and meta["soc"] == "A3"
    with pytest.raises(RecordedHostError, match="is not empty"):  # no force by default
        capture_live_host(tmp_path / "rec")


def test_topology_query_failure_leaves_the_topology_empty(
    install_fake_npu_smi: InstallFake, tmp_path: Path
) -> None:
    log = install_fake_npu_smi("a2-8npu")
    fake = log.parent / "fake-bin" / "npu-smi"
    fake.write_text(fake.read_text().replace('"info -t topo": ', '"info -t nothing": '))
    facts = read_live_host()
    assert facts.affinity == {} and facts.logic_npus == tuple(range(8))
    capture_live_host(tmp_path / "rec")
    assert (tmp_path / "rec" / "npu-smi-info-t-topo.txt").read_text() == ""


def test_npu_smi_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(CommandError) as caught:
        read_live_host()
    assert str(caught.value) == (
        "npu-smi was not found on PATH, so this host shows no Ascend NPU (driver not installed "
        "or not mounted into the container); plan a recorded host with --host DIR or an "
        "example name instead")
    (tmp_path / "npu-smi").write_text(f"#!{sys.executable}\nimport time\ntime.sleep(5)\n")
    (tmp_path / "npu-smi").chmod(0o755)
    with pytest.raises(CommandError) as caught:
        read_live_host(timeout=0.3)
    assert str(caught.value) == "`npu-smi info -m` did not finish within 0.3 s"


def test_board_query(install_fake_npu_smi: InstallFake, tmp_path: Path,
                     monkeypatch: pytest.MonkeyPatch) -> None:
    install_fake_npu_smi("a2-8npu")
    assert read_board_pcie(3, "A2") == "0000:c1:00.3"  # the fake answers with the last arg
    assert read_board_pcie(7, "A3") == "0000:c1:00.1"  # card 3, chip 1
    assert read_board_pcie(6, "A3") == "0000:c1:00.0"  # card 3, chip 0
    monkeypatch.setenv("PATH", str(tmp_path))
    assert read_board_pcie(3, "A2") is None


def _files_up_to(limit: int) -> Callable[[], None]:
    def preexec() -> None:  # in the child: files may grow to `limit` bytes, then EFBIG
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    return preexec


def test_a_failed_capture_leaves_nothing_behind(install_fake_npu_smi: InstallFake,
                                                tmp_path: Path) -> None:
    # The chip map (2,390 bytes) fits under 3,000 bytes per file, npu-smi-info.txt (4,059)
    # does not: the write fails after one file. Nothing may stay (no partial folder needing
    # --force, no temporary folder), and the next capture then works without --force.
    install_fake_npu_smi("a2-8npu")
    out = tmp_path / "out"
    out.mkdir()
    folder = out / "rec"
    command = [sys.executable, "-m", "ascend_topology", "capture", str(folder)]
    failed = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False,
                            preexec_fn=_files_up_to(3000))
    assert (failed.returncode, failed.stdout) == (2, "")
    assert failed.stderr == (f"ascend-topology: error: cannot write recorded host to {folder}: "
                             "File too large\n")
    assert list(out.iterdir()) == []
    done = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in out.iterdir()) == ["rec"]
    assert sorted(p.name for p in folder.iterdir()) == ["host.json", *sorted(FILES)]
    # Into an existing folder (with --force) a failure keeps what was there, adds nothing.
    (folder / "notes.txt").write_text("mine")
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    failed = subprocess.run([*command, "--force"], capture_output=True, text=True, timeout=60,
                            check=False, preexec_fn=_files_up_to(3000))
    assert failed.returncode == 2 and "File too large" in failed.stderr
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before
    assert sorted(p.name for p in out.iterdir()) == ["rec"]
