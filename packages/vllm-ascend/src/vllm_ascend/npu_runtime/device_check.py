"""One clear error when a worker cannot reach its NPU (torch_npu unusable, too few NPUs visible)."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from types import ModuleType

SET_ENV_HINT = (
    "install the CANN toolkit and driver, then `source /usr/local/Ascend/ascend-toolkit/"
    "set_env.sh` (CANN's set_env.sh; or the one under your CANN install) in the shell that "
    "starts vLLM, and install the torch-npu release for this torch "
    "(pip install 'vllm-ascend[npu]')"
)


class NpuUnavailableError(RuntimeError):
    """The NPU runtime cannot use the device this worker was given."""


def import_torch_npu(
        import_module: Callable[[str], ModuleType] = importlib.import_module) -> ModuleType:
    """``torch_npu``, or :class:`NpuUnavailableError` saying why it cannot be used."""
    try:
        module: ModuleType = import_module("torch_npu")
    except ModuleNotFoundError as exc:
        raise NpuUnavailableError(
            f"the NPU worker needs torch_npu, which is not installed ({exc}); {SET_ENV_HINT}"
        ) from None
    except (ImportError, OSError) as exc:  # CANN libraries missing: libhccl.so, libascendcl.so
        raise NpuUnavailableError(
            f"torch_npu is installed but cannot be imported ({exc}); usually CANN's environment "
            f"is not set: {SET_ENV_HINT}"
        ) from None
    return module


def check_device_index(local_rank: int, device_count: int, visible: str | None) -> None:
    """NpuUnavailableError unless NPU ``local_rank`` exists among ``device_count`` visible."""
    where = (f"ASCEND_RT_VISIBLE_DEVICES={visible!r}" if visible
             else "ASCEND_RT_VISIBLE_DEVICES is not set")
    if device_count <= 0:
        raise NpuUnavailableError(
            f"no NPU is visible to this process ({where}); check `npu-smi info`, that the "
            f"devices are mounted into the container, and {SET_ENV_HINT}"
        )
    if local_rank >= device_count:
        raise NpuUnavailableError(
            f"this worker needs NPU {local_rank} (local rank {local_rank}) but only "
            f"{device_count} NPU(s) are visible ({where}); lower the tensor/pipeline/data "
            "parallel sizes or make more NPUs visible"
        )
