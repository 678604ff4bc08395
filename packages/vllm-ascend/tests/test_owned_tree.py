"""The commands' ownership of their process tree: orphans come back to the command (child
subreaper) and are ended with the rest; a SIGTERM before serving ends the tree at once."""

from __future__ import annotations

import subprocess
import sys
import time

# A middle process starts a sleeper and exits at once: the sleeper is an orphan.
ORPHAN_TREE = """
import os, subprocess, sys, time
from vllm_ascend.process.owned_tree import become_subreaper, end_process_tree
assert become_subreaper()
middle = subprocess.Popen([sys.executable, "-c",
    "import subprocess, sys; p = subprocess.Popen(['sleep', '300']); print(p.pid)"],
    stdout=subprocess.PIPE, text=True)
sleeper = int(middle.stdout.readline())
middle.wait()
time.sleep(0.2)
print(sleeper, os.getppid() != 0, flush=True)
print(end_process_tree(grace_s=2.0), flush=True)
"""


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True


def test_an_orphaned_grandchild_is_adopted_and_ended() -> None:
    done = subprocess.run([sys.executable, "-c", ORPHAN_TREE], capture_output=True, text=True,
                          timeout=120, check=True)
    lines = done.stdout.split()
    sleeper, ended = int(lines[0]), int(lines[2])
    assert ended == 1  # found through the subreaper: its parent had already exited
    assert _gone(sleeper)


SIGTERM_DURING_START_UP = """
import subprocess, time
from vllm_ascend.process.owned_tree import become_subreaper, interrupt_on_sigterm
become_subreaper()
interrupt_on_sigterm(exit_status=7)
child = subprocess.Popen(["sleep", "300"])
told = False
while True:  # a "start-up" that never unwinds: only the bound ends it
    try:
        if not told:
            told = True
            print(child.pid, flush=True)
        time.sleep(60)
    except KeyboardInterrupt:
        pass
"""


def test_sigterm_ends_the_tree_and_the_process_within_the_bound() -> None:
    import signal

    from vllm_ascend.process.owned_tree import EXIT_BOUND_S

    proc = subprocess.Popen([sys.executable, "-c", SIGTERM_DURING_START_UP],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    child = int(proc.stdout.readline())
    signalled = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    status = proc.wait(timeout=EXIT_BOUND_S + 20)
    assert time.monotonic() - signalled <= EXIT_BOUND_S + 5
    assert status == 7  # the bound's exit, with the command's status
    assert _gone(child)
    assert "start-up interrupted by a signal" in (proc.stderr.read() if proc.stderr else "")


# Start-up interrupted by SIGTERM while vLLM launches its engine: vLLM's clean-up swallows the
# interrupt, signals the process group again and raises something else ("generator didn't
# yield"). The command still knows the start-up was interrupted, and the second signal does not
# kill it with SIGTERM's default action.
SIGTERM_TWICE = """
import os, signal, sys
from vllm_ascend.process.owned_tree import interrupt_on_sigterm, start_up_interrupted
interrupt_on_sigterm(exit_status=7)
before = start_up_interrupted()
try:
    try:
        os.kill(os.getpid(), signal.SIGTERM)
        signal.pause()
    except KeyboardInterrupt:
        os.kill(os.getpid(), signal.SIGTERM)  # vLLM's clean-up signals the group
        raise RuntimeError("generator didn't yield") from None
except RuntimeError:
    print(before, start_up_interrupted(), flush=True)
    sys.exit(0)
"""


def test_a_second_sigterm_while_start_up_unwinds_changes_nothing() -> None:
    done = subprocess.run([sys.executable, "-c", SIGTERM_TWICE], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "True"]
