from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest
from ascend_topology import (
    MAX_CPU_ID,
    CommandError,
    ParseError,
    TopologyError,
    format_cpu_list,
    parse_cpu_list,
    threads_per_core,
)
from ascend_topology.facts import parse_visible_devices
from ascend_topology.system import (
    find_threads_named,
    parse_lscpu_nodes,
    parse_threads_per_core,
    read_allowed_cpus,
    read_numa,
    read_numa_sysfs,
    read_thread_names,
    read_threads_per_core,
    run_command,
)
from hypothesis import example, given

from .fuzz_checks import result_or_error
from .fuzz_inputs import FUZZ, TEXTS


def test_run_command_uses_c_locale_without_shell() -> None:
    code = "import os; print(os.environ['LC_ALL'], os.environ['LANG'], '$HOME')"
    out = run_command([sys.executable, "-c", code], environ={"LC_ALL": "de_DE.UTF-8"})
    assert out.split() == ["C", "C", "$HOME"]  # no shell: $HOME stays literal


def test_run_command_missing_program() -> None:
    with pytest.raises(CommandError, match="not found on PATH"):
        run_command(["definitely-not-a-program-xyz", "info"])


def test_run_command_nonzero_exit() -> None:
    with pytest.raises(CommandError, match="exited with status 3"):
        run_command([sys.executable, "-c", "raise SystemExit(3)"])


def test_run_command_timeout_kills_the_child() -> None:
    with pytest.raises(CommandError, match=r"did not finish within 0\.2 s"):
        run_command([sys.executable, "-c", "while True: pass"], timeout=0.2)


def test_lscpu_nodes_reference_example() -> None:
    assert parse_lscpu_nodes("CPU NODE\n0 0\n1 1\n") == {0: [0], 1: [1]}
    assert parse_lscpu_nodes("\nCPU NODE\n  2    0\n  0    0\n  1    -\n") == {0: [0, 2]}


def test_lscpu_nodes_without_rows_is_a_parse_error() -> None:
    with pytest.raises(ParseError, match="no 'CPU NODE' rows"):
        parse_lscpu_nodes("CPU NODE\n")


def test_threads_per_core_from_lscpu() -> None:
    assert parse_threads_per_core("Architecture: aarch64\nThread(s) per core:  2\n") == 2
    assert parse_threads_per_core("Architecture: x86_64\n") is None


def test_numa_from_sysfs_tree(tmp_path: Path) -> None:
    for node, cpus in (("node0", "0-3\n"), ("node1", "4-5,8\n"), ("node2", "\n")):
        (tmp_path / node).mkdir()
        (tmp_path / node / "cpulist").write_text(cpus)
    (tmp_path / "possible").write_text("0-2\n")
    assert read_numa_sysfs(tmp_path) == {0: [0, 1, 2, 3], 1: [4, 5, 8]}
    assert read_numa_sysfs(tmp_path / "missing") == {}


def test_live_numa_and_smt_on_this_machine() -> None:
    numa, _ = read_numa()
    all_cpus = sorted(c for cpus in numa.values() for c in cpus)
    assert set(read_allowed_cpus()) <= set(all_cpus)
    assert read_threads_per_core() >= 1


def test_thread_names_from_proc() -> None:
    ready = threading.Event()
    stop = threading.Event()

    def worker() -> None:
        tid = threading.get_native_id()
        Path(f"/proc/self/task/{tid}/comm").write_text("acl_thread")
        ready.set()
        stop.wait(10)

    thread = threading.Thread(target=worker)
    thread.start()
    try:
        assert ready.wait(10)
        names = read_thread_names(os.getpid())
        assert "acl_thread" in names.values()
        assert names[threading.get_native_id()] != "acl_thread"
        named = [tid for tid, name in names.items() if name == "acl_thread"]
        assert find_threads_named("acl_thread") == named
    finally:
        stop.set()
        thread.join()


