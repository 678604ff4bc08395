"""Installing the emulated ``npu`` device into this process's torch."""

from __future__ import annotations

import importlib.machinery
import sys
from dataclasses import dataclass
from types import ModuleType

import torch
from torch.utils.backend_registration import (
    generate_methods_for_privateuse1_backend,
    rename_privateuse1_backend,
)

from torch_npu_double.emulation import build, graphs, hccl, kernels, kernels_rope, npu_api
from torch_npu_double.emulation.graph_ex import GraphExTally, extension_modules
from torch_npu_double.emulation.settings import EmulationSettings
from torch_npu_double.record import load_record

#: Dtypes torch_npu leaves out of the generated ``npu`` methods (its backend registration).
UNSUPPORTED_DTYPES = [torch.quint8, torch.quint4x2, torch.quint2x4, torch.qint32, torch.qint8]


@dataclass(frozen=True)
class EmulatedDevice:
    """An installed emulation: its settings, ``torch.npu``, ``torch_npu``, the tally of its
    graph extensions (``graph_ex``: what npugraph_ex/torchair compiled and ran) and the ATB
    rope's process-wide static caches (``atb_rope``)."""

    settings: EmulationSettings
    api: npu_api.NpuApi
    library: torch.library.Library
    npu: ModuleType
    torch_npu: ModuleType
    graph_ex: GraphExTally
    atb_rope: kernels_rope.AtbRopeStatics


def installed() -> EmulatedDevice | None:
    """The emulation installed in this process, if any."""
    module = sys.modules.get("torch_npu")
    device = getattr(module, "_emulated_device", None)
    return device if isinstance(device, EmulatedDevice) else None


def install(settings: EmulationSettings) -> EmulatedDevice:
    """Register ``npu`` as torch's PrivateUse1 device with ``settings``' NPUs and HBM, and
    put ``torch_npu`` (with ``torch_npu.npu`` = ``torch.npu``) into ``sys.modules``, with its
    bundled graph extensions (``torch_npu.dynamo.npugraph_ex``, ``torch_npu.dynamo.torchair``,
    their submodules and the ``npugraph_ex``/``torchair`` aliases; ``graph_ex.py``)."""
    existing = installed()
    if existing is not None:
        if existing.settings != settings:
            raise RuntimeError(f"the NPU emulation is installed with {existing.settings}; "
                               f"cannot install {settings} in the same process")
        return existing
    extension = build.load_extension()
    extension.setup(settings.visible_count, settings.hbm_bytes)
    api = npu_api.NpuApi(settings, extension)
    npu = _npu_module(api)
    tnpu = _torch_npu_module(npu)
    rename_privateuse1_backend("npu")
    torch._register_device_module("npu", npu)
    generate_methods_for_privateuse1_backend(
        for_tensor=True, for_module=True, for_storage=True,
        unsupported_dtype=UNSUPPORTED_DTYPES)
    library = torch.library.Library(kernels.NAMESPACE, "DEF")
    atb_rope = kernels_rope.AtbRopeStatics()
    kernels.add_to(tnpu, library, atb_rope, graphs.is_current_stream_capturing)
    hccl.register()
    tally = GraphExTally()
    extensions = extension_modules(load_record(), tally)
    tnpu.dynamo = extensions["torch_npu.dynamo"]  # type: ignore[attr-defined]
    device = EmulatedDevice(settings, api, library, npu, tnpu, tally, atb_rope)
    tnpu._emulated_device = device  # type: ignore[attr-defined]
    sys.modules["torch_npu"] = tnpu
    sys.modules["torch_npu.npu"] = npu
    sys.modules["torch_npu._C"] = tnpu._C
    sys.modules.update(extensions)
    return device


def _npu_module(api: npu_api.NpuApi) -> ModuleType:
    npu = ModuleType("torch_npu.npu", "The emulated torch.npu (vllm_ascend_testing).")
    npu.__spec__ = importlib.machinery.ModuleSpec("torch_npu.npu", None)
    # importlib.util.find_spec (accelerate, transformers) needs a spec on imported modules.
    npu.__spec__ = importlib.machinery.ModuleSpec("torch_npu.npu", None, is_package=True)
    for name in npu_api.API_FUNCTIONS:
        setattr(npu, name, getattr(api, name))
    for name, value in npu_api.API_OBJECTS.items():
        setattr(npu, name, value)
    npu.config = npu_api.NpuConfig()  # type: ignore[attr-defined]
    npu.OutOfMemoryError = torch.OutOfMemoryError  # type: ignore[attr-defined]
    # torch.nn.Module.npu()/Tensor.npu() and AMP look these up on the device module.
    npu._is_in_bad_fork = lambda: False  # type: ignore[attr-defined]
    npu.is_initialized = lambda: True  # type: ignore[attr-defined]
    npu._lazy_init = lambda: None  # type: ignore[attr-defined]
    npu.get_amp_supported_dtype = (  # type: ignore[attr-defined]
        lambda: [torch.float16, torch.bfloat16, torch.float32])
    npu.is_bf16_supported = lambda including_emulation=False: True  # type: ignore[attr-defined]
    # The device draws from torch's CPU default generator, which torch.manual_seed (the
    # caller of these) has already seeded.
    npu.manual_seed = _seeded_by_cpu  # type: ignore[attr-defined]
    npu.manual_seed_all = _seeded_by_cpu  # type: ignore[attr-defined]
    return npu


def _seeded_by_cpu(seed: int) -> None:
    """``torch.npu.manual_seed``: nothing of its own to seed."""


def _torch_npu_module(npu: ModuleType) -> ModuleType:
    tnpu = ModuleType("torch_npu", "The emulated torch_npu (torch_npu_double.emulation).")
    tnpu.__spec__ = importlib.machinery.ModuleSpec("torch_npu", None, is_package=True)
    # find_spec("torch_npu") (accelerate, transformers) raises on a module without a spec.
    tnpu.__spec__ = importlib.machinery.ModuleSpec("torch_npu", None)
    tnpu.__version__ = "2.13.0"  # type: ignore[attr-defined]
    tnpu.npu = npu  # type: ignore[attr-defined]
    c_module = ModuleType("torch_npu._C")
    c_module.__spec__ = importlib.machinery.ModuleSpec("torch_npu._C", None)
    c_module._weak_ref_tensor = _weak_ref_tensor  # type: ignore[attr-defined]
    tnpu._C = c_module  # type: ignore[attr-defined]
    return tnpu


def _weak_ref_tensor(tensor: torch.Tensor) -> torch.Tensor:
    """``torch_npu._C._weak_ref_tensor``: a tensor on the same memory that does not own it
    (here: a view, which keeps the storage alive; nothing in the emulation frees early)."""
    return tensor.view(tensor.shape)
