"""The Ascend host-CPU platform (``VLLM_ASCEND_DEVICE=cpu``, SoC ``"cpu"``): vLLM's CPU platform and
worker with the Ascend config pipeline, compile passes and ``torch.ops.ascend`` kernels.
"""
# Ray device key "NPU": each worker stands for one NPU rank (README "Many ranks" has the why).

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from vllm.platforms.cpu import CpuPlatform

from vllm_ascend.base.forward_context import host_cpu_additional_context
from vllm_ascend.platform.shared import AscendPlatformMixin

if TYPE_CHECKING:
    from vllm.config import VllmConfig

logger = logging.getLogger(__name__)

SOC = "cpu"


class AscendCpuPlatform(AscendPlatformMixin, CpuPlatform):
    """vLLM's CpuPlatform running the Ascend configuration, passes and kernels."""

    ray_device_key: str = "NPU"
    ray_noset_device_env_vars = ["RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES"]  # noqa: RUF012

    @classmethod
    def platform_soc(cls) -> str:
        return SOC

    @classmethod
    def get_pass_manager_cls(cls) -> str:
        return "vllm_ascend.compilation.pass_manager.AscendPassManager"

    @classmethod
    def check_and_update_config(cls, vllm_config: VllmConfig) -> None:
        # Local: vLLM: this class loads while vLLM resolves current_platform.
        from vllm_ascend.config_pipeline.steps import run_cpu_pipeline

        run_cpu_pipeline(vllm_config, super().check_and_update_config)

    @classmethod
    def set_additional_forward_context(cls, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """The Ascend forward fields (MoE communication method included) for every forward."""
        # Local: vLLM: this class loads while vLLM resolves current_platform.
        from vllm_ascend.engine import engine_of

        return host_cpu_additional_context(engine_of(kwargs["vllm_config"]).forward, **kwargs)

    @classmethod
    def describe(cls) -> dict[str, Any]:
        """Short summary of the platform (for the demo and logs)."""
        return {"platform": cls.__name__, "soc": SOC, "device_type": cls.device_type}
