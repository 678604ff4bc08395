"""vllm-ascend: the vLLM platform plugin for Ascend NPUs and the Ascend host-CPU platform."""

from __future__ import annotations

import logging
from collections.abc import Mapping

__version__ = "0.1.0"
__all__ = ["__version__", "register"]

logger = logging.getLogger(__name__)


def register(environ: Mapping[str, str] | None = None) -> str | None:
    """Platform-plugin hook: the class path of the platform to activate, or None.

    Decides from ``VLLM_ASCEND_DEVICE`` (auto|npu|cpu; anything else exits with one line) and a
    cheap NPU probe, importing neither torch nor vLLM. Activating checks the vLLM version (and on
    the host CPU turns on huge pages for large tensors).
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

            # Here, because vLLM reads VLLM_CACHE_ROOT only later.
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