@pytest.mark.parametrize(("text", "threads"), [
    ("Thread(s) per core: 2", 2), ("Thread(s) per core:   999 ", 999),
    ("Thread(s) per core: 1000", None), ("Thread(s) per core: 0", None),
    ("Thread(s) per core: 1", 1), ("Thread(s) per core: \u0663", None),
    ("Thread(s) per core: \u00b2", None), ("Thread(s) per core:", None),
    ("Thread(s) per core: 2: 4", None), ("Thread(s) per core: x\nThread(s) per core: 4", 4),
])
def test_threads_per_core_values(text: str, threads: int | None) -> None:
    assert parse_threads_per_core(text) == threads


@pytest.mark.timeout(30)
def test_sysfs_entries_in_order_skipping_what_is_not_a_node(tmp_path: Path) -> None:
    # "has_cpu" sorts before the nodes; node1's cpulist cannot be read; node2 is fine.
    (tmp_path / "has_cpu").write_text("0-3\n")
    for node in ("node0", "node1", "node2"):
        (tmp_path / node).mkdir()
    (tmp_path / "node0" / "cpulist").write_text("0-1\n")
    os.mkfifo(tmp_path / "node1" / "cpulist")
    (tmp_path / "node2" / "cpulist").write_text("2-3\n")
    assert read_numa_sysfs(tmp_path) == {0: [0, 1], 2: [2, 3]}


def test_numa_falls_back_to_lscpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "lscpu").write_text(
        f"#!{sys.executable}\nimport sys\n"
        "print('CPU NODE') if sys.argv[1:] == ['-e=CPU,NODE'] else sys.exit(1)\n"
        "print('0 0'); print('1 1')\n")
    (bin_dir / "lscpu").chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir))
    assert read_numa(tmp_path / "no-sysfs") == ({0: [0], 1: [1]}, "CPU NODE\n0 0\n1 1\n")
    (tmp_path / "node0").mkdir()
    (tmp_path / "node0" / "cpulist").write_text("5\n")
    assert read_numa(tmp_path) == ({0: [5]}, None)


def test_allowed_cpus_are_capped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {3, 9000})
    with pytest.raises(ParseError) as caught:
        read_allowed_cpus()
    assert str(caught.value) == "allowed CPUs: CPU 9000 is outside 0..8191"


@pytest.mark.timeout(30)
def test_thread_readers_skip_what_they_cannot_read(tmp_path: Path) -> None:
    task = tmp_path / "9" / "task"
    for tid in ("0x", "10", "11", "12", "abc", "\u0663"):
        (task / tid).mkdir(parents=True)
    os.mkfifo(task / "10" / "comm")
    (task / "11" / "comm").write_text("acl_thread\n")
    (task / "abc" / "comm").write_text("acl_thread\n")
    (task / "\u0663" / "comm").write_text("acl_thread\n")
    (task / "12" / "comm").write_text("acl_thread\n")
    assert read_thread_names(9, tmp_path) == {11: "acl_thread", 12: "acl_thread"}
    other = tmp_path / "20" / "task" / "21"
    other.mkdir(parents=True)
    (other / "comm").write_text("acl_thread")
    assert find_threads_named("acl_thread", tmp_path) == [11, 12, 21]
    assert find_threads_named("python", tmp_path) == []


def test_allowed_cpus_of_this_thread() -> None:
    before = os.sched_getaffinity(0)
    one = min(before)
    try:
        os.sched_setaffinity(0, {one})
        assert read_allowed_cpus() == [one]  # this thread's, not another process's
    finally:
        os.sched_setaffinity(0, before)


def test_threads_per_core_reads_cpu0_only(tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "no-bin"))
    for cpu, siblings in (("cpu0", "\n"), ("cpu1", "1,2\n")):
        (tmp_path / cpu / "topology").mkdir(parents=True)
        (tmp_path / cpu / "topology" / "thread_siblings_list").write_text(siblings)
    assert read_threads_per_core(tmp_path) == 1  # cpu0 says nothing: lscpu, else 1
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "lscpu").write_text(f"#!{sys.executable}\nprint('Architecture: x86_64')\n")
    (bin_dir / "lscpu").chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir))
    assert read_threads_per_core(tmp_path / "none") == 1


def test_commands_get_no_stdin_and_their_stderr_is_dropped(
    capfd: pytest.CaptureFixture[str],
) -> None:
    code = "import sys; sys.stderr.write('noise'); print(repr(sys.stdin.read()))"
    assert run_command([sys.executable, "-c", code], timeout=20) == "''\n"
    assert capfd.readouterr().err == ""


