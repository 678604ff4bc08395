"""``import torch`` then ``import torch_npu`` in a child interpreter with a time limit."""
# Either import can fail or crash on a broken CANN; the child runs with -P in a fresh private folder
# and its whole process group is killed when it ends or times out.

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass

PROBE_TIMEOUT_S = 120.0
# Seconds to collect the output of a killed child (its pipes close when the group is gone).
_DRAIN_S = 5.0
_CODE = """
import json
stage = "torch"
try:
    import torch
    stage = "torch_npu"
    import torch_npu
    print(json.dumps({"ok": True, "cann": getattr(torch.version, "cann", None),
                      "devices": int(torch_npu.npu.device_count())}))
except BaseException as exc:
    print(json.dumps({"ok": False, "stage": stage, "error": f"{type(exc).__name__}: {exc}"}))
"""


@dataclass(frozen=True)
class ProbeResult:
    """``ok``; the stage that failed (``torch`` or ``torch_npu``) and its error otherwise."""

    ok: bool
    stage: str | None = None
    error: str | None = None
    cann: str | None = None
    devices: int | None = None


def probe_command(python: str = sys.executable) -> list[str]:
    """The child's command line: ``-P`` where the interpreter knows it (3.11+)."""
    safe_path = ["-P"] if sys.version_info >= (3, 11) else []
    return [python, *safe_path, "-c", _CODE]


def _descendants(pid: int) -> list[int]:
    """The processes below ``pid`` (psutil, ascend-topology's dependency), best effort."""
    import psutil

    try:
        return [child.pid for child in psutil.Process(pid).children(recursive=True)]
    except psutil.Error:
        return []


def kill_tree(proc: subprocess.Popen[str]) -> None:
    """SIGKILL the child's process group and every process below the child, then reap it."""
    below = _descendants(proc.pid)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    for pid in below:  # one that left the group (setsid) is still below the child
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError):
        proc.kill()


def probe_torch_npu(environ: Mapping[str, str], timeout: float = PROBE_TIMEOUT_S,
                    python: str = sys.executable) -> ProbeResult:
    """Run the imports in a child with ``environ``; a crash or timeout is a failed result."""
    with tempfile.TemporaryDirectory(prefix="vllm-ascend-probe-") as cwd:
        proc = subprocess.Popen(probe_command(python), env=dict(environ), cwd=cwd,
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, errors="replace",
                                start_new_session=True)
        timed_out = False
        try:
            stdout, stderr = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            # An exited child whose output pipe a process it started still holds is not late.
            timed_out = proc.poll() is None
            kill_tree(proc)
            try:
                stdout, stderr = proc.communicate(timeout=_DRAIN_S)
            except subprocess.TimeoutExpired:  # a pipe held by a process that escaped
                stdout, stderr = "", ""
        finally:
            kill_tree(proc)  # what the imports started must not outlive the probe
            proc.wait()
    if timed_out:
        return ProbeResult(False, "torch_npu", f"the import did not finish in {timeout:.0f} s")
    lines = stdout.strip().splitlines()
    try:
        data = json.loads(lines[-1]) if lines else None
    except json.JSONDecodeError:
        data = None
    if not isinstance(data, dict):
        tail = (stderr.strip().splitlines() or ["no output"])[-1]
        return ProbeResult(False, "torch_npu", f"the child exited with {proc.returncode}: {tail}")
    return ProbeResult(bool(data.get("ok")), data.get("stage"), data.get("error"),
                       data.get("cann"), data.get("devices"))
