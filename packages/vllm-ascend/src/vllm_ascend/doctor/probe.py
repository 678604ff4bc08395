"""``import torch`` then ``import torch_npu`` in a child interpreter with a time limit: torch
loads torch-npu by itself when it is installed, and a broken CANN environment can make either
import fail or crash. The doctor's own process never imports them."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass

PROBE_TIMEOUT_S = 120.0
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


def probe_torch_npu(environ: Mapping[str, str], timeout: float = PROBE_TIMEOUT_S,
                    python: str = sys.executable) -> ProbeResult:
    """Run the imports in a child with ``environ``; a crash or timeout is a failed result."""
    try:
        proc = subprocess.run([python, "-c", _CODE], env=dict(environ), capture_output=True,
                              text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return ProbeResult(False, "torch_npu", f"the import did not finish in {timeout:.0f} s")
    lines = proc.stdout.strip().splitlines()
    try:
        data = json.loads(lines[-1]) if lines else None
    except json.JSONDecodeError:
        data = None
    if not isinstance(data, dict):
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return ProbeResult(False, "torch_npu", f"the child exited with {proc.returncode}: {tail}")
    return ProbeResult(bool(data.get("ok")), data.get("stage"), data.get("error"),
                       data.get("cann"), data.get("devices"))
