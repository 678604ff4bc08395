"""Behaviour shared by the NPU and host-CPU Ascend platforms (a mixin over vLLM's Platform)."""

from __future__ import annotations

import logging
import os
from typing import Any

from vllm_ascend.ops.ir_provider import ascend_ir_priority, register_ascend_ir_provider

logger = logging.getLogger(__name__)


class AscendPlatformMixin:
    """IR-provider priority, IR kernel import and environment validation for Ascend platforms."""

    @classmethod
    def platform_soc(cls) -> str:
        """The SoC this platform runs as."""
        raise NotImplementedError(f"{cls.__name__} does not say which SoC it runs as")

    @property
    def soc(self) -> str:
        return type(self).platform_soc()

    @classmethod
    def get_default_ir_op_priority(cls, vllm_config: Any) -> Any:
        return ascend_ir_priority(vllm_config)

    @classmethod
    def import_ir_kernels(cls) -> None:
        import vllm.kernels  # noqa: F401 - vLLM's own providers (native, ...)

        register_ascend_ir_provider()  # the same kernels for every SoC

    @classmethod
    def validate_environ(cls, hard_fail: bool) -> None:
        """vLLM's check of unknown ``VLLM_*`` variables, minus the ``VLLM_ASCEND_*`` ones."""
        from vllm import envs

        for name in os.environ:
            if name.startswith("VLLM_ASCEND_"):
                continue
            if name.startswith("VLLM_") and name not in envs.environment_variables:
                if hard_fail:
                    raise ValueError(f"Unknown vLLM environment variable detected: {name}")
                logger.warning("Unknown vLLM environment variable detected: %s", name)
