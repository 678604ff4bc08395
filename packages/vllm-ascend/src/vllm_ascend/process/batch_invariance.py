"""Batch invariance in a process: ascend-config's env changes plus ascend-kernels' mode."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, MutableMapping
from dataclasses import dataclass, field
from typing import Any

from vllm_ascend.ops.custom_kernels import custom_kernels_allowed

logger = logging.getLogger(__name__)

_TRUE = ("1", "true", "yes", "on")


@dataclass
class BatchInvarianceReport:
    """What init_batch_invariance did (and whether custom NPU kernels may run here)."""

    env_set: dict[str, str] = field(default_factory=dict)
    env_unset: list[str] = field(default_factory=list)
    mode_enabled: bool = False
    custom_kernels: bool = True
    custom_kernels_reason: str = ""


def enable_ascend_batch_invariance() -> None:
    """Enable ascend-kernels' batch-invariant mode (aten overrides, ``ascend`` op variants)."""
    from ascend_kernels import batch_invariant

    batch_invariant.enable_batch_invariant_mode()


def disable_ascend_batch_invariance() -> None:
    """Undo :func:`enable_ascend_batch_invariance` (tests)."""
    from ascend_kernels import batch_invariant

    batch_invariant.disable_batch_invariant_mode()


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
    report.custom_kernels, report.custom_kernels_reason = custom_kernels_allowed(ascend_config)
    if not report.custom_kernels:
        logger.info("vllm-ascend custom NPU kernels off: %s", report.custom_kernels_reason)
    if vllm_wants_batch_invariance(environ):
        enable_ascend_batch_invariance()
        report.mode_enabled = True
        logger.info("batch-invariant kernels enabled (env changes: %s)",
                    report.env_set)
    return report


def _install_wrapper(
    module: Any, name: str, marker: str, make: Callable[[Any], Callable[..., Any]]
) -> bool:
    """Replace ``module.name`` by ``make(current)``, tagged; False when already installed."""
    current = getattr(module, name)
    if getattr(current, marker, False):
        return False
    wrapper = make(current)
    setattr(wrapper, marker, True)
    wrapper._original = current  # type: ignore[attr-defined]
    setattr(module, name, wrapper)
    return True


def _remove_wrapper(module: Any, name: str, marker: str) -> None:
    """Put back the original of a wrapper installed by :func:`_install_wrapper`."""
    current = getattr(module, name)
    if getattr(current, marker, False):
        setattr(module, name, current._original)


def install_cpu_linear_route() -> bool:
    """Route vLLM's CPU GEMM to ascend-kernels' linear in batch-invariant mode (False: done)."""
    # Called as the op vllm_ascend::batch_invariant_linear so a compiled graph keeps calling it
    # instead of tracing it (ops/invariant_linear.py).
    from vllm.model_executor.layers import utils

    def make(current: Callable[[Any, bool], None]) -> Callable[[Any, bool], None]:
        def routed(layer: Any, remove_weight: bool) -> None:
            import torch
            from ascend_kernels import batch_invariant

            # Local: torch (this module loads with register()'s adjustments).
            from vllm_ascend.ops.invariant_linear import register_invariant_linear_op

            weight = layer.weight
            if batch_invariant.is_batch_invariant_mode_enabled() and not weight.is_meta and (
                weight.ndim == 2
            ):
                register_invariant_linear_op()
                layer.cpu_linear = torch.ops.vllm_ascend.batch_invariant_linear.default
                return
            current(layer, remove_weight)

        return routed

    return _install_wrapper(utils, "dispatch_cpu_unquantized_gemm", "_ascend_route", make)


def remove_cpu_linear_route() -> None:
    """Restore vLLM's own CPU GEMM choice."""
    from vllm.model_executor.layers import utils

    _remove_wrapper(utils, "dispatch_cpu_unquantized_gemm", "_ascend_route")


def install_vllm_init_handover(config: Callable[[], Any]) -> bool:
    """Make vLLM's worker ``init_batch_invariance`` enable ascend-kernels' mode (False: done)."""
    # vLLM's own mode registers Triton kernels, which run neither on the host CPU nor on an NPU.
    from vllm.model_executor.determinism import batch_invariant as vllm_bi

    def make(current: Callable[[], None]) -> Callable[[], None]:
        def init_batch_invariance() -> None:
            if vllm_wants_batch_invariance():
                vllm_bi.override_envs_for_invariance()
                apply_worker_overrides(config())
                enable_ascend_batch_invariance()

        return init_batch_invariance

    return _install_wrapper(vllm_bi, "init_batch_invariance", "_ascend_handover", make)


def apply_worker_overrides(ascend_config: Any,
                           environ: MutableMapping[str, str] | None = None) -> list[str]:
    """Apply ``ascend_config``'s env changes (none when None) and torch's deterministic algorithms
    (warn only); returns the variables set."""
    import torch

    report = BatchInvarianceReport()
    if ascend_config is not None:
        report = apply_env_changes(ascend_config.env_changes, environ)
    torch.use_deterministic_algorithms(True, warn_only=True)
    return sorted(report.env_set)


def remove_vllm_init_handover() -> None:
    """Restore vLLM's own ``init_batch_invariance``."""
    from vllm.model_executor.determinism import batch_invariant as vllm_bi

    _remove_wrapper(vllm_bi, "init_batch_invariance", "_ascend_handover")
