"""Batch-invariance orchestration: env changes from ascend-config plus ascend-kernels' mode.

:func:`init_batch_invariance` runs in every worker process. It applies the environment
changes the resolved config lists (``VLLM_BATCH_INVARIANT``, HCCL/LCCL determinism, ...) and,
when vLLM asks for batch invariance, enables ascend-kernels' batch-invariant mode.
"""

from __future__ import annotations

import logging
import os
from collections.abc import MutableMapping
from dataclasses import dataclass, field
from typing import Any

logger = logging.getLogger("vllm_ascend.batch_invariance")

_TRUE = ("1", "true", "yes", "on")


@dataclass
class BatchInvarianceReport:
    """What init_batch_invariance did."""

    env_set: dict[str, str] = field(default_factory=dict)
    env_unset: list[str] = field(default_factory=list)
    mode_enabled: bool = False


def apply_env_changes(
    env_changes: Any, environ: MutableMapping[str, str] | None = None
) -> BatchInvarianceReport:
    """Apply ``EnvChange(name, value)`` items (value None = unset)."""
    env = os.environ if environ is None else environ
    report = BatchInvarianceReport()
    for change in env_changes:
        if change.value is None:
            if change.name in env:
                del env[change.name]
                report.env_unset.append(change.name)
        else:
            env[change.name] = change.value
            report.env_set[change.name] = change.value
    return report


def vllm_wants_batch_invariance(environ: MutableMapping[str, str] | None = None) -> bool:
    """vLLM's switch: ``VLLM_BATCH_INVARIANT`` true."""
    env = os.environ if environ is None else environ
    return env.get("VLLM_BATCH_INVARIANT", "0").strip().lower() in _TRUE


def init_batch_invariance(
    ascend_config: Any, environ: MutableMapping[str, str] | None = None
) -> BatchInvarianceReport:
    """Apply the config's env changes, then enable ascend-kernels' mode if vLLM asks for it."""
    report = apply_env_changes(ascend_config.env_changes, environ)
    if vllm_wants_batch_invariance(environ):
        from ascend_kernels import batch_invariant

        batch_invariant.enable_batch_invariant_mode()
        report.mode_enabled = True
        logger.info("batch-invariant kernels enabled (env changes: %s)",
                    report.env_set)
    return report


def install_cpu_linear_route() -> bool:
    """Wrap vLLM's CPU GEMM choice so batch-invariant mode uses ascend-kernels' linear.

    Decided per layer when weights are processed; outside the mode vLLM's choice is kept.
    Returns False when already installed.
    """
    from vllm.model_executor.layers import utils

    current = utils.dispatch_cpu_unquantized_gemm
    if getattr(current, "_ascend_route", False):
        return False

    def routed(layer: Any, remove_weight: bool) -> None:
        from ascend_kernels import batch_invariant

        weight = layer.weight
        if batch_invariant.is_batch_invariant_mode_enabled() and not weight.is_meta and (
            weight.ndim == 2
        ):
            layer.cpu_linear = lambda x, w, b: batch_invariant.linear(x, w, b)
            return
        current(layer, remove_weight)

    routed._ascend_route = True  # type: ignore[attr-defined]
    routed._original = current  # type: ignore[attr-defined]
    utils.dispatch_cpu_unquantized_gemm = routed
    return True


def remove_cpu_linear_route() -> None:
    """Restore vLLM's own CPU GEMM choice."""
    from vllm.model_executor.layers import utils

    current = utils.dispatch_cpu_unquantized_gemm
    if getattr(current, "_ascend_route", False):
        utils.dispatch_cpu_unquantized_gemm = current._original  # type: ignore[attr-defined]


def install_vllm_init_handover() -> bool:
    """Make vLLM's worker-side ``init_batch_invariance`` enable ascend-kernels' mode.

    vLLM's own mode registers Triton kernels for the platform's dispatch key, which cannot
    run on the host CPU (no Triton CPU backend) nor on an NPU. vLLM's env overrides are kept.
    Returns False when already installed.
    """
    from vllm.model_executor.determinism import batch_invariant as vllm_bi

    current = vllm_bi.init_batch_invariance
    if getattr(current, "_ascend_handover", False):
        return False

    def init_batch_invariance() -> None:
        if vllm_wants_batch_invariance():
            from ascend_kernels import batch_invariant

            vllm_bi.override_envs_for_invariance()  # type: ignore[no-untyped-call]
            batch_invariant.enable_batch_invariant_mode()

    init_batch_invariance._ascend_handover = True  # type: ignore[attr-defined]
    init_batch_invariance._original = current  # type: ignore[attr-defined]
    vllm_bi.init_batch_invariance = init_batch_invariance
    return True


def remove_vllm_init_handover() -> None:
    """Restore vLLM's own ``init_batch_invariance``."""
    from vllm.model_executor.determinism import batch_invariant as vllm_bi

    current = vllm_bi.init_batch_invariance
    if getattr(current, "_ascend_handover", False):
        vllm_bi.init_batch_invariance = current._original  # type: ignore[attr-defined]
