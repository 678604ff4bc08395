"""The NPU worker's KV-cache checks, reported as ``worker_duties.kv_cache_advice``'s message."""

from __future__ import annotations

from dataclasses import dataclass

from vllm_ascend.worker_duties.kv_cache_advice import (
    KvCacheMemoryError,
    KvCacheNeed,
    format_size,
    kv_cache_memory_error,
)

#: How to give the KV cache more memory on an NPU when vLLM sizes it.
MORE_MEMORY = ("--gpu-memory-utilization (or spread the model over more NPUs with "
               "--tensor-parallel-size)")
#: ... and when captured graphs took part of its share.
MORE_MEMORY_WITH_GRAPHS = ("--gpu-memory-utilization (or spread the model over more NPUs with "
                           "--tensor-parallel-size, or capture fewer graphs: fewer "
                           "compilation_config cudagraph_capture_sizes, or --enforce-eager)")


@dataclass(frozen=True)
class MemoryBudget:
    """What the worker measured on its device (bytes)."""

    device: str
    total: int
    free_at_start: int
    utilization: float
    requested: int  # total * utilization
    non_kv: int  # weights, non-torch memory and peak activations of the profile run
    available_for_kv: int
    graphs: int = 0  # the captured graphs' estimate, taken from the KV cache's share

    def measured(self) -> str:
        """Where ``available_for_kv`` came from, for the advice's message."""
        graphs = (f" and the graphs it captures {format_size(self.graphs)} (profiled before "
                  "the KV cache is sized)") if self.graphs else ""
        return (f"measured on {self.device}: device memory {format_size(self.total)}, "
                f"{format_size(self.free_at_start)} free at start; --gpu-memory-utilization "
                f"{self.utilization} allows {format_size(self.requested)}, of which the model's "
                f"weights and activations take {format_size(self.non_kv)}{graphs}")


def check_kv_cache_fits(budget: MemoryBudget, need: KvCacheNeed) -> None:
    """``KvCacheMemoryError`` unless ``available_for_kv`` holds one ``max_model_len`` sequence."""
    if budget.available_for_kv >= need.sequence_bytes:
        return
    raise kv_cache_memory_error(need, budget.available_for_kv, measured=budget.measured(),
                                more_memory=MORE_MEMORY_WITH_GRAPHS if budget.graphs
                                else MORE_MEMORY)


def check_explicit_kv_cache(device: str, kv_cache_bytes: int, free_now: int,
                            need: KvCacheNeed) -> None:
    """``--kv-cache-memory-bytes`` must fit free memory and hold one ``max_model_len`` sequence."""
    if kv_cache_bytes > free_now:
        raise KvCacheMemoryError(
            f"--kv-cache-memory-bytes {kv_cache_bytes} ({format_size(kv_cache_bytes)}) is more "
            f"than the {format_size(free_now)} free on {device} after loading the model; "
            "lower it")
    if kv_cache_bytes < need.sequence_bytes:
        raise kv_cache_memory_error(
            need, kv_cache_bytes, measured=f"--kv-cache-memory-bytes {kv_cache_bytes} on {device}",
            more_memory="--kv-cache-memory-bytes")
