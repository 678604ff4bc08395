"""One clear error when the KV cache does not fit: memory measured, needed and free, and the
flags that change it."""

from __future__ import annotations

from dataclasses import dataclass

GIB = 1 << 30


class KVCacheDoesNotFitError(ValueError):
    """The memory left for the KV cache cannot hold one request of ``--max-model-len``."""


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


def _gib(n: int) -> str:
    return f"{n / GIB:.2f} GiB"


def check_kv_cache_fits(budget: MemoryBudget, needed_per_request: int,
                        max_model_len: int) -> None:
    """KVCacheDoesNotFitError unless ``available_for_kv`` holds ``needed_per_request`` (the KV
    cache of one ``max_model_len`` request on this rank)."""
    if budget.available_for_kv >= needed_per_request > 0:
        return
    left = max(budget.available_for_kv, 0)
    raise KVCacheDoesNotFitError(
        f"the KV cache does not fit on {budget.device}: one request of --max-model-len "
        f"{max_model_len} needs {_gib(needed_per_request)} of KV cache, and "
        f"{_gib(left)} is left for it (device memory {_gib(budget.total)}, "
        f"{_gib(budget.free_at_start)} free at start; --gpu-memory-utilization "
        f"{budget.utilization} allows {_gib(budget.requested)}, of which the model's weights and "
        f"activations take {_gib(budget.non_kv)}). Raise --gpu-memory-utilization, lower "
        "--max-model-len, or spread the model over more NPUs (--tensor-parallel-size)"
    )


def check_explicit_kv_cache(device: str, kv_cache_bytes: int, free_now: int,
                            needed_per_request: int, max_model_len: int) -> None:
    """The user's ``--kv-cache-memory-bytes``: it must fit in the free memory and hold one
    request of ``max_model_len``."""
    if kv_cache_bytes > free_now:
        raise KVCacheDoesNotFitError(
            f"--kv-cache-memory-bytes {kv_cache_bytes} ({_gib(kv_cache_bytes)}) is more than "
            f"the {_gib(free_now)} free on {device} after loading the model; lower it"
        )
    if kv_cache_bytes < needed_per_request:
        raise KVCacheDoesNotFitError(
            f"--kv-cache-memory-bytes {kv_cache_bytes} ({_gib(kv_cache_bytes)}) cannot hold one "
            f"request of --max-model-len {max_model_len}, which needs "
            f"{_gib(needed_per_request)} on {device}; raise it or lower --max-model-len"
        )
