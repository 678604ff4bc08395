"""Fixtures of the NPU-path tests: a recording fake of the torch_npu kernels (tests only).

``npu_kernels_on_cpu`` registers ascend-kernels' NPU adapters, bound to this fake, for the CPU
dispatch key: ``torch.ops.ascend.*`` on CPU tensors then goes exactly the way it goes on an
NPU, and every torch_npu kernel call is recorded. Kernels return marker-filled tensors of the
right shapes (their numerics are the NPU's business, not this repository's).
"""

from __future__ import annotations

import importlib.machinery
import types
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
import torch


class FakeNpuKernels(types.ModuleType):
    """Stands in for torch_npu's kernels; ``counts`` says how often each was called."""

    def __init__(self) -> None:
        super().__init__("torch_npu")
        self.__spec__ = importlib.machinery.ModuleSpec("torch_npu", None)
        self.counts: Counter[str] = Counter()

    def npu_rms_norm(self, x: torch.Tensor, gamma: torch.Tensor, epsilon: float = 1e-6) -> Any:
        self.counts["npu_rms_norm"] += 1
        return torch.full_like(x, 1.0), torch.ones(x.shape[:-1])

    def npu_add_rms_norm(self, x1: torch.Tensor, x2: torch.Tensor, gamma: torch.Tensor,
                         epsilon: float = 1e-6) -> Any:
        self.counts["npu_add_rms_norm"] += 1
        return torch.full_like(x1, 2.0), torch.ones(x1.shape[:-1]), x1 + x2

    def _npu_rotary_embedding(self, positions: Any, query: torch.Tensor, key: torch.Tensor,
                              *args: Any) -> None:
        self.counts["_npu_rotary_embedding"] += 1
        query.fill_(3.0)
        key.fill_(3.0)

    def npu_mrope(self, positions: Any, query: torch.Tensor, key: torch.Tensor, *args: Any,
                  **kwargs: Any) -> Any:
        self.counts["npu_mrope"] += 1
        return torch.full_like(query, 4.0), torch.full_like(key, 4.0)

    def npu_swiglu(self, x: torch.Tensor, dim: int = -1) -> torch.Tensor:
        self.counts["npu_swiglu"] += 1
        return torch.full((*x.shape[:-1], x.shape[-1] // 2), 5.0, dtype=x.dtype)


@pytest.fixture
def npu_kernels_on_cpu() -> Iterator[FakeNpuKernels]:
    """The fake's adapters registered for CPU (removed again at teardown)."""
    from ascend_kernels.npu_loader import NpuRegistration

    fake = FakeNpuKernels()
    registration = NpuRegistration()
    registration.load(fake, dispatch_key="CPU")
    try:
        yield fake
    finally:
        registration.reset()
