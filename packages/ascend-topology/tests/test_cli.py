from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from ascend_topology import (
    HostFacts,
    example_host_dir,
    example_hosts,
    parse_cpu_list,
)
from ascend_topology.cli import main
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .conftest import InstallFake
from .fuzz_inputs import KEYS, VALUES
from .host_folders import copy_example, edit_meta

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


MakeFacts = Callable[..., HostFacts]


HOST_HELP = """\
  --host DIR            a recorded-host folder or an example name (see `examples`); default: this
                        host
  --soc {A2,A3,A5,310P}
                        override SoC detection"""


PLAN_HELP = f"""\
{HOST_HELP}
  --min-cpus-per-npu N  smallest pool per NPU (default: 3 on Ascend 950, else 5)
  --bind-irq            reserve two CPUs per NPU for its IRQs and bind them
  --no-migrate-memory   do not run migratepages"""


HELP = {
    (): """\
usage: ascend-topology [-h] COMMAND ...

The ``ascend-topology`` command: show, plan, bind, capture, examples.

positional arguments:
  COMMAND
    show      print the host facts
    plan      print the CPU plan per NPU
    bind      bind a process to its NPU's CPUs
    capture   record this host into a folder
    examples  list the bundled example hosts

options:
  -h, --help  show this help message and exit
""",
    ("plan",): f"""\
usage: ascend-topology plan [-h] [--host DIR] [--soc {{A2,A3,A5,310P}}] [--min-cpus-per-npu N]
                            [--bind-irq] [--no-migrate-memory] [--rank RANK] [--json]

options:
  -h, --help            show this help message and exit
{PLAN_HELP}
  --rank RANK           mark this local rank's row
  --json                print the plan as JSON
""",
    ("bind",): f"""\
usage: ascend-topology bind [-h] [--host DIR] [--soc {{A2,A3,A5,310P}}] [--min-cpus-per-npu N]
                            [--bind-irq] [--no-migrate-memory] --rank RANK [--pid PID] [--dry-run]
                            [--stop-irqbalance]
                            ...

positional arguments:
  -- COMMAND            program to run with the binding (after --)

options:
  -h, --help            show this help message and exit
{PLAN_HELP}
  --rank RANK           the worker's local rank
  --pid PID             process to bind (default: this one, then run COMMAND in it)
  --dry-run             print the plan, change nothing
  --stop-irqbalance     with --bind-irq: stop irqbalance so that it keeps the binding
""",
    ("show",): f"""\
usage: ascend-topology show [-h] [--host DIR] [--soc {{A2,A3,A5,310P}}] [--json]

options:
  -h, --help            show this help message and exit
{HOST_HELP}
  --json                print JSON
""",
    ("capture",): """\
usage: ascend-topology capture [-h] [--soc {A2,A3,A5,310P}] [--force] DIR

positional arguments:
  DIR                   folder to record into (created if missing)

options:
  -h, --help            show this help message and exit
  --soc {A2,A3,A5,310P}
                        override SoC detection
  --force               write into DIR even when it already holds files
""",
    ("examples",): """\
usage: ascend-topology examples [-h]

options:
  -h, --help  show this help message and exit
""",
}


@pytest.fixture
def live(monkeypatch: pytest.MonkeyPatch, make_facts: MakeFacts) -> list[str | None]:
    """This machine's CPUs as an Ascend 950 host with one NPU: the plan's pool is every
    allowed CPU and all of it is main, so binding this very process changes nothing."""
    asked: list[str | None] = []
    cpus = sorted(os.sched_getaffinity(0))

    def read(soc: str | None = None) -> HostFacts:
        asked.append(soc)
        return make_facts(soc=soc or "A5", numa={0: cpus}, npus=1)

    monkeypatch.setattr("ascend_topology.cli.read_live_host", read)
    return asked


@pytest.fixture
def execvp(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, list[str]]]:
    calls: list[tuple[str, list[str]]] = []

    def fake(file: str, args: list[str]) -> None:
        calls.append((file, list(args)))
        if file == "missing-program":
            raise FileNotFoundError(errno.ENOENT, "No such file or directory")
        if "\0" in file:
            raise ValueError("embedded null byte")

    monkeypatch.setattr(os, "execvp", fake)
    return calls


@pytest.mark.parametrize("command", sorted(HELP))
def test_help_text(command: tuple[str, ...], capsys: pytest.CaptureFixture[str],
                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "100")
    with pytest.raises(SystemExit) as done:
        main([*command, "--help"])
    assert done.value.code == 0
    assert capsys.readouterr().out == HELP[command]


