"""The NPU graphs' memory: estimated before the KV cache is sized, measured after capture."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from vllm_ascend.worker_duties.kv_cache_advice import format_size

#: Added to the further graphs' per-token sum: a graph also holds a part that does not grow
#: with its tokens, which the second capture's bytes per token spread over its many tokens.
FURTHER_HEADROOM = 0.1


@dataclass(frozen=True)
class CaptureSample:
    """One profile capture: graph mode, batch tokens and the device memory it took, in bytes."""

    mode: str
    num_tokens: int
    taken: int


def scaled_estimate(samples: Iterable[CaptureSample],
                    sizes_by_mode: Mapping[str, Sequence[int]]) -> int:
    """Bytes the graphs of ``sizes_by_mode`` (mode -> sizes, largest first) will hold, from the
    ``samples`` of each mode's first two captures; never above vLLM's own estimate."""
    # Each further graph counts at the second capture's bytes per token plus FURTHER_HEADROOM; modes
    # share one pool and never replay at once, so their first captures overlay.
    by_mode: dict[str, list[CaptureSample]] = {}
    for sample in samples:
        by_mode.setdefault(sample.mode, []).append(sample)
    shared: list[int] = []
    further = 0.0
    for mode, sizes in sizes_by_mode.items():
        taken = by_mode.get(mode, [])
        if not sizes or not taken:
            continue
        shared.append(max(taken[0].taken, 0))
        if len(sizes) < 2 or len(taken) < 2:
            continue
        second = taken[1]
        per_token = max(second.taken, 0) / max(second.num_tokens, 1)
        further += per_token * sum(sizes[1:])
    return int(max(shared, default=0) + further * (1 + FURTHER_HEADROOM))


@dataclass(frozen=True)
class GraphMemoryReport:
    """The graphs' memory after capture (bytes) and what the KV cache got from it."""

    estimate: int  # taken from the KV cache's share before it was sized
    vllm_estimate: int  # vLLM's own extrapolation (the upper bound)
    measured: int  # what the captures took (free memory before capture less after)
    kv_blocks: int
    block_bytes: int  # one KV block of every layer

    @property
    def blocks_gained(self) -> int:
        """KV blocks the cache has beyond what vLLM's extrapolation would have left it."""
        return max(self.vllm_estimate - self.estimate, 0) // max(self.block_bytes, 1)

    def message(self) -> str:
        return (f"NPU graphs: the captures hold {format_size(self.measured)} "
                f"({self.measured} bytes); estimated before the KV cache was sized: "
                f"{format_size(self.estimate)} ({self.estimate} bytes; vLLM's extrapolation "
                f"{format_size(self.vllm_estimate)}, {self.vllm_estimate} bytes); the KV cache "
                f"has {self.kv_blocks} blocks of {self.block_bytes} bytes, "
                f"{self.blocks_gained} more than with vLLM's extrapolation")

    def shortfall(self) -> str | None:
        """A warning when the captures took more than the estimate left free, else None."""
        if self.measured <= self.estimate:
            return None
        return (f"NPU graphs: the captures took {format_size(self.measured)}, "
                f"{format_size(self.measured - self.estimate)} more than estimated before the "
                "KV cache was sized; the device may run short of memory under load (lower "
                "--gpu-memory-utilization or capture fewer graphs)")
