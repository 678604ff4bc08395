"""vLLM general-plugin hooks, run once per process; a failure is one warning, never a raise."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable

from vllm_ascend.base.config_channel import published_soc
from vllm_ascend.base.extension_points import (
    register_connectors,
    register_model_loaders,
    register_models,
    runtime_class_paths,
    scheduler_class_paths,
)
from vllm_ascend.engine.registry import published_ascend_config, published_engine_inputs
from vllm_ascend.observability.service_profiling import generate_service_profiling_config
from vllm_ascend.platform.version import installed_vllm_version
from vllm_ascend.process.process_setup import current_process_setup

logger = logging.getLogger(__name__)


def _once_and_safe(fn: Callable[[], object]) -> Callable[[], None]:
    @functools.wraps(fn)
    def hook() -> None:
        done = current_process_setup().hooks_run
        if fn.__name__ in done:
            return
        done.add(fn.__name__)
        try:
            fn()
        except Exception as exc:  # a plugin hook must never fail the vLLM process
            # Hooks fail for one cause (e.g. no NPU runtime): say it once, not once per hook.
            logger.debug("plugin hook %s failed", fn.__name__, exc_info=True)
            current_process_setup().warn_once(
                f"a plugin hook failed: {type(exc).__name__}: {exc}", logger)

    return hook


def active_ascend_soc() -> str | None:
    """The SoC of the active Ascend platform, or None when vLLM runs another platform."""
    # A child takes the SoC its parent published, so a hook never initialises the NPU runtime
    # itself.
    from vllm import platforms

    platform = platforms.current_platform
    if not type(platform).__module__.startswith("vllm_ascend."):
        return None
    published = published_soc()
    if published is not None and platform.device_type == "npu" and published != "cpu":
        return published
    return str(platform.soc)


def platforms_device_type() -> str:
    """The active platform's device type."""
    from vllm import platforms

    return str(platforms.current_platform.device_type)


def _setup_this_process(soc: str) -> None:
    # No rank is known here (API server, engine core and workers all run it), so nothing is
    # bound to CPUs: workers bind themselves (worker_duties).
    # Local: torch and vLLM's attention (only when an Ascend platform is active).
    from vllm_ascend.ops.attention_kv import register_attention_op

    process = current_process_setup()
    process.adjust(soc, published_ascend_config)
    if platforms_device_type() == "npu":
        # Local: torch (the NPU runtime's bindings import it; only an NPU process needs them).
        from vllm_ascend.npu_runtime.bindings import bind_accelerator_memory

        bind_accelerator_memory()  # vLLM empties the cache outside the worker (shutdown)
    # A compiled graph loaded from the compile cache calls the fused attention op without
    # the pass manager (which also registers it) ever running in this process.
    register_attention_op()
    published = published_engine_inputs()  # resolved once per process, by the engine side
    if published is not None:
        process.setup(published.config, published.soc, published_ascend_config)


@_once_and_safe
def register_connector() -> None:
    """KV connectors from ``vllm_ascend.connectors`` entry points, plus process setup."""
    soc = active_ascend_soc()
    if soc is None:
        return

    _setup_this_process(soc)
    register_connectors()


@_once_and_safe
def register_model_loader() -> None:
    """Model loaders from ``vllm_ascend.model_loaders`` entry points."""
    soc = active_ascend_soc()
    if soc is None:
        return

    _setup_this_process(soc)

    register_model_loaders()


@_once_and_safe
def register_service_profiling() -> None:
    """Write the service-profiling symbol file once per vLLM version."""
    soc = active_ascend_soc()
    if soc is None:
        return
    _setup_this_process(soc)
    found = installed_vllm_version()
    if found is not None:
        generate_service_profiling_config(
            found[1], runtime_classes=runtime_class_paths(),
            scheduler_classes=scheduler_class_paths(),
        )


@_once_and_safe
def register_model() -> None:
    """Model architectures from ``vllm_ascend.models`` entry points."""
    soc = active_ascend_soc()
    if soc is None:
        return

    _setup_this_process(soc)
    register_models()
