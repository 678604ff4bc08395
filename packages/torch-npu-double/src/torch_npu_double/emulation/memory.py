"""The emulated HBM's accounting, read the way ``torch.npu``'s memory functions report it."""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType
from typing import Any

import torch


@dataclass(frozen=True)
class MemoryState:
    """One device's accounting, from the C++ allocator."""

    capacity: int
    allocated: int
    peak: int
    num_allocs: int
    num_frees: int
    num_ooms: int
    blocks: int


class EmulatedHbm:
    """The per-device HBM counters of the emulated allocator (no cache: reserved ==
    allocated, and ``empty_cache`` has nothing to release)."""

    def __init__(self, extension: ModuleType) -> None:
        self._ext = extension

    def state(self, index: int) -> MemoryState:
        return MemoryState(**self._ext.memory_stats(index))

    def reset_peak(self, index: int) -> None:
        self._ext.reset_peak(index)

    def stats(self, index: int) -> dict[str, Any]:
        """``memory_stats`` keys as torch_npu's caching allocator names them (the subset an
        allocator without a cache can fill)."""
        s = self.state(index)
        stats: dict[str, Any] = {}
        for kind in ("allocated_bytes", "reserved_bytes", "active_bytes", "requested_bytes"):
            for pool in ("all", "large_pool", "small_pool"):
                current = s.allocated if pool != "small_pool" else 0
                peak = s.peak if pool != "small_pool" else 0
                stats[f"{kind}.{pool}.current"] = current
                stats[f"{kind}.{pool}.peak"] = peak
                stats[f"{kind}.{pool}.allocated"] = current
                stats[f"{kind}.{pool}.freed"] = 0
        for kind in ("allocation", "segment", "active"):
            stats[f"{kind}.all.current"] = s.blocks
            stats[f"{kind}.all.allocated"] = s.num_allocs
            stats[f"{kind}.all.freed"] = s.num_frees
        stats["num_alloc_retries"] = 0
        stats["num_ooms"] = s.num_ooms
        stats["num_device_alloc"] = s.num_allocs
        stats["num_device_free"] = s.num_frees
        return dict(sorted(stats.items()))


def device_index(device: Any) -> int:
    """The index ``device`` names (``None``: the current device), as torch_npu reads it."""
    if device is None:
        return torch.accelerator.current_device_index()
    if isinstance(device, int):
        return device
    if isinstance(device, str):
        device = torch.device(device)
    if isinstance(device, torch.device):
        if device.type != "npu":
            raise ValueError(f"Expected a npu device, but got: {device}")
        return torch.accelerator.current_device_index() if device.index is None else device.index
    raise ValueError(f"Expected a npu device index, string or torch.device, got {device!r}")
