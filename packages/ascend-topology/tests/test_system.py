from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

import pytest
from ascend_topology import CommandError, ParseError
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
    import subprocess

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
