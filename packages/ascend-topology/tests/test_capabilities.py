"""Issue 15 items 8 and 9: the Ascend 950 binding minimum, ``threads_per_core`` and
``is_rc_device`` (with where the answer came from), on live and recorded hosts."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest
from ascend_topology import (
    HostFacts,
    PlanOptions,
    RecordedHostError,
    apply,
    capture_live_host,
    default_min_cpus_per_npu,
    example_host_dir,
    is_rc_device,
    load_recorded_host,
    plan,
    read_live_host,
    read_lspci,
    threads_per_core,
)
from ascend_topology.system import read_threads_per_core

from .conftest import InstallFake

R = range
MakeFacts = Callable[..., HostFacts]
Run = Callable[..., tuple[int, str, str]]
EP_LSPCI = ("00:00.0 PCI bridge: Huawei Technologies Co., Ltd. HiSilicon PCIe Root Port\n"
            "01:00.0 Processing accelerators: Huawei Technologies Co., Ltd. Device d500\n")
RC_LSPCI = "00:00.0 PCI bridge: Huawei Technologies Co., Ltd. Device 3004\n"


# --- item 8: the binding minimum per SoC ---------------------------------------------------

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


def _two_npu_host(folder: Path, soc: str) -> Path:
    folder.mkdir()
    chip_map = (example_host_dir("950-4numa") / "npu-smi-info-m.txt").read_text()
    (folder / "npu-smi-info-m.txt").write_text("\n".join(chip_map.splitlines()[:3]) + "\n")
    (folder / "host.json").write_text(json.dumps(
        {"arch": "aarch64", "soc": soc, "allowed_cpus": "0-5", "numa": {"0": "0-5"}}))
    return folder


def test_cli_default_follows_the_soc(tmp_path: Path, run_cli: Run) -> None:
    a5 = _two_npu_host(tmp_path / "a5", "A5")
    status, out, err = run_cli("plan", "--host", a5, "--json")
    data = json.loads(out)
    assert (status, err) == (0, "") and data["options"]["min_cpus_per_npu"] == 3
    assert [(e["npu"], e["cpus"], e["main"]) for e in data["npus"]] == [
        (0, [0, 1, 2], [0, 1, 2]), (1, [3, 4, 5], [3, 4, 5])]
    status, out, _ = run_cli("bind", "--rank", "1", "--host", a5, "--dry-run")
    assert status == 0 and "dry run: would bind this process (rank 1) to NPU 1" in out
    status, _, err = run_cli("plan", "--host", a5, "--min-cpus-per-npu", "4")
    assert status == 1 and "2 NPUs need at least 8 CPUs (4 per NPU); 6 are allowed" in err
    a2 = _two_npu_host(tmp_path / "a2", "A2")
    status, _, err = run_cli("plan", "--host", a2)
    assert status == 1 and "2 NPUs need at least 10 CPUs (5 per NPU); 6 are allowed" in err


# --- item 9: threads_per_core --------------------------------------------------------------

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


def test_threads_per_core_of_this_host() -> None:
    logical = psutil.cpu_count(logical=True)
    physical = psutil.cpu_count(logical=False)
    if not (logical and physical):
        pytest.skip("psutil cannot count physical cores here")
    assert threads_per_core() == logical // physical


@pytest.mark.parametrize(("siblings", "expected"), [("0\n", 1), ("0,96\n", 2), ("0-3\n", 4)])
def test_threads_per_core_from_sysfs(tmp_path: Path, siblings: str, expected: int) -> None:
    (tmp_path / "cpu0" / "topology").mkdir(parents=True)
    (tmp_path / "cpu0" / "topology" / "thread_siblings_list").write_text(siblings)
    assert read_threads_per_core(tmp_path) == expected


def test_threads_per_core_falls_back_to_lscpu_then_1(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    lscpu = bin_dir / "lscpu"
    lscpu.write_text(f"#!{sys.executable}\nprint('Thread(s) per core:  2')\n")
    lscpu.chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir))
    assert read_threads_per_core(tmp_path / "no-sysfs") == 2
    lscpu.unlink()
    assert read_threads_per_core(tmp_path / "no-sysfs") == 1


# --- item 9: is_rc_device ------------------------------------------------------------------

def test_is_rc_device_is_false_off_310p() -> None:
    assert is_rc_device("A2", RC_LSPCI) is False
    assert is_rc_device("A5", "") is False


def test_is_rc_device_detects_ep_from_an_accelerators_line() -> None:
    assert is_rc_device("310P", EP_LSPCI) is False


def test_is_rc_device_detects_rc_without_an_accelerators_line() -> None:
    assert is_rc_device("310P", RC_LSPCI) is True
    assert is_rc_device("310P", "") is True  # lspci ran and listed nothing of the kind


def test_is_rc_device_defaults_to_ep_when_lspci_is_unavailable() -> None:
    assert is_rc_device("310P", None) is False


def test_read_lspci(install_fake_npu_smi: InstallFake, monkeypatch: pytest.MonkeyPatch,
                    tmp_path: Path) -> None:
    install_fake_npu_smi("310p", lspci=RC_LSPCI)
    assert read_lspci() == RC_LSPCI
    monkeypatch.setenv("PATH", str(tmp_path / "nothing"))
    assert read_lspci() is None
    failing = tmp_path / "failing"
    failing.mkdir()
    (failing / "lspci").write_text(f"#!{sys.executable}\nraise SystemExit(1)\n")
    (failing / "lspci").chmod(0o755)
    monkeypatch.setenv("PATH", str(failing))
    assert read_lspci() is None
    (failing / "lspci").write_text(f"#!{sys.executable}\nimport time\ntime.sleep(3)\n"
                                   "print('accelerators')\n")
    assert read_lspci(timeout=0.3) is None  # gave up: a hung lspci does not hold start-up


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
