"""The host-CPU worker's KV-cache memory checks, raised as one advising error."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from vllm_ascend.worker_duties.kv_cache_advice import (
    GiB,
    format_size,
    kv_cache_memory_error,
    need_of,
)

if TYPE_CHECKING:
    from vllm.v1.worker.gpu_worker import Worker


def node_memory() -> tuple[int, int, int]:
    """(NUMA node of the first allowed CPU, its available bytes, its total bytes), as vLLM
    measures."""
    from vllm.utils.cpu_resource_utils import get_allowed_cpu_list, get_memory_node_info

    node = get_allowed_cpu_list()[0].numa_node
    info = get_memory_node_info(node)
    return node, int(info.available_memory), int(info.total_memory)


def vllm_needed_bytes(worker: Worker) -> int:
    """vLLM's own need for one ``max_model_len`` sequence (the engine core's check)."""
    from vllm.v1.core.kv_cache_utils import max_memory_usage_bytes

    return int(max_memory_usage_bytes(worker.vllm_config, worker.get_kv_cache_spec().values()))


def checked_kv_cache_size(worker: Worker, determine: Callable[[], int],
                          memory: Callable[[], tuple[int, int, int]] = node_memory) -> int:
    """``determine()`` after vLLM's KV-cache checks, each failing with ``KvCacheMemoryError``."""
    config = worker.vllm_config
    node, available, total = memory()
    explicit = config.cache_config.kv_cache_memory_bytes
    where = f"{format_size(available)} free of {format_size(total)} on NUMA node {node}"
    if explicit is not None and explicit > available:
        raise kv_cache_memory_error(
            need_of(config), available,
            measured=f"{where}; the KV cache was asked for {format_size(explicit)}",
            more_memory="less memory used by other processes (or a smaller "
                        "--kv-cache-memory-bytes / VLLM_CPU_KVCACHE_SPACE)")
    try:
        size = int(determine())
    except ValueError as exc:
        if explicit is not None or "Available memory on node" not in str(exc):
            raise
        # vLLM's --gpu-memory-utilization share minus what this process holds went <= 0
        # or beyond the free memory.
        raise kv_cache_memory_error(
            need_of(config), 0,
            measured=f"{where}; --gpu-memory-utilization "
                     f"{config.cache_config.gpu_memory_utilization} of "
                     f"{total / GiB:.2f} GiB minus what the worker holds leaves none",
            more_memory="--kv-cache-memory-bytes") from None
    needed = vllm_needed_bytes(worker)
    if size < needed:
        raise kv_cache_memory_error(
            need_of(config), size,
            measured=f"the KV cache was given {format_size(size)}; {where}",
            more_memory="--kv-cache-memory-bytes")
    return size
