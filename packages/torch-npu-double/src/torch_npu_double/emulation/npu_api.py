"""The functions of ``torch.npu`` / ``torch_npu.npu`` on the emulated device.

Each is bound to the signature recorded from the real wheel (``signatures.bound``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import torch

from torch_npu_double.emulation import graphs, streams, task_updates
from torch_npu_double.emulation.memory import EmulatedHbm, device_index
from torch_npu_double.emulation.settings import EmulationSettings
from torch_npu_double.emulation.signatures import bound


@dataclass(frozen=True)
class NPUDeviceProperties:
    """What ``torch.npu.get_device_properties`` reports (torch_npu's field names)."""

    name: str
    total_memory: int
    cube_core_num: int = 24
    vector_core_num: int = 48
    L2_cache_size: int = 192 * 2**20


class NpuConfig:
    """``torch.npu.config``: ``allow_internal_format`` is accepted and remembered (the
    emulation has no internal formats)."""

    allow_internal_format: bool = False

    @bound("config.__setattr__")
    def __setattr__(self, name: str, value: Any) -> None:
        object.__setattr__(self, name, value)


class NpuApi:
    """``torch.npu``'s device, stream and memory functions over one emulated host."""

    def __init__(self, settings: EmulationSettings, extension: ModuleType) -> None:
        self.settings = settings
        self.hbm = EmulatedHbm(extension)
        self._ext = extension

    def _index(self, device: Any) -> int:
        index = device_index(device)
        if not 0 <= index < self.settings.visible_count:
            raise RuntimeError(
                f"Invalid device id {index}: the emulation has {self.settings.visible_count} "
                "visible NPU(s)")
        return index

    # ------------------------------------------------------------ devices
    @bound("is_available")
    def is_available(self) -> bool:
        return self.settings.visible_count > 0

    @bound("device_count")
    def device_count(self) -> int:
        return self.settings.visible_count

    @bound("current_device")
    def current_device(self) -> int:
        return int(self._ext.current_device())

    @bound("set_device")
    def set_device(self, device: Any) -> None:
        self._ext.set_device(self._index(device))

    @bound("synchronize")
    def synchronize(self, device: Any = None) -> None:
        self._index(device)
        graphs.host_waits("torch.npu.synchronize()")

    @bound("get_device_name")
    def get_device_name(self, device_name: Any = None) -> str:
        self._index(device_name)
        return self.settings.soc_name

    @bound("get_device_properties")
    def get_device_properties(self, device_name: Any = None) -> NPUDeviceProperties:
        self._index(device_name)
        return NPUDeviceProperties(self.settings.soc_name, self.settings.hbm_bytes)

    @bound("get_soc_version")
    def get_soc_version(self) -> int:
        return self.settings.soc_id

    # ------------------------------------------------------------ streams
    @bound("current_stream")
    def current_stream(self, device: Any = None) -> streams.Stream:
        index = self._index(device)
        current = torch.accelerator.current_stream(index)
        return self._as_npu_stream(current)

    @bound("default_stream")
    def default_stream(self, device: Any = None) -> streams.Stream:
        index = self._index(device)
        current = torch.accelerator.current_stream(index)
        return streams.Stream(stream_id=0, device_index=index, device_type=current.device_type)

    @staticmethod
    def _as_npu_stream(stream: torch.Stream) -> streams.Stream:
        return streams.Stream(stream_id=stream.stream_id, device_index=stream.device_index,
                              device_type=stream.device_type)

    @bound("set_stream")
    def set_stream(self, stream: Any) -> None:
        if stream is not None:
            torch.accelerator.set_stream(stream)

    @bound("stream")
    @contextlib.contextmanager
    def stream(self, stream: Any) -> Iterator[None]:
        if stream is None:
            yield
            return
        previous = torch.accelerator.current_stream(stream.device_index)
        torch.accelerator.set_stream(stream)
        try:
            yield
        finally:
            torch.accelerator.set_stream(previous)

    # ------------------------------------------------------------ memory
    @bound("mem_get_info")
    def mem_get_info(self, device: Any = None) -> tuple[int, int]:
        state = self.hbm.state(self._index(device))
        return state.capacity - state.allocated, state.capacity

    @bound("memory_stats")
    def memory_stats(self, device: Any = None) -> dict[str, Any]:
        return self.hbm.stats(self._index(device))

    @bound("memory_allocated")
    def memory_allocated(self, device: Any = None) -> int:
        return self.hbm.state(self._index(device)).allocated

    @bound("max_memory_allocated")
    def max_memory_allocated(self, device: Any = None) -> int:
        return self.hbm.state(self._index(device)).peak

    @bound("memory_reserved")
    def memory_reserved(self, device: Any = None) -> int:
        return self.hbm.state(self._index(device)).allocated

    @bound("max_memory_reserved")
    def max_memory_reserved(self, device: Any = None) -> int:
        return self.hbm.state(self._index(device)).peak

    @bound("reset_peak_memory_stats")
    def reset_peak_memory_stats(self, device: Any = None) -> None:
        self.hbm.reset_peak(self._index(device))

    @bound("reset_max_memory_allocated")
    def reset_max_memory_allocated(self, device: Any = None) -> None:
        self.hbm.reset_peak(self._index(device))

    @bound("reset_accumulated_memory_stats")
    def reset_accumulated_memory_stats(self, device: Any = None) -> None:
        self._index(device)

    @bound("empty_cache")
    def empty_cache(self) -> None:
        """Nothing is cached: freed tensors return to the emulated HBM at once."""

    @bound("host_empty_cache")
    def host_empty_cache(self) -> None:
        """Pinned host memory is not cached either."""


#: Names of ``torch.npu`` taken from ``NpuApi`` instances.
API_FUNCTIONS = (
    "is_available", "device_count", "current_device", "set_device", "synchronize",
    "get_device_name", "get_device_properties", "get_soc_version", "current_stream",
    "default_stream", "set_stream", "stream", "mem_get_info", "memory_stats",
    "memory_allocated", "max_memory_allocated", "memory_reserved", "max_memory_reserved",
    "reset_peak_memory_stats", "reset_max_memory_allocated", "reset_accumulated_memory_stats",
    "empty_cache", "host_empty_cache",
)

#: Classes and functions that need no per-host state.
API_OBJECTS: dict[str, Any] = {
    "Stream": streams.Stream,
    "Event": streams.Event,
    "ExternalEvent": streams.ExternalEvent,
    "NPUGraph": graphs.NPUGraph,
    "graph": graphs.graph,
    "graph_pool_handle": graphs.graph_pool_handle,
    "is_current_stream_capturing": graphs.is_current_stream_capturing,
    "graph_task_group_begin": graphs.graph_task_group_begin,
    "graph_task_group_end": graphs.graph_task_group_end,
    "graph_task_update_begin": task_updates.graph_task_update_begin,
    "graph_task_update_end": task_updates.graph_task_update_end,
}
