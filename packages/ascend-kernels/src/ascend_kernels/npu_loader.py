"""Registers the NPU adapters (``registration.register_npu``) when torch_npu imports cleanly."""

from __future__ import annotations

import importlib
import importlib.util
from types import ModuleType

import torch


class NpuRegistration:
    """Owns the library holding the NPU kernels; ``reset()`` removes them again."""

    def __init__(self) -> None:
        self.library: torch.library.Library | None = None
        #: The torch_npu module the kernels are bound to (for callers that issue a kernel
        #: outside an op, e.g. a graph task: ``ascend_kernels.fia_graph``).
        self.module: ModuleType | None = None
        self.error: str | None = None
        self.skipped: frozenset[str] = frozenset()

    @property
    def loaded(self) -> bool:
        """True when the torch_npu kernels are registered."""
        return self.library is not None

    def load(self, torch_npu: ModuleType, dispatch_key: str = "PrivateUse1",
             skip: frozenset[str] = frozenset()) -> None:
        """Register the NPU kernels of ``torch_npu`` under ``dispatch_key`` (idempotent); the
        ops in ``skip`` keep their reference implementations."""
        if self.library is not None:
            return
        from ascend_kernels.registration import register_npu

        self.library = register_npu(torch_npu, dispatch_key, skip)
        self.module = torch_npu
        self.skipped = skip

    def load_if_available(self, dispatch_key: str = "PrivateUse1") -> bool:
        """Import torch_npu if it is installed and usable, then register; never raises."""
        if self.library is not None:
            return True
        if importlib.util.find_spec("torch_npu") is None:
            return False
        try:
            module = importlib.import_module("torch_npu")
        except Exception as exc:  # a broken CANN install must not break the CPU path
            self.error = f"torch_npu is installed but does not import: {exc}"
            return False
        self.load(module, dispatch_key)
        return True

    def reset(self) -> None:
        """Remove the NPU registrations (tests; the reference kernels take over again)."""
        if self.library is not None:
            self.library._destroy()  # type: ignore[no-untyped-call]
        self.library = None
        self.module = None
        self.error = None
        self.skipped = frozenset()


npu_registration = NpuRegistration()