def test_usage_errors_exit_2(run_cli: Run, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["bind"])
    assert done.value.code == 2
    assert "the following arguments are required: --rank" in capsys.readouterr().err
    status, out, err = run_cli("bind", "--rank", "0", "--pid", "7", "--", "true")
    assert (status, out) == (2, "")
    assert err == ("ascend-topology: error: give either --pid or a COMMAND to run, "
                   "not both\n")
    status, _, err = run_cli("bind", "--rank", "0", "--host", "a2-8npu")
    assert err == ("ascend-topology: error: --host plans a recorded host; add --dry-run to "
                   "print its plan (binding needs this host's live facts)\n")


def test_soc_override_of_a_recorded_host(run_cli: Run) -> None:
    _, out, _ = run_cli("show", "--host", "a2-8npu", "--soc", "A3", "--json")
    assert json.loads(out)["soc"] == "A3"
    _, out, _ = run_cli("plan", "--host", "a2-8npu", "--soc", "A3", "--json")
    assert json.loads(out)["mode"] == "global_slice"
    _, out, _ = run_cli("show", "--host", "a2-8npu", "--soc", "A2", "--json")
    assert json.loads(out)["soc"] == "A2"
    _, out, _ = run_cli("show", "--host", "a2-8npu")
    assert out.splitlines()[1] == "soc: A2   arch: aarch64"


def test_plan_options_reach_the_plan(run_cli: Run) -> None:
    _, out, _ = run_cli("plan", "--host", "a2-8npu", "--json")
    assert json.loads(out)["options"] == {"min_cpus_per_npu": 5, "bind_irq": False,
                                          "migrate_memory": True}
    _, out, _ = run_cli("plan", "--host", "a2-8npu", "--json", "--no-migrate-memory",
                        "--bind-irq", "--min-cpus-per-npu", "6")
    assert json.loads(out)["options"] == {"min_cpus_per_npu": 6, "bind_irq": True,
                                          "migrate_memory": False}


def test_plan_text_marks_the_rank(run_cli: Run) -> None:
    status, out, err = run_cli("plan", "--host", "310p", "--rank", "1")
    assert (status, err) == (0, "")
    assert out.splitlines()[5].startswith("*1    1    0")
    status, out, err = run_cli("plan", "--host", "310p", "--rank", "2")
    assert (status, out) == (2, "") and "rank 2 is out of range" in err


def test_capture_passes_the_soc(run_cli: Run, install_fake_npu_smi: InstallFake,
                                tmp_path: Path) -> None:
    install_fake_npu_smi("a2-8npu")
    status, out, _ = run_cli("capture", tmp_path / "rec", "--soc", "A3")
    assert status == 0 and out.splitlines()[-1] == f"wrote {tmp_path}/rec/host.json"
    assert json.loads((tmp_path / "rec" / "host.json").read_text())["soc"] == "A3"


def test_examples_and_show_json(run_cli: Run) -> None:
    status, out, err = run_cli("examples")
    assert (status, err) == (0, "")
    assert out == "310p\n950-4numa\na2-8npu\na3-16die\nx86-a2\n"
    status, out, _ = run_cli("show", "--host", example_host_dir("310p"), "--json")
    assert status == 0 and json.loads(out)["npus"] == [0, 1, 2, 3]
    assert out.startswith('{\n  "source": ')  # indented two spaces


@pytest.fixture
def keep_affinity() -> Iterator[None]:
    tasks = Path("/proc/self/task")
    before = {int(t.name): os.sched_getaffinity(int(t.name)) for t in tasks.iterdir()}
    yield
    for tid, cpus in before.items():
        with contextlib.suppress(OSError):
            os.sched_setaffinity(tid, cpus)


