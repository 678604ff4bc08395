"""The live readers against a stand-in ``npu-smi`` on PATH that prints recorded outputs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from ascend_topology import (
    CommandError,
    PlanOptions,
    capture_live_host,
    load_recorded_host,
    plan,
    read_live_host,
)
from ascend_topology.live import read_board_pcie

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
