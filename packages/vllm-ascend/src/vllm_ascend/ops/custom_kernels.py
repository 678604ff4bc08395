"""Whether vllm-ascend's compiled custom NPU kernels (``vllm_ascend_C``) may be used."""
# Never batch-invariant (tiles depend on batch size), on A5 (the existing plugin disables them) or
# on the host CPU; loaded lazily because loading initialises CANN, and ASCEND_RT_VISIBLE_DEVICES may
# change late (RL workers).

from __future__ import annotations

from typing import Any

from vllm_ascend.base.npu_device import CompiledExtension

DISABLED_SOCS = ("A5", "cpu")


def custom_kernels_allowed(ascend_config: Any) -> tuple[bool, str]:
    """(allowed, reason) for the resolved config; never imports anything."""
    if bool(getattr(ascend_config, "batch_invariant", False)):
        return False, "batch-invariant mode (the custom kernels are not batch invariant)"
    soc = str(getattr(ascend_config, "soc", "A2"))
    if soc in DISABLED_SOCS:
        return False, f"SoC {soc} (the compiled extension is not used there)"
    return True, f"SoC {soc}"


def enable_custom_op(ascend_config: Any, extension: Any = None) -> bool:
    """True when the custom kernels may be used here and the extension loads (loaded now)."""
    allowed, _ = custom_kernels_allowed(ascend_config)
    if not allowed:
        return False
    if extension is None:
        extension = CompiledExtension()
    return bool(extension.load())
