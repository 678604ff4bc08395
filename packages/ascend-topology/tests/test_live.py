"""The live readers against a stand-in ``npu-smi`` on PATH that prints recorded outputs."""

from __future__ import annotations

import json
import os
import platform
import resource
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from ascend_topology import (
    CommandError,
    PlanOptions,
    RecordedHostError,
    capture_live_host,
    example_host_dir,
    load_recorded_host,
    plan,
    read_live_host,
)
from ascend_topology.live import read_board_pcie
from ascend_topology.recorded import host_meta
from ascend_topology.system import read_threads_per_core

from .conftest import InstallFake


@pytest.fixture
def fake_npu_smi(install_fake_npu_smi: InstallFake) -> Path:
    """Put an ``npu-smi`` replaying the a3-16die example first on PATH; returns its log."""
    return install_fake_npu_smi("a3-16die")


def test_read_live_host_uses_npu_smi_and_this_machines_cpus(fake_npu_smi: Path) -> None:
    facts = read_live_host(environ={"ASCEND_RT_VISIBLE_DEVICES": "2,3"})
    assert facts.soc == "A3" and facts.logic_npus == tuple(range(16))
    assert facts.allowed_cpus == tuple(sorted(os.sched_getaffinity(0)))
    assert facts.visible_devices == (2, 3) and facts.source == "live"
    calls = fake_npu_smi.read_text().splitlines()
    assert calls == ["info -m LC_ALL=C", "info LC_ALL=C", "info -t topo LC_ALL=C"]
    result = plan(facts, PlanOptions(min_cpus_per_npu=1))
    assert [p.npu for p in result.npus] == [2, 3]


def test_capture_then_load_gives_the_same_facts(fake_npu_smi: Path, tmp_path: Path) -> None:
    written = capture_live_host(tmp_path / "rec", soc="A3")
    names = {p.name for p in written}
    assert {"npu-smi-info-m.txt", "npu-smi-info.txt", "npu-smi-info-t-topo.txt",
            "host.json"} <= names
    meta = json.loads((tmp_path / "rec" / "host.json").read_text())
    assert meta["soc"] == "A3" and "numa" in meta and "allowed_cpus" in meta
    live = read_live_host(soc="A3", environ={})
    recorded = load_recorded_host(tmp_path / "rec")
    assert recorded.to_dict() | {"source": ""} == live.to_dict() | {"source": ""}


def test_board_query_addresses_a3_dies_by_card_and_chip(fake_npu_smi: Path) -> None:
    assert read_board_pcie(5, "A3") == "0000:c1:00.1"
    assert read_board_pcie(5, "A2") == "0000:c1:00.5"
    calls = fake_npu_smi.read_text().splitlines()
    assert calls == ["info -t board -i 2 -c 1 LC_ALL=C", "info -t board -i 5 LC_ALL=C"]


def test_failing_npu_smi_is_one_clear_line(tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "npu-smi"
    script.write_text(f"#!{sys.executable}\nimport sys\nsys.exit(8)\n")
    script.chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir))
    with pytest.raises(CommandError, match=r"^`npu-smi info -m` exited with status 8$"):
        read_live_host()


def test_bind_then_run_a_command_with_the_binding(install_fake_npu_smi: InstallFake) -> None:
    # The 310P example's chips 0 and 1 are affine to CPUs 0-31: here that is CPUs 0 and 1,
    # split between the two running chips, so rank 0 gets CPU 0.
    install_fake_npu_smi("310p")
    if not {0, 1} <= os.sched_getaffinity(0):
        pytest.skip("needs CPUs 0 and 1")
    script = Path(sys.executable).parent / "ascend-topology"
    code = "import os; print(sorted(os.sched_getaffinity(0)))"
    done = subprocess.run(
        [str(script), "bind", "--rank", "0", "--min-cpus-per-npu", "1", "--no-migrate-memory",
         "--", sys.executable, "-c", code],
        capture_output=True, text=True, timeout=60, check=False,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("process ") and "threads -> main CPUs 0" in lines[0]
    assert lines[-1] == "[0]"  # the command ran with the binding


FILES = ["npu-smi-info-m.txt", "npu-smi-info.txt", "npu-smi-info-t-topo.txt"]


def _files_up_to(limit: int) -> Callable[[], None]:
    def preexec() -> None:  # in the child: files may grow to `limit` bytes, then EFBIG
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    return preexec


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


Run = Callable[..., tuple[int, str, str]]


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


EP_LSPCI = ("00:00.0 PCI bridge: Huawei Technologies Co., Ltd. HiSilicon PCIe Root Port\n"
            "01:00.0 Processing accelerators: Huawei Technologies Co., Ltd. Device d500\n")


RC_LSPCI = "00:00.0 PCI bridge: Huawei Technologies Co., Ltd. Device 3004\n"


@pytest.mark.parametrize(
    ("lspci", "rc", "source"),
    [
        (RC_LSPCI, True, "lspci: no 'accelerators' line"),
        (EP_LSPCI, False, "lspci: an 'accelerators' line"),
        (None, False, "lspci unavailable; EP mode assumed"),
    ],
)
def test_live_310p_host_reports_rc_mode_and_its_source(
    install_fake_npu_smi: InstallFake, lspci: str | None, rc: bool, source: str
) -> None:
    install_fake_npu_smi("310p", lspci=lspci)
    if lspci is None and shutil.which("lspci"):
        pytest.skip("this machine has a real lspci")
    facts = read_live_host()
    assert (facts.soc, facts.rc_device, facts.rc_source) == ("310P", rc, source)
    mode = "RC (root complex)" if rc else "EP (PCIe card)"
    assert facts.describe().splitlines()[6] == f"310P mode: {mode} ({source})"


def test_live_non_310p_host_does_not_run_lspci(
    install_fake_npu_smi: InstallFake, tmp_path: Path
) -> None:
    install_fake_npu_smi("a3-16die", lspci=RC_LSPCI)
    facts = read_live_host()
    assert (facts.rc_device, facts.rc_source) == (False, "not a 310P host")
    assert not (tmp_path / "fake-bin" / "lspci.log").exists()


def test_capture_records_lspci_and_the_recorded_host_answers_the_same(
    install_fake_npu_smi: InstallFake, tmp_path: Path
) -> None:
    install_fake_npu_smi("310p", lspci=RC_LSPCI)
    written = capture_live_host(tmp_path / "rec")
    assert (tmp_path / "rec" / "lspci.txt") in written
    assert (tmp_path / "rec" / "lspci.txt").read_text() == RC_LSPCI
    recorded = load_recorded_host(tmp_path / "rec")
    assert (recorded.rc_device, recorded.rc_source) == (True, "lspci.txt: no 'accelerators' line")