@pytest.mark.usefixtures("keep_affinity")
def test_bind_then_exec_the_command(
    run_cli: Run, live: list[str | None], execvp: list[tuple[str, list[str]]]
) -> None:
    cpus = sorted(os.sched_getaffinity(0))
    status, out, err = run_cli("bind", "--rank", "0", "--no-migrate-memory", "--min-cpus-per-npu",
                               "1", "--", "echo", "hi", "--", "x")
    assert (status, err) == (0, "")
    assert execvp == [("echo", ["echo", "hi", "--", "x"])]
    bound = re.fullmatch(rf"process {os.getpid()}: \d+ threads -> main CPUs (\S+)",
                         out.splitlines()[0])
    assert bound is not None and parse_cpu_list(bound.group(1)) == cpus
    assert live == [None]
    status, _, err = run_cli("bind", "--rank", "0", "--no-migrate-memory", "--min-cpus-per-npu",
                             "1", "missing-program")
    assert status == 1
    assert err == ("ascend-topology: error: cannot run 'missing-program': No such file or "
                   "directory\n")
    assert execvp[-1] == ("missing-program", ["missing-program"])
    status, _, err = run_cli("bind", "--rank", "0", "--no-migrate-memory", "--min-cpus-per-npu",
                             "1", "bad\0name")
    assert (status, err) == (1, "ascend-topology: error: cannot run 'bad\\x00name': embedded "
                                "null byte\n")


def test_bind_refuses_a_plan_with_problems(run_cli: Run, live: list[str | None]) -> None:
    status, out, err = run_cli("bind", "--rank", "0", "--soc", "A2")
    assert (status, out) == (1, "")
    cpus = len(os.sched_getaffinity(0))
    assert err == (f"ascend-topology: error: cannot bind: 1 NPUs need at least 5 CPUs (5 per "
                   f"NPU); {cpus} are allowed\n")
    assert live == ["A2"]


def test_bind_dry_run_on_the_live_host(run_cli: Run, live: list[str | None]) -> None:
    status, out, _ = run_cli("bind", "--rank", "0", "--dry-run", "--min-cpus-per-npu", "1",
                             "--pid", "4242")
    assert status == 0
    assert out.splitlines()[-1] == ("dry run: would bind 4242 (rank 0) to NPU 0; nothing was "
                                    "changed")
    status, out, _ = run_cli("bind", "--rank", "0", "--dry-run", "--soc", "A2")
    assert status == 1
    assert out.splitlines()[-1] == ("dry run: would NOT bind this process (rank 0) to NPU 0; "
                                    "nothing was changed")


