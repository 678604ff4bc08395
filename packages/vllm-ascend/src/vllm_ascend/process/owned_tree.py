"""A command that owns the processes it starts (`vllm-ascend serve` and `demo`)."""
# The command is the child subreaper (PR_SET_CHILD_SUBREAPER) so orphaned engine cores and
# workers become its children and end_process_tree ends them however the command ends.

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import functools
import logging
import os
import signal
import sys
import threading
import time
from types import FrameType
from typing import NoReturn

import psutil

logger = logging.getLogger(__name__)

PR_SET_CHILD_SUBREAPER = 36  # <linux/prctl.h>
# Seconds the descendants get between SIGTERM and SIGKILL (the command must be gone within
# 10 s of a signal: the engine's own shutdown took part of that already).
TERM_GRACE_S = 3.0
# Seconds after a shutdown signal during start-up by which the command has exited.
EXIT_BOUND_S = 8.0


def become_subreaper() -> bool:
    """Make this process the subreaper of its descendants; False where the kernel refuses."""
    libc_name = ctypes.util.find_library("c")
    if libc_name is None:
        return False
    libc = ctypes.CDLL(libc_name, use_errno=True)
    return int(libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)) == 0


def interrupt_on_sigterm(exit_status: int = 0) -> None:
    """Install :func:`interrupt_start_up` for SIGTERM until vLLM's serving loop installs its own."""
    signal.signal(signal.SIGTERM, functools.partial(interrupt_start_up, exit_status=exit_status))


def interrupt_start_up(signum: int, frame: FrameType | None, exit_status: int = 0) -> NoReturn:
    """On a shutdown signal before serving: SIGTERM the descendants now, interrupt the command as
    Ctrl-C does, and exit with ``exit_status`` if unwinding outlasts :data:`EXIT_BOUND_S`."""
    # The exit is bound from here on; a later signal (vLLM's clean-up of a half-started engine
    # may signal the process group) must not kill the command with its default action.
    signal.signal(signum, _stopping)
    threading.Thread(target=_end_within, args=(time.monotonic() + EXIT_BOUND_S, exit_status),
                     name="vllm-ascend-end-tree", daemon=True).start()
    raise KeyboardInterrupt(f"signal {signum}")


def _stopping(signum: int, frame: FrameType | None) -> None:
    """A shutdown signal after the first: the command is already stopping."""


def start_up_interrupted() -> bool:
    """Whether a shutdown signal interrupted this command's start-up (whatever exception vLLM
    turned the interrupt into while it unwound, e.g. a launch that "didn't yield")."""
    return signal.getsignal(signal.SIGTERM) is _stopping


def _end_within(deadline: float, exit_status: int) -> None:
    end_process_tree()
    time.sleep(max(0.0, deadline - time.monotonic()))
    end_process_tree(grace_s=0.5)
    with contextlib.suppress(Exception):
        print("vllm-ascend: start-up interrupted by a signal; exiting", file=sys.stderr,
              flush=True)
    os._exit(exit_status)


def end_process_tree(grace_s: float = TERM_GRACE_S) -> int:
    """SIGTERM every descendant, SIGKILL the rest after ``grace_s``, reap; how many there were."""
    try:
        descendants = psutil.Process(os.getpid()).children(recursive=True)
    except psutil.Error:
        return 0
    if not descendants:
        return 0
    for child in descendants:
        with contextlib.suppress(psutil.Error):  # gone meanwhile
            child.terminate()
    _, alive = psutil.wait_procs(descendants, timeout=grace_s)
    for child in alive:
        with contextlib.suppress(psutil.Error):
            child.kill()
    psutil.wait_procs(alive, timeout=grace_s)
    _reap_orphans()
    logger.debug("ended %d leftover processes", len(descendants))
    return len(descendants)


def _reap_orphans() -> None:
    """Collect the exit status of adopted orphans (they are this subreaper's children now)."""
    deadline = time.monotonic() + 1.0
    while time.monotonic() < deadline:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            time.sleep(0.05)
