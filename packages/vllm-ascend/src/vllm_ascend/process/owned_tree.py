"""A command that owns the processes it starts: `vllm-ascend serve` and `vllm-ascend demo`.

vLLM's engine core and its workers are children (and grandchildren) of the command. A shutdown
signal while the engine core starts interrupts the parent before the engine's own shutdown is in
place, and an engine core that dies first leaves its workers to ``init``. So the command makes
itself the child subreaper (``prctl(PR_SET_CHILD_SUBREAPER)``, Linux): orphaned descendants
become its children instead of ``init``'s, and :func:`end_process_tree` can find and end every
one of them when the command ends, however it ends.
"""

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
    """Install :func:`interrupt_start_up` for SIGTERM, exiting with ``exit_status`` if the
    bound is reached (vLLM's serving loop installs its own handler once it serves)."""
    signal.signal(signal.SIGTERM, functools.partial(interrupt_start_up, exit_status=exit_status))


def interrupt_start_up(signum: int, frame: FrameType | None, exit_status: int = 0) -> NoReturn:
    """A shutdown signal before the command serves: the descendants get SIGTERM now (SIGKILL
    after :data:`TERM_GRACE_S`, from a thread), rather than after vLLM's own start-up shutdown
    (which waits on workers with grace periods of its own), and the command is interrupted as
    by Ctrl-C so that its ``finally`` blocks run. Should that unwinding still be busy
    :data:`EXIT_BOUND_S` after the signal, the process exits there with ``exit_status``
    (serve: 0, as after a requested shutdown): nothing of a start-up is worth keeping."""
    threading.Thread(target=_end_within, args=(time.monotonic() + EXIT_BOUND_S, exit_status),
                     name="vllm-ascend-end-tree", daemon=True).start()
    raise KeyboardInterrupt(f"signal {signum}")


def _end_within(deadline: float, exit_status: int) -> None:
    end_process_tree()
    time.sleep(max(0.0, deadline - time.monotonic()))
    end_process_tree(grace_s=0.5)
    with contextlib.suppress(Exception):
        print("vllm-ascend: start-up interrupted by a signal; exiting", file=sys.stderr,
              flush=True)
    os._exit(exit_status)


def end_process_tree(grace_s: float = TERM_GRACE_S) -> int:
    """SIGTERM every live descendant of this process, SIGKILL what is left after ``grace_s``
    seconds, and reap them; returns how many there were."""
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
