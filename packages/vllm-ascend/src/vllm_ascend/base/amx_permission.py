"""Ask Linux once per process for the AMX tile registers, before any vLLM CPU kernel runs.

Linux gives a process the AMX tile state only after it asks (``arch_prctl`` with
``ARCH_REQ_XCOMP_PERM``); an AMX instruction before that kills the process with SIGILL. vLLM's
CPU kernels pick their AMX path from the CPU's feature bits (``torch.cpu._is_amx_tile_supported``,
e.g. ``_get_attn_isa`` of its CPU attention backend), not from the permission, and stock vLLM
never asks in Python: a model gets the permission as a side effect of oneDNN's first AMX GEMM (or
of inductor's AMX check when compiling), which happens to run before its first attention. A
process that calls the attention kernels before any GEMM (the plugin's fused attention op on a
graph loaded from the cache, a test, a benchmark) must ask itself: torch's
``torch._C._cpu._init_amx`` asks (and returns False without asking on CPUs without AMX).

Asked from the host-CPU platform's process adjustments (every vLLM process: API server, engine
core, workers), from the fused attention op before its first kernel call, and from the testing
helpers that build attention layers. The answer is kept per process; :func:`reset_amx_permission`
forgets it (tests).
"""

from __future__ import annotations

import logging

logger = logging.getLogger(__name__)

_granted: bool | None = None


def ensure_amx_permission() -> bool:
    """Ask for the AMX tile state once in this process; True when the process may use AMX
    (False on CPUs without AMX, or when Linux refused)."""
    global _granted
    if _granted is None:
        import torch

        _granted = bool(torch._C._cpu._init_amx())
        if not _granted and torch.cpu._is_amx_tile_supported():
            # The kernels would still pick AMX from the CPU's feature bits: say why they die.
            logger.warning("this CPU has AMX but Linux refused the AMX tile state; vLLM's CPU "
                           "kernels that select AMX will fail (SIGILL)")
    return _granted


def reset_amx_permission() -> None:
    """Forget this process's answer (tests; the kernel's grant itself cannot be revoked)."""
    global _granted
    _granted = None