def test_unreadable_cpu0_topology_falls_back(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "no-bin"))
    (tmp_path / "cpu0" / "topology").mkdir(parents=True)  # no thread_siblings_list
    (tmp_path / "cpu1" / "topology").mkdir(parents=True)
    (tmp_path / "cpu1" / "topology" / "thread_siblings_list").write_text("1-2\n")
    assert read_threads_per_core(tmp_path) == 1


def test_reaping_after_eof_waits_only_for_what_is_left_of_the_timeout() -> None:

    from ascend_topology.system import _bounded_output, _Overrun

    read_end, write_end = os.pipe()
    os.close(write_end)  # the child closed its stdout: EOF at once
    waited: list[float] = []

    class Child:
        stdout = os.fdopen(read_end, "rb")

        def wait(self, timeout: float) -> int:
            waited.append(timeout)
            raise subprocess.TimeoutExpired("child", timeout)

    child = Child()
    try:
        with pytest.raises(_Overrun, match=r"did not finish within 0\.2 s"):
            _bounded_output(child, 0.2, 100)  # type: ignore[arg-type]
    finally:
        child.stdout.close()
    assert len(waited) == 1 and 0.0 <= waited[0] <= 0.2


def test_commands_do_not_read_the_callers_stdin() -> None:
    read_end, write_end = os.pipe()
    os.write(write_end, b"secret")
    os.close(write_end)
    saved = os.dup(0)
    os.dup2(read_end, 0)  # our stdin now holds data a child could read
    os.close(read_end)
    try:
        out = run_command([sys.executable, "-c", "import sys; print(repr(sys.stdin.read()))"],
                          timeout=20)
    finally:
        os.dup2(saved, 0)
        os.close(saved)
    assert out == "''\n"


def test_lscpu_cpu_under_two_nodes_is_an_error_naming_both_rows() -> None:
    assert parse_lscpu_nodes("\ufeff0 0\n1 0\n") == {0: [0, 1]}  # a BOM does not hide CPU 0
    assert parse_lscpu_nodes("0 0\n0 0\n") == {0: [0]}  # the same row again contradicts nothing
    with pytest.raises(ParseError, match=r"^lscpu -e=CPU,NODE: CPU 1 is in NUMA node 0 "
                                         r"\(line 2\) and in NUMA node 1 \(line 3\)$"):
        parse_lscpu_nodes("CPU NODE\n1 0\n1 1\n")




@pytest.mark.slow
@FUZZ
@given(TEXTS)
@example("\u00b2")  # isdigit() but not int()-able
@example("1" * 5000 + "-2")  # beyond int()'s digit limit
@example("0 \u00b2\nThread(s) per core: \u0663")
@example("8191 0\n8192 1\n")
def test_system_and_list_parsers(text: str) -> None:
    nodes = result_or_error(lambda: parse_lscpu_nodes(text))
    if nodes is not None:
        assert nodes and all(cpus == sorted(set(cpus)) for cpus in nodes.values())
        assert all(0 <= c <= MAX_CPU_ID for cpus in nodes.values() for c in cpus)
    cpus = result_or_error(lambda: parse_cpu_list(text))
    if cpus is not None:
        assert cpus == sorted(set(cpus)) and all(0 <= c <= MAX_CPU_ID for c in cpus)
        assert parse_cpu_list(format_cpu_list(cpus)) == cpus  # round trip
    devices = result_or_error(lambda: parse_visible_devices(text))
    if devices is not None:
        assert all(d >= 0 for d in devices)
        assert parse_visible_devices(",".join(map(str, devices))) == (devices or None)
    tpc = parse_threads_per_core(text)
    assert tpc is None or 1 <= tpc <= 999


def test_lscpu_cpu_ids_are_capped() -> None:
    assert parse_lscpu_nodes("CPU NODE\n8191 0\n") == {0: [8191]}
    with pytest.raises(ParseError, match=re.escape("CPU 8192 is outside 0..8191")):
        parse_lscpu_nodes("CPU NODE\n8192 0\n")


def _message(error: type[Exception], call: Callable[[], object]) -> str:
    with pytest.raises(error) as caught:
        call()
    return str(caught.value)


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
