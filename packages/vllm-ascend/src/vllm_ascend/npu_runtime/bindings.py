"""Scoped rebinding of vLLM's ``torch.cuda`` and ``torch.accelerator`` calls to ``torch.npu``."""
# torch.accelerator's memory functions assert for torch_npu's allocator (not a c10 DeviceAllocator).
# Each callable is its own functools.partial: Dynamo refuses a handler registered twice.

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Iterator
from types import ModuleType

import torch

# torch.cuda name -> torch.npu name (callables wrapped in partial, classes bound as they are).
CUDA_TO_NPU: dict[str, str] = {
    "Stream": "Stream",
    "Event": "Event",
    "current_stream": "current_stream",
    "default_stream": "default_stream",
    "stream": "stream",
    "set_stream": "set_stream",
    "synchronize": "synchronize",
    "mem_get_info": "mem_get_info",
    "is_current_stream_capturing": "is_current_stream_capturing",
    "graph_pool_handle": "graph_pool_handle",
    "graph": "graph",
    "CUDAGraph": "NPUGraph",
}
# torch.accelerator name -> torch.npu name.
ACCELERATOR_TO_NPU: dict[str, str] = {
    "empty_cache": "empty_cache",
    "memory_stats": "memory_stats",
    "memory_reserved": "memory_reserved",
    "memory_allocated": "memory_allocated",
    "max_memory_allocated": "max_memory_allocated",
    "reset_peak_memory_stats": "reset_peak_memory_stats",
    "get_memory_info": "mem_get_info",
    "synchronize": "synchronize",
}
_CLASSES = frozenset({"Stream", "Event", "CUDAGraph"})
# The accelerator memory functions that assert for a PrivateUse1 allocator that is not a c10
# DeviceAllocator (torch_npu's): rebound for the whole process.
ACCELERATOR_MEMORY = ("empty_cache", "memory_stats", "memory_reserved", "memory_allocated",
                      "max_memory_allocated", "reset_peak_memory_stats", "get_memory_info")


def bind_accelerator_memory() -> bool:
    """Point ``torch.accelerator``'s memory functions at ``torch.npu`` for the whole process when
    its accelerator is ``npu`` (idempotent); True when bound."""
    accelerator = torch.accelerator.current_accelerator()
    npu = getattr(torch, "npu", None)
    if accelerator is None or accelerator.type != "npu" or npu is None:
        return False
    for name in ACCELERATOR_MEMORY:
        target = getattr(npu, ACCELERATOR_TO_NPU[name], None)
        current = getattr(torch.accelerator, name, None)
        if target is not None and getattr(current, "func", None) is not target:
            setattr(torch.accelerator, name, functools.partial(target))
    return True


class _Rebinding:
    """Reference-counted swap of module attributes; the last exit restores the originals."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._depth = 0
        self._saved: list[tuple[ModuleType, str, object]] = []

    def _targets(self, npu: ModuleType) -> list[tuple[ModuleType, str, object]]:
        targets: list[tuple[ModuleType, str, object]] = []
        for module, table in ((torch.cuda, CUDA_TO_NPU), (torch.accelerator, ACCELERATOR_TO_NPU)):
            for name, npu_name in table.items():
                target = getattr(npu, npu_name, None)
                if target is None:
                    continue  # an API this torch_npu lacks keeps vLLM's own call
                if name not in _CLASSES or module is not torch.cuda:
                    target = functools.partial(target)
                targets.append((module, name, target))
        return targets

    def enter(self, npu: ModuleType) -> None:
        with self._lock:
            if self._depth == 0:
                targets = self._targets(npu)
                self._saved = [(m, n, m.__dict__.get(n, _MISSING)) for m, n, _ in targets]
                for module, name, target in targets:
                    setattr(module, name, target)
            self._depth += 1

    def exit(self) -> None:
        with self._lock:
            self._depth -= 1
            if self._depth:
                return
            for module, name, original in self._saved:
                if original is _MISSING:
                    delattr(module, name)
                else:
                    setattr(module, name, original)
            self._saved = []


_MISSING = object()


class NpuBindings:
    """The rebinding of one process: :meth:`scope` is the ``with`` block."""

    def __init__(self) -> None:
        self._rebinding = _Rebinding()

    @contextlib.contextmanager
    def scope(self) -> Iterator[None]:
        npu: ModuleType = torch.npu  # type: ignore[attr-defined]  # registered by torch_npu
        self._rebinding.enter(npu)
        try:
            yield
        finally:
            self._rebinding.exit()

    @property
    def active(self) -> bool:
        return self._rebinding._depth > 0
