"""Ask Linux once per process for the AMX tile registers, before any vLLM CPU kernel runs."""

from __future__ import annotations

import logging

logger = logging.getLogger(__name__)

_granted: bool | None = None


def ensure_amx_permission() -> bool:
    """True when this process may use AMX (asked once; False without AMX or when Linux refused)."""
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
