"""Process trees and sessions read from /proc: a hand-written /proc, then real processes."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from vllm_ascend_testing.process_tree import (
    ProcessId,
    ProcessInfo,
    leftovers,
    live_processes,
    parse_stat,
    process_info,
    process_tree,
    session_members,
    still_alive,
)


def _stat(pid: int, name: str, state: str, ppid: int, pgid: int, sid: int, start: int) -> str:
    # proc(5): pid (comm) state ppid pgrp session tty_nr tpgid flags minflt cminflt majflt
    # cmajflt utime stime cutime cstime priority nice num_threads itrealvalue starttime ...
    middle = " ".join(["0"] * 15)
    return f"{pid} ({name}) {state} {ppid} {pgid} {sid} {middle} {start} 1234 56\n"


@pytest.fixture
def fake_proc(tmp_path: Path) -> Path:
    """1 init; 10 server (session 10) -> 11 engine core -> 12, 13 workers; 14 a zombie
    child of 10; 20 an unrelated process; 15 reparented to init but still in session 10."""
    rows = [(1, "init", "S", 0, 1, 1, 5), (10, "python", "S", 1, 10, 10, 100),
            (11, "VLLM::EngineCor", "R", 10, 10, 10, 110),
            (12, "VLLM::Worker_TP0", "R", 11, 10, 10, 120),
            (13, "VLLM::Worker_TP1", "S", 11, 10, 10, 121), (14, "sh", "Z", 10, 10, 10, 130),
            (15, "orphan", "S", 1, 10, 10, 140), (20, "other", "S", 1, 20, 20, 200)]
    for pid, name, state, ppid, pgid, sid, start in rows:
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "stat").write_text(_stat(pid, name, state, ppid, pgid, sid, start))
    (tmp_path / "self").mkdir()  # not a pid: skipped
    return tmp_path


def test_parse_stat_with_spaces_and_parentheses_in_the_name() -> None:
    info = parse_stat(_stat(42, "a) (b c", "S", 7, 8, 9, 31337))
    assert info == ProcessInfo(ProcessId(42, 31337), ppid=7, pgid=8, sid=9, state="S",
                               name="a) (b c")


def test_process_tree_follows_parent_pids_and_skips_zombies(fake_proc: Path) -> None:
    tree = process_tree(10, fake_proc)
    # Breadth first; 14 is a zombie, 15 has another parent.
    assert [p.id.pid for p in tree] == [10, 11, 12, 13]
    assert tree[0].id == ProcessId(10, 100)
    assert process_tree(12, fake_proc)[0].name == "VLLM::Worker_TP0"
    assert process_tree(14, fake_proc) == []  # a zombie is gone
    assert process_tree(99, fake_proc) == []


def test_session_members_include_reparented_processes(fake_proc: Path) -> None:
    assert sorted(p.id.pid for p in session_members(10, fake_proc)) == [10, 11, 12, 13, 15]
    assert [p.id.pid for p in session_members(20, fake_proc)] == [20]
    assert sorted(p.id.pid for p in live_processes(fake_proc)) == [1, 10, 11, 12, 13, 15, 20]


def test_still_alive_tells_a_reused_pid_from_the_same_process(fake_proc: Path) -> None:
    tree = process_tree(10, fake_proc)
    assert still_alive(tree, fake_proc) == tree
    reused = ProcessInfo(ProcessId(12, 999), 11, 10, 10, "R", "VLLM::Worker_TP0")
    assert still_alive([reused], fake_proc) == []
    (fake_proc / "13" / "stat").write_text(_stat(13, "VLLM::Worker_TP1", "Z", 11, 10, 10, 121))
    assert process_info(13, fake_proc) is None
    assert [p.id.pid for p in still_alive(tree, fake_proc)] == [10, 11, 12]


def test_leftovers_lists_tree_and_session_survivors(fake_proc: Path) -> None:
    tree = process_tree(11, fake_proc)  # engine core and workers
    start = time.monotonic()
    found = leftovers(tree, 10, timeout=0.3, interval=0.05, proc=fake_proc)
    assert time.monotonic() - start >= 0.3  # waited the whole bound for them to go
    assert sorted(p.id.pid for p in found) == [10, 11, 12, 13, 15]
    for pid in (10, 11, 12, 13, 15):
        (fake_proc / str(pid) / "stat").unlink()
    assert leftovers(tree, 10, timeout=5.0, proc=fake_proc) == []


def test_a_real_tree_and_session_are_seen_and_then_gone() -> None:
    # A new session whose leader starts a grandchild `sleep`; the leader then exits, leaving
    # the sleep reparented but still in the session.
    code = ("import subprocess, sys, time; "
            "p = subprocess.Popen(['sleep', '60']); print(p.pid, flush=True); time.sleep(60)")
    leader = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                              start_new_session=True)
    try:
        assert leader.stdout is not None
        child = int(leader.stdout.readline())
        tree = process_tree(leader.pid)
        assert [p.id.pid for p in tree] == [leader.pid, child]
        assert tree[1].ppid == leader.pid and tree[1].sid == leader.pid
        # The start time agrees with psutil's reading of the same process.
        ticks = os.sysconf("SC_CLK_TCK")
        assert tree[1].id.start_ticks / ticks + psutil.boot_time() == pytest.approx(
            psutil.Process(child).create_time(), abs=0.05)
        assert tree[1].name == psutil.Process(child).name() == "sleep"
        leader.kill()
        leader.wait(timeout=30)
        assert [p.id.pid for p in session_members(leader.pid)] == [child]
        assert [p.id.pid for p in leftovers(tree, leader.pid, timeout=0.1)] == [child]
        os.killpg(leader.pid, signal.SIGKILL)
        assert leftovers(tree, leader.pid, timeout=30.0) == []
    finally:
        leader.kill()
        leader.wait(timeout=30)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(leader.pid, signal.SIGKILL)
