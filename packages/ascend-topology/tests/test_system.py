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