def test_bind_passes_the_irqbalance_opt_in(
    run_cli: Run, live: list[str | None], monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[tuple[int | None, bool]] = []

    def fake_apply(plan: object, rank: int, *, pid: int | None,
                   stop_irqbalance: bool) -> object:
        seen.append((pid, stop_irqbalance))
        from ascend_topology import ApplyReport

        return ApplyReport(rank=rank, pid=pid or 0, bound=False, skipped=["not bound"])

    monkeypatch.setattr("ascend_topology.cli.apply", fake_apply)
    status, out, _ = run_cli("bind", "--rank", "0", "--pid", "4242", "--min-cpus-per-npu", "1",
                             "--stop-irqbalance")
    assert (status, out, seen) == (1, "skipped: not bound\n", [(4242, True)])
    run_cli("bind", "--rank", "0", "--pid", "4242", "--min-cpus-per-npu", "1")
    assert seen[-1] == (4242, False)


def test_unexpected_errors_are_one_line(run_cli: Run, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args: object, **kwargs: object) -> None:
        raise ValueError("boom\nsecond line")

    monkeypatch.setattr("ascend_topology.cli.load_recorded_host", broken)
    status, out, err = run_cli("show", "--host", "a2-8npu")
    assert (status, out) == (1, "")
    assert err == "ascend-topology: error: unexpected ValueError: boom second line\n"


def test_broken_pipe_is_quiet(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                              capsys: pytest.CaptureFixture[str]) -> None:
    def closed(*args: object, **kwargs: object) -> None:
        raise BrokenPipeError(errno.EPIPE, "Broken pipe")

    monkeypatch.setattr("ascend_topology.cli.example_hosts", closed)
    with (tmp_path / "stdout").open("w") as sink:  # a real file: main redirects its fd
        monkeypatch.setattr(sys, "stdout", sink)
        assert main(["examples"]) == 1
    assert capsys.readouterr().err == ""


def test_a_command_is_required(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main([])
    assert done.value.code == 2
    assert "the following arguments are required: COMMAND" in capsys.readouterr().err


@pytest.mark.slow
@settings(max_examples=25, deadline=None, database=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.dictionaries(st.sampled_from(KEYS), VALUES, min_size=1, max_size=3),
       st.sampled_from([["plan", "--json"], ["show"], ["bind", "--rank", "0", "--dry-run"]]))
def test_cli_on_fuzzed_hosts(
    capsys: pytest.CaptureFixture[str], changes: dict[str, Any], argv: list[str]
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "host"
        folder.mkdir()
        for path in example_host_dir("a2-8npu").iterdir():
            (folder / path.name).write_bytes(path.read_bytes())
        meta = json.loads((folder / "host.json").read_text())
        meta.update(changes)
        (folder / "host.json").write_text(json.dumps(meta))
        status = main([*argv, "--host", str(folder)])
    out, err = capsys.readouterr()
    assert status in (0, 1, 2)
    assert "Traceback" not in err and "unexpected" not in err
    if status == 2:
        assert out == "" and err and all(
            line.startswith("ascend-topology: error: ") for line in err.splitlines())
    if status == 0 and argv[0] == "plan":
        assert json.loads(out)["ok"] is True


def test_every_problem_is_one_cli_line_and_exit_2(tmp_path: Path, run_cli: Run) -> None:
    folder = copy_example(tmp_path)
    edit_meta(folder, threads_per_core=0, allowed_cpus=[10**30])
    status, out, err = run_cli("plan", "--host", folder, "--json")
    assert (status, out) == (2, "")
    assert err.splitlines() == [
        f"ascend-topology: error: {folder}/host.json: threads_per_core: must be 1..8; got 0",
        f"ascend-topology: error: {folder}/host.json: allowed_cpus: CPU list: CPU "
        "1000000000000000000000000000000 is outside 0..8191",
    ]


def _two_npu_host(folder: Path, soc: str) -> Path:
    """Two NPUs of the 950 recording (A5), or with their chip names removed (the A2 default),
    so that the chips never contradict host.json's soc."""
    folder.mkdir()
    chip_map = (example_host_dir("950-4numa") / "npu-smi-info-m.txt").read_text()
    lines = chip_map.splitlines()[:3]
    if soc != "A5":
        lines = [re.sub(r"Ascend\s*950\S*", "", line) for line in lines]
    (folder / "npu-smi-info-m.txt").write_text("\n".join(lines) + "\n")
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


def test_plan_refuses_a_host_json_giving_a_key_twice(run_cli: Run, tmp_path: Path) -> None:
    folder = copy_example(tmp_path)
    host = folder / "host.json"
    text = host.read_text()
    # Two SoCs: json alone keeps the second without a word and plans an A2.
    assert '"soc": "A2",' in text
    host.write_text(text.replace('"soc": "A2",', '"soc": "A3",\n  "soc": "A2",', 1))
    status, out, err = run_cli("plan", "--host", str(folder))
    assert (status, out) == (2, "")
    assert err == (f"ascend-topology: error: {host}: the key 'soc' is given twice; "
                   "give each key once\n")


def _noise(length: int) -> bytes:
    # Bytes that are not UTF-8 (0x80 alone is a continuation byte with no lead), then random.
    import random

    return b"\x80" + random.Random(37).randbytes(length - 1)


RECORDED_DAMAGE: dict[str, tuple[str, bytes, str]] = {
    # npu-smi info printed nothing: not "no process is running".
    "empty npu-smi info": ("npu-smi-info.txt", b"",
                           "npu-smi info: the output is empty (npu-smi printed nothing)"),
    "text noise as npu-smi info": (
        "npu-smi-info.txt", b"Segmentation fault (core dumped)\n",
        "npu-smi info: not npu-smi's tables (no '| NPU ...' header row of the NPU or process "
        "table; first line 'Segmentation fault (core dumped)')"),
    "binary noise as npu-smi info": (
        "npu-smi-info.txt", _noise(3000),
        "npu-smi-info.txt is not UTF-8 text (byte 0x80 at offset 0); a recorded file is UTF-8 "
        "text"),
    "binary noise as the topology": (
        "npu-smi-info-t-topo.txt", _noise(3000),
        "npu-smi-info-t-topo.txt is not UTF-8 text (byte 0x80 at offset 0)"),
    # '{"arch": "aarch64", "soc": "A2' is 30 bytes: the Latin-1 e-acute is at offset 30.
    "host.json with a Latin-1 string": (
        "host.json", b'{"arch": "aarch64", "soc": "A2\xe9", "allowed_cpus": "0-191"}',
        "host.json is not UTF-8 text (byte 0xe9 at offset 30)"),
}


@pytest.mark.parametrize("case", sorted(RECORDED_DAMAGE))
@pytest.mark.parametrize("command", ["show", "plan"])
def test_a_damaged_recorded_host_is_one_error(run_cli: Run, tmp_path: Path, case: str,
                                              command: str) -> None:
    name, data, message = RECORDED_DAMAGE[case]
    folder = copy_example(tmp_path, "a2-8npu")
    (folder / name).write_bytes(data)
    status, out, err = run_cli(command, "--host", folder)
    assert (status, out) == (2, "")
    assert err.startswith(f"ascend-topology: error: recorded host {folder}: ") and message in err
    assert err.count("\n") == 1 and "Traceback" not in err


@pytest.mark.parametrize(("change", "message"), [
    # The chips are Ascend 910B3 (A2): a recording saying A3 contradicts them.
    ({"soc": "A3"}, "host.json says soc 'A3' but npu-smi's chip names say 'A2'; record the soc "
                    "the chips have (override with --soc)"),
    ({"visible_devices": "0,0,1"}, "visible devices '0,0,1': device 0 is listed twice; list "
                                   "each device once"),
    ({"visible_devices": [3, 1, 3]}, "device 3 is listed twice"),
    ({"pcie": {"0": "0000:c1:00.0", "1": "0000:c1:00.0"}},
     "pcie: NPUs 0 and 1 are both given the address 0000:c1:00.0"),
    ({"visable_devices": "0"}, "unknown key 'visable_devices'; known: arch, soc, "),
])
def test_a_recorded_host_contradicting_itself_is_one_error(
    run_cli: Run, tmp_path: Path, change: dict[str, object], message: str,
) -> None:
    folder = copy_example(tmp_path, "a2-8npu")
    edit_meta(folder, **change)
    status, out, err = run_cli("plan", "--host", folder)
    assert (status, out) == (2, "")
    assert err.startswith("ascend-topology: error: ") and message in err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_soc_override_of_a_recording_is_the_command_option(run_cli: Run) -> None:
    status, out, _ = run_cli("show", "--host", "a2-8npu", "--soc", "A3", "--json")
    assert status == 0 and json.loads(out)["soc"] == "A3"


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full (Linux)")
@pytest.mark.parametrize("argv", [["plan", "--host", "a2-8npu"], ["examples"],
                                  ["show", "--host", "a2-8npu", "--json"]])
def test_a_stdout_that_refuses_the_output_is_one_error(argv: list[str]) -> None:
    script = Path(sys.executable).parent / "ascend-topology"
    with open("/dev/full", "w") as full:
        done = subprocess.run([str(script), *argv], stdout=full, stderr=subprocess.PIPE,
                              text=True, timeout=60, check=False)
    assert done.returncode == 74
    assert done.stderr == "ascend-topology: error: no space left on device writing /dev/full\n"


def _close_stdout() -> None:
    os.close(1)


@pytest.mark.parametrize("argv", [["plan", "--host", "a2-8npu"], ["examples"],
                                  ["show", "--host", "a2-8npu", "--json"],
                                  ["bind", "--host", "a2-8npu", "--dry-run", "--rank", "0"]])
def test_a_closed_stdout_is_one_error(argv: list[str]) -> None:
    script = Path(sys.executable).parent / "ascend-topology"
    done = subprocess.run([str(script), *argv], stderr=subprocess.PIPE, text=True, timeout=60,
                          check=False, preexec_fn=_close_stdout)
    assert done.returncode == 1
    assert done.stderr == "ascend-topology: error: cannot write to stdout: stdout is closed\n"


@pytest.mark.parametrize(("encoding", "locale", "shown"), [
    ("utf-8", None, b"/\xffhost"),  # the path's own byte, as the shell would show it
    ("ascii", "C", b"/\xffhost"),
])
def test_a_path_that_is_not_utf8_is_printed_as_its_bytes(
        tmp_path: Path, encoding: str, locale: str | None, shown: bytes) -> None:
    host = Path(os.fsdecode(bytes(tmp_path) + b"/\xffhost"))
    shutil.copytree(example_host_dir("a2-8npu"), host)
    env = {**os.environ, "PYTHONIOENCODING": encoding}
    if locale is not None:
        env["LC_ALL"] = locale
    script = Path(sys.executable).parent / "ascend-topology"
    done = subprocess.run([str(script), "plan", "--host", str(host)], capture_output=True,
                          timeout=60, check=False, env=env)
    assert done.returncode == 0, done.stderr
    assert bytes(tmp_path) + shown in done.stdout.splitlines()[0]
