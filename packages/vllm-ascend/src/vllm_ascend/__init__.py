"""vllm-ascend: the vLLM platform plugin for Ascend NPUs and the Ascend host-CPU platform.

Importing this package is cheap and has no side effects; vLLM calls :func:`register`
(entry point ``vllm.platform_plugins: ascend``) to learn which platform class to load.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

__version__ = "0.1.0"
__all__ = ["__version__", "register"]

logger = logging.getLogger(__name__)


def register(environ: Mapping[str, str] | None = None) -> str | None:
    """Platform-plugin hook: the class path of the platform to activate, or None.

    Decides from ``VLLM_ASCEND_DEVICE`` (auto|npu|cpu; any other value ends the process with
    one line naming it and the allowed values) and a cheap NPU probe; imports
    neither torch, torch_npu nor vLLM. When activating, checks the installed vLLM version
    and logs one clear error if it is missing or outside the tested range; activating the
    host-CPU platform also turns on huge pages for large host tensors
    (:mod:`vllm_ascend.platform.host_huge_pages`). Activating either checks vLLM's cache root
    once (``base.trusted_paths``): here, because vLLM reads ``VLLM_CACHE_ROOT`` only later.
    """
    # Local: register()'s start-up budget: nothing is imported before it is needed.
    from vllm_ascend.platform import device_probe

    try:
        mode = device_probe.read_device_mode(environ)
    except ValueError as exc:
        # vLLM turns an exception of a platform hook into a debug log and goes on as stock
        # vLLM, on the wrong platform: a mistyped device is refused by ending the process.
        raise SystemExit(f"vllm-ascend: error: {exc}") from None
    probe = device_probe.probe_npu() if mode == "auto" else device_probe.NpuProbe()
    platform = device_probe.choose_platform(mode, probe)
    if platform is not None:
        # Local: register()'s start-up budget (only an activated platform checks).
        from vllm_ascend.platform.version import check_vllm_version

        check_vllm_version()
        if environ is None:
            # Local: register()'s start-up budget (ascend-config, logging).
            from vllm_ascend.process.process_setup import current_process_setup

            try:
                current_process_setup().roots.secure_vllm_cache_root()
            except OSError as exc:  # no private directory at all: vLLM's own errors follow
                logger.warning("vllm-ascend: cannot check VLLM_CACHE_ROOT (%s)", exc)
    if platform == device_probe.CPU_PLATFORM and environ is None:
        # Local: register()'s start-up budget (host-CPU platform only).
        from vllm_ascend.platform.host_huge_pages import apply_host_huge_pages

        # Here, not in check_and_update_config: torch has allocated by then (it reads the
        # variable once, at its first CPU allocation).
        apply_host_huge_pages()
    return platform
