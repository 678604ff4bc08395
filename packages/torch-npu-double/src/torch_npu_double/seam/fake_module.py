"""The fake ``torch_npu`` module and :func:`install`, the one way tests put it in place."""

from __future__ import annotations

import importlib.machinery
import sys
import types
from typing import Any

import pytest
import torch

from torch_npu_double.emulation.graph_ex import GraphExTally, extension_modules
from torch_npu_double.record import load_record
from torch_npu_double.seam.device import FakeNpuApi
from torch_npu_double.seam.kernels import FakeKernels, KernelCall

#: What torch_npu's lazy ATB wrapper raises when NNAL's libatb.so cannot be loaded.
ATB_MISSING = "libatb.so: cannot open shared object file: No such file or directory"


def _module(name: str) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__spec__ = importlib.machinery.ModuleSpec(name, None, is_package=True)
    return module


class FakeTorchNpu(types.ModuleType):
    """Stands in for ``torch_npu``: its ops, ``npu``, ``_C``, ``op_plugin.atb`` and ``dynamo``.

    ``kernels`` holds the recorded kernel calls (``calls``, ``last(op)``, ``marker(op, i)``);
    ``npu`` the device/stream/graph/memory fakes (``npu.calls``, ``npu.called(name)``);
    ``graph_ex`` what the bundled npugraph_ex/torchair compiled and ran (the emulated device's
    extensions, ``torch_npu_double.emulation.graph_ex``).
    """

    def __init__(
        self,
        *,
        version: str | None = None,
        soc_id: int = 223,
        atb: bool = True,
        graph_extensions: bool = True,
        **device: Any,
    ) -> None:
        super().__init__("torch_npu")
        self.__spec__ = importlib.machinery.ModuleSpec("torch_npu", None, is_package=True)
        self.record = load_record(version)
        atb_error = None if atb else OSError(2, ATB_MISSING)
        self.kernels = FakeKernels(self.record, atb_error=atb_error)
        for op in self.record["ops"]:
            setattr(self, op, self.kernels.function(op))
        self.npu = FakeNpuApi(self.record, soc_id=soc_id, **device)
        self._C = _module("torch_npu._C")
        self._C._weak_ref_tensor = self._weak_ref_tensor  # type: ignore[attr-defined]
        self._modules: dict[str, types.ModuleType] = {"torch_npu": self,
                                                      "torch_npu.npu": self.npu,
                                                      "torch_npu._C": self._C}
        self._add_atb(atb_error)
        self.graph_ex = GraphExTally()
        if graph_extensions:
            modules = extension_modules(self.record, self.graph_ex)
            self.dynamo = modules["torch_npu.dynamo"]
            self._modules.update(modules)

    @property
    def calls(self) -> list[KernelCall]:
        """Every kernel call so far (``KernelCall(op, args, kwargs, outputs, before)``)."""
        return self.kernels.calls

    def _weak_ref_tensor(self, tensor: torch.Tensor) -> torch.Tensor:
        # The real one aliases the storage without owning it; an alias view is the nearest.
        return tensor.view_as(tensor)

    def _add_atb(self, error: BaseException | None) -> None:
        spec = self.record["atb"]
        parts = spec["module"].split(".")  # torch_npu.op_plugin.atb._atb_ops
        parent: types.ModuleType = self
        for depth in range(1, len(parts)):
            name = ".".join(parts[: depth + 1])
            module = _module(name)
            setattr(parent, parts[depth], module)
            self._modules[name] = module
            parent = module
        setattr(parent, spec["load_error"], error)
        parent.API_LIST = list(spec["api_list"])  # type: ignore[attr-defined]

    def modules(self) -> dict[str, types.ModuleType]:
        """Every ``sys.modules`` entry the real torch_npu import provides that the fake has."""
        return dict(self._modules)

    def close(self) -> None:
        """Remove the scratch op namespace."""
        self.kernels.close()


def install(monkeypatch: pytest.MonkeyPatch, **options: Any) -> FakeTorchNpu:
    """Put a :class:`FakeTorchNpu` in ``sys.modules`` (with ``torch_npu.npu``, the bundled
    npugraph_ex/torchair and their aliases) and at ``torch.npu``; ``monkeypatch`` undoes it.

    ``options``: ``soc_id`` (``get_soc_version()``), ``atb`` (False: the ATB ops raise the
    NNAL load error), ``graph_extensions``, ``version`` (record to load), ``device_count``,
    ``device_name``, ``device_properties``, ``max_memory_allocated``. Call ``close()`` when
    done (the ``fake_torch_npu`` fixture does).
    """
    fake = FakeTorchNpu(**options)
    for name, module in fake.modules().items():
        monkeypatch.setitem(sys.modules, name, module)
    monkeypatch.setattr(torch, "npu", fake.npu, raising=False)
    return fake
