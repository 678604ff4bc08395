from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest
from ascend_topology import example_hosts

Run = Callable[..., tuple[int, str, str]]


def test_bind_on_this_machine_fails_clearly_and_changes_nothing(run_cli: Run) -> None:
    before = os.sched_getaffinity(0)
    status, out, err = run_cli("bind", "--rank", "0")
    assert status == 1 and out == ""
    assert err.startswith("ascend-topology: error: npu-smi was not found on PATH")
    assert err.count("\n") == 1 and "Traceback" not in err
    assert os.sched_getaffinity(0) == before


def test_console_script_exits_non_zero_with_one_line() -> None:
    script = Path(sys.executable).parent / "ascend-topology"
    done = subprocess.run([str(script), "bind", "--rank", "0"], capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and "npu-smi was not found" in done.stderr


@pytest.mark.parametrize("name", ["310p", "950-4numa", "a2-8npu", "a3-16die", "x86-a2"])
def test_bind_dry_run_prints_the_plan_of_each_example(run_cli: Run, name: str) -> None:
    status, out, err = run_cli("bind", "--rank", "1", "--host", name, "--dry-run")
    assert status == 0 and err == ""
    assert "rank  NPU  NUMA" in out and "*1 " in out
    assert "dry run: would bind this process (rank 1)" in out and "nothing was changed" in out


def test_plan_json_of_every_example_follows_the_contract(run_cli: Run) -> None:
    for name in example_hosts():
        status, out, _ = run_cli("plan", "--host", name, "--json")
        data = json.loads(out)
        assert status == 0 and data["ok"] is True
        for entry in data["npus"]:
            assert {"npu", "numa_node", "cpus", "main", "acl", "release"} <= set(entry)
            assert all(isinstance(c, int) for c in entry["cpus"])
            assert set(entry["main"]) | set(entry["acl"]) | set(entry["release"]) <= set(
                entry["cpus"])


def test_plan_accepts_a_folder_and_options(run_cli: Run, tmp_path: Path) -> None:
    from ascend_topology import example_host_dir

    status, out, _ = run_cli("plan", "--host", example_host_dir("a2-8npu"), "--bind-irq",
                             "--min-cpus-per-npu", "6", "--rank", "2")
    assert status == 0
    assert "*2    2    2     100%     48-59    50-57    58   59       48-49" in out


def test_plan_with_problems_exits_1_after_printing_the_proposal(run_cli: Run) -> None:
    status, out, err = run_cli("plan", "--host", "a3-16die", "--min-cpus-per-npu", "21")
    assert status == 1 and "NOT APPLICABLE" in out
    assert err == ("ascend-topology: plan not applicable: 16 NPUs need at least 336 CPUs "
                   "(21 per NPU); 320 are allowed\n")


def test_show_and_examples(run_cli: Run) -> None:
    status, out, _ = run_cli("show", "--host", "950-4numa")
    assert status == 0 and "soc: A5" in out and "NUMA node 3: CPUs 288-383" in out
    status, out, _ = run_cli("show", "--host", "x86-a2", "--json")
    assert json.loads(out)["visible_devices"] == [4, 5, 6, 7]
    assert run_cli("examples")[1].split() == example_hosts()


@pytest.mark.parametrize(
    ("argv", "message", "code"),
    [
        (["plan", "--host", "nope"], "--host 'nope': not a folder and not an example host", 2),
        (["bind", "--rank", "0", "--host", "a2-8npu"], "add --dry-run", 2),
        (["bind", "--rank", "8", "--host", "a2-8npu", "--dry-run"], "rank 8 is out of range", 2),
        (["plan", "--host", "a2-8npu", "--min-cpus-per-npu", "0"], "must be 1..1024; got 0", 2),
        (["plan", "--host", "a2\0x"], "contains a NUL byte", 2),
        (["show"], "npu-smi was not found", 1),
    ],
)
def test_errors_are_one_line(run_cli: Run, argv: list[str], message: str, code: int) -> None:
    status, out, err = run_cli(*argv)
    assert (status, out) == (code, "")
    assert err.startswith("ascend-topology: error: ") and message in err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_capture_on_this_machine_fails_and_writes_nothing(run_cli: Run, tmp_path: Path) -> None:
    status, _, err = run_cli("capture", tmp_path / "rec")
    assert status == 1 and "npu-smi was not found" in err
    assert not (tmp_path / "rec").exists()


def test_bind_applies_a_live_plan_to_a_pid(
    run_cli: Run, make_facts: Callable[..., object], monkeypatch: pytest.MonkeyPatch
) -> None:
    cpus = sorted(os.sched_getaffinity(0))
    facts = make_facts(numa={0: cpus}, affinity={0: cpus})
    monkeypatch.setattr("ascend_topology.cli.read_live_host", lambda soc=None: facts)
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"],
                             stdin=subprocess.PIPE)
    try:
        status, out, _ = run_cli("bind", "--rank", "0", "--pid", child.pid,
                                 "--min-cpus-per-npu", "1", "--no-migrate-memory")
        assert status == 0 and f"process {child.pid}:" in out
        assert psutil.Process(child.pid).cpu_affinity() == cpus[:1]
    finally:
        child.kill()
        child.wait()
