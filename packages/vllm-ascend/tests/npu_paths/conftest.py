"""Fixtures of the NPU-path tests: the schema-bound fake torch_npu kernels
(``torch_npu_double.seam``).

``npu_kernels_on_cpu`` registers ascend-kernels' NPU adapters, bound to the seam, for the CPU
dispatch key: ``torch.ops.ascend.*`` on CPU tensors then goes exactly the way it goes on an
NPU, and every torch_npu kernel call goes through the real schema (arity, keyword-only
arguments, names, types) and the documented input constraints, and is recorded. Kernels return
marker-filled tensors of the recorded output dtypes and shapes (their numerics are the NPU's
business, not this repository's).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

import pytest
from torch_npu_double.seam import FakeTorchNpu, install


class NpuKernelCalls:
    """The seam's torch_npu; ``counts`` says how often each kernel was called."""

    def __init__(self, fake: FakeTorchNpu) -> None:
        self.fake = fake

    @property
    def counts(self) -> Counter[str]:
        return Counter(call.op for call in self.fake.calls)


@pytest.fixture
def npu_kernels_on_cpu(monkeypatch: pytest.MonkeyPatch) -> Iterator[NpuKernelCalls]:
    """The seam's adapters registered for CPU (removed again at teardown)."""
    from ascend_kernels.npu_loader import NpuRegistration

    fake = install(monkeypatch)
    registration = NpuRegistration()
    registration.load(fake, dispatch_key="CPU")
    try:
        yield NpuKernelCalls(fake)
    finally:
        registration.reset()
        fake.close()
