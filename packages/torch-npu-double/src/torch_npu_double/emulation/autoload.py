"""The ``torch.backends`` entry point: torch calls ``autoload()`` during ``import torch``.

With ``VLLM_ASCEND_EMULATED_NPUS`` unset the call is one environment lookup and imports
nothing, so processes that do not ask for the emulation are unchanged.
"""

from __future__ import annotations

import os


def autoload() -> None:
    """Install the emulated NPUs when ``VLLM_ASCEND_EMULATED_NPUS`` asks for them."""
    if not os.environ.get("VLLM_ASCEND_EMULATED_NPUS", "").strip():
        return
    from torch_npu_double.emulation.device import install
    from torch_npu_double.emulation.settings import from_environ

    install(from_environ())
